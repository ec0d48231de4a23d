"""Every line of the stop contract: kept by the reference, broken by the planted bug it names, by the oracles named.

A check's history is judged by the checkers it names (harness/checkers/); what no checker judges yet is its
own, harness-side assertion (HARNESS).  The table (harness/contract/table.py and ``Check.by``) says which
oracle fires on which bug, and the tests hold each cell to it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.checkers import CHECKERS
from harness.contract import CHECKS, HARNESS, LINES, Check, exit_probe, lines, run_check
from harness.reference.variants import VARIANTS

REFERENCE = VARIANTS["reference"]
CONTRACT_LINES = range(1, 12)  # docs/stop-contract.md: the stop contract has eleven lines


def _id(c: Check) -> str:
    return f"L{c.line}-{c.name}"


@pytest.mark.parametrize("check", CHECKS, ids=_id)
def test_reference_keeps(check: Check, lc_root: Path, no_thread_leak: None) -> None:
    outcome = run_check(check, REFERENCE, lc_root)
    assert outcome.kept, outcome.detail
    names = [name for name, _ in check.judged]
    assert [(v.checker, v.status) for v in outcome.verdicts] == [(name, "ok") for name in names] * (
        len(outcome.verdicts) // max(1, len(names)))
    assert len(outcome.verdicts) >= len(names)  # every named checker judged a recorded history


@pytest.mark.parametrize(
    ("check", "variant"),
    [(c, v) for c in CHECKS for v in c.catches],
    ids=[f"{_id(c)}-{v}" for c in CHECKS for v in c.catches],
)
def test_planted_bug_caught(check: Check, variant: str, lc_root: Path) -> None:
    outcome = run_check(check, VARIANTS[variant], lc_root)
    assert not outcome.kept, f"{check.name} did not catch {variant}"
    assert "check crashed" not in outcome.detail, outcome.detail
    missing = set(check.oracles(variant)) - set(outcome.fired)
    assert not missing, f"{check.name} on {variant}: {sorted(missing)} did not fire ({outcome.detail})"


def test_every_line_has_a_check() -> None:
    assert sorted({c.line for c in CHECKS}) == list(CONTRACT_LINES)
    assert [ln.number for ln in LINES] == list(CONTRACT_LINES)


def test_the_table_names_registered_checkers_and_planted_bugs() -> None:
    """Each check's checkers and oracles are registered checkers (or its own assertion), each bug a variant
    it catches; the checkers a line names for the scenario library are expected by some scenario."""
    from harness.scenario import load_many

    for c in CHECKS:
        assert set(c.checker_names) <= set(CHECKERS), c.name
        for name, params in c.judged:
            CHECKERS[name].params(**params)  # valid parameters, or pydantic says which
        assert c.about and "\n\n" not in c.about and not c.about[:1].isdigit(), c.name
        assert set(c.by) <= set(c.catches), c.name
        assert set(c.catches) <= set(VARIANTS) - {"reference"}, c.name
        for bug in c.catches:
            allowed = {*c.checker_names, *([HARNESS] if c.own else [])}
            assert c.oracles(bug) and set(c.oracles(bug)) <= allowed, (c.name, bug)
    scenarios, errors = load_many(["scenarios"])
    assert not errors
    expected = {e.checker for s in scenarios for e in s.expect}
    for ln in LINES:
        assert ln.also and set(ln.also) <= expected, (ln.number, set(ln.also) - expected)


def test_no_planted_bug_of_the_contract_is_caught_by_the_harness_side_alone() -> None:
    """One oracle per invariant: every bug a check names is caught by a registered checker (HARNESS, the
    check's own assertion, may fire beside it; test_planted_bug_caught proves each cell)."""
    alone = [(c.name, bug) for c in CHECKS for bug in c.catches if set(c.oracles(bug)) <= {HARNESS}]
    assert not alone


def test_the_checkers_alone_catch_a_bug_the_assertions_miss(lc_root: Path) -> None:
    """teardown_deferred's assertions pass on drop_registration_on_error (the retry finds no listener and
    tears the allocator down); the teardown_deferred checker, judging the same history, does not."""
    check = next(c for c in CHECKS if c.name == "teardown_deferred")
    assert check.oracles("drop_registration_on_error") == ("teardown_deferred",)
    outcome = run_check(check, VARIANTS["drop_registration_on_error"], lc_root)
    assert not outcome.kept and outcome.fired == ("teardown_deferred",)
    assert outcome.detail.startswith("teardown_deferred: the allocator was torn down although a listener")


def test_a_checker_that_cannot_judge_is_a_crash_not_a_keep(lc_root: Path) -> None:
    """A check naming a checker its history cannot feed (stop_result judges the harness's stop steps, which
    a rig does not record) does not keep the line on the checker's unknown: it reports a crash, which every
    contract test fails on."""
    blind = Check(11, "served_while_stalled", lines.served_while_stalled, (), ("stop_result",))
    outcome = run_check(blind, REFERENCE, lc_root)
    assert not outcome.kept
    assert outcome.detail.startswith("check crashed: checker stop_result could not judge the history: "
                                     "no stop step returned")


def _records_nothing(variant: object, root: Path) -> None:
    """A check that drives no rig and reads no child's history back (and asserts nothing)."""


def test_a_check_without_a_history_for_its_checkers_is_a_crash(lc_root: Path) -> None:
    """A check that records no history cannot be kept on its checkers: naming a checker for one is a crash."""
    wrong = Check(8, "records_nothing", _records_nothing, (), ("exit_without_stall",))
    outcome = run_check(wrong, REFERENCE, lc_root)
    assert not outcome.kept and outcome.detail.startswith("check crashed: it recorded no history")


def test_the_exit_probes_judge_the_childs_history_read_back(lc_root: Path) -> None:
    """The child interpreter writes its history (the exit hook's events included) for the checkers; the
    harness adds the child's exit as it saw it, and snapshots of the root before and after."""
    check = next(c for c in CHECKS if c.name == "exit_hook_retries")
    outcome = run_check(check, REFERENCE, lc_root)
    assert outcome.kept, outcome.detail
    assert [(v.checker, v.status) for v in outcome.verdicts] == [
        ("failed_stop_retried", "ok"), ("registration_kept", "ok"), ("no_leftover_paths", "ok")]
    assert outcome.verdicts[0].message == "1 failed stop(s), each retried until it returned True"


def test_every_variant_is_caught_by_a_check_or_a_scenario() -> None:
    from harness.scenario import load_many

    scenarios, errors = load_many(["scenarios"])
    assert not errors
    caught = {v for c in CHECKS for v in c.catches} | {v for s in scenarios for v in s.catches}
    # the handshake variants (test_handshake*) and other targets' (the engine stand-in's) are judged there
    assert caught & set(VARIANTS) == set(VARIANTS) - {"reference"}


PROCESS_LEVEL = {"leaks_a_child"}  # its bug is a process outliving its worker: judged on real processes only
# Their bug is in the listener's own record (a dispatch it does not record): a checker reading that record
# says it cannot judge (unknown), which is the right answer there, not a crash of the check
RECORD_LEVEL = {"unrecorded_dispatch"}


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(set(VARIANTS) - {"reference"} - PROCESS_LEVEL))
def test_full_matrix_each_variant_breaks_only_where_expected(variant: str, lc_root: Path) -> None:
    """Every check against the variant: those naming it must fire; none may crash."""
    for check in CHECKS:
        outcome = run_check(check, VARIANTS[variant], lc_root)
        if variant in RECORD_LEVEL and outcome.detail.startswith("check crashed: checker "):
            assert all(v.passes or v.status == "unknown" for v in outcome.verdicts), outcome.detail
            assert "could not judge the history" in outcome.detail, outcome.detail
            continue
        assert "check crashed" not in outcome.detail, outcome.detail
        if variant in check.catches:
            assert not outcome.kept, f"{check.name} missed {variant}"
            assert set(check.oracles(variant)) <= set(outcome.fired), (check.name, variant, outcome.fired)


