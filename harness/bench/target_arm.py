"""Bench arms that run a worker target's own listener: ``lastcall bench --arm kvcached==0.1.6``.

An arm named by a worker target (not the reference or one of its variants) is served by the target's
own listener in a forked child (:class:`harness.bench.serverproc.ServerProcess`), its backend stubbed,
and measured from the bench process in the target's codec (``target.codec``: kvcached's is a 4-byte
length and a pickled dict, :class:`harness.targets.kvcached.PickleCodec`).  Nothing in the child
records events: the request path is the target's as shipped, less the backend.

``T+tracking-noop`` names T with its connection tracking replaced by a no-op.  ``--arm T`` given alone
expands to ``T+tracking-noop`` (the baseline) and ``T`` (as shipped), with the A/A control a second
child of ``T``: the ratio is T's cost over its own code without tracking, the kvcached review thread's
measurement (its author's third arm, "track_conn/untrack_conn patched to no-ops").

kvcached (0.1.6; 0.1.5 has no stop path, so the bench could not stop its listener and refuses it):

* the VMM ops: ``kvcached.vmm_ops`` is replaced, before kvcached is imported, by :func:`noop_vmm_ops`
  (every op returns success at once; a map reports every offset newly mapped), as in the thread's
  measurement.  ``_sync_before_unmap`` stays as shipped (on CPU: ``torch.cuda.is_available()``).
* the tracking no-op: :func:`untracked_listener`, a subclass of kvcached's own ``_WorkerListener``
  whose ``track_conn`` accepts every connection without the lock, the stop check or the set, and whose
  ``untrack_conn`` only closes the connection (the close is the handler's, not tracking's; dropping it
  would leak an fd per request, which the bench's leak check stops on).  It is installed as
  ``tp_ipc_util._WorkerListener``, which ``_start_worker_listener_thread`` looks up when it builds the
  listener, so everything else (accept loop, dispatch, stop, registry) is kvcached's code unchanged.
  Its stop cannot cancel a parked read any more: that is what tests/test_bench_arm.py proves.
* the socket root: a fresh directory under /tmp per arm (kvcached's own directory name inside it).

A worker target of another kind is benched when it offers ``bench_served(root, tracking)`` returning a
ServerProcess factory (the listener and its post-stop check) and a ``codec``; kvcached's lives here
(:data:`BENCH_SIDES`) because harness.targets must not import the bench.
"""

from __future__ import annotations

import os
import sys
import tempfile
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.bench.arms import Codec
from harness.bench.serverproc import Served
from harness.errors import ConfigError

__all__ = ["TRACKING_NOOP_SUFFIX", "TargetArm", "resolve", "expand", "noop_vmm_ops", "untracked_listener",
           "kvcached_served", "BENCH_SIDES", "new_root"]

TRACKING_NOOP_SUFFIX = "+tracking-noop"
DRAIN_TIMEOUT_S = 5.0  # kvcached's own default: stop's join on its listener thread
Factory = Callable[[], tuple[Served, Callable[[], str]]]


@dataclass(frozen=True)
class TargetArm:
    """An arm served by a worker target's own listener."""

    spec: str  # as given, e.g. kvcached==0.1.6+tracking-noop
    target: Any
    tracking: bool  # False: connection tracking is a no-op
    codec: Codec

    def factory(self, root: str) -> Factory:
        """What the forked child runs: the listener and its post-stop check, sockets under ``root``."""
        side = getattr(self.target, "bench_served", None)
        if side is not None:
            return side(root, self.tracking)  # type: ignore[no-any-return]
        return BENCH_SIDES[type(self.target).__name__](self.target, root, self.tracking)


def _base(spec: str) -> tuple[str, bool]:
    if spec.endswith(TRACKING_NOOP_SUFFIX):
        return spec[:-len(TRACKING_NOOP_SUFFIX)], False
    return spec, True


def resolve(spec: str) -> TargetArm | None:
    """The target arm ``spec`` names, or None when it is the reference or one of its variants (a Cluster arm).

    Error handling: ConfigError, one line: an unknown name, a target that is not a worker target (a
    handshake or engine target), a worker target the bench cannot serve, a version not fetched (the
    line names ``lastcall fetch kvcached==VERSION``), or kvcached 0.1.5 (no stop path).
    """
    from harness.reference.variants import Variant
    from harness.targets import load_target

    name, tracking = _base(spec)
    if "@" in name:
        return None  # a listener swap: arm_variant says why it is refused
    target = load_target(name)
    if isinstance(target, Variant):
        if not tracking:
            raise ConfigError(f"arm {spec!r}: {TRACKING_NOOP_SUFFIX} applies to a worker target such as "
                              f"kvcached==0.1.6; the reference's tracking no-op is harness.bench.arms:TRACKING_NOOP")
        return None
    kind = type(target).__name__
    if "worker_listener" not in getattr(target, "capabilities", ()) or getattr(target, "codec", None) is None:
        raise ConfigError(f"arm {spec!r} is not a worker target ({kind}: no worker listener and codec); a bench "
                          f"arm is the reference, one of its variants, or a worker target such as kvcached==0.1.6")
    if getattr(target, "bench_served", None) is None and kind not in BENCH_SIDES:
        raise ConfigError(f"arm {spec!r}: the bench cannot serve {kind}'s listener; give the target "
                          f"bench_served(root, tracking) (see harness/bench/target_arm.py)")
    why = target.unavailable() if hasattr(target, "unavailable") else None
    if why:
        raise ConfigError(f"arm {spec!r}: {why}")
    if kind == "KvcachedTarget":
        _check_kvcached_stops(spec, target)
    return TargetArm(spec, target, tracking, target.codec)


