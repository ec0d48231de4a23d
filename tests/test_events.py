"""The event contract (harness/events.py): every emitted kind and key is declared, the docs are generated from
it, strict recording breaks a run on a bad event, and version-1 histories are read through the mapping."""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from lc_helpers import ROOT

from harness import events
from harness.checkers import RunRecord, judge
from harness.events import KINDS, EventKind, label
from harness.history import SCHEMA_VERSION, Event, Recorder, read_jsonl, write_jsonl
from harness.report.rejudge import report_history
from harness.scenario.schema import json_schema
from harness.scenario.steps import EVENT_KINDS
from harness.targets import absent_of

STORED = sorted([*(p for p in (ROOT / "docs" / "findings").rglob("history.jsonl")
                   if not any(part.startswith("vllm-") for part in p.parts)),  # (vLLM's were written in version 2)
                 *(ROOT / "fixtures" / "histories").glob("*.jsonl")])


# ------------------------------------------------------------------ every emit call fits the vocabulary
def _emit_calls() -> list[tuple[str, str, list[str], bool]]:
    """(where, kind, keyword names, has **data) of every emit/_notify call with a literal kind under harness/."""
    calls = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                continue
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if name in ("emit", "_notify"):
                keys = [k.arg for k in node.keywords if k.arg is not None]
                spread = any(k.arg is None for k in node.keywords)
                calls.append((f"{path.relative_to(ROOT)}:{node.lineno}", node.args[0].value, keys, spread))
    return calls


def test_every_emit_call_names_a_declared_kind_with_declared_keys() -> None:
    calls = _emit_calls()
    assert len(calls) > 100  # the scan sees the call sites (a scan that finds none proves nothing)
    wrong = []
    for where, kind, keys, spread in calls:
        spec = KINDS.get(kind)
        if spec is None:
            wrong.append(f"{where}: kind {kind!r} is not in harness/events.py")
            continue
        declared = {**spec.required, **spec.optional}
        wrong += [f"{where}: {kind} key {k!r} undeclared" for k in keys if k not in declared and not spec.open]
        if not spread:
            wrong += [f"{where}: {kind} lacks required key {k!r}" for k in spec.required if k not in keys]
    assert not wrong, "\n".join(wrong)


def test_the_scenario_vocabulary_is_the_event_registry() -> None:
    assert set(EVENT_KINDS) == set(events.BUILTIN_NAMES)
    enum = json_schema()["$defs"]["Wait"]["properties"]["event"]
    strings = [b for b in enum["anyOf"] if b.get("type") == "string"]
    assert strings[0]["enum"] == sorted(events.BUILTIN_NAMES)


def test_every_kind_has_a_party_and_a_meaning() -> None:
    for k in KINDS.values():
        assert k.party in events.PARTIES and k.about, k
    for party, kinds in events.OBSERVED_BY.items():
        assert all(KINDS[n].party == party for n in kinds), party
    with pytest.raises(ValueError, match="party 'nobody'"):
        EventKind("x_happened", "nobody", "?")
    with pytest.raises(ValueError, match="unknown type"):
        EventKind("x_happened", "listener", "?", {"n": "integer"})


def test_the_label_helper() -> None:
    assert label(0, 1) == "pp0/rank1"
    assert label(3, 0) == "pp3/rank0"
    hand_written = [f"{p}:{n}" for p in (ROOT / "harness").rglob("*.py") if p.name != "events.py"
                    for n, line in enumerate(p.read_text().splitlines(), 1)
                    if "/rank{" in line and 'f"' in line and not line.lstrip().startswith("#")]
    assert not hand_written, hand_written


# ------------------------------------------------------------------ checking one event
def test_problems_of_one_event() -> None:
    assert events.problems("stop_returned", {"listener": "pp0/rank0", "ok": True}) == []
    assert events.problems("stop_returned", {"listener": "pp0/rank0"}) == ["missing key 'ok' (bool)"]
    assert events.problems("stop_returned", {"ok": "yes"}) == ["key 'ok' is str 'yes', expected bool"]
    assert events.problems("accepted", {"listener": "l", "conn": True}) == [
        "key 'conn' is bool True, expected int"]  # a bool is not a connection number
    assert events.problems("accepted", {"listener": "l", "conn": 1, "peer": 2}) == ["undeclared key 'peer'"]
    assert events.problems("step_started", {"step": "s1", "kind": "send", "fault": "none"}) == []  # open kind
    assert events.problems("stop_strated", {})[0].startswith("unknown kind")


