"""The handshake listener: each contract line on the reference, and each planted bug caught by its line.

Real ZeroMQ over 127.0.0.1; no sleeps: waits are on events, recorders, failpoints
and sockets, with timeouts only as safety nets.  A check function runs on any
listener class; on ``reference`` it passes, on the variant that breaks its line it
raises AssertionError (test_variant_is_caught).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import pytest
import zmq

from harness import failpoints
from harness.errors import ConfigError, HandshakeError, InjectedFault, ListenerError, PortInUse
from harness.history import Recorder
from harness.reference.handshake import (
    AgentMetadata,
    HandshakeErrorReply,
    HandshakeListener,
    encode_request,
    fetch_metadata,
)
from harness.reference.handshake_variants import HANDSHAKE_VARIANTS, get_handshake_variant

pytestmark = pytest.mark.usefixtures("no_thread_leak", "lastcall_failpoints")

HOST = "127.0.0.1"
SAFETY = 5.0  # seconds: a safety net that only catches a hang
AT_ONCE = 0.5  # seconds: generous bound for "at once" (the bug is 1 s, or forever)
HANG = 1.0  # seconds: start() neither returned nor raised by then = a hang (the reference raises in milliseconds)
METADATA = {(pp, tp): AgentMetadata("engine-a", f"agent-{pp}-{tp}", pp, tp, bytes([pp, tp]))
            for pp in range(2) for tp in range(2)}
ListenerClass = type[HandshakeListener]


# -------------------------------------------------------------------- helpers
def reap(lst: HandshakeListener) -> None:
    """Test cleanup: end the thread with the reference's own seams, whatever a variant did."""
    failpoints.reset()
    if lst.thread is not None:
        HandshakeListener._stop_thread(lst, SAFETY)
        assert not lst.thread.is_alive(), f"could not reap the listener thread of {lst.where}"
    HandshakeListener._release(lst)


@contextmanager
def serving(cls: ListenerClass, *, recorder: Recorder | None = None, **kw: Any) -> Iterator[HandshakeListener]:
    kw.setdefault("join_timeout", 2.0)
    lst = cls(METADATA, recorder=recorder if recorder is not None else Recorder(), **kw)
    lst.start()
    try:
        yield lst
    finally:
        reap(lst)


@contextmanager
def peer(port: int, kind: int = zmq.REQ) -> Iterator[zmq.Socket[Any]]:
    """A raw REQ (or DEALER) socket connected to the listener; closed with linger 0."""
    ctx: zmq.Context[Any] = zmq.Context()
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://{HOST}:{port}")
    try:
        yield sock
    finally:
        sock.close(linger=0)
        ctx.term()


def recv(sock: zmq.Socket[Any]) -> list[bytes]:
    assert sock.poll(int(SAFETY * 1000)), f"no reply within {SAFETY} s"
    return sock.recv_multipart()


class Traffic:
    """A peer handshaking back to back on one REQ socket (at most LIMIT times) until told to stop."""

    LIMIT = 20_000
    BUSY_AFTER = 20  # handshakes served before the traffic counts as steady

    def __init__(self, port: int) -> None:
        self.port = port
        self.served = 0
        self.busy = threading.Event()
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="test-traffic", daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        assert self.busy.wait(SAFETY), f"traffic never got going ({self.served} served)"
        return self

    def __exit__(self, *exc: object) -> None:
        os.write(self._stop_w, b"x")
        self._thread.join(SAFETY)
        assert not self._thread.is_alive(), "the traffic thread did not stop"
        os.close(self._stop_r)
        os.close(self._stop_w)

    def _run(self) -> None:
        with peer(self.port) as sock:
            poller = zmq.Poller()
            poller.register(sock, zmq.POLLIN)
            poller.register(self._stop_r, zmq.POLLIN)
            for _ in range(self.LIMIT):
                sock.send(encode_request(0, 0))
                ready = dict(poller.poll(int(SAFETY * 1000)))
                if self._stop_r in ready or sock not in ready:
                    return
                sock.recv_multipart()
                self.served += 1
                if self.served == self.BUSY_AFTER:
                    self.busy.set()


