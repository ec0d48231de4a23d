"""Reports: the run directory, the HTML timeline, `lastcall report` re-judging, the session summary."""

from __future__ import annotations

import json
from html import escape
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.checkers import RunRecord, judge
from harness.cli import main
from harness.history import Event
from harness.launch.cluster import RunOutcome
from harness.probes.model import PathEntry, Snapshot
from harness.report.reportsdir import RUN_MARKER, RUN_MARKER_TEXT
from harness.report.summary import SessionRun, collect_runs, write_summary
from harness.report.summary import _failed_line as failed_line
from harness.report.write import ReportWarning, write_run
from harness.scenario.loader import expand, load
from harness.scenario.report import failure_text
from harness.scenario.result import RunResult

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "good-scenario.yaml"
NODEID = "scenarios/stalled-read-is-cancelled.yaml::stalled-read-is-cancelled[tp1-pp1-cpu]"
W, H = 4242, 1000  # the worker's and the harness's pids
MS = 1_000_000


def ev(ms: float, kind: str, /, *, pid: int = W, thread: str = "lastcall-listener-pp0/rank0", **data: Any) -> Event:
    if pid == W:
        data.setdefault("listener", "pp0/rank0")
        return Event(int(1e12 + ms * MS), pid, "worker", "pp0/rank0", thread, kind, data)
    return Event(int(1e12 + ms * MS), pid, "harness", "", thread, kind, data)


def history(*, hung: bool = False) -> list[Event]:
    main_t = "MainThread"
    evs = [
        ev(0, "listener_started", thread=main_t),
        Event(int(1e12 + MS), H, "harness", "", main_t, "armed",
              {"step": "f1", "site": "backend.map_to_kv_tensors", "pid": W, "since_ns": 0}),
        ev(2, "accepted", conn=1), ev(3, "frame_started", conn=1), ev(4, "frame_completed", conn=1),
        ev(5, "dispatch_started", conn=1, cmd="map_to_kv_tensors"),
        ev(6, "fault_reached", site="backend.map_to_kv_tensors", hit=1),
        ev(7, "accepted", conn=2), ev(8, "frame_started", conn=2),
        ev(9, "step_started", pid=H, thread=main_t, step="s1", kind="stop"),
        ev(10, "stop_started", thread=main_t), ev(11, "drain_started", thread=main_t, timeout=0.5),
        ev(12, "fault_released", site="backend.map_to_kv_tensors", hits=1),
        ev(13, "dispatch_finished", conn=1, cmd="map_to_kv_tensors", status="success"),
        ev(14, "drain_finished", thread=main_t, ok=True),
        ev(15, "teardown_step", thread=main_t, step="close"), ev(16, "teardown_step", thread=main_t, step="unlink"),
        ev(17, "stop_returned", thread=main_t, ok=True),
        ev(18, "step_returned", pid=H, thread="lastcall-step-s1", step="s1", kind="stop", ok=True, value=True),
        ev(25, "frame_completed", conn=2, after_stop=True),
        ev(26, "dispatch_started", conn=2, cmd="<script>alert(1)</script>"),  # late, and hostile text
        ev(27, "dispatch_finished", conn=2, cmd="x", status="success"),
    ]
    if hung:
        evs.append(ev(40, "watchdog_fired", pid=H, thread="lastcall-watchdog", deadline_s=30))
    status = -9 if hung else 0
    evs.append(Event(int(1e12 + 50 * MS), W, "worker", "pp0/rank0", "", "process_exited", {"status": status}))
    return evs


def make_result(*, hung: bool = False) -> RunResult:
    item = expand(load(str(FIXTURE)))[0]
    events = history(hung=hung)
    snaps = {"before": Snapshot("before", 1), "after": Snapshot("after", 2, paths=(PathEntry("/tmp/x", "dir", 3),))}
    record = RunRecord(tuple(events), snaps)
    verdicts = [judge(e.checker, record, e.params) for e in item.scenario.expect]
    outcome = RunOutcome(status="hung", stacks={"pp0/rank0": 'Thread 0x7f (most recent call first):\n  File '
                                                "\"listener.py\", line 99 in <drain> & wait"},
                         exits={"pp0/rank0": -9}, leftovers=["/tmp/lc-1x/w0.sock"]) if hung else RunOutcome()
    return RunResult(item, "reference", "4242xabc123", verdicts, outcome, events, snaps, seconds=1.5)


