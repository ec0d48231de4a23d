"""benchmarks/suite_time.py: its table in docs/running.md is its output (re-rendered here from the committed
JSON), and what it reads from pytest and from a census is read right."""

from __future__ import annotations

import json
import os
import signal
import statistics

import pytest
from lc_helpers import ROOT

from harness.scenario import table
from tests.test_docs_tables import script


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


def _report(nodeid: str, when: str, s: float, start: float, worker: str, outcome: str = "passed",
            slow: bool = False) -> dict[str, object]:
    return {"nodeid": nodeid, "when": when, "outcome": outcome, "duration": s, "start": start, "stop": start + s,
            "worker": worker, "slow": slow}


def test_the_profile_sums_phases_per_test_and_tests_per_file_and_sees_each_workers_start_and_tail() -> None:
    mod = script("suite_profile")
    reports = [_report("tests/test_a.py::t1", "setup", 0.5, 102.0, "gw0"),
               _report("tests/test_a.py::t1", "call", 2.0, 102.5, "gw0"),
               _report("tests/test_a.py::t1", "teardown", 0.5, 104.5, "gw0"),
               _report("tests/test_a.py::t2", "call", 1.0, 105.0, "gw0", outcome="failed"),
               _report("scenarios/s.yaml::s[tp1]", "setup", 0.0, 101.0, "gw1", outcome="skipped"),
               _report("tests/test_b.py::t3", "call", 5.0, 101.0, "gw1")]
    out = mod.analyse({"wall_s": 12.0, "session": {"start": 100.0, "finish": 110.0}, "reports": reports})
    assert out["tests"] == 4 and out["test_s"] == 9.0
    assert out["workers"] == {"gw0": {"tests": 2, "busy_s": 4.0, "start_up_s": 2.0, "idle_tail_s": 4.0},
                              "gw1": {"tests": 2, "busy_s": 5.0, "start_up_s": 1.0, "idle_tail_s": 4.0}}
    assert [(f["file"], f["tests"], f["s"]) for f in out["files"]] == [
        ("tests/test_b.py", 1, 5.0), ("tests/test_a.py", 2, 4.0), ("scenarios/s.yaml", 1, 0.0)]
    assert out["files"][1]["max"] == "tests/test_a.py::t1" and out["files"][1]["share"] == round(4 / 9, 4)
    assert {t["test"]: t["outcome"] for t in out["top"]} == {
        "tests/test_b.py::t3": "passed", "tests/test_a.py::t1": "passed", "tests/test_a.py::t2": "failed",
        "scenarios/s.yaml::s[tp1]": "skipped"}
    rows = mod.slow_rows(["tests/test_a.py::t1", "tests/test_a.py::t9", "tests/test_c.py::x"],
                         {"tests/test_a.py::t1": 3.0}, {"tests/test_c.py": "about 7 min in CI"})
    assert rows == [{"file": "tests/test_a.py", "tests": 2, "measured": 1, "s": 3.0, "max_s": 3.0, "known": ""},
                    {"file": "tests/test_c.py", "tests": 1, "measured": 0, "s": 0.0, "max_s": 0.0,
                     "known": "about 7 min in CI"}]


def test_the_suite_profile_tables_are_rendered_from_their_data() -> None:
    mod = script("suite_profile")
    data = json.loads((ROOT / "docs" / "data" / "suite_profile.json").read_text())
    text = (ROOT / "docs" / "suite-profile.md").read_text()
    begin, end = mod.docpage.markers(mod.NAME)
    assert text.count(begin) == 1 and text.count(end) == 1
    assert table.between_markers(text, begin, end) == mod.table(data), (
        "docs/suite-profile.md differs from docs/data/suite_profile.json: rerun "
        "`python benchmarks/suite_profile.py --write`, do not edit the tables")


def test_two_profiles_are_compared_like_for_like_only() -> None:
    mod = script("suite_profile")
    before = {"wall_s": 10.0, "tests": 4, "phases": {"setup": 1.0, "call": 8.0, "teardown": 1.0},
              "files": [{"file": "a.py", "tests": 2, "s": 4.0}, {"file": "b.py", "tests": 1, "s": 2.0},
                        {"file": "c.py", "tests": 1, "s": 3.0}, {"file": "gone.py", "tests": 1, "s": 1.0}]}
    after = {"wall_s": 8.0, "tests": 5, "phases": {"setup": 1.0, "call": 6.0, "teardown": 0.5},
             "files": [{"file": "a.py", "tests": 2, "s": 2.0}, {"file": "b.py", "tests": 2, "s": 1.0},
                       {"file": "c.py", "tests": 1, "s": 0.5}, {"file": "new.py", "tests": 1, "s": 9.0}]}
    out = mod.compare(before, after, unlike=["c.py"])
    assert [(r["file"], r["before_s"], r["after_s"], r["ratio"]) for r in out["files"]] == [("a.py", 4.0, 2.0, 0.5)]
    assert (out["same_files"], out["same_before_s"], out["same_after_s"], out["same_ratio"]) == (1, 4.0, 2.0, 0.5)
    assert out["unlike"] == ["c.py"] and out["wall"] == {"before": 10.0, "after": 8.0}


