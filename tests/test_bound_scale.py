"""An engine target's clock (``bound_scale``, harness.timeouts.run_scale): the stand-in engine is judged against
a fifth of each bound an engine scenario states (its bounds are written for real vLLM), real vLLM against the
whole; a bad value is refused where the target loads; the scale a run was judged at is in its verdicts.json,
and ``lastcall report`` re-judges the run at it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.errors import ConfigError
from harness.report.rejudge import report_history
from harness.report.write import write_run
from harness.scenario import load
from harness.scenario.loader import expand
from harness.scenario.result import RunResult
from harness.scenario.runner import run_item
from harness.targets.api import check_target_object
from harness.targets.vllm_engine import STANDIN, STANDIN_BOUND_SCALE, STANDIN_VARIANTS, TARGET
from harness.timeouts import run_scale, scale

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "engine-sigterm-idle.yaml"


def test_the_run_scale_is_the_variable_times_the_targets_bound_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LASTCALL_TIMEOUT_SCALE", raising=False)
    assert run_scale(SimpleNamespace(name="plain")) == 1  # a target that declares none keeps its scenarios' bounds
    assert run_scale(TARGET) == 1  # real vLLM: the bounds as written
    assert run_scale(STANDIN) == STANDIN_BOUND_SCALE == 0.2
    assert {v.bound_scale for v in STANDIN_VARIANTS.values()} == {STANDIN_BOUND_SCALE}  # its bugs: the same clock
    monkeypatch.setenv("LASTCALL_TIMEOUT_SCALE", "3")
    assert run_scale(STANDIN) == pytest.approx(0.6) and run_scale(TARGET) == 3


@pytest.mark.parametrize("bad", [0, -1, 101, float("nan"), float("inf"), "fast", True, None])
def test_a_bound_scale_out_of_range_is_refused_naming_the_target(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"target 'mine': bound_scale must be a number in \(0, 100\]"):
        run_scale(SimpleNamespace(name="mine", bound_scale=bad))
    problems = check_target_object(dataclasses.replace(STANDIN, name="mine", bound_scale=bad))
    assert [p for p in problems if p.startswith("bound_scale is ")] == [f"bound_scale is {bad!r}, not a number in "
                                                                       "(0, 100]"]
    assert check_target_object(STANDIN) == []


def _verdict(result: RunResult, name: str) -> Any:
    return next(v for v in result.verdicts if v.checker == name)


@pytest.mark.slow
def test_a_planted_hang_is_told_at_a_fifth_of_the_bound_and_the_correct_stand_in_meets_it() -> None:
    item = expand(load(SCENARIO))[0]  # wait_gone {timeout: 5s}, engine_tree_exits {within: 5s}
    planted = run_item(item, variant="engine_ignores_sigterm")
    assert planted.scale == pytest.approx(STANDIN_BOUND_SCALE * scale())
    wait = next(e for e in planted.events if e.kind == "step_started" and e.data.get("kind") == "wait_gone")
    assert wait.data["timeout"] == pytest.approx(5 * planted.scale)  # the step waited a fifth of its 5 s
    tree = _verdict(planted, "engine_tree_exits")
    assert tree.status == "violated" and "survived term" in tree.message
    good = run_item(item)
    assert good.passed, [v.to_dict() for v in good.verdicts if not v.passes]
    gone = next(e for e in good.events if e.kind == "step_returned" and e.data.get("kind") == "wait_gone")
    assert gone.data["value"]["gone"] and gone.data["value"]["seconds"] <= 5 * good.scale


def test_the_report_records_its_scale_and_is_rejudged_at_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    result = run_item(expand(load(SCENARIO))[0])
    assert result.passed
    page = write_run(result, tmp_path)
    assert page is not None
    run_dir = page.parent if page.is_file() else page
    verdicts = run_dir / "verdicts.json"
    meta = json.loads(verdicts.read_text())
    assert meta["scale"] == pytest.approx(result.scale)
    history = run_dir / "history.jsonl"
    assert report_history(history, out=tmp_path / "again") == 0
    # the same history judged at a scale so small that no exit meets it: the scale read back is the one used
    meta["scale"] = 1e-9
    verdicts.write_text(json.dumps(meta))
    assert report_history(history, out=tmp_path / "tiny") == 1
    assert "VIOLATED engine_tree_exits" in capsys.readouterr().out
    # a report older than its scale was judged at 1 (LASTCALL_TIMEOUT_SCALE's default): it is re-judged so
    for old in (None, "fast", -1.0):
        if old is None:
            del meta["scale"]
        else:
            meta["scale"] = old
        verdicts.write_text(json.dumps(meta))
        assert report_history(history, out=tmp_path / "old") == 0
