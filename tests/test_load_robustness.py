"""benchmarks/load_robustness.py: what it reads from a JUnit file (a too-slow skip counted apart), its exact
binomial bound, its table (re-rendered from the committed JSON, or the placeholder until there is one), and that a
load's neighbours are running inside its block and all gone after it, also when the block is interrupted."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path
from types import ModuleType

import psutil
import pytest
from lc_helpers import ROOT

from harness.checkers.modes import HOST_TOO_SLOW
from tests.test_docs_tables import script

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest">
<testcase classname="scenarios.reply-larger-than-the-socket-buffer.yaml" name="reply-larger[tp1-pp1-cpu]" time="2">
<properties><property name="lastcall_variant" value="reference" /></properties></testcase>
<testcase classname="scenarios.idle-clients-cost-nothing.yaml" name="idle-clients[tp1-pp1-cpu-catches-spin]" time="3">
<properties><property name="lastcall_variant" value="spin" /></properties>
<failure message="idle_cost: not caught&#10;second line">long text</failure></testcase>
<testcase classname="scenarios.idle-clients-cost-nothing.yaml" name="idle-clients[tp1-pp1-cpu]" time="1">
<skipped type="pytest.skip" message="{too_slow} (a spinner got 0.05 of a CPU)">skip</skipped></testcase>
<testcase classname="scenarios.gpu.yaml" name="gpu[cuda]" time="0">
<skipped type="pytest.skip" message="no CUDA device" /></testcase>
<testcase classname="scenarios.x.yaml" name="x[tp1-pp1-cpu-catches-bug]" time="1">
<error message="">Traceback&#10;boom</error></testcase>
<testcase classname="scenarios.y.yaml" name="y[tp1-pp1-cpu]" time="3">
{y_failure}
</testsuite></testsuites>
""".replace("{too_slow}", HOST_TOO_SLOW).replace("{y_failure}", (
    '<failure message="scenario y[tp1-pp1-cpu] on reference: outcome ok, 3.12s, run 1x2">scenario y[tp1-pp1-cpu] on '
    "reference: outcome ok, 3.12s, run 1x2&#10;  VIOLATED reads_cancelled: conn 2 not cancelled&#10;      evidence: "
    "accepted&#10;  ok requests_served&#10;timeline:</failure></testcase>"))


def test_a_junit_file_gives_each_items_outcome_and_a_too_slow_skip_apart(tmp_path: Path) -> None:
    mod = script("load_robustness")
    path = tmp_path / "j.xml"
    path.write_text(JUNIT)
    assert mod.parse_junit(path) == [
        {"nodeid": "scenarios/reply-larger-than-the-socket-buffer.yaml::reply-larger[tp1-pp1-cpu]",
         "outcome": "passed", "catches": False},
        {"nodeid": "scenarios/idle-clients-cost-nothing.yaml::idle-clients[tp1-pp1-cpu-catches-spin]",
         "outcome": "failed", "catches": True, "message": "idle_cost: not caught", "detail": "long text"},
        {"nodeid": "scenarios/idle-clients-cost-nothing.yaml::idle-clients[tp1-pp1-cpu]", "outcome": "too_slow",
         "catches": False, "message": f"{HOST_TOO_SLOW} (a spinner got 0.05 of a CPU)"},
        {"nodeid": "scenarios/gpu.yaml::gpu[cuda]", "outcome": "skipped", "catches": False,
         "message": "no CUDA device"},
        {"nodeid": "scenarios/x.yaml::x[tp1-pp1-cpu-catches-bug]", "outcome": "failed", "catches": True,
         "message": "Traceback", "detail": "Traceback\nboom"},  # no message attribute: its text; no properties:
        # the node id says whether it is a catches item
        {"nodeid": "scenarios/y.yaml::y[tp1-pp1-cpu]", "outcome": "failed", "catches": False,
         "message": "scenario y[tp1-pp1-cpu] on reference: outcome ok, 3.12s, run 1x2; VIOLATED reads_cancelled: "
                    "conn 2 not cancelled",  # the line that names what failed, beside the one that names the run
         "detail": "scenario y[tp1-pp1-cpu] on reference: outcome ok, 3.12s, run 1x2\n  VIOLATED reads_cancelled: "
                   "conn 2 not cancelled\n      evidence: accepted\n  ok requests_served\ntimeline:"}]


