"""The ``pipeline`` step after a stop has begun: a request the listener never read may go unanswered (stop
contract lines 1 and 2), but a reply cut in the middle of its frame never passes, nor does a request the
listener decided on (dispatched, or refused shutting_down: lines 3 and 1) and then left without its reply.

Before, both ended in ``PeerClosed`` and a stopping pipeline took them for unread requests, so
``pipelined-requests-at-stop-answered-in-order`` passed on ``cuts_drained_reply`` (its drained handler's reply
lost) and on a listener that cuts its replies at stop (tests/lc_cut_reply_target.py).
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from harness.faults import client as cf
from harness.reference import wire
from harness.scenario import runner
from harness.scenario.loader import expand, load

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
PIPELINED = SCENARIOS / "pipelined-requests-at-stop-answered-in-order.yaml"
CUTS_AT_STOP = "reference@tests.lc_cut_reply_target:CutsReplyAtStop"


def _reply(rid: str) -> bytes:
    return wire.encode_reply(wire.Reply(status="success", id=rid, created=True))


@pytest.mark.parametrize(("second", "want"), [
    ("half", "cut"),      # the second reply's frame ends in its middle
    ("header", "cut"),    # two bytes of its header: the frame had begun
    ("none", "closed"),   # closed right after the first reply: at a frame boundary
])
def test_a_reply_cut_mid_frame_is_told_from_a_close_at_a_frame_boundary(tmp_path: Path, second: str,
                                                                        want: str) -> None:
    path = str(tmp_path / "s.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    sent: list[int] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            wire.recv_frame(conn)
            wire.recv_frame(conn)
            conn.sendall(_reply("a"))
            rest = _reply("b")
            part = {"half": rest[: len(rest) // 2], "header": rest[:2], "none": b""}[second]
            conn.sendall(part)
            sent.append(len(part))

    t = threading.Thread(target=serve)
    t.start()
    try:
        frames = [wire.encode_request(wire.Request(cmd="kv_tensors_created", id=i)) for i in "abc"]
        replies = cf.pipeline(path, frames, 5.0, wire.decode_reply)
    finally:
        t.join(10)
        server.close()
    assert isinstance(replies[0], wire.Reply) and replies[0].id == "a"
    if want == "cut":
        assert isinstance(replies[1], cf.CutReply) and replies[1].got == sent[0], replies
    else:
        assert replies[1] is None, replies
    assert replies[2] is None


def _pipeline_step(result: runner.RunResult) -> dict[str, object]:
    (ret,) = [e.data for e in result.events if e.kind == "step_returned" and e.data.get("kind") == "pipeline"]
    return ret


def test_the_reference_answers_every_pipelined_request_it_decided_on() -> None:
    result = runner.run_item(expand(load(str(PIPELINED)))[0])
    assert result.passed, [str(v) for v in result.violated]
    step = _pipeline_step(result)
    assert step["ok"] is True and [v["error_type"] for v in step["value"]] == [  # type: ignore[attr-defined]
        None, "shutting_down", "shutting_down"], step


@pytest.mark.parametrize(("variant", "says"), [
    ("cuts_drained_reply", "no reply, though the listener decided on it"),
    (CUTS_AT_STOP, "its reply was cut after"),
])
def test_a_stopping_pipeline_fails_on_a_lost_or_cut_reply(variant: str, says: str) -> None:
    result = runner.run_item(expand(load(str(PIPELINED)))[0], variant=variant)
    step = _pipeline_step(result)
    assert step["ok"] is False and says in str(step["error"]), step
    assert str(step["error"]).startswith("p1.0"), step  # the drained one: the request the fault held
    assert "requests_served" in [v.checker for v in result.violated]
