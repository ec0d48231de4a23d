"""A throw-away listener in a worker process: started (or not) at a path, then stopped; what each returned.

The ``start_listener`` scenario step (harness.scenario.edge_steps) asks a worker for it over the control
channel: a start that fails must leave nothing behind, a live owner's socket must never be taken over, a
dead owner's stale one must be, and stop of a listener that never started, or failed to, or twice, returns
True and creates or removes nothing.  The listener is the target's own class with the worker's backend and
config, but records nothing (its events would read as the worker's own listener's) and is not registered,
unless kept (``keep``): then the worker's registry starts and registers it, and it records with the worker
(under the label of the worker whose path it took: a checker that tells listeners apart by label reads the two
as one; exit_hook_stops_the_rest does not).
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable
from typing import Any

from harness.errors import ConfigError
from harness.probes.procs import process_umask

__all__ = ["start_and_stop", "process_umask"]


def start_and_stop(side: Any, *, path: str, ipc: str, rank: int = 0, pp: int = 0, start: bool = True,
                   stops: int = 1, again: bool = False, keep: bool = False) -> dict[str, Any]:
    """Start a fresh listener of ``side``'s class at ``path`` (unless not ``start``), then stop it ``stops`` times;
    with ``again``, start the same object once more (a listener is started once: that start must raise) and
    stop it once more; with ``keep`` (and no stops), start it through the worker's registry instead and leave
    it serving, registered beside the worker's own: the worker's shutdown or exit hook stops it.

    Returns: ``started`` (bool), ``error_class`` and ``error`` (when start raised), ``stops`` (each return),
        ``modes`` once started (what the start created: the socket's and its directory's permission bits, the
        process umask before and after the start), ``again`` (the second start's outcome, as the first's) and
        ``again_stops``.
    Error handling: ConfigError when the target's worker side has no reference-style worker to take the
        listener class from.
    """
    worker = getattr(side, "worker", None)
    if worker is None or not hasattr(worker, "listener_cls"):
        raise ConfigError(f"{type(side).__name__} has no reference worker: start_listener needs one")
    listener = worker.listener_cls(path, worker.backend, rank=rank, pp=pp, ipc=ipc, config=worker.spec.config,
                                   **({"recorder": worker.rec} if keep else {}))
    out: dict[str, Any] = {"started": False, "error_class": None, "error": None}
    if start:
        umask = process_umask()
        out.update(_start(functools.partial(worker.registry.start, listener) if keep else listener.start))
        if out["started"]:
            out["modes"] = {"socket": _mode(path), "dir": _mode(os.path.dirname(path)), "umask_before": umask,
                            "umask_after": process_umask()}
    out["stops"] = [bool(listener.stop()) for _ in range(stops)]
    if again:
        out["again"] = _start(listener.start)
        out["again_stops"] = [bool(listener.stop())]
    return out


def _start(start: Callable[[], object]) -> dict[str, Any]:
    """The outcome of ``start`` (a listener's own start, or its registry's start of it)."""
    try:
        start()
    except Exception as exc:  # what the start raised is the outcome
        return {"started": False, "error_class": type(exc).__name__, "error": str(exc)}
    return {"started": True, "error_class": None, "error": None}


def _mode(path: str) -> int | None:
    """The permission bits of ``path`` (not followed), None when it is gone."""
    try:
        return stat.S_IMODE(os.lstat(path).st_mode)
    except OSError:
        return None
