"""The stored findings on vLLM 0.32 (docs/findings/vllm-0.32-cpu) re-judged by today's checkers, in the default suite.

Each engine scenario run on real vLLM stored its history, snapshots and expect list under reports/; the
checkers are pure functions of those, so re-judging them (``lastcall report``) must still give every status
expected.yaml holds: a checker change that loses a finding on real vLLM's evidence fails here, without vLLM.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.engine.expected import differences, load_expected
from harness.errors import ConfigError
from harness.report.rejudge import report_history

FINDINGS = Path(__file__).resolve().parent.parent / "docs" / "findings" / "vllm-0.32-cpu"
EXPECTED = load_expected(FINDINGS / "expected.yaml")


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_the_stored_vllm_run_rejudged_gives_the_expected_outcome(scenario: str, tmp_path: Path) -> None:
    report_history(FINDINGS / "reports" / scenario / "history.jsonl", out=tmp_path)
    doc = json.loads((tmp_path / "verdicts.json").read_text())
    got = {v["checker"]: v["status"] for v in doc["verdicts"]}
    assert doc["variant"] == "vllm_engine"
    assert differences(got, EXPECTED[scenario]) == []


def test_expected_outcomes_are_checked_for_their_form(tmp_path: Path) -> None:
    bad = tmp_path / "expected.yaml"
    bad.write_text("engine-sigterm-idle:\n  checkers: {engine_tree_exits: fine}\n")
    with pytest.raises(ConfigError, match="engine-sigterm-idle: give checkers"):
        load_expected(bad)
    assert differences({"a": "ok"}, {"a": "violated", "b": "ok"}) == [
        "a: expected violated, got ok", "b: expected ok, got no verdict"]
