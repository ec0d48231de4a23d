"""The expected outcome of each engine scenario on a real engine: a lost finding is a failure, not silence.

``docs/findings/<engine>/expected.yaml`` maps a scenario name to the status each of its checkers is expected
to give on that engine (``ok``, ``violated``, ``unknown``), from the runs the findings page reports::

    engine-sigterm-idle:
      runs: 1                       # how many runs the expectation rests on (no rate from a single run)
      checkers: {engine_tree_exits: ok, engine_nothing_left: violated}

:func:`differences` compares a run's verdicts with it, one line per checker that left what is expected (a
checker of the run the file does not name is not judged by it).  A nondeterministic finding will be given a
rate range here once it has been measured over repeats (``--repeat``); none is claimed from one run.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError

__all__ = ["load_expected", "differences", "STATUSES"]

STATUSES = ("ok", "violated", "unknown")


def load_expected(path: Path) -> dict[str, dict[str, str]]:
    """Scenario name -> checker -> expected status.

    Error handling: ConfigError naming the file and the entry when it is not of the form above."""
    try:
        raw: Any = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the expected outcomes: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of scenario names")
    out: dict[str, dict[str, str]] = {}
    for name, entry in raw.items():
        checkers = entry.get("checkers") if isinstance(entry, dict) else None
        if not isinstance(checkers, dict) or not all(s in STATUSES for s in checkers.values()):
            raise ConfigError(f"{path}: {name}: give checkers: {{CHECKER: {' | '.join(STATUSES)}}}")
        out[str(name)] = {str(k): str(v) for k, v in checkers.items()}
    return out


def differences(got: Mapping[str, str], want: Mapping[str, str]) -> list[str]:
    """One line per checker whose status is not the expected one (a missing verdict is one too)."""
    return [f"{chk}: expected {status}, got {got.get(chk, 'no verdict')}" for chk, status in want.items()
            if got.get(chk) != status]
