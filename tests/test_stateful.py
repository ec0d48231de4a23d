"""The lifecycle explorer (harness/explore/): Hypothesis over the reference listener's real lifecycle.

``TestReference`` explores the reference, which must keep the stop contract after
every step.  Each reachable planted bug has a minimal interleaving that fails on
it and passes on the reference (fast), and, in the slow tests, Hypothesis itself
finds every reachable bug and prints a scenario YAML that loads.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import FlakyFailure, FlakyStrategyDefinition
from hypothesis.stateful import run_state_machine_as_test

from harness.checkers import CHECKERS
from harness.contract import CHECKS, LINES, line_of
from harness.explore import (
    CATCHES,
    HISTORY_CHECKERS,
    NOT_JUDGED_HERE,
    REACHABLE,
    REPLAY_GAPS,
    STEP_CHECKERS,
    STEP_LINES,
    UNREACHABLE,
    ExplorationFailure,
    TraceStep,
    machine_for,
    render_scenario,
    run_steps,
    scenario_in,
)
from harness.reference.variants import VARIANTS
from harness.scenario.loader import expand, load

MiB = 1 << 20
HEALTH = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]

TestReference = machine_for(VARIANTS["reference"]).TestCase
TestReference.pytestmark = [pytest.mark.slow]  # 40 explorations of real processes: about 5 s
TestReference.settings = settings(max_examples=40, stateful_step_count=12, deadline=None,
                                  derandomize=bool(os.environ.get("CI")), suppress_health_check=HEALTH)

# The shortest interleaving that breaks each reachable planted bug (and that the reference survives).
Steps = list[tuple[str, dict[str, Any]]]
PARK: tuple[str, dict[str, Any]] = ("park", {"page": 0, "queued": False})
MINIMAL: dict[str, Steps] = {
    "no_conn_tracking": [("connect", {}), PARK, ("stop", {})],
    "teardown_while_alive": [PARK, ("stop", {})],
    "timed_join_teardown": [PARK, ("stop", {})],
    "wake_by_connect": [("remove_path", {}), ("stop", {})],
    "dispatch_after_stop": [("park", {"page": 0, "queued": True}), ("stop", {}), ("release", {})],
    "head_of_line_blocking": [("connect", {}), ("connect", {})],
    "unlink_by_path": [("replace_path", {}), ("stop", {})],
    "drop_registration_on_error": [("stop_cleanup_fails", {})],
    "concurrent_stop_true": [PARK, ("concurrent_stop", {})],
    "teardown_ignores_stop": [PARK, ("shutdown", {})],
    "restart_drops_old": [PARK, ("restart", {})],
}
# A longer walk through every rule, which the reference survives.
EVERY_RULE: Steps = [
    ("connect", {}), ("send_header", {"page": 1}), ("send_body", {"name": "h1"}), ("send_header", {"page": 2}),
    ("park", {"page": 3, "queued": True}), ("release", {}), PARK, ("concurrent_stop", {}),
    ("send_body", {"name": "h2"}), ("stop", {}), ("remove_path", {}), ("release", {}), ("stop", {}),
    ("restart", {}), PARK, ("shutdown", {}), ("restart", {}), ("release", {}), ("stop_cleanup_fails", {}),
    ("stop", {}), ("restart", {}), ("replace_path", {}), ("stop", {}), ("restart", {}), ("connect", {}),
    ("stop", {}),
]


def _loads(text: str, tmp_path: Path) -> Any:
    yaml = scenario_in(text)
    assert yaml, f"no scenario in the failure:\n{text}"
    path = tmp_path / "found.yaml"
    path.write_text(yaml)
    return load(path)


def _failures(exc: BaseException) -> list[ExplorationFailure]:
    """The explorer's failures in what Hypothesis raised (a FlakyFailure groups them)."""
    if isinstance(exc, ExplorationFailure):
        return [exc]
    return [f for sub in getattr(exc, "exceptions", ()) for f in _failures(sub)]


def test_every_planted_bug_is_reachable_or_explained() -> None:
    assert set(REACHABLE) | set(UNREACHABLE) == set(VARIANTS) - {"reference"}
    assert not set(REACHABLE) & set(UNREACHABLE)
    assert set(MINIMAL) == set(REACHABLE) == set(CATCHES)
    assert set(REPLAY_GAPS) <= set(REACHABLE)


def test_the_explorer_judges_with_the_contract_tables_checkers() -> None:
    """Every checker the explorer runs over its history is registered and named by a line of the contract table
    (which gives the line its violation breaks); those it leaves to others say why."""
    for name in [*HISTORY_CHECKERS, *NOT_JUDGED_HERE]:
        assert name in CHECKERS
        assert 1 <= line_of(name) <= 11
    assert not set(HISTORY_CHECKERS) & set(NOT_JUDGED_HERE)
    for line, checkers in CATCHES.values():
        assert 1 <= line <= 11 and set(checkers) <= set(HISTORY_CHECKERS)


