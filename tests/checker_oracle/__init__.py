"""The checker modules whose checkers were rewritten to bound their work, as they were before, to judge them against.

Each module here is a copy of harness/checkers/<module>.py before its checkers' work was made O(n log n) in the
history's events (per-listener indexes, windows found by bisection, state kept across a listener's stops, evidence
of pairs capped at harness.checkers.base.MAX_COLLECTED): checkers that rescan the history for each stop,
connection, exit hook or launch, quadratic in a forged history and exact by construction.  Their ``@checker``
registers into :data:`ORACLE` only, and they read the run through :class:`OldRun`: the record's views as they
were, computed afresh at each call (no view or index shared between checkers).

The other checker modules were not changed; tests/test_checker_oracle.py judges their checkers through
:class:`OldRun` and through the record itself, which checks the record's shared views alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from checker_oracle import engine, handshake, lifecycle, machine, outcome  # noqa: F401  (registration)
from checker_oracle.registry import ORACLE
from harness.checkers.base import RunRecord
from harness.history import Event

__all__ = ["ORACLE", "OldRun", "old_run"]


@dataclass(frozen=True)
class OldRun(RunRecord):
    """A run record whose ``of`` and ``ordered`` scan and sort the events at every call, as they did."""

    def of(self, *kinds: str) -> list[Event]:
        return [e for e in self.events if e.kind in kinds]

    @property
    def ordered(self) -> list[Event]:
        return sorted(self.events, key=lambda e: e.t_ns)


def old_run(run: RunRecord) -> OldRun:
    return OldRun(run.events, run.snapshots, run.scale, run.absent)
