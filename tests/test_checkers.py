"""Every checker proven twice, on literal histories: quiet on a clean run, firing on the planted bug it names.

Each planted history models the real bug (docs/stop-contract.md): the kvcached seed's late dispatch,
teardown while a handler is alive, a timed join then teardown, a read never cancelled, and so on.  Evidence is
asserted exactly (which events, by kind and data), messages by their key words.  Snapshots are literal too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from lc_helpers import check, harness_events

from harness.checkers import CHECKER_PARAMS, CHECKERS, Checker, RunRecord, Verdict, judge, judge_all
from harness.checkers.params import Params, StopLatency
from harness.history import Event, read_jsonl
from harness.probes.model import (
    BindResult,
    GpuProc,
    PathEntry,
    ProcEntry,
    ShmEntry,
    Snapshot,
    SocketEntry,
)

MiB = 1 << 20
S = 1_000_000_000  # one second in ns
W, W2, HARNESS = 10, 11, 1  # two workers' pids and the harness's
L0, L1 = "pp0/rank0", "pp0/rank1"
HISTORIES = Path(__file__).resolve().parent.parent / "fixtures" / "histories"


# ------------------------------------------------------------------ helpers
def E(kind: str, t: int, /, pid: int = W, rank: str = L0, role: str = "worker", **data: Any) -> Event:
    """A process's event (no listener in its data)."""
    return Event(t, pid, role, rank, "MainThread", kind, data)


def LE(kind: str, t: int, /, pid: int = W, listener: str = L0, **data: Any) -> Event:
    """A listener's event: ``listener`` in its data, as the reference listener emits it."""
    return Event(t, pid, "worker", listener, f"lastcall-listener-{listener}", kind, {"listener": listener, **data})


H = harness_events(HARNESS)


def ev(v: Verdict, *keys: str) -> list[tuple[Any, ...]]:
    """The evidence as (kind, data[key], ...) tuples."""
    return [(e.kind, *(e.data.get(k) for k in keys)) for e in v.evidence]


def snap(label: str, **fields: Any) -> Snapshot:
    return Snapshot(label=label, t_ns=0 if label == "before" else 10 * S, **fields)


def resources(pid: int, when: str, t: int, threads: list[str], fds: list[list[Any]]) -> Event:
    return E("process_resources", t, pid, when=when, threads=threads, fds=fds)


def test_every_checker_is_registered_with_its_parameters() -> None:
    """Every ``@checker`` of harness/checkers/ is registered on import (a module the package forgot to import
    would leave its checkers out), each with its parameter model; read from the source, not counted by hand."""
    src = Path(__file__).resolve().parent.parent / "harness" / "checkers"
    declared = {m for p in src.glob("*.py") for m in re.findall(r'^@checker\(\s*"(\w+)"', p.read_text(), re.MULTILINE)}
    assert len(declared) >= 45, sorted(declared)  # the reader still finds them (45 when this was written)
    assert declared <= set(CHECKERS), sorted(declared - set(CHECKERS))
    assert set(CHECKERS) == set(CHECKER_PARAMS)


def test_every_checker_is_proven_both_ways() -> None:
    names = {n for n in globals() if n.startswith("test_")}
    # proofs kept beside the code they prove (the engine checkers', the contract checkers', the race checkers'...)
    for other in sorted(Path(__file__).parent.glob("test_*.py")):
        names |= set(re.findall(r"^def (test_\w+)\(", other.read_text(), re.MULTILINE))
    for c in CHECKERS:  # test_<checker>_ok and test_<checker>_violated, or longer names that begin so
        assert any(n == f"test_{c}_ok" or n.startswith(f"test_{c}_ok_") for n in names), c
        assert any(n == f"test_{c}_violated" or n.startswith(f"test_{c}_violated_") for n in names), c


# ------------------------------------------------------------------ no_late_dispatch
def test_no_late_dispatch_ok() -> None:
    v = check("no_late_dispatch", [
        LE("listener_started", 10), LE("accepted", 20, conn=1), LE("frame_started", 30, conn=1),
        LE("frame_completed", 40, conn=1), LE("dispatch_started", 50, conn=1, cmd="map_to_kv_tensors"),
        LE("dispatch_finished", 60, conn=1, cmd="map_to_kv_tensors"),
        LE("frame_completed", 90, conn=2),  # queued behind the backend when stop begins ...
        LE("stop_started", 100), LE("reads_cancelled", 101, conns=[]),
        LE("dispatch_refused", 110, conn=2, cmd="map_to_kv_tensors"),  # ... refused, shutting_down
        LE("dispatch_started", 150, listener=L1, conn=1, cmd="kv_tensors_created"),  # another listener, not stopped
        LE("stop_returned", 200, ok=True),
    ])
    assert (v.status, v.message) == ("ok", "1 stop(s), no dispatch after any of them")


def test_no_late_dispatch_violated() -> None:
    # the kvcached seed: the frame completes after stop began and is still dispatched
    v = check("no_late_dispatch", [
        LE("frame_started", 50, conn=1), LE("stop_started", 100), LE("reads_cancelled", 101, conns=[]),
        LE("frame_completed", 140, conn=1), LE("dispatch_started", 150, conn=1, cmd="map_to_kv_tensors"),
        LE("dispatch_finished", 160, conn=1, cmd="map_to_kv_tensors"), LE("stop_returned", 200, ok=True),
    ])
    assert v.status == "violated"
    assert ev(v, "cmd") == [("stop_started", None), ("dispatch_started", "map_to_kv_tensors")]
    assert "1 request(s) dispatched after stop began on pp0/rank0" in v.message
    assert "map_to_kv_tensors" in v.message


def test_no_late_dispatch_unknown_without_a_stop() -> None:
    v = check("no_late_dispatch", [LE("listener_started", 10),
                                   LE("dispatch_started", 50, conn=1, cmd="map_to_kv_tensors")])
    assert (v.status, v.message) == ("unknown", "no stop_started in the history: no stop to judge against")


def test_no_late_dispatch_ok_after_a_restart() -> None:
    v = check("no_late_dispatch", [
        LE("listener_started", 10), LE("stop_started", 100), LE("stop_returned", 150, ok=True),
        LE("listener_started", 200),  # restart: a new listener with the same label in the same worker
        LE("dispatch_started", 250, conn=1, cmd="map_to_kv_tensors"),
    ])
    assert v.status == "ok"


