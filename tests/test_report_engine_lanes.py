"""An engine run's page: a lane per process of the tree with its life (launched, ready, signalled, exited or
survived) and a bar per request from its send to its end, coloured by how it ended."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from harness.history import Event
from harness.report.engine_lanes import engine_rows
from harness.report.timeline import svg_timeline
from harness.report.write import write_run
from harness.scenario import load
from harness.scenario.loader import expand
from harness.scenario.runner import run_item

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


class Shapes(HTMLParser):
    """Every start tag with its attributes, and the view (the svg's data-view) it is in."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.found: list[dict[str, str]] = []
        self.view = ""
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.view = a.get("data-view", self.view) if tag == "svg" else self.view
        self.found.append({**a, "(tag)": tag, "(view)": self.view})

    def kind(self, kind: str, view: str = "whole") -> list[dict[str, str]]:
        return [a for a in self.found if a.get("data-kind") == kind and a["(view)"] == view]


def test_a_standin_runs_page_has_a_lane_per_process_and_a_bar_per_request(tmp_path: Path) -> None:
    result = run_item(expand(load(str(SCENARIOS / "engine-late-request-refused.yaml")))[0])
    page = write_run(result, tmp_path)
    assert page is not None
    shapes = Shapes(page.read_text())
    ready = next(e for e in result.events if e.kind == "engine_ready")
    t0 = min(e.t_ns for e in result.events)
    pids = [str(m["pid"]) for m in ready.data["members"]]
    assert len(pids) == 3
    assert [a["data-pid"] for a in shapes.kind("engine-lane") if a["(tag)"] == "rect"] == pids
    lives = {a["data-pid"]: a for a in shapes.kind("process-life")}
    assert set(lives) == set(pids) and {a["data-end"] for a in lives.values()} == {"exited"}
    exits = {str(e.data["pid"]): e.t_ns for e in result.events if e.kind == "engine_process_exited"}
    assert set(exits) == set(pids)
    for pid, life in lives.items():
        assert abs(float(life["data-t-end-ms"]) - (exits[pid] - t0) / 1e6) < 0.002
        assert "life" in life["class"].split() and "exited" in life["class"].split()
    assert {a["data-pid"] for a in shapes.kind("process-ready")} == set(pids)
    assert {a["data-pid"] for a in shapes.kind("process-exited")} == set(pids)
    signalled = shapes.kind("process-signalled")
    assert [(a["data-pid"], a["data-sig"]) for a in signalled] == [(pids[0], "SIGTERM")]
    requests = {a["data-step"]: a for a in shapes.kind("request")}
    assert set(requests) == {"s1", "late"}
    assert (requests["s1"]["data-outcome"], requests["s1"]["data-end"]) == ("aborted", "aborted")
    assert (requests["late"]["data-outcome"], requests["late"]["data-end"]) == ("refused", "aborted")
    sent = {e.data["step"]: e.t_ns for e in result.events
            if e.kind == "step_started" and e.data.get("kind") == "engine_request"}
    for step, bar in requests.items():
        assert abs(float(bar["data-t-ms"]) - (sent[step] - t0) / 1e6) < 0.002
        assert float(bar["data-t-end-ms"]) > float(bar["data-t-ms"])


def _e(t_ms: float, event: str, **data: object) -> Event:
    return Event(int(t_ms * 1e6), 1, "harness", "", "MainThread", event, dict(data))


MEMBERS = [{"pid": 10, "ppid": 1, "name": "python"}, {"pid": 11, "ppid": 10, "name": "VLLM::EngineCor"},
           {"pid": 12, "ppid": 11, "name": "VLLM::Worker"}]
HISTORY = [
    _e(0, "run_started"), _e(1, "engine_launched", pid=10, port=1, launch=0),
    _e(5, "engine_ready", pid=10, ready_s=0.004, members=MEMBERS),
    _e(6, "step_started", step="ok", kind="engine_request"),
    _e(7, "step_started", step="stuck", kind="engine_request"),
    _e(8, "step_started", step="lost", kind="engine_request"),
    _e(9, "step_returned", step="ok", kind="engine_request", value={"outcome": "complete"}),
    _e(10, "step_started", step="term", kind="engine_signal", pid=10, sig="SIGTERM", process="api_server",
       members=MEMBERS),
    _e(12, "engine_process_exited", pid=10, name="python"), _e(13, "engine_process_exited", pid=11, name="x"),
    _e(20, "step_returned", step="stuck", kind="engine_request", value={"outcome": "hung"}),
    _e(30, "step_returned", step="gone", kind="wait_gone", value={"gone": False, "survivors": [MEMBERS[2]]}),
    _e(31, "engine_process_exited", pid=12, name="VLLM::Worker"),
    _e(32, "engine_closed", killed=[], terminated=[MEMBERS[2]]),
    _e(33, "engine_launched", pid=20, port=1, launch=1), _e(34, "engine_start_failed", error="port", launch=1),
    _e(35, "engine_launched", pid=30, port=1, launch=2),
    _e(36, "engine_start_failed", error="not ready", launch=2, hung=True), _e(40, "run_ended"),
]


def test_a_survivor_is_drawn_to_the_end_and_an_unanswered_request_as_hung() -> None:
    rows = engine_rows(HISTORY)
    assert {p: (life.end, life.ended) for p, life in rows.lives.items()} == {
        10: ("exited", 12_000_000), 11: ("exited", 13_000_000), 12: ("survived", None),
        20: ("exited", 34_000_000), 30: ("closed", 36_000_000)}
    assert rows.lives[10].name == "api_server" and rows.lives[10].signals == [(10_000_000, "SIGTERM")]
    assert {s: (r.end, r.outcome) for s, r in rows.requests.items()} == {
        "ok": ("answered", "complete"), "stuck": ("hung", "hung"), "lost": ("hung", "no answer")}
    shapes = Shapes(svg_timeline(HISTORY))
    lives = {a["data-pid"]: a for a in shapes.kind("process-life")}
    assert lives["12"]["data-end"] == "survived" and lives["12"]["data-t-end-ms"] == "40.000"
    assert lives["10"]["data-t-ms"] == "1.000" and lives["10"]["data-t-end-ms"] == "12.000"
    bars = {a["data-step"]: a for a in shapes.kind("request")}
    assert {s: a["class"] for s, a in bars.items()} == {"ok": "request answered", "stuck": "request hung",
                                                        "lost": "request hung"}
    assert bars["lost"]["data-t-end-ms"] == "40.000" and bars["ok"]["data-t-end-ms"] == "9.000"


def test_a_run_without_an_engine_has_no_engine_lanes() -> None:
    shapes = Shapes(svg_timeline([_e(0, "stop_started"), _e(1, "stop_returned", ok=True)]))
    assert not [a for a in shapes.found if a.get("data-kind") in ("engine-lane", "process-life", "request")]


def test_engine_events_of_any_shape_draw_what_they_can() -> None:
    """A history is read as it was written: wrong-shaped engine data leaves its lane out, never the page."""
    bad = [_e(0, "engine_launched", pid=[1]), _e(1, "engine_ready", pid=10, members={"pid": 1}),
           _e(2, "engine_ready", pid=10, members=[3, {"pid": "x"}, {"pid": 7, "name": "<b>w</b>"}]),
           _e(3, "engine_process_exited", pid=[7]), _e(4, "engine_closed", killed=5, terminated=[[1]]),
           _e(5, "step_started", step="g", kind="engine_signal", pid=7, sig="<i>", members="all"),
           _e(6, "step_returned", step="gone", kind="wait_gone", value={"survivors": {"pid": 7}}),
           _e(7, "step_started", step={"a": 1}, kind="engine_request"),
           _e(8, "step_returned", step={"a": 1}, kind="engine_request", value="done")]
    svg = svg_timeline(bad)
    assert list(engine_rows(bad).lives) == [7] and "<b>w" not in svg and "&lt;b&gt;w&lt;/b&gt;" in svg
    assert 'data-sig="&lt;i&gt;"' in svg and Shapes(svg).kind("request")[0]["data-outcome"] == "?"
