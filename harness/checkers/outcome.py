"""Checkers of what the run's clients and processes saw: step results, faults, exits, KV state.

They read the harness's own events: ``step_started`` / ``step_returned``
(``step``, ``kind``, ``ok``, ``value``, ``error``, ``error_class``), ``armed``
(a failpoint armed by a named step, with the target ``pid``), ``peer_stalled`` /
``peer_closed`` (client-side faults), and the processes' ``fault_reached``,
``exit_requested``, ``exit_hook_*``, ``process_exited`` and ``allocator_state``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Hashable
from itertools import accumulate

from harness.categories import LIFECYCLE, category_of
from harness.checkers.base import RunRecord, Verdict, checker, observed, ok, unknown, violated
from harness.checkers.index import first_by, frozen, in_order
from harness.checkers.params import (
    CallsAnswered,
    CallsBounded,
    CtlCleans,
    FaultFired,
    Params,
    RestartRefused,
    StopResult,
    Within,
)
from harness.history import Event

BAD_FAULTS = {"zero_length", "oversize_length", "garbage_body", "partial_header", "reset_mid_frame"}


def _returned(run: RunRecord, *categories: str) -> list[Event]:
    """The steps' returns, of these categories (harness.categories; all when none is given)."""
    return [e for e in run.ordered if e.kind == "step_returned"
            and (not categories or category_of(e.data) in categories)]


@checker("stop_result", "a named stop (or every stop) returned what the contract says", judges=("step_returned",),
         observes_exit=False)
def stop_result(run: RunRecord, p: StopResult) -> Verdict:
    rets = [e for e in _returned(run, *LIFECYCLE) if p.step is None or e.data.get("step") == p.step]
    if not rets:
        return unknown("stop_result", f"no stop step {p.step or ''} returned in the history".replace("  ", " "))

    def result(e: Event) -> bool:  # a start "returns" True when it started, False when it was refused
        return bool(e.data.get("value")) if e.data.get("ok") else False

    bad = [e for e in rets if result(e) is not p.returns]
    if bad:
        got = bad[0].data.get("value") if bad[0].data.get("ok") else f"an error ({bad[0].data.get('error')})"
        return violated("stop_result", f"{bad[0].data.get('step')} returned {got!r}, expected {p.returns}", bad)
    return ok("stop_result", f"{len(rets)} stop(s) returned {p.returns}")


@checker("handler_stop_refused", "a stop called from a handler on the serving thread returns False: it cannot wait "
         "for its own thread, and says so instead of reporting a stop it did not make",
         judges=("stop_from_handler_returned",), observes_exit=False)
def handler_stop_refused(run: RunRecord, p: Params) -> Verdict:
    rets = run.of("stop_from_handler_returned")
    if not rets:
        return unknown("handler_stop_refused", "no stop from a handler returned in the history")
    bad = [e for e in rets if e.data.get("ok") is not False]
    if bad:
        return violated("handler_stop_refused", f"a stop from a handler returned {bad[0].data.get('ok')!r}, "
                        "expected False", bad)
    return ok("handler_stop_refused", f"{len(rets)} stop(s) from a handler returned False")


@checker("restart_refused", "a restart over a listener that cannot stop is refused (with the error class named): "
         "the old listener is left as it was", judges=("step_returned",), observes_exit=False)
def restart_refused(run: RunRecord, p: RestartRefused) -> Verdict:
    rets = [e for e in _returned(run, "start") if p.step is None or e.data.get("step") == p.step]
    if not rets:
        return unknown("restart_refused", f"no restart step {p.step or ''} returned in the history".replace("  ", " "))
    started = [e for e in rets if e.data.get("ok") and e.data.get("value") is not False]
    if started:
        return violated("restart_refused", f"{started[0].data.get('step')} started a new listener over one that "
                        "could not stop", started)
    wrong = [e for e in rets if p.error_class is not None and e.data.get("error_class") != p.error_class]
    if wrong:
        return violated("restart_refused", f"{wrong[0].data.get('step')} was refused with "
                        f"{wrong[0].data.get('error_class') or 'no error'} ({wrong[0].data.get('error')}), "
                        f"not {p.error_class}", wrong)
    return ok("restart_refused", f"{len(rets)} restart(s) refused" + (f" with {p.error_class}" if p.error_class
                                                                        else ""))


