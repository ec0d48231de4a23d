"""Tests of the command line's error boundary and the contract command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import harness.contract
from harness.cli import EXIT_BROKEN, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, main
from harness.contract import Check, lines


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(("argv", "message"), [
    ([], "lastcall: error: the following arguments are required: COMMAND (see lastcall --help)"),
    (["nope"], "lastcall: error: argument COMMAND: invalid choice: 'nope' (choose from 'contract', 'serve', "
               "'ctl', 'run', 'fetch', 'replay', 'list', 'targets', 'validate', 'schema', 'report', 'repro', 'bench', "
               "'mutate', 'prune-reports') (see lastcall --help)"),
    (["serve"], "lastcall serve: error: the following arguments are required: --ipc (see lastcall serve --help)"),
    (["serve", "--ipc", "x", "--rank", "-1"],
     "lastcall serve: error: argument --rank: -1 must be >= 0 (see lastcall serve --help)"),
    (["serve", "--ipc", "x", "--drain-timeout", "soon"],
     "lastcall serve: error: argument --drain-timeout: duration 'soon' is not a duration; write a number with "
     "an optional unit, e.g. '500ms', '2s' or '1.5' (units: ns, us, ms, s, m, h) (see lastcall serve --help)"),
    (["serve", "--ipc", "x", "--rank", "1"], "lastcall: error: --rank 1 must be smaller than --tp 1"),
    (["contract", "--all", "--variant", "reference"],
     "lastcall contract: error: argument --variant: not allowed with argument --all (see lastcall contract --help)"),
    (["ctl"], "lastcall ctl: error: the following arguments are required: ACTION (see lastcall ctl --help)"),
    (["ctl", "delete"],
     "lastcall ctl delete: error: the following arguments are required: IPC (see lastcall ctl delete --help)"),
])
def test_usage_errors_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    rc, out, err = _run(capsys, *argv)
    assert (rc, out, err) == (EXIT_USAGE, "", message + "\n")


def test_help_and_version_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "--help")
    assert rc == EXIT_OK
    assert "exit codes:" in out and "3    internal error" in out
    rc, out, _ = _run(capsys, "serve", "--help")
    assert rc == EXIT_OK and "--drain-timeout SECONDS" in out
    rc, out, _ = _run(capsys, "--version")
    assert rc == EXIT_OK and out.startswith("lastcall ")


def test_contract_proves_each_check_twice(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "contract", "--check", "served_while_stalled", "--check", "handler_drained")
    assert (rc, err) == (EXIT_OK, "")
    rows = out.splitlines()
    assert re.fullmatch(r"line  check +variant +result +time  detail", rows[0])
    assert re.fullmatch(r" +11  served_while_stalled +reference +kept +\d+\.\d\ds", rows[1])
    assert re.fullmatch(r" +11  served_while_stalled +head_of_line_blocking +BROKEN +\d+\.\d\ds  \S.*", rows[2])
    assert re.fullmatch(r" +3  handler_drained +reference +kept +\d+\.\d\ds", rows[3])
    assert re.fullmatch(r" +3  handler_drained +teardown_while_alive +BROKEN +\d+\.\d\ds  \S.*", rows[4])
    assert re.fullmatch(r"reference keeps 2/2 checks; 2/2 planted bugs caught by the checks that name them; "
                        r"0 surprises \(\d+\.\ds\)", rows[5])
    assert len(rows) == 6


def test_contract_unnamed_variant_has_no_expectation(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "contract", "--check", "handler_drained", "--variant", "dispatch_after_stop")
    assert rc == EXIT_OK
    assert re.search(r"handler_drained +dispatch_after_stop +kept", out)
    assert out.splitlines()[-1].startswith("0 surprises")


@pytest.mark.parametrize(("argv", "message"), [
    (["--variant", "refrence"], "lastcall: error: unknown variant 'refrence'; did you mean 'reference'? (known: "),
    (["--check", "handler_drain"], "lastcall: error: unknown check 'handler_drain'; did you mean 'handler_drained'? "),
    (["--check", "zzz"], "lastcall: error: unknown check 'zzz' (known: no_late_dispatch, "),
])
def test_contract_unknown_name(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    rc, out, err = _run(capsys, "contract", *argv)
    assert (rc, out) == (EXIT_USAGE, "")
    assert err.startswith(message) and err.count("\n") == 1


def test_contract_surprise_exits_1_and_names_it(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = Check(3, "handler_drained", lines.handler_drained, ("dispatch_after_stop",))
    monkeypatch.setattr(harness.contract, "CHECKS", (wrong,))
    rc, out, _ = _run(capsys, "contract")
    assert rc == EXIT_BROKEN
    assert re.search(r"dispatch_after_stop +kept +\d+\.\d\ds  SURPRISE: the check names this bug but it was kept", out)
    assert out.splitlines()[-3:] == [
        out.splitlines()[-3],
        "  dispatch_after_stop was not caught by handler_drained (line 3)",
        "    replay: lastcall contract --check handler_drained --variant dispatch_after_stop",
    ]
    assert "reference keeps 1/1 checks; 0/1 planted bugs caught" in out and "; 1 surprise (" in out


def test_internal_error_exits_3_with_traceback_file(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object) -> None:
        raise RuntimeError("planted")

    monkeypatch.setattr(harness.contract, "run_check", boom)
    rc, _, err = _run(capsys, "contract", "--check", "handler_drained")
    assert rc == EXIT_INTERNAL
    match = re.fullmatch(r"lastcall: internal error: RuntimeError: planted \(traceback in (\S+); please report it\)\n",
                         err)
    assert match is not None, err
    try:
        with open(match.group(1)) as f:
            text = f.read()
        assert text.startswith("Traceback") and "RuntimeError: planted" in text
    finally:
        os.unlink(match.group(1))


# ------------------------------------------------------------- names and run's one error boundary
SCENARIO = os.path.join(os.path.dirname(__file__), os.pardir, "scenarios", "stalled-read-is-cancelled.yaml")
UNKNOWN = "unknown target 'refrence' (did you mean 'reference'?); known: reference, timed_join_teardown, "


def _lastcall(*argv: str, env: dict[str, str] | None = None, cwd: str | None = None) -> tuple[int, str, str]:
    """The real command in a child process (its own interpreter, the console script's module)."""
    proc = subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, cwd=cwd)
    return proc.returncode, proc.stdout, proc.stderr