# ------------------------------------------------------------------ no_dispatch_after_teardown
def test_no_dispatch_after_teardown_ok() -> None:
    v = check("no_dispatch_after_teardown", [
        LE("dispatch_started", 50, conn=1, cmd="map_to_kv_tensors"), LE("dispatch_finished", 60, conn=1),
        LE("stop_started", 100), LE("stop_returned", 200, ok=True), E("allocator_torn_down", 220, worker=L0),
        LE("dispatch_started", 300, pid=W2, listener=L1, conn=1, cmd="map_to_kv_tensors"),  # another process
    ])
    assert v.status == "ok"
    assert check("no_dispatch_after_teardown", [LE("listener_started", 10), LE("dispatch_started", 50, conn=1),
                                                E("stop_all_returned", 60, ok=True, left=0)]).message == \
        "no allocator was torn down"


def test_no_dispatch_after_teardown_violated() -> None:
    # a dispatch in flight across the allocator's teardown
    v = check("no_dispatch_after_teardown", [
        LE("listener_started", 10),
        LE("dispatch_started", 150, conn=1, cmd="map_to_kv_tensors"), E("allocator_torn_down", 200, worker=L0),
        LE("dispatch_finished", 250, conn=1, cmd="map_to_kv_tensors"),
    ])
    assert v.status == "violated"
    assert ev(v, "cmd") == [("allocator_torn_down", None), ("dispatch_started", "map_to_kv_tensors"),
                            ("dispatch_finished", "map_to_kv_tensors")]
    assert "overlapped or followed allocator teardown (2 events)" in v.message


@pytest.mark.parametrize(("events", "expect"), [
    pytest.param([LE("listener_started", 10), E("allocator_torn_down", 200),
                  LE("dispatch_started", 300, conn=1, cmd="unmap_from_kv_tensors")],
                 [("allocator_torn_down", None), ("dispatch_started", "unmap_from_kv_tensors")], id="after"),
    pytest.param([LE("listener_started", 10), LE("dispatch_started", 150, conn=1, cmd="map_to_kv_tensors"),
                  E("allocator_torn_down", 200)],
                 [("allocator_torn_down", None), ("dispatch_started", "map_to_kv_tensors")], id="never-finished"),
])
def test_no_dispatch_after_teardown_violated_variants(events: list[Event], expect: list[tuple[Any, ...]]) -> None:
    v = check("no_dispatch_after_teardown", events)
    assert (v.status, ev(v, "cmd")) == ("violated", expect)


# ------------------------------------------------------------------ stop_result
def stop_step(step: str, t: int, value: Any, kind: str = "stop") -> list[Event]:
    return [H("step_started", t, step=step, kind=kind),
            H("step_returned", t + 50, step=step, kind=kind, ok=True, value=value)]


def test_stop_result_ok() -> None:
    assert check("stop_result", stop_step("s1", 100, True)).message == "1 stop(s) returned True"
    assert check("stop_result", stop_step("s1", 100, False), {"returns": False}).status == "ok"
    both = stop_step("s1", 100, True) + stop_step("s2", 300, False, kind="shutdown")
    assert check("stop_result", both, {"step": "s1"}).status == "ok"


def test_stop_result_violated() -> None:
    v = check("stop_result", stop_step("s1", 100, True) + stop_step("s2", 300, False, kind="shutdown"))
    assert v.status == "violated"
    assert ev(v, "step", "value") == [("step_returned", "s2", False)]
    assert v.message == "s2 returned False, expected True"
    v = check("stop_result", stop_step("s1", 100, None))  # the stop step raised: no value
    assert (v.status, v.message) == ("violated", "s1 returned None, expected True")


def test_stop_result_unknown() -> None:
    assert check("stop_result", []).message == "no stop step returned in the history"
    v = check("stop_result", stop_step("s1", 100, True), {"step": "s9"})
    assert (v.status, v.message) == ("unknown", "no stop step s9 returned in the history")


# ------------------------------------------------------------------ stop_latency
def phased_stop(ret: int) -> list[Event]:
    return [LE("stop_started", 100), LE("reads_cancelled", 200, conns=[]), LE("drain_started", 300),
            LE("drain_finished", ret - 100, ok=True), LE("teardown_step", ret - 50, step="close"),
            LE("stop_returned", ret, ok=True)]


def test_stop_latency_ok() -> None:
    v = check("stop_latency", phased_stop(500))
    assert (v.status, v.message) == ("ok", "worst total 0.00 ms over 1 stop(s)")
    v = check("stop_latency", [H("step_started", 0, step="s1", kind="stop"),
                               H("step_returned", 1_500_000, step="s1", kind="stop", ok=True, value=True)],
              {"step": "s1", "within": 0.5})
    assert (v.status, v.message) == ("ok", "step s1 took 1.5 ms")


def test_stop_latency_violated() -> None:
    v = check("stop_latency", phased_stop(3 * S + 500))  # the drain waited 3 s for a parked handler
    assert v.status == "violated"
    assert ev(v) == [("stop_started",)]
    assert v.message == "total over 2.0s: pp0/rank0 3.000s"
    v = check("stop_latency", phased_stop(3 * S + 500), {"phase": "drain", "within": 1})
    assert (v.status, v.message) == ("violated", "drain over 1.0s: pp0/rank0 3.000s")
    assert check("stop_latency", phased_stop(3 * S + 500), {"phase": "cancel_reads"}).status == "ok"


def test_stop_latency_violated_by_a_step() -> None:
    v = check("stop_latency", [H("step_started", 0, step="s1", kind="stop"),
                               H("step_returned", 5 * S, step="s1", kind="stop", ok=True, value=True)],
              {"step": "s1", "within": 2})
    assert v.status == "violated"
    assert ev(v, "step") == [("step_started", "s1"), ("step_returned", "s1")]
    assert v.message == "step s1 took 5.000s > 2.0s"


def test_stop_latency_violated_when_stop_never_returns_true() -> None:
    v = check("stop_latency", [LE("stop_started", 100), LE("stop_returned", 200, ok=False)])
    assert (v.status, v.message, ev(v)) == ("violated", "stop never returned True on ['pp0/rank0']",
                                           [("stop_started",)])


def test_stop_latency_unknown() -> None:
    assert (check("stop_latency", [LE("listener_started", 10)]).status,
            check("stop_latency", [LE("listener_started", 10)]).message) == ("unknown", "no stop in the history")
    assert check("stop_latency", []).message.startswith("no evidence: the listener emitted none of")
    v = check("stop_latency", phased_stop(500), {"step": "s1"})
    assert (v.status, v.message) == ("unknown", "step 's1' has no start and return in the history")


# ------------------------------------------------------------------ reads_cancelled
def test_reads_cancelled_ok() -> None:
    v = check("reads_cancelled", [
        LE("accepted", 10, conn=1), LE("frame_started", 20, conn=1),  # a header sent, the body withheld
        LE("accepted", 30, conn=2),  # idle
        LE("accepted", 40, conn=3), LE("frame_started", 50, conn=3), LE("frame_completed", 60, conn=3),  # queued
        H("peer_stalled", 70, step="r1", fault="stall_after_header"),
        LE("stop_started", 100), LE("reads_cancelled", 101, n=2, conns=[1, 2]),
        H("peer_closed", 200, step="r1"),
        LE("drain_started", 300), LE("connection_closed", 3 * S, conn=3, why="listener stopping"),
    ])
    assert (v.status, v.message) == ("ok", "3 read(s) in progress at stop, all cancelled")