@checker("fault_fired", "every armed fault reached its site: a scenario whose fault never fired proves nothing",
         judges=("armed", "fault_reached", "peer_stalled", "peer_idle", "peer_flood", "step_returned"),
         observes_exit=False)
def fault_fired(run: RunRecord, p: FaultFired) -> Verdict:
    armed = [e for e in run.ordered if e.kind == "armed" and (p.faults is None or e.data.get("step") in p.faults)]
    if not armed and not p.faults:
        return unknown("fault_fired", "no fault was armed in the history: nothing to have fired")
    missing = set(p.faults or ()) - {e.data.get("step") for e in armed}
    latest: dict[tuple[Hashable, Hashable], int] = {}  # (pid, site) -> when a fault last reached it
    for r in run.of("fault_reached"):
        where = (frozen(r.pid), frozen(r.data.get("site")))
        latest[where] = max(latest.get(where, r.t_ns), r.t_ns)
    stalls = {e.data.get("step") for e in run.of("peer_stalled")}
    vacuous = [a for a in armed if not _reached(latest.get((frozen(a.data.get("pid")), frozen(a.data.get("site")))),
                                                a)]
    client_side = stalls | {e.data.get("step") for e in run.of("peer_idle", "peer_flood", "step_returned")}
    vacuous_names = [str(a.data.get("step")) for a in vacuous] + sorted(str(m) for m in missing - client_side)
    if vacuous_names:
        return violated("fault_fired", f"vacuous: armed fault(s) {vacuous_names} never fired, so this run proves "
                        "nothing about them", vacuous)
    return ok("fault_fired", f"{len(armed)} armed fault(s) fired")


def _reached(latest: int | None, a: Event) -> bool:
    """Whether the armed fault ``a`` was reached: its site hit in its process (last at ``latest``) since it was armed
    (``since_ns`` read only where the site was hit at all)."""
    return latest is not None and latest >= int(a.data.get("since_ns", a.t_ns))


def _stalled_windows(run: RunRecord) -> list[tuple[int, int]]:
    closed = {e.data.get("step"): e.t_ns for e in run.of("peer_closed", "peer_finished")}
    return [(e.t_ns, closed.get(e.data.get("step"), 1 << 62)) for e in run.of("peer_stalled", "peer_idle")]


@checker("served_while_stalled", "while one client stalls or idles, every other request is still served",
         judges=("peer_stalled", "peer_idle", "peer_closed", "peer_finished", "step_started", "step_returned"),
         observes_exit=False)
def served_while_stalled(run: RunRecord, p: Params) -> Verdict:
    windows = _stalled_windows(run)
    if not windows:
        return unknown("served_while_stalled", "no stalled or idle client in the history")
    starts = {e.data.get("step"): e.t_ns for e in run.of("step_started")}
    stalled = _Covered(windows)
    during = [e for e in _returned(run, "request") if e.data.get("fault") in (None, "none")
              and stalled.covers(starts.get(e.data.get("step"), 0))]
    if not during:
        return unknown("served_while_stalled", "no request was sent while a client stalled")
    bad = [e for e in during if not e.data.get("ok")]
    if bad:
        return violated("served_while_stalled", f"{len(bad)} request(s) not served while another client stalled: "
                        f"{bad[0].data.get('error')}", bad)
    return ok("served_while_stalled", f"{len(during)} request(s) served while a client stalled")


class _Covered:
    """Whether a time lies in one of the windows (a, b), both ends in: the latest end of those begun by then."""

    def __init__(self, windows: list[tuple[int, int]]) -> None:
        ordered = sorted(windows)
        self.begins = [a for a, _ in ordered]
        self.ends = list(accumulate((b for _, b in ordered), max))

    def covers(self, t: int) -> bool:
        i = bisect_right(self.begins, t)
        return i > 0 and self.ends[i - 1] >= t


@checker("requests_served", "every well-formed request the harness sent got a reply that is not an error",
         judges=("step_returned",), observes_exit=False)
def requests_served(run: RunRecord, p: Params) -> Verdict:
    plain = [e for e in _returned(run, "request") if e.data.get("fault") in (None, "none")]
    if not plain:
        return unknown("requests_served", "no well-formed request was sent")
    bad = [e for e in plain if not e.data.get("ok")]
    if bad:
        return violated("requests_served", f"{len(bad)} request(s) failed: {bad[0].data.get('error')}", bad)
    return ok("requests_served", f"{len(plain)} request(s) served")


