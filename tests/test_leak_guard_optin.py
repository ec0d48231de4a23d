"""The leak guard acts where it is asked: lastcall's items, tests using its fixtures or its mark, and
every test only with ``lastcall_leak_check = all`` (lastcall's own suite). Run in a scratch project
as a new user would, with the plugin loaded from its entry point."""

from __future__ import annotations

import pytest
from lc_helpers import ROOT

pytest_plugins = ["pytester"]


# A module-level server started by a plain test and kept for later tests, common in integration suites;
# then tests that did ask for lastcall (its fixture, its mark) and leave a port LISTENing.
SUITE = '''
import socket

import pytest

SHARED = []


def listening():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    SHARED.append(s)
    return s


def test_starts_a_shared_server():
    listening()


def test_uses_the_shared_server():
    assert SHARED[0].getsockname()[1] > 0


def test_fixture_user_leaks(lc_root):
    listening()


@pytest.mark.lastcall
def test_marked_leaks():
    listening()


@pytest.mark.lastcall
@pytest.mark.leaks_ok
def test_marked_but_leaks_ok():
    listening()


def test_own_fixture_of_the_same_name_leaks(no_thread_leak):
    listening()


def test_lastcall_fixture_through_one_of_ours_leaks(root_user):
    listening()
'''

# a conftest of the user's own that defines a fixture named like one of lastcall's: not an opt-in
CONFTEST = '''
import pytest


@pytest.fixture
def no_thread_leak():
    yield


@pytest.fixture
def root_user(lc_root):  # lastcall's fixture, asked for by one of the suite's own
    return lc_root
'''

OUTCOMES_DEFAULT = {
    "test_starts_a_shared_server": "PASSED", "test_uses_the_shared_server": "PASSED",
    "test_fixture_user_leaks": "ERROR", "test_marked_leaks": "ERROR", "test_marked_but_leaks_ok": "PASSED",
    "test_own_fixture_of_the_same_name_leaks": "PASSED", "test_lastcall_fixture_through_one_of_ours_leaks": "ERROR"}


def _outcomes(result: pytest.RunResult) -> dict[str, str]:
    """test name -> PASSED/ERROR (an error at teardown is reported after the pass of its call)."""
    out: dict[str, str] = {}
    for line in result.outlines:
        for word in ("PASSED", "ERROR", "FAILED"):
            if line.startswith("test_suite.py::") and f" {word}" in line:
                name = line.split("::", 1)[1].split()[0]
                if out.get(name) != "ERROR":
                    out[name] = word
    return out


def _run(pytester: pytest.Pytester, ini: str, *args: str) -> pytest.RunResult:
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    return pytester.runpytest_subprocess("-v", "-p", "no:cacheprovider", "-p", "no:xdist", *args, timeout=120)


def test_by_default_only_tests_that_asked_are_checked(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "")
    assert _outcomes(result) == OUTCOMES_DEFAULT, result.stdout.str()[-3000:]
    text = result.stdout.str()
    assert "test_suite.py::test_fixture_user_leaks leaked: ports still LISTENing" in text
    assert "test_suite.py::test_marked_leaks leaked: ports still LISTENing" in text
    assert "test_starts_a_shared_server leaked" not in text


def test_all_checks_every_test_including_the_module_level_server(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "lastcall_leak_check = all")
    want = dict(OUTCOMES_DEFAULT, test_starts_a_shared_server="ERROR", test_own_fixture_of_the_same_name_leaks="ERROR")
    assert _outcomes(result) == want, result.stdout.str()[-3000:]
    assert "test_suite.py::test_starts_a_shared_server leaked: ports still LISTENing" in result.stdout.str()


def test_off_checks_nothing_and_the_command_line_overrides_the_ini(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "lastcall_leak_check = all", "-o", "lastcall_leak_check=off")
    assert set(_outcomes(result).values()) == {"PASSED"}, result.stdout.str()[-3000:]
    assert len(_outcomes(result)) == len(OUTCOMES_DEFAULT)


def test_a_bad_value_is_a_located_usage_error(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "lastcall_leak_check = sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert f"{pytester.path / 'tox.ini'}: lastcall_leak_check = 'sometimes': expected one of lastcall" in err
    assert "Traceback" not in err


# An item that is not a test function (like a scenario file's) leaking a port: checked by the hooks,
# since such an item has no fixtures
ITEMS = '''
import socket

import pytest

HELD = []


class Leaky(pytest.Item):
    def runtest(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        HELD.append(s)


class LeakFile(pytest.File):
    def collect(self):
        yield Leaky.from_parent(self, name="leaky")


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".leak":
        return LeakFile.from_parent(parent, path=file_path)
'''


def test_items_without_fixtures_are_checked_by_the_hooks(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(ITEMS)
    pytester.makefile(".leak", one="")
    pytester.makeini("[pytest]\nlastcall_leak_check = all\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "one.leak", timeout=120)
    result.assert_outcomes(passed=1, errors=1)
    assert "one.leak::leaky leaked: ports still LISTENing" in result.stdout.str()
    pytester.makeini("[pytest]\n")  # default: a conftest's item is not lastcall's
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "one.leak", timeout=120)
    result.assert_outcomes(passed=1)


WHY = '''
from harness import leakguard


def pytest_collection_modifyitems(items):
    for item in items:
        print("WHY", item.name, leakguard.asked_by(item))
'''


def test_lastcall_scenario_items_ask_for_the_guard(pytester: pytest.Pytester) -> None:
    (pytester.path / "s.yaml").write_text((ROOT / "scenarios" / "stalled-read-is-cancelled.yaml").read_text())
    pytester.makeconftest(WHY)
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--collect-only", "-q", "-s",
                                           "s.yaml", timeout=120)
    why = [line for line in result.outlines if line.startswith("WHY ")]
    assert why and all(line.endswith(" a lastcall item") for line in why), result.stdout.str()[-3000:]


def test_lastcalls_own_suite_checks_every_test(pytestconfig: pytest.Config) -> None:
    from harness import leakguard

    assert pytestconfig.inipath == ROOT / "pyproject.toml"
    assert leakguard.mode(pytestconfig) == "all"  # pyproject.toml: lastcall_leak_check = "all"
