"""What a CI gating job relies on: JUnit output with the violated invariants, replay, and a page a
person can read, checked in a real headless browser (Chromium; skipped with a reason where it is
missing, a failure when CI=true)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from harness.report.timeline import FOCUS_MAX

pytest_plugins = ["pytester"]

# no_conn_tracking cancels the stalled read only when the drain ends, after the wait for its close gave up:
# 30 ms here (not 1 s), so reads_cancelled is held to 10 ms (not 500), and the stop is short beside the
# run (its start and the processes' exits): the page must open on it. With 100 ms the stop was 104 ms of a
# 180 ms run on a quiet machine, near the timeline's 75 % (FOCUS_MAX), and over it in 2 of 3 quiet default runs
SCENARIO = Path("scenarios/stalled-read-is-cancelled.yaml").read_text().replace(
    "topology: {tp: [1, 2], pp: 1, device: [cpu, cuda]}", "topology: {tp: 1, pp: 1}").replace(
    "wait: {closed: r1, timeout: 1s}", "wait: {closed: r1, timeout: 30ms}").replace(
    "reads_cancelled: {within: 500ms}", "reads_cancelled: {within: 10ms}")
# of the run: the widest axis the page opens on (the timeline's own rule: a wider focus is no focus). Not a
# smaller fraction: how much of a run its stop takes depends on how fast the processes start and exit here
FOCUS_AT_MOST = FOCUS_MAX
assert "timeout: 30ms" in SCENARIO and "within: 10ms" in SCENARIO


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One failing scenario run (the reference scenario against no_conn_tracking) with JUnit and reports."""
    d = tmp_path_factory.mktemp("gating")
    (d / "stalled.yaml").write_text(SCENARIO)
    (d / "pytest.ini").write_text("[pytest]\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "stalled.yaml", "-k", "not catches", "-p",
                           "no:cacheprovider", "--lastcall-target", "no_conn_tracking", "--junitxml=junit.xml",
                           "--lastcall-reports=reports"], cwd=d, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return d


def _run_dir(d: Path) -> Path:
    runs = sorted((p for p in (d / "reports").iterdir() if (p / "verdicts.json").exists()),
                  key=lambda p: (p / "verdicts.json").stat().st_mtime)
    assert runs, "the failing run wrote no report"
    return runs[0]  # the run of the fixture (a replay adds its own later)


def test_junit_carries_the_violated_invariants(failed_run: Path) -> None:
    root = ET.parse(failed_run / "junit.xml").getroot()
    cases = root.iter("testcase")
    case = next(c for c in cases if c.get("name") == "stalled-read-is-cancelled[tp1-pp1-cpu]")
    assert case.get("classname") == "stalled.yaml"
    failure = case.find("failure")
    assert failure is not None
    text = (failure.get("message") or "") + (failure.text or "")
    assert "VIOLATED reads_cancelled" in text and "evidence:" in text
    # the replay reruns what failed, from any directory: the run's report, which holds the session's target
    assert f"replay: lastcall replay {_run_dir(failed_run).absolute()}" in text.splitlines()


@pytest.mark.parametrize("where", ["the run's directory", "elsewhere"])
def test_replay_reruns_the_failing_item(failed_run: Path, where: str, tmp_path: Path) -> None:
    """From the directory the run started in, and from another one (the file found by --path): the item on the
    session's target, not on the file's own."""
    given = [] if where == "the run's directory" else ["--path", str(failed_run)]
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "replay", str(_run_dir(failed_run)), *given],
                          cwd=failed_run if not given else tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"lastcall replay: {failed_run.resolve() / 'stalled.yaml'}::stalled-read-is-cancelled[tp1-pp1-cpu] " \
           "--target no_conn_tracking" in proc.stdout
    assert "1 failed" in proc.stdout