def test_reads_cancelled_violated() -> None:
    # no connection tracking: stop cancels nothing; the stalled read is closed only after a 3 s drain
    v = check("reads_cancelled", [
        LE("accepted", 10, conn=1), LE("frame_started", 20, conn=1), LE("stop_started", 100),
        LE("reads_cancelled", 101, n=0, conns=[]), LE("drain_started", 110),
        LE("connection_closed", 3 * S, conn=1, why="listener stopping"),
    ])
    assert v.status == "violated"
    assert ev(v, "conn") == [("stop_started", None), ("frame_started", 1)]
    assert v.message == "1 read(s) in progress at stop were not cancelled within 2.0s"


def test_reads_cancelled_violated_seen_by_the_stalled_peer() -> None:
    v = check("reads_cancelled", [H("peer_stalled", 50, step="r1", fault="stall_after_header"),
                                  LE("stop_started", 100), LE("reads_cancelled", 101, n=0, conns=[]),
                                  H("peer_closed", 3 * S, step="r1")])
    assert v.status == "violated"
    assert ev(v, "step") == [("stop_started", None), ("peer_stalled", "r1")]
    assert "not cancelled within 2.0s" in v.message


def test_reads_cancelled_does_not_judge_a_peer_the_harness_did_not_watch() -> None:
    # no `wait: {closed: r1}`: the harness never looked, so only the listener's own record counts
    v = check("reads_cancelled", [H("peer_stalled", 50, step="r1", fault="stall_after_header"),
                                  LE("stop_started", 100), LE("reads_cancelled", 101, n=0, conns=[])])
    assert v.status == "ok"


def test_reads_cancelled_unknown_without_a_stop() -> None:
    v = check("reads_cancelled", [LE("listener_started", 10), LE("frame_started", 20, conn=1)])
    assert (v.status, v.message) == ("unknown", "no stop_started in the history")


def test_reads_cancelled_violated_by_an_idle_kept_alive_connection() -> None:
    v = check("reads_cancelled", [
        LE("accepted", 10, conn=1), LE("frame_started", 20, conn=1), LE("frame_completed", 30, conn=1),
        LE("dispatch_started", 40, conn=1, cmd="kv_tensors_created"), LE("dispatch_finished", 50, conn=1),
        LE("stop_started", 100), LE("reads_cancelled", 101, n=0, conns=[]),  # the idle connection is not cancelled
        LE("connection_closed", 3 * S, conn=1, why="listener stopping"),
    ])
    assert v.status == "violated"


# ------------------------------------------------------------------ handler_drained
def test_handler_drained_ok() -> None:
    v = check("handler_drained", [
        LE("dispatch_started", 50, conn=1, cmd="map_to_kv_tensors"), LE("stop_started", 100),
        LE("drain_started", 110), LE("dispatch_finished", 150, conn=1), LE("drain_finished", 160, ok=True),
        LE("dispatch_started", 170, listener=L1, conn=1, cmd="map_to_kv_tensors"),  # another listener's handler
        LE("stop_returned", 200, ok=True),
    ])
    assert v.status == "ok"
    # not drained in time and said so: that is retained_for_retry's business, not a violation here
    assert check("handler_drained", [LE("dispatch_started", 50, conn=1), LE("stop_started", 100),
                                     LE("stop_returned", 200, ok=False)]).status == "ok"


def test_handler_drained_violated() -> None:
    # teardown and True while the handler is still inside the backend
    v = check("handler_drained", [
        LE("dispatch_started", 50, conn=1, cmd="map_to_kv_tensors"), LE("stop_started", 100),
        LE("teardown_step", 120, step="close"), LE("stop_returned", 130, ok=True),
        LE("dispatch_finished", 150, conn=1, cmd="map_to_kv_tensors"),
    ])
    assert v.status == "violated"
    assert ev(v, "cmd", "ok") == [("dispatch_started", "map_to_kv_tensors", None), ("stop_returned", None, True)]
    assert v.message == "stop returned True while a handler was still inside the backend"


# ------------------------------------------------------------------ retained_for_retry
def test_retained_for_retry_ok() -> None:
    v = check("retained_for_retry", [
        LE("stop_started", 100), LE("drain_started", 110), LE("drain_finished", 200, ok=False),
        LE("stop_returned", 210, ok=False),
        # the retry drains and tears down: after the False, so not its doing
        LE("drain_started", 300), LE("drain_finished", 400, ok=True), LE("teardown_step", 410, step="close"),
        LE("teardown_step", 420, step="unlink"), LE("teardown_step", 430, step="rmdir"),
        LE("stop_returned", 440, ok=True),
    ])
    assert (v.status, v.message) == ("ok", "1 stop(s) returned False, none tore anything down")


def test_retained_for_retry_violated() -> None:
    # a timed join, then teardown anyway, then False: nothing is left for the retry
    v = check("retained_for_retry", [
        LE("stop_started", 100), LE("drain_started", 110), LE("drain_finished", 200, ok=False),
        LE("teardown_step", 210, step="close"), LE("teardown_step", 220, step="unlink"),
        LE("stop_returned", 230, ok=False),
    ])
    assert v.status == "violated"
    assert ev(v, "ok", "step") == [("stop_returned", False, None), ("teardown_step", None, "close"),
                                   ("teardown_step", None, "unlink")]
    assert v.message == "a stop that returned False had already torn down"


# ------------------------------------------------------------------ teardown_deferred
def test_teardown_deferred_ok() -> None:
    v = check("teardown_deferred", [
        LE("listener_started", 10), LE("stop_started", 50), LE("stop_returned", 100, ok=False),
        E("teardown_deferred", 110, worker=L0), LE("stop_returned", 200, ok=True),
        E("allocator_torn_down", 300, worker=L0),
        LE("listener_started", 20, pid=W2), LE("stop_returned", 250, pid=W2, ok=False),  # another process
    ])
    assert v.status == "ok"


def test_teardown_deferred_violated() -> None:
    # integration shutdown tears the allocator down after a failed stop
    v = check("teardown_deferred", [
        LE("listener_started", 10), LE("stop_started", 50), LE("stop_returned", 100, ok=False),
        E("allocator_torn_down", 110, worker=L0),
    ])
    assert v.status == "violated"
    assert ev(v, "ok") == [("stop_returned", False), ("allocator_torn_down", None)]
    assert v.message == "the allocator was torn down although a listener had not stopped"


