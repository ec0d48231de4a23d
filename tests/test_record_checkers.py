"""The checkers that judge what a run records of a stop outside its own steps: an exit hook's record
(exit_hook_reports), a stop from a handler (handler_stop_refused) and a handshake request that waited with the
stop (no_serving_after_stop), each on the smallest history that makes it ok, violated, and unknown."""

from __future__ import annotations

from typing import Any

from harness.checkers import RunRecord, judge
from harness.history import Event


def _e(kind: str, t: int, /, role: str = "worker", **data: Any) -> Event:
    return Event(t, 7, role, "0", "MainThread", kind, data)


def test_exit_hook_reports_ok() -> None:
    run = RunRecord((_e("exit_hook_started", 1, listeners=1, budget=1.0), _e("exit_hook_finished", 2, ok=False, left=1),
                     _e("exit_hook_finished", 3, ok=True, left=0)), {})
    assert judge("exit_hook_reports", run).status == "ok"
    assert judge("exit_hook_reports", RunRecord((_e("exit_hook_started", 1, listeners=0, budget=1.0),), {})).status \
        == "unknown"


def test_exit_hook_reports_violated() -> None:  # exit_hook_says_ok: a listener left, and the hook says ok
    v = judge("exit_hook_reports", RunRecord((_e("exit_hook_finished", 2, ok=True, left=1),), {}))
    assert v.status == "violated" and "1 left" in v.message


def test_handler_stop_refused_ok() -> None:
    run = RunRecord((_e("stop_from_handler_returned", 1, role="harness", ok=False, seconds=0.001),), {})
    assert judge("handler_stop_refused", run).status == "ok"
    assert judge("handler_stop_refused", RunRecord((), {})).status == "unknown"


def test_handler_stop_refused_violated() -> None:  # stop_from_handler_says_true; a stop that returns nothing too
    for said in (True, None):
        run = RunRecord((_e("stop_from_handler_returned", 1, role="harness", ok=said, seconds=0.001),), {})
        v = judge("handler_stop_refused", run)
        assert v.status == "violated" and f"returned {said!r}" in v.message


def _handshake(served: bool) -> tuple[Event, ...]:
    return (_e("handshake_listener_started", 1, role="engine", host="127.0.0.1", port=5),
            _e("stop_started", 2, role="engine", host="127.0.0.1", port=5),
            *((_e("handshake_served", 3, role="engine", pp=0, tp=0),) if served else ()),
            _e("step_returned", 4, role="harness", step="h1", kind="handshake", category="request", ok=served,
               **({"value": {"pp": 0}} if served else {"error": "timed out"})))


def test_no_serving_after_stop_ok() -> None:
    assert judge("no_serving_after_stop", RunRecord(_handshake(False), {}), {"request": "h1"}).status == "ok"
    before = RunRecord((_handshake(True)[0], _handshake(True)[-1]), {})  # returned with no stop before it
    assert judge("no_serving_after_stop", before, {"request": "h1"}).status == "unknown"


def test_no_serving_after_stop_violated() -> None:  # serves_after_stop
    v = judge("no_serving_after_stop", RunRecord(_handshake(True), {}), {"request": "h1"})
    assert v.status == "violated" and "after the listener's stop began" in v.message
