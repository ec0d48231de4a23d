"""Checkers of the stop contract, judged from the listener's own events.

Events used (emitted by the reference listener, worker and registry; a target
adapter emits the same names): ``stop_started``, ``reads_cancelled``,
``drain_started``, ``drain_finished``, ``teardown_step``, ``stop_returned``,
``frame_started``, ``frame_completed``, ``connection_closed``,
``dispatch_started``, ``dispatch_finished``, ``allocator_torn_down``,
``teardown_deferred``.  Each carries ``listener`` (its label); with the pid it
names one listener.

Each checker's work is O(n log n) in the history's events (a history anyone may write is judged by ``lastcall
report``): a listener's (or process's) events are looked up in the indexes of harness.checkers.index, each
window found by bisection, and its stops, stop returns, teardowns and exit hooks taken in time order by what
harness.checkers.sweep and .reads keep, instead of rescanning the history for each; evidence that grows with
pairs (a stop's return and each handler inside) is collected up to MAX_COLLECTED events, with a note.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from itertools import chain

from harness.categories import category_of
from harness.checkers.base import RunRecord, Verdict, checker, key_of, observed, ok, unknown, violated
from harness.checkers.index import (
    EMPTY,
    Collected,
    Key,
    Line,
    by_key,
    by_pid,
    first_by,
    frozen,
    hook_end,
    in_order,
    stops,
)
from harness.checkers.params import Params, StopLatency, Within
from harness.checkers.reads import ADDS, CANCELS, ENDS, Listener
from harness.checkers.sweep import Busy, Open, Stopped
from harness.history import Event

DISPATCH = ("dispatch_started", "dispatch_finished")


def _dispatches_unrecorded(run: RunRecord) -> str | None:
    """Why the listener's record of its dispatches cannot be judged, or None: the listener answered well-formed
    requests (a send whose reply is not an error, or a dispatch_finished) yet recorded no ``dispatch_started``
    at all, so "no late dispatch" would be an ok on nothing (its other events prove only that it was observed)."""
    if run.of("dispatch_started"):
        return None
    finished = run.of("dispatch_finished")
    served = [e for e in run.of("step_returned") if e.data.get("ok") and category_of(e.data) == "request"
              and e.data.get("fault") in (None, "none") and isinstance(e.data.get("value"), dict)
              and e.data["value"].get("status") not in (None, "error")]
    if not finished and not served:
        return None  # nothing was dispatched: there is nothing to record
    return (f"the listener recorded no dispatch_started, yet {len(served)} request(s) got a reply and "
            f"{len(finished)} dispatch(es) finished: its dispatches are not recorded, there is nothing to judge")


@checker("no_late_dispatch", "nothing is dispatched once stop has begun (frames completing later, queued ones)",
         judges=("stop_started", "listener_started", "dispatch_started", "dispatch_finished", "step_returned"),
         evidence=observed("listener"), observes_exit=False)
def no_late_dispatch(run: RunRecord, p: Params) -> Verdict:
    unrecorded = _dispatches_unrecorded(run)
    if unrecorded:
        return unknown("no_late_dispatch", unrecorded)
    windows = stops(run)
    if not windows:
        return unknown("no_late_dispatch", "no stop_started in the history: no stop to judge against")
    starts = by_key(run, "dispatch_started")
    for stop, end in windows:
        line = starts.get(key_of(stop), EMPTY)
        lo, hi = line.between(stop.t_ns, end, after=True, before=True)
        late = line.events[lo:hi]
        if late:
            return violated("no_late_dispatch",
                            f"{len(late)} request(s) dispatched after stop began on {stop.data.get('listener')}: "
                            f"{[e.data.get('cmd') for e in late]}", [stop, *late])
    return ok("no_late_dispatch", f"{len(windows)} stop(s), no dispatch after any of them")


@checker("no_dispatch_after_teardown", "no backend call starts, or is still running, once the allocator is torn down",
         judges=("allocator_torn_down", "dispatch_started", "dispatch_finished", "step_returned"),
         evidence=observed("listener", "worker"), observes_exit=False)
def no_dispatch_after_teardown(run: RunRecord, p: Params) -> Verdict:
    evs = run.ordered
    torn = {e.pid: e for e in evs if e.kind == "allocator_torn_down"}
    if not torn:
        return ok("no_dispatch_after_teardown", "no allocator was torn down")
    unrecorded = _dispatches_unrecorded(run)
    if unrecorded:
        return unknown("no_dispatch_after_teardown", unrecorded)
    open_: dict[tuple[int, str, object], Event] = {}
    bad: list[Event] = []
    for e in evs:
        k = (e.pid, str(e.data.get("listener")), e.data.get("conn"))
        if e.kind == "dispatch_started":
            open_[k] = e
            if e.pid in torn and e.t_ns > torn[e.pid].t_ns:
                bad.append(e)
        elif e.kind == "dispatch_finished":
            start = open_.pop(k, None)
            if e.pid in torn and start is not None and start.t_ns < torn[e.pid].t_ns < e.t_ns:
                bad += [start, e]
    bad += [e for e in open_.values() if e.pid in torn and e.t_ns < torn[e.pid].t_ns]
    if bad:
        return violated("no_dispatch_after_teardown",
                        f"a backend call overlapped or followed allocator teardown ({len(bad)} events)",
                        [*{e.pid: torn[e.pid] for e in bad}.values(), *bad])
    return ok("no_dispatch_after_teardown")


@checker("reads_cancelled", "reads in progress when stop begins are cancelled at once, not after the drain",
         judges=("stop_started", "accepted", "frame_started", "frame_completed", "dispatch_finished",
                 "dispatch_refused", "reads_cancelled", "connection_closed", "peer_stalled", "peer_closed"),
         evidence=observed("listener"), observes_exit=False,
         timing=("wall time (monotonic, the listener's own events) from stop_started to each live read's cancel or "
                 "close. Load adds the scheduling of the listener's thread, milliseconds; the bound (500 ms in the "
                 "library) is the drain's, and a listener that leaves reads to the drain misses it by the drain's "
                 "seconds"))
def reads_cancelled(run: RunRecord, p: Within) -> Verdict:
    windows = stops(run)
    if not windows:
        return unknown("reads_cancelled", "no stop_started in the history")
    started = {key_of(s): s for s, _ in windows}
    within_ns = int(p.within * run.scale * 1e9)
    bad = Collected()
    found = checked = 0
    changes, cancels = by_key(run, *ADDS, *ENDS), by_key(run, *CANCELS)
    listeners: dict[Key, Listener] = {}
    for stop, _end in windows:
        key = key_of(stop)
        if key not in listeners:
            listeners[key] = Listener(changes.get(key, EMPTY), cancels.get(key, EMPTY), within_ns)
        live, missed = listeners[key].stop_at(stop.t_ns)
        checked += live
        found += len(missed)
        if missed and not bad.capped:
            bad.add(listeners[key].in_order(missed))
    # the harness's own view: a stalled peer must see its connection closed within the bound
    stop_t = min((s.t_ns for s in started.values()), default=0)
    closed = first_by(run.of("peer_closed"), _step)
    for stall in run.of("peer_stalled"):  # judged only where the harness watched for the close
        close = closed.get(frozen(stall.data.get("step")))
        if stall.t_ns < stop_t and close is not None and close.t_ns > stop_t + within_ns:
            found += 1
            bad.add((stall,))
        checked += 1
    if found:
        return violated("reads_cancelled", f"{found} read(s) in progress at stop were not cancelled within "
                        f"{p.within}s", [*started.values(), *bad.events], bad.notes)
    return ok("reads_cancelled", f"{checked} read(s) in progress at stop, all cancelled")


@checker("handler_drained", "a handler inside the backend when stop begins finishes before stop returns True",
         judges=("stop_returned", "dispatch_started", "dispatch_finished", "step_returned"),
         evidence=observed("listener"), observes_exit=False)
def handler_drained(run: RunRecord, p: Params) -> Verdict:
    bad = Collected()
    lines = by_key(run, *DISPATCH)
    inflight: dict[Key, Open] = {}  # each listener's handlers inside the backend, as of its last stop's return
    for ret in in_order(run, "stop_returned"):
        if not ret.data.get("ok"):
            continue
        key = key_of(ret)
        if key not in inflight:
            inflight[key] = Open(lines.get(key, EMPTY), "dispatch_started", _conn)
        held = inflight[key].upto(ret.t_ns)
        if held and not bad.add(chain(held.values(), (ret,))):
            break
    # a stop step of the harness (the registry's stop of every listener) that reported True
    dispatches = in_order(run, *DISPATCH)
    every = Open(Line(dispatches, [e.t_ns for e in dispatches]), "dispatch_started", _key_conn)
    for ret in in_order(run, "step_returned"):
        if bad.capped:
            break
        if category_of(ret.data) == "stop" and ret.data.get("ok") and ret.data.get("value") is True:
            held = every.upto(ret.t_ns)
            if held:
                bad.add(chain(held.values(), (ret,)))
    if bad.events:
        return violated("handler_drained", "stop returned True while a handler was still inside the backend",
                        bad.events, bad.notes)
    return ok("handler_drained")


def _step(e: Event) -> object:
    return e.data.get("step")


def _conn(e: Event) -> object:
    return e.data.get("conn")


def _key_conn(e: Event) -> tuple[Key, object]:
    return key_of(e), e.data.get("conn")


@checker("retained_for_retry", "a stop that returns False tears nothing down; the listener stays for a retry",
         judges=("stop_started", "stop_returned", "teardown_step"), evidence=observed("listener"), observes_exit=False)
def retained_for_retry(run: RunRecord, p: Params) -> Verdict:
    falses = [e for e in in_order(run, "stop_returned") if e.data.get("ok") is False]
    marks = by_key(run, "stop_returned", "stop_started")
    steps = by_key(run, "teardown_step", keep=_tears_down)
    bad = Collected()
    for ret in falses:
        times = marks.get(key_of(ret), EMPTY).times
        i = bisect_left(times, ret.t_ns)  # the last stop start or return before it begins its window
        line = steps.get(key_of(ret), EMPTY)
        lo, hi = line.between(times[i - 1] if i else 0, ret.t_ns)
        if hi > lo and not bad.add(line.events[lo:hi]):
            break
    if bad.events:
        return violated("retained_for_retry", "a stop that returned False had already torn down",
                        [*falses, *bad.events], bad.notes)
    return ok("retained_for_retry", f"{len(falses)} stop(s) returned False, none tore anything down")


def _tears_down(e: Event) -> bool:
    return e.data.get("step") in ("close", "unlink", "rmdir")


@checker("teardown_deferred", "the allocator is torn down only after every listener of its process has stopped",
         judges=("allocator_torn_down", "listener_started", "stop_returned"), evidence=observed("listener", "worker"),
         observes_exit=False)
def teardown_deferred(run: RunRecord, p: Params) -> Verdict:
    bad = Collected()
    returns = by_pid(run, "stop_returned")
    started = {pid: {str(e.data.get("listener")) for e in line.events}
               for pid, line in by_pid(run, "listener_started").items()}
    procs: dict[int, Stopped] = {}
    for torn in in_order(run, "allocator_torn_down"):
        if torn.pid not in procs:
            procs[torn.pid] = Stopped(returns.get(torn.pid, EMPTY), started.get(torn.pid, set()))
        proc = procs[torn.pid]
        if proc.unstopped_at(torn.t_ns) and not bad.add(chain(proc.failed(), (torn,))):
            break
    if bad.events:
        return violated("teardown_deferred", "the allocator was torn down although a listener had not stopped",
                        bad.events, bad.notes)
    return ok("teardown_deferred")


def _phases(run: RunRecord, stop: Event) -> dict[str, float]:
    """Seconds per phase of the stop that began with ``stop`` (as far as the events tell)."""
    k = key_of(stop)

    def t(kind: str, keep: Callable[[Event], bool] | None = None) -> int | None:
        e = by_key(run, kind, keep=keep).get(k, EMPTY).first_from(stop.t_ns)
        return None if e is None else e.t_ns

    out: dict[str, float] = {}
    cancel, d0, d1 = t("reads_cancelled"), t("drain_started"), t("drain_finished")
    ret = t("stop_returned", _returned_true)
    if cancel is not None:
        out["stop_accepting"] = out["cancel_reads"] = (cancel - stop.t_ns) / 1e9
    if d0 is not None and d1 is not None:
        out["drain"] = (d1 - d0) / 1e9
    if d1 is not None and ret is not None:
        out["teardown"] = (ret - d1) / 1e9
    if ret is not None:
        out["total"] = (ret - stop.t_ns) / 1e9
    return out


def _returned_true(e: Event) -> bool:
    return bool(e.data.get("ok"))


@checker("stop_latency", "stop (or one phase of it) completes within a generous bound",
         judges=("step_started", "step_returned", "stop_started", "reads_cancelled", "drain_started",
                 "drain_finished", "stop_returned"),
         evidence=lambda p: {} if p.step is not None else observed("listener"),
         observes_exit=False,
         timing=("wall time from stop_started (or the named step's start) to the phase's end or stop_returned. "
                 "Load lengthens it, never shortens it; the bound is generous (2 s by default against milliseconds "
                 "on the reference)"))  # a named step: black-box
def stop_latency(run: RunRecord, p: StopLatency) -> Verdict:
    evs = run.ordered
    if p.step is not None:
        began = [e for e in evs if e.kind == "step_started" and e.data.get("step") == p.step]
        done = [e for e in evs if e.kind == "step_returned" and e.data.get("step") == p.step]
        if not began or not done:
            return unknown("stop_latency", f"step {p.step!r} has no start and return in the history")
        took = (done[0].t_ns - began[0].t_ns) / 1e9
        if took > p.within * run.scale:
            return violated("stop_latency", f"step {p.step} took {took:.3f}s > {p.within * run.scale}s",
                            [began[0], done[0]])
        return ok("stop_latency", f"step {p.step} took {took * 1e3:.1f} ms")
    begun = [s for s, _ in stops(run)]
    if not begun:
        return unknown("stop_latency", "no stop in the history")
    figures = {f"{s.data.get('listener')}": _phases(run, s) for s in begun}
    slow = {k: v[p.phase] for k, v in figures.items() if p.phase in v and v[p.phase] > p.within * run.scale}
    never = [k for k, v in figures.items() if p.phase not in v]
    if slow:
        return violated("stop_latency", f"{p.phase} over {p.within}s: "
                        + ", ".join(f"{k} {v:.3f}s" for k, v in slow.items()), begun)
    if never and p.phase == "total":
        return violated("stop_latency", f"stop never returned True on {never}", begun)
    worst = max((v[p.phase] for v in figures.values() if p.phase in v), default=0.0)
    return ok("stop_latency", f"worst {p.phase} {worst * 1e3:.2f} ms over {len(begun)} stop(s)")


def _lives(run: RunRecord) -> list[list[Event]]:
    """Each listener's events, split into its lives (a restart reuses the label: a new listener_started after the
    current life's listener_started or listener_unregistered begins a new life), listener by listener."""
    def make() -> list[list[Event]]:
        lives: dict[Key, list[list[Event]]] = {}
        ended: set[Key] = set()  # the listeners whose current life holds a listener_started or _unregistered
        for e in run.ordered:
            if "listener" not in e.data:
                continue
            key = key_of(e)
            mine = lives.setdefault(key, [[]])
            if e.kind == "listener_started" and key in ended:
                mine.append([])
                ended.discard(key)
            if e.kind in ("listener_started", "listener_unregistered"):
                ended.add(key)
            mine[-1].append(e)
        return [life for each in lives.values() for life in each]

    return run.derived("lives", make)


