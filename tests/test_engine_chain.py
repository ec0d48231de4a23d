"""A chained engine run (harness.scenario.chain): a scenario that ends by restarting its engine hands that ready,
untouched engine to the next scenario of the same flags; one run, each scenario judged on its own window.

Proven on the well-behaved stand-in (every chained scenario passes, with fewer launches) and on planted bugs
(a scenario that started on a handed engine still catches what it names), and against what must not be handed
(an engine touched after its restart; a scenario of other flags)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.report.rejudge import report_history
from harness.report.write import write_run
from harness.scenario import load
from harness.scenario.chain import gives, launch_key, plan
from harness.scenario.loader import MatrixItem, expand
from harness.scenario.result import RunResult
from harness.scenario.runner import run_chain

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def item(name: str) -> MatrixItem:
    return expand(load(str(SCENARIOS / f"{name}.yaml")))[0]


def library() -> list[MatrixItem]:
    return [expand(load(str(p)))[0] for p in sorted(SCENARIOS.glob("engine-*.yaml"))]


def kinds(r: RunResult, *which: str) -> list[str]:
    return [e.kind for e in r.events if e.kind in which]


def test_the_plan_runs_every_item_once_givers_first_and_one_receiver_per_chain() -> None:
    items = library()
    chains = plan(items)
    assert sorted(id(i) for ch in chains for i in ch) == sorted(id(i) for i in items)
    assert plan(list(reversed(items))) and [[i.scenario.name for i in ch] for ch in plan(items)] == \
        [[i.scenario.name for i in ch] for ch in chains]  # deterministic
    long = [ch for ch in chains if len(ch) > 1]
    assert long, "the engine library has scenarios that end with a restart"
    for ch in long:
        assert len({launch_key(i) for i in ch}) == 1
        assert all(gives(i) for i in ch[:-1])  # each but the last leaves a ready engine for the next
    alone = {ch[0].scenario.name for ch in chains if len(ch) == 1}
    assert "engine-nixl-held-port" in alone  # its hold_port comes before its start: its launch is its own
    assert launch_key(item("engine-nixl-held-port")) is None


@pytest.mark.slow
def test_the_chained_library_passes_on_the_standin_each_scenario_on_its_own_window() -> None:
    """The negative control: every scenario of every chain of the library passes on the stand-in, as each
    does alone (the scenario items of the default suite); every hand-over saves a launch; and each result's
    events are its own window (between its chain_item markers), after the handed engine's launch."""
    for ch in [c for c in plan(library()) if len(c) > 1]:
        results = run_chain(ch, variant="engine_standin")
        assert [r.item.scenario.name for r in results] == [i.scenario.name for i in ch]
        for k, r in enumerate(results):
            assert r.passed, (r.item.scenario.name, r.step_error, [(v.checker, v.status, v.message)
                                                                   for v in r.verdicts])
            handed = kinds(r, "engine_handed")
            assert handed == ([] if k == 0 else ["engine_handed"])  # every receiver starts on its giver's restart
            began = [e.kind for e in r.events].index("chain_item_began")
            assert r.events[-1].kind == "chain_item_ended"
            assert all(e.kind in ("engine_launched", "engine_ready") for e in r.events[:began])
            assert len(r.events[:began]) == (0 if k == 0 else 2)
        launched = {e.data["pid"] for r in results for e in r.events if e.kind == "engine_launched"}
        alone = sum(1 + sum(s.kind == "engine_restart" for s in i.scenario.steps) for i in ch)
        assert len(launched) == alone - (len(ch) - 1)


@pytest.mark.parametrize(("variant", "chain", "checker"), [
    ("engine_exits_zero_after_engine_died", ["engine-sigterm-idle", "engine-sigkill-engine-core"],
     "engine_exit_status"),
    ("engine_leaves_socket_file", ["engine-sigkill-api-server", "engine-sigterm-idle"], "engine_nothing_left"),
])
def test_a_planted_bug_is_caught_in_a_scenario_that_started_on_a_handed_engine(variant: str, chain: list[str],
                                                                               checker: str, tmp_path: Path) -> None:
    giver, receiver = run_chain([item(n) for n in chain], variant=variant)
    assert kinds(receiver, "engine_handed") == ["engine_handed"]
    assert {v.checker: v.status for v in receiver.verdicts}[checker] == "violated"
    if variant == "engine_leaves_socket_file":  # what the handed tree left is the receiver's: it ended that tree
        handed = next(e for e in receiver.events if e.kind == "engine_handed").data["launch"]
        assert any(f"/e{handed}/" in p for p in receiver.outcome.leftovers)
        assert not any(f"/e{handed}/" in p for p in giver.outcome.leftovers) and giver.outcome.leftovers
    # and its report alone, re-judged by `lastcall report`, says the same (the window is all it needs)
    write_run(receiver, tmp_path)
    out = tmp_path / "again"
    report_history(tmp_path / receiver.run_id / "history.jsonl", out=out)
    again = json.loads((out / "verdicts.json").read_text())["verdicts"]
    assert [(v["checker"], v["status"]) for v in again] == [(v.checker, v.status) for v in receiver.verdicts]