def _with_target(path: Path, target: str) -> str:
    text = Path(SCENARIO).read_text()
    path.write_text(text.replace("\ncatches:", f"\ntarget: {target}\ncatches:", 1))
    return str(path)


def _line_of(path: str, text: str) -> int:
    return Path(path).read_text().splitlines().index(text) + 1


def test_run_validates_every_file_and_imports_every_target_before_starting(tmp_path: Path) -> None:
    """Every error of every file, one line each, and nothing started: no pytest session, no report written."""
    typo = _with_target(tmp_path / "typo.yaml", "refrence")
    attr = _with_target(tmp_path / "attr.yaml", "harness.targets.names:NOPE")
    reports = tmp_path / "reports"
    rc, out, err = _lastcall("run", SCENARIO, typo, attr, str(tmp_path / "missing.yaml"),
                             "--lastcall-reports", str(reports))
    lines = err.splitlines()
    assert (rc, out) == (EXIT_USAGE, ""), err
    assert lines[0].startswith(f"{typo}:{_line_of(typo, 'target: refrence')}:9: target: {UNKNOWN}")
    assert lines[1] == f"{tmp_path / 'missing.yaml'}: cannot read: No such file or directory"
    assert lines[2] == (f"{attr}:{_line_of(attr, 'target: harness.targets.names:NOPE')}:9: target: cannot load "
                        f"target 'harness.targets.names:NOPE': module 'harness.targets.names' has no attribute "
                        f"'NOPE'; give module:attribute naming a target (see harness.targets.api.Target) or a "
                        f"harness.reference.variants.Variant")
    assert lines[3:] == ["lastcall run: 3 errors; nothing was started"]
    assert not reports.exists()


@pytest.mark.parametrize(("argv", "env", "given"), [
    (["--target", "refrence"], {}, "--target"),
    ([], {"LASTCALL_TARGET": "refrence"}, "LASTCALL_TARGET"),
])
def test_run_an_unknown_target_is_one_line_and_exit_2(argv: list[str], env: dict[str, str], given: str) -> None:
    rc, out, err = _lastcall("run", SCENARIO, *argv, env=env)
    assert (rc, out) == (EXIT_USAGE, "")
    first, last = err.splitlines()
    assert first.startswith(f"lastcall run: {given}: {UNKNOWN}")
    assert last == "lastcall run: 1 error; nothing was started"