@checker("registration_kept", "a listener leaves its registry only once a stop of it returned True: a failed stop "
         "(False, or a cleanup error) keeps it registered for a retry",
         judges=("listener_registered", "listener_unregistered", "stop_returned"),
         evidence={**observed("listener"), "worker": ("listener_registered",)}, observes_exit=False)
def registration_kept(run: RunRecord, p: Params) -> Verdict:
    bad: list[tuple[Event, Event | None]] = []  # (the unregistration, the stop before it, if any)
    gone = 0
    for life in _lives(run):
        last: Event | None = None  # the life's last stop_returned so far
        for e in life:
            if e.kind == "stop_returned":
                last = e
            elif e.kind == "listener_unregistered":
                gone += 1
                if last is None or not last.data.get("ok"):
                    bad.append((e, last))
    if bad:
        e, last = bad[0]
        why = "its last stop returned False" if last is not None else "no stop of it had returned"
        return violated("registration_kept", f"{e.data.get('listener')} left its registry although {why}: "
                        f"nothing is left to retry ({len(bad)} such)",
                        [x for u, s in bad for x in ((s, u) if s is not None else (u,))])
    return ok("registration_kept", f"{gone} listener(s) left the registry, each after a stop returned True")


@checker("failed_stop_retried", "a listener whose stop returned False is stopped later: a retry, or the exit hook, "
         "returns True for it", judges=("listener_started", "stop_returned"), evidence=observed("listener"),
         observes_exit=True)
