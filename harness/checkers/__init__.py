"""Invariants as pure functions of (history, snapshots) -> Verdict, registered by name.

Importing this package registers every checker in :data:`CHECKERS`.
"""

from __future__ import annotations

from harness.checkers import lifecycle, machine, outcome  # noqa: F401  (registration)
from harness.checkers.base import CHECKERS, Checker, RunRecord, Verdict, judge, judge_all
from harness.checkers.params import CHECKER_PARAMS

__all__ = ["CHECKERS", "CHECKER_PARAMS", "Checker", "RunRecord", "Verdict", "judge", "judge_all"]
