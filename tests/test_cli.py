"""Tests of the command line's error boundary and the contract command."""

from __future__ import annotations

import os
import re

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
               "'ctl', 'run', 'fetch', 'replay', 'list', 'validate', 'schema', 'report', 'bench') "
               "(see lastcall --help)"),
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
    (["--check", "zzz"], "lastcall: error: unknown check 'zzz' (known: no_dispatch_after_stop, "),
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