def test_the_upper_bound_is_the_exact_clopper_pearson_one() -> None:
    mod = script("load_robustness")
    assert mod.upper_bound(0, 870) == pytest.approx(1 - 0.05 ** (1 / 870), rel=1e-9)
    assert mod.upper_bound(0, 870) == pytest.approx(0.0034, abs=5e-5)
    assert mod.upper_bound(0, 5) == pytest.approx(0.4507, abs=1e-4)
    # scipy.stats.beta.ppf(0.95, k + 1, n - k), computed once elsewhere
    assert mod.upper_bound(1, 10) == pytest.approx(0.39416, abs=1e-5)
    assert mod.upper_bound(3, 100) == pytest.approx(0.07571, abs=1e-5)
    assert mod.upper_bound(5, 5) == 1.0 and mod.upper_bound(0, 0) == 1.0
    for k, n in ((2, 50), (10, 400)):  # at the bound, k or fewer are seen 5 % of the time
        assert mod.binom_cdf(k, n, mod.upper_bound(k, n)) == pytest.approx(0.05, abs=1e-9)
    assert math.isclose(mod.binom_cdf(0, 870, 0.01), 0.99 ** 870)


def _item(nodeid: str, outcome: str, catches: bool = False, message: str = "") -> dict[str, object]:
    return {"nodeid": nodeid, "outcome": outcome, "catches": catches, **({"message": message} if message else {})}


def test_the_table_counts_each_kind_and_lists_every_item_that_failed_or_was_too_slow() -> None:
    mod = script("load_robustness")
    a, b, c = "scenarios/a.yaml::a[tp1]", "scenarios/b.yaml::b[tp1-catches-bug]", "scenarios/c.yaml::c[tp1]"
    runs = [{"kind": "none", "repeat": 1, "wall_s": 100.0, "items": [_item(a, "passed"), _item(b, "passed", True)]},
            {"kind": "cpu2", "repeat": 1, "wall_s": 150.0,
             "items": [_item(a, "passed"), _item(b, "failed", True, "not caught | x"), _item(c, "too_slow", False,
                                                                                             "not judged here: y")]},
            {"kind": "cpu2", "repeat": 2, "wall_s": 170.0, "items": [], "broken": ["pytest exit 3"]}]
    result = {"date": "2026-12-07", "commit": "abc1234", "dirty": True,
              "machine": {"cpus": 2, "model": "AMD EPYC", "mem_total_gib": 23.5}, "python": "3.11.9",
              "command": "python benchmarks/load_robustness.py --kinds none cpu2 --repeats 2", "k": "a or b",
              "pytest_args": ["scenarios/", "-n", "2"], **mod.tally(runs)}
    assert result["kinds"]["cpu2"]["item_runs"] == 2 and result["kinds"]["cpu2"]["too_slow"] == 1
    assert list(result["items"]) == [b, c]
    assert mod.table(json.loads(json.dumps(result))).splitlines() == [
        "| load | repeats | wall per repeat, median (range) | item runs | failures (reference / catches) | too slow | "
        "failure rate | 95 % upper bound | target met |",
        "|---|---|---|---|---|---|---|---|---|",
        "| `none` | 1 | 1 min 40 s (1 min 40 s to 1 min 40 s) | 2 | 0 (0 / 0) | 0 | 0.0000 | 0.7764 | no |",
        "| `cpu2` | 2 | 2 min 40 s (2 min 30 s to 2 min 50 s) | 2 | 1 (0 / 1) | 1 | 0.5000 | 0.9747 | no |",
        "",
        "Target: R = 5 under each kind, no reference item fails, every catches item caught (0 failures in every "
        "row). A too-slow skip (`not judged here: host too slow`) is no verdict: counted apart, not as a run, and "
        "listed below.",
        "Not measured: `cpu4`, `io`, `memory`, `forks`, `mixed`, `cold`.",
        "`cpu2` repeat 2: pytest exit 3 (not counted).",
        "",
        "| item | load | failures / runs | too slow | first line of the first failure (else of the skip) |",
        "|---|---|---|---|---|",
        f"| `{b}` | `cpu2` | 1 / 1 | 0 | not caught \\| x |",
        f"| `{c}` | `cpu2` | 0 / 0 | 1 | not judged here: y |",
        "",
        "Each repeat `python -m pytest scenarios/ -n 2` `-k 'a or b'`.",
        "",
        "Measured: date 2026-12-07 · commit abc1234+ · machine 2 CPUs, AMD EPYC, 23.5 GiB · python 3.11.9 · "
        "command `python benchmarks/load_robustness.py --kinds none cpu2 --repeats 2`"]


