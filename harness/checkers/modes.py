"""Checkers of what a listener costs the machine beyond its paths: the permission bits of what its start
creates and the process umask it leaves (``private_paths``), the time its process runs while its clients idle
(``idle_cost``).  Both read the harness's own step returns (``start_listener``'s ``modes``, ``measure_idle``'s
value): black-box, no listener event is needed.
"""

from __future__ import annotations

from pydantic import Field

from harness.checkers.base import RunRecord, Verdict, checker, ok, unknown, violated
from harness.checkers.params import Params
from harness.history import Event

__all__ = ["IdleCost", "SOCKET_MODE", "DIR_MODE"]

SOCKET_MODE = 0o600  # the stop contract's socket: its owner's only (harness.reference.listener.start)
DIR_MODE = 0o700  # and the directory made for it


def _steps(run: RunRecord, kind: str) -> list[Event]:
    return [e for e in run.ordered if e.kind == "step_returned" and e.data.get("kind") == kind and e.data.get("ok")]


@checker("private_paths", "what a listener's start creates is its owner's only (socket 0600, directory 0700) and "
         "the start leaves the process umask as it found it", judges=("step_returned",))
def private_paths(run: RunRecord, p: Params) -> Verdict:
    starts = [e for e in _steps(run, "start_listener") if isinstance(e.data.get("modes"), dict)]
    if not starts:
        return unknown("private_paths", "no start_listener step started a listener and reported its modes")
    bad: list[str] = []
    for e in starts:
        m = e.data["modes"]
        step = e.data.get("step")
        if m.get("socket") != SOCKET_MODE:
            bad.append(f"{step}: socket {e.data.get('path')} has mode {_oct(m.get('socket'))}, not 0o600")
        if m.get("dir") != DIR_MODE:
            bad.append(f"{step}: its directory has mode {_oct(m.get('dir'))}, not 0o700")
        if m.get("umask_before") is not None and m.get("umask_after") != m.get("umask_before"):
            bad.append(f"{step}: the start changed the process umask from {_oct(m.get('umask_before'))} to "
                       f"{_oct(m.get('umask_after'))}")
    if bad:
        return violated("private_paths", "; ".join(bad), starts)
    return ok("private_paths", f"{len(starts)} start(s): socket 0600, directory 0700, umask kept")


def _oct(mode: object) -> str:
    return oct(mode) if isinstance(mode, int) else "unknown"


class IdleCost(Params):
    """idle_cost: while it has nothing to do (its clients idle, or a connection it cannot accept yet waits), a
    worker process runs (or waits for a CPU) at most ``most`` of a ``measure_idle`` window."""

    most: float = Field(0.25, gt=0, lt=1, description="the fraction of the window, e.g. 0.25")


@checker("idle_cost", "a listener with nothing to do costs nothing (its clients idle, or a connection waits that it "
         "cannot accept yet): its process's threads block instead of spinning (measure_idle: on a CPU or waiting for "
         "one at most a quarter of the window)",
         params=IdleCost, judges=("step_returned",))
def idle_cost(run: RunRecord, p: IdleCost) -> Verdict:
    rets = [e for e in _steps(run, "measure_idle") if isinstance(e.data.get("value"), dict)]
    if not rets:
        return unknown("idle_cost", "no measure_idle step returned")
    bad: list[Event] = []
    seen: list[str] = []
    for e in rets:
        v = e.data["value"]
        share = float(v["runnable_s"]) / max(float(v["window_s"]), 1e-9)
        seen.append(f"{e.data.get('step')}: {share:.0%} of {float(v['window_s']):.2f}s")
        if share > p.most:
            bad.append(e)
    if bad:
        return violated("idle_cost", f"a process with nothing to do ran (or waited for a CPU) more than "
                        f"{p.most:.0%} of the window: " + ", ".join(seen), bad)
    return ok("idle_cost", ", ".join(seen))
