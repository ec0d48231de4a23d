"""The reference listener beyond the stop contract: bad input, permissions, lifecycle edges."""

from __future__ import annotations

import os
import socket
import stat
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import msgspec
import pytest

from harness.errors import ConfigError, ListenerError
from harness.history import Recorder
from harness.reference import wire
from harness.reference.backend import NoopBackend
from harness.reference.listener import ListenerConfig, WorkerListener
from harness.reference.paths import OwnerRecord, owner_path, socket_path
from harness.reference.registry import Registry
from harness.reference.worker import ReferenceWorker, WorkerSpec

MiB = 1 << 20


@pytest.fixture
def worker(
    lc_root: Path, lastcall_recorder: Recorder, lastcall_failpoints: ModuleType, no_thread_leak: None
) -> Iterator[ReferenceWorker]:
    registry = Registry(recorder=lastcall_recorder)
    w = ReferenceWorker(WorkerSpec("t", root=str(lc_root), capacity=64 * MiB), registry=registry,
                        recorder=lastcall_recorder)
    w.start()
    yield w
    lastcall_failpoints.reset()
    assert w.shutdown()


def connect(w: ReferenceWorker) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(w.path)
    return s


def ask(s: socket.socket, req: wire.Request) -> wire.Reply:
    s.sendall(wire.encode_request(req))
    return wire.decode_reply(wire.recv_frame(s))


def still_serves(w: ReferenceWorker) -> None:
    with connect(w) as s:
        assert ask(s, wire.Request(cmd="kv_tensors_created")).created is True


def closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


MAP = wire.Request(cmd="map_to_kv_tensors", offsets=[0])


@pytest.mark.parametrize(
    ("payload", "keeps_connection"),
    [
        pytest.param(wire.frame(b"\xc1\xc1"), True, id="garbage-body"),
        pytest.param(wire.frame(msgspec.msgpack.encode({"cmd": "format_disk"})), True, id="unknown-cmd"),
        pytest.param(wire.frame(msgspec.msgpack.encode({"cmd": "map_to_kv_tensors", "offsets": "x"})), True,
                     id="wrong-types"),
        pytest.param(wire.frame(msgspec.msgpack.encode([1])), True, id="not-a-map"),
        pytest.param(b"\0\0\0\0", False, id="zero-length"),
        pytest.param(struct.pack(">I", wire.MAX_FRAME + 1), False, id="oversize-length"),
    ],
)
def test_malformed_frame_gets_bad_request_and_is_never_dispatched(
    worker: ReferenceWorker, lastcall_recorder: Recorder, payload: bytes, keeps_connection: bool
) -> None:
    with connect(worker) as s:
        s.sendall(payload)
        reply = wire.decode_reply(wire.recv_frame(s))
        assert (reply.status, reply.error_type) == ("error", "bad_request")
        if keeps_connection:  # the framing held: the same connection is served on
            assert ask(s, wire.Request(cmd="kv_tensors_created")).created is True
        else:
            assert closed(s)
    assert [e.data["cmd"] for e in lastcall_recorder.events("dispatch_started")] == (
        ["kv_tensors_created"] if keeps_connection else [])
    still_serves(worker)


@pytest.mark.parametrize("cut", [2, 4, 7], ids=["partial-header", "header-only", "part-body"])
def test_reset_mid_frame(worker: ReferenceWorker, lastcall_recorder: Recorder, cut: int) -> None:
    s = connect(worker)
    s.sendall(wire.encode_request(MAP)[:cut])
    lastcall_recorder.wait_for("frame_started")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    assert lastcall_recorder.wait_for(lambda e: e.kind == "connection_closed" and "mid-frame" in e.data["why"])
    assert not lastcall_recorder.events("dispatch_started")
    still_serves(worker)


def test_one_byte_at_a_time_and_pipelined(worker: ReferenceWorker) -> None:
    with connect(worker) as s:
        data = wire.encode_request(wire.Request(cmd="map_to_kv_tensors", offsets=[0, 2 * MiB], id="a"))
        for i in range(len(data)):
            s.send(data[i : i + 1])
        reply = wire.decode_reply(wire.recv_frame(s))
        assert (reply.id, reply.newly_mapped_offsets) == ("a", [0, 2 * MiB])
        s.sendall(b"".join(wire.encode_request(wire.Request(cmd="kv_tensors_created", id=str(i)))
                           for i in range(5)))
        assert [wire.decode_reply(wire.recv_frame(s)).id for _ in range(5)] == ["0", "1", "2", "3", "4"]


def test_backend_errors_become_typed_replies(worker: ReferenceWorker, lastcall_failpoints: ModuleType) -> None:
    with connect(worker) as s:
        bad = ask(s, wire.Request(cmd="map_to_kv_tensors", offsets=[1]))
        assert (bad.error_type, bad.status) == ("bad_request", "error")
        assert ask(s, wire.Request(cmd="prepare_unmap_from_kv_tensors", offsets=[0], transaction_id="t")).status \
            == "prepared"
        pending = ask(s, MAP)
        assert pending.error_type == "state_consistency"
        assert ask(s, wire.Request(cmd="abort_unmap_from_kv_tensors", transaction_id="t")).status == "aborted"
        late = ask(s, wire.Request(cmd="prepare_unmap_from_kv_tensors", offsets=[0], transaction_id="t"))
        assert (late.error_type, late.phase) == ("state_consistency", "prepare")
        lastcall_failpoints.arm("backend.map_to_kv_tensors", "raise", count=1, message="boom")
        failed = ask(s, MAP)
        assert failed.error_type == "operation_failed" and "boom" in (failed.message or "")