class Dom(HTMLParser):
    """The start tags of a DOM with their attributes, the tags each is inside, and its <title> text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str]]] = []
        self.open: list[tuple[str, dict[str, str]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        a["(in)"] = " ".join(t + ("[open]" if "open" in o else "") for t, o in self.open)
        a["(svg)"] = next((o.get("data-view", "") for t, o in reversed(self.open) if t == "svg"), "")
        self.found.append((tag, a))
        if tag not in ("meta", "br", "link"):
            self.open.append((tag, a))

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            if self.open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        if len(self.open) > 1 and self.open[-1][0] == "title":
            self.open[-2][1]["(title)"] = self.open[-2][1].get("(title)", "") + data

    def all(self, tag: str, cls: str) -> list[dict[str, str]]:
        return [a for t, a in self.found if t == tag and cls in a.get("class", "").split()]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _png_pixels(data: bytes) -> Any:
    """The pixels of a non-interlaced 8-bit RGB(A) PNG, unfiltered: an array of (height, width, channels).
    Rows filtered None, Sub or Up (Chromium's screenshots: almost every row is Up) are undone with numpy, whole
    rows at once; Average and Paeth, which depend on the byte to the left as it is being undone, byte by byte
    (a pure-Python decode of every byte of a 1400x1000 screenshot was 1.6 s of the test)."""
    import numpy as np

    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = channels = 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8
            channels = {2: 3, 6: 4}[color]
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    stride = width * channels
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, stride + 1)
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        f, line = int(raw[y, 0]), raw[y, 1:]
        if f == 0:
            row = line.copy()
        elif f == 1:  # Sub: each byte adds the undone byte one pixel to the left, a running sum per channel
            row = (line.reshape(width, channels).astype(np.uint64).cumsum(axis=0) & 0xFF).astype(np.uint8).ravel()
        elif f == 2:  # Up
            row = line + prev  # uint8 arithmetic wraps, as the filter's does
        else:
            cur, up = bytearray(line.tobytes()), prev.tobytes()
            for i in range(stride):
                a = cur[i - channels] if i >= channels else 0
                b, c = up[i], up[i - channels] if i >= channels else 0
                if f == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                cur[i] = (cur[i] + pred) & 0xFF
            row = np.frombuffer(bytes(cur), dtype=np.uint8)
        out[y] = row
        prev = out[y]
    return out.reshape(height, width, channels)


# A stored run of the same scenario on the same bug (recorded by the fixture's command, its files as the run wrote
# them): the page `lastcall report` rebuilds from it has a focus whatever this machine's speed. A fresh run's does
# not: its stop and evidence were 58 to 61 % of a 65 to 71 ms run here, the page opens on a focus only up to
# FOCUS_MAX (75 %), and the fixture's page opened on the whole run in one of four default runs. So the
# fresh run's page is held to what its own history calls for, and the layout of a focus to the stored one.
STORED = Path(__file__).resolve().parent.parent / "fixtures" / "histories" / "gating-stalled-read"


def _dump_dom(flags: list[str], page: Path) -> Dom:
    done = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    dom = done.stdout
    assert dom, f"Chromium dumped nothing (status {done.returncode}): {done.stderr[-2000:]}"
    assert "<svg" in dom and 'class="timeline' in dom
    assert 'class="violation evidence' in dom or "violation evidence" in dom  # the evidence drawn on the timeline
    assert "marker stop_started" in dom and "marker stop_returned" in dom
    return Dom(dom)


def _views(history: Path, verdicts: Path) -> list[str]:
    """The views a run's history calls for: a focus first where the stop and its evidence (as the page marks it,
    harness.report.html.evidence_of) are at most FOCUS_MAX of the run (harness.report.timeline.focus)."""
    from harness.checkers import Verdict
    from harness.history import Event, read_jsonl
    from harness.report.html import evidence_of
    from harness.report.timeline import focus

    evs, _ = read_jsonl(history)
    judged = [Verdict(v["checker"], v["status"], v["message"], tuple(Event(**e) for e in v.get("evidence", [])))
              for v in json.loads(verdicts.read_text())["verdicts"]]
    return ["focus", "whole"] if focus(evs, evidence_of(judged)) is not None else ["whole"]


def _browser() -> str:
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must check the report page in Chromium: install the chromium package (.ci/run does)")
        pytest.skip("no Chromium on this machine (apt-get install chromium); CI runs this test")
    return browser


def _flags(browser: str, tmp_path: Path) -> list[str]:
    # --disable-dev-shm-usage: a container's /dev/shm is small, and Chromium that runs out there dies with an
    # empty DOM (a clean-clone CI run saw one); its status and stderr go in the message if it dies all the same
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}"]


@pytest.mark.slow
def test_report_page_in_a_headless_browser(failed_run: Path, tmp_path: Path) -> None:
    browser = _browser()
    flags = _flags(browser, tmp_path)
    # the fixture's fresh run: its page shows the timeline, the evidence and the stop, on the views its history
    # calls for
    fresh = _run_dir(failed_run) / "index.html"
    views = [v["data-view"] for v in _dump_dom(flags, fresh).all("svg", "timeline")]
    assert views == _views(fresh.parent / "history.jsonl", fresh.parent / "verdicts.json"), views
    # the stored run, its page rebuilt by `lastcall report`: the page opens on the stop
    out = subprocess.run([sys.executable, "-m", "harness.cli", "report", str(STORED / "history.jsonl"), "--out",
                          str(tmp_path / "stored")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "VIOLATED reads_cancelled" in out.stdout, out.stdout + out.stderr
    page = tmp_path / "stored" / "index.html"
    assert _views(STORED / "history.jsonl", page.parent / "verdicts.json") == ["focus", "whole"]
    # The page opens on the stop: the first timeline, outside any <details>, is the focus; the whole run is
    # in a closed <details> below it (a click on its summary opens it, no script)
    found = _dump_dom(flags, page)
    views = found.all("svg", "timeline")
    assert [v["data-view"] for v in views] == ["focus", "whole"], [v.get("class") for v in views]
    assert "details" not in views[0]["(in)"] and "details" in views[1]["(in)"] and "[open]" not in views[1]["(in)"]
    assert [a for t, a in found.found if t == "summary" and a["(in)"].endswith("details")]
    t0, t1, run_ms = float(views[0]["data-t0-ms"]), float(views[0]["data-t1-ms"]), float(views[1]["data-run-ms"])
    assert 0 < t1 - t0 < FOCUS_AT_MOST * run_ms, (t0, t1, run_ms)  # the stop fills the axis, not a sliver of it
    ticks = [float(a["data-ms"]) for a in found.all("text", "tick-label") if a["(svg)"] == "focus"]
    assert len(ticks) >= 3 and all(t0 <= t <= t1 for t in ticks) and ticks[-1] - ticks[0] >= (t1 - t0) / 2, ticks
    stop = [float(a["data-t-ms"]) for a in found.all("line", "stop_started") if a["(svg)"] == "focus"]
    assert stop and t0 <= stop[0] <= t1
    markers = found.all("line", "marker")
    assert markers and all(a["data-kind"] in a.get("(title)", "") and f"@ {a['data-t-ms']} ms" in a["(title)"]
                           for a in markers), [a.get("(title)") for a in markers]
    shot = tmp_path / "page.png"
    subprocess.run([*flags, "--window-size=1400,1000", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120)
    px = _png_pixels(shot.read_bytes())
    red = int(((px[..., 0] > 180) & (px[..., 1] < 80) & (px[..., 2] < 90)).sum())
    assert red > 20, f"the violation (drawn in red) is not visible in the rendered page ({red} red pixels)"


@pytest.mark.slow
def test_an_engine_runs_page_in_a_headless_browser(tmp_path: Path) -> None:
    """An engine run on the stand-in (a survivor planted: engine_keeps_child): as Chromium reads its page, a lane
    per process of the tree with its life, the worker's drawn to the end as survived, the signal on the API
    server's lane, and the request's bar answered."""
    from harness.report.write import write_run
    from harness.scenario import load
    from harness.scenario.loader import expand
    from harness.scenario.runner import run_item

    flags = _flags(_browser(), tmp_path)
    result = run_item(expand(load("scenarios/engine-sigterm-idle.yaml"))[0], variant="engine_keeps_child")
    page = write_run(result, tmp_path / "reports")
    assert page is not None
    done = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert "<svg" in done.stdout, f"Chromium dumped nothing (status {done.returncode}): {done.stderr[-2000:]}"
    dom = Dom(done.stdout)
    whole = [{**a, "(tag)": t} for t, a in dom.found if a["(svg)"] == "whole"]
    ready = next(e for e in result.events if e.kind == "engine_ready")
    pids = [str(m["pid"]) for m in ready.data["members"]]
    lanes = [a["data-pid"] for a in whole if a.get("data-kind") == "engine-lane" and a["(tag)"] == "rect"]
    assert lanes[:3] == pids, lanes
    lives = {a["data-pid"]: a for a in whole if a.get("data-kind") == "process-life"}
    assert [lives[p]["data-end"] for p in pids] == ["exited", "exited", "survived"], lives
    run_ms = float(next(v for v in dom.all("svg", "timeline") if v["data-view"] == "whole")["data-run-ms"])
    assert float(lives[pids[2]]["data-t-end-ms"]) == run_ms
    assert "survived" in lives[pids[2]].get("(title)", ""), lives[pids[2]]
    signals = [(a["data-pid"], a["data-sig"]) for a in whole if a.get("data-kind") == "process-signalled"]
    assert signals == [(pids[0], "SIGTERM")], signals
    bars = [a for a in whole if a.get("data-kind") == "request"]
    assert [(b["data-step"], b["data-end"]) for b in bars] == [("r1", "answered")]
    assert "sent @" in bars[0]["(title)"] and "complete @" in bars[0]["(title)"]
