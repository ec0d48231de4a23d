"""A stored run is data: ``lastcall report`` on a hostile history or verdicts.json ends with exit 0, 1 or 2, its
reading and its page bounded, nothing a file names imported (docs/trust.md). One test per class of attack;
the heavy ones run ``lastcall report`` in a child under RLIMIT_AS 1 GiB and RLIMIT_CPU (safety nets that make
a regression fail fast: no wall-clock race). Then a Hypothesis fuzzer over history and verdicts shapes, in
process, that asserts the exit code is 0, 1 or 2 (3 is lastcall's own bug)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.artifacts import MAX_HISTORY_BYTES
from harness.cli import main
from harness.eventlines import MAX_SPAN_NS

AS_LIMIT = 1 << 30  # the bound: every input ends within 1 GiB of address space
CPU_LIMIT = 60  # seconds of CPU a child may use: far above what any case needs
PAGE_BOUND = 8 << 20  # bytes a run's page may reach whatever its history holds (harness.report.html's caps)
T0 = 10**12


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT, CPU_LIMIT))


def _report(history: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    out = history.parent / "out"
    return subprocess.run([sys.executable, "-m", "harness.cli", "report", str(history), "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=300, preexec_fn=_limits)


def _event(ms: float, kind: str = "accepted", **over: Any) -> dict[str, Any]:
    doc = {"t_ns": T0 + int(ms * 1e6), "pid": 7, "role": "worker", "rank": "pp0/rank0", "thread": "t", "kind": kind,
           "data": {"listener": "pp0/rank0", "conn": 1}, "v": 2}
    doc.update(over)
    return doc


def _write(path: Path, lines: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def test_a_history_that_is_not_a_regular_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo" / "history.jsonl"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    link = tmp_path / "link" / "history.jsonl"
    link.parent.mkdir()
    link.symlink_to("/dev/zero")
    folder = tmp_path / "dir" / "history.jsonl"
    folder.mkdir(parents=True)
    for path, what in ((fifo, "a FIFO, not a regular file; give the history"),
                       (link, "a symbolic link, not a regular file; lastcall never writes one (give the history "
                              "itself)"),
                       (folder, "a directory, not a regular file; give the history")):
        proc = _report(path)
        assert (proc.returncode, proc.stdout) == (2, "")
        assert proc.stderr == f"lastcall: error: {path}: {what}\n"
        assert not (path.parent / "out").exists()


def test_a_history_over_its_size_limit_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "history.jsonl"
    with open(big, "wb") as f:
        f.truncate(MAX_HISTORY_BYTES + 1)  # sparse: nothing is written, and nothing need be read to refuse it
    proc = _report(big)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"lastcall: error: {big}: {MAX_HISTORY_BYTES + 1} bytes, over lastcall's limit of 32 MiB "
                           "for a history\n")


@pytest.mark.parametrize(("line", "why"), [
    (_event(1, t_ns=-10**32), "an integer of 34 characters (lastcall reads at most 20 digits)"),
    ('{"t_ns": -1e32, "pid": 7}', "no 'role'"),  # a bare float t_ns: the line is still judged field by field
    (_event(1, t_ns=1e300), "t_ns 1e+300 is not an integer from 0 to 2**63 - 1"),
    (_event(1, t_ns=-1), "t_ns -1 is not an integer from 0 to 2**63 - 1"),
    (_event(1, t_ns=2**63), "t_ns 9223372036854775808 is not an integer from 0 to 2**63 - 1"),
    (json.dumps(_event(1)).replace(f'"t_ns": {T0 + 10**6}', '"t_ns": ' + "9" * 4000),
     "an integer of 4000 characters (lastcall reads at most 20 digits)"),
    (_event(1, t_ns=True), "t_ns True is not an integer from 0 to 2**63 - 1"),
    (_event(1, pid=-5), "pid -5 is not an integer from 0 to 2**31 - 1"),
    (_event(1, kind="\x1b[2Jx"), "is not an event kind's name"),
    (_event(1, data=[1, 2]), "data is a JSON list, not an object"),
    (_event(1, data={"listener": ["pp0"], "conn": "1"}), "accepted: key 'listener' is list"),
    (_event(1, v=99), "format v 99 is not one this lastcall reads"),
    ("[" * 200_000 + "]" * 200_000, "nested deeper than 32 levels of lists and objects"),
    ('{"t_ns": NaN}', "NaN is not a number lastcall writes"),
    ("[1, 2, 3]", "a JSON list, not an event object"),
], ids=lambda x: None if isinstance(x, str) and len(x) < 30 else "")
def test_a_line_of_the_wrong_shape_or_range_is_unreadable_and_the_rest_is_judged(
        tmp_path: Path, line: Any, why: str) -> None:
    hist = _write(tmp_path / "history.jsonl", [_event(0, "listener_started", data={
        "listener": "pp0/rank0", "path": "/x", "rank": 0, "pp": 0}), line, _event(5, "connection_closed")])
    proc = _report(hist, "--check", "close_reasons")
    assert proc.returncode in (0, 1), proc.stderr
    assert f"{hist}:2: unreadable line: " in proc.stderr and why in proc.stderr, proc.stderr
    assert "2 events" in proc.stdout
    assert "\x1b" not in proc.stdout + proc.stderr  # what a file holds is shown escaped
    assert (tmp_path / "out" / "index.html").stat().st_size < PAGE_BOUND


def test_an_event_far_from_the_others_is_unreadable(tmp_path: Path) -> None:
    """No value stretches the run's axis: an event further than any run lasts from the others is left out."""
    lines = [_event(i) for i in range(5)] + [_event(0, t_ns=T0 + MAX_SPAN_NS + 10**9)]
    hist = _write(tmp_path / "history.jsonl", lines)
    proc = _report(hist, "--check", "close_reasons")
    assert proc.returncode == 0, proc.stderr
    assert (f"{hist}:6: unreadable line: t_ns {T0 + MAX_SPAN_NS + 10**9} lies more than 604800 s from the run's "
            "other events, longer than a run lasts") in proc.stderr
    assert "5 events" in proc.stdout


