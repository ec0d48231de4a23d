"""A throw-away listener in a worker process: started (or not) at a path, then stopped; what each returned.

The ``start_listener`` scenario step (harness.scenario.edge_steps) asks a worker for it over the control
channel: a start that fails must leave nothing behind, a live owner's socket must never be taken over, a
dead owner's stale one must be, and stop of a listener that never started, or failed to, or twice, returns
True and creates or removes nothing.  The listener is the target's own class with the worker's backend and
config, but records nothing (its events would read as the worker's own listener's) and is not registered.
"""

from __future__ import annotations

from typing import Any

from harness.errors import ConfigError

__all__ = ["start_and_stop"]


def start_and_stop(side: Any, *, path: str, ipc: str, rank: int = 0, pp: int = 0, start: bool = True,
                   stops: int = 1) -> dict[str, Any]:
    """Start a fresh listener of ``side``'s class at ``path`` (unless not ``start``), then stop it ``stops`` times.

    Returns: ``started`` (bool), ``error_class`` and ``error`` (when start raised), ``stops`` (each return).
    Error handling: ConfigError when the target's worker side has no reference-style worker to take the
        listener class from.
    """
    worker = getattr(side, "worker", None)
    if worker is None or not hasattr(worker, "listener_cls"):
        raise ConfigError(f"{type(side).__name__} has no reference worker: start_listener needs one")
    listener = worker.listener_cls(path, worker.backend, rank=rank, pp=pp, ipc=ipc, config=worker.spec.config)
    out: dict[str, Any] = {"started": False, "error_class": None, "error": None}
    if start:
        try:
            listener.start()
            out["started"] = True
        except Exception as exc:  # what the start raised is the outcome
            out["error_class"], out["error"] = type(exc).__name__, str(exc)
    out["stops"] = [bool(listener.stop()) for _ in range(stops)]
    return out
