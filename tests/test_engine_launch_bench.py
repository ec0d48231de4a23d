"""benchmarks/engine_launch.py --from-reports: the launches of stored engine runs, by launcher, and the launch per
scenario run, amortised, from the runs' own events."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_docs_tables import script


def _run(d: Path, name: str, scenario: str, events: list[tuple[str, dict]], tp: int = 1) -> None:
    run = d / name
    run.mkdir(parents=True)
    (run / "verdicts.json").write_text(json.dumps({"variant": "vllm_engine", "scenario": scenario,
                                                   "params": {"tp": tp}}))
    (run / "history.jsonl").write_text("".join(json.dumps({"kind": k, "data": data}) + "\n" for k, data in events))


def _ready(s: float, pid: int = 0) -> tuple[str, dict]:
    return ("engine_ready", {"ready_s": s, "members": [1, 2, 3, 4], "pid": pid})


def test_launches_are_grouped_by_launcher_and_summed_over_the_runs_that_became_ready(tmp_path: Path) -> None:
    bench = script("engine_launch")
    zyg = {"launcher": "zygote"}
    _run(tmp_path / "z", "a", "restart", [("engine_launched", zyg), _ready(16.0), ("engine_launched", zyg),
                                           _ready(12.0)])
    _run(tmp_path / "z", "b", "idle", [("engine_launched", zyg), _ready(11.0)])
    _run(tmp_path / "z", "c", "held-port", [("engine_launched", zyg), ("engine_start_failed", {"error": "hung"})])
    _run(tmp_path / "old", "d", "idle", [("engine_launched", {}), _ready(18.0)])  # before launchers: exec'd
    rows, amortised = bench.from_reports([tmp_path / "z", tmp_path / "old"])
    by = {(r["launcher"], r["tp"]): r for r in rows}
    assert by[("zygote", 1)]["failed"] == 1 and len(by[("zygote", 1)]["runs"]) == 4
    assert by[("zygote", 1)]["ready_median_s"] == 12.0 and by[("exec", 1)]["ready_median_s"] == 18.0
    assert {(a["launcher"], a["mode"], a["runs"], a["launch_s"], a["per_run_s"], a["met"]) for a in amortised} == {
        ("zygote", "alone", 2, 39.0, 19.5, False), ("exec", "alone", 1, 18.0, 18.0, False)}  # a hung start: no launch
    text = bench.table({"date": "d", "machine": "m", "cpus": 2, "source": "s", "launch_bound_s": 60.0,
                        "targets": rows, "amortised": amortised})
    assert "| vllm_engine | zygote | alone | 2 | 39.0 s | 19.5 s | no (missed) |" in text


def test_a_chained_scenario_counts_as_a_run_and_its_handed_launch_once(tmp_path: Path) -> None:
    """A chained run's receiver carries the launch events of the engine it was handed (its window,
    harness.scenario.chain): that launch counts once, in the giver that made it; the receiver counts as a run."""
    bench = script("engine_launch")
    zyg = {"launcher": "zygote"}
    began = ("chain_item_began", {"index": 0})
    _run(tmp_path / "ch", "a-1", "idle", [began, ("engine_launched", zyg), _ready(12.0, 1), ("engine_launched", zyg),
                                          _ready(11.0, 2)])
    _run(tmp_path / "ch", "a-2", "kill", [("engine_launched", zyg), _ready(11.0, 2), began,
                                          ("engine_handed", {"pid": 2, "launch": 1})])
    rows, amortised = bench.from_reports([tmp_path / "ch"])
    assert len(rows[0]["runs"]) == 2  # two launches, not three
    assert [(a["mode"], a["runs"], a["launch_s"], a["per_run_s"], a["met"]) for a in amortised] == [
        ("chained", 2, 23.0, 11.5, True)]
