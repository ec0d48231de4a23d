"""harness.scenario.table: the Markdown table, and --from reading the cells the slow test left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.scenario.table import Cell, load_cells, main, markdown


def cells() -> list[Cell]:
    return [Cell("s1", "reference", False, False, ()), Cell("s1", "no_conn_tracking", True, True, ("reads_cancelled",)),
            Cell("s1", "lost_unmap", True, False, ("allocator_consistent",)),
            Cell("s2", "reference", True, False, (), "step error: StepError: boom"),
            Cell("s2", "no_conn_tracking", False, True, ())]


def test_markdown_marks_caught_named_missing_and_lacking() -> None:
    text = markdown(cells(), ["reference", "no_conn_tracking", "lost_unmap"])
    assert text.splitlines() == [
        "| scenario | reference | no conn tracking | lost unmap |",
        "|---|---|---|---|",
        "| s1 | pass | **x** | x |",
        "| s2 | FAIL |  | - |",  # a named variant not caught: an empty cell (the slow test fails on it)
    ]


def test_from_reads_the_slow_tests_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("s1", "s2"):
        (tmp_path / f"{name}.json").write_text(json.dumps([c.__dict__ for c in cells() if c.scenario == name]))
    assert [c for c in load_cells(str(tmp_path))] == cells()
    assert main(["--from", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| s1 | pass | " in out and "**x**" in out


def test_from_an_empty_directory_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"no \*\.json under .*: run `pytest -m slow tests/test_scenario_table.py`"):
        load_cells(str(tmp_path))
