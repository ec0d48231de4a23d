"""The stored findings on vLLM's NIXL listener (docs/findings/vllm-nixl/X.Y.Z/) re-judged by today's checkers, in
the default suite.

Each handshake scenario run on a vLLM release stored its history, snapshots and expect list under that release's
reports/; the checkers are pure functions of those, so re-judging every stored run (``lastcall report``) must give
exactly what the release's expected.yaml holds, k of N included: a checker change that loses (or invents) a
finding on real vLLM's evidence fails here, without vLLM.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from harness.engine.expected import Expected, Rate, load_expected, run_statuses, stored_differences
from harness.engine.releases import VLLM_NIXL, releases
from harness.report.rejudge import report_history

RELEASES = {version: d for version, d in releases(VLLM_NIXL)}


def rejudged(reports: Path, out: Path) -> tuple[dict[str, list[dict[str, str]]], dict[str, list[str]]]:
    """Every run stored under ``reports`` re-judged: scenario -> each run's verdicts, and each run's outcome."""
    verdicts: dict[str, list[dict[str, str]]] = defaultdict(list)
    outcomes: dict[str, list[str]] = defaultdict(list)
    for i, history in enumerate(sorted(reports.glob("*/history.jsonl"))):
        report_history(history, out=out / str(i))
        doc = json.loads((out / str(i) / "verdicts.json").read_text())
        assert doc["variant"] == "vllm_nixl", history
        verdicts[doc["scenario"]].append(run_statuses(doc["verdicts"]))
        outcomes[doc["scenario"]].append(doc["outcome"]["status"])
    return verdicts, outcomes


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_each_release_s_stored_runs_rejudged_give_its_expected_yaml(version: str, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    want = load_expected(RELEASES[version] / "expected.yaml")
    verdicts, outcomes = rejudged(RELEASES[version] / "reports", tmp_path)
    capsys.readouterr()  # report_history prints each run's verdicts
    assert sorted(verdicts) == sorted(want), "a stored scenario without an expectation, or one never stored"
    problems = {name: stored_differences(verdicts[name], outcomes[name], w) for name, w in want.items()}
    assert {name: p for name, p in problems.items() if p} == {}


def test_the_three_releases_are_stored() -> None:
    assert sorted(RELEASES) == ["0.11.1", "0.33.0", "0.34.0"]


def test_a_stored_run_that_no_longer_matches_is_reported() -> None:
    """The comparison fires: one run too few, a rate's count off by one, a fixed status broken, an outcome."""
    want = Expected(3, "ok", {"a": "violated", "b": Rate("violated", 1, 3)})
    runs = [{"a": "violated", "b": "violated"}, {"a": "violated", "b": "ok"}, {"a": "violated", "b": "ok"}]
    assert stored_differences(runs, ["ok"] * 3, want) == []
    assert stored_differences(runs[:2], ["ok"] * 2, want) == ["runs: expected 3, found 2"]
    twice = [runs[0], runs[0], runs[2]]
    assert stored_differences(twice, ["ok"] * 3, want) == ["b: expected violated in 1 of 3 runs, got ok 1, violated 2"]
    lost = [runs[0], runs[1], {"b": "ok"}]
    assert stored_differences(lost, ["ok", "ok", "hung"], want) == [
        "run 3: outcome: expected ok, got hung",
        "a: expected violated in every run, got violated, violated, no verdict"]


def test_a_checker_asked_of_several_steps_counts_once_per_run_at_its_worst() -> None:
    verdicts = [{"checker": "stop_latency", "status": "ok"}, {"checker": "stop_latency", "status": "violated"},
                {"checker": "stop_latency", "status": "ok"}, {"checker": "threads", "status": "unknown"},
                {"checker": "threads", "status": "ok"}]
    assert run_statuses(verdicts) == {"stop_latency": "violated", "threads": "unknown"}


def test_tally_counts_a_release_s_nixl_runs_with_variant(capsys: pytest.CaptureFixture[str]) -> None:
    from harness.engine.expected import main

    reports = str(RELEASES["0.34.0"] / "reports")
    assert main(["tally", reports]) == 0 and capsys.readouterr().out == ""  # the engine's variant by default
    assert main(["tally", "--variant", "vllm_nixl", reports]) == 0
    assert "  stop_latency: violated 5 of 5" in capsys.readouterr().out
    assert main(["tally", "--variant"]) == 2
    assert "usage:" in capsys.readouterr().err
