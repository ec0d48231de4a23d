"""Invariants as pure functions of (history, snapshots) -> Verdict, registered by name.

Importing this package registers every built-in checker in :data:`CHECKERS` (with its parameter model in
:data:`CHECKER_PARAMS`: ``@checker(name, about, params=Model)`` fills both), then every checker of the
``lastcall.checkers`` entry-point group (harness.entrypoints; :func:`load_plugins`).
"""

from __future__ import annotations

from harness.checkers import engine, handshake, lifecycle, machine, modes, outcome, owners, races, records  # noqa: F401  (registration)
from harness.checkers.base import (
    CHECKERS,
    PLUGIN_ERRORS,
    Checker,
    RunRecord,
    Verdict,
    checker,
    judge,
    judge_all,
    load_plugins,
)
from harness.checkers.params import CHECKER_PARAMS, Params

load_plugins()

__all__ = ["CHECKERS", "CHECKER_PARAMS", "PLUGIN_ERRORS", "Checker", "Params", "RunRecord", "Verdict", "checker",
           "judge", "judge_all", "load_plugins"]