# ------------------------------------------------- checks: one per contract line
def check_start_returns_serving(cls: ListenerClass) -> None:
    """Line 1: start() returns bound and serving."""
    rec = Recorder()
    with serving(cls, recorder=rec) as lst:
        assert lst.port != 0
        assert [e.data for e in rec.events("handshake_listener_started")] == [{"host": HOST, "port": lst.port}]
        socket.create_connection((HOST, lst.port), timeout=SAFETY).close()  # LISTENing already
        assert fetch_metadata(HOST, lst.port, 1, 0, timeout=SAFETY) == METADATA[(1, 0)]


def check_port_held_fails_fast(cls: ListenerClass) -> None:
    """Line 1: port held -> PortInUse naming host:port and the fix, within HANG; never a hang."""
    with socket.socket() as holder:  # something else LISTENs on the port
        holder.bind((HOST, 0))
        holder.listen()
        port = holder.getsockname()[1]
        lst = cls(METADATA, port=port, recorder=Recorder())
        outcome: list[object] = []

        def start() -> None:
            try:
                outcome.append(lst.start())
            except BaseException as exc:
                outcome.append(exc)

        starter = threading.Thread(target=start, name="test-starter", daemon=True)
        starter.start()
        starter.join(HANG)
        hung = starter.is_alive()
        try:
            assert not hung, f"start() neither returned nor raised within {HANG:g} s with the port held"
        finally:
            if hung:  # the variant waits on the ready event with no timeout: set it ourselves
                lst._ready.set()
                starter.join(SAFETY)
            reap(lst)
    [err] = outcome
    assert isinstance(err, PortInUse), err
    assert f"{HOST}:{port}" in str(err) and "port=0" in str(err)
    assert lst.thread is not None and not lst.thread.is_alive()


def check_idle_shutdown_at_once(cls: ListenerClass) -> None:
    """Line 2: an idle shutdown wakes the thread at once and returns True once it exited."""
    with serving(cls) as lst:
        assert fetch_metadata(HOST, lst.port, 0, 0, timeout=SAFETY) == METADATA[(0, 0)]
        t0 = time.perf_counter()
        ok = lst.shutdown()
        took = time.perf_counter() - t0
        assert lst.thread is not None
        assert not (ok and lst.thread.is_alive()), "shutdown() returned True while the thread is still running"
        assert ok is True
        assert took < AT_ONCE, f"idle shutdown took {took:.3f} s"


def check_shutdown_under_traffic(cls: ListenerClass) -> None:
    """Line 2: a peer sending continuously does not defer shutdown."""
    with serving(cls, join_timeout=1.0) as lst, Traffic(lst.port):
        t0 = time.perf_counter()
        ok = lst.shutdown()
        took = time.perf_counter() - t0
        assert ok is True and took < AT_ONCE, f"under steady traffic shutdown returned {ok} after {took:.3f} s"
        assert lst.thread is not None and not lst.thread.is_alive()


def check_true_only_once_exited(cls: ListenerClass) -> None:
    """Line 2: True only once the thread exited; False (the truth) while it cannot; a retry succeeds."""
    with serving(cls, join_timeout=0.3) as lst, peer(lst.port) as sock:
        fp = failpoints.arm("handshake.before_reply", "pause", count=1)
        sock.send(encode_request(0, 0))
        assert fp.wait_reached(timeout=SAFETY)
        ok = lst.shutdown()
        assert lst.thread is not None
        assert not (ok and lst.thread.is_alive()), "shutdown() returned True while the thread is still running"
        assert ok is False
        fp.release()
        assert lst.shutdown() is True
        assert not lst.thread.is_alive()


def check_bad_message_then_good(cls: ListenerClass) -> None:
    """Line 3: one bad message gets an error reply and is recorded; the listener keeps serving."""
    rec = Recorder()
    with serving(cls, recorder=rec) as lst, peer(lst.port) as sock:
        sock.send(b"\xc1")
        ev = rec.wait_for(lambda e: e.kind in ("bad_handshake", "thread_exited"), timeout=SAFETY)
        assert ev is not None
        assert ev.kind == "bad_handshake", f"the thread died on one bad message: {rec.events('thread_crashed')}"
        assert isinstance(msgspec.msgpack.decode(recv(sock)[-1], type=HandshakeErrorReply), HandshakeErrorReply)
        assert fetch_metadata(HOST, lst.port, 1, 1, timeout=SAFETY) == METADATA[(1, 1)]