class Elements(HTMLParser):
    """Every start tag of a page with its attributes, in order; each also gets ``(view)``, the data-view of
    the timeline it is in, ``(in)``, the tags it is inside, and ``(title)``, the text of its <title> child."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str]]] = []
        self.open: list[tuple[str, dict[str, str]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        views = [o.get("data-view", "") for t, o in self.open if t == "svg"]
        a["(view)"] = views[-1] if views else ""
        a["(in)"] = " ".join(f"{t}{'.' + o['class'].replace(' ', '.') if o.get('class') else ''}"
                             f"{'[open]' if 'open' in o else ''}" for t, o in self.open)
        self.found.append((tag, a))
        self.open.append((tag, a))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self.open.pop()

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            if self.open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        if len(self.open) > 1 and self.open[-1][0] == "title":
            parent = self.open[-2][1]
            parent["(title)"] = parent.get("(title)", "") + data

    def select(self, tag: str | None = None, *classes: str, view: str | None = None,
               **data: str) -> list[dict[str, str]]:
        return [a for t, a in self.found if (tag is None or t == tag)
                and set(classes) <= set(a.get("class", "").split()) and (view is None or a["(view)"] == view)
                and all(a.get(k.replace("_", "-")) == v for k, v in data.items())]


@pytest.fixture
def written(tmp_path: Path) -> tuple[RunResult, Path]:
    result = make_result()
    page = write_run(result, tmp_path / "reports", nodeid=NODEID)
    assert page is not None
    return result, page


def test_run_directory_has_history_snapshots_verdicts_and_page(written: tuple[RunResult, Path]) -> None:
    result, page = written
    run_dir = page.parent
    assert page == run_dir / "index.html" and run_dir.name == "4242xabc123"
    assert sorted(p.name for p in run_dir.iterdir()) == [RUN_MARKER, "history.jsonl", "index.html",
                                                          "snapshots.json", "verdicts.json"]
    assert (run_dir / RUN_MARKER).read_text() == RUN_MARKER_TEXT  # what lastcall prune-reports removes
    assert len((run_dir / "history.jsonl").read_text().splitlines()) == len(result.events)
    snaps = json.loads((run_dir / "snapshots.json").read_text())
    assert Snapshot.from_dict(snaps["after"]) == result.snapshots["after"]


def test_verdicts_json_round_trips(written: tuple[RunResult, Path]) -> None:
    result, page = written
    doc = json.loads((page.parent / "verdicts.json").read_text())
    assert doc["verdicts"] == json.loads(json.dumps([v.to_dict() for v in result.verdicts]))
    assert (doc["scenario"], doc["matrix"], doc["variant"], doc["nodeid"]) == (
        "stalled-read-is-cancelled", "tp1-pp1-cpu", "reference", NODEID)
    assert doc["expect"][0] == {"checker": "stop_result", "params": {"step": "s1", "returns": True}}
    assert [e["checker"] for e in doc["expect"]] == [v.checker for v in result.verdicts]
    assert doc["outcome"]["status"] == "ok" and doc["passed"] is False
    late = next(v for v in doc["verdicts"] if v["checker"] == "no_late_dispatch")
    assert late["status"] == "violated" and [e["kind"] for e in late["evidence"]] == ["stop_started",
                                                                                      "dispatch_started"]


def test_page_draws_the_late_dispatch_in_red_after_stop_returned(written: tuple[RunResult, Path]) -> None:
    text = written[1].read_text()
    assert "<script" not in text.lower().replace("&lt;script", "")  # the hostile cmd is escaped, no scripts
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "https://" not in text and " src=" not in text and "@import" not in text  # nothing is fetched
    page = Elements(text)
    assert [a["data-view"] for a in page.select("svg", "timeline")] == ["focus", "whole"]
    late = page.select("g", "violation", view="whole", data_kind="dispatch_started", data_checker="no_late_dispatch")
    assert len(late) == 1 and late[0]["data-conn"] == "2"
    returned = page.select("line", "marker", "stop_returned", "ok", view="whole", data_ok="true")
    assert len(returned) == 1
    assert float(late[0]["data-t-ms"]) > float(returned[0]["data-t-ms"])
    span = page.select("rect", "span", "dispatch", "violation", view="whole", data_conn="2")
    assert len(span) == 1 and float(span[0]["x"]) > float(returned[0]["x1"])
    assert page.select("line", "marker", "stop_started", "violation")  # stop_started is evidence too
    assert page.select("rect", "span", "dispatch", data_conn="1") and not page.select(
        "rect", "span", "dispatch", "violation", data_conn="1")
    assert [a["data-step"] for a in page.select("rect", "mark", "teardown_step", view="whole")] == ["close", "unlink"]
    assert page.select("rect", "span", "drain", data_ok="True")
    assert page.select("rect", "span", "frame", data_conn="2")
    for kind in ("fault_reached", "fault_released", "process_exited"):
        assert page.select("line", "marker", kind), kind
    lanes = [(a["data-process"], a["data-thread"]) for a in page.select("rect", "lane", view="whole")]
    assert lanes == [("pp0/rank0", "MainThread"), ("pp0/rank0", "lastcall-listener-pp0/rank0"),
                     ("harness", "MainThread"), ("harness", "lastcall-step-s1")]
    assert page.select("div", "verdict", "violated", data_checker="no_late_dispatch")
    assert page.select("span", "badge", "violated") and page.select("span", "badge", "ok")
    assert 'id="text-timeline"' in text
    assert f"lastcall replay {escape(str(written[1].parent.absolute()))}" in text and "lastcall report " in text


DRAWN = (("line", "marker"), ("rect", "span"), ("circle", "event"), ("rect", "mark"), ("g", "evidence"))


def test_the_timeline_opens_on_the_stop_with_the_whole_run_one_click_below(written: tuple[RunResult, Path]) -> None:
    page = Elements(written[1].read_text())
    focus, whole = page.select("svg", "timeline")
    assert (focus["data-view"], whole["data-view"]) == ("focus", "whole")
    assert "details" not in focus["(in)"] and "details.whole-run" in whole["(in)"] and "[open]" not in whole["(in)"]
    assert page.select("summary")[0]["(in)"].endswith("details.whole-run")
    # first fault reached at 6 ms, the late dispatch (evidence) at 26 ms: 20 ms, padded 2 ms each side
    assert (float(focus["data-t0-ms"]), float(focus["data-t1-ms"])) == (4.0, 28.0)
    assert (float(whole["data-t0-ms"]), float(whole["data-t1-ms"])) == (0.0, 50.0) == (0.0, float(
        whole["data-run-ms"]))
    ticks = [float(a["data-ms"]) for a in page.select("text", "tick-label", view="focus")]
    assert ticks == [4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0, 18.0, 20.0, 22.0, 24.0, 26.0, 28.0]
    assert [float(a["data-ms"]) for a in page.select("text", "tick-label", view="whole")][::5] == [0.0, 25.0, 50.0]
    xs = [float(a["x"]) for a in page.select("text", "tick-label", view="focus")]
    assert xs[0] == 300.0 and xs[-1] == 1400.0  # the focus spans the whole plot width
    late = page.select("g", "violation", view="focus", data_kind="dispatch_started")
    assert len(late) == 1 and late[0]["data-t-ms"] == "26.000"  # times of the run, not of the view
    assert page.select("line", "marker", "stop_returned", view="focus")
    assert page.select("rect", "mark", "teardown_step", view="focus")
    for kind in ("process_exited",):  # at 50 ms: outside the focus, in the whole view
        assert not page.select("line", "marker", kind, view="focus") and page.select("line", "marker", kind,
                                                                                   view="whole")
    assert not page.select("circle", "event", view="focus", data_kind="listener_started")  # at 0 ms
    assert all(300.0 <= float(a.get("x", a.get("cx", a.get("x1", "300")))) <= 1400.0
               for t, c in DRAWN for a in page.select(t, c, view="focus") if t != "g")
    band = page.select("rect", "focus-band", view="whole")
    assert len(band) == 1 and not page.select("rect", "focus-band", view="focus")
    assert (float(band[0]["x"]), float(band[0]["width"])) == (300.0 + 4 / 50 * 1100, 24 / 50 * 1100)
    note = page.select("p", "focus-note")
    assert note and "Showing 4.0-28.0 ms of 50.0 ms" in written[1].read_text()


def test_every_drawn_event_says_its_event_and_time_on_hover(written: tuple[RunResult, Path]) -> None:
    page = Elements(written[1].read_text())
    for view in ("focus", "whole"):
        drawn = [a for t, c in DRAWN for a in page.select(t, c, view=view)]
        assert len(drawn) > 10
        for a in drawn:
            title = a.get("(title)", "")
            assert a["data-kind"] in title and f"@ {a['data-t-ms']} ms" in title, (view, a)
        markers = page.select("line", "marker", view=view)
        assert {a["data-kind"] for a in markers} >= {"stop_started", "stop_returned", "fault_reached"}


def test_a_run_without_a_short_stop_has_the_whole_view_only(tmp_path: Path) -> None:
    from harness.report.timeline import focus, timeline_views

    quiet = [e for e in history() if e.kind not in ("fault_reached", "stop_started") and e.data.get("kind") != "stop"]
    assert focus(quiet) is None
    assert 'data-view="focus"' not in timeline_views(quiet) and 'data-view="whole"' in timeline_views(quiet)
    # a hung run: its watchdog (40 ms) is the stop's last event; 6-40 ms is most of the run
    hung = write_run(make_result(hung=True), tmp_path)
    assert hung is not None
    page = Elements(hung.read_text())
    assert [a["data-view"] for a in page.select("svg", "timeline")] == ["whole"] and not page.select("details")
    # a stop that never returned: to the end of the run
    unreturned = [e for e in history() if e.kind not in ("stop_returned", "step_returned")]
    assert focus(unreturned) is None
    assert focus([ev(3, "stop_started"), ev(3, "stop_returned")]) is None  # a run of one instant
    # without evidence: from the fault (6 ms) to the stop step's return (18 ms), padded 1.2 ms
    assert focus(history()) == (int(1e12 + 4.8 * MS), int(1e12 + 19.2 * MS))


def test_the_focus_opens_on_a_kill_or_any_step_of_the_stop_category() -> None:
    from harness.report.timeline import focus

    def run(kind: str, category: str) -> list[Event]:
        steps = [ev(40, "step_started", pid=H, thread="MainThread", step="k", kind=kind, category=category),
                 ev(50, "step_returned", pid=H, thread="MainThread", step="k", kind=kind, category=category, ok=True)]
        return [ev(0, "listener_started"), *steps, ev(100, "process_exited")]

    for kind, category in (("kill", "signal"), ("handshake_shutdown", "stop"), ("exit", "exit")):
        assert focus(run(kind, category)) == (int(1e12 + 39 * MS), int(1e12 + 51 * MS)), kind
    assert focus(run("send", "request")) is None  # not a stop: no focus
    assert focus(run("restart", "start")) is None


def test_lastcall_report_rejudges_to_the_same_verdicts(written: tuple[RunResult, Path],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    result, page = written
    (page.parent / "index.html").unlink()
    assert main(["report", str(page.parent / "history.jsonl")]) == 1
    out = capsys.readouterr().out
    assert "VIOLATED no_late_dispatch: 1 request(s) dispatched after stop began" in out
    assert "judged with the expect list of verdicts.json" in out and "(was " not in out
    doc = json.loads((page.parent / "verdicts.json").read_text())
    assert doc["verdicts"] == json.loads(json.dumps([v.to_dict() for v in result.verdicts]))
    assert doc["scenario"] == "stalled-read-is-cancelled" and doc["history_problems"] == []
    assert Elements(page.read_text()).select("g", "violation", data_kind="dispatch_started")


def test_lastcall_report_judges_what_a_garbled_history_still_holds(written: tuple[RunResult, Path], tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    hist = written[1].parent / "history.jsonl"
    lines = hist.read_text().splitlines()
    lines[2] = '{"t_ns": 1, "kind": garbled'  # the harness's "armed" event
    hist.write_text("\n".join(lines)[:-20])  # the last line (process_exited) torn mid-write
    out_dir = tmp_path / "rebuilt"
    assert main(["report", str(hist), "--out", str(out_dir)]) == 1  # the late dispatch is still readable
    cap = capsys.readouterr()
    assert f"{hist}: 2 lines could not be read: {hist}:3: unreadable line" in cap.err and "torn last line" in cap.err
    assert f"{len(lines) - 2} events" in cap.out and "VIOLATED no_late_dispatch" in cap.out
    page = Elements((out_dir / "index.html").read_text())
    assert len(page.select("li")) >= 2 and page.select("section", "problems", id="problems")
    assert json.loads((out_dir / "verdicts.json").read_text())["history_problems"][0].startswith(f"{hist}:3:")


def test_lastcall_report_without_the_file_is_a_usage_error(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl: no such file" in capsys.readouterr().err


def test_lastcall_report_on_a_bare_history_with_named_checkers(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    hist = tmp_path / "h.jsonl"
    hist.write_text("".join(e.to_json() + "\n" for e in history()))
    assert main(["report", str(hist), "--check", "handler_drained"]) == 0
    assert "ok handler_drained" in capsys.readouterr().out
    assert (tmp_path / "index.html").exists()


def test_a_hung_run_writes_its_page_with_the_stacks(tmp_path: Path) -> None:
    page = write_run(make_result(hung=True), tmp_path)
    assert page is not None
    text = page.read_text()
    found = Elements(text)
    assert found.select("pre", "stacks", data_label="pp0/rank0")
    assert "line 99 in &lt;drain&gt; &amp; wait" in text
    assert found.select("line", "marker", "watchdog_fired") and found.select("span", "badge", "outcome", "hung")
    assert "/tmp/lc-1x/w0.sock" in text and 'id="exits"' in text


def test_write_run_never_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(ReportWarning, match="no report for run 4242xabc123"):
        assert write_run(make_result(), blocker) is None


def test_failure_text_names_the_report_and_the_rejudge_command(written: tuple[RunResult, Path]) -> None:
    result, page = written
    text = failure_text(result, NODEID, page)
    assert f"report: {page}\nre-judge: lastcall report {page.parent / 'history.jsonl'}\nreplay: lastcall replay " \
           f"{page.parent.absolute()}" in text


def test_failure_text_marks_each_event_equal_to_evidence_on_its_timeline() -> None:
    """The timeline marks (>>) the events equal to a violated verdict's evidence, copies read back included, a
    value no dict can hold (a list) in their data too, and no other."""
    from copy import deepcopy

    from harness.checkers import Verdict

    events = [ev(1, "accepted", conn=1), ev(2, "reads_cancelled", conns=[1, [2]], n=2), ev(3, "accepted", conn=2),
              ev(3, "accepted", conn=3)]
    evidence = tuple(deepcopy(events[:2]))  # equal, not the same objects
    result = make_result()
    result.events = events
    result.verdicts = [Verdict("reads_cancelled", "violated", "missed", evidence)]
    marked = [line.split()[4:] for line in failure_text(result).splitlines() if line.startswith(">> ")]
    assert [(kind, sorted(data)) for kind, *data in marked] == [
        ("accepted", ["conn=1", "listener=pp0/rank0"]), ("reads_cancelled", ["listener=pp0/rank0", "n=2"])]


def test_the_replay_works_from_any_directory_and_a_broken_run_says_so(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay line names the report's directory by its absolute path (the report holds the target and the
    scenario's name and sha256, which verdicts.json records of the file's bytes); without a report it names the
    scenario file's absolute path and the session's target override. A broken run (nothing it shows counts) says
    why on the terminal, in verdicts.json, on its page and its row."""
    import hashlib
    import shlex

    result = make_result()
    result.broken = "the harness crashed (KeyError: 'x')"
    monkeypatch.chdir(tmp_path)
    page = write_run(result, "my reports", nodeid=NODEID, target="no_conn_tracking")  # a relative directory
    assert page is not None and not page.is_absolute()
    replay = f"lastcall replay {shlex.quote(str(tmp_path / page.parent))}"
    text = failure_text(result, NODEID, page, "no_conn_tracking")
    assert text.splitlines()[-1] == f"replay: {replay}"
    assert f"broken: {result.broken} (nothing this run shows counts)" in text.splitlines()
    doc = json.loads((page.parent / "verdicts.json").read_text())
    assert (doc["target"], doc["broken"]) == ("no_conn_tracking", result.broken)
    assert doc["scenario_sha256"] == hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
    found = Elements(page.read_text())
    assert found.select("section", "problems", id="broken")
    assert found.select("tr", data_kind="replay")
    assert f"<code>{escape(replay, quote=True)}</code>" in page.read_text()
    assert escape(result.broken, quote=True) in page.read_text()
    summary = write_summary(tmp_path / "my reports", [SessionRun(NODEID, "failed", 1.5, result.run_id, str(page),
                                                                 doc)])
    assert summary is not None and f"ok; broken: {escape(result.broken)}" in summary.read_text()
    # a run that counts: no broken section
    clean = make_result()
    page = write_run(clean, tmp_path / "clean", nodeid=NODEID)
    assert page is not None and not Elements(page.read_text()).select("section", id="broken")
    assert json.loads((page.parent / "verdicts.json").read_text())["broken"] == ""
    assert "broken:" not in failure_text(clean, NODEID, page)
    # reports off: the file's absolute path, and the target override the node id alone would not run
    item = f"{FIXTURE.resolve()}::stalled-read-is-cancelled[tp1-pp1-cpu]"
    assert failure_text(clean, NODEID, None, "no_conn_tracking").splitlines()[-1] == \
        f"replay: lastcall run {shlex.quote(item)} --target no_conn_tracking"