def test_a_strict_recorder_keeps_what_is_wrong_and_records_it_anyway() -> None:
    rec = Recorder("worker", "pp0/rank0", strict=True)
    rec.emit("stop_started", listener="pp0/rank0")
    rec.emit("stop_returned", listener="pp0/rank0")  # ok missing
    rec.add(Event(1, 2, "worker", "pp0/rank1", "t", "made_up", {}))
    assert rec.kinds() == ["stop_started", "stop_returned", "made_up"]
    assert len(rec.bad_events) == 2
    assert rec.bad_events[0].startswith("event 'stop_returned' from pp0/rank0 (pid ")
    assert rec.bad_events[0].endswith("missing key 'ok' (bool)")
    assert "event 'made_up' from pp0/rank1 (pid 2): unknown kind" in rec.bad_events[1]
    lax = Recorder(strict=False)
    lax.emit("made_up")
    assert lax.bad_events == []


def test_strict_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert os.environ.get(events.STRICT_ENV) == "1"  # lastcall's own suite runs strict (conftest.py)
    assert Recorder().strict
    monkeypatch.setenv(events.STRICT_ENV, "0")
    assert not Recorder().strict


def test_a_target_declares_kinds_of_its_own() -> None:
    mine = EventKind("cache_flushed", "worker", "the target's cache was written back", {"worker": "str"})
    try:
        events.declare([mine])
        assert "cache_flushed" in events.kind_names()
        assert events.problems("cache_flushed", {"worker": "pp0/rank0"}) == []
        events.declare([mine])  # the same record again (a second run of the same target) is fine
        with pytest.raises(ValueError, match="already declared differently"):
            events.declare([EventKind("stop_started", "worker", "a different meaning")])
        with pytest.raises(TypeError, match="EventKind records"):
            events.declare(["cache_flushed"])  # type: ignore[list-item]
        assert "cache_flushed" in events.render_markdown([mine])
    finally:
        KINDS.pop("cache_flushed", None)


def test_strict_scenario_run_is_broken_by_a_bad_event() -> None:
    # a real run whose worker emits an event outside the vocabulary: the run is broken, naming the event
    from harness.scenario.loader import expand, loads
    from harness.scenario.runner import run_item

    sc = loads("name: bad-event-breaks-the-run\nabout: a target emits an undeclared key\ncatches: [no_conn_tracking]\n"
               "steps:\n  - start: cluster\n  - stop: {as: s1}\n  - wait: {returned: s1}\n"
               "expect:\n  - stop_result: {step: s1}\n", "<bad-event>")
    result = run_item(expand(sc)[0], variant="reference@tests.lc_events_target:ColourfulListener")
    assert not result.passed
    assert "bad event: event 'listener_started' from pp0/rank0" in result.step_error
    assert "undeclared key 'colour'" in result.step_error


# ------------------------------------------------------------------ version 1, read through the mapping
def test_stored_histories_are_version_1_and_read_as_version_2() -> None:
    assert len(STORED) >= 4
    for path in STORED:
        raw = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        assert {d["v"] for d in raw} == {1}, path  # as stored: the old format
        read, problems = read_jsonl(path)
        assert problems == [] and len(read) == len(raw)
        assert {e.v for e in read} == {SCHEMA_VERSION} == {2}
        bad = [(e.kind, events.problems(e.kind, e.data)) for e in read if events.problems(e.kind, e.data)]
        assert not bad, (path, bad)  # every stored event fits the current vocabulary once mapped
        for d, e in zip(raw, read, strict=True):
            if d["kind"] in ("allocator_state", "allocator_torn_down", "teardown_deferred"):
                assert e.data["worker"] == d["data"]["label"] and "label" not in e.data


def test_the_mapping_renames_only_version_1() -> None:
    assert events.upgrade("allocator_torn_down", {"label": "pp0/rank0"}, 1) == {"worker": "pp0/rank0"}
    assert events.upgrade("allocator_torn_down", {"worker": "pp0/rank0"}, 2) == {"worker": "pp0/rank0"}
    assert events.upgrade("process_spawned", {"label": "pp0/rank0", "pid": 1}, 1) == {"label": "pp0/rank0", "pid": 1}


