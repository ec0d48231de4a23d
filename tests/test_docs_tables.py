"""The tables a script makes are that script's output: each is committed as data (docs/data/*.json) and
re-rendered here from it, with the script's own renderer, and compared with the text on its page; the
pages' links resolve, and the README's example scenario loads."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from lc_helpers import ROOT

from harness import provenance
from harness.scenario import table
from harness.scenario.loader import load, load_many

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def script(name: str) -> ModuleType:
    """A benchmarks/ script as a module (its renderer; nothing runs at import).  benchmarks/ goes on sys.path
    as it is when the script runs, for its docpage helper."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
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
    assert shown(table.PAGE, table.BEGIN, table.END) == table.rendered(data("planted_bug_table.json")), (
        "docs/planted-bug-table.md differs from docs/data/planted_bug_table.json: rerun "
        "`python -m harness.scenario.table --write --from reports/planted-bug-table`, do not edit the table")


def test_the_planted_bug_table_shows_only_what_exists_and_every_catch_of_it() -> None:
    """Its rows are scenarios and its columns variants that still exist, and within them its bold cells are
    exactly the scenarios' catches.  A scenario or variant added since the last full run has no row or column
    until the table is rerun (python -m harness.scenario.table --write)."""
    cells, variants = table.from_data(data("planted_bug_table.json"))
    gone = sorted(set(variants) - set(table.table_variants()))
    assert not gone, f"the table has columns for variants that are gone: {gone}: rerun the table"
    scenarios, errors = load_many([ROOT / "scenarios"])
    assert not errors
    rows, names = {c.scenario for c in cells}, {s.name for s in scenarios}
    assert rows <= names, f"rows for scenarios that are gone: {sorted(rows - names)}: rerun the table"
    named = {(c.scenario, c.variant) for c in cells if c.named}
    assert named == {(s.name, v) for s in scenarios if s.name in rows for v in s.catches if v in variants}, (
        "the bold cells are not the scenarios' catches: rerun the table")


def test_writing_the_planted_bug_table_replaces_only_the_text_between_its_markers(tmp_path: Path) -> None:
    (tmp_path / "docs" / "data").mkdir(parents=True)
    page = tmp_path / table.PAGE
    page.write_text(f"before\n{table.BEGIN}\nstale\n{table.END}\nafter\n")
    cells = [table.Cell("s1", "reference", False, False, ()), table.Cell("s1", "v_a", True, True, ("c",)),
             table.Cell("s2", "reference", True, False, ("c",))]
    table.write(cells, ["reference", "v_a"], "a test", root=str(tmp_path))
    assert page.read_text() == (f"before\n{table.BEGIN}\n| scenario | reference | v a |\n|---|---|---|\n"
                                f"| s1 | pass | **x** |\n| s2 | FAIL | - |\n\nMeasured: date not recorded · commit not "
                                "recorded · machine not recorded · python not recorded · command `a test`\n"
                                f"{table.END}\nafter\n")
    back, variants = table.from_data(json.loads((tmp_path / table.DATA).read_text()))
    assert back == cells and variants == ["reference", "v_a"]


def test_an_update_replaces_only_the_rows_of_the_scenarios_it_reran() -> None:
    C = table.Cell
    kept = [C("a", "reference", False, False, ()), C("a", "bug", True, True, ("x",)),
            C("b", "reference", False, False, ()), C("b", "bug", True, False, ("y",))]
    fresh = [C("b", "bug", False, False, ()), C("b", "reference", False, False, ()), C("c", "bug", True, True, ("z",))]
    got = table.merged(kept, fresh, ["reference", "bug"])
    assert got == [kept[0], kept[1], fresh[1], fresh[0], fresh[2]]  # b's cells are the fresh ones, c's last


def test_the_hostile_input_table_is_rendered_from_its_data() -> None:
    hostile = script("hostile_input")
    assert hostile.PAGE == ROOT / "docs" / "limits.md"
    assert shown("docs/limits.md", hostile.BEGIN, hostile.END) == hostile.table(data("hostile_input.json"))


@pytest.mark.parametrize("name, data_file", [("failpoint_cost", "failpoint_cost.json"),
                                             ("handshake_latency", "handshake_latency.json"),
                                             ("ipc_roundtrip", "ipc_roundtrip.json"),
                                             ("bench_table", "lastcall_bench.json"),
                                             ("bench_kvcached", "kvcached_bench.json"),
                                             ("engine_launch", "engine_launch.json")])