def test_teardown_deferred_violated_by_a_listener_never_stopped() -> None:
    v = check("teardown_deferred", [
        LE("listener_started", 10), LE("listener_started", 11, listener=L1),
        LE("stop_returned", 100, ok=True), E("allocator_torn_down", 110, worker=L0),
    ])
    assert (v.status, ev(v)) == ("violated", [("allocator_torn_down",)])


# ------------------------------------------------------------------ kv_state_consistent
def call(step: str, t: int, op: str, offsets: list[int], ok: bool = True, **data: Any) -> Event:
    return H("step_returned", t, step=step, kind="call", op=op, offsets=offsets, ok=ok, **data)


def state(t: int, label: str, mapped: list[int], pending: Any = None, pid: int = W) -> Event:
    return E("allocator_state", t, pid, rank=label, worker=label, mapped=mapped, pending=pending)


def test_kv_state_consistent_ok() -> None:
    v = check("kv_state_consistent", [call("m1", 100, "map", [0, 2 * MiB]), call("u1", 200, "unmap", [2 * MiB]),
                                      state(300, L0, [0]), state(310, L1, [0], pid=W2)])
    assert (v.status, v.message) == ("ok", "2 rank(s) hold exactly the 1 page(s) the client was told")


def test_kv_state_consistent_ok_when_the_client_said_unknown() -> None:
    v = check("kv_state_consistent", [
        call("m1", 100, "map", [0, 2 * MiB], ok=False, error_class="StateConsistencyError",
             error="rollback interrupted by stop"),
        state(300, L0, [0]),
    ])
    assert v.status == "ok"
    assert "unknown" in v.message and "StateConsistencyError" in v.message


def test_kv_state_consistent_violated() -> None:
    # the client was told the map succeeded; a rank holds only half of it
    v = check("kv_state_consistent", [call("m1", 100, "map", [0, 2 * MiB]), state(300, L0, [0]),
                                      state(310, L1, [0, 2 * MiB], pid=W2)])
    assert v.status == "violated"
    assert ev(v, "worker", "mapped") == [("allocator_state", L0, [0])]
    assert v.message == "pp0/rank0 holds [0] (pending None) but the client was told [0, 2097152]"


def test_kv_state_consistent_violated_by_a_pending_unmap() -> None:
    v = check("kv_state_consistent", [call("m1", 100, "map", [0]), state(300, L0, [0], pending="tx1")])
    assert (v.status, ev(v, "pending")) == ("violated", [("allocator_state", "tx1")])
    assert "(pending tx1)" in v.message


def test_kv_state_consistent_unknown() -> None:
    v = check("kv_state_consistent", [call("m1", 100, "map", [0]), E("stop_all_returned", 150, ok=True, left=0)])
    assert (v.status, v.message) == ("unknown", "no rank reported its allocator state")
    v = check("kv_state_consistent", [call("m1", 100, "map", [0])])  # the worker side is not observed at all
    assert (v.status, v.message) == ("unknown", "no evidence: the worker emitted none of stop_all_returned, "
                                     "exit_hook_started, allocator_state, allocator_torn_down, teardown_deferred, "
                                     "so its events cannot be judged")


# ------------------------------------------------------------------ fault_fired
def test_fault_fired_ok() -> None:
    v = check("fault_fired", [
        H("armed", 100, step="f1", site="backend.map", pid=W, action="pause"),
        E("fault_reached", 150, site="backend.map", action="pause", hit=1),
    ])
    assert (v.status, v.message) == ("ok", "1 armed fault(s) fired")
    # a client-side stall is not armed: its peer_stalled is its firing
    v = check("fault_fired", [H("peer_stalled", 50, step="r1", fault="stall_after_header")], {"faults": ["r1"]})
    assert v.status == "ok"


def test_fault_fired_violated() -> None:
    # vacuous: the site was reached, but in another process, at another site, or before it was armed
    v = check("fault_fired", [
        E("fault_reached", 50, site="backend.map", action="pause", hit=1),
        H("armed", 100, step="f1", site="backend.map", pid=W, action="pause"),
        E("fault_reached", 150, pid=W2, site="backend.map", action="pause", hit=1),
        E("fault_reached", 160, site="listener.accepted", action="pause", hit=1),
    ])
    assert v.status == "violated"
    assert ev(v, "step", "site", "pid") == [("armed", "f1", "backend.map", W)]
    assert v.message.startswith("vacuous: armed fault(s) ['f1'] never fired")


def test_fault_fired_violated_by_a_named_fault_never_armed() -> None:
    v = check("fault_fired", [H("armed", 100, step="f1", site="backend.map", pid=W, action="pause"),
                              E("fault_reached", 150, site="backend.map", action="pause", hit=1)],
              {"faults": ["f1", "f2"]})
    assert (v.status, ev(v)) == ("violated", [])
    assert "['f2'] never fired" in v.message


# ------------------------------------------------------------------ served_while_stalled
def stalled_run(ok: bool, error: str = "") -> list[Event]:
    return [
        H("step_started", 10, step="r1", kind="send", fault="stall_after_header"),
        H("peer_stalled", 20, step="r1", fault="stall_after_header"),
        H("step_started", 30, step="s2", kind="send", fault="none"),
        H("step_returned", 2 * S, step="s2", kind="send", ok=ok, value=None, fault="none", error=error),
        H("peer_closed", 3 * S, step="r1"),
    ]


def test_served_while_stalled_ok() -> None:
    v = check("served_while_stalled", stalled_run(True))
    assert (v.status, v.message) == ("ok", "1 request(s) served while a client stalled")


def test_served_while_stalled_violated() -> None:
    # head-of-line blocking: the stalled read holds the serving thread
    v = check("served_while_stalled", stalled_run(False, "timed out"))
    assert v.status == "violated"
    assert ev(v, "step", "ok") == [("step_returned", "s2", False)]
    assert v.message == "1 request(s) not served while another client stalled: timed out"


def test_served_while_stalled_violated_by_an_idle_client() -> None:
    v = check("served_while_stalled", [
        H("peer_idle", 20, step="i1", count=8), H("step_started", 30, step="s2", kind="send", fault="none"),
        H("step_returned", 40, step="s2", kind="send", ok=False, fault="none", error="timed out"),
    ])
    assert (v.status, ev(v, "step")) == ("violated", [("step_returned", "s2")])


def test_served_while_stalled_unknown() -> None:
    v = check("served_while_stalled", stalled_run(True)[3:])
    assert (v.status, v.message) == ("unknown", "no stalled or idle client in the history")
    late = [*stalled_run(True)[:2], H("peer_finished", 25, step="r1"), *stalled_run(False)[2:4]]
    v = check("served_while_stalled", late)  # sent after the stalled peer finished
    assert (v.status, v.message) == ("unknown", "no request was sent while a client stalled")