def test_a_version_1_history_judges_as_it_did(tmp_path: Path) -> None:
    # kv_state_consistent reads the worker's name: stored as label in version 1, judged through the mapping
    old = [Event(10, 5, "worker", "pp0/rank0", "t", "stop_all_returned", {"ok": True, "left": 0}, 1),
           Event(20, 5, "worker", "pp0/rank0", "t", "allocator_state", {"label": "pp0/rank0", "mapped": [0]}, 1)]
    write_jsonl(tmp_path / "h.jsonl", old)
    read, _ = read_jsonl(tmp_path / "h.jsonl")
    v = judge("kv_state_consistent", RunRecord(tuple(read)))
    assert (v.status, v.message) == ("violated", "pp0/rank0 holds [0] (pending None) but the client was told []")


@pytest.mark.parametrize("history", [p for p in STORED if p.name == "history.jsonl"],
                         ids=lambda p: p.parent.name)
def test_lastcall_report_rejudges_stored_findings_as_stored(history: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    stored = json.loads((history.parent / "verdicts.json").read_text())
    report_history(history, out=tmp_path)
    again = json.loads((tmp_path / "verdicts.json").read_text())
    assert [(v["checker"], v["status"]) for v in again["verdicts"]] == \
        [(v["checker"], v["status"]) for v in stored["verdicts"]]
    assert "(was " not in capsys.readouterr().out  # no verdict changed


# ------------------------------------------------------------------ the generated reference
# (that docs/events.md is current: tests/test_generated_docs.py, with the other generated pages)
def test_the_events_page_lists_every_kind_by_party() -> None:
    page = (ROOT / "docs" / "events.md").read_text()
    for k in KINDS.values():
        assert f"| `{k.name}` |" in page
    assert page.index("## listener") < page.index("| `stop_started` |") < page.index("## Format versions")
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert len(rows) == len(events.BUILTIN_NAMES)
    assert all(row.count("|") == 4 for row in rows)  # no cell split by a stray |


# ------------------------------------------------------------------ evidence in real runs
SCENARIO = """name: evidence-in-a-real-run
about: one stop, judged by a listener checker and by one with nothing to judge
catches: [no_conn_tracking]
steps:
  - start: cluster
  - send: {cmd: kv_tensors_created, as: q1}
  - stop: {as: s1}
  - wait: {returned: s1}
expect:
  - stop_result: {step: s1}
  - handler_drained
"""


def _run(text: str, variant: str | None = None) -> object:
    from harness.scenario.loader import expand, loads
    from harness.scenario.runner import run_item

    return run_item(expand(loads(text, "<evidence>"))[0], variant=variant)


def test_a_target_declaring_its_listener_unobserved_is_not_judged_and_passes() -> None:
    from harness.scenario.report import failure_text

    result: Any = _run(SCENARIO, "tests.lc_events_target:BLACK_BOX")
    status = {v.checker: v.status for v in result.verdicts}
    assert status == {"stop_result": "ok", "handler_drained": "not_judged"}
    assert result.passed
    assert "not judged: the target declares no listener events" in failure_text(result)
    on_reference: Any = _run(SCENARIO)  # the same run on the reference: judged
    assert {v.checker: v.status for v in on_reference.verdicts} == {"stop_result": "ok", "handler_drained": "ok"}


def test_an_unknown_verdict_fails_the_run_unless_its_entry_allows_it() -> None:
    from harness.scenario.report import failure_text

    plain = SCENARIO + "  - served_while_stalled: {}\n"  # no client stalls: nothing to judge
    result: Any = _run(plain)
    assert [v.status for v in result.verdicts] == ["ok", "ok", "unknown"] and not result.passed
    allowed: Any = _run(plain + "    allow_unknown: this run stalls no client\n")
    v = allowed.verdicts[2]
    assert (v.status, v.allowed, allowed.passed) == ("unknown", "this run stalls no client", True)
    assert "UNKNOWN served_while_stalled: no stalled or idle client in the history " \
        "[unknown allowed: this run stalls no client]" in failure_text(allowed)


def test_allow_unknown_is_part_of_an_expect_entry() -> None:
    from harness.scenario.errors import ScenarioError
    from harness.scenario.loader import loads

    text = SCENARIO + "  - served_while_stalled: {}\n    allow_unknown: REASON\n"
    sc = loads(text.replace("REASON", "no client stalls here"), "<allow>")
    assert [(e.checker, e.allow_unknown) for e in sc.expect] == [
        ("stop_result", None), ("handler_drained", None), ("served_while_stalled", "no client stalls here")]
    with pytest.raises(ScenarioError, match=r"<allow>:13:20: expect\[2\]\.allow_unknown: expected non-empty text"):
        loads(text.replace("REASON", "''"), "<allow>")
    entry = json_schema()["$defs"]["Expect_served_while_stalled"]["properties"]
    assert "allow_unknown" in entry and "served_while_stalled" in entry


def test_lastcall_report_keeps_allow_unknown_and_the_targets_absent_parties(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = [Event(10, 1, "harness", "", "t", "step_started", {"step": "s1", "kind": "stop"}),
             Event(20, 1, "harness", "", "t", "step_returned",
                   {"step": "s1", "kind": "stop", "ok": True, "value": True})]
    write_jsonl(tmp_path / "history.jsonl", steps)
    expect = [{"checker": "stop_result", "params": {"step": "s1"}}, {"checker": "handler_drained", "params": {}},
              {"checker": "served_while_stalled", "params": {}, "allow_unknown": "no client stalls"}]
    meta = {"scenario": "s", "variant": "tests.lc_events_target:BLACK_BOX", "expect": expect, "verdicts": [],
            "absent": sorted(absent_of("tests.lc_events_target:BLACK_BOX"))}  # as the run recorded them
    (tmp_path / "verdicts.json").write_text(json.dumps(meta))
    assert report_history(tmp_path / "history.jsonl", out=tmp_path / "out") == 0
    again = json.loads((tmp_path / "out" / "verdicts.json").read_text())
    assert [(v["status"], v.get("allowed")) for v in again["verdicts"]] == [
        ("ok", None), ("not_judged", None), ("unknown", "no client stalls")]
    assert again["expect"][2]["allow_unknown"] == "no client stalls"
    out = capsys.readouterr().out
    assert "[unknown allowed: no client stalls]" in out and "1 not judged" in out
    del meta["absent"]  # a report without them: a module:attribute variant is data, never imported
    (tmp_path / "verdicts.json").write_text(json.dumps(meta))
    sys.modules.pop("tests.lc_events_target", None)
    report_history(tmp_path / "history.jsonl", out=tmp_path / "out")
    assert "tests.lc_events_target" not in sys.modules
    again = json.loads((tmp_path / "out" / "verdicts.json").read_text())
    assert again["verdicts"][1]["status"] == "unknown"
    meta["variant"] = "reference"  # a built-in name: its parties are lastcall's own to tell (the listener observed)
    (tmp_path / "verdicts.json").write_text(json.dumps(meta))
    report_history(tmp_path / "history.jsonl", out=tmp_path / "out")
    again = json.loads((tmp_path / "out" / "verdicts.json").read_text())
    assert again["verdicts"][1]["status"] == "unknown"


CHATTY_SCENARIO = """name: a-kind-of-its-own
about: a target declares an event kind of its own, and a scenario waits on it
catches: [no_conn_tracking]
target: tests.lc_events_target:CHATTY
steps:
  - start: cluster
  - stop: {as: s1}
  - wait: {event: colour_chosen}
  - wait: {returned: s1}
expect:
  - stop_result: {step: s1}
"""


def test_a_kind_a_target_declares_is_waited_on_and_kept_in_a_strict_run() -> None:
    try:
        result: Any = _run(CHATTY_SCENARIO)
        assert result.passed, result.step_error
        chosen = [e for e in result.events if e.kind == "colour_chosen"]
        assert [e.data for e in chosen] == [{"listener": "pp0/rank0", "colour": "blue"}]
        # the same listener under a target that does not declare the kind: the run is broken, naming it
        undeclared = CHATTY_SCENARIO.replace("target: tests.lc_events_target:CHATTY\n", "").replace(
            "  - wait: {event: colour_chosen}\n", "")
        KINDS.pop("colour_chosen")
        broken: Any = _run(undeclared, "reference@tests.lc_events_target:ChattyListener")
        assert not broken.passed
        assert "bad event: event 'colour_chosen' from pp0/rank0" in broken.step_error
        assert "unknown kind" in broken.step_error
    finally:
        KINDS.pop("colour_chosen", None)


def test_a_scenario_waiting_on_an_unknown_kind_of_a_named_target_is_refused() -> None:
    from harness.scenario.errors import ScenarioError
    from harness.scenario.loader import loads

    with pytest.raises(ScenarioError, match="unknown event kind 'colour_chosen'"):
        loads(CHATTY_SCENARIO.replace("target: tests.lc_events_target:CHATTY\n", ""), "<named>")
