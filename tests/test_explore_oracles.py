"""One oracle per invariant: every planted bug the lifecycle explorer catches is caught by a
registered checker over the explorer's recorded history, not by the explorer's own invariant alone.

The catalogue (harness.contract.catalogue.CATCHES) says which checkers fire on each bug's shortest interleaving;
tests/test_stateful.py proves that they fire there, and no other; this test holds the catalogue to the rule, and
proves on two bugs that the oracle is the checker: the same history judged by it alone is violated on the bug
and not on the reference.
"""

from __future__ import annotations

import pytest

from harness.checkers import CHECKERS, RunRecord, judge
from harness.explore import (
    CATCHES,
    HISTORY_CHECKERS,
    OWN_INVARIANT_ONLY,
    REACHABLE,
    STEP_CHECKERS,
    ListenerMachine,
    machine_for,
)
from harness.reference.variants import VARIANTS

# For the record (and the reader): the checker(s) that catch each planted bug the explorer reaches.
ORACLES: dict[str, tuple[str, ...]] = {bug: checkers for bug, (_line, checkers) in sorted(CATCHES.items())}


def test_every_caught_bug_names_the_checker_that_catches_it() -> None:
    assert set(ORACLES) == set(REACHABLE)
    alone = sorted(bug for bug, checkers in ORACLES.items() if not checkers)
    assert alone == sorted(OWN_INVARIANT_ONLY), (
        f"caught by the explorer's own invariant alone, with no reason recorded: "
        f"{sorted(set(alone) - set(OWN_INVARIANT_ONLY))}; listed as such but a checker catches them: "
        f"{sorted(set(OWN_INVARIANT_ONLY) - set(alone))}")
    assert all(why.strip() for why in OWN_INVARIANT_ONLY.values())
    for bug, checkers in ORACLES.items():
        assert set(checkers) <= set(HISTORY_CHECKERS), bug
        assert all(name in CHECKERS for name in checkers), bug
    assert set(STEP_CHECKERS) <= set(HISTORY_CHECKERS)


def _history(variant: str, steps: list[str]) -> tuple[ListenerMachine, RunRecord]:
    """Drive ``steps`` on ``variant`` without the invariants; the history recorded, with the paths snapshots."""
    m = machine_for(VARIANTS[variant])()
    try:
        for kind in steps:
            try:
                getattr(m, kind)()
            except Exception:  # the explorer's own verdict; only the checker's is judged here
                break
        return m, RunRecord(tuple(m.rig.rec.events()), snapshots=dict(m.rig.taken.snapshots))
    finally:
        m.teardown()


@pytest.mark.parametrize(("bug", "steps", "checker"), [
    ("unlink_by_path", ["replace_path", "stop"], "unlinks_only_own_socket"),
    ("drop_registration_on_error", ["stop_cleanup_fails"], "registration_kept"),
    # the explorer's connections are "request" steps (harness/explore/machine.py, _client): what this checker
    # judges; under a category of their own it would see none and be unknown on both
    ("head_of_line_blocking", ["connect", "connect"], "served_while_stalled"),
])
def test_the_checker_alone_tells_the_bug_from_the_reference(bug: str, steps: list[str], checker: str) -> None:
    _, on_bug = _history(bug, steps)
    _, on_ref = _history("reference", steps)
    assert judge(checker, on_bug).status == "violated"
    assert judge(checker, on_ref).status == "ok", judge(checker, on_ref).message