@checker("calls_answered", "each engine call got its answer: a request drained by stop still gets its reply",
         judges=("step_returned",), observes_exit=False)
def calls_answered(run: RunRecord, p: CallsAnswered) -> Verdict:
    calls = [e for e in _returned(run, "call") if p.calls is None or e.data.get("step") in p.calls]
    missing = sorted(set(p.calls or ()) - {e.data.get("step") for e in calls})
    if not calls or missing:
        return unknown("calls_answered", f"no call step {' '.join(missing)} returned in the history"
                       .replace("  ", " "))
    bad = [e for e in calls if not e.data.get("ok")]
    if bad:
        return violated("calls_answered", f"{bad[0].data.get('step')} got no answer: {bad[0].data.get('error')}",
                        bad)
    return ok("calls_answered", f"{len(calls)} call(s) answered")


@checker("calls_bounded", "each engine call ends, answered or failed, within a bound of its start: a rank that "
         "neither answers nor dies (paused) holds no call past the client's deadline",
         judges=("step_started", "step_returned"), observes_exit=False,
         timing=("wall time from the call step's start to its return, as the harness saw it. Load lengthens it, "
                 "never shortens it; the bound is set above the client's own timeout (ipc_timeout)"))
def calls_bounded(run: RunRecord, p: CallsBounded) -> Verdict:
    began = {e.data.get("step"): e for e in run.ordered if e.kind == "step_started" and category_of(e.data) == "call"}
    calls = [e for e in _returned(run, "call") if p.calls is None or e.data.get("step") in p.calls]
    ended = {e.data.get("step") for e in calls}
    never = sorted(str(n) for n in began if (p.calls is None or n in p.calls) and n not in ended)
    if never:
        return violated("calls_bounded", f"{never[0]} never returned", [began[never[0]]])
    if not calls or set(p.calls or ()) - ended:
        missing = sorted(set(p.calls or ()) - ended)
        return unknown("calls_bounded", f"no call step {' '.join(missing)} returned in the history"
                       .replace("  ", " "))
    bound = p.within * run.scale
    took = {e.data.get("step"): (e.t_ns - began[e.data.get("step")].t_ns) / 1e9 for e in calls
            if e.data.get("step") in began}
    slow = [e for e in calls if took.get(e.data.get("step"), 0.0) > bound]
    if slow:
        name = slow[0].data.get("step")
        return violated("calls_bounded", f"{name} took {took[name]:.3f}s > {bound:g}s "
                        f"({'answered' if slow[0].data.get('ok') else 'failed'})", [began[name], slow[0]])
    slowest = max(took.values(), default=0.0)
    return ok("calls_bounded", f"{len(calls)} call(s) ended, the slowest in {slowest * 1e3:.0f} ms")


@checker("ctl_cleans", "`lastcall ctl list` finds what a killed process left behind, and `ctl delete` removes it",
         judges=("step_returned",), observes_exit=False)
def ctl_cleans(run: RunRecord, p: CtlCleans) -> Verdict:
    steps = {e.data.get("step"): e for e in _returned(run, "control")}
    found, deleted = steps.get(p.found), steps.get(p.deleted)
    if found is None or deleted is None:
        missing = [n for n, e in ((p.found, found), (p.deleted, deleted)) if e is None]
        return unknown("ctl_cleans", f"no ctl step {', '.join(missing)} returned in the history")
    dead = [a for inst in found.data.get("value") or () for a in inst.get("artifacts", ())
            if a.get("state") == "dead"]
    if not found.data.get("ok") or not dead:
        return violated("ctl_cleans", f"{p.found}: ctl list found no leftovers of a dead owner "
                        f"({found.data.get('error') or 'nothing with state dead'})", [found])
    removed = set(deleted.data.get("value") or ()) if deleted.data.get("ok") else set()
    kept = sorted(a["path"] for a in dead if a["path"] not in removed)
    if not deleted.data.get("ok") or kept:
        why = deleted.data.get("error") or f"still there: {kept}"
        return violated("ctl_cleans", f"{p.deleted}: ctl delete did not remove the dead owner's leftovers ({why})",
                        [found, deleted])
    return ok("ctl_cleans", f"{len(dead)} leftover(s) of a dead owner found and removed")


@checker("survives_bad_input", "malformed frames get bad_request or a close, are never dispatched, kill nothing",
         judges=("step_returned", "thread_crashed", "thread_exception"), observes_exit=False)