def test_an_engine_touched_after_its_restart_is_not_handed(tmp_path: Path) -> None:
    touched = tmp_path / "touched.yaml"
    touched.write_text("name: restart-then-request\nabout: a request after the restart\ntarget: engine_standin\n"
                       "catches: [engine_keeps_port]\n"
                       "steps:\n  - start: engine\n  - engine_signal: {to: api_server, sig: SIGTERM, as: t}\n"
                       "  - wait_gone: {timeout: 5s, as: g}\n"
                       "  - engine_restart: {as: again}\n  - engine_request: {max_tokens: 4, as: r}\n"
                       "expect:\n  - engine_port_released\n  - engine_requests_end\n")
    first, second = run_chain([expand(load(str(touched)))[0], item("engine-sigkill-engine-core")],
                              variant="engine_standin")
    assert first.passed and second.passed
    assert kinds(second, "engine_handed") == [] and kinds(second, "engine_launched") == ["engine_launched"]
    assert len(kinds(first, "engine_closed")) == 2  # both of its trees ended between the two scenarios


def test_scenarios_of_other_flags_are_no_chain() -> None:
    with pytest.raises(ConfigError, match="one launch key"):
        run_chain([item("engine-sigterm-idle"), item("engine-tp2-sigterm-idle")], variant="engine_standin")


def test_once_the_watchdog_fired_the_rest_of_the_chain_is_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watchdog's thread ends when it fires: a later scenario of the chain would run without a safety net,
    so it is not run (its step error says why) and launches nothing."""
    from harness.engine.host import EngineHost

    between = EngineHost.between

    def fired_meanwhile(self: EngineHost, next_scenario: object) -> bool:
        self.c.rec.emit("watchdog_fired", deadline_s=1.0)  # as the watchdog records it when it fires
        return between(self, next_scenario)

    monkeypatch.setattr(EngineHost, "between", fired_meanwhile)
    first, second = run_chain([item("engine-sigterm-idle"), item("engine-sigkill-engine-core")],
                              variant="engine_standin")
    assert first.outcome.status == "hung"  # its window holds the watchdog's firing
    assert second.step_error == "StepError: not run: the chained run's watchdog fired in an earlier scenario"
    assert second.broken.startswith("it did not start")
    assert kinds(second, "engine_launched", "engine_handed") == []


@pytest.mark.slow
def test_a_restart_that_failed_hands_nothing_on_and_the_next_scenario_launches_its_own() -> None:
    """engine_keeps_port: the killed API server's engine core keeps the port, so the giver's restart fails (its
    engine_port_released fires). Nothing is handed; between the two every tree of the giver is ended (the port
    with it), and the next scenario launches its own engine on the same port and runs."""
    giver, receiver = run_chain([item("engine-sigkill-api-server"), item("engine-sigkill-engine-core")],
                                variant="engine_keeps_port")
    assert {v.checker: v.status for v in giver.verdicts}["engine_port_released"] == "violated"
    assert kinds(receiver, "engine_handed") == [] and kinds(receiver, "engine_launched") == ["engine_launched"]
    assert receiver.step_error == "" and kinds(receiver, "engine_ready") == ["engine_ready"]


def _lastcall(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_lastcall_run_chain_runs_each_item_on_its_own_window_of_one_chained_run(tmp_path: Path) -> None:
    """`lastcall run --chain` (pytest: --lastcall-chain): the items of one target and launch key are played as
    chained runs; each passes or fails as it would alone, with its own report."""
    files = [str(SCENARIOS / f"{n}.yaml") for n in ("engine-sigterm-idle", "engine-sigkill-engine-core")]
    proc = _lastcall("run", "--chain", "--target", "engine_standin", *files, "--lastcall-reports", str(tmp_path),
                     "--", "-p", "no:randomly")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 scenario runs: 2 passed" in proc.stdout
    histories = {p.parent.name: p.read_text() for p in tmp_path.glob("*/history.jsonl")}
    assert len(histories) == 2
    assert sorted(run[-2:] for run in histories) == ["-1", "-2"]  # one chained run, two windows
    assert sum('"engine_handed"' in text for text in histories.values()) == 1


def test_lastcall_run_chain_refuses_xdist_workers() -> None:
    proc = _lastcall("run", "--chain", "-n", "2", str(SCENARIOS / "engine-sigterm-idle.yaml"))
    assert proc.returncode == 2
    assert "--lastcall-chain runs in one process: drop -n" in proc.stderr
