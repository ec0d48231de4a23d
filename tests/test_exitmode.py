"""The fast exit: where a run's processes may skip module teardown, and that nothing judged changes.

The mechanism is proven on a target whose module teardown leaves a mark (tests/lc_teardown_target.py): the
faithful exit leaves it, the fast one does not.  The rule (harness.scenario.exitmode) is proven on the
scenario library's own files; a reference run judges the same either way; and on the target with the mark,
the rule keeps the faithful exit, so no_leftover_paths sees what that target's teardown does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lc_helpers import ROOT

from harness.checkers.base import OK, VIOLATED
from harness.launch.cluster import Cluster, exit_mode
from harness.scenario import exitmode, runner
from harness.scenario.exitmode import fast_exit_for
from harness.scenario.loader import MatrixItem, expand, load, loads
from tests.lc_teardown_target import MARK, STALL_S

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
MARKED = "reference@tests.lc_teardown_target:TeardownListener"
STALLING = "reference@tests.lc_teardown_target:StallingTeardownListener"


def item(name: str) -> MatrixItem:
    return expand(load(str(SCENARIOS / f"{name}.yaml")))[0]


def checkers(it: MatrixItem) -> list[str]:
    return [e.checker for e in it.scenario.expect]


@pytest.mark.parametrize("fast", [False, True], ids=["faithful", "fast"])
def test_module_teardown_runs_in_a_faithful_exit_and_only_there(fast: bool) -> None:
    c = Cluster(variant=MARKED, fast_exit=fast)
    c.start()
    out = c.close()
    assert out.status == "ok" and not out.detail, out
    assert set(out.exits.values()) == {0}, out.exits  # same status either way
    marks = [p for p in out.leftovers if p.endswith("/" + MARK)]
    assert bool(marks) is not fast, (f"fast={fast}: the worker's module teardown "
                                     f"{'ran' if marks else 'did not run'}; leftovers {out.leftovers}")


def test_the_rule_on_the_library() -> None:
    leftovers = item("nothing-outlives-the-run")  # stop_result, requests_served and after-snapshot checkers
    assert fast_exit_for(leftovers, "reference", checkers(leftovers))[0]
    assert fast_exit_for(leftovers, "leaks_a_child", checkers(leftovers))[0]  # a planted bug: the harness's code
    for target in (MARKED, "kvcached==0.1.6", "tests.lc_events_target:CHATTY"):
        ok, why = fast_exit_for(leftovers, target, checkers(leftovers))
        assert not ok and "not the built-in reference" in why, (target, why)
    before_exit = item("stop-from-a-handler-returns-at-once")
    names = [n for n in checkers(before_exit) if not exitmode.observes_exit(n)]
    assert names and fast_exit_for(before_exit, "reference", names)[0]  # nothing at or after exit judged
    ok, why = fast_exit_for(before_exit, "kvcached==0.1.6", names)
    assert not ok and "not the built-in reference" in why  # any other target exits faithfully, whatever is judged
    timed = item("many-idle-connections-at-stop")
    assert "exit_without_stall" in checkers(timed)
    ok, why = fast_exit_for(timed, "reference", checkers(timed))
    assert not ok and "exit_without_stall" in why
    ok, why = fast_exit_for(leftovers, "reference", [*checkers(leftovers), "a_plugin_checker"])
    assert not ok and "a_plugin_checker" in why  # a checker it does not know keeps the faithful exit


@pytest.mark.parametrize("step", ["- exit: {on: all}", "- kill: {target: {rank: 0}}",
                                  "- wait: {event: process_exited}"])
def test_a_step_that_observes_an_exit_keeps_the_faithful_exit(step: str) -> None:
    it = expand(loads(f"""
name: observes-an-exit
about: a run whose steps watch a process end
catches: [leaks_a_child]
steps:
  - start: cluster
  {step}
expect:
  - no_leftover_paths