# ------------------------------------------------------------------ survives_bad_input
BAD_REPLY = {"status": "error", "error_type": "bad_request"}


def send(step: str, t: int, fault: str, ok: bool, value: Any, error: str = "") -> Event:
    return H("step_returned", t, step=step, kind="send", fault=fault, ok=ok, value=value, error=error)


def test_survives_bad_input_ok() -> None:
    v = check("survives_bad_input", [
        send("s0", 50, "none", False, None, "no reply (connection closed)"),  # before any bad input: not ours
        send("g1", 100, "garbage_body", True, BAD_REPLY), send("z1", 150, "zero_length", True, None),
        send("s2", 200, "none", True, {"status": "success", "error_type": None}),
    ])
    assert (v.status, v.message) == ("ok", "2 malformed frame(s), listener kept serving")


def test_survives_bad_input_violated_by_a_dead_thread() -> None:
    v = check("survives_bad_input", [
        send("g1", 100, "garbage_body", True, None),
        LE("thread_crashed", 90, error="ExtraData: unpack(b) received extra data."),
    ])
    assert v.status == "violated"
    assert ev(v, "error") == [("thread_crashed", "ExtraData: unpack(b) received extra data.")]
    assert v.message == "a thread died"


def test_survives_bad_input_violated() -> None:
    v = check("survives_bad_input", [send("g1", 100, "garbage_body", True, {"status": "success"})])
    assert (v.status, v.message) == ("violated", "a malformed frame was answered as valid")
    assert ev(v, "step") == [("step_returned", "g1")]
    v = check("survives_bad_input", [send("g1", 100, "oversize_length", True, BAD_REPLY),
                                     send("s2", 200, "none", False, None, "no reply (connection closed)")])
    assert (v.status, v.message) == ("violated", "a good request failed after bad input")
    assert ev(v, "step", "error") == [("step_returned", "s2", "no reply (connection closed)")]


def test_survives_bad_input_unknown() -> None:
    v = check("survives_bad_input", [send("s2", 200, "none", True, {"status": "success"})])
    assert (v.status, v.message) == ("unknown", "no malformed frame was sent")


# ------------------------------------------------------------------ exit_without_stall
def test_exit_without_stall_ok() -> None:
    v = check("exit_without_stall", [
        E("exit_requested", 0, reason="command", shutdown=True), E("exit_hook_started", 10, listeners=1),
        E("exit_hook_finished", 10 + 3_000_000, ok=True, left=0), E("process_exited", S, returncode=0),
        E("engine_died", 100, pid=W2, rank=L1), E("process_exited", 200, pid=W2, rank=L1, returncode=0),
    ], {"within": 2})
    assert (v.status, v.message) == ("ok", "2 process(es) exited in time")
    assert v.notes == ("pp0/rank0: exit hook 3.0 ms",)


def test_exit_without_stall_violated() -> None:
    v = check("exit_without_stall", [E("exit_requested", 0, reason="command"), E("process_exited", 5 * S)],
              {"within": 2})
    assert v.status == "violated"
    assert ev(v) == [("exit_requested",), ("process_exited",)]
    assert "took longer than 2.0s to exit" in v.message


def test_exit_without_stall_counts_processes() -> None:
    v = check("exit_without_stall", [E("exit_requested", 0, reason="command"), E("process_exited", 5 * S)],
              {"within": 2})
    assert v.message.startswith("1 process(es) took longer")


def test_exit_without_stall_violated_by_a_process_that_never_exits() -> None:
    v = check("exit_without_stall", [E("exit_requested", 0, reason="sigterm"),
                                     E("process_exited", 100, pid=W2, rank=L1)])  # asked nothing, exited
    assert (v.status, ev(v, "reason")) == ("violated", [("exit_requested", "sigterm")])
    assert v.message == "1 process(es) took longer than 2.0s to exit, or never exited"


def test_exit_without_stall_unknown() -> None:
    v = check("exit_without_stall", [E("process_exited", 100)])
    assert (v.status, v.message) == ("unknown", "no process was asked to exit")


# ------------------------------------------------------------------ no_leftover_paths / no_leftover_shm
ROOT = "/tmp/lc-abc"
DIR = f"{ROOT}/lastcall-tp-t-96a6b1b7"
SOCK = f"{DIR}/w0.sock"


def test_no_leftover_paths_ok() -> None:
    before = snap("before", paths=(PathEntry(ROOT, "dir", 1), PathEntry(f"{ROOT}/keep", "socket", 5)))
    after = snap("after", paths=(PathEntry(ROOT, "dir", 1), PathEntry(f"{ROOT}/keep", "socket", 5)))
    assert check("no_leftover_paths", [], before=before, after=after).status == "ok"


def test_no_leftover_paths_violated() -> None:
    before = snap("before", paths=(PathEntry(ROOT, "dir", 1), PathEntry(f"{ROOT}/keep", "socket", 5)))
    after = snap("after", paths=(PathEntry(ROOT, "dir", 1), PathEntry(f"{ROOT}/keep", "socket", 9),  # replaced
                                 PathEntry(DIR, "dir", 6), PathEntry(SOCK, "socket", 7)))
    v = check("no_leftover_paths", [], before=before, after=after)
    assert (v.status, v.evidence) == ("violated", ())
    assert v.message == f"left behind: {[f'{ROOT}/keep', DIR, SOCK]}"


def test_no_leftover_paths_unknown() -> None:
    v = check("no_leftover_paths", [], after=snap("after"))
    assert (v.status, v.message) == ("unknown", "no before/after snapshots")


def test_no_leftover_shm_ok() -> None:
    before = snap("before", shm=(ShmEntry("other-app", 4096, 3),))
    assert check("no_leftover_shm", [], before=before, after=snap("after", shm=before.shm)).status == "ok"


def test_no_leftover_shm_violated() -> None:
    before = snap("before", shm=(ShmEntry("other-app", 4096, 3),))
    after = snap("after", shm=(ShmEntry("other-app", 4096, 3), ShmEntry("lastcall-usage-ab12", 65536, 4)))
    v = check("no_leftover_shm", [], before=before, after=after)
    assert (v.status, v.message) == ("violated", "left in /dev/shm: ['lastcall-usage-ab12']")
    assert check("no_leftover_shm", [], before=before).status == "unknown"


# ------------------------------------------------------------------ port_released
def tcp(state: str, port: int = 5600, pids: tuple[int, ...] = ()) -> SocketEntry:
    return SocketEntry("tcp", state, f"127.0.0.1:{port}", port, 1000 + port, pids)


def bind(ok: bool, port: int = 5600, reuseaddr: bool = False) -> BindResult:
    return BindResult("127.0.0.1", port, ok, "" if ok else "EADDRINUSE: Address already in use", reuseaddr)


