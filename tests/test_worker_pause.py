"""The pause nemesis in a worker run (harness.scenario.pause_steps, harness.launch.pauses): ``pause: {of: {rank,
pp}}`` stops one worker process of the reference cluster, and nothing stays stopped: it is resumed at its bound,
before any kill (a kill step, the cluster's close, the watchdog) and when the run's steps end."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from harness.history import Event
from harness.launch import pauses
from harness.launch.cluster import ORDERLY_S, Cluster
from harness.probes.procs import read_stat
from harness.scenario import ScenarioError, loads
from harness.scenario.loader import expand
from harness.scenario.runner import run_item

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
HEAD = """\
name: worker-pause-test
about: a pause of a worker
catches: [no_conn_tracking]
topology: {tp: 1, pp: 1}
config: {ipc_timeout: 10s}  # the bound of a wait and of the kill step's exit: a safety net
steps:
  - start: cluster
"""
EXPECT = "expect:\n  - no_orphan_processes\n"


def _run(steps: str, head: str = HEAD) -> Any:
    return run_item(expand(loads(head + steps + EXPECT, "p.yaml"))[0])


def _of(result: Any, kind: str) -> list[Event]:
    return [e for e in result.events if e.kind == kind]


def _state(pid: int) -> str | None:
    st = read_stat(pid)
    return None if st is None else st.state


def _error(steps: str, head: str = HEAD) -> str:
    with pytest.raises(ScenarioError) as info:
        loads(head + steps + EXPECT, "p.yaml")
    return str(info.value).splitlines()[0]


# ------------------------------------------------------------------ validation
def test_a_worker_run_pauses_a_worker_named_by_of() -> None:
    assert _error("  - pause: {resume_after: 1s}\n") == (
        "p.yaml:8:12: steps[1].pause: a worker run pauses one of its workers; expected of: {rank, pp} (to and "
        "index name a process of an engine's tree, after start: engine)")
    assert _error("  - pause: {of: {rank: 1}}\n") == (
        "p.yaml:8:24: steps[1].pause.of.rank: rank 1 does not exist when tp is 1; expected rank < 1 "
        "(topology.tp: 1)")
    assert _error("  - pause: {of: {rank: 0}, to: worker}\n") == (
        "p.yaml:8:12: steps[1].pause: of names a worker of a worker run, to and index a process of an engine's "
        "tree; give one or the other")
    sc = loads(HEAD + "  - pause: {of: {rank: 0}, as: p1}\n  - resume: p1\n" + EXPECT, "p.yaml")
    assert sc.steps[1].spec.of.label == "pp0/rank0" and sc.steps[1].spec.resume_after == pauses.DEFAULT_BOUND_S


def test_an_engine_run_has_no_reference_workers_to_pause() -> None:
    head = ("name: e\nabout: e\ntarget: engine_standin\ncatches: [engine_waits_on_paused_child]\nsteps:\n"
            "  - start: engine\n")
    assert _error("  - pause: {of: {rank: 0}}\n", head=head) == (
        "p.yaml:7:17: steps[1].pause.of: an engine run has no reference workers; expected to: api_server, "
        "engine_core or worker (and index) naming a process of the engine's tree")
    # start: engine alone makes the run an engine run: the pause then names a process of the engine's tree
    sc = loads(head + "  - pause: {to: worker, as: p1}\n" + "expect:\n  - engine_tree_exits\n", "p.yaml")
    from harness.scenario.player import cast_for
    from harness.scenario.runner import STEP_KINDS  # noqa: F401 - every step kind registered

    assert cast_for(sc.steps) == "engine"


# ------------------------------------------------------------------ in a worker run
def test_a_paused_worker_is_resumed_at_its_bound_and_serves_again() -> None:
    result = _run("  - pause: {of: {rank: 0}, resume_after: 300ms, as: p1}\n"
                  "  - wait: {event: process_resumed, timeout: 5s}\n"
                  "  - call: {op: map, offsets: [0], as: m1}\n  - wait: {returned: m1, timeout: 5s}\n")
    assert result.step_error == "", result.step_error
    (paused,) = _of(result, "process_paused")
    (resumed,) = _of(result, "process_resumed")
    assert paused.data["process"] == "pp0/rank0" and paused.data["bound"] >= 0.3  # scaled by LASTCALL_TIMEOUT_SCALE
    assert resumed.data["reason"] == "bound" and resumed.data["alive"] is True and resumed.data["paused_s"] >= 0.3
    (m1,) = [e for e in _of(result, "step_returned") if e.data.get("step") == "m1"]
    assert m1.data["ok"] is True  # it runs again: the map is answered
    assert _state(paused.data["pid"]) in (None, "Z") and pauses.paused_pids() == []


def test_a_kill_step_resumes_the_paused_worker_before_its_signal() -> None:
    result = _run("  - pause: {of: {rank: 0}, resume_after: 20s, as: p1}\n"
                  "  - kill: {target: {rank: 0}, signal: SIGTERM}\n")
    assert result.step_error == "", result.step_error
    (paused,) = _of(result, "process_paused")
    kinds = [(e.kind, e.data.get("reason")) for e in result.events if e.kind == "process_resumed"
             or (e.kind == "process_exited" and e.pid == paused.data["pid"])]
    assert kinds == [("process_resumed", "before_kill"), ("process_exited", None)]
    (k1,) = [e for e in _of(result, "step_returned") if e.data.get("step") == "step2"]
    assert k1.data["ok"] is True  # it exited on the SIGTERM: a stopped process would hold it pending


def test_a_pause_still_on_when_the_steps_end_is_resumed_by_the_run_end() -> None:
    result = _run("  - pause: {of: {rank: 0}, resume_after: 20s, as: p1}\n")
    assert result.step_error == "" and result.passed, result.verdicts
    (paused,) = _of(result, "process_paused")
    (resumed,) = _of(result, "process_resumed")
    assert resumed.data["reason"] == "run_end" and resumed.data["alive"] is True
    kinds = [e.kind for e in result.events]
    assert kinds.index("process_resumed") < kinds.index("process_exited")  # the close found it running
    assert _state(paused.data["pid"]) in (None, "Z") and pauses.paused_pids() == []


def test_the_close_of_a_cluster_resumes_a_paused_worker_before_it_asks_it_to_exit() -> None:
    c = Cluster(tp=1, drain_timeout=1.0)
    try:
        c.start()
        worker = c.worker(0)
        pauses.pause(worker.pid, step="p1", process=worker.label, bound=20, emit=c.rec.emit)
    finally:
        t0 = time.monotonic()
        c.close()
    took = time.monotonic() - t0
    kinds = [(e.kind, e.data.get("reason")) for e in c.rec.events() if e.kind in ("process_resumed", "sigterm_sent")
             or (e.kind == "process_exited" and e.pid == worker.pid)]
    assert kinds == [("process_resumed", "before_kill"), ("process_exited", None)], kinds  # no SIGTERM needed
    assert worker.exit_code == 0 and took < ORDERLY_S and pauses.paused_pids() == []
    assert _state(worker.pid) in (None, "Z")


WATCHED = """\
name: a-stop-of-a-paused-worker-hangs
about: a stop sent to a paused worker waits for it longer than the watchdog allows
catches: [no_conn_tracking]
topology: {tp: 1, pp: 1}
config: {deadline: 500ms}
steps:
  - start: cluster
  - pause: {of: {rank: 0}, resume_after: 20s, as: p1}
  - stop: {on: all, as: s1}
  - wait: {returned: s1, timeout: 60s}