def test_the_readmes_targets_table_is_rendered_from_the_measurements() -> None:
    """The README's table of the measured speed targets is benchmarks/targets_block.py's rendering of the JSON
    that suite_time.py and ipc_roundtrip.py commit (either script's --write rewrites it)."""
    mod = script("targets_block")
    begin, end = mod.docpage.markers(mod.NAME)
    text = (ROOT / "README.md").read_text()
    assert text.count(begin) == 1 and text.count(end) == 1
    assert table.between_markers(text, begin, end) == mod.table(), (
        "README.md's targets table differs from docs/data/: rerun `python benchmarks/targets_block.py`")
    suite = json.loads((ROOT / "docs" / "data" / "suite_time.json").read_text())
    engine = json.loads((ROOT / "docs" / "data" / "engine_launch.json").read_text())
    rendered = mod.table()
    # a row per selection, stop() with 256, and real vLLM's engine library once measured
    assert rendered.count("\n| ") == len(suite["selections"]) + 1 + bool(engine.get("library"))
    assert "median of 3" in rendered and "stop() with 256 idle connections parked" in rendered


def test_the_engine_library_row_says_met_only_within_ci_s_bound() -> None:
    mod = script("targets_block")
    lib = {"wall_s": 1900.0, "tests": 18, "date": "2026-12-07"}
    rows = mod.table(suite={}, ipc={}, engine={"library": lib}).splitlines()
    assert rows[-3].startswith("| real vLLM: the engine library (`./dev vllm-engine-test`), exec'd, <= 30 min 00 s | "
                               "31 min 40 s (18 tests, 2026-12-07)") and "**no (missed)**" in rows[-3]
    assert rows[-1].startswith("Measured: date 2026-12-07 · ")  # the provenance of the rows shown, under them
    met = mod.table(suite={}, ipc={}, engine={"library": dict(lib, wall_s=600.0)}).splitlines()[-3]
    assert "10 min 00 s" in met and "| yes |" in met
    # a launch forked from a zygote is no figure of what users run: its old amortised rows are not shown
    assert len(mod.table(suite={}, ipc={}, engine={"amortised": [{"per_run_s": 12.0}]}).splitlines()) == 4


def test_the_stops_floor_is_shown_beside_its_profile_once_measured() -> None:
    mod = script("targets_block")
    run = {"stop_median_ms": {"256": 1.5}, "stop_cpu_us": {"256": {"caller": 400.0, "thread": 800.0}},
           "stop_reps": 25, "date": "2026-12-01"}
    assert "floor" not in mod.table(ipc={"runs": [run]}, engine={})  # a run before the floor was measured
    run["stop_floor_us"] = {"256": {"closes": 600.0, "teardown": 200.0}}
    row = mod.table(ipc={"runs": [run]}, engine={}).splitlines()[-3]
    assert "1.50 ms" in row and "**no (missed)**" in row
    assert "its floor, the kernel and the file system alone in one thread: 0.80 ms (600 us of closes, 200 us" in row


def test_a_row_kept_by_append_keeps_the_commit_that_measured_it() -> None:
    """--append replaces only this run's selections; a kept row carries its own run's commit and date, which the
    page's table and the README's row name (the file's top level is the newest run's)."""
    mod, block = script("suite_time"), script("targets_block")
    row = {"runs": [{"wall_s": 164.0, "cpu_s": 150.0, "rc": 0, "counts": {"passed": 9}}], "median_wall_s": 164.0,
           "median_cpu_s": 150.0, "target_s": 90.0}
    old = {"date": "2026-12-04", "commit": "aaaaaaa", "where": "clean clone", "selections": {"not-slow": row}}
    kept = mod.stamped(row, old)
    assert (kept["commit"], kept["date"]) == ("aaaaaaa", "2026-12-04")
    assert mod.stamped(kept, {"commit": "bbbbbbb", "date": "2026-12-05"})["commit"] == "aaaaaaa"  # kept again
    new = {"date": "2026-12-05", "commit": "bbbbbbb", "where": "clean clone", "machine": "m", "python": "3.11",
           "selections": {"not-slow": kept, "default": dict(row, target_s=240.0)}}
    text = mod.table(new)
    assert "The `-m not slow` row is an earlier run's, kept: clean clone of aaaaaaa, 2026-12-04." in text
    assert "`(default)` row" not in text
    readme = block.table(suite=new, ipc={}, engine={})
    assert "(clean clone of aaaaaaa, 2026-12-04)" in readme and "(clean clone of bbbbbbb, 2026-12-05)" in readme


def test_a_sigterm_during_a_measurement_removes_its_clone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clean clone lives in a temp directory that a finally block removes: a SIGTERM (a stopped benchmark)
    reaches it as SystemExit, instead of ending the process with the clone left behind."""
    mod = script("suite_time")
    made: list[str] = []
    real = mod.tempfile.mkdtemp

    def mkdtemp(*a: object, **k: object) -> str:
        made.append(real(*a, **k))  # type: ignore[arg-type]
        return made[-1]

    def clone(tree: object, where: object) -> str:
        os.kill(os.getpid(), signal.SIGTERM)  # the benchmark is stopped while it clones
        raise AssertionError("the SIGTERM did not end the measurement")

    monkeypatch.setattr(mod.tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setattr(mod, "clone", clone)
    old = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as info:
            mod.main(["--runs", "1", "--select", "default"])
    finally:
        signal.signal(signal.SIGTERM, old)
    assert info.value.code == 128 + signal.SIGTERM
    assert made and not any(os.path.exists(p) for p in made)