def test_port_released_ok() -> None:
    after = snap("after", sockets=(tcp("LISTEN", 6000),), binds=(bind(True),))
    v = check("port_released", [], {"ports": [5600]}, after=after)
    assert (v.status, v.message, v.notes) == ("ok", "ports [5600] free", ())


def test_port_released_ok_with_time_wait_reported() -> None:
    after = snap("after", sockets=(tcp("TIME_WAIT"),), binds=(bind(False),))
    v = check("port_released", [], {"ports": [5600]}, after=after)
    assert (v.status, v.notes) == ("ok", ("127.0.0.1:5600 in TIME_WAIT (reported, not a violation)",))


def test_port_released_violated() -> None:
    after = snap("after", sockets=(tcp("LISTEN", pids=(42,)),), binds=(bind(False),))
    started = H("handshake_listener_started", 10, host="127.0.0.1", port=5600)
    v = check("port_released", [started], after=after)  # the port comes from the history
    assert (v.status, v.message) == ("violated", "still LISTENing: 127.0.0.1:5600 held by pid [42] (after)")


def test_port_released_violated_by_a_failed_bind() -> None:
    v = check("port_released", [], {"ports": [5600]}, after=snap("after", binds=(bind(False),)))
    assert (v.status, v.message) == ("violated", "a trial bind failed: 5600: EADDRINUSE: Address already in use")


def test_port_released_violated_by_a_failed_reuseaddr_bind_despite_time_wait() -> None:
    after = snap("after", sockets=(tcp("TIME_WAIT"),), binds=(bind(False, reuseaddr=True),))
    assert check("port_released", [], {"ports": [5600]}, after=after).status == "violated"


def test_port_released_unknown() -> None:
    v = check("port_released", [], after=snap("after"))
    assert (v.status, v.message) == ("unknown", "no port to judge: the run bound none")
    assert check("port_released", [], {"ports": [5600]}).message == "no after snapshot"


# ------------------------------------------------------------------ no_leaked_threads / no_leaked_fds
BASE_THREADS = ["MainThread", "lastcall-ctl"]
BASE_FDS: list[list[Any]] = [[0, "dev", "/dev/null"], [3, "socket", "socket:[100]"], [4, "pipe", "pipe:[101]"]]


def test_no_leaked_threads_ok() -> None:
    v = check("no_leaked_threads", [
        resources(W, "before_start", 10, BASE_THREADS, BASE_FDS),
        resources(W, "after_shutdown", 900, [*BASE_THREADS, "lastcall-cmd-exit"], BASE_FDS),  # transient
    ])
    assert (v.status, v.message) == ("ok", "1 process(es) back to their threads before start")


def test_no_leaked_threads_violated() -> None:
    v = check("no_leaked_threads", [
        resources(W, "before_start", 10, BASE_THREADS, BASE_FDS),
        resources(W, "after_shutdown", 900, [*BASE_THREADS, "lastcall-listener-pp0/rank0"], BASE_FDS),
    ])
    assert v.status == "violated"
    assert ev(v, "when") == [("process_resources", "before_start"), ("process_resources", "after_shutdown")]
    assert v.message == "threads left after shutdown: pid 10: ['lastcall-listener-pp0/rank0']"


def test_no_leaked_threads_unknown() -> None:
    v = check("no_leaked_threads", [resources(W, "before_start", 10, BASE_THREADS, BASE_FDS),
                                    resources(W, "at_exit", 900, BASE_THREADS, BASE_FDS)])  # never shut down cleanly
    assert (v.status, v.message) == ("unknown", "no process reported its threads before start and after shutdown")


def test_no_leaked_fds_ok() -> None:
    v = check("no_leaked_fds", [
        resources(W, "before_start", 10, BASE_THREADS, BASE_FDS),
        resources(W, "after_shutdown", 900, BASE_THREADS, [*BASE_FDS, [9, "file", "/tmp/lc-abc/stacks.txt"]]),
    ])
    assert (v.status, v.message) == ("ok", "1 process(es) hold no new socket, pipe or epoll")


def test_no_leaked_fds_violated() -> None:
    v = check("no_leaked_fds", [
        resources(W, "before_start", 10, BASE_THREADS, BASE_FDS),
        resources(W, "after_shutdown", 900, BASE_THREADS,
                  [*BASE_FDS, [7, "socket", "socket:[999]"], [8, "anon", "anon_inode:[eventpoll]"]]),
    ])
    assert (v.status, v.message) == (
        "violated", "descriptors left after shutdown: pid 10: ['anon_inode:[eventpoll]', 'socket:[999]']")
    assert check("no_leaked_fds", []).message == "no process reported its fds before start and after shutdown"


def test_no_leaked_fds_violated_by_identity_not_count() -> None:
    v = check("no_leaked_fds", [
        resources(W, "before_start", 10, BASE_THREADS, [[3, "socket", "socket:[100]"]]),
        resources(W, "after_shutdown", 900, BASE_THREADS, [[5, "socket", "socket:[555]"]]),
    ])
    assert v.status == "violated"


# ------------------------------------------------------------------ no_orphan_processes
def proc(pid: int, state: str = "S", ppid: int = HARNESS) -> ProcEntry:
    return ProcEntry(pid, ppid, pid, 1234, "lastcall-worker", state)


def test_no_orphan_processes_ok() -> None:
    after = snap("after", procs=(proc(5),), harness_pids=(5,))  # the fork server is the harness's own
    assert check("no_orphan_processes", [], after=after).status == "ok"


def test_no_orphan_processes_violated() -> None:
    after = snap("after", procs=(proc(5), proc(77, ppid=1), proc(78, "Z")), harness_pids=(5,))
    v = check("no_orphan_processes", [], after=after)
    assert v.status == "violated"
    assert v.message == "still present after the run: pid 77 lastcall-worker (ppid 1), pid 78 lastcall-worker (zombie)"
    assert check("no_orphan_processes", []).message == "no after snapshot"


# ------------------------------------------------------------------ gpu_memory_released
SPAWNED = [H("process_spawned", 10, pid=77, role="worker", label=L0)]


def test_gpu_memory_released_ok() -> None:
    before = snap("before", gpu=(), gpu_used={0: 1000 * MiB})
    after = snap("after", gpu=(GpuProc(0, 4242, 512 * MiB),), gpu_used={0: 1032 * MiB})  # someone else's; +32 MiB
    assert check("gpu_memory_released", SPAWNED, before=before, after=after).status == "ok"