def test_a_step_checker_breaks_the_line_that_says_what_its_step_must_return() -> None:
    """stop_result and restart_refused judge each step by its expected return, which different lines give: each
    line of STEP_LINES is one whose checks or scenarios name the checker (line_of's single line would be 4 for
    stop_result, wherever the stop's expected return came from)."""
    assert set(STEP_LINES) == set(STEP_CHECKERS)
    for name, lines in STEP_LINES.items():
        naming = {c.line for c in CHECKS if name in c.checker_names} | {ln.number for ln in LINES if name in ln.also}
        assert set(lines) <= naming, (name, sorted(set(lines) - naming))
    assert len(STEP_LINES["stop_result"]) > 1  # so line_of's one line cannot be right for it


def test_the_reference_survives_every_rule() -> None:
    run_steps(machine_for(VARIANTS["reference"]), EVERY_RULE)


@pytest.mark.parametrize("variant", sorted(MINIMAL))
def test_the_minimal_interleaving_passes_on_the_reference(variant: str) -> None:
    run_steps(machine_for(VARIANTS["reference"]), MINIMAL[variant])


@pytest.mark.parametrize("variant", sorted(MINIMAL))
def test_the_minimal_interleaving_breaks_the_planted_bug(variant: str, tmp_path: Path) -> None:
    with pytest.raises(ExplorationFailure) as info:
        run_steps(machine_for(VARIANTS[variant]), MINIMAL[variant])
    assert (info.value.line, info.value.checkers) == CATCHES[variant]  # the oracles of the catalogue, exactly
    for name in info.value.checkers:  # a step checker: the line its step's expected return comes from
        line = CATCHES[variant][0] if name in STEP_CHECKERS else line_of(name)
        assert f"checker {name} (line {line}) over the history: " in str(info.value)
    scenario = _loads(str(info.value), tmp_path)
    assert scenario.catches == [variant]
    assert scenario.steps[0].kind == "start"


def test_a_hand_made_trace_renders_a_scenario_that_loads(tmp_path: Path) -> None:
    trace = [
        TraceStep("connect", {"name": "c1"}, ["accepted(conn=1)"]),
        TraceStep("send_header", {"name": "h1", "offsets": [4 * MiB]}),
        TraceStep("park", {"fault": "f1", "call": "p1", "offsets": [0], "queued": [16 * MiB]}),
        TraceStep("concurrent_stop", {"first": "s1", "second": "s2", "timeout_first": 10.0, "timeout": 0.05}),
        TraceStep("send_body", {"name": "h1"}),
        TraceStep("release", {"fault": "f1", "call": "p1", "stops": ["s1"]}),
        TraceStep("restart", {"name": "t1", "returns": True}),
        TraceStep("park", {"fault": "f2", "call": "p2", "offsets": [2 * MiB], "queued": []}),
        TraceStep("shutdown", {"name": "x1", "returns": False}),
        TraceStep("stop", {"name": "s3", "timeout": 0.05, "returns": False}),
        TraceStep("release", {"fault": "f2", "call": "p2", "stops": []}),
        TraceStep("stop_cleanup_fails", {"fault": "f3", "name": "s4", "returns": False}),
        TraceStep("remove_path"),
        TraceStep("stop", {"name": "s5", "timeout": None, "returns": True}),
        TraceStep("restart", {"name": "t2", "returns": True}),
        TraceStep("replace_path"),
    ]
    text = render_scenario(trace, variant="reference", failure="line 2: connection c1 was not closed", line=2)
    path = tmp_path / "hand.yaml"
    path.write_text(text)
    scenario = load(path)
    assert scenario.catches == ["no_conn_tracking"]  # on the reference: the suspect of the broken line
    assert [s.kind for s in scenario.steps] == [
        "start", "idle", "wait", "send", "wait", "arm", "call", "wait", "stop", "wait", "stop", "wait", "finish",
        "release", "wait", "wait", "restart", "wait", "arm", "call", "wait", "shutdown", "wait", "stop", "wait",
        "release", "wait", "arm", "stop", "wait", "remove", "stop", "wait", "restart", "wait", "replace",
    ]
    expected = {"s1": True, "s2": False, "t1": True, "x1": False, "s3": False, "s4": False, "s5": True, "t2": True}
    got = {e.params.step: e.params.returns for e in scenario.expect if e.checker == "stop_result"}
    assert got == expected
    checkers = {e.checker for e in scenario.expect}
    assert checkers >= {"no_late_dispatch", "handler_drained", "reads_cancelled", "teardown_deferred"}
    assert "no_leftover_paths" not in checkers  # the replacing socket file is the harness's own, left on purpose
    assert "accepted(conn=1)" in text and "pipelined" in text
    assert scenario_in(str(ExplorationFailure("boom", text, 2))) == text


