"""calls_bounded (harness.checkers.outcome) on literal histories: each engine call ends, answered or failed,
within a bound of its start; one that took longer, or never returned, is a violation naming it."""

from __future__ import annotations

from lc_helpers import check, harness_events

from harness.history import Event

H = harness_events(1)
S = 1_000_000_000  # ns


def call(step: str, start_s: float, took_s: float | None, ok: bool = True) -> list[Event]:
    began = [H("step_started", int(start_s * S), step=step, kind="call", category="call")]
    if took_s is None:
        return began
    return [*began, H("step_returned", int((start_s + took_s) * S), step=step, kind="call", category="call", ok=ok,
                      value=[0] if ok else None, error="" if ok else "no reply")]


def test_calls_bounded_ok_when_answered_or_failed_within_the_bound() -> None:
    v = check("calls_bounded", call("m1", 1, 0.3, ok=False) + call("m2", 2, 0.1), {"within": 1.0})
    assert (v.status, v.message) == ("ok", "2 call(s) ended, the slowest in 300 ms")


def test_calls_bounded_violated_past_the_bound_even_when_answered() -> None:
    v = check("calls_bounded", call("m1", 1, 0.3) + call("m2", 2, 1.5), {"within": 1.0})
    assert (v.status, v.message) == ("violated", "m2 took 1.500s > 1s (answered)")
    assert [(e.kind, e.data["step"]) for e in v.evidence] == [("step_started", "m2"), ("step_returned", "m2")]
    # only the named calls are judged
    assert check("calls_bounded", call("m1", 1, 0.3) + call("m2", 2, 1.5), {"within": 1.0, "calls": ["m1"]}).status \
        == "ok"


def test_a_call_that_never_returned_is_a_violation() -> None:
    v = check("calls_bounded", call("m1", 1, 0.3) + call("m2", 2, None))
    assert (v.status, v.message) == ("violated", "m2 never returned")


def test_no_call_is_unknown() -> None:
    assert check("calls_bounded", []).message == "no call step returned in the history"
    v = check("calls_bounded", call("m1", 1, 0.3), {"calls": ["m9"]})
    assert (v.status, v.message) == ("unknown", "no call step m9 returned in the history")