def failed_stop_retried(run: RunRecord, p: Params) -> Verdict:
    failed, open_ = 0, []
    for life in _lives(run):
        pending: Event | None = None
        for e in (x for x in life if x.kind == "stop_returned"):
            if not e.data.get("ok"):
                failed += pending is None
                pending = pending or e
            else:
                pending = None
        if pending is not None:
            open_.append(pending)
    if not failed:  # as retained_for_retry: the listener was observed, and no stop of it failed
        return ok("failed_stop_retried", "no stop returned False: nothing to retry")
    if open_:
        return violated("failed_stop_retried", f"{len(open_)} listener(s) whose stop returned False were never "
                        f"stopped afterwards: {[e.data.get('listener') for e in open_]}", open_)
    return ok("failed_stop_retried", f"{failed} failed stop(s), each retried until it returned True")


@checker("exit_hook_stops_the_rest", "the exit hook tells every listener to stop before it waits for any, so one "
         "that cannot drain does not use up the others' share of the one budget: no stop begins once a drain of the "
         "hook has ended, and only listeners with a handler in flight are left registered",
         judges=("exit_hook_started", "exit_hook_finished", "stop_started", "drain_finished", "dispatch_started",
                 "dispatch_finished"),
         evidence={"worker": ("exit_hook_started",)}, observes_exit=True)