@pytest.mark.slow
def test_fields_of_verdicts_json_of_the_wrong_shape_are_left_out_located(tmp_path: Path) -> None:
    hist = _write(tmp_path / "history.jsonl", [_event(i) for i in range(3)])
    shapes = {"outcome": "ok", "expect": [{"checker": "close_reasons", "params": [1]}], "variant": ["reference"],
              "verdicts": {"a": 1}, "scale": 1e308, "seconds": "fast", "absent": ["everyone"]}
    (tmp_path / "verdicts.json").write_text(json.dumps({"scenario": "s", **shapes}))
    proc = _report(hist)
    assert proc.returncode in (0, 1), proc.stderr
    meta = tmp_path / "verdicts.json"
    for line in ("outcome: a string, expected an object", "expect: [0]: params: a JSON list, expected an object",
                 "variant: a JSON list, expected a string", "verdicts: a JSON object, expected a list of verdicts",
                 "scale: 1e+308 is outside 1e-09 to 10000", "seconds: a string, expected a number",
                 "absent: [0]: not one of harness, engine, worker, listener"):
        assert f"lastcall report: {meta}: {line}; left out" in proc.stderr, proc.stderr
    # the stored outcome's shapes inside an object: each left out alone, the page still built
    for key, value in (("exits", [1]), ("stacks", ["x"]), ("leftovers", {"a": 1}), ("status", 3)):
        meta.write_text(json.dumps({"outcome": {"status": "ok", key: value}}))
        proc = _report(hist, "--check", "close_reasons")
        assert proc.returncode == 0 and f"{meta}: outcome: {key}: " in proc.stderr, (key, proc.stderr)


def test_many_lanes_and_long_values_build_a_bounded_page(tmp_path: Path) -> None:
    """20,000 distinct (pid, thread) lanes and a 4 MiB value: the page stays bounded, the layout is one pass."""
    lanes = [_event(i / 100, pid=1000 + i, thread=f"thread-{i}") for i in range(20_000)]
    long = _event(1, "step_returned", data={"step": "s1", "kind": "send", "ok": True, "value": "x" * (4 << 20)})
    hist = _write(tmp_path / "history.jsonl", [*lanes, long, _event(300, "stop_started", data={"listener": "p"})])
    proc = _report(hist, "--check", "close_reasons", "--check", "stop_result")
    assert proc.returncode in (0, 1), proc.stderr
    page = (tmp_path / "out" / "index.html").read_text()
    assert len(page.encode()) < PAGE_BOUND
    assert "19801 other lanes (over 200)" in page and "(4194304 characters)" in page


