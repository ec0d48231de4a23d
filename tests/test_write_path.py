"""The reference's write path: a reply its client does not read never blocks the serving thread (stop contract
lines 3 and 11), a reply is written as its client reads it, and a client gone mid-reply is closed; proven on the
reference and on the planted bugs of harness.reference.write_variants."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.faults.client import read_slowly
from harness.history import Recorder
from harness.reference import wire
from harness.reference.backend import NoopBackend
from harness.reference.listener import ListenerConfig, WorkerListener
from harness.reference.paths import socket_path
from harness.reference.variants import VARIANTS

BIG = 900_000  # bytes of request id its reply echoes: over four times the socket buffer (wmem_default 208 KiB)


def big(n: int = 0) -> wire.Request:
    return wire.Request(cmd="kv_tensors_created", id=f"{n:06d}" + "x" * BIG)


def connect(path: Path, timeout: float = 10.0) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(path))
    return s


def ask(path: Path, req: wire.Request, timeout: float = 10.0) -> wire.Reply:
    with connect(path, timeout) as s:
        s.sendall(wire.encode_request(req))
        return wire.decode_reply(wire.recv_frame(s))


def start(cls: type[WorkerListener], root: Path, rec: Recorder, drain: float = 5.0) -> WorkerListener:
    listener = cls(socket_path("w", 0, 0, root), NoopBackend(), ipc="w", recorder=rec,
                   config=ListenerConfig(drain_timeout=drain))
    listener.start()
    return listener


@pytest.fixture
def lst(lc_root: Path, lastcall_recorder: Recorder, no_thread_leak: None) -> Iterator[list[WorkerListener]]:
    made: list[WorkerListener] = []
    yield made
    for listener in made:
        assert listener.stop()
    assert not any(lc_root.iterdir())


def test_a_reply_larger_than_the_socket_buffer_arrives_whole(lc_root: Path, lastcall_recorder: Recorder,
                                                               lst: list[WorkerListener]) -> None:
    listener = start(WorkerListener, lc_root, lastcall_recorder)
    lst.append(listener)
    with connect(listener.path) as s:  # three pipelined while the replies are read: each whole, in order
        sender = threading.Thread(target=s.sendall, args=(b"".join(wire.encode_request(big(n)) for n in range(3)),))
        sender.start()  # (not read, the first reply would hold the rest back: the listener reads no more meanwhile)
        ids = [wire.decode_reply(wire.recv_frame(s)).id for _ in range(3)]
        sender.join(10)
    assert ids == [big(n).id for n in range(3)]


def test_short_write_lost_cuts_a_large_reply(lc_root: Path, lastcall_recorder: Recorder,
                                            lst: list[WorkerListener]) -> None:
    listener = start(VARIANTS["short_write_lost"].listener, lc_root, lastcall_recorder)
    lst.append(listener)
    with connect(listener.path, timeout=0.5) as s:
        s.sendall(wire.encode_request(big()))
        # Nothing reads this reply until its one send() is over: a reader draining the socket while the send
        # copies lets that one call write all of it (the test failed so once, on a clean clone).
        # The serving thread answers clients one after another, so once a second client has its reply, the
        # first's send has returned.
        assert lastcall_recorder.wait_for("dispatch_finished") is not None
        assert ask(listener.path, wire.Request(cmd="kv_tensors_created"), timeout=2.0).status == "success"
        with pytest.raises(TimeoutError):
            wire.recv_frame(s)  # what one send() wrote (at most the socket buffer), then nothing more


@pytest.mark.parametrize("variant", ["reference", "blocking_write"])
def test_an_unread_reply_does_not_block_other_clients(lc_root: Path, lastcall_recorder: Recorder,
                                                      lst: list[WorkerListener], variant: str) -> None:
    listener = start(VARIANTS[variant].listener, lc_root, lastcall_recorder)
    lst.append(listener)
    unread = connect(listener.path)
    try:
        unread.sendall(wire.encode_request(big()))
        assert lastcall_recorder.wait_for("dispatch_finished") is not None
        if variant == "reference":
            assert ask(listener.path, wire.Request(cmd="kv_tensors_created"), timeout=2.0).created is True
        else:  # the serving thread is held in its write: the next client is not served
            with pytest.raises(TimeoutError):
                ask(listener.path, wire.Request(cmd="kv_tensors_created"), timeout=0.5)
    finally:
        unread.close()  # the blocked write then fails at once (EPIPE): the variant serves again


def test_stop_gives_up_on_an_unread_reply_after_the_drain_timeout(lc_root: Path, lastcall_recorder: Recorder,
                                                                  lst: list[WorkerListener]) -> None:
    listener = start(WorkerListener, lc_root, lastcall_recorder, drain=0.3)
    with connect(listener.path) as unread:
        unread.sendall(wire.encode_request(big()))
        assert lastcall_recorder.wait_for("dispatch_finished") is not None
        t0 = time.monotonic()
        assert listener.stop() is True
        took = time.monotonic() - t0
        got = bytearray()
        while chunk := unread.recv(1 << 16):  # what the socket buffer held, then EOF: the rest was given up
            got += chunk
    assert 0.3 <= took < 0.3 + 1.0, took
    assert 0 < len(got) < len(wire.encode_reply(wire.Reply(status="success", id=big().id)))
    closes = [e.data["why"] for e in lastcall_recorder.events("connection_closed")]
    assert "reply not read before the drain timeout" in closes
    assert not any(lc_root.iterdir())


def test_a_slow_reader_gets_its_whole_reply_during_a_drain(lc_root: Path, lastcall_recorder: Recorder,
                                                           lst: list[WorkerListener]) -> None:
    listener = start(WorkerListener, lc_root, lastcall_recorder, drain=30.0)
    with connect(listener.path) as slow:
        slow.sendall(wire.encode_request(big()))
        assert lastcall_recorder.wait_for("dispatch_finished") is not None
        result: list[bool] = []
        stopper = threading.Thread(target=lambda: result.append(listener.stop()))
        stopper.start()
        assert lastcall_recorder.wait_for("drain_started") is not None
        data = bytearray()
        while len(data) < wire.HEADER.size or len(data) < wire.HEADER.size + wire.parse_length(
                bytes(data[:wire.HEADER.size])):
            data += slow.recv(4096)  # small reads: the listener writes as the client takes it
        stopper.join(10)
    assert result == [True]
    assert wire.decode_reply(bytes(data[wire.HEADER.size:])).id == big().id
    assert not lastcall_recorder.events("reply_failed")


@pytest.mark.parametrize("variant", ["reference", "partial_flush_abandoned"])
def test_a_reply_read_slowly_is_written_as_it_is_read(lc_root: Path, lastcall_recorder: Recorder,
                                                      lst: list[WorkerListener], variant: str) -> None:
    # 512 KiB read a byte at a time: the socket takes a buffer's worth, then a quarter of it frees at each
    # wake-up, so the rest needs several writes, each after the client read some (no stop delivers them)
    listener = start(VARIANTS[variant].listener, lc_root, lastcall_recorder)
    lst.append(listener)
    req = wire.Request(cmd="kv_tensors_created", id="x" * 512 * 1024)
    with connect(listener.path, timeout=5.0) as s:
        s.sendall(wire.encode_request(req))
        if variant == "reference":
            reply = read_slowly(s, 5.0, wire.decode_reply)  # a byte per recv()
            assert reply is not None and reply.id == req.id
        else:  # back to reading after its first partial write: the rest waits for a request that never comes
            with pytest.raises(TimeoutError):
                read_slowly(s, 5.0, wire.decode_reply)


@pytest.mark.parametrize("variant", ["reference", "dead_reader_spins"])
def test_a_client_gone_mid_reply_is_recorded_and_closed(lc_root: Path, lastcall_recorder: Recorder,
                                                        lst: list[WorkerListener], variant: str) -> None:
    listener = start(VARIANTS[variant].listener, lc_root, lastcall_recorder)
    lst.append(listener)
    s = connect(listener.path)
    s.sendall(wire.encode_request(big()))
    assert s.recv(1, socket.MSG_PEEK)  # the reply has begun: the rest is pending on the listener's side
    s.close()
    failed = lastcall_recorder.wait_for("reply_failed", 2.0 if variant == "reference" else 0.5)
    if variant == "reference":
        assert failed is not None
        closed = lastcall_recorder.wait_for(lambda e: e.kind == "connection_closed"
                                            and e.data.get("conn") == failed.data["conn"], 2.0)
        assert closed is not None and str(closed.data["why"]).startswith("reply failed")
    else:  # neither recorded nor closed: the connection stays in the epoll set until the stop
        assert failed is None


@pytest.mark.parametrize("variant", ["reference", "reply_leaves_writing"])
def test_a_connection_idle_after_a_reply_of_many_writes_is_cancelled_by_the_stop(
        lc_root: Path, lastcall_recorder: Recorder, no_thread_leak: None, variant: str) -> None:
    listener = start(VARIANTS[variant].listener, lc_root, lastcall_recorder)
    with connect(listener.path) as s:
        s.sendall(wire.encode_request(big()))
        assert wire.decode_reply(wire.recv_frame(s)).id == big().id  # kept open, idle
        # the last write of that reply is followed, on the one serving thread, by the connection's return to
        # idle: another client answered after it was read whole is answered after that return
        assert ask(listener.path, wire.Request(cmd="kv_tensors_created")).status == "success"
        assert listener.stop() is True
    first = lastcall_recorder.events("accepted")[0].data["conn"]
    cancelled = {c for e in lastcall_recorder.events("reads_cancelled") for c in e.data["conns"]}
    assert (first in cancelled) is (variant == "reference")