def test_each_benchmark_table_is_rendered_from_its_data(name: str, data_file: str) -> None:
    mod = script(name)
    render = getattr(mod, "table", None) or mod.tables
    docpage = script("docpage")
    table_name = getattr(mod, "NAME", name.replace("_", "-"))
    assert docpage.data_path(table_name).name == data_file
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    assert docpage.between(text, table_name) == render(data(data_file)), (
        f"docs/benchmarks.md's {table_name} table differs from docs/data/{data_file}: rerun "
        f"benchmarks/{name}.py with --write, do not edit the table")


def test_a_benchmark_result_is_written_between_its_markers_only(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    docpage = script("docpage")
    monkeypatch.setattr(docpage, "ROOT", tmp_path)
    page = tmp_path / "page.md"
    begin, end = docpage.markers("x-y")
    page.write_text(f"a\n{begin}\nold\n{end}\nb {begin[:4]}\n")
    docpage.write("x-y", {"k": 1}, "| new |", page=page)
    assert page.read_text() == f"a\n{begin}\n| new |\n{end}\nb {begin[:4]}\n"
    assert json.loads((tmp_path / "docs" / "data" / "x_y.json").read_text()) == {"k": 1}


def test_the_bench_table_reads_what_lastcall_bench_writes() -> None:
    """bench_table's reduction of a ``lastcall bench --json`` result, in the shape BenchResult.as_dict gives."""
    bench = script("bench_table")
    cmp = {"ratio": 1.25, "ci": [1.1, 1.4], "p": 0.0012, "verdict": "slower", "u": 3.0, "alpha": 0.05}
    aa = {"ratio": 1.0, "ci": [0.9, 1.1], "p": 0.5, "verdict": "no difference"}
    run = {"settings": {"confidence": 0.9}, "baseline": "reference", "aa_arm": "reference (A/A)",
           "ops": {"map16": {"arms": {"reference": {"median_us": 10.0, "window_medians_us": [10.0]},
                                      "SLOW": {"median_us": 12.5, "window_medians_us": [12.5]}},
                             "vs_baseline": {"SLOW": cmp}, "aa_floor": aa}}, "leak_checks": 4, "seconds": 1.0}
    assert bench.table(bench.reduce(run, "lastcall bench")).splitlines() == [
        "| op | reference (us) | SLOW (us) | ratio | 90% CI | p | verdict | A/A floor [CI], p |",
        "|---|---|---|---|---|---|---|---|",
        "| map16 | 10.0 | 12.5 | 1.250 | [1.100, 1.400] | 0.0012 | slower | 1.000 [0.900, 1.100], p 0.5 |",
        "", "Placement: unpinned.",  # a run without a placement (before lastcall bench pinned) was unpinned
        "", "Measured: date not recorded · commit not recorded · machine not recorded · python not recorded · "
        "command `lastcall bench`"]
    run.update(date="2026-12-07", python="3.11.7")  # what `lastcall bench --json` records beside its result
    assert bench.table(bench.reduce(run, "lastcall bench")).splitlines()[-1] == (
        "Measured: date 2026-12-07 · commit not recorded · machine not recorded · python 3.11.7 · "
        "command `lastcall bench`")
    run["settings"]["placement"] = {"client": 0, "arms": 1}  # type: ignore[index]
    assert bench.table(bench.reduce(run, "lastcall bench")).splitlines()[-3] == (
        "Placement: requests from CPU 0, every arm on CPU 1.")


def test_the_readme_example_scenario_loads(tmp_path: Path) -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    scenarios = [b for b in blocks if b.startswith("name:")]
    assert scenarios, "the tour's scenario is gone from the README"
    for text in scenarios:
        path = tmp_path / "example.yaml"
        path.write_text(text)
        scn = load(path)
        assert scn.catches, "the tour's scenario names no planted bug it catches"


def names_in_table(page: str, section: str) -> set[str]:
    """The backticked names in the first column of the table in ``section`` (a "## " heading) of a page."""
    text = (ROOT / page).read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \|", text, re.M))


def test_the_checker_table_lists_every_registered_checker() -> None:
    from harness.checkers import CHECKERS

    assert names_in_table("docs/invariants.md", "Checkers") == set(CHECKERS)


def test_the_variant_table_lists_every_planted_bug_of_the_worker_listener() -> None:
    from harness.reference.variants import VARIANTS

    assert names_in_table("docs/reference-listener.md", "Planted-bug variants") == set(VARIANTS) - {"reference"}


def test_the_readme_opens_with_the_two_commands_and_links_every_docs_page() -> None:
    text = (ROOT / "README.md").read_text()
    first = re.search(r"```\w*\n(.*?)```", text, re.S)
    assert first is not None and first.group(1) == "./dev run\n./dev test\n", "CI runs the README's first code block"
    linked = set(LINK.findall(text))
    unlinked = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"docs/{p.name}" not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    text = page.read_text()
    missing = [target for target in LINK.findall(text)
               if "://" not in target and not (page.parent / target).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to what is not there: {missing}"


REPO_PATH = re.compile(r"(?<![\w/.~-])((?:harness|tests|benchmarks|scenarios|fixtures|docs)/[\w./-]*)")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_path_of_the_repository_a_page_names_exists(page: Path) -> None:
    """A file or folder named in the text (``harness/explore/``, ``benchmarks/ipc_roundtrip.py``) is there:
    moved or split code leaves no stale path behind.  A placeholder (``reports/<run id>/``) ends the match."""
    named = {m.rstrip(".") for m in REPO_PATH.findall(page.read_text())}
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"{page.relative_to(ROOT)} names paths that are not there: {missing}"


def test_every_table_shows_the_provenance_of_its_measurement() -> None:
    """Under each generated table, the line its renderer prints from what its JSON records (the renderers'
    tests above compare it with the JSON)."""
    figures = script("figures")
    bare = [f"{page.relative_to(ROOT)}: {name}" for name, page, _ in figures.tables()
            if provenance.parse(figures.docpage.between(page.read_text(), name)) is None]
    assert not bare, f"tables with no provenance line under them: {bare}"


def test_every_generated_table_has_a_row_in_the_index_and_every_row_a_table(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    figures = script("figures")
    assert figures.unindexed() == [], "add what the table measures to MEASURES in benchmarks/figures.py"
    page = tmp_path / "new.md"
    page.write_text("# New\n\n<!-- new-thing-table:begin -->\n| a |\n<!-- new-thing-table:end -->\n")
    monkeypatch.setattr(figures, "PAGES", [*figures.PAGES, page])
    assert figures.unindexed() == ["new-thing"]  # a table added without its row is seen


def test_the_figures_index_is_current() -> None:
    figures = script("figures")
    assert (ROOT / "docs" / "figures.md").read_text() == figures.render(), (
        f"docs/figures.md is stale: regenerate it with: {figures.COMMAND}")


def test_a_table_whose_data_lacks_a_field_says_it_was_not_recorded(tmp_path: Path) -> None:
    """Nothing is filled in from the machine that renders: a field the JSON lacks reads "not recorded"."""
    robustness = script("load_robustness")
    copy = tmp_path / "load_robustness.json"
    copy.write_text((ROOT / "docs" / "data" / "load_robustness.json").read_text())
    recorded = json.loads(copy.read_text())
    assert f"Measured: date {recorded['date']} · " in robustness.table(recorded)
    del recorded["date"]
    copy.write_text(json.dumps(recorded))
    line = robustness.table(json.loads(copy.read_text())).splitlines()[-1]
    assert line.startswith("Measured: date not recorded · commit ") and provenance.parse(line) is not None
    assert provenance.parse(line)["machine"] == provenance.fields([recorded])["machine"] != provenance.NOT_RECORDED


def test_a_measuring_script_records_every_field_of_its_provenance() -> None:
    made = script("docpage").measured(str(ROOT / "benchmarks" / "failpoint_cost.py"), ["--runs", "3", "--write"])
    assert [k for k in provenance.FIELDS if made.get(k)] == list(provenance.FIELDS)
    assert made["command"] == "python benchmarks/failpoint_cost.py --runs 3 --write"
    assert set(made["machine"]) == {"cpus", "model", "mem_total_gib"}
    assert provenance.NOT_RECORDED not in provenance.line([made])