FIND = settings(max_examples=200, stateful_step_count=12, deadline=None, derandomize=True, database=None,
                report_multiple_bugs=False, suppress_health_check=HEALTH)
# Shrinking is most of a search's time (dispatch_after_stop: 29 s of 34): shown on one variant, skipped on
# the others, whose failure then carries the unshrunk (longer, equally replayable) scenario
FIND_UNSHRUNK = settings(FIND, phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target])
SHRUNK = "head_of_line_blocking"


# teardown_while_alive closes the wake pipe under its live serving thread: the thread may die of EBADF (or hang)
CRASHES_ITS_THREAD = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


@pytest.mark.slow
@pytest.mark.parametrize("variant", [pytest.param(v, marks=CRASHES_ITS_THREAD) if v == "teardown_while_alive" else v
                                     for v in sorted(REACHABLE)])
def test_the_explorer_finds_the_planted_bug(variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hypothesis finds the bug by itself; the failure it reports carries a scenario YAML that loads
    (shrunk for SHRUNK, as found for the others).

    teardown_while_alive is racy when nothing is parked (its teardown closes the wake pipe under a thread
    that may not have seen it, which then hangs), so Hypothesis may report its replay as flaky: the
    explorer's failures inside still carry their scenario. Or its replay fails at an earlier step than the
    run that found it, and Hypothesis says the data generation was inconsistent (FlakyStrategyDefinition,
    a quiet clean-clone run): then the failures the explorer raised during the search are the ones judged.
    """
    import harness.explore.machine as machine_module

    raised: list[ExplorationFailure] = []

    class Recorded(ExplorationFailure):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            raised.append(self)

    monkeypatch.setattr(machine_module, "ExplorationFailure", Recorded)
    racy = variant == "teardown_while_alive"
    with pytest.raises((ExplorationFailure, FlakyFailure, *((FlakyStrategyDefinition,) if racy else ()))) as info:
        run_state_machine_as_test(machine_for(VARIANTS[variant]), settings=FIND if variant == SHRUNK else FIND_UNSHRUNK)
    found = _failures(info.value) or (raised if isinstance(info.value, FlakyStrategyDefinition) else [])
    assert found, f"no explorer failure in {info.value!r}"
    for failure in found:
        assert _loads(str(failure), tmp_path).catches == [variant]


def test_replace_after_a_failed_cleanup_is_not_unlinked() -> None:
    """Found by the explorer: a failed cleanup closed the server socket, a file replacing the path reused the
    freed inode number, and the retry unlinked it. The reference now unlinks before it closes."""
    machine = machine_for(VARIANTS["reference"], replace_after_failed_cleanup=True)
    run_steps(machine, [("stop_cleanup_fails", {}), ("replace_path", {}), ("stop", {})])


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(set(MINIMAL) - set(REPLAY_GAPS)))
def test_the_rendered_scenario_replays_on_real_processes(variant: str, tmp_path: Path) -> None:
    """The scenario of a failure, run by the scenario runner on real worker processes: it passes on the
    reference and a checker catches the planted bug."""
    from harness.scenario.runner import run_item

    with pytest.raises(ExplorationFailure) as info:
        run_steps(machine_for(VARIANTS[variant]), MINIMAL[variant])
    (item,) = expand(_loads(str(info.value), tmp_path))
    on_reference = run_item(item, variant="reference")
    assert on_reference.passed, (on_reference.step_error, [v.message for v in on_reference.verdicts if not v.ok])
    on_bug = run_item(item, variant=variant)
    assert on_bug.violated, f"the replay did not catch {variant}: step error {on_bug.step_error!r}"


def test_a_checker_violated_over_the_history_breaks_the_line_the_table_gives_it() -> None:
    """The explorer's history invariant is the checkers': a dispatch recorded after stop began (planted in the
    history) fails the example on line 1, named by no_late_dispatch, with the replayable scenario."""
    m = machine_for(VARIANTS["reference"])()
    try:
        label = m.listener.label
        m.rig.rec.emit("stop_started", listener=label)
        m.rig.rec.emit("dispatch_started", listener=label, conn=99, cmd="map_to_kv_tensors", id="late")
        with pytest.raises(ExplorationFailure) as info:
            m.stop_contract()
    finally:
        m.teardown()
    assert (info.value.line, info.value.checkers) == (1, ("no_late_dispatch",))
    assert "Violation: line 1: no_late_dispatch: 1 request(s) dispatched after stop began" in str(info.value)
    assert scenario_in(str(info.value))
