"""Every line of the stop contract: kept by the reference, broken by the planted bug it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.contract import CHECKS, Check, run_check
from harness.reference.variants import VARIANTS

REFERENCE = VARIANTS["reference"]
CONTRACT_LINES = range(1, 12)  # DESIGN.md's stop contract has eleven lines


def _id(c: Check) -> str:
    return f"L{c.line}-{c.name}"


@pytest.mark.parametrize("check", CHECKS, ids=_id)
def test_reference_keeps(check: Check, lc_root: Path, no_thread_leak: None) -> None:
    outcome = run_check(check, REFERENCE, lc_root)
    assert outcome.kept, outcome.detail


@pytest.mark.parametrize(
    ("check", "variant"),
    [(c, v) for c in CHECKS for v in c.catches],
    ids=[f"{_id(c)}-{v}" for c in CHECKS for v in c.catches],
)
def test_planted_bug_caught(check: Check, variant: str, lc_root: Path) -> None:
    outcome = run_check(check, VARIANTS[variant], lc_root)
    assert not outcome.kept, f"{check.name} did not catch {variant}"
    assert "check crashed" not in outcome.detail, outcome.detail


def test_every_line_has_a_check() -> None:
    assert sorted({c.line for c in CHECKS}) == list(CONTRACT_LINES)


def test_every_variant_is_caught_by_a_check_or_a_scenario() -> None:
    from harness.scenario import load_many

    scenarios, errors = load_many(["scenarios"])
    assert not errors
    caught = {v for c in CHECKS for v in c.catches} | {v for s in scenarios for v in s.catches}
    from harness.reference.handshake_variants import HANDSHAKE_VARIANTS

    assert caught - set(HANDSHAKE_VARIANTS) == set(VARIANTS) - {"reference"}  # handshake ones: test_handshake*


PROCESS_LEVEL = {"leaks_a_child"}  # its bug is a process outliving its worker: judged on real processes only


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(set(VARIANTS) - {"reference"} - PROCESS_LEVEL))
def test_full_matrix_each_variant_breaks_only_where_expected(variant: str, lc_root: Path) -> None:
    """Every check against the variant: those naming it must fire; none may crash."""
    for check in CHECKS:
        outcome = run_check(check, VARIANTS[variant], lc_root)
        assert "check crashed" not in outcome.detail, outcome.detail
        if variant in check.catches:
            assert not outcome.kept, f"{check.name} missed {variant}"


@pytest.mark.parametrize("name", ["exit_hook_bounded", "exit_hook_retries"])
def test_a_broken_exit_probe_is_a_crash_not_a_catch(name: str, lc_root: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A child interpreter that dies before its end gives no verdict: the check reports a crash (every
    contract test fails on one) rather than a violation that would count as catching the variant, and
    what it left under the root is removed all the same."""
    import harness.contract.exit_probe as probe

    monkeypatch.setattr(probe.sys, "executable", "/bin/false")  # the child exits 1 at once
    (lc_root / "lastcall-tp-x-05b16a01").mkdir()
    (lc_root / "lastcall-tp-x-05b16a01" / "w0.sock").touch()
    outcome = run_check(next(c for c in CHECKS if c.name == name), VARIANTS["drop_registration_on_error"], lc_root)
    assert not outcome.kept
    assert "check crashed: ExitProbeFailed: exit probe child" in outcome.detail
    assert "failed with status 1" in outcome.detail
    assert list(lc_root.iterdir()) == []


@pytest.mark.parametrize("name", ["exit_hook_bounded", "exit_hook_retries"])
def test_an_interpreter_that_aborts_after_its_exit_hooks_is_a_violation(name: str, lc_root: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A child whose main returned and whose hooks all ran, then died on SIGABRT while finalizing (torch's
    "terminate called without an active exception": a thread left running inside it, as
    teardown_while_alive leaves one), is a verdict on the listener, not a broken probe."""
    import harness.contract.exit_probe as probe

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'exiting 1'\necho 'hooks-done 2'\n"
                    "echo 'terminate called without an active exception' >&2\nkill -ABRT $$\n")
    fake.chmod(0o755)
    monkeypatch.setattr(probe.sys, "executable", str(fake))
    outcome = run_check(next(c for c in CHECKS if c.name == name), REFERENCE, lc_root)
    assert not outcome.kept
    assert "check crashed" not in outcome.detail
    assert "died on SIGABRT after its exit hooks ran" in outcome.detail
    assert "terminate called" in outcome.detail