def test_the_page_shows_the_table_of_its_data_or_says_it_is_not_yet_measured() -> None:
    mod = script("load_robustness")
    text = (ROOT / "docs" / "load-robustness.md").read_text()
    begin, end = mod.docpage.markers(mod.NAME)
    assert text.count(begin) == 1 and text.count(end) == 1
    data = mod.docpage.data_path(mod.NAME)
    want = mod.table(json.loads(data.read_text())) if data.exists() else "not yet measured"
    assert mod.docpage.between(text, mod.NAME) == want, (
        "docs/load-robustness.md's table differs from docs/data/load_robustness.json: rerun "
        "`./dev load-check --write`, do not edit the table")


def _loads() -> ModuleType:
    """benchmarks/loads.py as the benchmark imports it (by name, benchmarks/ on sys.path: its dataclass needs
    its module in sys.modules)."""
    script("load_robustness")
    return importlib.import_module("loads")


def _descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize("kind", ["cpu2", "forks", "io", "memory"])
def test_a_load_runs_its_neighbours_in_its_block_and_leaves_none_behind(kind: str, tmp_path: Path) -> None:
    loads = _loads()
    (tmp_path / "big").write_bytes(b"\0" * loads.BIG_FILE)  # the io reader's file, not the venv's
    options = {"io": {"write_mib": 1, "read_root": tmp_path}, "memory": {"memory_bytes": 32 << 20}}.get(kind, {})
    before = _descendants()
    with loads.load(kind, **options) as where:
        pids = where.group.pids()
        assert len(pids) == {"cpu2": 2, "forks": 1, "io": 2, "memory": 1}[kind]
        assert set(pids) <= _descendants() - before
        assert all(psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids) and not where.dead()
    assert _descendants() <= before
    assert not any(loads.group_members(p) for p in pids), "a neighbour's process group outlived its load"


@pytest.mark.slow  # a clone of the repository and the venv's pages evicted: seconds
def test_ci_s_pass_is_a_cold_clone_with_the_mixed_load_beside_it(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    loads = _loads()
    (tmp_path / "big").write_bytes(b"\0" * loads.BIG_FILE)
    monkeypatch.setattr(loads, "SITE", tmp_path)  # evict (and the reader read) a small tree, not the venv
    before = _descendants()
    with loads.load(loads.CI, write_mib=1, read_root=tmp_path) as where:
        assert where.cwd != ROOT and (where.cwd / "harness" / "__init__.py").is_file()  # the clone's harness
        assert where.env["PYTHONPATH"].split(":")[0] == str(where.cwd) and "PYTHONPYCACHEPREFIX" in where.env
        pids = where.group.pids()
        assert len(pids) == 5 and not where.dead()  # two busy loops, the writer, the reader, the fork storm
        clone = where.cwd
    assert _descendants() <= before and not clone.exists()


def test_an_interrupted_load_still_leaves_nothing_behind(tmp_path: Path) -> None:
    loads = _loads()
    (tmp_path / "big").write_bytes(b"\0" * loads.BIG_FILE)
    before = _descendants()
    with pytest.raises(KeyboardInterrupt), loads.load("mixed", write_mib=1, read_root=tmp_path):
        raise KeyboardInterrupt
    assert _descendants() <= before


def test_a_neighbour_that_cannot_start_fails_the_load_and_is_gone(tmp_path: Path) -> None:
    loads = _loads()
    before = _descendants()
    with pytest.raises(RuntimeError, match="load neighbour reader did not start"), \
            loads.load("io", write_mib=1, read_root=tmp_path):  # nothing to read
        pass
    assert _descendants() <= before


def test_the_exit_status_is_a_gate_s() -> None:
    """1 when an item failed or a run was broken under some load; a too-slow skip is neither."""
    mod = script("load_robustness")
    row = {"failures": 0, "broken": [], "too_slow": 3}
    assert mod.verdict({"kinds": {"cpu2": row}}) == 0
    assert mod.verdict({"kinds": {"cpu2": row, "io": dict(row, failures=1)}}) == 1
    assert mod.verdict({"kinds": {"cold": dict(row, broken=["repeat 1: no JUnit file"])}}) == 1
