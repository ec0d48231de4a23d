"""Checkers of the stop contract, judged from the listener's own events.

Events used (emitted by the reference listener, worker and registry; a target
adapter emits the same names): ``stop_started``, ``reads_cancelled``,
``drain_started``, ``drain_finished``, ``teardown_step``, ``stop_returned``,
``frame_started``, ``frame_completed``, ``connection_closed``,
``dispatch_started``, ``dispatch_finished``, ``allocator_torn_down``,
``teardown_deferred``.  Each carries ``listener`` (its label); with the pid it
names one listener.
"""

from __future__ import annotations

from checker_oracle.registry import checker
from harness.categories import category_of
from harness.checkers.base import RunRecord, Verdict, key_of, observed, ok, unknown, violated
from harness.checkers.params import Params, StopLatency, Within
from harness.history import Event

Key = tuple[int, str]


def _stops(events: list[Event]) -> list[tuple[Event, int]]:
    """Each stop (the first stop_started of a listener's life) with the end of its window: the next
    listener_started on the same key (a restart reuses the label in the same process), else forever."""
    out: list[tuple[Event, int]] = []
    seen: set[Key] = set()
    for i, e in enumerate(events):
        if e.kind == "listener_started":
            seen.discard(key_of(e))
        elif e.kind == "stop_started" and key_of(e) not in seen:
            seen.add(key_of(e))
            end = next((x.t_ns for x in events[i + 1:] if x.kind == "listener_started" and key_of(x) == key_of(e)),
                       1 << 62)
            out.append((e, end))
    return out


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
         evidence=observed("listener"))
def no_late_dispatch(run: RunRecord, p: Params) -> Verdict:
    unrecorded = _dispatches_unrecorded(run)
    if unrecorded:
        return unknown("no_late_dispatch", unrecorded)
    evs = run.ordered
    stops = _stops(evs)
    if not stops:
        return unknown("no_late_dispatch", "no stop_started in the history: no stop to judge against")
    for stop, end in stops:
        late = [e for e in evs if e.kind == "dispatch_started" and key_of(e) == key_of(stop)
                and stop.t_ns < e.t_ns < end]
        if late:
            return violated("no_late_dispatch",
                            f"{len(late)} request(s) dispatched after stop began on {stop.data.get('listener')}: "
                            f"{[e.data.get('cmd') for e in late]}", [stop, *late])
    return ok("no_late_dispatch", f"{len(stops)} stop(s), no dispatch after any of them")


@checker("no_dispatch_after_teardown", "no backend call starts, or is still running, once the allocator is torn down",
         judges=("allocator_torn_down", "dispatch_started", "dispatch_finished", "step_returned"),
         evidence=observed("listener", "worker"))
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
         evidence=observed("listener"))
def reads_cancelled(run: RunRecord, p: Within) -> Verdict:
    evs = run.ordered
    stops = _stops(evs)
    if not stops:
        return unknown("reads_cancelled", "no stop_started in the history")
    started = {key_of(s): s for s, _ in stops}
    bad: list[Event] = []
    checked = 0
    for stop, _end in stops:
        key = key_of(stop)
        live: dict[object, Event] = {}
        for e in evs:
            if key_of(e) != key or e.t_ns > stop.t_ns:
                continue
            if e.kind in ("accepted", "frame_started", "dispatch_finished", "dispatch_refused"):
                live[e.data.get("conn")] = e  # reading, or idle and kept alive after its answer
            elif e.kind in ("frame_completed", "connection_closed"):
                live.pop(e.data.get("conn"), None)
        deadline = stop.t_ns + int(p.within * run.scale * 1e9)
        cancelled: set[object] = set()
        for e in evs:
            if key_of(e) == key and stop.t_ns <= e.t_ns <= deadline:
                if e.kind == "reads_cancelled":
                    cancelled.update(e.data.get("conns", ()))
                elif e.kind == "connection_closed":
                    cancelled.add(e.data.get("conn"))
        checked += len(live)
        bad += [e for conn, e in live.items() if conn not in cancelled]
    # the harness's own view: a stalled peer must see its connection closed within the bound
    stop_t = min((s.t_ns for s in started.values()), default=0)
    for stall in run.of("peer_stalled"):  # judged only where the harness watched for the close
        closed = [e for e in run.of("peer_closed") if e.data.get("step") == stall.data.get("step")]
        if stall.t_ns < stop_t and closed and closed[0].t_ns > stop_t + int(p.within * run.scale * 1e9):
            bad.append(stall)
        checked += 1
    if bad:
        return violated("reads_cancelled", f"{len(bad)} read(s) in progress at stop were not cancelled within "
                        f"{p.within}s", [*started.values(), *bad])
    return ok("reads_cancelled", f"{checked} read(s) in progress at stop, all cancelled")


