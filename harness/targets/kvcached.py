"""The real kvcached worker listener as a target (``--target kvcached==0.1.6``).

Where the code comes from, in this order:

* ``kvcached==VERSION``: the sdist unpacked by ``lastcall fetch kvcached==VERSION``
  into the cache (harness/targets/fetch.py);
* ``kvcached``: the tree named by ``--kvcached-src`` / ``LASTCALL_KVCACHED_SRC``
  (a source checkout or an unpacked sdist), else the installed package.

What runs is kvcached's own ``tp_ipc_util``: its listener thread, its registry
and stop (``stop_worker_listener_threads``, 0.1.6), its exit hook, its pickle
framing, and, in the engine process, its own asyncio client (the broadcasts,
rollback and two-phase unmap).  The adapter changes three things, none of
them control flow:

* the VMM ops.  On CPU (or when the compiled ``kvcached._C`` is missing)
  ``kvcached.vmm_ops`` is replaced, before kvcached is imported, by gated stubs
  over the harness's reference page allocator: each op passes the failpoint
  ``backend.<cmd>`` (so a scenario can park a handler inside
  ``map_to_kv_tensors``) and is recorded as ``dispatch_started`` /
  ``dispatch_finished``.  On a GPU with a built kvcached the real ops run
  (``LASTCALL_KVCACHED_REAL_OPS=1``), still recorded.
* the socket root: ``tp_ipc_util.SOCKET_DIR`` is re-rooted under the run's
  socket root (kvcached 0.1.6 makes the root configurable as
  ``utils.TP_SOCKET_DIR_ROOT``; 0.1.5 hard-codes /tmp), keeping kvcached's own
  directory name, so parallel runs never share a path and the probes see it.
* observation at the module's seams: ``recv_msg`` and ``send_msg`` are wrapped
  to record ``accepted``, ``frame_started`` (the first byte, seen with
  MSG_PEEK, nothing consumed), ``frame_completed`` and ``connection_closed`` (once a connection: at a
  read that fails, else after its reply, "replied" or "reply failed");
  ``_WorkerListener.stop`` to record ``stop_started`` / ``stop_returned`` and,
  after a False, what it had already torn down (``teardown_step``).

The integration-level shutdown is kvcached's own sequence in
``integration/vllm/interfaces.shutdown_kvcached`` (0.1.6): stop the listeners;
when that returns False, defer teardown and keep everything for a retry; else
shut the VMM state down.  0.1.5 has no stop path at all: the adapter's stop
reports False (nothing can stop its thread) and is recorded as such, which is
exactly what the scenarios should find.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import os
import pickle
import socket
import sys
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import envvars, events, failpoints
from harness.errors import BackendError, ConfigError, FrameDecodeError
from harness.reference import wire

__all__ = ["TARGET", "KvcachedTarget", "PickleCodec", "source_for"]

SRC_ENV = "LASTCALL_KVCACHED_SRC"
REAL_OPS_ENV = "LASTCALL_KVCACHED_REAL_OPS"
CAPABILITIES = frozenset({"worker_listener", "failpoints", "wire", "integration_shutdown", "listener_events",
                          "worker_events"})
# what it lacks by design: listener_failpoints (sites inside its listener: it has none), handshake_listener


class PickleCodec:
    """kvcached's framing: 4-byte big-endian length + pickle of a dict, both ways.

    The reply is unpickled: the harness only ever reads replies from the
    kvcached process it launched itself (kvcached's own client does the same).
    """

    header_size = 4

    def encode_request(self, req: wire.Request) -> bytes:
        msg: dict[str, Any] = {"cmd": req.cmd, "group_id": req.group_id}
        if req.offsets or req.cmd in ("map_to_kv_tensors", "unmap_from_kv_tensors", "prepare_unmap_from_kv_tensors"):
            msg["offsets"] = list(req.offsets)
        if req.transaction_id:
            msg["transaction_id"] = req.transaction_id
        if req.commit:
            msg["commit"] = True
        data = pickle.dumps(msg)
        return len(data).to_bytes(4, "big") + data

    def decode_reply(self, frame: bytes) -> wire.Reply:
        try:
            msg = pickle.loads(frame)  # the target's own reply, see the class docstring
        except Exception as exc:
            raise FrameDecodeError(f"not a pickled reply: {type(exc).__name__}: {exc}") from None
        if not isinstance(msg, dict):
            raise FrameDecodeError(f"reply is a {type(msg).__name__}, not a dict")
        et = msg.get("error_type")
        if msg.get("status") == "error" and et is None:
            et = "operation_failed"
        return wire.Reply(status=msg.get("status", "error"), newly_mapped_offsets=msg.get("newly_mapped_offsets"),
                          created=msg.get("created"), error_type=et, phase=msg.get("phase"),
                          message=msg.get("message"))


def source_for(version: str | None) -> Path | None:
    """The folder holding the ``kvcached`` package for ``version`` (None: --kvcached-src, else installed)."""
    if version is not None:
        from harness.targets.fetch import cached_source

        return cached_source("kvcached", version)
    given = envvars.text(SRC_ENV)
    if given:
        return Path(given)
    return None


class KvcachedTarget:
    """kvcached's worker listener (see the module docstring)."""

    codec = PickleCodec()
    capabilities = CAPABILITIES
    handshake_listener = None

    def __init__(self, version: str | None = None) -> None:
        self.version = version
        self.name = "kvcached" if version is None else f"kvcached=={version}"
        self.about = f"kvcached's own worker IPC listener ({self.name}), VMM ops stubbed on CPU"

    def unavailable(self) -> str | None:
        src = source_for(self.version)
        if self.version is not None and src is None:
            return f"kvcached {self.version} is not in the cache: run `lastcall fetch kvcached=={self.version}`"
        if src is not None and not (src / "kvcached" / "tp_ipc_util.py").is_file():
            return f"{src} holds no kvcached/tp_ipc_util.py (give --kvcached-src a source tree or unpacked sdist)"
        if src is None and importlib.util.find_spec("kvcached") is None:
            return ("kvcached is not installed and no source was given: use --kvcached-src DIR, "
                    "or --target kvcached==0.1.6 after `lastcall fetch kvcached==0.1.6`")
        return None

    def worker_side(self, spec: dict[str, Any], recorder: Any) -> KvcachedWorker:
        return KvcachedWorker(self, spec, recorder)

    def engine_side(self, spec: dict[str, Any], recorder: Any) -> KvcachedEngine:
        return KvcachedEngine(self, spec, recorder)

    def import_tp_ipc(self, spec: dict[str, Any], ops: types.ModuleType | None) -> Any:
        """Import kvcached.tp_ipc_util in this process with ``ops`` as its vmm_ops; re-root its socket dir."""
        why = self.unavailable()
        if why:
            raise ConfigError(why)
        src = source_for(self.version)
        if src is not None:
            sys.path.insert(0, str(src))
        os.environ["KVCACHED_IPC_NAME"] = spec["ipc"]
        os.environ["KVCACHED_PP_SIZE"] = str(spec.get("pp_size", 1))
        if spec.get("ipc_timeout"):
            os.environ["KVCACHED_IPC_TIMEOUT"] = str(spec["ipc_timeout"])
        if ops is not None:
            sys.modules["kvcached.vmm_ops"] = ops
        t: Any = importlib.import_module("kvcached.tp_ipc_util")
        t.SOCKET_DIR = os.path.join(spec["root"], os.path.basename(t.SOCKET_DIR))
        return t


# ------------------------------------------------------------------ VMM stubs
class _Seen:
    """Per-process observation state shared by the seam wrappers and the stubs."""

    def __init__(self, recorder: Any, label: str) -> None:
        self.rec = recorder
        self.label = label
        self.ids = itertools.count(1)
        self.tls = threading.local()

    def conn(self) -> int:
        return int(getattr(self.tls, "conn", 0))


def _gated(seen: _Seen, cmd: str, fn: Callable[..., Any], to_kv_error: Callable[[Exception], Exception]) -> Any:
    def op(*args: Any, **kw: Any) -> Any:
        conn = seen.conn()
        seen.rec.emit("dispatch_started", listener=seen.label, conn=conn, cmd=cmd)
        status = "error"
        try:
            failpoints.hit(f"backend.{cmd}")
            try:
                out = fn(*args, **kw)
            except BackendError as exc:
                raise to_kv_error(exc) from None
            status = "success"
            return out
        finally:
            seen.rec.emit("dispatch_finished", listener=seen.label, conn=conn, cmd=cmd, status=status)

    op.__name__ = cmd
    return op


def stub_ops(allocator: Any, seen: _Seen, kv_errors: Any) -> types.ModuleType:
    """A ``kvcached.vmm_ops`` whose ops run on the reference allocator, gated and recorded."""
    def to_kv_error(exc: Exception) -> Exception:
        et = getattr(exc, "error_type", "")
        if kv_errors is not None and et == "state_consistency":
            return kv_errors.StateConsistencyError(str(exc))  # type: ignore[no-any-return]
        if kv_errors is not None and et == "map_quarantined":
            return kv_errors.MapQuarantinedError(str(exc))  # type: ignore[no-any-return]
        return RuntimeError(str(exc))

    a = allocator

    def with_result(offsets: list[int], group_id: int = 0) -> tuple[bool, list[int]]:
        return True, a.map(group_id, offsets)

    def unmap(offsets: list[int], group_id: int = 0) -> bool:
        a.unmap(group_id, offsets)
        return True

    def prepare(offsets: list[int], transaction_id: str, group_id: int = 0) -> bool:
        a.prepare_unmap(group_id, offsets, transaction_id)
        return True

    def commit(transaction_id: str, group_id: int = 0) -> bool:
        a.commit_unmap(transaction_id)
        return True

    def abort(transaction_id: str, group_id: int = 0) -> bool:
        a.abort_unmap(transaction_id)
        return True

    m = types.ModuleType("kvcached.vmm_ops", "lastcall's gated stubs of kvcached's VMM ops (targets/kvcached.py)")
    ops: dict[str, Callable[..., Any]] = {
        "kv_tensors_created": lambda group_id=0: a.kv_tensors_created(group_id),
        "map_to_kv_tensors": lambda offsets, group_id=0: a.map(group_id, offsets) is not None,
        "map_to_kv_tensors_with_result": with_result,
        "unmap_from_kv_tensors": unmap,
        "prepare_unmap_from_kv_tensors": prepare,
        "commit_unmap_from_kv_tensors": commit,
        "abort_unmap_from_kv_tensors": abort,
    }
    site = {"map_to_kv_tensors_with_result": "map_to_kv_tensors"}  # one site per wire command
    for name, fn in ops.items():
        setattr(m, name, _gated(seen, site.get(name, name), fn, to_kv_error))
    m.init_kvcached = lambda *a_, **k: None  # type: ignore[attr-defined]
    m.shutdown_kvcached = lambda *a_, **k: None  # type: ignore[attr-defined]
    return m


# ------------------------------------------------------------------ the sides
class KvcachedWorker:
    """One rank's kvcached listener in a worker process (harness.targets.WorkerSide)."""

    def __init__(self, target: KvcachedTarget, spec: dict[str, Any], recorder: Any) -> None:
        from harness.reference.allocator import KVAllocator

        self.spec = spec
        self.rec = recorder
        self.rank, self.pp = int(spec.get("rank", 0)), int(spec.get("pp", 0))
        self.label = events.label(self.pp, self.rank)
        self.drain_timeout = float(spec.get("drain_timeout", 5.0))
        self.seen = _Seen(recorder, self.label)
        device = spec.get("device", "cpu")
        self.allocator = KVAllocator(device=f"cuda:{self.rank}" if device == "cuda" else device)
        self.allocator.create_kv_tensors(0, int(spec.get("capacity", 1 << 30)))
        real = envvars.flag(REAL_OPS_ENV) and device == "cuda"
        kv_errors = _try_import("kvcached.errors", target, spec)
        self.t = target.import_tp_ipc(spec, None if real else stub_ops(self.allocator, self.seen, kv_errors))
        self._instrument()
        self.path = str(self.t.get_worker_socket_path(self.rank, self.pp))
        self._shut_down = False
        self._lock = threading.Lock()

    # seams -----------------------------------------------------------------
    def _instrument(self) -> None:
        t, seen = self.t, self.seen
        recv, send = t.recv_msg, t.send_msg

        def recv_msg(sock: socket.socket) -> Any:
            cid = next(seen.ids)
            seen.tls.conn = cid
            seen.rec.emit("accepted", listener=seen.label, conn=cid)
            try:
                if sock.recv(1, socket.MSG_PEEK):
                    seen.rec.emit("frame_started", listener=seen.label, conn=cid)
                msg = recv(sock)
            except BaseException as exc:
                seen.tls.ended = cid  # its end is recorded: the error reply kvcached may still try is not another
                seen.rec.emit("connection_closed", listener=seen.label, conn=cid, why=f"read ended: {exc}")
                raise
            seen.rec.emit("frame_completed", listener=seen.label, conn=cid, cmd=msg.get("cmd")
                          if isinstance(msg, dict) else None)
            return msg

        def send_msg(sock: socket.socket, msg: Any) -> None:
            why = "replied"
            try:
                send(sock, msg)
            except BaseException as exc:
                why = f"reply failed: {exc}"
                raise
            finally:  # every kvcached handler closes the connection right after its one reply
                if getattr(seen.tls, "ended", None) != seen.conn():  # once: a failed read recorded its end
                    seen.rec.emit("connection_closed", listener=seen.label, conn=seen.conn(), why=why)

        t.recv_msg, t.send_msg = recv_msg, send_msg
        cls = getattr(t, "_WorkerListener", None)
        if cls is None:
            return
        stop = cls.stop

        def observed_stop(listener: Any, *args: Any, **kw: Any) -> bool:
            label = events.label(listener.pp_rank, listener.rank)
            if not getattr(listener, "_stopped", False):
                seen.rec.emit("stop_started", listener=label)
            try:
                ok = bool(stop(listener, *args, **kw))
            except BaseException as exc:
                seen.rec.emit("cleanup_failed", listener=label, error=f"{type(exc).__name__}: {exc}")
                seen.rec.emit("stop_returned", listener=label, ok=False, reason="raised")
                raise
            if not ok:  # what a False had already torn down, as far as can be seen from outside
                if listener.server_sock.fileno() == -1:
                    seen.rec.emit("teardown_step", listener=label, step="close")
                if not os.path.exists(listener.socket_path):
                    seen.rec.emit("teardown_step", listener=label, step="unlink")
            seen.rec.emit("stop_returned", listener=label, ok=ok, reason="" if ok else "drain timed out")
            return ok

        cls.stop = observed_stop

    # WorkerSide ----------------------------------------------------------------
    def start(self) -> str:
        start = self.t.start_worker_listener_thread
        start(self.rank, self.pp)
        listener = getattr(self.t, "_listeners", {}).get((self.rank, self.pp))
        if listener is not None and listener.thread is not None:
            self._observe_drain(listener.thread)
        self.rec.emit("listener_started", listener=self.label, path=self.path, rank=self.rank, pp=self.pp)
        return self.label

    def _observe_drain(self, thread: threading.Thread) -> None:
        """stop()'s drain is its join on the listener thread: record when it begins and how it ends."""
        join, rec, label = thread.join, self.rec, self.label

        def observed_join(timeout: float | None = None) -> None:
            rec.emit("drain_started", listener=label, timeout=timeout)
            join(timeout)
            rec.emit("drain_finished", listener=label, ok=not thread.is_alive())

        thread.join = observed_join  # type: ignore[method-assign]

    def stop(self, timeout: float | None = None) -> bool:
        stop_all = getattr(self.t, "stop_worker_listener_threads", None)
        if stop_all is None:  # 0.1.5: nothing can stop the thread
            self.rec.emit("stop_started", listener=self.label)
            self.rec.emit("stop_returned", listener=self.label, ok=False,
                          reason="this kvcached has no stop path (stop_worker_listener_threads)")
            return False
        return bool(stop_all(self.drain_timeout if timeout is None else timeout))

    def shutdown(self) -> bool:
        """kvcached 0.1.6's shutdown_kvcached(): stop the listeners, else defer; then the VMM teardown."""
        with self._lock:
            if self._shut_down:
                return True
            if not self.stop():
                self.rec.emit("teardown_deferred", worker=self.label)
                return False
            self.rec.emit("allocator_state", worker=self.label, mapped=sorted(self.allocator.mapped_offsets(0)),
                          pending=self.allocator.pending_transaction())
            self.allocator.teardown()
            self.rec.emit("allocator_torn_down", worker=self.label)
            self._shut_down = True
            return True

    def mapped(self, group_id: int = 0) -> list[int] | None:
        return None if self.allocator.torn_down else sorted(self.allocator.mapped_offsets(group_id))

    def torn_down(self) -> bool:
        return bool(self.allocator.torn_down)


def _try_import(module: str, target: KvcachedTarget, spec: dict[str, Any]) -> Any:
    src = source_for(target.version)
    if src is not None and str(src) not in sys.path:
        sys.path.insert(0, str(src))
    try:
        return importlib.import_module(module)
    except ImportError:
        return None  # 0.1.5 has no kvcached.errors


class KvcachedEngine:
    """kvcached's own client (tp_ipc_util's broadcasts) in the engine process."""

    path = ""  # the adapter's engine owns nothing on the machine

    def __init__(self, target: KvcachedTarget, spec: dict[str, Any], recorder: Any) -> None:
        self.tp, self.pp_size = int(spec.get("tp", 1)), int(spec.get("pp_size", 1))
        self.t = target.import_tp_ipc(spec, stub_ops(_NoAllocator(), _Seen(recorder, "engine"), None))

    def map(self, offsets: list[int], group_id: int = 0) -> list[int]:
        for pp in range(self.pp_size):
            self.t.broadcast_map_to_kv_tensors(self.tp, list(offsets), pp_rank=pp, group_id=group_id)
        return list(offsets)

    def unmap(self, offsets: list[int], group_id: int = 0) -> None:
        for pp in range(self.pp_size):
            self.t.broadcast_unmap_from_kv_tensors(self.tp, list(offsets), pp_rank=pp, group_id=group_id)

    def kv_tensors_created(self, group_id: int = 0) -> bool:
        return all(self.t.broadcast_kv_tensors_created(self.tp, pp_rank=pp, group_id=group_id)
                   for pp in range(self.pp_size))

    def close(self) -> None:
        return None


class _NoAllocator:
    """The engine imports tp_ipc_util (which imports vmm_ops) but never calls an op."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the engine process called a VMM op ({name})")


TARGET = KvcachedTarget()


# ------------------------------------------------------------------ pytest options (harness.hookspecs)
def pytest_lastcall_addoption(parser: Any, pluginmanager: Any) -> None:
    """``--kvcached-src DIR``: the kvcached tree the target imports (the plugin registers this module)."""
    parser.getgroup("lastcall").addoption(
        "--kvcached-src", default=None, metavar="DIR",
        help=f"the kvcached source tree or unpacked sdist the kvcached target imports (sets {SRC_ENV} for the "
             "run's processes)")


def pytest_configure(config: Any) -> None:
    """--kvcached-src reaches the worker processes through the environment (they inherit it)."""
    src = config.getoption("--kvcached-src", None)
    if src:
        os.environ[SRC_ENV] = str(Path(src).resolve())
