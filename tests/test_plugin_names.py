"""The plugin's names: prefixed fixtures and options, their deprecated short forms, a target's own options
(the pytest_lastcall_addoption hook), and a target override or ``target:`` that names nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

import harness.reference.variants  # noqa: F401  torch once, here: an in-process pytester run cannot import it again

pytest_plugins = ["pytester"]
SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
QUIET = ("-p", "no:cacheprovider", "--lastcall-reports=")
UNKNOWN = "unknown target 'refrence' (did you mean 'reference'?); known: reference, timed_join_teardown, "


def _scenario(pytester: pytest.Pytester, target: str) -> Path:
    text = (SCENARIOS / "executing-handler-is-drained.yaml").read_text()
    assert "\ntarget:" not in text
    path = pytester.path / "s.yaml"
    path.write_text(text.replace("\ncatches:", f"\ntarget: {target}\ncatches:", 1))
    return path


def test_prefixed_fixtures_are_quiet_and_the_short_forms_warn(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_new(lastcall_recorder, lastcall_failpoints):
            lastcall_recorder.emit("x")
            assert lastcall_failpoints.reset is not None

        def test_old(recorder, failpoints):
            assert recorder is not None and failpoints is not None
    """)
    result = pytester.runpytest("-W", "default::DeprecationWarning", *QUIET)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*test_old*",
        "*DeprecationWarning: lastcall: the fixture 'recorder' is deprecated and goes in the next release; "
        "use 'lastcall_recorder'",
        "*DeprecationWarning: lastcall: the fixture 'failpoints' is deprecated and goes in the next release; "
        "use 'lastcall_failpoints'",
    ])
    assert "test_new" not in result.stdout.str().split("warnings summary")[1]


@pytest.mark.parametrize(("old", "new", "value"), [("--target", "--lastcall-target", "reference"),
                                                   ("--listener", "--lastcall-listener",
                                                    "harness.reference.listener:WorkerListener")])
def test_short_options_still_work_with_a_deprecation_warning(pytester: pytest.Pytester, old: str, new: str,
                                                             value: str) -> None:
    pytester.makepyfile("""
        from harness.scenario.collect import chosen_target

        def test_sees_it(request):
            print("TARGET", chosen_target(request.config))
    """)
    result = pytester.runpytest(old, value, "-s", *QUIET)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*TARGET *{value}",
                                 f"*DeprecationWarning: lastcall: {old} is deprecated and goes in the next "
                                 f"release; use {new}"])
    quiet = pytester.runpytest(new, value, "-s", *QUIET)
    quiet.assert_outcomes(passed=1)
    assert "DeprecationWarning" not in quiet.stdout.str()


def test_an_unknown_target_override_is_a_usage_error_before_collection(pytester: pytest.Pytester,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _scenario(pytester, "reference")
    result = pytester.runpytest("s.yaml", "--lastcall-target", "refrence", *QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines[0].startswith(f"ERROR: --lastcall-target: {UNKNOWN}")
    assert "collected" not in result.stdout.str() and "Traceback" not in result.stderr.str()
    monkeypatch.setenv("LASTCALL_TARGET", "refrence")
    result = pytester.runpytest("s.yaml", *QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines[0].startswith(f"ERROR: LASTCALL_TARGET: {UNKNOWN}")


def test_a_bad_numeric_variable_is_a_usage_error_before_collection(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _scenario(pytester, "reference")
    monkeypatch.setenv("LASTCALL_TIMEOUT_SCALE", "inf")
    result = pytester.runpytest("s.yaml", *QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines[0] == ("ERROR: LASTCALL_TIMEOUT_SCALE='inf': expected a finite number more than 0 "
                                      "and at most 100, e.g. 2")
    assert "collected" not in result.stdout.str() and "Traceback" not in result.stderr.str()


@pytest.mark.parametrize(("target", "message"), [
    ("refrence", UNKNOWN),
    ("no_such_module_xyz:T", "target 'no_such_module_xyz:T': no module named 'no_such_module_xyz' (not installed"),
    ("harness.targets.names:NOPE", "cannot load target 'harness.targets.names:NOPE': module "
                                   "'harness.targets.names' has no attribute 'NOPE'"),
])
def test_a_file_whose_target_names_nothing_is_its_one_failing_item(pytester: pytest.Pytester, target: str,
                                                                  message: str) -> None:
    """Known by name or found without importing (validate's check) fails in the loader; a module found but
    lacking the attribute fails when collection imports it: either way one item, located at target:."""
    path = _scenario(pytester, target)
    line = path.read_text().splitlines().index(f"target: {target}") + 1
    result = pytester.runpytest("s.yaml", "-q", *QUIET)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"s.yaml:{line}:9: target: {message}*"])


def test_a_target_adds_its_own_options_through_the_hook(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """kvcached's --kvcached-src comes from harness.targets.kvcached; a conftest's target adds one the same way."""
    pytester.makeconftest("""
        def pytest_lastcall_addoption(parser, pluginmanager):
            parser.getgroup("lastcall").addoption("--mine-url", default=None, help="my target's server")
    """)
    pytester.makepyfile("""
        import os

        def test_options(request):
            assert request.config.getoption("--mine-url") == "http://x"
            print("SRC", os.environ["LASTCALL_KVCACHED_SRC"])
    """)
    result = pytester.runpytest_subprocess("--mine-url", "http://x", "--kvcached-src", str(tmp_path), "-s", *QUIET)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*SRC {tmp_path}"])
    helped = pytester.runpytest_subprocess("--help")
    helped.stdout.fnmatch_lines(["lastcall:", "*--lastcall-target=TARGET*", "*--kvcached-src=DIR*", "*--mine-url*"])


@pytest.mark.slow
def test_a_session_that_collects_no_scenario_file_never_imports_the_scenario_loader(tmp_path: Path) -> None:
    """The plugin loads in every pytest session of an environment that has lastcall installed: its options cost
    nothing much there, and the loader (pydantic models of every step and checker, a quarter of a second) is
    imported only once a scenario file is collected."""
    import subprocess
    import sys

    (tmp_path / "test_plain.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "s.yaml").write_text("not: a scenario\n")  # not under lastcall_scenarios: never collected
    args = [sys.executable, "-X", "importtime", "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p",
            "no:xdist", "-p", "no:randomly", "test_plain.py"]  # -s: what is imported during collection is told too
    plain = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in plain.stderr.splitlines() if "|" in line}
    assert {"harness.scenario.collect", "harness.scenario.repeat"} <= imported  # the plugin: its options
    assert "harness.scenario.loader" not in imported
    scenario = tmp_path / "one.yaml"  # a scenario file given on the command line is collected: the loader comes
    scenario.write_text((Path(__file__).resolve().parent.parent / "scenarios" / "stalled-read-is-cancelled.yaml")
                        .read_text())
    listed = subprocess.run([*args[:-1], "--collect-only", str(scenario)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "harness.scenario.loader" in listed.stderr and "stalled-read-is-cancelled[" in listed.stdout
