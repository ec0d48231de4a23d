"""Checkers of the handshake listener's edges: a start that failed, and what a malformed request is answered.

They read the harness's own step events (``step_started`` / ``step_returned`` of the ``handshake_start`` and
``malformed_handshake`` steps, harness.scenario.handshake_steps) and the listener's ``handshake_listener_started``
/ ``thread_exited``.  Each is proven both ways in tests/test_handshake_edge_checkers.py.
"""

from __future__ import annotations

from bisect import bisect_right

from harness.categories import category_of
from harness.checkers.base import RunRecord, Verdict, checker, observed, ok, unknown, violated
from harness.checkers.index import Line, line
from harness.checkers.params import Params, RequestStep
from harness.history import Event

START_KINDS = ("handshake_start", "cycle")  # the steps that start a handshake listener
OVERSIZED = "oversized"  # the malformed_handshake kind over the size limit: dropped unread, never answered


@checker("failed_start_never_serves", "a handshake listener whose start failed (a held port, a thread not ready "
         "within start_timeout) never binds or serves afterwards: its thread leaves without serving",
         judges=("step_started", "step_returned", "handshake_listener_started", "thread_exited"),
         evidence=observed("listener"), observes_exit=True)
def failed_start_never_serves(run: RunRecord, p: Params) -> Verdict:
    evs = run.ordered
    started = {e.data.get("step"): e for e in evs if e.kind == "step_started" and e.data.get("kind") in START_KINDS}
    failed = [e for e in evs if e.kind == "step_returned" and e.data.get("kind") == "handshake_start"
              and not e.data.get("ok")]
    if not failed:
        return unknown("failed_start_never_serves", "no handshake_start step failed in the history")
    bad: list[Event] = []
    problems: list[str] = []
    starts = sorted(s.t_ns for s in started.values())
    binds, exits = line(run, "handshake_listener_started"), line(run, "thread_exited")
    for ret in failed:
        begin = started.get(ret.data.get("step"), ret)
        later = bisect_right(starts, begin.t_ns)  # the next start: its bind is its own
        end = starts[later] if later < len(starts) else None
        served = _first(binds, begin.t_ns, end)
        left = _first(exits, begin.t_ns, end) is not None
        if served is not None:
            bad.append(ret)
            problems.append(f"{ret.data.get('step')} failed ({ret.data.get('error_class') or ret.data.get('error')})"
                            f", and its listener then bound port {served.data.get('port')} and served")
            bad.append(served)
        elif not left:
            bad.append(ret)
            problems.append(f"{ret.data.get('step')} failed, and its listener thread never left")
    if bad:
        return violated("failed_start_never_serves", "; ".join(problems), bad)
    return ok("failed_start_never_serves", f"{len(failed)} failed start(s): each thread left without serving")


def _first(events: Line, begin: int, end: int | None) -> Event | None:
    """The first of ``events`` from ``begin`` and before ``end`` (None: no end)."""
    e = events.first_from(begin)
    return e if e is not None and (end is None or e.t_ns < end) else None


@checker("bad_handshake_refused", "every malformed handshake is refused with an error reply (never served as if "
         "well-formed), whose text holds what the step says: the peer learns what was wrong; an oversized one is "
         "dropped unread (no reply: ZeroMQ's size limit disconnects the peer before the listener reads it)",
         judges=("step_returned",), observes_exit=False)
def bad_handshake_refused(run: RunRecord, p: Params) -> Verdict:
    bad_steps = [e for e in run.ordered if e.kind == "step_returned" and e.data.get("kind") == "malformed_handshake"
                 and category_of(e.data) == "request"]
    if not bad_steps:
        return unknown("bad_handshake_refused", "no malformed_handshake step returned in the history")
    problems: list[str] = []
    evidence: list[Event] = []
    for e in bad_steps:
        value, name, says = e.data.get("value"), e.data.get("step"), e.data.get("says")
        if e.data.get("bad") == OVERSIZED:
            if isinstance(value, dict) and value.get("status") is None:
                continue
            problems.append(f"{name} ({OVERSIZED}) was read and answered ({value!r}), not dropped unread"
                            if isinstance(value, dict) else f"{name} ({OVERSIZED}): {e.data.get('error')}")
        elif not isinstance(value, dict):
            problems.append(f"{name} ({e.data.get('bad')}): {e.data.get('error') or 'no reply recorded'}")
        elif value.get("status") == "ok":
            problems.append(f"{name} ({e.data.get('bad')}) was served as if well-formed")
        elif value.get("status") != "error":
            problems.append(f"{name} ({e.data.get('bad')}) got no reply")
        elif says and str(says).lower() not in str(value.get("error", "")).lower():
            problems.append(f"{name} ({e.data.get('bad')}) was refused with {value.get('error')!r}, which does "
                            f"not say {says!r}")
        else:
            continue
        evidence.append(e)
    if problems:
        return violated("bad_handshake_refused", "; ".join(problems), evidence)
    return ok("bad_handshake_refused", f"{len(bad_steps)} malformed handshake(s), each refused with an error")


@checker("no_serving_after_stop", "a handshake request still waiting as its listener's stop begins (the named "
         "step, held with the thread's wake-up) is never served: the thread checks the stop flag after every "
         "wake-up and leaves, so the peer gets no reply rather than an answer from a listener being shut down",
         judges=("step_returned", "stop_started", "handshake_served"), evidence=observed("listener"),
         observes_exit=False)
def no_serving_after_stop(run: RunRecord, p: RequestStep) -> Verdict:
    rets = [e for e in run.ordered if e.kind == "step_returned" and e.data.get("step") == p.request
            and category_of(e.data) == "request"]
    if not rets:
        return unknown("no_serving_after_stop", f"no request step {p.request} returned in the history")
    ret = rets[0]
    stop = next((e for e in run.ordered if e.kind == "stop_started" and e.t_ns < ret.t_ns), None)
    if stop is None:
        return unknown("no_serving_after_stop", f"{p.request} returned before any stop began: nothing raced the stop")
    if ret.data.get("ok"):
        late = [e for e in run.ordered if e.kind == "handshake_served" and e.t_ns > stop.t_ns]
        return violated("no_serving_after_stop", f"{p.request} was served ({ret.data.get('value')!r}) after the "
                        "listener's stop began", [stop, *late, ret])
    return ok("no_serving_after_stop", f"{p.request}, waiting as the stop began, was left unanswered")
