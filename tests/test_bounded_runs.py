"""Bounded runs: a history never holds more than its byte budget, a long request id is stored as its digest,
and a run that reaches the budget ends with a clear outcome, judged unknown where evidence was cut.

What ``lastcall validate`` refuses before a run starts (a run's totals, names, ``ipc``) is in
tests/hostile_cases.py with the rest of the hostile inputs; this file holds what the recorder, the checkers
and a real run do with the budget.  Bounded work is asserted in bytes: what the recorder stores, what a
writer writes, what the control channel carries.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import socket
import threading
from pathlib import Path

import pytest

from harness import artifacts, events
from harness.checkers import RunRecord, judge
from harness.history import MARKER_ROOM, Event, Recorder, read_jsonl, write_jsonl
from harness.launch.control import ControlClient
from harness.scenario import expand, loads

PADDED = "q1#" + "x" * 999_997  # a request id padded for a 1 MB reply (harness.faults.client.padded_id)
SAFETY_S = 600  # a safety net on waits that must end at once; never a timer
CUT = r"history budget reached at \d+ ms: the events after it were not stored"
LISTENER = {"listener": "pp0/rank0", "path": "/x", "rank": 0, "pp": 0}


def _line_bytes(evs: list[Event]) -> int:
    return sum(len(e.to_json()) + 1 for e in evs)


# ------------------------------------------------------------------ ids
def test_a_long_request_id_is_stored_as_its_digest_and_size_and_a_short_one_whole() -> None:
    rec = Recorder(strict=True)
    rec.emit("dispatch_started", listener="pp0/rank0", conn=1, cmd="kv_tensors_created", id=PADDED)
    rec.emit("dispatch_refused", listener="pp0/rank0", conn=2, cmd="kv_tensors_created", id="p1.3")
    long, short = rec.events()
    assert "id" not in long.data
    assert long.data["id_digest"] == "sha256:" + hashlib.sha256(PADDED.encode()).hexdigest()
    assert (long.data["id_size"], long.data["id_head"]) == (1_000_000, PADDED[:events.ID_HEAD])
    assert short.data["id"] == "p1.3" and "id_digest" not in short.data
    assert rec.bad_events == []  # the digest's keys are declared (harness.events)
    assert len(long.to_json()) < 400  # the payload is not in the history
    assert events.id_key(long.data) == events.id_key(events.stored_id(PADDED))
    assert events.id_key(short.data) == events.id_key(events.stored_id("p1.3")) == "p1.3"


def test_an_id_at_the_limit_is_kept_whole_and_one_character_more_is_not() -> None:
    at = "r" * events.MAX_ID_CHARS
    assert events.compact({"id": at}) == {"id": at}
    over = events.compact({"id": at + "r", "cmd": "x"})
    assert set(over) == {"cmd", "id_digest", "id_size", "id_head"} and over["id_size"] == events.MAX_ID_CHARS + 1


def test_the_control_channel_carries_a_padded_ids_digest_not_the_id(tmp_path: Path) -> None:
    """A child's event leaves its process with the digest: the channel never carries the padding."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "c.sock"))
    server.listen(1)
    lost = threading.Event()
    client = ControlClient(str(tmp_path / "c.sock"), "worker", "pp0/rank0", lost.set)
    conn, _ = server.accept()
    try:
        client.emit("dispatch_started", listener="pp0/rank0", conn=1, cmd="kv_tensors_created", id=PADDED)
        conn.settimeout(SAFETY_S)
        got = b""
        while got.count(b"dispatch_started") == 0:  # the hello, then the event
            chunk = conn.recv(1 << 16)
            assert chunk, "the channel closed before the event came"
            got += chunk
            assert len(got) < 4096, "the event carries the padded id"
        assert b"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" not in got and b"sha256:" in got
    finally:
        client.chan.close()
        conn.close()
        server.close()
        client._thread.join(SAFETY_S)
    assert lost.is_set() and not client._thread.is_alive()


# ------------------------------------------------------------------ the recorder's budget
def _fill(rec: Recorder, n: int) -> None:
    for i in range(n):
        rec.emit("step_started", step=f"s{i}", kind="send", category="request", pad="p" * 200)


