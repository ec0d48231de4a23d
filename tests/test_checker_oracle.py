"""Every checker's verdict equals its oracle's on generated histories: status, message, evidence (the same events,
in the same order) and notes.

The checkers bound their work (harness.checkers.index, .reads, .sweep: O(n log n) in the events); the oracle
(tests/checker_oracle/) is the modules they were rewritten from, exact by construction and quadratic.  Histories
are drawn from the event kinds those checkers read, over two processes, two listener labels (and events naming
none, which key_of names by their rank), three connections and a coarse clock, so that events collide in time and
windows of the default bounds hold several.  The checkers of the modules that did not change are judged through
the record's shared views and through the views computed afresh (checker_oracle.OldRun).

One record serves every checker and every parameter set, as in ``lastcall report``: the indexes one checker
builds are the ones the next reads.  Over a fixed set of seeds each rewritten checker must be both ok and violated,
so a generator that stops reaching violations fails; the pieces whose corner cases the histories rarely reach
(a directory's name beginning another's, a launch's first end left) are compared with their scans alone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from random import Random
from typing import Any

import pytest
from checker_oracle import ORACLE, old_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.checkers import CHECKERS, RunRecord
from harness.checkers.base import MAX_COLLECTED
from harness.checkers.index import Left
from harness.checkers.machine import _has_prefix
from harness.history import Event
from harness.probes.model import PathEntry, ProcEntry, Snapshot

S = 1_000_000_000
T0 = 10**12
TICK = S // 2  # the clock's step: the default bound (2 s) holds four
TICKS = 12  # a history's times: few, so that they collide
PIDS = (10, 11)
LABELS = ("a", "b")
CONNS = (1, 2, 3)
STEPS = ("s1", "s2")
PATHS = ("/r", "/r/d", "/r/a.sock", "/r/d/b.sock", "/r/dd.sock", "/q/c.sock")

# the checkers rewritten to bound their work, each of which the examples must find both ok and violated
REWRITTEN = ("no_late_dispatch", "reads_cancelled", "handler_drained", "retained_for_retry", "teardown_deferred",
             "stop_latency", "registration_kept", "failed_stop_retried", "exit_hook_stops_the_rest", "exit_hook_within",
             "fault_fired", "served_while_stalled", "exit_without_stall", "failed_start_never_serves",
             "engine_exit_status", "engine_start_ends", "no_leftover_paths", "unlinks_only_own_socket",
             "no_leaked_threads", "no_leaked_fds", "no_orphan_processes")

# parameter sets beside the defaults (a checker whose defaults do not validate is judged with these only)
PARAMS: dict[str, list[dict[str, Any]]] = {
    "reads_cancelled": [{"within": 0.5}, {"within": 5.0}],
    "stop_latency": [{"phase": "drain", "within": 1.0}, {"phase": "cancel_reads", "within": 0.5},
                     {"phase": "teardown"}, {"step": "s1", "within": 1.0}],
    "exit_hook_within": [{"within": 0.5}],
    "exit_without_stall": [{"within": 0.5}],
    "fault_fired": [{"faults": ["s1", "s2"]}],
    "engine_tree_exits": [{"within": 0.5}],
    "engine_start_ends": [{"within": 1.0}],
    "stop_result": [{"step": "s1", "returns": False}],
    "ctl_cleans": [{"found": "s1", "deleted": "s2"}],
    "port_released": [{"ports": [80]}],
    "no_serving_after_stop": [{"request": "s1"}],
}
NO_DEFAULTS = {"ctl_cleans", "no_serving_after_stop"}
SEEDS = 400  # the fixed histories of the reach test

# kinds that checkers read together: a history draws one or two of these, and a few kinds of any other
GROUPS = (
    ("listener_started", "stop_started", "stop_returned", "dispatch_started", "dispatch_finished", "step_returned"),
    ("listener_started", "stop_started", "accepted", "frame_started", "frame_completed", "dispatch_finished",
     "dispatch_refused", "reads_cancelled", "connection_closed", "peer_stalled", "peer_closed"),
    ("listener_started", "stop_started", "stop_returned", "teardown_step", "allocator_torn_down"),
    ("listener_started", "listener_registered", "listener_unregistered", "stop_returned"),
    ("stop_started", "reads_cancelled", "drain_started", "drain_finished", "stop_returned", "step_started",
     "step_returned"),
    ("exit_hook_started", "exit_hook_finished", "stop_started", "drain_finished", "dispatch_started",
     "dispatch_finished"),
    ("armed", "fault_reached", "peer_stalled", "peer_idle", "step_returned"),
    ("peer_stalled", "peer_idle", "peer_closed", "peer_finished", "step_started", "step_returned"),
    ("exit_requested", "engine_died", "process_exited", "exit_hook_started", "exit_hook_finished"),
    ("step_started", "step_returned", "handshake_listener_started", "thread_exited"),
    ("engine_launched", "engine_ready", "engine_start_failed", "step_started", "step_returned"),
    ("path_replaced", "stale_socket_removed", "process_resources"),
)
LISTENER = ("listener_started", "stop_started", "stop_returned", "listener_registered", "listener_unregistered",
            "accepted", "frame_started", "frame_completed", "dispatch_started", "dispatch_finished",
            "dispatch_refused", "connection_closed", "reads_cancelled", "teardown_step", "drain_started",
            "drain_finished")
CONN_KINDS = ("accepted", "frame_started", "frame_completed", "dispatch_started", "dispatch_finished",
              "dispatch_refused", "connection_closed")


def _data(kind: str, r: Random) -> dict[str, Any]:
    """The data of one event of ``kind``, its values drawn from few (so that they meet) by ``r``."""
    def pick(*values: Any) -> Any:
        return r.choice(values)

    def t() -> int:
        return T0 + r.randint(0, TICKS) * TICK

    d: dict[str, Any] = {}
    if kind in LISTENER and r.random() < 0.8:  # else none: key_of names the event by its rank
        d["listener"] = pick(*LABELS)
    if kind in CONN_KINDS:
        d.update(conn=pick(*CONNS), cmd="c")
    step = pick(*STEPS)
    if kind == "listener_started":
        d.update(path="/x", rank=0, pp=0)
    elif kind in ("stop_returned", "drain_finished", "exit_hook_finished"):
        d["ok"] = pick(True, False)
        if kind == "exit_hook_finished":
            d["left"] = r.randint(0, 2)
    elif kind in ("listener_registered", "listener_unregistered"):
        d["ipc"] = "x"
    elif kind == "connection_closed":
        d["why"] = pick("cancelled by stop", "eof")
    elif kind == "reads_cancelled":
        d.update(n=1, conns=r.sample(CONNS, r.randint(0, 3)))
    elif kind == "teardown_step":
        d["step"] = pick("close", "unlink", "rmdir", "unlink_skipped")
    elif kind == "allocator_torn_down":
        d["worker"] = "w"
    elif kind == "exit_hook_started":
        d.update(listeners=r.randint(0, 3), budget=1.0)
    elif kind == "step_started":
        d.update(step=step, kind=pick("stop", "send", "engine_signal", "handshake_start", "cycle", "engine_request"),
                 sig=pick("SIGTERM", "SIGKILL"), to=pick("api_server", "engine_core", "worker"))
        if r.random() < 0.3:
            d["ready"] = pick(True, False)
    elif kind == "step_returned":
        shape = pick("plain", "plain", "plain", "wait_gone", "engine_start")
        if shape == "plain":
            d.update(step=step, kind=pick("stop", "send", "handshake_start", "engine_request"), ok=pick(True, False),
                     value=pick(None, True, False, {"status": "ok"}, {"status": "error"}))
            if r.random() < 0.5:
                d["fault"] = pick(None, "none", "zero_length")
            if not d["ok"]:
                d["error"] = "boom"
        elif shape == "wait_gone":
            d.update(step=step, kind="wait_gone", ok=True, value={
                "gone": pick(True, False), "seconds": pick(0.1, 1.0, 3.0), "after": pick(None, *STEPS, *STEPS),
                "survivors": [{"name": "core", "pid": 5}], "orphaned": pick([], [{"name": "w", "pid": 5}]),
                "left": pick([], ["/tmp/x.sock"]), "status": pick(None, 0, 1)})
        else:
            d.update(step=step, kind="engine_start", ok=pick(True, False),
                     value={k: pick(True, False) for k in ("ready", "stopped") if r.random() < 0.6})
    elif kind in ("peer_stalled", "peer_closed", "peer_idle", "peer_finished"):
        d["step"] = step
        d.update({"peer_stalled": {"fault": "stall"}, "peer_idle": {"count": 2}}.get(kind, {}))
    elif kind == "armed":
        d.update(step=step, site=pick("x", "y"), pid=pick(*PIDS), action="pause")
        if r.random() < 0.5:
            d["since_ns"] = t()
    elif kind == "fault_reached":
        d.update(site=pick("x", "y"), action="pause", hit=1)
    elif kind == "exit_requested":
        d["reason"] = "asked"
    elif kind == "process_exited":
        d["status"] = pick(0, 1)
    elif kind == "handshake_listener_started":
        d.update(host="h", port=pick(80, 81))
    elif kind == "engine_launched":
        d.update(pid=pick(1, 2), port=80, launch=r.randint(0, 2))
    elif kind == "engine_ready":
        d.update(pid=pick(1, 2), ready_s=1.0, members=[])
    elif kind == "engine_start_failed":
        d["error"] = pick("", "boom")
        if r.random() < 0.4:
            d["hung"] = pick(True, False)
    elif kind == "path_replaced":
        d.update(step=step, path=pick(*PATHS[2:]))
        if r.random() < 0.8:
            d["ino"] = r.randint(1, 2)
    elif kind == "stale_socket_removed":
        d.update(listener=pick(*LABELS), path=pick(*PATHS[2:]))
    elif kind == "process_resources":
        d.update(when=pick("before_start", "after_shutdown"),
                 threads=r.sample(("main", "extra", "lastcall-cmd-1"), r.randint(0, 2)),
                 fds=[[3, pick("socket", "file"), pick("socket:[1]", "socket:[2]")] for _ in range(r.randint(0, 2))])
    return d


KINDS = sorted({k for g in GROUPS for k in g} | {"engine_died"})


def _event(seed: int, kinds: list[str]) -> Event:
    r = Random(seed)
    kind = r.choice(kinds)
    return Event(T0 + r.randint(0, TICKS) * TICK, r.choice((PIDS[0], PIDS[0], PIDS[1])), "worker",
                 r.choice(("a", "a", "r0")), "t", kind, _data(kind, r))


def _snapshot(label: str, seed: int) -> Snapshot:
    r = Random(seed)
    return Snapshot(label=label, t_ns=T0 + r.randint(0, TICKS) * TICK,
                    paths=tuple(PathEntry(r.choice(PATHS), r.choice(("dir", "socket")), r.randint(1, 2))
                                for _ in range(r.randint(0, 4))),
                    procs=tuple(ProcEntry(r.choice(PIDS), 1, 1, 0, "w", r.choice(("S", "Z")))
                                for _ in range(r.randint(0, 2))),
                    harness_pids=r.choice(((), (PIDS[0],))),
                    extra=r.choice(({}, {"root": "/r"}, {"root": "/r/"}, {"root": None})))


def _run(theme: int, seeds: list[int], snaps: list[tuple[str, int]], scale: float) -> RunRecord:
    """A history of a few kinds that checkers read together (so that what a checker pairs, a stop and the
    dispatches after it, a hook and its drains, meets often), mostly of one process, each event drawn from its
    seed (Hypothesis shrinks a history by its events, each towards the simplest)."""
    r = Random(theme)
    kinds = sorted({k for g in r.sample(GROUPS, r.randint(1, 2)) for k in g} | set(r.sample(KINDS, r.randint(0, 3))))
    return RunRecord(tuple(_event(seed, kinds) for seed in seeds),
                     {label: _snapshot(label, seed) for label, seed in snaps}, scale)


seed = st.integers(0, 2**32)
runs = st.builds(_run, seed, st.integers(0, 40).flatmap(lambda n: st.lists(seed, min_size=n, max_size=n)),
                 st.lists(st.tuples(st.sampled_from(("before", "after", "after_1")), seed), max_size=3,
                          unique_by=lambda x: x[0]),
                 st.sampled_from((1.0, 0.25, 4.0)))


def _outcome(fn: Callable[[], Any]) -> tuple[Any, ...]:
    """A verdict as comparable data (its evidence by identity: the same events, not equal ones), or the error."""
    try:
        v = fn()
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))
    return (v.checker, v.status, v.message, [id(e) for e in v.evidence], v.notes)


def _judged(run: RunRecord, seen: dict[str, set[str]]) -> None:
    old = old_run(run)
    for name, chk in CHECKERS.items():
        sets = ([] if name in NO_DEFAULTS else [{}]) + PARAMS.get(name, [])
        for params in sets:
            p = chk.params(**params)
            oracle = ORACLE.get(name, chk.fn)  # an unchanged checker: through the views computed afresh
            new, was = _outcome(lambda: chk.fn(run, p)), _outcome(lambda: oracle(old, p))  # noqa: B023
            assert new == was, (name, params)
            seen[name].add(str(new[1]))


def test_the_record_views_are_the_scans_they_replace() -> None:
    @settings(max_examples=100, deadline=None)
    @given(runs)
    def views(run: RunRecord) -> None:
        events = list(run.events)
        assert run.ordered == sorted(events, key=lambda e: e.t_ns)
        assert run.kinds == {e.kind for e in events}
        assert run.first_t == min((e.t_ns for e in events), default=None)
        for kinds in (("stop_started",), ("accepted", "stop_returned"), ("stop_returned", "accepted", "accepted"), ()):
            assert [id(e) for e in run.of(*kinds)] == [id(e) for e in events if e.kind in kinds]

    views()


@pytest.mark.slow
def test_every_checker_judges_as_its_oracle() -> None:
    assert set(ORACLE) <= set(CHECKERS) and set(REWRITTEN) <= set(ORACLE)

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(runs)
    def judged(run: RunRecord) -> None:
        _judged(run, defaultdict(set))

    judged()


def test_the_histories_compared_reach_every_verdict_of_the_rewritten_checkers() -> None:
    """Over a fixed set of seeds (independent histories, unlike the examples Hypothesis derives from each other),
    each rewritten checker is both ok and violated, and equal to its oracle each time: the comparison above
    judges histories that break each checker's rule, not only ones that keep it."""
    seen: dict[str, set[str]] = defaultdict(set)
    for i in range(SEEDS):
        r = Random(i)
        n = r.randint(0, 40)
        snaps = r.sample(("before", "after", "after_1"), r.randint(0, 3))
        _judged(_run(r.randrange(2**32), [r.randrange(2**32) for _ in range(n)],
                     [(label, r.randrange(2**32)) for label in snaps], r.choice((1.0, 0.25, 4.0))), seen)
    unreached = {name: sorted(seen[name]) for name in REWRITTEN if not {"ok", "violated"} <= seen[name]}
    assert not unreached, unreached


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text("/ab", max_size=5), max_size=8), st.text("/ab", max_size=4))
def test_a_prefix_is_found_in_the_sorted_paths_as_by_a_scan(paths: list[str], prefix: str) -> None:
    """no_leftover_paths's directories kept for a path under them, found by bisection (narrow: the examples above
    rarely name a directory whose name begins another's)."""
    assert _has_prefix(sorted(paths), prefix) == any(path.startswith(prefix) for path in paths)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=12), st.lists(st.tuples(st.integers(-1, 6), st.booleans()), max_size=12))