def _rep(nodeid: str, when: str, outcome: str, props: list[tuple[str, str]], duration: float = 1.0) -> Any:
    return SimpleNamespace(nodeid=nodeid, when=when, passed=outcome == "passed", failed=outcome == "failed",
                           skipped=outcome == "skipped", duration=duration, user_properties=props,
                           longreprtext="boom\nmore")


def test_session_summary_and_terminal_lines(written: tuple[RunResult, Path], tmp_path: Path) -> None:
    _, page = written
    props = [("lastcall_run_id", "4242xabc123"), ("lastcall_report", str(page))]
    stats = {"failed": [_rep(NODEID, "call", "failed", props)], "": [_rep(NODEID, "setup", "passed", [])],
             "passed": [_rep("scenarios/b.yaml::b[tp1-pp1-cpu]", "call", "passed", [])],
             "skipped": [_rep("scenarios/c.yaml::c[tp1-pp1-cuda]", "setup", "skipped", [])],
             # set up, then ^C or SIGTERM: no call report. Not a pass.
             "interrupted": [_rep("scenarios/d.yaml::d[tp1-pp1-cpu]", "setup", "passed", [])],
             "error": [SimpleNamespace(nodeid="tests/x.py")], "warnings": [object()],
             "other": [_rep("tests/test_x.py::test_y", "call", "failed", [])]}
    runs = collect_runs(stats)
    assert [(r.nodeid.split("::")[0], r.outcome) for r in runs] == [
        ("scenarios/b.yaml", "passed"), ("scenarios/c.yaml", "skipped"), ("scenarios/d.yaml", "interrupted"),
        (NODEID.split("::")[0], "failed")]
    assert runs[3].seconds == 2.0 and "no_late_dispatch" in runs[3].violated
    summary = write_summary(tmp_path / "reports", runs)
    assert summary is not None
    found = Elements(summary.read_text())
    assert [a["href"] for a in found.select("a")] == ["4242xabc123/index.html"]
    assert found.select("tr", "run", "failed", data_nodeid=NODEID)
    assert "4 scenario runs: 1 passed, 1 failed, 1 skipped, 1 interrupted" in summary.read_text()
    assert found.select("tr", "run", "interrupted", data_nodeid="scenarios/d.yaml::d[tp1-pp1-cpu]")
    assert failed_line(runs[3]).startswith(f"FAILED {NODEID} on reference: violated ")
