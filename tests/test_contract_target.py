"""``lastcall contract --target T``: the stop-contract checks on a target's own worker sides.

The worked example (tests/thirdparty) keeps every check it can take, each check it cannot take is one row
saying why, each of its planted bugs a check names breaks that check, and a bug the check misses is a surprise
(exit 1); a target lacking a capability gets the checks needing it as not applicable, never a crash.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from harness.cli import EXIT_BROKEN, EXIT_OK, EXIT_USAGE, main
from harness.contract import CHECKS
from harness.contract.of_target import not_applicable
from tests.thirdparty.target import TARGET

SPEC = "tests.thirdparty.target:TARGET"
# a variant the checks name, mapped to the correct listener: the check that names it must say it was not caught
MISLABELLED = replace(TARGET, name=f"{__name__}:MISLABELLED", variants={"no_conn_tracking": SPEC})
NO_FAILPOINTS = replace(TARGET, name=f"{__name__}:NO_FAILPOINTS", variants={},
                        capabilities=TARGET.capabilities - {"failpoints"})


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    rc = main(["contract", *argv])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err


@pytest.mark.slow  # 1.8 s: its planted bugs' rows wait out a drain
def test_the_worked_example_keeps_what_it_can_take_and_its_bugs_break_it(capsys: pytest.CaptureFixture[str]) -> None:
    rc, rows, err = _run(capsys, "--target", SPEC)
    assert (rc, err) == (EXIT_OK, ""), rows
    table = [r.split() for r in rows[1:-1]]
    own = {r[1]: r[3] for r in table if r[2] == SPEC}
    assert set(own) == {c.name for c in CHECKS}
    na = {name for name, result in own.items() if result == "n/a"}
    assert na == {"cleanup_error_keeps_registration", "exit_hook_bounded", "exit_hook_retries",
                  "restart_refused_while_draining", "teardown_deferred"}, own
    assert all(result == "kept" for name, result in own.items() if name not in na), own
    assert all("not applicable: " in r for r in rows if " n/a " in r)
    assert any("needs worker events" in r and "teardown_deferred" in r for r in rows)
    bugs = {(r[1], r[2]): r[3] for r in table if r[2] != SPEC}
    assert bugs == {("reads_cancelled", "no_conn_tracking"): "BROKEN",
                    ("handler_drained", "teardown_while_alive"): "BROKEN",
                    ("retained_for_retry", "timed_join_teardown"): "BROKEN",
                    ("retained_for_retry", "teardown_while_alive"): "BROKEN",
                    ("stop_from_handler_returns", "stop_from_handler_deadlocks"): "BROKEN"}, rows
    assert re.fullmatch(rf"{re.escape(SPEC)} keeps 10/10 of the checks it can take \(5 not applicable\); "
                        r"5/5 of its planted bugs' rows broken by the checks that name them; 0 surprises "
                        r"\(\d+\.\ds\)", rows[-1])


def test_a_planted_bug_the_check_misses_is_a_surprise(capsys: pytest.CaptureFixture[str]) -> None:
    rc, rows, _ = _run(capsys, "--target", f"{__name__}:MISLABELLED", "--check", "reads_cancelled")
    assert rc == EXIT_BROKEN, rows
    assert any("no_conn_tracking" in r and "SURPRISE" in r for r in rows), rows
    assert any("no_conn_tracking was not caught by reads_cancelled (line 2)" in r for r in rows), rows


def test_a_target_lacking_a_capability_gets_its_checks_as_not_applicable(capsys: pytest.CaptureFixture[str]) -> None:
    rc, rows, _ = _run(capsys, "--target", f"{__name__}:NO_FAILPOINTS", "--check", "handler_drained",
                       "--check", "served_while_stalled")
    assert rc == EXIT_OK, rows
    assert re.search(r"handler_drained +\S+ +n/a +not applicable: needs failpoints, which the target does not "
                     "declare", rows[1]), rows
    assert re.search(r"served_while_stalled +\S+ +kept", rows[2]), rows
    listenerless = replace(TARGET, capabilities=frozenset({"wire"}))
    assert all("needs worker_listener" in (not_applicable(c, listenerless) or "") for c in CHECKS)


def test_an_unknown_target_or_check_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    rc, rows, err = _run(capsys, "--target", "nosuch_mod_xyz:TARGET")
    assert (rc, rows) == (EXIT_USAGE, []) and len(err.splitlines()) == 1 and "nosuch_mod_xyz" in err, err
    rc, rows, err = _run(capsys, "--target", SPEC, "--check", "handler_draind")
    assert (rc, rows) == (EXIT_USAGE, []) and "did you mean 'handler_drained'?" in err, err
    rc, rows, err = _run(capsys, "--target", SPEC, "--variant", "reference")
    assert rc == EXIT_USAGE and "not allowed with argument --target" in err, err
