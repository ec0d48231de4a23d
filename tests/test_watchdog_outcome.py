"""A hung run says the watchdog ended it and after how long: the outcome keeps the bound the watchdog fired at
(harness.launch.outcome), the page's headline says "hung: watchdog after N s", the failure's first line (pytest's
short summary) what made N, and the page's timeline opens on the hang (harness.report.timeline.hang): from the
last progress to the watchdog, the silence between drawn as a break."""

from __future__ import annotations

import re

import pytest

from harness.history import Event
from harness.launch.outcome import watchdog_reason, watchdog_words
from harness.report.timeline import GAP_W, hang, timeline_views
from tests.test_report import MS, H, ev, history

pytest_plugins = ["pytester"]

# a handler parked for good and a stop whose drain would wait 30 s for it: the watchdog ends the run first
HUNG = """\
name: a-stop-that-hangs
about: a handler parked for good and a stop that waits for it longer than the watchdog allows
catches: [teardown_while_alive]
topology: {tp: 1, pp: 1}
config: {drain_timeout: 30s, deadline: 500ms}
steps:
  - start: cluster
  - arm: {site: backend.map_to_kv_tensors, on: {rank: 0}, action: pause, count: 1, as: f1}
  - call: {op: map, offsets: [0, 2MiB], as: m1}
  - wait: {reached: f1}
  - stop: {on: all, as: s1}
  - wait: {returned: s1, timeout: 60s}
expect:
  - stop_result: {step: s1, returns: true}
"""
ITEM = "a-stop-that-hangs[tp1-pp1-cpu]"


@pytest.mark.parametrize(("bound", "reason"), [
    ({"deadline_s": 60.0, "config_s": 60.0, "scale": 1.0, "launches": 0, "launch_s": 0.0},
     "hung: the watchdog ended the run after 60 s (config.deadline 60 s)"),
    ({"deadline_s": 2.5, "config_s": 1.0, "scale": 2.5},
     "hung: the watchdog ended the run after 2.5 s (config.deadline 1 s x LASTCALL_TIMEOUT_SCALE 2.5)"),
    ({"deadline_s": 80.0, "config_s": 60.0, "scale": 1.0, "launches": 2, "launch_s": 10.0},
     "hung: the watchdog ended the run after 80 s (config.deadline 60 s + 2 engine launches x 10 s)"),
    ({"deadline_s": 90.0, "config_s": 90.0, "scale": 1.0, "scenarios": 3},
     "hung: the watchdog ended the run after 90 s (config.deadline 90 s, the sum of the chained run's 3 "
     "scenarios')"),
    ({"deadline_s": 0.25}, "hung: the watchdog ended the run after 0.25 s"),
    ({}, ""), ({"deadline_s": "soon"}, ""), ({"deadline_s": True}, ""),  # no bound (or a bad one): no number
])
def test_the_watchdogs_reason_says_what_made_its_bound(bound: dict[str, object], reason: str) -> None:
    assert watchdog_reason(bound) == reason
    assert watchdog_words(bound) == (re.sub(r"the watchdog ended the run after (\S+ s).*", r"watchdog after \1",
                                            reason) if reason else "")


def _hung_history() -> list[Event]:
    """The stop of tests.test_report's history, its watchdog 2 s later: 2 s of silence, then the kill."""
    evs = [e for e in history() if e.kind != "process_exited"]
    evs.append(ev(2000, "watchdog_fired", pid=H, thread="lastcall-watchdog", deadline_s=2.0))
    evs.append(Event(int(1e12 + 2010 * MS), 4242, "worker", "pp0/rank0", "", "process_exited", {"status": -9}))
    return evs


def test_a_hung_runs_timeline_opens_on_its_last_progress_and_the_watchdog() -> None:
    evs = _hung_history()
    found = hang(evs)
    assert found is not None
    (lo, hi), gap = found
    t = lambda ms: int(1e12 + ms * MS)  # noqa: E731
    # from the first fault (6 ms), which led into the last progress (27 ms), to the kill after the watchdog
    assert t(0) < lo < t(6) and hi == t(2010)
    assert gap is not None and t(27) < gap[0] < t(35) and t(1990) < gap[1] < t(2000)
    page = timeline_views(evs)
    focus = page.split('<details id="whole-run"')[0]
    assert 'data-view="focus"' in focus and 'class="gap"' in focus
    assert "the hang: from its last progress to the watchdog firing and the kill" in focus
    assert 'class="marker watchdog_fired' in focus and 'class="span dispatch' in focus
    ticks = [float(ms) for ms in re.findall(r'class="tick-label" data-ms="([^"]+)"', focus)]
    assert ticks and not [ms for ms in ticks if gap[0] < t(ms) < gap[1]]  # no tick inside the break
    (fired,) = [float(x) for x in re.findall(r'<line class="marker watchdog_fired[^>]* x1="([\d.]+)"', focus)]
    (broken,) = [float(x) for x in re.findall(r'<rect class="gap"[^>]* x="([\d.]+)"', focus)]
    # the 27 ms before the break and the 10 ms after it to scale, the 2 s of silence one GAP_W wide
    assert broken > 900 and broken + GAP_W < fired < 1300


def test_a_short_hang_is_drawn_to_scale_and_a_run_that_never_hung_has_none() -> None:
    assert hang(history()) is None  # no watchdog
    # a run 200 ms long before its stop, whose watchdog fired 13 ms after its last progress (27 ms)
    quick = [ev(-200, "process_resources", thread="MainThread"), *history()[:-1],
             ev(40, "watchdog_fired", pid=H, thread="lastcall-watchdog", deadline_s=0.24),
             Event(int(1e12 + 45 * MS), 4242, "worker", "pp0/rank0", "", "process_exited", {"status": -9})]
    found = hang(quick)
    assert found is not None and found[1] is None  # 13 ms of 39: drawn to scale, no break
    assert int(1e12 + 3 * MS) < found[0][0] < int(1e12 + 6 * MS) and found[0][1] == int(1e12 + 45 * MS)
    assert 'class="gap"' not in timeline_views(quick) and 'data-view="focus"' in timeline_views(quick)


@pytest.mark.slow  # a real run waits out its watchdog, 1 s
def test_a_hung_run_says_the_watchdog_ended_it_on_the_page_and_in_the_terminal(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    (pytester.path / "s.yaml").write_text(HUNG)
    monkeypatch.setenv("LASTCALL_TIMEOUT_SCALE", "2")  # 500 ms x 2: the bound applied is 1 s
    monkeypatch.setenv("COLUMNS", "400")  # the short summary's line is not cut at the terminal's width
    reports = pytester.path / "reports"
    result = pytester.runpytest_subprocess("s.yaml", "-k", "not catches", f"--lastcall-reports={reports}",
                                           "-p", "no:cacheprovider", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    said = "hung: the watchdog ended the run after 1 s (config.deadline 0.5 s x LASTCALL_TIMEOUT_SCALE 2)"
    item = ITEM.replace("[", "[[]")  # fnmatch's own brackets
    result.stdout.fnmatch_lines([f"scenario {item} on reference: {said}, *s, run *",
                                 f"FAILED s.yaml::{item} - scenario {item} on reference: {said}, *"])
    (page,) = reports.glob("*/index.html")
    assert '<span data-kind="outcome-words">hung: watchdog after 1 s</span>' in page.read_text()
    assert 'class="gap"' in page.read_text()  # its timeline opens on the hang