def test_a_history_stops_at_its_budget_with_one_marker_and_ends_every_wait() -> None:
    budget = 16 << 10
    rec = Recorder(budget=budget, strict=True)
    waiting: list[Event | None] = []
    waiter = threading.Thread(target=lambda: waiting.append(rec.wait_for("never_emitted", SAFETY_S)))
    waiter.start()
    _fill(rec, 500)
    waiter.join(SAFETY_S)
    stored = rec.events()
    assert not waiter.is_alive() and waiting == [None]  # a wait begun before the cut ended at the cut
    assert rec.wait_for("never_emitted", SAFETY_S) is None  # and a later one at once
    assert rec.cut is stored[-1] and [e.kind for e in stored].count(events.BUDGET_KIND) == 1
    assert rec.cut.data == {"budget": budget, "stored": _line_bytes(stored[:-1])}
    assert _line_bytes(stored) == rec.stored <= budget
    assert len(stored) - 1 + rec.dropped == 500 and rec.dropped > 400
    assert rec.bad_events == []  # the marker is a declared kind


def test_a_history_cut_at_its_budget_is_written_within_it_and_read_back_whole(tmp_path: Path) -> None:
    rec = Recorder(budget=16 << 10)
    _fill(rec, 500)
    path = tmp_path / "history.jsonl"
    written = rec.write(path)
    assert written == path.stat().st_size == rec.stored <= 16 << 10
    back, problems = read_jsonl(path)
    assert problems == [] and [e.kind for e in back] == [e.kind for e in rec.events()]
    assert back[-1].kind == events.BUDGET_KIND


def test_write_jsonl_never_writes_past_its_limit_and_marks_where_it_stopped(tmp_path: Path) -> None:
    evs = [Event(1000 + i, 1, "harness", "", "t", "step_started", {"step": f"s{i}", "kind": "send",
                                                                     "pad": "p" * 1000}) for i in range(100)]
    path = tmp_path / "h.jsonl"
    written = write_jsonl(path, evs, 16 << 10)
    lines = path.read_text().splitlines()
    assert written == path.stat().st_size <= 16 << 10
    assert json.loads(lines[-1])["kind"] == events.BUDGET_KIND and len(lines) < len(evs)
    assert (16 << 10) - written < 1100 + MARKER_ROOM  # it stopped at the first event that did not fit


def test_an_event_larger_than_the_whole_budget_cuts_the_history_and_is_not_stored() -> None:
    rec = Recorder(budget=8 << 10)
    rec.emit("stacks", label="w", pid=1, text="frame\n" * 100_000)  # 600 KB of stacks
    assert [e.kind for e in rec.events()] == [events.BUDGET_KIND] and rec.stored <= 8 << 10


# ------------------------------------------------------------------ judged unknown where evidence was cut
def _run(*late: Event, cut: bool = True) -> RunRecord:
    evs = [Event(1_000_000, 7, "worker", "pp0/rank0", "t", "listener_started", dict(LISTENER)),
           Event(2_000_000, 7, "worker", "pp0/rank0", "t", "stop_started", {"listener": "pp0/rank0"}), *late]
    if cut:
        evs.append(Event(9_000_000, 1, "harness", "", "t", events.BUDGET_KIND, {"budget": 1, "stored": 1}))
    return RunRecord(tuple(evs))


def test_a_cut_history_judges_ok_as_unknown_and_keeps_a_violation() -> None:
    assert judge("no_late_dispatch", _run(cut=False)).status == "ok"  # the same events, not cut
    cut = judge("no_late_dispatch", _run(), allow_unknown="a known gap")
    assert (cut.status, cut.message, cut.passes) == (
        "unknown", "history budget reached at 8 ms: the events after it were not stored", False)
    late = Event(3_000_000, 7, "worker", "pp0/rank0", "t", "dispatch_started",
                 {"listener": "pp0/rank0", "conn": 1, "cmd": "map_to_kv_tensors"})
    found = judge("no_late_dispatch", _run(late))
    assert found.status == "violated" and found.evidence[-1] is late


def test_a_verdict_keeps_at_most_its_evidence_limit_and_counts_the_rest() -> None:
    """Each expect entry's verdict copies its evidence into verdicts.json: it is bounded, whatever the run."""
    from harness.checkers.base import MAX_EVIDENCE

    late = [Event(3_000_000 + i, 7, "worker", "pp0/rank0", "t", "dispatch_started",
                  {"listener": "pp0/rank0", "conn": i, "cmd": "map_to_kv_tensors"}) for i in range(150)]
    found = judge("no_late_dispatch", _run(*late, cut=False))
    assert found.status == "violated" and len(found.evidence) == MAX_EVIDENCE == 100
    assert found.notes[-1] == "51 more evidence event(s) not kept (the history has them)"
    assert len(json.dumps(found.to_dict())) < 100 * 300


