"""Checkers of the races stop() runs against the serving thread and against another stop.

The reference takes its listener lock around every decision that races with stop (accept, frame completion,
dispatch) and serialises teardown between concurrent stops, so its history orders each decision exactly
before or after ``stop_started``.  These checkers read that order (the dispatch decision's is
``no_late_dispatch``'s): a race lost shows as an event on the wrong side of the stop.  The stress scenarios
(harness.scenario.stress) widen each racing point so that a dropped lock loses its race every time.

A listener's *life* runs from its ``listener_started`` to the next one on the same (pid, label): a restart in
the same process reuses the label.
"""

from __future__ import annotations

from harness.checkers.base import RunRecord, Verdict, checker, key_of, observed, ok, violated
from harness.checkers.params import Params
from harness.history import Event

__all__ = ["lives"]

TEARDOWN_STEPS = ("unlink", "close", "rmdir", "unlink_skipped")


def lives(events: list[Event]) -> list[list[Event]]:
    """The history cut into listener lives: per (pid, label), a new life at each ``listener_started``."""
    current: dict[tuple[int, str], list[Event]] = {}
    out: list[list[Event]] = []
    for e in events:
        if "listener" not in e.data:
            continue
        key = key_of(e)
        if e.kind == "listener_started" or key not in current:
            current[key] = []
            out.append(current[key])
        current[key].append(e)
    return out


@checker("stop_snapshot_exact",
         "once stop has begun no connection joins the listener, and none whose read it cancelled is answered",
         judges=("listener_started", "stop_started", "accepted", "reads_cancelled", "dispatch_started",
                 "dispatch_refused"), evidence=observed("listener"), observes_exit=False)
def stop_snapshot_exact(run: RunRecord, p: Params) -> Verdict:
    bad: list[Event] = []
    judged = 0
    for life in lives(run.ordered):
        stop = next((e for e in life if e.kind == "stop_started"), None)
        if stop is None:
            continue
        judged += 1
        late = [e for e in life if e.kind == "accepted" and e.t_ns > stop.t_ns]  # missed by stop's snapshot
        cancelled_at: dict[object, int] = {}
        answered: list[Event] = []
        for e in life:
            if e.kind == "reads_cancelled":
                for conn in e.data.get("conns", ()):
                    cancelled_at.setdefault(conn, e.t_ns)
            elif e.kind in ("dispatch_started", "dispatch_refused") and e.data.get("conn") in cancelled_at:
                answered.append(e)  # queued after stop cancelled its read
        if late or answered:
            bad += [stop, *late, *answered]
    if bad:
        what = [f"{e.kind} conn {e.data.get('conn')}" for e in bad if e.kind != "stop_started"]
        return violated("stop_snapshot_exact", f"stop's snapshot of the connections was not exact: "
                        f"{', '.join(what[:4])}{' ...' if len(what) > 4 else ''} after stop began", bad)
    return ok("stop_snapshot_exact", f"{judged} stop(s), no connection accepted or answered behind one")


@checker("teardown_once",
         "a listener is torn down once: concurrent stops never both tear down, nothing is torn down after True",
         judges=("listener_started", "teardown_step", "stop_returned"), evidence=observed("listener"),
         observes_exit=False)
def teardown_once(run: RunRecord, p: Params) -> Verdict:
    bad: list[Event] = []
    for life in lives(run.ordered):
        done: Event | None = None  # the first stop of this life that returned True
        seen: dict[str, Event] = {}
        for e in life:
            if e.kind == "stop_returned":
                if e.data.get("ok") and done is None:
                    done = e
                elif not e.data.get("ok"):
                    seen.clear()  # a failed stop keeps everything: its retry tears down again
            elif e.kind == "teardown_step" and e.data.get("step") in TEARDOWN_STEPS:
                step = str(e.data.get("step"))
                if done is not None:
                    bad += [done, e]
                elif step in seen and step != "unlink_skipped":
                    bad += [seen[step], e]
                seen.setdefault(step, e)
    if bad:
        return violated("teardown_once", f"a listener was torn down twice ({len(bad) // 2} step(s) repeated or "
                        "after a stop had returned True)", bad)
    return ok("teardown_once")