@checker("handler_drained", "a handler inside the backend when stop begins finishes before stop returns True",
         judges=("stop_returned", "dispatch_started", "dispatch_finished", "step_returned"),
         evidence=observed("listener"))
def handler_drained(run: RunRecord, p: Params) -> Verdict:
    evs = run.ordered
    bad: list[Event] = []
    for ret in (e for e in evs if e.kind == "stop_returned" and e.data.get("ok")):
        inflight: dict[object, Event] = {}
        for e in evs:
            if key_of(e) != key_of(ret) or e.t_ns > ret.t_ns:
                continue
            if e.kind == "dispatch_started":
                inflight[e.data.get("conn")] = e
            elif e.kind == "dispatch_finished":
                inflight.pop(e.data.get("conn"), None)
        if inflight:
            bad += [*inflight.values(), ret]
    # a stop step of the harness (the registry's stop of every listener) that reported True
    for ret in (e for e in evs if e.kind == "step_returned" and category_of(e.data) == "stop"
                and e.data.get("ok") and e.data.get("value") is True):
        open_: dict[tuple[Key, object], Event] = {}
        for e in evs:
            if e.t_ns > ret.t_ns:
                break
            if e.kind == "dispatch_started":
                open_[(key_of(e), e.data.get("conn"))] = e
            elif e.kind == "dispatch_finished":
                open_.pop((key_of(e), e.data.get("conn")), None)
        if open_:
            bad += [*open_.values(), ret]
    if bad:
        return violated("handler_drained", "stop returned True while a handler was still inside the backend", bad)
    return ok("handler_drained")


@checker("retained_for_retry", "a stop that returns False tears nothing down; the listener stays for a retry",
         judges=("stop_started", "stop_returned", "teardown_step"), evidence=observed("listener"))
def retained_for_retry(run: RunRecord, p: Params) -> Verdict:
    evs = run.ordered
    bad: list[Event] = []
    for ret in (e for e in evs if e.kind == "stop_returned" and e.data.get("ok") is False):
        prev = [e.t_ns for e in evs if key_of(e) == key_of(ret) and e.kind in ("stop_returned", "stop_started")
                and e.t_ns < ret.t_ns]
        since = max(prev) if prev else 0
        bad += [e for e in evs if key_of(e) == key_of(ret) and e.kind == "teardown_step"
                and since <= e.t_ns <= ret.t_ns and e.data.get("step") in ("close", "unlink", "rmdir")]
    falses = [e for e in evs if e.kind == "stop_returned" and e.data.get("ok") is False]
    if bad:
        return violated("retained_for_retry", "a stop that returned False had already torn down", [*falses, *bad])
    return ok("retained_for_retry", f"{len(falses)} stop(s) returned False, none tore anything down")


@checker("teardown_deferred", "the allocator is torn down only after every listener of its process has stopped",
         judges=("allocator_torn_down", "listener_started", "stop_returned"), evidence=observed("listener", "worker"))
def teardown_deferred(run: RunRecord, p: Params) -> Verdict:
    evs = run.ordered
    bad: list[Event] = []
    for torn in (e for e in evs if e.kind == "allocator_torn_down"):
        last: dict[str, Event] = {}
        for e in evs:
            if e.pid == torn.pid and e.kind == "stop_returned" and e.t_ns < torn.t_ns:
                last[str(e.data.get("listener"))] = e
        started = {str(e.data.get("listener")) for e in evs if e.pid == torn.pid and e.kind == "listener_started"}
        failed = [e for e in last.values() if not e.data.get("ok")]
        missing = started - set(last)
        if failed or missing:
            bad += [*failed, torn]
    if bad:
        return violated("teardown_deferred", "the allocator was torn down although a listener had not stopped", bad)
    return ok("teardown_deferred")


