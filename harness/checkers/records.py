"""Checkers of the listener's own record: that what its events say happened did (the checkers of the stop
contract read those events, so a record that drops or misnames one lets them pass on what never happened).

* ``dispatches_recorded``: every backend call the listener reports finished it reported started (no_late_dispatch
  and handler_drained read ``dispatch_started``; a listener that stops recording it passes them on nothing);
* ``close_reasons``: a connection the listener says it closed as "cancelled by stop" was one a stop cancelled
  (named in a ``reads_cancelled`` before its close), and none closed before any stop says so; and no connection
  is recorded closed twice (a close after the close: in a listener of raw descriptors, the second closes a
  descriptor number the process may have handed out again);
* ``exit_hook_reports``: an exit hook's ``exit_hook_finished`` says ``ok`` exactly when it left no listener
  registered (a hook that reports every listener stopped while one could not drain hides the stuck one).
"""

from __future__ import annotations

from harness.checkers.base import RunRecord, Verdict, checker, observed, ok, unknown, violated
from harness.checkers.params import Params
from harness.history import Event

__all__: list[str] = []


def _conn_key(e: Event) -> tuple[int, str, object]:
    return e.pid, str(e.data.get("listener")), e.data.get("conn")


@checker("dispatches_recorded", "every backend call the listener reports finished it reported started, on the same "
         "connection (the checkers of late dispatches read the starts)",
         judges=("dispatch_started", "dispatch_finished"), evidence=observed("listener"), observes_exit=True)
def dispatches_recorded(run: RunRecord, p: Params) -> Verdict:
    started: dict[tuple[int, str, object], int] = {}
    finished = 0
    bad: list[Event] = []
    for e in run.ordered:
        if e.kind == "dispatch_started":
            started[_conn_key(e)] = started.get(_conn_key(e), 0) + 1
        elif e.kind == "dispatch_finished":
            finished += 1
            if started.get(_conn_key(e), 0) <= 0:
                bad.append(e)
            else:
                started[_conn_key(e)] -= 1
    if not finished:
        return unknown("dispatches_recorded", "no dispatch_finished in the history: no backend call to judge")
    if bad:
        return violated("dispatches_recorded", f"{len(bad)} of {finished} dispatch(es) finished without being "
                        f"recorded as started (first: conn {bad[0].data.get('conn')}, {bad[0].data.get('cmd')})", bad)
    return ok("dispatches_recorded", f"{finished} dispatch(es), each recorded started first")


@checker("close_reasons", "a connection the listener says a stop cancelled was cancelled by a stop before it closed, "
         "and none is recorded closed twice",
         judges=("listener_started", "reads_cancelled", "connection_closed"), evidence=observed("listener"),
         observes_exit=True)
def close_reasons(run: RunRecord, p: Params) -> Verdict:
    cancelled: set[tuple[int, str, object]] = set()
    said = 0
    bad: list[Event] = []
    life: dict[tuple[int, str], int] = {}  # a restarted listener numbers its connections from 1 again
    closed: dict[tuple[int, str, int, object], Event] = {}
    twice: list[Event] = []
    for e in run.ordered:
        if e.kind == "listener_started":
            key = (e.pid, str(e.data.get("listener")))
            life[key] = life.get(key, 0) + 1
        elif e.kind == "reads_cancelled":
            cancelled.update((e.pid, str(e.data.get("listener")), c) for c in e.data.get("conns", ()))
        elif e.kind == "connection_closed":
            which = (e.pid, str(e.data.get("listener")), life.get((e.pid, str(e.data.get("listener"))), 0),
                     e.data.get("conn"))
            if which in closed:
                twice += [closed[which], e]
            closed.setdefault(which, e)
            if str(e.data.get("why", "")).startswith("cancelled by stop"):
                said += 1
                if _conn_key(e) not in cancelled:
                    bad.append(e)
    closes = len(run.of("connection_closed"))
    if not closes:
        return unknown("close_reasons", "no connection_closed in the history")
    if bad:
        return violated("close_reasons", f"{len(bad)} connection(s) recorded as 'cancelled by stop' that no stop "
                        f"cancelled (first: conn {bad[0].data.get('conn')})", bad)
    if twice:
        first, second = twice[0].data, twice[1].data
        return violated("close_reasons", f"conn {first.get('conn')} of {first.get('listener')} recorded closed twice: "
                        f"{first.get('why')!r}, then {second.get('why')!r}", twice[:2])
    return ok("close_reasons", f"{closes} close(s), {said} of them by a stop that cancelled them")


@checker("exit_hook_reports", "an exit hook's record says ok exactly when it left no listener registered: one "
         "that could not drain is never reported stopped",
         judges=("exit_hook_finished",), evidence={"worker": ("exit_hook_finished",)}, observes_exit=True)
def exit_hook_reports(run: RunRecord, p: Params) -> Verdict:
    ends = run.of("exit_hook_finished")
    if not ends:
        return unknown("exit_hook_reports", "no exit hook finished in the history")
    bad = [e for e in ends if bool(e.data.get("ok")) != (int(e.data.get("left") or 0) == 0)]
    said = "; ".join(f"pid {e.pid}: ok {e.data.get('ok')}, {e.data.get('left')} left" for e in ends)
    if bad:
        return violated("exit_hook_reports", f"{len(bad)} exit hook(s) whose ok does not say what they left: {said}",
                        bad)
    return ok("exit_hook_reports", said)