def test_lastcall_report_judges_a_stored_cut_history_as_the_run_did(tmp_path: Path) -> None:
    from harness.cli import main

    rec = Recorder(budget=4 << 10)
    rec.add(Event(1_000_000, 7, "worker", "pp0/rank0", "t", "listener_started", dict(LISTENER)))
    rec.add(Event(2_000_000, 7, "worker", "pp0/rank0", "t", "stop_started", {"listener": "pp0/rank0"}))
    _fill(rec, 100)
    rec.write(tmp_path / "history.jsonl")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["report", str(tmp_path / "history.jsonl"), "--check", "no_late_dispatch"])
    assert rc == 0, err.getvalue()  # unknown is no violation: exit 0, the verdict printed
    assert "no_late_dispatch: history budget reached at " in out.getvalue()
    assert ": the events after it were not stored" in out.getvalue()


# ------------------------------------------------------------------ a real run reaching its budget
RUN = """\
name: many-sends
about: Many plain requests, more than a small history budget holds.
catches: [no_conn_tracking]
steps:
  - start: cluster
{sends}  - stop: {{as: s1}}
  - wait: {{returned: s1}}
expect:
  - no_leftover_paths
  - stop_result: {{step: s1}}
"""
HAMMER = """\
name: hammer-fills-the-history
about: A hammer whose handshakes fill a small history budget before the wait after it could end.
catches: [poll_timeout_1s]
steps:
  - start: cluster
  - handshake_start: {as: l1}
  - hammer: {as: traffic}
  - wait: {event: bind_failed, timeout: 60s}
  - handshake_shutdown: {as: s1}
  - wait: {returned: s1}
  - stop_hammer: traffic
expect:
  - port_released
  - stop_result: {step: s1}
"""


def _ends_at_its_budget(text: str, budget: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Event]:
    from harness.report.write import write_run
    from harness.scenario.runner import run_item

    monkeypatch.setattr(artifacts, "MAX_HISTORY_BYTES", budget)  # every recorder made from now on
    result = run_item(expand(loads(text, "t.yaml"))[0])
    assert result.outcome.status == events.BUDGET_KIND, (result.outcome, result.step_error)
    assert result.step_error.startswith("history budget reached at ")
    assert "the run was ended there" in result.step_error and not result.broken
    assert _line_bytes(result.events) <= budget and result.events[-1].kind == events.BUDGET_KIND
    cut, unjudged = result.verdicts  # ok on what was stored, and unknown for want of the stop's return
    assert cut.status == "unknown" and re.fullmatch(CUT, cut.message), cut
    assert unjudged.status == "unknown" and re.fullmatch(r"no stop step s1 returned in the history \(" + CUT + r"\)",
                                                        unjudged.message), unjudged
    write_run(result, tmp_path)
    assert (tmp_path / result.run_id / "history.jsonl").stat().st_size <= budget  # what the run wrote
    return result.events


