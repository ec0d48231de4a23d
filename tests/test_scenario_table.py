"""The full planted-bug table (slow): every scenario against every variant.

Each scenario must pass on the reference and be caught by every variant it names;
the table itself (which other variants each scenario happens to catch) is written
to reports/planted-bug-table.md and quoted in the README.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.reference.variants import VARIANTS
from harness.scenario.table import build, markdown


@pytest.mark.slow
def test_planted_bug_table() -> None:
    variants = list(VARIANTS)
    cells = build(["scenarios"], variants)
    out = Path("reports") / "planted-bug-table.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(markdown(cells, variants) + "\n")
    failures = [f"{c.scenario} fails on the reference" for c in cells if c.variant == "reference" and c.caught]
    failures += [f"{c.scenario} does not catch {c.variant}" for c in cells
                 if c.named and c.variant != "reference" and not c.caught]
    assert not failures, failures