def expand(arms: list[str]) -> tuple[list[str], int]:
    """The arms a bench runs and the index of the one its A/A control repeats.

    ``[T]`` for a worker target T becomes ``[T+tracking-noop, T]`` with the A/A of T (see the module
    docstring); anything else is run as given, the A/A of the first arm.
    """
    if len(arms) == 1:
        name, tracking = _base(arms[0])
        if tracking and resolve(arms[0]) is not None:
            return [name + TRACKING_NOOP_SUFFIX, name], 1
    return list(arms), 0


def new_root() -> str:
    """A fresh, short socket root for one target arm (Unix socket paths hold 107 bytes)."""
    return tempfile.mkdtemp(prefix="lcb-", dir="/tmp")


# ------------------------------------------------------------------ kvcached
def _check_kvcached_stops(spec: str, target: Any) -> None:
    from harness.targets.kvcached import source_for

    src = source_for(target.version)
    where = (src / "kvcached" / "tp_ipc_util.py") if src is not None else None
    if where is not None and "def stop_worker_listener_threads" not in where.read_text(errors="replace"):
        raise ConfigError(f"arm {spec!r}: this kvcached has no stop path (stop_worker_listener_threads), so the "
                          f"bench could not stop its listener; bench kvcached==0.1.6 (`lastcall fetch "
                          f"kvcached==0.1.6`)")


def noop_vmm_ops() -> types.ModuleType:
    """A ``kvcached.vmm_ops`` whose every op succeeds at once (the VMM calls stubbed, as in the thread)."""
    m = types.ModuleType("kvcached.vmm_ops", "lastcall bench's no-op VMM ops (harness/bench/target_arm.py)")
    ops: dict[str, Callable[..., Any]] = {
        "kv_tensors_created": lambda group_id=0: True,
        "map_to_kv_tensors": lambda offsets, group_id=0: True,
        "map_to_kv_tensors_with_result": lambda offsets, group_id=0: (True, list(offsets)),
        "unmap_from_kv_tensors": lambda offsets, group_id=0: True,
        "prepare_unmap_from_kv_tensors": lambda offsets, transaction_id, group_id=0: True,
        "commit_unmap_from_kv_tensors": lambda transaction_id, group_id=0: True,
        "abort_unmap_from_kv_tensors": lambda transaction_id, group_id=0: True,
        "init_kvcached": lambda *a, **k: None,
        "shutdown_kvcached": lambda *a, **k: None,
    }
    for name, fn in ops.items():
        setattr(m, name, fn)
    return m


def untracked_listener(base: type) -> type:
    """kvcached's ``_WorkerListener`` with connection tracking a no-op (see the module docstring)."""

    def track_conn(self: Any, conn: Any) -> bool:
        return True  # no lock, no stop check, not in the set stop() cancels reads of

    def untrack_conn(self: Any, conn: Any) -> None:
        conn.close()  # the handler's close, kept: only the set and its lock are gone

    return type("UntrackedWorkerListener", (base,), {
        "__doc__": f"{base.__module__}.{base.__qualname__} with track_conn/untrack_conn no-ops (lastcall bench)",
        "track_conn": track_conn, "untrack_conn": untrack_conn})


class _KvcachedServed:
    """kvcached's listener of rank 0 as ServerProcess serves it: started and stopped by kvcached's own calls."""

    def __init__(self, t: Any, drain_timeout: float) -> None:
        self.t = t
        self.drain_timeout = drain_timeout

    @property
    def path(self) -> Path:
        return Path(self.t.get_worker_socket_path(0, 0))

    @property
    def thread(self) -> Any:
        return self.t._listeners[(0, 0)].thread

    @property
    def listener(self) -> Any:
        return self.t._listeners.get((0, 0))

    def start(self) -> None:
        self.t.start_worker_listener_thread(0, 0)

    def stop(self) -> bool:
        return bool(self.t.stop_worker_listener_threads(self.drain_timeout))

    def check(self) -> str:
        left = [p for p in (str(self.path), self.t.SOCKET_DIR) if os.path.exists(p)]
        return f"kvcached's stop returned True but left {', '.join(left)}" if left else ""


def kvcached_tp_ipc(target: Any, root: str, tracking: bool) -> Any:
    """kvcached's tp_ipc_util imported in this process with no-op VMM ops, re-rooted under ``root``."""
    t = target.import_tp_ipc({"ipc": "bench", "root": root}, noop_vmm_ops())
    if not tracking:
        t._WorkerListener = untracked_listener(t._WorkerListener)
    return t


def kvcached_served(target: Any, root: str, tracking: bool, drain_timeout: float = DRAIN_TIMEOUT_S) -> Factory:
    """The ServerProcess factory of a kvcached arm: runs in the forked child only (it imports kvcached there).

    kvcached's package imports torch first (seconds): it is imported here, in the bench process, once,
    so that each child's import of kvcached itself is quick.
    """
    import torch  # noqa: F401

    def factory() -> tuple[Served, Callable[[], str]]:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - kvcached prints a line per start and stop
        served = _KvcachedServed(kvcached_tp_ipc(target, root, tracking), drain_timeout)
        return served, served.check

    return factory


BENCH_SIDES: dict[str, Callable[[Any, str, bool], Factory]] = {"KvcachedTarget": kvcached_served}