def _phases(evs: list[Event], stop: Event) -> dict[str, float]:
    """Seconds per phase of the stop that began with ``stop`` (as far as the events tell)."""
    k = key_of(stop)
    after = [e for e in evs if key_of(e) == k and e.t_ns >= stop.t_ns]

    def t(kind: str) -> int | None:
        return next((e.t_ns for e in after if e.kind == kind), None)

    out: dict[str, float] = {}
    cancel, d0, d1 = t("reads_cancelled"), t("drain_started"), t("drain_finished")
    ret = next((e.t_ns for e in after if e.kind == "stop_returned" and e.data.get("ok")), None)
    if cancel is not None:
        out["stop_accepting"] = out["cancel_reads"] = (cancel - stop.t_ns) / 1e9
    if d0 is not None and d1 is not None:
        out["drain"] = (d1 - d0) / 1e9
    if d1 is not None and ret is not None:
        out["teardown"] = (ret - d1) / 1e9
    if ret is not None:
        out["total"] = (ret - stop.t_ns) / 1e9
    return out


@checker("stop_latency", "stop (or one phase of it) completes within a generous bound",
         judges=("step_started", "step_returned", "stop_started", "reads_cancelled", "drain_started",
                 "drain_finished", "stop_returned"),
         evidence=lambda p: {} if p.step is not None else observed("listener"))  # a named step: black-box
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
    stops = [s for s, _ in _stops(evs)]
    if not stops:
        return unknown("stop_latency", "no stop in the history")
    figures = {f"{s.data.get('listener')}": _phases(evs, s) for s in stops}
    slow = {k: v[p.phase] for k, v in figures.items() if p.phase in v and v[p.phase] > p.within * run.scale}
    never = [k for k, v in figures.items() if p.phase not in v]
    if slow:
        return violated("stop_latency", f"{p.phase} over {p.within}s: "
                        + ", ".join(f"{k} {v:.3f}s" for k, v in slow.items()), stops)
    if never and p.phase == "total":
        return violated("stop_latency", f"stop never returned True on {never}", stops)
    worst = max((v[p.phase] for v in figures.values() if p.phase in v), default=0.0)
    return ok("stop_latency", f"worst {p.phase} {worst * 1e3:.2f} ms over {len(stops)} stop(s)")


def _lives(evs: list[Event]) -> dict[Key, list[list[Event]]]:
    """Each listener's events, split into its lives (a restart reuses the label: a new listener_started or
    listener_registered after the last one's unregistration begins a new life)."""
    lives: dict[Key, list[list[Event]]] = {}
    for e in evs:
        if "listener" not in e.data:
            continue
        mine = lives.setdefault(key_of(e), [[]])
        if e.kind == "listener_started" and any(x.kind in ("listener_started", "listener_unregistered")
                                                for x in mine[-1]):
            mine.append([])
        mine[-1].append(e)
    return lives


@checker("registration_kept", "a listener leaves its registry only once a stop of it returned True: a failed stop "
         "(False, or a cleanup error) keeps it registered for a retry",
         judges=("listener_registered", "listener_unregistered", "stop_returned"),
         evidence={**observed("listener"), "worker": ("listener_registered",)})
def registration_kept(run: RunRecord, p: Params) -> Verdict:
    bad: list[tuple[Event, Event | None]] = []  # (the unregistration, the stop before it, if any)
    gone = 0
    for life in (x for lives in _lives(run.ordered).values() for x in lives):
        for i, e in enumerate(life):
            if e.kind != "listener_unregistered":
                continue
            gone += 1
            stops = [x for x in life[:i] if x.kind == "stop_returned"]
            if not stops or not stops[-1].data.get("ok"):
                bad.append((e, stops[-1] if stops else None))
    if bad:
        e, last = bad[0]
        why = "its last stop returned False" if last is not None else "no stop of it had returned"
        return violated("registration_kept", f"{e.data.get('listener')} left its registry although {why}: "
                        f"nothing is left to retry ({len(bad)} such)",
                        [x for u, s in bad for x in ((s, u) if s is not None else (u,))])
    return ok("registration_kept", f"{gone} listener(s) left the registry, each after a stop returned True")