""", "<observes>"))[0]
    ok, why = fast_exit_for(it, "reference", checkers(it))
    assert not ok and "observes an exit" in why


def _statuses(result: runner.RunResult) -> list[tuple[str, str]]:
    return [(v.checker, v.status) for v in result.verdicts]


def test_a_fast_reference_run_judges_as_the_faithful_one(monkeypatch: pytest.MonkeyPatch) -> None:
    it = item("nothing-outlives-the-run")
    fast = runner.run_item(it)
    monkeypatch.setattr(runner, "fast_exit_for", lambda *a: (False, "forced by the test"))
    faithful = runner.run_item(it)
    assert _statuses(fast) == _statuses(faithful), (fast.verdicts, faithful.verdicts)
    assert all(s == OK for _, s in _statuses(fast)), fast.verdicts
    assert not fast.outcome.leftovers and not faithful.outcome.leftovers


def test_the_rule_keeps_the_faithful_exit_where_a_targets_teardown_changes_the_snapshot() -> None:
    it = item("nothing-outlives-the-run")
    assert not fast_exit_for(it, MARKED, checkers(it))[0]
    result = runner.run_item(it, variant=MARKED)
    verdicts = dict(_statuses(result))
    assert verdicts["no_leftover_paths"] == VIOLATED, result.verdicts  # the mark its teardown wrote is seen
    assert verdicts["stop_result"] == OK and verdicts["no_orphan_processes"] == OK, result.verdicts


@pytest.mark.parametrize("env", [None, "1", "0"])
def test_the_environment_can_make_exits_more_faithful_never_less(env: str | None,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    if env is None:
        monkeypatch.delenv("LASTCALL_FAST_EXIT", raising=False)
    else:
        monkeypatch.setenv("LASTCALL_FAST_EXIT", env)
    assert exit_mode(None) is False and exit_mode(False) is False  # no caller's say-so: faithful, whatever env
    assert exit_mode(True) is (env != "0")  # the rule's fast exit, unless LASTCALL_FAST_EXIT=0 forbids it
    spec = Cluster(fast_exit=False)._common  # what the fork server's children get
    assert spec["fast_exit"] is False


@pytest.mark.covered_by(  # the env cannot widen the rule; the rule keeps exit_without_stall faithful; a faithful
    # exit runs module teardown: together what this real run proves end to end
    "tests/test_exitmode.py::test_the_environment_can_make_exits_more_faithful_never_less[1]",
    "tests/test_exitmode.py::test_the_rule_on_the_library",
    "tests/test_exitmode.py::test_module_teardown_runs_in_a_faithful_exit_and_only_there[faithful]")
def test_a_run_that_judges_exit_exits_faithfully_under_lastcall_fast_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The library's exit-judging scenario against a worker whose module teardown stalls STALL_S (past the
    scenario's 3 s bound) under LASTCALL_FAST_EXIT=1: the variable once forced the fast exit on every run, the
    worker then skipped the teardown that stalls it, and exit_without_stall passed it.  The reference's run
    of the same item (quiet) is the library's own item in the suite."""
    monkeypatch.setenv("LASTCALL_FAST_EXIT", "1")
    it = item("exit-hook-bounded-when-it-cannot-drain")
    bound = next(e.params.within for e in it.scenario.expect if e.checker == "exit_without_stall")
    assert bound < STALL_S, (bound, STALL_S)
    ok, why = fast_exit_for(it, STALLING, checkers(it))
    assert not ok, why
    result = runner.run_item(it, variant=STALLING)
    verdicts = dict(_statuses(result))
    assert verdicts["exit_without_stall"] == VIOLATED, result.verdicts  # the stall in module teardown is seen
    assert verdicts["fault_fired"] == OK, result.verdicts