def test_gpu_memory_released_violated() -> None:
    before = snap("before", gpu=(), gpu_used={0: 1000 * MiB})
    after = snap("after", gpu=(GpuProc(0, 77, 1024 * MiB),), gpu_used={0: 2024 * MiB})
    v = check("gpu_memory_released", SPAWNED, before=before, after=after)
    assert (v.status, v.message) == ("violated", "still holding GPU memory: pid 77 on cuda:0 (1024 MiB)")
    after = snap("after", gpu=(), gpu_used={0: 1100 * MiB})
    v = check("gpu_memory_released", SPAWNED, before=before, after=after)
    assert (v.status, v.message) == ("violated", f"device memory above the baseline: {{0: {100 * MiB}}}")


def test_gpu_memory_released_unknown() -> None:
    v = check("gpu_memory_released", SPAWNED, before=snap("before"), after=snap("after"))
    assert (v.status, v.message) == ("unknown", "no GPU probe on this machine")


# ------------------------------------------------------------------ judge
def test_judge_unknown_checker() -> None:
    v = judge("no_such_checker", RunRecord(()))
    assert (v.checker, v.status, v.message) == ("no_such_checker", "unknown", "no checker named 'no_such_checker'")


@pytest.mark.parametrize(("params", "word"), [({"within": -1}, "within"), ({"withn": 1}, "withn")])
def test_judge_bad_parameters(params: dict[str, Any], word: str) -> None:
    v = judge("stop_latency", RunRecord(tuple(phased_stop(500))), params)
    assert v.status == "unknown"
    assert v.message.startswith("bad parameters:") and word in v.message


def test_judge_takes_a_params_model() -> None:
    assert judge("stop_latency", RunRecord(tuple(phased_stop(3 * S))), StopLatency(within=5)).status == "ok"


def test_judge_a_crashing_checker_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(run: RunRecord, p: Params) -> Verdict:
        raise RuntimeError("kaboom")

    monkeypatch.setitem(CHECKER_PARAMS, "boom", Params)
    monkeypatch.setitem(CHECKERS, "boom", Checker("boom", boom, "raises"))
    v = judge("boom", RunRecord(()))
    assert (v.status, v.message) == ("unknown", "checker crashed: RuntimeError: kaboom")
    assert "Traceback" in v.notes[0]


def test_judge_a_checker_crashing_on_malformed_data_is_unknown() -> None:
    # an allocator_state whose "mapped" is not a list of offsets: the checker crashes, the verdict is unknown
    v = check("kv_state_consistent", [E("allocator_state", 100, worker="pp0/rank0", mapped=5, pending=None)])
    assert (v.status, v.message) == ("unknown", "checker crashed: TypeError: 'int' object is not iterable")


def test_survives_bad_input_tolerates_a_reply_that_is_not_a_map() -> None:
    v = check("survives_bad_input", [send("g1", 100, "garbage_body", True, "no reply")])
    assert v.status == "ok"


def test_judge_all_keeps_the_order() -> None:
    run = RunRecord(tuple(phased_stop(500)))
    assert [(v.checker, v.status) for v in judge_all(run, [("stop_latency", {}), ("no_late_dispatch", {})])] == \
        [("stop_latency", "ok"), ("no_late_dispatch", "ok")]


def test_verdict_to_dict_round_trips_through_json() -> None:
    v = check("no_late_dispatch", [LE("stop_started", 100), LE("dispatch_started", 150, conn=1, cmd="map")])
    d = json.loads(json.dumps(v.to_dict()))
    assert d == v.to_dict()
    assert (d["checker"], d["status"]) == ("no_late_dispatch", "violated")
    assert tuple(Event(**e) for e in d["evidence"]) == v.evidence


# ------------------------------------------------------------------ a recorded history
def recorded() -> list[Event]:
    """The reference worker: two requests on a kept-alive connection, a second one stalled after its
    header, then shutdown (recorded in-process; see the fixture)."""
    events, problems = read_jsonl(HISTORIES / "reference-stop-clean.jsonl")
    assert problems == []
    return events


@pytest.mark.parametrize("name", ["no_late_dispatch", "no_dispatch_after_teardown", "reads_cancelled",
                                  "handler_drained", "retained_for_retry", "teardown_deferred", "stop_latency"])
def test_recorded_reference_stop_is_clean(name: str) -> None:
    v = check(name, recorded())
    assert v.status == "ok", v.message


def test_recorded_reference_stop_with_a_planted_late_dispatch() -> None:
    events = recorded()
    stop = next(e for e in events if e.kind == "stop_started")
    late = Event(stop.t_ns + 1, stop.pid, stop.role, stop.rank, "lastcall-listener-pp0/rank0", "dispatch_started",
                 {"listener": "pp0/rank0", "conn": 2, "cmd": "map_to_kv_tensors", "id": None})
    v = check("no_late_dispatch", [*events, late])
    assert (v.status, v.evidence) == ("violated", (stop, late))
    v = check("no_dispatch_after_teardown", [*events, late])  # and it never finishes
    assert v.status == "violated"


def test_requests_served_ok() -> None:
    v = check("requests_served", [H("step_returned", 10, step="q1", kind="send", ok=True, fault="none")])
    assert (v.status, v.message) == ("ok", "1 request(s) served")


def test_requests_served_violated() -> None:
    # rmtree_dir: stopping rank 0 removed rank 1's socket, so rank 1 can no longer be reached
    v = check("requests_served", [
        H("step_returned", 10, step="q1", kind="send", ok=True, fault="none"),
        H("step_returned", 20, step="q2", kind="send", ok=False, fault="none",
          error="FileNotFoundError: [Errno 2] No such file or directory"),
    ])
    assert v.status == "violated"
    assert ev(v, "step") == [("step_returned", "q2")]
    assert v.message == "1 request(s) failed: FileNotFoundError: [Errno 2] No such file or directory"


def test_requests_served_unknown() -> None:
    v = check("requests_served", [H("step_returned", 10, step="z", kind="send", ok=True, fault="zero_length")])
    assert (v.status, v.message) == ("unknown", "no well-formed request was sent")


def call_step(step: str, t: int, ok: bool, error: str = "") -> list[Event]:
    return [H("step_started", t, step=step, kind="call"),
            H("step_returned", t + 50, step=step, kind="call", ok=ok, value=[0] if ok else None, error=error)]


def test_calls_answered_ok() -> None:
    assert check("calls_answered", call_step("m1", 100, True)).message == "1 call(s) answered"
    both = call_step("m1", 100, True) + call_step("m2", 300, False, "timed out")
    assert check("calls_answered", both, {"calls": ["m1"]}).status == "ok"


def test_calls_answered_violated() -> None:
    lost = "StateConsistencyError: 0 bytes read on a total of 4 expected bytes"
    v = check("calls_answered", call_step("m1", 100, True) + call_step("m2", 300, False, lost))
    assert v.status == "violated"
    assert v.message == f"m2 got no answer: {lost}"
    assert ev(v, "step") == [("step_returned", "m2")]


