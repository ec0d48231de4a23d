"""The tables a script makes are that script's output: each is committed as data (docs/data/*.json) and
re-rendered here from it, with the script's own renderer, and compared with the text on its page; the
pages' links resolve, and the README's example scenario loads (issue 14, deliverable 8)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest

from harness.scenario import table
from harness.scenario.loader import load, load_many

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def script(name: str) -> ModuleType:
    """A benchmarks/ script as a module (its renderer; nothing runs at import)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def shown(page: str, begin: str, end: str) -> str:
    text = (ROOT / page).read_text()
    assert text.count(begin) == 1 and text.count(end) == 1, f"{page}: markers {begin} / {end} missing or repeated"
    return table.between_markers(text, begin, end)


def data(name: str) -> dict[str, object]:
    loaded = json.loads((ROOT / "docs" / "data" / name).read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_the_planted_bug_table_is_rendered_from_its_data() -> None:
    cells, variants = table.from_data(data("planted_bug_table.json"))
    assert shown(table.PAGE, table.BEGIN, table.END) == table.markdown(cells, variants), (
        "docs/planted-bug-table.md differs from docs/data/planted_bug_table.json: rerun "
        "`python -m harness.scenario.table --write --from reports/planted-bug-table`, do not edit the table")


def test_the_planted_bug_table_has_a_row_per_scenario_and_a_column_per_variant() -> None:
    cells, variants = table.from_data(data("planted_bug_table.json"))
    assert variants == table.table_variants(), "the table's columns are not today's variants: rerun the table"
    scenarios, errors = load_many([ROOT / "scenarios"])
    assert not errors
    assert {c.scenario for c in cells} == {s.name for s in scenarios}, "the table's rows are not today's scenarios"
    named = {(c.scenario, c.variant) for c in cells if c.named}
    assert named == {(s.name, v) for s in scenarios for v in s.catches if v in variants}, (
        "the bold cells are not the scenarios' catches: rerun the table")


def test_writing_the_planted_bug_table_replaces_only_the_text_between_its_markers(tmp_path: Path) -> None:
    (tmp_path / "docs" / "data").mkdir(parents=True)
    page = tmp_path / table.PAGE
    page.write_text(f"before\n{table.BEGIN}\nstale\n{table.END}\nafter\n")
    cells = [table.Cell("s1", "reference", False, False, ()), table.Cell("s1", "v_a", True, True, ("c",)),
             table.Cell("s2", "reference", True, False, ("c",))]
    table.write(cells, ["reference", "v_a"], "a test", root=str(tmp_path))
    assert page.read_text() == (f"before\n{table.BEGIN}\n| scenario | reference | v a |\n|---|---|---|\n"
                                f"| s1 | pass | **x** |\n| s2 | FAIL | - |\n{table.END}\nafter\n")
    back, variants = table.from_data(json.loads((tmp_path / table.DATA).read_text()))
    assert back == cells and variants == ["reference", "v_a"]


def test_the_hostile_input_table_is_rendered_from_its_data() -> None:
    hostile = script("hostile_input")
    assert hostile.PAGE == ROOT / "docs" / "limits.md"
    assert shown("docs/limits.md", hostile.BEGIN, hostile.END) == hostile.table(data("hostile_input.json"))


def test_the_readme_example_scenario_loads(tmp_path: Path) -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    scenarios = [b for b in blocks if b.startswith("name:")]
    assert scenarios, "the tour's scenario is gone from the README"
    for text in scenarios:
        path = tmp_path / "example.yaml"
        path.write_text(text)
        scn = load(path)
        assert scn.catches, "the tour's scenario names no planted bug it catches"


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    text = page.read_text()
    missing = [target for target in LINK.findall(text)
               if "://" not in target and not (page.parent / target).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to what is not there: {missing}"
