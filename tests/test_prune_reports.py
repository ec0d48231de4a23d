"""``lastcall prune-reports`` (harness.report.prune): keeps the N newest sessions with their runs and the N newest
runs, removes the rest, and only what lastcall made: run directories holding its run marker, in a directory
holding its reports marker; no symbolic link is followed, in the directory or inside a run it removes."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from harness.cli import main
from harness.report.reportsdir import MARKER, RUN_MARKER, make_reports, mark_run
from harness.report.sessions import SESSIONS
from harness.report.summary import SUMMARY, SessionRun, write_summary

LINK = re.compile(r'<a href="(sessions/[^"]+\.html)">')


def run_dir(root: Path, name: str, age: int) -> Path:
    """A run directory as write_run leaves it, its marker ``age`` seconds old (older runs: larger ages)."""
    path = root / name
    path.mkdir(parents=True)
    mark_run(path)
    (path / SUMMARY).write_text(f"<p>{name}</p>")
    when = 1_000_000_000 - age
    os.utime(path / RUN_MARKER, (when, when))
    return path


def sessions_of(root: Path, names: list[str]) -> None:
    """One session per run, oldest first (the order the names are given)."""
    for name in names:
        page = root / name / SUMMARY
        assert write_summary(root, [SessionRun(f"s.yaml::{name}[x]", "passed", run_id=name, page=str(page))])


def prune(*args: str) -> int:
    return main(["prune-reports", *args])


def entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name != SESSIONS)


def test_it_keeps_the_newest_and_removes_the_rest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "reports"
    make_reports(root)
    names = [f"r{n}" for n in range(5)]
    for age, name in enumerate(reversed(names)):
        run_dir(root, name, age)
    sessions_of(root, names)
    assert prune("--keep", "2", "--dry-run", str(root)) == 0
    out = capsys.readouterr().out
    assert entries(root) == sorted([MARKER, SUMMARY, "session.json", *names])  # a dry run removes nothing
    assert f"would remove run {root / 'r0'} (older than the 2 newest runs, listed by no session kept)" in out
    assert prune("--keep", "2", str(root)) == 0
    out = capsys.readouterr().out
    assert entries(root) == sorted([MARKER, SUMMARY, "session.json", "r3", "r4"])
    assert len(list((root / SESSIONS).glob("*.json"))) == len(list((root / SESSIONS).glob("*.html"))) == 2
    for name in ("r0", "r1", "r2"):
        assert f"removed run {root / name} (older than the 2 newest runs, listed by no session kept)" in out
    assert f"kept run {root / 'r4'} (one of the 2 newest runs)" in out
    assert out.endswith("removed 3 run(s) and 3 session(s); kept 2 run(s) and 2 session(s)\n")
    (link,) = LINK.findall((root / SUMMARY).read_text())  # the index lists only the earlier session still there
    assert (root / link).is_file()


def test_a_run_a_kept_session_lists_is_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "reports"
    make_reports(root)
    old = run_dir(root, "listed", 10)
    for age in range(3):
        run_dir(root, f"new{age}", age)
    assert write_summary(root, [SessionRun("s.yaml::a[x]", "passed", run_id="listed", page=str(old / SUMMARY))])
    assert prune("--keep", "1", str(root)) == 0
    out = capsys.readouterr().out
    assert entries(root) == sorted([MARKER, SUMMARY, "session.json", "listed", "new0"])
    assert f"kept run {old} (listed by a session kept)" in out


def test_a_link_in_the_reports_directory_is_not_followed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "reports"
    make_reports(root)
    outside = tmp_path / "outside"
    run_dir(tmp_path, "outside", 100)  # marked as a run, old: a link to it must still not be followed
    (outside / "mine.txt").write_text("keep")
    (root / "link").symlink_to(outside, target_is_directory=True)
    doomed = run_dir(root, "old", 50)
    (doomed / "escape").symlink_to(outside, target_is_directory=True)  # inside a run that is removed
    run_dir(root, "new", 0)
    assert prune("--keep", "1", str(root)) == 0
    out = capsys.readouterr().out
    assert entries(root) == sorted([MARKER, "link", "new"])
    assert sorted(os.listdir(outside)) == sorted([RUN_MARKER, SUMMARY, "mine.txt"])
    assert (outside / "mine.txt").read_text() == "keep"
    assert f"kept link {root / 'link'} (a symbolic link, not followed)" in out


def test_a_directory_without_the_run_marker_is_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "reports"
    make_reports(root)
    mine = root / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    (root / "fake").mkdir()
    (root / "fake" / RUN_MARKER).symlink_to(tmp_path / "nowhere")  # a link named as the marker is no marker
    run_dir(root, "old", 10)
    run_dir(root, "new", 0)
    assert prune("--keep", "1", str(root)) == 0
    out = capsys.readouterr().out
    assert entries(root) == sorted([MARKER, "fake", "mine", "new"])
    assert (mine / "notes.txt").read_text() == "mine"
    assert f"kept directory {mine} (holds no {RUN_MARKER}: not a run directory lastcall made)" in out


def test_a_directory_without_the_reports_marker_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "home"
    run_dir(root, "old", 10)
    run_dir(root, "new", 0)
    assert prune("--keep", "1", str(root)) == 2
    err = capsys.readouterr().err
    assert err == (f"lastcall prune-reports: {root}: holds no {MARKER}: not a reports directory of lastcall's; "
                   "nothing removed\n")
    assert entries(root) == ["new", "old"]
    make_reports(tmp_path / "real")
    (tmp_path / "alias").symlink_to(tmp_path / "real", target_is_directory=True)
    assert prune(str(tmp_path / "alias")) == 2
    assert capsys.readouterr().err == (f"lastcall prune-reports: {tmp_path / 'alias'}: a symbolic link: give the "
                                       "reports directory itself (prune-reports follows no link)\n")
    assert prune("--keep", "0", str(root)) == 2
    assert "argument --keep: 0 must be between 1 and 1000000" in capsys.readouterr().err


def test_an_index_whose_list_lastcall_did_not_write_is_left_as_it_is(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "reports"
    make_reports(root)
    for age in range(2):
        run_dir(root, f"r{age}", age)
    sessions_of(root, ["r1", "r0"])
    (root / SUMMARY).write_text("<p>someone's own page</p>")
    assert prune("--keep", "1", str(root)) == 0
    out = capsys.readouterr().out
    assert f"note: {root / SUMMARY}: holds no list of sessions lastcall wrote; left as it is\n" in out
    assert (root / SUMMARY).read_text() == "<p>someone's own page</p>"
    assert entries(root) == sorted([MARKER, SUMMARY, "session.json", "r0"])
