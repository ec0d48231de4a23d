"""Checkers of what a listener costs the machine beyond its paths: the permission bits of what its start
creates and the process umask it leaves (``private_paths``), the time its process runs while its clients idle
(``idle_cost``).  Both read the harness's own step returns (``start_listener``'s ``modes``, ``measure_idle``'s
value): black-box, no listener event is needed.
"""

from __future__ import annotations

import math
import statistics

from pydantic import Field

from harness.checkers.base import RunRecord, Verdict, checker, not_judged, ok, unknown, violated
from harness.checkers.params import Params
from harness.history import Event

__all__ = ["IdleCost", "SOCKET_MODE", "DIR_MODE", "MIN_SHARE", "HOST_TOO_SLOW"]

SOCKET_MODE = 0o600  # the stop contract's socket: its owner's only (harness.reference.listener.start)
DIR_MODE = 0o700  # and the directory made for it


def _steps(run: RunRecord, kind: str) -> list[Event]:
    return [e for e in run.ordered if e.kind == "step_returned" and e.data.get("kind") == kind and e.data.get("ok")]


@checker("private_paths", "what a listener's start creates is its owner's only (socket 0600, directory 0700) and "
         "the start leaves the process umask as it found it", judges=("step_returned",), observes_exit=False)
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
    worker process's threads are on a CPU at most ``most`` of what a thread that never blocks got over a
    ``measure_idle`` window."""

    most: float = Field(0.25, gt=0, lt=1, description="the fraction of the window, e.g. 0.25")


# below this share of a CPU for a thread that never blocks (measure_idle's calibration) a window's CPU time tells
# a spinning thread from a blocked one by too little: beside 9 busy threads on 2 CPUs a spinner gets 0.2
MIN_SHARE = 0.1
HOST_TOO_SLOW = "not judged here: host too slow"  # neither a pass nor a failure: the item is skipped


@checker("idle_cost", "a listener with nothing to do costs nothing (its clients idle, or a connection waits that it "
         "cannot accept yet): its process's threads block instead of spinning (measure_idle: on a CPU at most a "
         "quarter of what a thread that never blocks got over the window)",
         params=IdleCost, judges=("step_returned",), observes_exit=False,
         timing=("the worker's own CPU time over a measure_idle window (schedstat's run time, not time waiting for "
                 "a CPU), against what the harness's calibration spin got over the same window, slice by slice (five "
                 "slices; the median is judged: a burst charged to an idle worker fills one, a spinner all). Load "
                 "lowers both alike, however it comes and goes; below a tenth of a CPU the verdict is 'not judged "
                 "here: host too slow'"))
def idle_cost(run: RunRecord, p: IdleCost) -> Verdict:
    """A window's own CPU time (schedstat's run time: time spent waiting for a CPU is the machine's, not the
    listener's) against what a spinning thread got in the same step (``cpu_share``, measured by the harness's
    calibration spin over the same window): a spinner is on a CPU for about that share of the window however loaded
    the machine, a blocked thread for none of it.  Where the window comes in slices (``slices``), the median
    slice is judged: a spinner is on a CPU in every slice, a burst charged to an idle process (interrupt work done
    while one of its threads ran, a collection) fills one.  A history of an older lastcall (no slices; or
    ``runnable_s`` only) is judged on the whole window."""
    rets = [e for e in _steps(run, "measure_idle") if isinstance(e.data.get("value"), dict)]
    if not rets:
        return unknown("idle_cost", "no measure_idle step returned")
    bad: list[Event] = []
    seen: list[str] = []
    slow: list[str] = []
    for e in rets:
        v = e.data["value"]
        window = max(float(v["window_s"]), 1e-9)
        share = float(v.get("cpu_share", 1.0))
        if share < MIN_SHARE:
            slow.append(f"{e.data.get('step')}: a thread that never blocks got {share:.0%} of a CPU")
            continue
        cost = float(v["run_s"] if "run_s" in v else v["runnable_s"]) / window
        whole = f"{e.data.get('step')}: on a CPU {cost:.0%} of {window:.2f}s, a spinning thread {share:.0%}"
        ratios = _slice_ratios(v.get("slices"))
        if ratios:
            mid = statistics.median(ratios)
            seen.append(f"{whole}; the median of {len(ratios)} slices {mid:.0%} of the spinner's")
            over = mid > p.most
        else:
            seen.append(whole)
            over = cost > p.most * share
        if over:
            bad.append(e)
    if bad:
        return violated("idle_cost", f"a process with nothing to do was on a CPU more than {p.most:.0%} of what "
                        "a thread that never blocks got: " + ", ".join(seen), bad)
    if slow:
        return not_judged("idle_cost", f"{HOST_TOO_SLOW} (" + "; ".join(slow) + f", under "
                          f"{MIN_SHARE:.0%})")
    return ok("idle_cost", ", ".join(seen))


def _slice_ratios(slices: object) -> list[float]:
    """Each slice's CPU time as a fraction of what the spinner got in it (slices where the spinner got under
    MIN_SHARE left out: they tell too little); [] where the value has no well-formed slices."""
    if not isinstance(slices, list):
        return []
    out = []
    for sl in slices:
        try:
            run_s, wall, share = float(sl["run_s"]), float(sl["wall_s"]), float(sl["cpu_share"])
        except (TypeError, KeyError, ValueError):
            return []
        if wall > 0 and share >= MIN_SHARE and math.isfinite(run_s):
            out.append(run_s / wall / share)
    return out
