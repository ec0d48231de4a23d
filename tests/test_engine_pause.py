"""The pause nemesis (harness.launch.pauses, harness.scenario.pause_steps): ``pause`` / ``resume`` of one process of
an engine's tree, its bound, the SIGCONT before every kill, and that nothing the harness paused stays stopped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lc_helpers import free_port

from harness.engine.standin import READY_LINE
from harness.engine.tree import EngineTree
from harness.history import Event
from harness.launch import pauses
from harness.probes.procs import read_stat
from harness.scenario import ScenarioError, loads
from harness.scenario.loader import expand
from harness.scenario.runner import run_item

HEAD = """\
name: engine-pause-test
about: a pause
target: engine_standin
catches: [engine_waits_on_paused_child]
steps:
  - start: engine
"""
TAIL = """\
  - engine_signal: {to: api_server, sig: SIGTERM, as: term}
  - wait_gone: {timeout: 10s, as: gone}
expect:
  - engine_tree_exits: {within: 10s}
"""


def _scenario(steps: str, tail: str = TAIL) -> str:
    return HEAD + steps + tail


def _error(steps: str) -> str:
    with pytest.raises(ScenarioError) as info:
        loads(_scenario(steps), "p.yaml")
    return str(info.value)


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize(("step", "message"), [
    ("{to: worker, resume_after: 25s}",
     "p.yaml:7:39: steps[1].pause.resume_after: expected a value at most 20 (lastcall's limit), found '25s'"),
    ("{to: worker, resume_after: 0s}", "p.yaml:7:39: steps[1].pause.resume_after: expected a value more than 0, "
                                       "found '0s'"),
    ("{to: api_server, index: 1}", "p.yaml:7:12: steps[1].pause: index names a worker; the api_server is one process"),
    ("{to: gpu}", "p.yaml:7:17: steps[1].pause.to: expected one of: api_server, engine_core, worker, found 'gpu'"),
    ("{to: worker, resume_in: 1s}", "p.yaml:7:25: steps[1].pause: unknown key 'resume_in'; expected one of: to, "
                                    "index, of, resume_after, as (did you mean 'resume_after'?)"),
    ("{to: worker, of: {rank: 0}}", "p.yaml:7:12: steps[1].pause: of names a worker of a worker run, to and index a "
                                    "process of an engine's tree; give one or the other"),
])
def test_a_bad_pause_step_is_a_located_error(step: str, message: str) -> None:
    assert _error(f"  - pause: {step}\n").splitlines()[0] == message


def test_a_resume_names_an_earlier_pause_step() -> None:
    assert _error("  - resume: nope\n").splitlines()[0] == (
        "p.yaml:7:13: steps[1].resume: undefined step name 'nope'; expected the as: name of an earlier pause step; "
        "there is no pause step")
    assert _error("  - engine_request: {max_tokens: 2, as: r1}\n  - resume: r1\n").splitlines()[0] == (
        "p.yaml:8:13: steps[2].resume: 'r1' is a engine_request step (steps[1]); expected the as: name of an "
        "earlier pause step")
    assert _error("  - resume: p1\n  - pause: {to: worker, as: p1}\n").startswith(
        "p.yaml:7:13: steps[1].resume: undefined step name 'p1'")


def test_the_default_bound_and_the_most_one_may_ask() -> None:
    sc = loads(_scenario("  - pause: {to: worker, index: 0, as: p1}\n  - resume: p1\n"), "p.yaml")
    assert sc.steps[1].spec.resume_after == pauses.DEFAULT_BOUND_S == 5.0 and pauses.MAX_BOUND_S == 20.0
    assert sc.steps[1].spec.to == "worker" and sc.steps[2].spec == "p1"


# ------------------------------------------------------------------ the registry
@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A child that waits on its stdin (a process to pause), ended by closing it."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield proc
    pauses.resume_before_kill([proc.pid])
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(10)


def _state(pid: int) -> str | None:
    st = read_stat(pid)
    return None if st is None else st.state


def _wait_stopped(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the child is stopped: waitid reports it once the SIGSTOP is delivered (the kernel stops it in its
    own context, after the sender's call returned); a SIGCONT wakes it in the sender's, at once."""
    info = os.waitid(os.P_PID, proc.pid, os.WSTOPPED)
    return info is not None and info.si_code == os.CLD_STOPPED and _state(proc.pid) == "T"