def test_a_run_that_reaches_its_history_budget_ends_there_unknown(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    sends = "".join(f"  - send: {{cmd: kv_tensors_created, as: q{i}}}\n" for i in range(200))
    stored = _ends_at_its_budget(RUN.format(sends=sends), 24 << 10, monkeypatch, tmp_path)
    played = [e.data["step"] for e in stored if e.kind == "step_started"]
    assert 0 < len(played) < 200 and "s1" not in played  # ended at the cut: the later steps were never played


def test_a_hammer_is_held_to_the_history_budget_while_it_runs(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    """What only the run can know: the hammer's handshakes fill the budget, which ends the wait after it
    (a safety net of 60 s) and the run."""
    stored = _ends_at_its_budget(HAMMER, 32 << 10, monkeypatch, tmp_path)
    assert any(e.kind == "handshake_served" for e in stored)
    assert not any(e.kind == "step_returned" and e.data.get("step") == "s1" for e in stored)


# ------------------------------------------------------------------ a run's totals sit where docs/limits.md says
def _steps(*lines: str) -> str:
    return ("name: totals\nabout: a run's totals at their limits\ncatches: [no_conn_tracking]\nsteps:\n"
            "  - start: cluster\n" + "".join(lines) + "  - stop: {as: s1}\n  - wait: {returned: s1}\n"
            "expect: [no_late_dispatch]\n")


def _refused(text: str) -> str:
    from harness.scenario import ScenarioError

    with pytest.raises(ScenarioError) as info:
        loads(text, "t.yaml")
    return str(info.value)


PADDED_SEND = "  - send: {cmd: kv_tensors_created, fault: never_read, reply_size: 1000000}\n"
PIPELINE = "  - pipeline: {requests: [{cmd: kv_tensors_created}], as: p%d}\n"


def test_sixteen_replies_padded_to_1_mb_fit_and_a_seventeenth_is_refused_at_its_reply_size() -> None:
    from harness.scenario.budget import MAX_HELD_BYTES

    assert 16 * 2 * 1_000_000 <= MAX_HELD_BYTES < 17 * 2 * 1_000_000
    loads(_steps(PADDED_SEND * 16), "t.yaml")
    assert _refused(_steps(PADDED_SEND * 17)) == (
        "t.yaml:22:68: steps[17].send.reply_size: the requests and replies of the steps up to here come to "
        "32.4 MiB, over lastcall's limit of 32 MiB in one run (docs/limits.md), which the harness and the "
        "listener would hold; pad fewer or smaller replies, or split the scenario")


def test_each_request_of_a_pipeline_counts_its_padding() -> None:
    requests = "[" + ", ".join(["{cmd: kv_tensors_created}"] * 17) + "]"
    assert _refused(_steps(f"  - pipeline: {{reply_size: 1000000, requests: {requests}}}\n")) == (
        "t.yaml:6:28: steps[1].pipeline.reply_size: the requests and replies of the steps up to here come to "
        "32.4 MiB, over lastcall's limit of 32 MiB in one run (docs/limits.md), which the harness and the "
        "listener would hold; pad fewer or smaller replies, or split the scenario")


def test_sixteen_pipelines_may_be_in_flight_and_a_wait_makes_room_for_more() -> None:
    loads(_steps(*(PIPELINE % i for i in range(16))), "t.yaml")
    assert _refused(_steps(*(PIPELINE % i for i in range(17)))) == (
        "t.yaml:22:15: steps[17].pipeline: 17 background steps (pipelines, slow readers, engine requests) would "
        "be in flight here, over lastcall's limit of 16 at once (docs/limits.md); join one first with "
        "- wait: {returned: NAME}")
    joined = [PIPELINE % i + f"  - wait: {{returned: p{i}}}\n" for i in range(40)]
    loads(_steps(*joined), "t.yaml")
    slow = "  - send: {cmd: kv_tensors_created, fault: slow_reader, as: r%d}\n"
    assert "steps[17].send: 17 background steps (pipelines, slow readers, engine requests) would" in _refused(
        _steps(*(slow % i for i in range(17))))


ENGINE = ("name: engine-totals\nabout: an engine run's totals\ntarget: engine_standin\n"
          "catches: [engine_late_generation]\nsteps:\n  - start: engine\n{steps}expect: [engine_requests_end]\n")


def test_an_engine_answer_read_whole_counts_its_tokens_and_a_background_request_is_in_flight() -> None:
    from harness.scenario.budget import MAX_HELD_BYTES, TOKEN_BYTES

    whole = "  - engine_request: {max_tokens: 1000000}\n"
    fits = MAX_HELD_BYTES // (TOKEN_BYTES * 1_000_000)
    loads(ENGINE.format(steps=whole * fits), "t.yaml")
    assert f"steps[{fits + 1}].engine_request.max_tokens: the requests and replies of the steps up to here " \
        in _refused(ENGINE.format(steps=whole * (fits + 1)))
    loads(ENGINE.format(steps="  - engine_request: {stream: true, max_tokens: 1000000}\n" * 20), "t.yaml")
    background = "".join(f"  - engine_request: {{background: true, as: e{i}}}\n" for i in range(17))
    assert "steps[17].engine_request: 17 background steps" in _refused(ENGINE.format(steps=background))


def test_1024_connections_may_be_opened_and_one_more_is_refused() -> None:
    loads(_steps("  - idle: {count: 1000}\n", "  - send: {cmd: kv_tensors_created}\n" * 24), "t.yaml")
    assert _refused(_steps("  - idle: {count: 1000}\n", "  - send: {cmd: kv_tensors_created}\n" * 25)) == (
        "t.yaml:31:11: steps[26].send: the steps up to here open 1025 connections, over lastcall's limit of "
        "1024 in one run (docs/limits.md); open fewer, or split the scenario")


def test_the_steps_a_run_plays_count_the_rounds_a_step_expands_to() -> None:
    from harness.scenario.budget import MAX_PLAYED

    waves = "  - workload: {waves: 1000, stop_at: never}\n"  # 2001 played each
    fits = (MAX_PLAYED - 3) // 2001  # start, stop and wait besides
    loads(_steps(waves * fits), "t.yaml")
    assert f"steps[{fits + 1}].workload.waves: the steps up to here play " in _refused(_steps(waves * (fits + 1)))


@pytest.mark.parametrize(("ipc", "ok"), [("a.b", True), ("..a", True), ("-", True), ("x" * 32, True),
                                         (".", False), ("..", False), ("....", False), ("x" * 33, False),
                                         ("a/b", False)])
def test_an_ipc_keeps_its_pattern_and_length_and_is_never_only_dots(ipc: str, ok: bool) -> None:
    text = _steps(f"  - stale_socket: {{ipc: '{ipc}'}}\n")
    if ok:
        assert loads(text, "t.yaml").steps[1].spec.ipc == ipc
        return
    message = _refused(text)
    assert message.startswith("t.yaml:6:25: steps[1].stale_socket.ipc: ")
    if not ipc.strip("."):
        assert message.endswith(f"{ipc!r} is made only of dots: an instance's name is a directory under the run's "
                                "root, and '.' or '..' would name the root or the directory above it; write e.g. "
                                "'other'")


def test_the_schema_carries_the_names_and_ipc_maxima() -> None:
    from harness.scenario import json_schema
    from harness.scenario.fields import MAX_IPC, MAX_NAME

    defs = json_schema()["$defs"]
    ipc = defs["StaleSocket"]["properties"]["ipc"]
    assert (ipc["maxLength"], ipc["pattern"], ipc["not"]) == (MAX_IPC, "^[A-Za-z0-9_.-]+$", {"pattern": r"^\.+$"})
    assert defs["Stop"]["properties"]["as"]["anyOf"][0]["maxLength"] == MAX_NAME
    reason = defs["Expect_no_late_dispatch"]["properties"]["allow_unknown"]["anyOf"][0]
    assert reason["maxLength"] == 500
    assert defs["Send"]["properties"]["transaction_id"]["anyOf"][0]["maxLength"] == MAX_NAME


def test_a_name_at_its_limit_loads_and_one_character_more_is_refused() -> None:
    loads(_steps("  - send: {cmd: kv_tensors_created, as: " + "r" * 64 + "}\n"), "t.yaml")
    assert _refused(_steps("  - send: {cmd: kv_tensors_created, as: " + "r" * 65 + "}\n")).startswith(
        "t.yaml:6:41: steps[1].send.as: expected text of at most 64 characters (lastcall's limit), found 65 "
        "characters: ")


def test_a_wait_looks_at_each_event_once_however_many_arrive_while_it_waits() -> None:
    """A wait on a busy history (a hammer's) costs one pass over it: the predicate is called once an event."""
    from harness.scenario.player import counting

    rec = Recorder()
    calls = [0]
    is_last = counting(2, lambda e: e.kind == "peer_closed")

    def pred(e: Event) -> bool:
        calls[0] += 1
        return is_last(e)

    def add() -> None:
        for i in range(3000):
            rec.emit("peer_closed" if i in (1000, 2999) else "peer_idle", step="x", count=i)

    adder = threading.Thread(target=add)
    adder.start()
    found = rec.wait_for(pred, SAFETY_S)
    adder.join(SAFETY_S)
    assert found is not None and found.data["count"] == 2999 and not adder.is_alive()
    assert calls[0] == 3000  # each event once, not once for every event that arrived after it


def test_a_chained_run_cut_at_its_budget_ends_each_item_from_the_cut_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine chain shares one history: the items before the cut are judged as ever; the item it was cut in
    and every one after end with the outcome, judged on what was stored, the later ones holding the marker."""
    from harness.scenario.chain import plan
    from harness.scenario.runner import run_chain

    library = [expand(loads(p.read_text(), str(p)))[0]
               for p in sorted((Path(__file__).resolve().parent.parent / "scenarios").glob("engine-*.yaml"))]
    chain = next(c for c in plan(library) if len(c) > 2)
    budget = 8 << 10  # the chain's first items take about 3 and 4 KiB
    monkeypatch.setattr(artifacts, "MAX_HISTORY_BYTES", budget)
    results = run_chain(chain, variant="engine_standin")
    statuses = [r.outcome.status for r in results]
    k = statuses.index(events.BUDGET_KIND)
    assert 0 < k < len(results) - 1 and statuses == ["ok"] * k + [events.BUDGET_KIND] * (len(results) - k)
    for r in results[k:]:
        assert r.step_error.startswith("history budget reached at ") and r.events[-1].kind == events.BUDGET_KIND
        assert all(v.status != "ok" for v in r.verdicts)
    assert all(r.passed and not any(e.kind == events.BUDGET_KIND for e in r.events) for r in results[:k])
    assert _line_bytes(list({id(e): e for r in results for e in r.events}.values())) <= budget