def check_port_rebindable(cls: ListenerClass) -> None:
    """Line 4: after shutdown nothing LISTENs on the port; a plain bind and a new listener both succeed."""
    with serving(cls) as lst:
        port = lst.port
        assert fetch_metadata(HOST, port, 0, 1, timeout=SAFETY) == METADATA[(0, 1)]
        assert lst.shutdown() is True
        with socket.socket() as plain:  # no SO_REUSEADDR
            try:
                plain.bind((HOST, port))
            except OSError as exc:
                raise AssertionError(f"port {port} still held after shutdown: {exc}") from exc
    with serving(HandshakeListener, port=port) as again:
        assert again.port == port
        assert fetch_metadata(HOST, port, 0, 1, timeout=SAFETY) == METADATA[(0, 1)]


CHECKS: dict[str, Callable[[ListenerClass], None]] = {
    "1-start_returns_serving": check_start_returns_serving,
    "1-port_held_fails_fast": check_port_held_fails_fast,
    "2-idle_shutdown_at_once": check_idle_shutdown_at_once,
    "2-shutdown_under_traffic": check_shutdown_under_traffic,
    "2-true_only_once_exited": check_true_only_once_exited,
    "3-bad_message_then_good": check_bad_message_then_good,
    "4-port_rebindable": check_port_rebindable,
}

CAUGHT = [  # (variant, check that catches it, what the failure says)
    ("never_stopped", "2-idle_shutdown_at_once", "still running"),
    ("never_stopped", "2-true_only_once_exited", "still running"),
    ("never_stopped", "4-port_rebindable", "still held after shutdown"),
    ("join_timeout_zero", "2-true_only_once_exited", "still running"),
    ("poll_timeout_1s", "2-idle_shutdown_at_once", "idle shutdown took"),
    ("poll_timeout_1s", "2-shutdown_under_traffic", "under steady traffic"),
    ("ready_wait_no_timeout", "1-port_held_fails_fast", "neither returned nor raised"),
    ("dies_on_bad_message", "3-bad_message_then_good", "died on one bad message"),
]


@pytest.mark.parametrize("check", CHECKS)
def test_reference_keeps_the_line(check: str) -> None:
    CHECKS[check](HandshakeListener)


@pytest.mark.parametrize(("variant", "check", "says"), CAUGHT, ids=[f"{v}-{c}" for v, c, _ in CAUGHT])
def test_variant_is_caught(variant: str, check: str, says: str) -> None:
    with pytest.raises(AssertionError, match=says):
        CHECKS[check](HANDSHAKE_VARIANTS[variant])


def test_every_variant_is_registered_and_caught() -> None:
    """Each handshake variant is caught by a line check here, or by a scenario that names it (the variants of the
    mutation survivors' kills: a failed or timed-out start, a malformed request, judged on real processes)."""
    from harness.scenario import load_many

    scenarios, errors = load_many(["scenarios"])
    assert not errors
    by_scenario = {v for sc in scenarios for v in sc.catches} & set(HANDSHAKE_VARIANTS)
    assert HANDSHAKE_VARIANTS["reference"] is HandshakeListener
    assert {v for v, _, _ in CAUGHT} | by_scenario == set(HANDSHAKE_VARIANTS) - {"reference"}
    assert all(issubclass(cls, HandshakeListener) for cls in HANDSHAKE_VARIANTS.values())
    assert get_handshake_variant("poll_timeout_1s") is HANDSHAKE_VARIANTS["poll_timeout_1s"]
    with pytest.raises(ConfigError, match="unknown handshake variant 'nope'; known: reference, "):
        get_handshake_variant("nope")


