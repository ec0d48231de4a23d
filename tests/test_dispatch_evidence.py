"""The checkers of late dispatches say unknown, not ok, on a history whose listener answered requests but
recorded no dispatch_started (serving.py::ServingLoop._dispatch_ready::negate:c5de3b, the ``if self._on:`` guard
negated: the listener's
other events still prove it was observed, so the evidence rule alone let both pass on nothing)."""

from __future__ import annotations

from typing import Any

from lc_helpers import check, harness_events

from harness.history import Event

W, HARNESS, L0 = 10, 1, "pp0/rank0"


def LE(kind: str, t: int, /, **data: Any) -> Event:
    return Event(t, W, "worker", L0, "MainThread", kind, {"listener": L0, **data})


H = harness_events(HARNESS)


def served(t: int) -> Event:
    return H("step_returned", t, step="q1", kind="send", category="request", fault="none", ok=True,
             value={"status": "ok", "error_type": ""})


def unrecorded(*more: Event) -> list[Event]:
    """The 507 mutant's history: a request answered, its dispatch finished, no dispatch_started; a stop."""
    return [LE("listener_started", 10), LE("frame_completed", 40, conn=1), LE("dispatch_finished", 60, conn=1),
            served(70), LE("stop_started", 100), LE("stop_returned", 200, ok=True), *more]


def test_no_late_dispatch_unknown_when_the_listener_records_no_dispatch() -> None:
    v = check("no_late_dispatch", unrecorded())
    assert v.status == "unknown" and "recorded no dispatch_started, yet 1 request(s) got a reply" in v.message


def test_no_dispatch_after_teardown_unknown_when_the_listener_records_no_dispatch() -> None:
    v = check("no_dispatch_after_teardown", unrecorded(Event(220, W, "worker", L0, "MainThread",
                                                            "allocator_torn_down", {"worker": L0})))
    assert v.status == "unknown" and "1 dispatch(es) finished" in v.message


def test_a_run_that_dispatched_nothing_is_still_judged() -> None:
    """No request answered and none finished: nothing was dispatched, and that is an ok, not an unknown."""
    events = [LE("listener_started", 10), H("step_returned", 50, step="q1", kind="send", category="request",
                                            fault="none", ok=False, value={"status": "error", "error_type": "x"}),
              LE("stop_started", 100), LE("stop_returned", 200, ok=True)]
    assert check("no_late_dispatch", events).status == "ok"