class Events:
    """An emit that keeps what it is given, and wakes a waiter on each event."""

    def __init__(self) -> None:
        self.got: list[tuple[str, dict[str, Any]]] = []
        self.cond = threading.Condition()

    def __call__(self, kind: str, /, **data: Any) -> None:
        with self.cond:
            self.got.append((kind, data))
            self.cond.notify_all()

    def wait_for(self, kind: str, timeout: float) -> dict[str, Any] | None:
        with self.cond:
            self.cond.wait_for(lambda: any(k == kind for k, _ in self.got), timeout)
            return next((d for k, d in self.got if k == kind), None)


def test_a_pause_is_resumed_at_its_bound_by_its_timer(child: subprocess.Popen[bytes]) -> None:
    ev = Events()
    pauses.pause(child.pid, step="p1", process="child", bound=0.2, emit=ev)
    assert _wait_stopped(child) and pauses.paused_pids() == [child.pid]
    resumed = ev.wait_for("process_resumed", 10)
    assert resumed is not None and resumed["reason"] == "bound" and resumed["alive"] is True
    assert resumed["paused_s"] >= 0.2 and _state(child.pid) != "T" and pauses.paused_pids() == []
    assert [k for k, _ in ev.got] == ["process_paused", "process_resumed"]
    assert not any(t.name == f"lastcall-pause-{child.pid}" for t in threading.enumerate())


def test_a_resume_ends_the_pause_and_its_timer_and_a_second_is_nothing(child: subprocess.Popen[bytes]) -> None:
    ev = Events()
    pauses.pause(child.pid, step="p1", process="child", bound=20, emit=ev)
    with pytest.raises(ValueError, match=r"child \(pid \d+\) is paused already \(by step p1\)"):
        pauses.pause(child.pid, step="p2", process="child", bound=1, emit=ev)
    assert _wait_stopped(child)
    assert pauses.resume(child.pid, "step", step="r1") is True and _state(child.pid) != "T"
    assert pauses.resume(child.pid, "step") is False
    assert [(k, d.get("reason"), d.get("step")) for k, d in ev.got] == [
        ("process_paused", None, "p1"), ("process_resumed", "step", "r1")]
    assert not any(t.name == f"lastcall-pause-{child.pid}" for t in threading.enumerate())


@pytest.mark.parametrize("bound", [0, -1, 20.5])
def test_a_pause_bound_outside_its_range_is_refused(child: subprocess.Popen[bytes], bound: float) -> None:
    with pytest.raises(ValueError, match="a pause's bound is from 0 to 20 s"):
        pauses.pause(child.pid, step="p1", process="child", bound=bound, emit=Events())
    assert _state(child.pid) != "T" and pauses.paused_pids() == []


# ------------------------------------------------------------------ SIGCONT before every kill
@pytest.fixture
def tree(short_tmp: Path) -> Iterator[EngineTree]:
    t = EngineTree([sys.executable, "-m", "harness.engine.standin", "serve", "--port", str(free_port())],
                   short_tmp / "run", ready=READY_LINE, failed=r"^ERROR: ", path_vars=("VLLM_RPC_BASE_PATH",))
    t.start(timeout=30)
    yield t
    t.close()
    assert t.members() == [] and pauses.paused_pids() == []