# ---------------------------------------------------- the reference, line by line
BAD = {  # name: (socket kind, frames, what bad_handshake says)
    "undecodable": (zmq.REQ, [b"\xc1"], "undecodable request"),
    "wrong-shape": (zmq.REQ, [msgspec.msgpack.encode([1, 2])], "request is not ('get_meta_msg', pp_rank, tp_rank)"),
    "wrong-tag": (zmq.REQ, [encode_request(0, 0, tag="get_metadata")], "unknown message tag 'get_metadata'"),
    "unknown-rank": (zmq.REQ, [encode_request(7, 3)], "no metadata for pp_rank=7 tp_rank=3"),
    "two-frames": (zmq.REQ, [encode_request(0, 0), b"x"], "expected 1 request frame after the envelope, got 2"),
    "dealer-empty": (zmq.DEALER, [b""], "expected 1 request frame after the envelope, got 0"),
    "dealer-garbage": (zmq.DEALER, [b"\xc1"], "undecodable request"),
}


@pytest.mark.parametrize("bad", BAD)
def test_bad_message_gets_error_reply_and_is_recorded(bad: str) -> None:
    kind, frames, says = BAD[bad]
    rec = Recorder()
    with serving(HandshakeListener, recorder=rec) as lst, peer(lst.port, kind) as sock:
        sock.send_multipart(frames)
        reply = msgspec.msgpack.decode(recv(sock)[-1], type=HandshakeErrorReply)
        assert says in reply.error
        assert [e.data["why"] for e in rec.events("bad_handshake")] == [reply.error]
        assert fetch_metadata(HOST, lst.port, 0, 0, timeout=SAFETY) == METADATA[(0, 0)]
        assert lst.thread is not None and lst.thread.is_alive()


def test_injected_fault_while_serving_is_an_error_reply() -> None:
    rec = Recorder()
    with serving(HandshakeListener, recorder=rec) as lst:
        failpoints.arm("handshake.request", "raise", count=1, message="boom")
        with pytest.raises(HandshakeError, match=rf"{HOST}:{lst.port} .* refused: InjectedFault: .*boom"):
            fetch_metadata(HOST, lst.port, 0, 0, timeout=SAFETY)
        assert fetch_metadata(HOST, lst.port, 0, 0, timeout=SAFETY) == METADATA[(0, 0)]


def test_reply_carries_the_listeners_perf_counter() -> None:
    with serving(HandshakeListener) as lst, peer(lst.port) as sock:
        before = time.perf_counter()
        sock.send(encode_request(1, 1))
        meta, clock = recv(sock)
        after = time.perf_counter()
        assert msgspec.msgpack.decode(meta, type=AgentMetadata) == METADATA[(1, 1)]
        assert before <= msgspec.msgpack.decode(clock, type=float) <= after


def test_start_is_bounded_when_the_thread_stalls_before_bind() -> None:
    rec = Recorder()
    fp = failpoints.arm("handshake.before_bind", "pause")
    lst = HandshakeListener(METADATA, recorder=rec, start_timeout=0.2)
    try:
        with pytest.raises(ListenerError, match=r"was not ready within 0\.2 s"):
            lst.start()
        fp.release()
        assert rec.wait_for("thread_exited", timeout=SAFETY)
        assert not rec.events("handshake_listener_started")  # told to stop: it never served
        assert lst.shutdown() is True
    finally:
        reap(lst)


def test_other_bind_failure_is_a_listener_error() -> None:
    rec = Recorder()
    failpoints.arm("handshake.before_bind", "raise", message="no interface")
    lst = HandshakeListener(METADATA, recorder=rec)
    with pytest.raises(ListenerError, match=f"cannot bind {HOST}:0: InjectedFault") as info:
        lst.start()
    assert not isinstance(info.value, PortInUse) and isinstance(info.value.__cause__, InjectedFault)
    assert lst.thread is not None and not lst.thread.is_alive()
    assert rec.kinds() == ["bind_failed", "thread_exited"]
    assert lst.shutdown() is True