def test_the_rule_lets_own_code_skip_teardown_where_only_its_own_events_are_judged() -> None:
    storm = item("stress-racing-points")  # teardown_once beside before-exit and after-snapshot checkers
    assert "teardown_once" in checkers(storm)
    assert fast_exit_for(storm, "reference", checkers(storm))[0]
    assert fast_exit_for(storm, "unlocked_concurrent_stops", checkers(storm))[0]  # the bug teardown_once catches
    ok, why = fast_exit_for(storm, "kvcached==0.1.6", checkers(storm))
    assert not ok and "not the built-in reference" in why, why  # a third-party teardown might record at exit


def test_the_harnesss_own_listener_code_has_nothing_that_runs_in_module_teardown() -> None:
    """What the fast exit of the reference rests on: no ``__del__`` and no weakref finalizer in the reference or its
    planted bugs, so module teardown records no event of theirs and removes nothing."""
    root = Path(__file__).resolve().parent.parent / "harness" / "reference"
    found = [f"{p.name}:{n}" for p in sorted(root.glob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if ("def __del__" in line or "weakref.finalize" in line or "import weakref" in line)]
    assert not found, f"code that can run in module teardown: {found}: review harness/scenario/exitmode.py"


def test_every_built_in_checker_declares_whether_it_observes_the_exit() -> None:
    """The one property the fast exit is derived from: each checker lastcall ships says it, a new one cannot be
    left undecided (a plug-in's, which cannot be reviewed here, counts as observing)."""
    from harness.checkers.base import CHECKERS

    undeclared = sorted(n for n, c in CHECKERS.items() if c.fn.__module__.startswith("harness.")
                        and c.observes_exit is None)
    assert not undeclared, f"checkers that do not declare observes_exit: {undeclared}"
    assert exitmode.observes_exit("no_such_checker") and exitmode.observes_exit("exit_without_stall")
    assert not exitmode.observes_exit("stop_result")


def test_no_checker_that_does_not_observe_the_exit_reads_an_exit_event() -> None:
    """observes_exit=False's premise, checked on each checker's declared ``judges``: none reads an event that a
    process records at or after its exit, so skipping module teardown cannot change what it is given.  The four
    that read only the harness's own step returns (idle_cost, private_paths, bad_handshake_refused,
    restart_refused) are pinned to that, so one that later reads a listener event is reviewed again here."""
    from harness.checkers.base import CHECKERS

    for name, chk in sorted(CHECKERS.items()):
        if chk.observes_exit is False:
            judges = set(chk.judges)
            assert not judges & exitmode.EXIT_EVENTS, (name, sorted(judges & exitmode.EXIT_EVENTS))
    for name in ("idle_cost", "private_paths", "bad_handshake_refused", "restart_refused"):
        assert set(CHECKERS[name].judges) == {"step_returned"}, (name, CHECKERS[name].judges)


@pytest.mark.parametrize("worker", [True, False], ids=["xdist-worker", "controller-or-plain-session"])
def test_the_plugin_leaves_a_session_s_exit_as_pytest_runs_it_and_only_this_suite_s_workers_freeze(
        worker: bool) -> None:
    """The plugin's last pytest_unconfigure freezes nothing (a user's session exits as pytest's does); lastcall's
    own conftest.py freezes an xdist worker's objects once its session is over, never a controller's or those of
    a session without xdist."""
    import gc
    import importlib.util
    from types import SimpleNamespace

    from harness import plugin

    spec = importlib.util.spec_from_file_location("lastcall_root_conftest", ROOT / "conftest.py")
    assert spec is not None and spec.loader is not None
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    config = SimpleNamespace(stash={})
    if worker:
        config.workerinput = {"workerid": "gw9"}
    gc.unfreeze()
    try:
        plugin.pytest_unconfigure(config)  # type: ignore[arg-type]
        assert gc.get_freeze_count() == 0
        conftest.pytest_unconfigure(config)
        assert (gc.get_freeze_count() > 0) is worker
    finally:
        gc.unfreeze()