def test_the_close_of_a_tree_resumes_its_paused_process_before_the_kill(tree: EngineTree,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    worker = tree.find(r"^VLLM::Worker")[0].pid
    ev = Events()
    pauses.pause(worker, step="p1", process="VLLM::Worker", bound=20, emit=ev)
    seen: list[str | None] = []
    real = pauses.resume

    def resume(pid: int, reason: str, step: str | None = None) -> bool:
        resumed = real(pid, reason, step)
        seen.append(_state(pid))  # after the SIGCONT, before the close's SIGKILL
        return resumed

    monkeypatch.setattr(pauses, "resume", resume)
    killed = tree.close()
    assert worker in {m.pid for m in killed} and seen and seen[0] != "T"
    assert [(k, d["reason"]) for k, d in ev.got if k == "process_resumed"] == [("process_resumed", "before_kill")]


def test_a_signal_to_a_paused_process_resumes_it_first(tree: EngineTree) -> None:
    core = tree.find(r"^VLLM::EngineCor")[0].pid
    ev = Events()
    pauses.pause(core, step="p1", process="VLLM::EngineCor", bound=20, emit=ev)
    tree.signal(15, core)  # SIGTERM: a stopped process would hold it pending until resumed
    assert ev.wait_for("process_resumed", 0) == {**ev.got[1][1], "reason": "before_kill"}
    assert tree.wait_gone(10)  # the engine core stopped, and the API server after it


# ------------------------------------------------------------------ scenarios on the stand-in
def _run(text: str, variant: str = "engine_standin") -> Any:
    return run_item(expand(loads(text, "p.yaml"))[0], variant=variant)


def _of(result: Any, kind: str) -> list[Event]:
    return [e for e in result.events if e.kind == kind]


def _resumed_before_every_kill(result: Any) -> None:
    """Every process a pause step paused is resumed once, and before any signal a step sent it and before the
    close of its tree (``engine_closed``)."""
    events = list(result.events)
    for paused in _of(result, "process_paused"):
        pid = paused.data["pid"]
        resumes = [i for i, e in enumerate(events) if e.kind == "process_resumed" and e.data["pid"] == pid]
        kills = [i for i, e in enumerate(events) if e.kind == "engine_closed" or (
            e.kind == "step_returned" and e.data.get("kind") == "engine_signal" and e.data.get("value") == pid)]
        assert len(resumes) == 1 and all(resumes[0] < k for k in kills), (pid, resumes, kills)


def test_a_signal_step_to_a_paused_process_resumes_it_before_the_signal() -> None:
    result = _run(_scenario("  - pause: {to: api_server, as: p1}\n"))
    assert result.step_error == "" and {v.checker: v.status for v in result.verdicts} == {"engine_tree_exits": "ok"}
    kinds = [(e.kind, e.data.get("step"), e.data.get("reason")) for e in result.events
             if e.kind in ("process_paused", "process_resumed")
             or (e.data.get("step") == "term" and e.kind.startswith("step_"))]
    assert kinds == [("process_paused", "p1", None), ("step_started", "term", None),
                     ("process_resumed", None, "before_kill"), ("step_returned", "term", None)]
    _resumed_before_every_kill(result)


def test_nothing_stays_stopped_when_the_scenario_fails_after_its_pauses() -> None:
    result = _run(_scenario("  - pause: {to: worker, as: p1}\n  - pause: {to: engine_core, as: p2}\n"
                            "  - wait: {event: engine_stream_started, timeout: 100ms}\n"))
    assert "no engine_stream_started event" in result.step_error
    paused = [e.data["pid"] for e in _of(result, "process_paused")]
    assert len(paused) == 2
    assert sorted((e.data["pid"], e.data["reason"]) for e in _of(result, "process_resumed")) == \
        sorted((pid, "run_end") for pid in paused)
    _resumed_before_every_kill(result)
    assert all(_state(pid) in (None, "Z") for pid in paused) and pauses.paused_pids() == []


def test_a_pause_of_a_process_the_tree_lacks_is_a_step_error_naming_what_it_has() -> None:
    result = _run(_scenario("  - pause: {to: worker, index: 3, as: p1}\n"))
    assert result.step_error.endswith("pause: no worker 3: the tree has 1 (VLLM::Worker pid "
                                      f"{result.step_error.rsplit('pid ', 1)[-1]}"), result.step_error
    assert _of(result, "process_paused") == [] and pauses.paused_pids() == []


SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def test_a_correct_engine_core_kills_its_paused_worker_within_the_bound() -> None:
    result = run_item(expand(loads((SCENARIOS / "engine-worker-paused-during-stop.yaml").read_text(), "w.yaml"))[0])
    assert result.passed, result.verdicts
    (resumed,) = _of(result, "process_resumed")
    assert resumed.data["reason"] == "run_end" and resumed.data["alive"] is False  # killed by its engine core
    _resumed_before_every_kill(result)


@pytest.mark.slow
def test_the_planted_bug_waits_on_the_paused_worker_until_the_harness_resumes_it() -> None:
    item = expand(loads((SCENARIOS / "engine-worker-paused-during-stop.yaml").read_text(), "w.yaml"))[0]
    result = run_item(item, variant="engine_waits_on_paused_child")
    verdicts = {v.checker: v.status for v in result.verdicts}
    assert verdicts["engine_tree_exits"] == "violated", verdicts
    (paused,) = _of(result, "process_paused")
    gone = next(e for e in result.events if e.kind == "step_returned" and e.data.get("step") == "gone")
    assert paused.data["pid"] in {s["pid"] for s in gone.data["value"]["survivors"]}  # still there, stopped
    (resumed,) = _of(result, "process_resumed")
    assert resumed.data["reason"] == "run_end" and resumed.data["alive"] is True
    _resumed_before_every_kill(result)


def test_an_engine_paused_after_its_restart_is_not_handed_to_the_next_scenario() -> None:
    """A chained run hands on only an untouched launch: one whose process was paused (even if resumed since)
    may have lost time or a child, so the next scenario launches its own."""
    from harness.scenario.runner import run_chain

    paused = loads("name: restart-then-pause\nabout: a pause after the restart\ntarget: engine_standin\n"
                   "catches: [engine_keeps_port]\n"
                   "steps:\n  - start: engine\n  - engine_signal: {to: api_server, sig: SIGTERM, as: t}\n"
                   "  - wait_gone: {timeout: 5s, as: g}\n  - engine_restart: {as: again}\n"
                   "  - pause: {to: worker, as: p}\n  - resume: p\n"
                   "expect:\n  - engine_port_released\n", "chain.yaml")
    first, second = run_chain([expand(paused)[0], expand(loads(
        (SCENARIOS / "engine-sigkill-engine-core.yaml").read_text(), "core.yaml"))[0]], variant="engine_standin")
    assert first.passed and second.passed, (first.verdicts, second.verdicts)
    assert _of(second, "engine_handed") == [] and len(_of(second, "engine_launched")) == 1
    assert [e.data["reason"] for e in _of(first, "process_resumed")] == ["step"]


def test_the_leak_check_resumes_and_reports_a_pause_left_behind(child: subprocess.Popen[bytes]) -> None:
    from harness import leakguard

    before = leakguard.take()
    pauses.pause(child.pid, step="p1", process="child", bound=20, emit=Events())
    assert _wait_stopped(child)
    assert leakguard.diff(before) == [f"processes left paused (SIGSTOP): [{child.pid}] (resumed)"]
    assert _state(child.pid) != "T" and pauses.paused_pids() == []


@pytest.mark.slow  # it waits out the run's deadline
def test_the_watchdog_resumes_a_paused_process_before_it_kills_the_tree() -> None:
    from tests.test_engine_host import HUNG

    text = HUNG.replace("  - engine_signal:", "  - pause: {to: worker, resume_after: 20s, as: p1}\n  - engine_signal:")
    result = run_item(expand(loads(text, "<hung>"))[0])
    assert result.outcome.status == "hung"
    kinds = [e.kind for e in result.events]
    (resumed,) = _of(result, "process_resumed")
    assert resumed.data["reason"] == "before_kill" and resumed.data["alive"] is True
    assert kinds.index("watchdog_fired") < kinds.index("process_resumed") < kinds.index("engine_closed")
    assert pauses.paused_pids() == []