def test_history_of_one_lifecycle_and_idempotent_shutdown() -> None:
    rec = Recorder()
    with serving(HandshakeListener, recorder=rec) as lst:
        fetch_metadata(HOST, lst.port, 1, 0, timeout=SAFETY)
        # the listener records the reply once its send returned, which may be after the peer has it
        # (a CI run saw stop_started first): wait for it, so the order below is the lifecycle's
        assert rec.wait_for("handshake_served", timeout=SAFETY)
        assert [lst.shutdown() for _ in range(3)] == [True, True, True]
    assert rec.kinds() == ["handshake_listener_started", "handshake_served", "stop_started", "thread_exited",
                           *["stop_returned"] * 3]
    assert rec.events("handshake_served")[0].data == {"pp": 1, "tp": 0}
    assert [e.data for e in rec.events("stop_returned")] == [{"ok": True}] * 3


def test_concurrent_shutdowns_each_get_the_truth() -> None:
    rec = Recorder()
    with serving(HandshakeListener, recorder=rec, join_timeout=SAFETY) as lst, peer(lst.port) as sock:
        fp = failpoints.arm("handshake.before_reply", "pause", count=1)
        sock.send(encode_request(0, 0))
        assert fp.wait_reached(timeout=SAFETY)  # the thread is parked: no shutdown can finish yet
        results: list[tuple[bool, bool]] = []
        barrier = threading.Barrier(2)
        thread = lst.thread
        assert thread is not None

        def stop() -> None:
            barrier.wait(SAFETY)
            ok = lst.shutdown()
            results.append((ok, thread.is_alive()))

        stoppers = [threading.Thread(target=stop, name=f"test-stopper-{i}") for i in range(2)]
        for t in stoppers:
            t.start()
        assert rec.wait_for("stop_started", timeout=SAFETY)
        assert results == []
        fp.release()
        for t in stoppers:
            t.join(SAFETY)
        assert results == [(True, False), (True, False)]
    assert len(rec.events("stop_started")) == 1


class _StopWhenServed:
    """An emitter that calls shutdown() from the listener's own thread."""

    def __init__(self) -> None:
        self.rec = Recorder()
        self.lst: HandshakeListener | None = None
        self.results: list[bool] = []

    def emit(self, kind: str, /, **data: Any) -> None:
        self.rec.emit(kind, **data)
        if kind == "handshake_served" and self.lst is not None:
            self.results.append(self.lst.shutdown())


def test_shutdown_on_the_listeners_own_thread_returns_false_at_once() -> None:
    em = _StopWhenServed()
    lst = HandshakeListener(METADATA, recorder=em)
    em.lst = lst
    lst.start()
    try:
        with peer(lst.port) as sock:
            sock.send(encode_request(0, 0))
            assert em.rec.wait_for("thread_exited", timeout=SAFETY)  # it asked itself to stop
        assert em.results == [False]
        assert lst.shutdown() is True
    finally:
        reap(lst)


def test_start_and_shutdown_edges() -> None:
    never = HandshakeListener(METADATA)
    assert never.shutdown() is True
    with pytest.raises(ConfigError, match="already started or shut down"):
        never.start()
    with serving(HandshakeListener) as lst, pytest.raises(ConfigError, match="already started"):
        lst.start()
    with pytest.raises(ConfigError, match=r"metadata key \(0, 1\) does not match"):
        HandshakeListener({(0, 1): METADATA[(0, 0)]})


def test_repeated_start_and_shutdown_on_one_port() -> None:
    """The original hang: 20 listeners, one after another, on the same port in one process."""
    port = 0
    for i in range(20):
        with serving(HandshakeListener, port=port) as lst:
            port = lst.port
            assert fetch_metadata(HOST, port, i % 2, 1, timeout=SAFETY) == METADATA[(i % 2, 1)]
            assert lst.shutdown() is True


def test_fetch_times_out_naming_host_and_port() -> None:
    with socket.socket() as s:  # bound, never listening: nothing answers there
        s.bind((HOST, 0))
        port = s.getsockname()[1]
        t0 = time.perf_counter()
        with pytest.raises(HandshakeError, match=rf"{HOST}:{port} \(pp_rank=0, tp_rank=1\): no reply within 0.2 s"):
            fetch_metadata(HOST, port, 0, 1, timeout=0.2)
        assert time.perf_counter() - t0 < SAFETY
