"""What one run produced: :class:`RunResult`, shared by the runner, the planted-bug table and the reports.

It lives outside harness.scenario and harness.report so each can import it without importing the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.checkers.base import Verdict
from harness.history import Event
from harness.launch.cluster import RunOutcome
from harness.probes.model import Snapshot
from harness.scenario.loader import MatrixItem

__all__ = ["RunResult"]


@dataclass
class RunResult:
    """What one run produced: the verdicts, the run's outcome, its history and snapshots."""

    item: MatrixItem
    variant: str
    run_id: str
    verdicts: list[Verdict]
    outcome: RunOutcome
    events: list[Event]
    snapshots: dict[str, Snapshot]
    step_error: str = ""
    seconds: float = 0.0
    broken: str = ""  # why nothing the run shows counts (it did not start, the harness crashed, a bad event)
    scale: float = 1.0  # what the checkers multiplied every time bound by (harness.timeouts.run_scale)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def violated(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status == "violated"]

    @property
    def passed(self) -> bool:
        return not self.step_error and self.outcome.status == "ok" and all(v.passes for v in self.verdicts)