def _forged(stops: int, conns: int) -> list[dict[str, Any]]:
    """A history whose every stop, stop return, exit hook, teardown, launch and failed start pairs with thousands
    of others: one listener restarted ``stops`` times with ``conns`` connections live (and inside the backend) at
    each stop, each stop's return False after a teardown, an exit hook and an allocator teardown per restart, and
    the harness's steps (stalls, armed faults, failed handshake starts, launches) as many."""
    out: list[dict[str, Any]] = []

    def ev(kind: str, pid: int = 7, /, **data: Any) -> None:
        out.append({"t_ns": T0 + 1000 * len(out), "pid": pid, "role": "worker", "rank": "pp0/rank0",
                    "thread": "t", "kind": kind, "data": data, "v": 2})

    lc = {"listener": "pp0/rank0"}
    ev("listener_started", **lc, path="/x", rank=0, pp=0)
    for c in range(conns):
        ev("accepted", **lc, conn=c)
        ev("dispatch_started", **lc, conn=c, cmd="x")
    for i in range(stops):
        ev("listener_started", **lc, path="/x", rank=0, pp=0)
        ev("listener_registered", **lc, ipc="x")
        ev("stop_started", **lc)
        ev("reads_cancelled", **lc, n=0, conns=[])
        ev("teardown_step", **lc, step="close")
        ev("stop_returned", **lc, ok=False)
        ev("listener_unregistered", **lc, ipc="x")
        ev("stop_returned", **lc, ok=True)
        ev("stop_returned", listener=f"other{i}", ok=False)
        ev("allocator_torn_down", worker="w")
        ev("exit_hook_started", listeners=1, budget=1.0)
        ev("drain_finished", **lc, ok=True)
        ev("stop_started", **lc)
        ev("exit_hook_finished", ok=False, left=1)
        ev("exit_requested", 7 + i, reason="x")
        ev("fault_reached", site="y", action="pause", hit=1)
        ev("step_started", 1, step=f"s{i}", kind="send", category="request")
        ev("peer_stalled", 1, step=f"p{i}", fault="stall")
        ev("step_returned", 1, step=f"s{i}", kind="send", category="request", ok=False, error="x")
        ev("armed", 1, step=f"a{i}", site="x", pid=7, action="pause")
        ev("step_started", 1, step=f"h{i}", kind="handshake_start", category="start")
        ev("step_returned", 1, step=f"h{i}", kind="handshake_start", category="start", ok=False, error="x")
        ev("engine_launched", 1, pid=100 + i, port=8000, launch=i)
        ev("engine_ready", 1, pid=99, ready_s=1.0, members=[])
        ev("step_started", 1, step=f"g{i}", kind="engine_signal", sig="SIGTERM", to="api_server")
        ev("step_returned", 1, step=f"w{i}", kind="wait_gone", ok=True, value={
            "gone": True, "seconds": 0.1, "after": f"g{i}", "survivors": [], "orphaned": [], "left": [], "status": 1})
    for i in range(stops):
        ev("handshake_listener_started", host="h", port=1)
        ev("peer_closed", 1, step=f"p{i}")
        ev("path_replaced", 1, step=f"r{i}", path=f"/r/{i}.sock", ino=i)
    return out


@pytest.mark.slow
def test_a_history_of_thousands_of_stops_each_pairing_with_thousands_is_judged_in_bounded_time(
        tmp_path: Path) -> None:
    """Every checker's work is O(n log n) in the events (docs/trust.md): 1000 restarts of one listener with 1000
    connections live at each stop (a million reads missed), a stop that returned False after a teardown, an exit
    hook, an allocator teardown, an armed fault, a stall and a failed start at each, and snapshots of a thousand
    directories beside them, all judged within the child's CPU limit (each pair looked at alone takes minutes)."""
    n = 1000
    hist = _write(tmp_path / "history.jsonl", _forged(n, n))
    dirs = [{"path": f"/r/d{i}", "kind": "dir", "ino": i} for i in range(n)]
    socks = [{"path": f"/r/{i}.sock", "kind": "socket", "ino": i} for i in range(n)]
    snaps = {"before": {"label": "before", "t_ns": T0}, **{
        label: {"label": label, "t_ns": T0 + 10**12, "paths": [*dirs, *socks[k:]]}
        for k, label in enumerate(["after", *(f"after{k}" for k in range(1, 30))])}}
    (tmp_path / "snapshots.json").write_text(json.dumps(snaps))
    proc = _report(hist)
    assert proc.returncode == 1, proc.stderr[-2000:]  # violations found, not a child killed at its limit
    assert "VIOLATED reads_cancelled: 1000000 read(s) in progress at stop were not cancelled within 2.0s" in proc.stdout
    for name in ("handler_drained", "retained_for_retry", "teardown_deferred", "registration_kept",
                 "exit_hook_stops_the_rest", "fault_fired", "served_while_stalled", "failed_start_never_serves",
                 "engine_exit_status", "engine_start_ends", "exit_without_stall", "no_leftover_paths",
                 "unlinks_only_own_socket"):
        assert f"VIOLATED {name}: " in proc.stdout, name
    verdicts = json.loads((tmp_path / "out" / "verdicts.json").read_text())["verdicts"]
    drained = next(v for v in verdicts if v["checker"] == "handler_drained")
    assert len(drained["evidence"]) == 100 and any("collected up to 1000" in x for x in drained["notes"])