def test_calls_answered_unknown() -> None:
    assert check("calls_answered", []).message == "no call step returned in the history"
    v = check("calls_answered", call_step("m1", 100, True), {"calls": ["m9"]})
    assert (v.status, v.message) == ("unknown", "no call step m9 returned in the history")


def ctl_steps(found: list[dict[str, Any]], removed: list[str], delete_ok: bool = True) -> list[Event]:
    return [H("step_returned", 100, step="l1", kind="ctl", ok=True, value=found),
            H("step_returned", 200, step="d1", kind="ctl", ok=delete_ok, value=removed if delete_ok else None,
              error="" if delete_ok else "InstanceInUse: owner 12 is alive")]


DEAD_SOCKET = {"key": "r1-abc", "alive": False, "artifacts": [
    {"kind": "socket", "path": "/tmp/lc-x/r/lastcall-r1-abc/w0.sock", "state": "dead"},
    {"kind": "usage", "path": "/dev/shm/lastcall-r1", "state": "alive"}]}
CTL = {"found": "l1", "deleted": "d1"}


def test_ctl_cleans_ok() -> None:
    v = check("ctl_cleans", ctl_steps([DEAD_SOCKET], ["/tmp/lc-x/r/lastcall-r1-abc/w0.sock", "/tmp/lc-x/r"]), CTL)
    assert (v.status, v.message) == ("ok", "1 leftover(s) of a dead owner found and removed")


def test_ctl_cleans_violated() -> None:
    nothing_dead = {**DEAD_SOCKET, "artifacts": [DEAD_SOCKET["artifacts"][1]]}
    v = check("ctl_cleans", ctl_steps([nothing_dead], []), CTL)
    assert v.status == "violated" and v.message.startswith("l1: ctl list found no leftovers of a dead owner")
    v = check("ctl_cleans", ctl_steps([DEAD_SOCKET], ["/tmp/lc-x/r"]), CTL)
    assert v.message == ("d1: ctl delete did not remove the dead owner's leftovers (still there: "
                         "['/tmp/lc-x/r/lastcall-r1-abc/w0.sock'])")
    v = check("ctl_cleans", ctl_steps([DEAD_SOCKET], [], delete_ok=False), CTL)
    assert v.message.endswith("(InstanceInUse: owner 12 is alive)")


def test_ctl_cleans_unknown() -> None:
    v = check("ctl_cleans", [], CTL)
    assert (v.status, v.message) == ("unknown", "no ctl step l1, d1 returned in the history")


# ------------------------------------------------------------------ evidence: no verdict on nothing
HARNESS_ONLY = [  # what a run of a target that emits nothing leaves: the harness's own steps and processes
    H("process_spawned", 10, pid=W, role="worker", label=L0),
    *stop_step("s1", 100, True), *stop_step("sd", 300, True, kind="shutdown"),
    H("process_exited", 500, status=0),
]
LISTENER_MISSING = "the listener emitted none of listener_started, handshake_listener_started, stop_started"


@pytest.mark.parametrize("name", ["handler_drained", "retained_for_retry", "teardown_deferred",
                                  "no_dispatch_after_teardown"])
def test_listener_checkers_are_unknown_on_the_harness_steps_alone(name: str) -> None:
    # these returned ok on this history before checkers declared their evidence
    v = check(name, HARNESS_ONLY)
    assert v.status == "unknown"
    assert LISTENER_MISSING in v.message
    assert not v.passes


def test_teardown_deferred_names_both_missing_parties() -> None:
    v = check("teardown_deferred", HARNESS_ONLY)
    assert "the worker emitted none of stop_all_returned" in v.message
    v = check("teardown_deferred", [*HARNESS_ONLY, LE("listener_started", 20)])  # the listener alone is not enough
    assert v.status == "unknown" and LISTENER_MISSING not in v.message and "the worker emitted none" in v.message


def test_fault_fired_is_unknown_when_nothing_was_armed() -> None:
    v = check("fault_fired", HARNESS_ONLY)  # returned "0 armed fault(s) fired" before
    assert (v.status, v.message) == ("unknown", "no fault was armed in the history: nothing to have fired")


def test_a_party_the_target_declares_absent_is_not_judged() -> None:
    record = RunRecord(tuple(HARNESS_ONLY), absent=frozenset({"listener"}))
    v = judge("handler_drained", record)
    assert (v.status, v.passes) == ("not_judged", True)
    assert v.message == "not judged: the target declares no listener events (no capability listener_events)"
    assert judge("stop_result", record).status == "ok"  # black-box: judged as before
    worker_only = RunRecord(tuple(HARNESS_ONLY), absent=frozenset({"worker"}))
    assert judge("teardown_deferred", worker_only).status == "not_judged"  # needs both parties
    assert judge("handler_drained", worker_only).status == "unknown"  # the listener is not declared absent


def test_allow_unknown_passes_and_prints_its_reason() -> None:
    v = judge("handler_drained", RunRecord(tuple(HARNESS_ONLY)), allow_unknown="this target has no handlers")
    assert (v.status, v.allowed, v.passes) == ("unknown", "this target has no handlers", True)
    assert v.message.endswith("[unknown allowed: this target has no handlers]")
    assert v.to_dict()["allowed"] == "this target has no handlers"
    ok_anyway = judge("stop_result", RunRecord(tuple(HARNESS_ONLY)), allow_unknown="unused")
    assert (ok_anyway.status, ok_anyway.allowed, ok_anyway.message) == ("ok", "", "2 stop(s) returned True")
    violated_anyway = judge("stop_result", RunRecord(tuple(HARNESS_ONLY)), {"returns": False}, allow_unknown="x")
    assert (violated_anyway.status, violated_anyway.passes) == ("violated", False)


def test_evidence_found_lets_the_checker_judge() -> None:
    # the same steps with the listener's own events: judged, and a handler still inside the backend is caught
    seen = [*HARNESS_ONLY, LE("listener_started", 20), LE("dispatch_started", 50, conn=1, cmd="map_to_kv_tensors")]
    v = check("handler_drained", seen)
    assert v.status == "violated"


def test_black_box_checkers_need_no_target_events() -> None:
    black_box = {n for n, c in CHECKERS.items() if c.black_box}
    assert {"handler_drained", "retained_for_retry", "teardown_deferred", "no_dispatch_after_teardown",
            "no_late_dispatch", "reads_cancelled", "kv_state_consistent", "stop_latency"}.isdisjoint(black_box)
    assert {"stop_result", "requests_served", "no_leftover_paths", "port_released", "fault_fired"} <= black_box
    assert CHECKERS["stop_latency"].evidence_for(StopLatency(step="s1", within=2.0)) == {}  # a named step: black-box
