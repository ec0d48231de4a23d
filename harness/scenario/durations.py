"""pytest-split's committed durations (``.test_durations`` at the rootdir), read by the quick loop's choice of
a cover (harness.scenario.quick)."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["durations"]


def durations(rootdir: Path) -> dict[str, float]:
    """pytest-split's committed durations (``.test_durations``), or nothing."""
    try:
        data = json.loads((rootdir / ".test_durations").read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))} if isinstance(data, dict) else {}
