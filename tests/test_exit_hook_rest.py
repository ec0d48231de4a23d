"""``exit_hook_stops_the_rest`` and ``start_listener: {keep: true}``: a worker's exit hook tells every listener to
stop before it waits for any, so one that cannot drain does not use up the one budget of the others (the
mutation survivor harness/reference/registry.py::Registry.exit_hook::remove:5d1c0a, which no scenario noticed: no
worker ever had a
second listener registered).  Proven on synthetic histories, on the reference (quiet), at load time, and on a
planted registry modelled on the mutant (tests/lc_exit_hook_one_by_one.py) through the library's scenario."""

from __future__ import annotations

from pathlib import Path

import pytest
from lc_helpers import refused_at_load

from harness.checkers import RunRecord, judge
from harness.history import Event
from harness.scenario import runner
from harness.scenario.loader import expand, load

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "exit-hook-stops-the-others-beside-a-stuck-one.yaml"
PLANTED = "tests.lc_exit_hook_one_by_one:ONE_BY_ONE"
W, L0 = 10, "pp0/rank0"


def _e(kind: str, t: int, **data: object) -> Event:
    return Event(t, W, "worker", L0, "MainThread", kind, data)


def _verdict(*events: Event) -> tuple[str, str]:
    v = judge("exit_hook_stops_the_rest", RunRecord(tuple(events), {}), None)
    return v.status, v.message


def test_exit_hook_stops_the_rest_ok_and_violated_by_what_is_left() -> None:
    """Only listeners with a handler in flight may be left registered."""
    parked = (_e("dispatch_started", 1, listener=L0, conn=2, cmd="map_to_kv_tensors"),)
    hook = _e("exit_hook_started", 2, listeners=2, budget=0.5)
    assert _verdict(*parked, hook, _e("exit_hook_finished", 3, ok=False, left=1))[0] == "ok"
    status, message = _verdict(*parked, hook, _e("exit_hook_finished", 3, ok=False, left=2))
    assert status == "violated" and "2 listener(s) at the hook, 1 with a handler in flight, 2 left" in message
    finished = _e("dispatch_finished", 1, listener=L0, conn=2, cmd="map_to_kv_tensors", status="success")
    assert _verdict(*parked, finished, hook, _e("exit_hook_finished", 3, ok=False, left=1))[0] == "violated"
    assert _verdict()[0] == "unknown"


def test_exit_hook_stops_the_rest_violated_by_a_stop_begun_after_a_drain_ended() -> None:
    """The order the hook keeps (every stop begun, then each waited for), whatever each stop then returned."""
    parked = _e("dispatch_started", 1, listener=L0, conn=2, cmd="map_to_kv_tensors")
    hook, stops = _e("exit_hook_started", 2, listeners=2, budget=0.5), [_e("stop_started", 3, listener=L0),
                                                                        _e("stop_started", 4, listener=L0)]
    waited = _e("drain_finished", 5, listener=L0, ok=False)
    end = _e("exit_hook_finished", 7, ok=False, left=1)
    assert _verdict(parked, hook, *stops, waited, end)[0] == "ok"
    status, message = _verdict(parked, hook, stops[0], waited, _e("stop_started", 6, listener=L0), end)
    assert status == "violated" and "1 stop(s) begun only after a drain ended" in message, message


@pytest.mark.parametrize(("line", "says"), [
    ("{ipc: kept, keep: true}", "keep: a kept listener is started and left"),  # stops defaults to 1
    ("{ipc: kept, keep: true, stops: 0, again: true}", "keep: a kept listener is started and left"),
    ("{keep: true, stops: 0}", "keep: give it an ipc of its own"),
])
def test_keep_is_checked_at_load_time(line: str, says: str) -> None:
    refused_at_load(f"start_listener: {line}", says, expect="stop_result")


def _hook(result: runner.RunResult) -> tuple[int, int]:
    (start,) = [e for e in result.events if e.kind == "exit_hook_started"]
    (end,) = [e for e in result.events if e.kind == "exit_hook_finished"]
    return int(start.data["listeners"]), int(end.data["left"])


def test_the_reference_stops_the_idle_listener_beside_a_stuck_one() -> None:
    result = runner.run_item(expand(load(str(SCENARIO)))[0])
    assert result.passed, [str(v) for v in result.violated]
    assert _hook(result) == (2, 1)  # both registered at the hook; only the stuck one left
    registered = [e.data.get("ipc") for e in result.events if e.kind == "listener_registered"]
    assert len(registered) == 2 and "kept" in registered, registered  # the worker's own, and the kept one
    unregistered = [e.data for e in result.events if e.kind == "listener_unregistered"]
    assert [d.get("ipc") for d in unregistered] == ["kept"], unregistered  # the exit hook's stop of the idle one


def test_the_library_catches_an_exit_hook_that_stops_its_listeners_one_after_another() -> None:
    result = runner.run_item(expand(load(str(SCENARIO)))[0], variant=PLANTED)
    assert result.step_error in (None, ""), result.step_error
    assert [v.checker for v in result.violated] == ["exit_hook_stops_the_rest"], [str(v) for v in result.violated]
    (v,) = result.violated
    assert "1 stop(s) begun only after a drain ended" in v.message, v.message  # whatever the late stop returned
    assert _hook(result)[0] == 2
