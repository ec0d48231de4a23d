"""The full planted-bug table: every scenario against every variant (``./dev table``, not the default suite).

It regenerates docs/planted-bug-table.md's cells (about 2200 runs, 40 minutes of CPU here); what it asserts,
that each scenario passes on the reference and catches each variant it names, the scenario library's own items
assert in every default run (one item per scenario and matrix point on the reference, one per named catch).
So the default suite skips it, saying so; LASTCALL_TABLE=1 (which ``./dev table`` sets) runs it.

One test per scenario, so the table spreads over xdist workers.  Each must pass
on the reference and be caught by every variant it names; the other variants
each scenario happens to catch are recorded in reports/planted-bug-table/ and
``python -m harness.scenario.table scenarios`` prints the whole table (the
README quotes it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.history import write_jsonl
from harness.scenario.report import timeline
from harness.scenario.result import RunResult
from harness.scenario.table import Cell, build, table_variants

VARIANTS = table_variants()  # the reference, worker and handshake variants
SCENARIOS = sorted(Path("scenarios").glob("*.yaml"))


def wrong(c: Cell) -> bool:
    """The reference failed, or a variant the scenario names was not caught."""
    return c.caught if c.variant == "reference" else c.named and not c.caught


def how(c: Cell) -> str:
    """How a wrong cell is wrong, in words."""
    return "fails on the reference" if c.variant == "reference" else f"does not catch {c.variant}"


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("LASTCALL_TABLE") != "1",
                    reason="the planted-bug table (every scenario against every variant) runs with ./dev table; "
                           "each scenario's reference and named catches are the scenario items of every run")
@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_against_every_variant(path: Path) -> None:
    # each run takes the fast exit only where harness.scenario.exitmode finds nothing judged can tell
    out = Path("reports") / "planted-bug-table"
    out.mkdir(parents=True, exist_ok=True)
    kept: dict[str, str] = {}

    def keep(cell: Cell, run: RunResult) -> None:  # the history of a cell that went wrong: kept, and shown
        if wrong(cell):
            where = out / f"{path.stem}--{cell.variant}.jsonl"
            write_jsonl(where, run.events)
            kept[cell.variant] = f"{where}; timeline:\n{timeline(run.events)}"

    cells = build([str(path)], VARIANTS, progress=keep)
    (out / f"{path.stem}.json").write_text(json.dumps([c.__dict__ for c in cells], indent=1))
    failures = [f"{c.scenario} {how(c)}: {c.detail} (history: {kept.get(c.variant)})" for c in cells if wrong(c)]
    assert not failures, "\n\n".join(failures)