@pytest.mark.slow
def test_run_passes_its_own_options_and_everything_after_the_dashes(tmp_path: Path) -> None:
    """--repeat, -x, --junitxml and --lastcall-reports are run's own; -- --durations=1 reaches pytest as it is.
    Against a planted bug each repeat fails: -x stops after the first. A folder named like the target sits in
    the current directory: the target's value is never taken for a path."""
    junit, reports = tmp_path / "junit.xml", tmp_path / "reports"
    (tmp_path / "no_conn_tracking").mkdir()
    rc, out, err = _lastcall("run", os.path.abspath(SCENARIO), "--target", "no_conn_tracking", "-k", "tp1-pp1-cpu",
                             "--repeat", "2", "-x", "--junitxml", str(junit), "--lastcall-reports", str(reports),
                             "--", "--durations=1", "-W", "error:lastcall:DeprecationWarning", cwd=str(tmp_path))
    assert rc == EXIT_BROKEN, out + err
    assert "slowest 1 durations" in out
    assert re.search(r"stopping after 1 failures !+\n1 failed, 6 deselected in ", out), out  # 2 selected, 1 run
    cases = ET.parse(junit).getroot().findall(".//testcase")
    assert [c.get("name") for c in cases] == ["stalled-read-is-cancelled[tp1-pp1-cpu-r1]"]
    assert cases[0].find("failure") is not None
    assert len([d for d in reports.iterdir() if d.is_dir() and d.name != "sessions"]) == 1  # sessions/: the pages


def test_run_option_values_are_never_taken_for_paths(tmp_path: Path) -> None:
    """A target named like a folder of the current directory: run passes --lastcall-target=NAME as one argument,
    so pytest keeps its rootdir here and the item is the file's, not ``reference .``."""
    (tmp_path / "reference").mkdir()
    Path(tmp_path / "x.yaml").write_text(Path(SCENARIO).read_text())
    rc, out, err = _lastcall("run", "--target", "reference", "-k", "tp1-pp1-cpu", "x.yaml", "--", "-vv",
                             cwd=str(tmp_path))
    assert rc == EXIT_OK, out + err
    assert f"rootdir: {tmp_path}" in out, out
    assert re.search(r"^x\.yaml::stalled-read-is-cancelled\[tp1-pp1-cpu\] PASSED", out, re.M), out


def test_run_maps_a_pytest_usage_error_to_2() -> None:
    """An argument after -- that pytest does not know: pytest's usage error (4) is lastcall's 2, nothing runs."""
    rc, out, err = _lastcall("run", SCENARIO, "--", "--no-such-flag")
    assert (rc, out) == (EXIT_USAGE, "")
    assert "error: unrecognized arguments: --no-such-flag" in err and "Traceback" not in err


def test_only_run_takes_pytest_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "validate", SCENARIO, "--", "-x")
    assert (rc, out, err) == (EXIT_USAGE, "", "lastcall validate: error: only lastcall run takes arguments after -- "
                                              "(they go to pytest) (see lastcall validate --help)\n")


@pytest.mark.parametrize(("argv", "env", "message"), [
    (["validate", "--target", "refrence", SCENARIO], {}, f"lastcall validate: --target: {UNKNOWN}"),
    (["validate", SCENARIO], {"LASTCALL_TARGET": "refrence"}, f"lastcall validate: LASTCALL_TARGET: {UNKNOWN}"),
    (["replay", "/nonexistent"], {}, "lastcall replay: /nonexistent: no such report; give reports/<run id>, or its "
                                     "verdicts.json or history.jsonl"),
    (["report", "/nonexistent/history.jsonl", "--check", "no_late_dispach"], {},
     "lastcall: error: unknown checker 'no_late_dispach'; did you mean 'no_late_dispatch'? (known: "),
])
def test_every_name_given_is_checked_first(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                          argv: list[str], env: dict[str, str], message: str) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    rc, _, err = _run(capsys, *argv)
    assert rc == EXIT_USAGE
    assert err.startswith(message) and err.count("\n") == 1, err


def test_replay_of_a_directory_without_verdicts_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(capsys, "replay", str(tmp_path))
    assert (rc, err) == (EXIT_USAGE, f"lastcall replay: {tmp_path / 'verdicts.json'}: no such file: give a run's "
                                     "report directory, reports/<run id>, or a file in it\n")


def test_run_hands_pytest_each_option_with_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """No value of run's own options is a bare argument pytest could read as a path (its rootdir comes from them)."""
    from harness.scenario import commands

    seen: list[list[str]] = []
    monkeypatch.setattr(commands, "preflight", lambda *a: ([], set()))
    monkeypatch.setattr(pytest, "main", lambda args: seen.append(list(args)) or 0)
    assert commands.run([SCENARIO], workers="2", target="reference", listener="reference", keyword="tinykv",
                        marks="not slow", extra=[]) == EXIT_OK
    before = seen[0][:seen[0].index("--")]
    assert [a for a in before if not a.startswith("-")] == [], before
    assert {"--lastcall-target=reference", "--lastcall-listener=reference", "--numprocesses=2", "-ktinykv",
            "-mnot slow"} <= set(before)