def test_text_of_a_file_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    evil = "\x1b]0;owned\x07\x1b[2J\u202e"
    hist = _write(tmp_path / "history.jsonl", [_event(0, thread=evil, rank=evil), "not json" + evil])
    (tmp_path / "verdicts.json").write_text(json.dumps({"scenario": evil, "variant": evil}))
    proc = _report(hist)
    assert proc.returncode in (0, 1), proc.stderr
    out = proc.stdout + proc.stderr
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    assert "\\x1b]0;owned\\x07\\x1b[2J\\u202e" in out


# ------------------------------------------------------------------------------------------------ the fuzzer
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=False), st.text(max_size=12))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                    max_leaves=8)
KINDS = ["listener_started", "stop_started", "stop_returned", "accepted", "frame_started", "frame_completed",
         "dispatch_started", "dispatch_finished", "connection_closed", "reads_cancelled", "drain_started",
         "drain_finished", "teardown_step", "step_started", "step_returned", "process_exited", "fault_reached",
         "watchdog_fired", "exit_hook_started", "exit_hook_finished", "engine_ready", "stacks", "made_up"]
DATA_KEYS = ["listener", "conn", "ok", "step", "kind", "category", "value", "status", "conns", "site", "hit",
             "left", "deadline_s", "cmd", "text", "pid", "label"]
EVENTS = st.fixed_dictionaries({
    "t_ns": st.one_of(st.integers(T0, T0 + 10**9), JSON), "pid": st.one_of(st.integers(1, 9), JSON),
    "role": st.sampled_from(["worker", "harness", "engine"]), "rank": st.sampled_from(["", "pp0/rank0", "pp0/rank1"]),
    "thread": st.sampled_from(["t", "MainThread", ""]), "kind": st.sampled_from(KINDS),
    "data": st.one_of(st.dictionaries(st.sampled_from(DATA_KEYS), JSON, max_size=5), JSON),
    "v": st.sampled_from([1, 2, 3, "2"])})
LINES = st.lists(st.one_of(EVENTS, JSON, st.text(max_size=20)), max_size=25)
META_KEYS = ["scenario", "matrix", "variant", "run_id", "nodeid", "target", "outcome", "step_error", "broken",
             "seconds", "scale", "expect", "verdicts", "absent", "passed", "params"]
EXPECT = st.lists(st.fixed_dictionaries({"checker": st.sampled_from(["close_reasons", "stop_result", "no_such",
                                                                      "no_late_dispatch", "stop_latency"]),
                                         "params": st.one_of(st.dictionaries(st.sampled_from(
                                             ["step", "within", "phase", "x"]), JSON, max_size=2), JSON)}),
                  max_size=4)
META = st.one_of(st.dictionaries(st.sampled_from(META_KEYS), st.one_of(JSON, EXPECT), max_size=8), JSON)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=LINES, meta=st.one_of(st.none(), META))
def test_lastcall_report_ends_with_0_1_or_2_on_any_history_and_verdicts(lines: list[Any], meta: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        hist = _write(Path(tmp) / "history.jsonl", [x if isinstance(x, str) else json.dumps(x) for x in lines])
        if meta is not None:
            (Path(tmp) / "verdicts.json").write_text(json.dumps(meta))
        rc = main(["report", str(hist), "--out", str(Path(tmp) / "out")])
    assert rc in (0, 1, 2)