def exit_hook_stops_the_rest(run: RunRecord, p: Params) -> Verdict:
    """For each worker's exit hook: every listener's ``stop_started`` inside the hook comes before the first
    ``drain_finished`` inside it (the hook tells them all to stop, then waits), and at most as many listeners
    are left registered as had a handler inside the backend when it began (every other drains at once).  The
    second is judged where the listeners' clients read their replies: a reply nobody reads also holds a drain."""
    bad = Collected()
    notes: list[str] = []
    hooks = [(start, end) for start in run.of("exit_hook_started") if (end := hook_end(run, start)) is not None]
    busy = _busy_at(run, [start for start, _ in hooks])  # a hook that never finished: exit_hook_within's to judge
    drains, begun = by_pid(run, "drain_finished"), by_pid(run, "stop_started")
    for start, end in hooks:
        drained = drains.get(start.pid, EMPTY).first_from(start.t_ns)
        if drained is not None and drained.t_ns > end.t_ns:
            drained = None  # its first drain_finished inside the hook: none
        stops_of = begun.get(start.pid, EMPTY)
        lo, hi = (0, 0) if drained is None else stops_of.between(drained.t_ns, end.t_ns, after=True)
        left = int(end.data.get("left") or 0)
        n = busy[start.pid, start.t_ns]
        notes.append(f"pid {start.pid}: {start.data.get('listeners')} listener(s) at the hook, {n} with a "
                     f"handler in flight, {left} left" + (f", {hi - lo} stop(s) begun only after a drain ended"
                                                          if hi > lo else ""))
        if drained is not None and hi > lo:
            bad.add(chain((start, drained), (stops_of.events[i] for i in range(lo, hi))))
        elif left > n:
            bad.add((start, end))
    if not notes:
        return unknown("exit_hook_stops_the_rest", "no exit hook finished in the history")
    if bad.events:
        return violated("exit_hook_stops_the_rest", "an exit hook did not stop every listener it could: "
                        + "; ".join(notes), bad.events, bad.notes)
    return ok("exit_hook_stops_the_rest", "; ".join(notes))