@checker("failed_stop_retried", "a listener whose stop returned False is stopped later: a retry, or the exit hook, "
         "returns True for it", judges=("listener_started", "stop_returned"), evidence=observed("listener"))
def failed_stop_retried(run: RunRecord, p: Params) -> Verdict:
    failed, open_ = 0, []
    for life in (x for lives in _lives(run.ordered).values() for x in lives):
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


def _hook_end(run: RunRecord, start: Event) -> Event | None:
    """The ``exit_hook_finished`` of the exit hook that ``start`` began, if it finished."""
    return next((e for e in run.ordered if e.kind == "exit_hook_finished" and e.pid == start.pid
                 and e.t_ns >= start.t_ns), None)


@checker("exit_hook_stops_the_rest", "the exit hook tells every listener to stop before it waits for any, so one "
         "that cannot drain does not use up the others' share of the one budget: no stop begins once a drain of the "
         "hook has ended, and only listeners with a handler in flight are left registered",
         judges=("exit_hook_started", "exit_hook_finished", "stop_started", "drain_finished", "dispatch_started",
                 "dispatch_finished"),
         evidence={"worker": ("exit_hook_started",)})
def exit_hook_stops_the_rest(run: RunRecord, p: Params) -> Verdict:
    """For each worker's exit hook: every listener's ``stop_started`` inside the hook comes before the first
    ``drain_finished`` inside it (the hook tells them all to stop, then waits), and at most as many listeners
    are left registered as had a handler inside the backend when it began (every other drains at once).  The
    second is judged where the listeners' clients read their replies: a reply nobody reads also holds a drain."""
    bad: list[Event] = []
    notes: list[str] = []
    for start in run.of("exit_hook_started"):
        end = _hook_end(run, start)
        if end is None:
            continue  # a hook that never finished: exit_hook_within's to judge
        inside = [e for e in run.ordered if e.pid == start.pid and start.t_ns <= e.t_ns <= end.t_ns]
        drained = next((e for e in inside if e.kind == "drain_finished"), None)
        late = [] if drained is None else [e for e in inside if e.kind == "stop_started" and e.t_ns > drained.t_ns]
        open_: dict[tuple[str, object], int] = {}
        for e in run.ordered:
            if e.pid != start.pid or e.t_ns > start.t_ns or e.kind not in ("dispatch_started", "dispatch_finished"):
                continue
            key = (str(e.data.get("listener")), e.data.get("conn"))
            open_[key] = open_.get(key, 0) + (1 if e.kind == "dispatch_started" else -1)
        busy = sorted({label for (label, _), n in open_.items() if n > 0})
        left = int(end.data.get("left") or 0)
        notes.append(f"pid {start.pid}: {start.data.get('listeners')} listener(s) at the hook, {len(busy)} with a "
                     f"handler in flight, {left} left" + (f", {len(late)} stop(s) begun only after a drain ended"
                                                          if late else ""))
        if drained is not None and late:
            bad += [start, drained, *late]
        elif left > len(busy):
            bad += [start, end]
    if not notes:
        return unknown("exit_hook_stops_the_rest", "no exit hook finished in the history")
    if bad:
        return violated("exit_hook_stops_the_rest", "an exit hook did not stop every listener it could: "
                        + "; ".join(notes), bad)
    return ok("exit_hook_stops_the_rest", "; ".join(notes))


@checker("exit_hook_within", "the exit hook stops what is left within a bound (seconds, however many listeners "
         "cannot drain): interpreter exit is never stalled for long",
         judges=("exit_hook_started", "exit_hook_finished"), evidence={"worker": ("exit_hook_started",)})
def exit_hook_within(run: RunRecord, p: Within) -> Verdict:
    bad: list[Event] = []
    took: list[str] = []
    for start in run.of("exit_hook_started"):
        end = _hook_end(run, start)
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
         evidence={"worker": ("exit_hook_started",)})
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