expect:
  - stop_result: {step: s1, returns: true}
"""


def test_the_watchdog_resumes_a_paused_worker_before_it_gathers_stacks_and_kills() -> None:
    result = run_item(expand(loads(WATCHED, "<watched>"))[0])
    assert result.outcome.status == "hung"
    (paused,) = _of(result, "process_paused")
    (resumed,) = _of(result, "process_resumed")
    assert resumed.data["reason"] == "before_kill" and resumed.data["alive"] is True
    kinds = [e.kind for e in result.events]
    first_stacks = kinds.index("stacks")
    assert kinds.index("watchdog_fired") < kinds.index("process_resumed") < first_stacks  # before any stacks
    (stacks,) = [e for e in _of(result, "stacks") if e.data["pid"] == paused.data["pid"]]
    assert not stacks.data["text"].startswith("(no stacks")  # it answered: it was running when asked
    assert _state(paused.data["pid"]) in (None, "Z") and pauses.paused_pids() == []


# ------------------------------------------------------------------ the scenario and its planted bug
@pytest.mark.slow  # both runs (~3 s); the scenario's own items prove the same in the default suite
def test_the_planted_client_waits_on_the_paused_worker_until_the_harness_resumes_it() -> None:
    item = expand(loads((SCENARIOS / "worker-paused-with-a-call-in-flight.yaml").read_text(), "w.yaml"))[0]
    good = run_item(item)
    assert good.passed, good.verdicts
    bad = run_item(item, variant="reply_without_deadline")
    verdicts = {v.checker: v.status for v in bad.verdicts}
    assert verdicts["calls_bounded"] == "violated", verdicts
    (paused,) = _of(bad, "process_paused")
    (resumed,) = _of(bad, "process_resumed")
    began, (m1,) = [[e for e in _of(bad, kind) if e.data.get("step") == "m1"] for kind in ("step_started",
                                                                                         "step_returned")]
    assert resumed.data["reason"] == "bound" and m1.data["ok"] is True  # answered, once the worker ran again
    assert (m1.t_ns - began[0].t_ns) / 1e9 >= paused.data["bound"]
    assert pauses.paused_pids() == []
