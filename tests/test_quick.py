"""What -m "not slow" leaves to the full suite (harness/scenario/quick.py): only evidence it still holds."""

from __future__ import annotations

import pytest
from lc_helpers import ROOT

from harness.scenario import quick

pytest_plugins = ["pytester"]

# two library scenarios whose catches item runs the same bug and passes on the same checker
SAME = ("stalled-read-is-cancelled", "stalled-partial-header-is-cancelled")
COVERED = '''
import pytest

@pytest.mark.covered_by({cover!r})
def test_moved():
    pass

def test_kept():
    pass

@pytest.mark.slow
def test_slow():
    pass
'''


def _project(pytester: pytest.Pytester, *, catch_once: bool, cover: str) -> None:
    for name in SAME:
        (pytester.path / f"{name}.yaml").write_text((ROOT / "scenarios" / f"{name}.yaml").read_text())
    pytester.makeini(f"[pytest]\nlastcall_scenarios = .\nlastcall_catch_once = {str(catch_once).lower()}\n")
    pytester.makepyfile(test_a=COVERED.format(cover=cover))


def _selected(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, list[str]]:
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *args)
    return result, [line for line in result.outlines if "::" in line]


def test_a_bug_caught_twice_by_the_same_checkers_is_run_once_and_a_covered_test_is_left_out(
        pytester: pytest.Pytester) -> None:
    _project(pytester, catch_once=True, cover="test_a.py::test_kept")
    result, quick_ids = _selected(pytester, "-m", "not slow")
    assert result.ret == 0, result.stdout.str()
    catches = [i for i in quick_ids if "-catches-" in i]
    assert len(catches) == 1 and "catches-no_conn_tracking" in catches[0], catches
    assert "test_a.py::test_kept" in quick_ids and "test_a.py::test_moved" not in quick_ids
    # every reference item stays: both scenarios still run
    for name in SAME:
        assert f"{name}.yaml::{name}[tp1-pp1-cpu]" in quick_ids, quick_ids
    _, full = _selected(pytester)
    assert len([i for i in full if "-catches-" in i]) == 2 and "test_a.py::test_moved" in full


def test_catch_once_is_off_unless_the_ini_asks(pytester: pytest.Pytester) -> None:
    _project(pytester, catch_once=False, cover="test_a.py::test_kept")
    _, quick_ids = _selected(pytester, "-m", "not slow")
    assert len([i for i in quick_ids if "-catches-" in i]) == 2


@pytest.mark.parametrize(("cover", "says"), [
    ("test_a.py::test_renamed", "its covered_by cover test_a.py::test_renamed is not a collected test"),
    ("test_a.py::test_slow", "its covered_by cover test_a.py::test_slow is itself slow"),
    ("test_a.py::test_moved", "covered_by names the test itself"),
])
def test_a_cover_that_is_gone_or_slow_is_a_usage_error(pytester: pytest.Pytester, cover: str, says: str) -> None:
    _project(pytester, catch_once=True, cover=cover)
    result, _ = _selected(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"test_a.py::test_moved: {says}" in result.stderr.str()


def test_a_covered_by_that_names_no_test_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _project(pytester, catch_once=True, cover="x")
    pytester.makepyfile(test_a=COVERED.replace("@pytest.mark.covered_by({cover!r})", "@pytest.mark.covered_by"))
    result, _ = _selected(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "test_a.py::test_moved: covered_by names no test" in result.stderr.str()


def test_the_page_lists_this_sessions_moves(request: pytest.FixtureRequest) -> None:
    moves = quick.moves_of(request.config)
    if moves is None:
        pytest.skip("this session named its own paths: the whole suite's moves are unknown")
    assert {m.rule for m in moves} == {"catch_once", "covered_by"}
    assert quick.page_table(ROOT / "docs" / "running.md") == quick.table(moves), (
        "docs/running.md's list is stale: run `.venv/bin/python -m harness.scenario.quick --write`")