def test_reply_to_a_vanished_peer_does_not_kill_the_listener(
    worker: ReferenceWorker, lastcall_recorder: Recorder, lastcall_failpoints: ModuleType
) -> None:
    fp = lastcall_failpoints.arm("backend.map_to_kv_tensors", "pause", count=1)
    s = connect(worker)
    s.sendall(wire.encode_request(MAP))
    assert fp.wait_reached()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    lastcall_recorder.wait_for("accepted")
    fp.release()
    still_serves(worker)
    assert worker.listener is not None and worker.listener.thread is not None
    assert worker.listener.thread.is_alive()


def test_modes_and_owner_record(worker: ReferenceWorker) -> None:
    path = Path(worker.path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    rec = OwnerRecord.read(owner_path(path))
    assert rec is not None and rec.pid == os.getpid() and rec.alive()
    assert worker.listener is not None and worker.listener.thread is not None
    assert worker.listener.thread.daemon and worker.listener.thread.name == "lastcall-listener-pp0/rank0"


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another uid")
def test_peer_with_another_uid_is_closed_unread(worker: ReferenceWorker, lastcall_recorder: Recorder) -> None:
    path = Path(worker.path)
    for d in (path.parent.parent, path.parent):  # let uid 65534 reach the socket at all
        d.chmod(0o755)
    path.chmod(0o666)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: become nobody, connect, send a request, report what came back
        os.close(r)
        result = b"no answer"
        try:
            os.setuid(65534)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(str(path))
            s.sendall(wire.encode_request(MAP))
            result = b"closed" if s.recv(1) == b"" else b"answered"
        except (ConnectionResetError, BrokenPipeError):  # closed before or while we sent
            result = b"closed"
        except BaseException as exc:
            result = repr(exc).encode()
        finally:
            os.write(w, result)
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        result = f.read()
    os.waitpid(pid, 0)
    assert result == b"closed"
    ev = lastcall_recorder.wait_for("peer_rejected")
    assert ev is not None and ev.data["peer_uid"] == 65534
    assert not lastcall_recorder.events("dispatch_started")
    path.parent.parent.chmod(0o700)


def test_live_path_is_not_stolen_and_stale_path_is_taken(lc_root: Path, lastcall_recorder: Recorder) -> None:
    path = socket_path("t", 0, 0, lc_root)
    first = WorkerListener(path, NoopBackend(), ipc="t", recorder=lastcall_recorder)
    first.start()
    try:
        with pytest.raises(ListenerError, match=f"in use by live pid {os.getpid()}"):
            WorkerListener(path, NoopBackend(), ipc="t").start()
        assert path.exists()
    finally:
        assert first.stop()
    # a leftover of a dead owner: socket file plus an owner record naming a dead process
    path.parent.mkdir(mode=0o700)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    OwnerRecord(pid=os.getpid(), start_ticks=1, ipc="t", kind="socket").write(owner_path(path))
    second = WorkerListener(path, NoopBackend(), ipc="t", recorder=lastcall_recorder)
    second.start()
    assert lastcall_recorder.events("stale_socket_removed")
    assert second.stop()


def test_start_errors_and_lifecycle_edges(lc_root: Path) -> None:
    blocker = lc_root / "file"
    blocker.write_text("")
    bad = WorkerListener(blocker / "w0.sock", NoopBackend())
    with pytest.raises(ListenerError, match="cannot listen on"):
        bad.start()
    blocker.unlink()
    never = WorkerListener(lc_root / "x.sock", NoopBackend())
    assert never.stop() is True  # never started: nothing to do
    with pytest.raises(ConfigError, match="drain_timeout must be >= 0"):
        ListenerConfig(drain_timeout=-1)
    with pytest.raises(ConfigError, match="max_frame"):
        ListenerConfig(max_frame=0)
    listener = WorkerListener(socket_path("t", 0, 0, lc_root), NoopBackend(), ipc="t")
    listener.start()
    with pytest.raises(ConfigError, match="already started"):
        listener.start()
    assert listener.stop() and listener.stop()  # idempotent
    assert not any(lc_root.iterdir())


def test_events_order_one_request(worker: ReferenceWorker, lastcall_recorder: Recorder) -> None:
    still_serves(worker)
    kinds = [k for k in lastcall_recorder.kinds() if k not in ("listener_started", "listener_registered")]
    assert kinds[:5] == ["accepted", "frame_started", "frame_completed", "dispatch_started", "dispatch_finished"]
    times = [e.t_ns for e in lastcall_recorder.events()]
    assert times == sorted(times)


class _HeldAfterSet(threading.Event):
    """The serving thread's ``_exited``, holding the thread once it is set (its last step) until ``gate``."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def set(self) -> None:
        super().set()
        self.gate.wait()


def test_stop_returns_true_only_once_the_serving_thread_has_ended(lc_root: Path) -> None:
    # a thread that set its exit flag still runs (threading's bootstrap): a thread list read once stop returned
    # True named it, and no_leaked_threads fired on a loaded machine
    listener = WorkerListener(socket_path("t", 0, 0, lc_root), NoopBackend(), ipc="t")
    listener.start()
    held = listener._exited = _HeldAfterSet()  # type: ignore[misc]
    thread = listener._thread
    assert thread is not None
    try:
        ok = listener.stop(timeout=0.3)
        assert not (ok and thread.is_alive()), "stop returned True with the serving thread still running"
    finally:
        held.gate.set()
    assert listener.stop() is True and not thread.is_alive()
    assert not any(lc_root.iterdir())
