"""Every session's page is kept (harness.report.sessions): ``reports/index.html`` shows this session's runs and
links the earlier sessions' pages under ``reports/sessions/``, newest first and bounded; an earlier record is
data, and one that is not a record lastcall wrote is left out with a line, never an error of the session. A
second real session, and a ``lastcall replay``, each list themselves and keep the first one's page."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lc_helpers import ROOT

from harness.report import sessions
from harness.report.reportsdir import mark_run
from harness.report.sessions import BEGIN, END, SESSIONS
from harness.report.summary import SUMMARY, SessionRun, write_summary

pytest_plugins = ["pytester"]
SCENARIO = ROOT / "scenarios" / "worker-killed-mid-request-ctl-cleans.yaml"  # one run of about 0.1 s
QUIET = ("-p", "no:cacheprovider", "-p", "no:randomly")
LINK = re.compile(r'<a href="(sessions/[^"]+\.html)">')
ROW = re.compile(r'<tr class="run [a-z]+" data-nodeid="([^"]+)"')


def session(root: Path, name: str, outcome: str = "passed", status: int = 0) -> Path:
    """One session of one run ``name`` in ``root``, as a scenario session leaves it; returns the index."""
    run = root / name
    run.mkdir(parents=True)
    mark_run(run)
    (run / SUMMARY).write_text(f"<p>{name}</p>")
    page = write_summary(root, [SessionRun(f"s.yaml::{name}[x]", outcome, run_id=name, page=str(run / SUMMARY))],
                         {"exitstatus": status})
    assert page == root / SUMMARY
    return page


def links(index: Path) -> list[str]:
    return LINK.findall(index.read_text())


def test_the_index_shows_this_session_and_links_the_earlier_ones_newest_first(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    session(reports, "first")
    session(reports, "second", "failed", 1)
    index = session(reports, "third")
    assert ROW.findall(index.read_text()) == ["s.yaml::third[x]"]  # this session's runs only, in its table
    earlier = links(index)
    assert len(earlier) == 2
    pages = [(reports / link).read_text() for link in earlier]
    assert [ROW.findall(p) for p in pages] == [["s.yaml::second[x]"], ["s.yaml::first[x]"]]  # newest first
    assert "(pytest exit 1)" in index.read_text().split(earlier[1])[0]
    # a kept page links its run where it lies, from sessions/
    assert '<a href="../first/index.html">first</a>' in pages[1]
    assert (reports / SESSIONS / "../first/index.html").read_text() == "<p>first</p>"
    own = sorted((reports / SESSIONS).glob("*.html"))[-1]
    assert ROW.findall(own.read_text()) == ["s.yaml::third[x]"] and BEGIN not in own.read_text()
    record = json.loads(own.with_suffix(".json").read_text())
    assert record["runs"] == ["third"] and record["exitstatus"] == 0


def test_at_most_max_listed_earlier_sessions_are_linked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions, "MAX_LISTED", 2)
    reports = tmp_path / "reports"
    for n in range(4):
        index = session(reports, f"r{n}")
    text = index.read_text()
    assert [ROW.findall((reports / link).read_text()) for link in links(index)] == [["s.yaml::r2[x]"],
                                                                                   ["s.yaml::r1[x]"]]
    assert "more than 2 earlier sessions: the older ones are not listed" in text


def _plant(reports: Path, name: str, doc: object | str, page: bool = True) -> Path:
    path = reports / SESSIONS / f"{name}.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    if page:
        path.with_suffix(".html").write_text("<p>planted</p>")
    return path


def test_an_earlier_record_that_is_no_record_is_left_out_with_a_line(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    session(reports, "first")
    good = {"format": 1, "title": "t", "ended": "e", "totals": "x", "exitstatus": 0, "runs": []}
    ids = [f"20000101-00000{n}-000000-aaaaaa" for n in range(6)]
    _plant(reports, ids[0], "{not json")
    _plant(reports, ids[1], {**good, "id": ids[0]})  # another record's id
    _plant(reports, ids[2], {**good, "id": ids[2], "runs": ["../../etc"]})
    _plant(reports, ids[3], {**good, "id": ids[3], "title": "<script>alert(1)</script>\x1b[2J"})
    _plant(reports, ids[4], {**good, "id": ids[4]}, page=False)
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({**good, "id": ids[5]}))
    (reports / SESSIONS / f"{ids[5]}.json").symlink_to(outside)
    index = session(reports, "second")
    text = index.read_text()
    assert len(links(index)) == 1  # the first session only
    notes = re.findall(r"<li>([^<]*)</li>", text.split('id="skipped-sessions"')[1])
    assert [n.split(".json")[0][-len(ids[0]):] for n in notes] == [ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]]
    assert notes[0].endswith(": not a regular file, left out") and "its page cannot be read" in notes[1]
    assert "is not a line of text" in notes[2] and "is not a run directory" in notes[3]
    assert "is not its name" in notes[4] and "not JSON" in notes[5]
    assert "<script>" not in text and "\x1b" not in text


@pytest.mark.slow  # two real sessions and a replay, seconds each
def test_a_second_session_and_a_replay_each_keep_the_first_ones_page(pytester: pytest.Pytester) -> None:
    shutil.copy(SCENARIO, pytester.path / "s.yaml")
    reports = pytester.path / "reports"
    for keyword in ("not catches", "catches"):
        result = pytester.runpytest_subprocess("s.yaml", "-k", keyword, *QUIET)
        assert result.ret == 0, result.stdout.str()
    index = reports / SUMMARY
    (second,) = ROW.findall(index.read_text())
    assert "catches" in second
    (first_page,) = links(index)
    (first,) = ROW.findall((reports / first_page).read_text())
    assert "catches" not in first
    (name,) = json.loads((reports / first_page).with_suffix(".json").read_text())["runs"]
    run = reports / name
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "replay", str(run.relative_to(pytester.path))],
                          capture_output=True, text=True, timeout=300, cwd=pytester.path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ROW.findall(index.read_text()) == [first]  # the replay is a session of its own
    assert [ROW.findall((reports / link).read_text()) for link in links(index)] == [[second], [first]]
    assert index.read_text().count(BEGIN) == 1 and index.read_text().count(END) == 1
