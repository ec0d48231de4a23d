"""``close_reasons`` also holds the listener to closing a connection once (the mutation survivor
harness/reference/serving.py::ServingLoop._close::remove:def028, which no scenario noticed: ``_close`` without its
return for a
connection already closed), and ``send: {hang_up: true}`` makes the one path that closes twice: a malformed
frame whose client is gone before the listener, busy in the backend, reads it, so the reply fails (a close),
then the lost framing closes it again.  Proven on synthetic histories (a restarted listener numbers its
connections from 1 again: not a second close), on the reference (quiet), at load time, and on a planted bug
modelled on the mutant (tests/lc_close_twice_target.py) through the library's scenario that uses it."""

from __future__ import annotations

from pathlib import Path

import pytest
from lc_helpers import refused_at_load

from harness.checkers import RunRecord, judge
from harness.history import Event
from harness.scenario import runner
from harness.scenario.loader import expand, load
from harness.targets.fetch import cached_source

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "the-listener-records-what-happened.yaml"
PLANTED = "reference@tests.lc_close_twice_target:ClosesTwice"
W, L0 = 10, "pp0/rank0"


def _le(kind: str, t: int, **data: object) -> Event:
    return Event(t, W, "worker", L0, f"lastcall-listener-{L0}", kind, {"listener": L0, **data})


def _close_reasons(*events: Event) -> tuple[str, str]:
    v = judge("close_reasons", RunRecord(tuple(events), {}), None)
    return v.status, v.message


def test_a_connection_recorded_closed_twice_is_a_violation_but_a_restarted_listeners_is_not() -> None:
    start, closed = _le("listener_started", 1, path="p"), _le("connection_closed", 2, conn=1, why="peer closed")
    assert _close_reasons(start, closed)[0] == "ok"
    status, message = _close_reasons(start, closed, _le("connection_closed", 3, conn=1, why="framing lost"))
    assert status == "violated" and "conn 1 of pp0/rank0 recorded closed twice: 'peer closed', then 'framing " \
        "lost'" in message, message
    again = (_le("listener_started", 4, path="p"), _le("connection_closed", 5, conn=1, why="peer closed"))
    assert _close_reasons(start, closed, *again)[0] == "ok"  # a new life's conn 1 is another connection


@pytest.mark.parametrize(("line", "says"), [
    ("{cmd: kv_tensors_created, hang_up: true}", "hang_up: only a malformed frame"),
    ("{fault: stall_after_header, cmd: kv_tensors_created, hang_up: true}", "hang_up: only a malformed frame"),
    ("{fault: oversize_length, hang_up: true, timeout: 1s}", "waits for no reply"),
])
def test_hang_up_is_checked_at_load_time(line: str, says: str) -> None:
    refused_at_load(f"send: {line}", says, expect="requests_served")


def _b1(result: runner.RunResult) -> list[tuple[str, object]]:
    """What the listener recorded of the connection whose client hung up: its kinds with the close reasons."""
    bad = [e for e in result.events if e.kind == "bad_frame"]
    assert len(bad) == 1, [e.kind for e in result.events]
    conn = bad[0].data["conn"]
    return [(e.kind, str(e.data.get("why", ""))[:12]) for e in result.events
            if e.data.get("conn") == conn and e.kind in ("bad_frame", "reply_failed", "connection_closed")]


def test_the_reference_closes_the_hung_up_connection_once() -> None:
    result = runner.run_item(expand(load(str(SCENARIO)))[0])
    assert result.passed, [str(v) for v in result.violated]
    assert _b1(result) == [("bad_frame", ""), ("reply_failed", ""), ("connection_closed", "reply failed")]


def test_the_library_catches_a_listener_that_closes_a_connection_twice() -> None:
    result = runner.run_item(expand(load(str(SCENARIO)))[0], variant=PLANTED)
    assert result.step_error in (None, ""), result.step_error
    assert [v.checker for v in result.violated] == ["close_reasons"], [str(v) for v in result.violated]
    (v,) = result.violated
    assert "recorded closed twice: 'reply failed" in v.message and "then 'framing lost'" in v.message, v.message
    assert _b1(result) == [("bad_frame", ""), ("reply_failed", ""), ("connection_closed", "reply failed"),
                           ("connection_closed", "framing lost")]


@pytest.mark.kvcached
@pytest.mark.skipif(cached_source("kvcached", "0.1.6") is None,
                    reason="kvcached 0.1.6 is not in the cache: run `lastcall fetch kvcached==0.1.6`")
@pytest.mark.slow
def test_kvcacheds_record_closes_a_connection_once_when_its_read_and_then_its_error_reply_fail() -> None:
    """The kvcached target's own record (harness.targets.kvcached wraps recv_msg and send_msg): kvcached answers
    a read that failed with an error reply, which fails too when its client hung up; the wrapper recorded a
    close at the read and another at the reply, so close_reasons failed on kvcached for the harness's record."""
    result = runner.run_item(expand(load(str(SCENARIO)))[0], variant="kvcached==0.1.6")
    (v,) = [v for v in result.verdicts if v.checker == "close_reasons"]
    assert v.status == "ok", v.message
    assert any(e.kind == "connection_closed" and str(e.data.get("why")).startswith("read ended")
               for e in result.events)
