"""Validation errors in plain located sentences: never pydantic's own phrasing."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.checkers.base import RunRecord, judge
from harness.plainerrors import plain
from harness.scenario import load
from harness.scenario.errors import ScenarioError

PYDANTIC_PHRASES = ("Input should be", "For further information visit", "errors.pydantic.dev", "validation error",
                    "Field required", "Extra inputs are not permitted", "[type=")
SCENARIO = Path(__file__).parent.parent / "scenarios" / "stalled-read-is-cancelled.yaml"


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timeout: float = Field(1.0, gt=0)
    name: str = Field("x", max_length=4)


class Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["drain", "cut"]
    count: int = 1
    steps: list[Step] = []


@pytest.mark.parametrize(("data", "line"), [
    ({}, "(top level): missing required key 'mode'"),
    ({"mode": "cut", "colour": 1}, "(top level): unknown key 'colour'"),
    ({"mode": "cut", "steps": [{}, {}, {}, {"timeout": -1}]}, "steps[3].timeout: must be greater than 0, got -1"),
    ({"mode": "cutt"}, "mode: must be one of 'drain' or 'cut', got 'cutt'"),
    ({"mode": "cut", "count": "many"}, "count: must be a whole number, got 'many'"),
    ({"mode": "cut", "steps": [{"timeout": "soon"}]}, "steps[0].timeout: must be a number, got 'soon'"),
    ({"mode": "cut", "steps": [{"name": "toolong"}]}, "steps[0].name: must be at most 4 characters long, got 7"),
    ({"mode": "cut", "steps": [{"steps": 1}]}, "steps[0]: unknown key 'steps'"),
])
def test_each_common_error_is_one_plain_located_sentence(data: dict[str, object], line: str) -> None:
    with pytest.raises(ValidationError) as info:
        Doc.model_validate(data)
    lines = plain(info.value)
    assert lines == [line]
    assert not any(p in text for text in lines for p in PYDANTIC_PHRASES)


@pytest.mark.parametrize("params", [{"within": -1}, {"withn": 1}, {"within": "soon"}])
def test_a_checkers_bad_parameters_are_said_plainly(params: dict[str, object]) -> None:
    message = judge("stop_latency", RunRecord(()), params).message
    assert message.startswith("bad parameters: ")
    assert not any(p in message for p in PYDANTIC_PHRASES), message


@pytest.mark.parametrize(("old", "new"), [
    ("name: stalled-read-is-cancelled", "name: stalled-read-is-cancelled\ncolour: red"),
    ("catches:", "catchez:"),
    ("name: stalled-read-is-cancelled", "name: " + "n" * 300),
    ("name: stalled-read-is-cancelled", "name: stalled-read-is-cancelled\ndeadline: -1"),
    ("name: stalled-read-is-cancelled", "name: stalled-read-is-cancelled\ndeadline: soon"),
    ("name: stalled-read-is-cancelled", "name: stalled-read-is-cancelled\nrepeat: many"),
])
def test_a_scenario_files_errors_are_said_plainly(tmp_path: Path, old: str, new: str) -> None:
    text = SCENARIO.read_text()
    assert old in text
    (tmp_path / "bad.yaml").write_text(text.replace(old, new, 1))
    with pytest.raises(ScenarioError) as info:
        load(tmp_path / "bad.yaml")
    message = str(info.value) + "".join(str(e) for e in getattr(info.value, "errors", ()))
    assert "bad.yaml:" in message
    assert not any(p in message for p in PYDANTIC_PHRASES), message