def survives_bad_input(run: RunRecord, p: Params) -> Verdict:
    sends = _returned(run, "request")
    bad_sends = [e for e in sends if e.data.get("fault") in BAD_FAULTS]
    if not bad_sends:
        return unknown("survives_bad_input", "no malformed frame was sent")
    crashed = run.of("thread_crashed", "thread_exception")
    answered_wrong = [e for e in bad_sends if isinstance(e.data.get("value"), dict)
                      and e.data["value"].get("status") not in (None, "error")]
    later = [e for e in sends if e.data.get("fault") in (None, "none") and e.t_ns > bad_sends[0].t_ns
             and not e.data.get("ok")]
    problems = crashed + answered_wrong + later
    if problems:
        what = ("a thread died" if crashed else "a malformed frame was answered as valid" if answered_wrong
                else "a good request failed after bad input")
        return violated("survives_bad_input", what, problems)
    return ok("survives_bad_input", f"{len(bad_sends)} malformed frame(s), listener kept serving")


def _pid(e: Event) -> int:
    return e.pid


@checker("exit_without_stall", "every process exits within a bound of being asked to; exit hooks are timed",
         judges=("exit_requested", "engine_died", "process_exited", "exit_hook_started", "exit_hook_finished"),
         observes_exit=True,
         timing=("wall time from the harness's request to exit (or its signal) to the process's exit, as the "
                 "launcher saw it. Load and a cold page cache lengthen it; the bound is seconds, and the fast exit "
                 "is never taken where it is judged"))
def exit_without_stall(run: RunRecord, p: Within) -> Verdict:
    evs = run.ordered
    exited = {e.pid: e for e in evs if e.kind == "process_exited"}
    asked = {}
    for e in evs:
        if e.kind in ("exit_requested", "engine_died") and e.pid not in asked:
            asked[e.pid] = e
    if not asked:
        return unknown("exit_without_stall", "no process was asked to exit")
    notes = []
    first = first_by(in_order(run, "exit_hook_started"), _pid)  # each process's first exit hook
    for e in evs:
        if e.kind == "exit_hook_finished":
            start = first.get(frozen(e.pid))
            if start is not None:
                notes.append(f"{e.rank}: exit hook {(e.t_ns - start.t_ns) / 1e6:.1f} ms")
    bad: list[Event] = []
    slow = 0
    for pid, ask in asked.items():
        end = exited.get(pid)
        if end is None or (end.t_ns - ask.t_ns) / 1e9 > p.within * run.scale:
            slow += 1
            bad += [ask] + ([end] if end else [])
    if bad:
        return violated("exit_without_stall", f"{slow} process(es) took longer than {p.within}s to exit, "
                        "or never exited", bad, tuple(notes))
    return ok("exit_without_stall", f"{len(asked)} process(es) exited in time", tuple(notes))


@checker("kv_state_consistent", "each rank's pages match what the client was told, or the client said unknown",
         judges=("step_returned", "allocator_state"), evidence=observed("worker"), observes_exit=False)
def kv_state_consistent(run: RunRecord, p: Params) -> Verdict:
    told: set[int] = set()
    unsure = False
    for e in _returned(run, "call"):
        op, offsets = e.data.get("op"), set(e.data.get("offsets") or ())
        if e.data.get("ok"):
            if op == "map":
                told |= offsets
            elif op == "unmap":
                told -= offsets
        elif e.data.get("error_class") == "StateConsistencyError" or "no reply" in str(e.data.get("error")):
            unsure = True  # the client said the outcome is unknown, or never heard back
    states = [e for e in run.ordered if e.kind == "allocator_state"]
    if not states:
        return unknown("kv_state_consistent", "no rank reported its allocator state")
    if unsure:
        return ok("kv_state_consistent", "the client raised StateConsistencyError: the outcome was reported unknown")
    bad = [e for e in states if set(e.data.get("mapped", ())) != told or e.data.get("pending")]
    if bad:
        held = sorted(bad[0].data.get("mapped") or ())
        return violated("kv_state_consistent", f"{bad[0].data.get('worker')} holds {held} "
                        f"(pending {bad[0].data.get('pending')}) but the client was told {sorted(told)}", bad)
    return ok("kv_state_consistent", f"{len(states)} rank(s) hold exactly the {len(told)} page(s) the client was told")
