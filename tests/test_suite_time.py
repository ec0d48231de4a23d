"""benchmarks/suite_time.py: its table in docs/running.md is its output (re-rendered here from the committed
JSON), and what it reads from pytest and from a census is read right."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from harness.scenario import table
from tests.test_docs_tables import script

ROOT = Path(__file__).resolve().parent.parent


def test_the_suite_time_table_is_rendered_from_its_data() -> None:
    mod = script("suite_time")
    data = json.loads((ROOT / "docs" / "data" / "suite_time.json").read_text())
    begin, end = mod.docpage.markers(mod.NAME)
    text = (ROOT / "docs" / "running.md").read_text()
    assert text.count(begin) == 1 and text.count(end) == 1
    assert table.between_markers(text, begin, end) == mod.table(data), (
        "docs/running.md's suite-time table differs from docs/data/suite_time.json: rerun "
        "`python benchmarks/suite_time.py --write`, do not edit the table")
    for select, row in data["selections"].items():
        assert row["target_s"] == mod.TARGET_S[select]
        assert row["median_wall_s"] == statistics.median(r["wall_s"] for r in row["runs"])


def test_pytest_summary_lines_are_read() -> None:
    mod = script("suite_time")
    assert mod.parse_summary("..F\n3 failed, 982 passed, 15 skipped in 285.45s (0:04:45)\n") == {
        "counts": {"failed": 3, "passed": 982, "skipped": 15}, "pytest_s": 285.45}
    assert mod.parse_summary("==== 5 passed, 1 error in 2.00s ====") == {
        "counts": {"passed": 5, "error": 1}, "pytest_s": 2.0}
    assert mod.parse_summary("INTERNALERROR> boom") == {}


def test_the_census_counts_finalization_from_the_fork_servers_children() -> None:
    mod = script("suite_time")
    server = {"pid": 10, "ppid": 1, "forked": False, "argv": ["/x/harness/launch/forkserver.py", "5"],
              "torch": True, "cpu": 2.0, "children_cpu": 1.0}
    kids = [{"pid": 11 + i, "ppid": 10, "forked": True, "argv": server["argv"], "torch": True, "cpu": 0.1,
             "children_cpu": 0.0} for i in range(3)]
    cli = {"pid": 20, "ppid": 1, "forked": False, "argv": ["/v/bin/lastcall", "run"], "torch": False,
           "cpu": 0.5, "children_cpu": 0.0}
    out = mod.summarise([server, *kids, cli])
    assert out["kinds"]["fork server"] == {"n": 1, "cpu_s": 2.0, "with_torch": 1}
    assert out["kinds"]["forked child"] == {"n": 3, "cpu_s": 0.3, "with_torch": 3}
    assert out["kinds"]["lastcall CLI"]["n"] == 1
    assert out["forked_children_finalization_cpu_s"] == 0.7  # 1.0 reaped, 0.3 of it before their atexit