def _busy_at(run: RunRecord, starts: list[Event]) -> dict[tuple[int, int], int]:
    """For each exit hook's start, by (pid, time): how many of its process's listeners had a handler inside the
    backend then (a dispatch_started on a connection not matched by as many dispatch_finished), the starts taken
    in time order, each process's dispatches counted as they go by."""
    lines = by_pid(run, *DISPATCH)
    procs: dict[int, Busy] = {}
    out: dict[tuple[int, int], int] = {}
    for start in sorted(starts, key=lambda e: e.t_ns):
        if start.pid not in procs:
            procs[start.pid] = Busy(lines.get(start.pid, EMPTY))
        out[start.pid, start.t_ns] = procs[start.pid].upto(start.t_ns)
    return out


@checker("exit_hook_within", "the exit hook stops what is left within a bound (seconds, however many listeners "
         "cannot drain): interpreter exit is never stalled for long",
         judges=("exit_hook_started", "exit_hook_finished"), evidence={"worker": ("exit_hook_started",)},
         observes_exit=True,
         timing=("wall time from exit_hook_started to exit_hook_finished in the worker. Load lengthens it; the "
                 "bound is seconds against the hook's milliseconds when every listener drains"))
def exit_hook_within(run: RunRecord, p: Within) -> Verdict:
    bad: list[Event] = []
    took: list[str] = []
    for start in run.of("exit_hook_started"):
        end = hook_end(run, start)
        if end is None:
            bad.append(start)
            took.append(f"pid {start.pid}: never finished")
            continue
        seconds = (end.t_ns - start.t_ns) / 1e9
        took.append(f"pid {start.pid}: {seconds:.3f}s for {start.data.get('listeners')} listener(s), budget "
                    f"{start.data.get('budget')}")
        if seconds > p.within * run.scale:
            bad += [start, end]
    if bad:
        return violated("exit_hook_within", f"an exit hook took longer than {p.within * run.scale:.2f}s: "
                        + "; ".join(took), bad)
    return ok("exit_hook_within", "; ".join(took))


@checker("exit_hook_once", "a process runs its exit hook once at exit, however many listeners it started (the hook "
         "is registered once, not at every start)", judges=("exit_hook_started",),
         evidence={"worker": ("exit_hook_started",)}, observes_exit=True)
def exit_hook_once(run: RunRecord, p: Params) -> Verdict:
    runs: dict[int, list[Event]] = {}
    for e in run.of("exit_hook_started"):
        runs.setdefault(e.pid, []).append(e)
    again = {pid: evs for pid, evs in runs.items() if len(evs) > 1}
    if again:
        return violated("exit_hook_once", "an exit hook ran more than once in one process: " + "; ".join(
            f"pid {pid}: {len(evs)} times" for pid, evs in sorted(again.items())),
            [e for evs in again.values() for e in evs])
    return ok("exit_hook_once", f"{len(runs)} process(es), each ran its exit hook once")

