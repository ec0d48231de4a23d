"""Checkers of the handshake listener's edges: a start that failed, and what a malformed request is answered.

They read the harness's own step events (``step_started`` / ``step_returned`` of the ``handshake_start`` and
``malformed_handshake`` steps, harness.scenario.handshake_steps) and the listener's ``handshake_listener_started``
/ ``thread_exited``.  Each is proven both ways in tests/test_handshake_edge_checkers.py.
"""

from __future__ import annotations

from checker_oracle.registry import checker
from harness.categories import category_of
from harness.checkers.base import RunRecord, Verdict, observed, ok, unknown, violated
from harness.checkers.params import Params
from harness.history import Event

START_KINDS = ("handshake_start", "cycle")  # the steps that start a handshake listener


@checker("failed_start_never_serves", "a handshake listener whose start failed (a held port, a thread not ready "
         "within start_timeout) never binds or serves afterwards: its thread leaves without serving",
         judges=("step_started", "step_returned", "handshake_listener_started", "thread_exited"),
         evidence=observed("listener"))
def failed_start_never_serves(run: RunRecord, p: Params) -> Verdict:
    evs = run.ordered
    started = {e.data.get("step"): e for e in evs if e.kind == "step_started" and e.data.get("kind") in START_KINDS}
    failed = [e for e in evs if e.kind == "step_returned" and e.data.get("kind") == "handshake_start"
              and not e.data.get("ok")]
    if not failed:
        return unknown("failed_start_never_serves", "no handshake_start step failed in the history")
    bad: list[Event] = []
    problems: list[str] = []
    for ret in failed:
        begin = started.get(ret.data.get("step"), ret)
        later = [s for s in started.values() if s.t_ns > begin.t_ns]  # the next start: its bind is its own
        end = min((s.t_ns for s in later), default=None)
        served = [e for e in evs if e.kind == "handshake_listener_started" and e.t_ns >= begin.t_ns
                  and (end is None or e.t_ns < end)]
        left = any(e.kind == "thread_exited" and e.t_ns >= begin.t_ns and (end is None or e.t_ns < end)
                   for e in evs)
        if served:
            bad.append(ret)
            problems.append(f"{ret.data.get('step')} failed ({ret.data.get('error_class') or ret.data.get('error')})"
                            f", and its listener then bound port {served[0].data.get('port')} and served")
            bad.append(served[0])
        elif not left:
            bad.append(ret)
            problems.append(f"{ret.data.get('step')} failed, and its listener thread never left")
    if bad:
        return violated("failed_start_never_serves", "; ".join(problems), bad)
    return ok("failed_start_never_serves", f"{len(failed)} failed start(s): each thread left without serving")


@checker("bad_handshake_refused", "every malformed handshake is refused with an error reply (never served as if "
         "well-formed), whose text holds what the step says: the peer learns what was wrong",
         judges=("step_returned",))
def bad_handshake_refused(run: RunRecord, p: Params) -> Verdict:
    bad_steps = [e for e in run.ordered if e.kind == "step_returned" and e.data.get("kind") == "malformed_handshake"
                 and category_of(e.data) == "request"]
    if not bad_steps:
        return unknown("bad_handshake_refused", "no malformed_handshake step returned in the history")
    problems: list[str] = []
    evidence: list[Event] = []
    for e in bad_steps:
        value, name, says = e.data.get("value"), e.data.get("step"), e.data.get("says")
        if not isinstance(value, dict):
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