def test_the_first_place_left_is_the_scan_s(times: list[int], asks: list[tuple[int, bool]]) -> None:
    """engine_start_ends's launches each take the first end left at or after them (harness.checkers.index.Left)."""
    left, places = Left(list(range(len(times))), times), set(range(len(times)))
    for t, take in asks:
        first = min((i for i in places if times[i] >= t), default=None)
        assert left.first_from(t) == first
        if take and first is not None:
            left.take(first)
            places.discard(first)


def test_a_capped_verdict_keeps_the_oracle_s_first_events_and_says_so() -> None:
    """Past MAX_COLLECTED evidence events a checker stops collecting: its evidence is the oracle's first ones, its
    message the same, and a note says the history holds more."""
    n = 40  # a listener restarted n times, n more connections accepted each time, none cancelled
    events = []
    for i in range(n):
        t = T0 + i * 10 * S
        events += [Event(t, 10, "worker", "a", "t", "listener_started",
                         {"listener": "a", "path": "/x", "rank": 0, "pp": 0}),
                   *(Event(t, 10, "worker", "a", "t", "accepted", {"listener": "a", "conn": n * i + c})
                     for c in range(n)),
                   Event(t + 1, 10, "worker", "a", "t", "stop_started", {"listener": "a"})]
    run = RunRecord(tuple(events))
    p = CHECKERS["reads_cancelled"].params()
    new, was = CHECKERS["reads_cancelled"].fn(run, p), ORACLE["reads_cancelled"](old_run(run), p)
    missed = n * n * (n + 1) // 2  # the i-th stop finds n * i connections live
    assert missed > MAX_COLLECTED
    assert (new.status, new.message) == (was.status, was.message) == (
        "violated", f"{missed} read(s) in progress at stop were not cancelled within 2.0s")
    assert len(was.evidence) == 1 + missed and len(new.evidence) == 1 + MAX_COLLECTED  # the stop, then the reads
    assert [id(e) for e in new.evidence] == [id(e) for e in was.evidence[:len(new.evidence)]]
    assert len(new.notes) == 1 and "collected up to 1000" in new.notes[0] and not was.notes