@pytest.mark.parametrize("name", ["exit_hook_bounded", "exit_hook_retries"])
def test_a_broken_exit_probe_is_a_crash_not_a_catch(name: str, lc_root: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A child interpreter that dies before its end gives no verdict: the check reports a crash (every
    contract test fails on one) rather than a violation that would count as catching the variant, and
    what it left under the root is removed all the same."""

    monkeypatch.setattr(exit_probe, "CHILD_CALL", "sys:exit")  # the child exits 1 at once (sys.exit("stuck"))
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

    (tmp_path / "aborting_probe.py").write_text(
        "import os, signal, sys\n"
        "def child(*args):\n"
        "    print('exiting 1', 'hooks-done 2', sep='\\n', flush=True)\n"
        "    print('terminate called without an active exception', file=sys.stderr, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGABRT)\n")
    monkeypatch.setattr(exit_probe, "CHILD_CALL", "aborting_probe:child")
    monkeypatch.setattr(exit_probe, "CHILD_PATH", [str(tmp_path)])
    outcome = run_check(next(c for c in CHECKS if c.name == name), REFERENCE, lc_root)
    assert not outcome.kept
    assert "check crashed" not in outcome.detail
    assert "died on SIGABRT after its exit hooks ran" in outcome.detail
    assert "terminate called" in outcome.detail
