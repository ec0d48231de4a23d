"""``--lastcall-reports DIR`` writes only into a directory lastcall made (harness.report.reportsdir): a file, a
directory it cannot write and a non-empty directory without its marker (``/``, a home directory) are refused
when the session starts, exit 4 from pytest (2 from ``lastcall run``) with one line, before any test runs and
with nothing written; a new directory is made with the marker when the first report is written, an empty one
(a ``.gitkeep`` aside) is marked, and a marked one is written again. Each refusal is a real pytest session
(pytester's subprocess), its one test a sentinel that would leave a file had it run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lc_helpers import ROOT

from harness.report.reportsdir import MARKER_TEXT, make_reports, unfit
from harness.report.sessions import SESSIONS
from harness.report.summary import MARKER, SESSION, SUMMARY, SessionRun, write_summary

pytest_plugins = ["pytester"]
SCENARIO = ROOT / "scenarios" / "worker-killed-mid-request-ctl-cleans.yaml"  # one run of about 0.1 s
ITEM = "worker-killed-mid-request-ctl-cleans[tp1-pp1-cpu]"
QUIET = ("-p", "no:cacheprovider", "-p", "no:randomly")
SENTINEL = "def test_ran():\n    open('ran', 'w').close()\n"
TAIL = (f"and no {MARKER}: not a reports directory of lastcall's, whose index.html and session.json it may "
        f"replace; give a new or empty directory (or create {MARKER} in it if it holds only lastcall's reports)")


def tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``: a file's bytes, a link's target, a directory as "dir", a FIFO as "fifo"; but
    what pytester itself writes there (the sentinel test, each session's --basetemp, stdout and stderr)."""
    out: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if rel.startswith(("runpytest-", "test_sentinel.py")) or rel in ("stdout", "stderr"):
            continue
        if path.is_symlink():
            out[rel] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            out[rel] = "dir"
        elif path.is_file():
            out[rel] = path.read_bytes()
        else:
            out[rel] = "fifo"
    return out


def refused(pytester: pytest.Pytester, *args: str) -> list[str]:
    """A session with ``args`` that must be refused at configure time: its stderr lines, once checked that
    pytest exited 4 and that its test never ran."""
    pytester.makepyfile(test_sentinel=SENTINEL)
    result = pytester.runpytest_subprocess(*args, *QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    assert not (pytester.path / "ran").exists()
    return [line for line in result.stderr.lines if line.strip()]


def test_a_file_is_refused_and_left_as_it_was(pytester: pytest.Pytester) -> None:
    target = pytester.path / "notes.txt"
    target.write_text("mine\n")
    before = tree(pytester.path)
    assert refused(pytester, f"--lastcall-reports={target}") == [
        f"ERROR: --lastcall-reports {target}: a file, not a directory; give a directory for the reports"]
    assert tree(pytester.path) == before


def test_a_fifo_is_refused_without_being_opened(pytester: pytest.Pytester) -> None:
    fifo = pytester.path / "pipe"
    os.mkfifo(fifo)  # opened for writing, it would block the session: refused by its stat alone
    assert refused(pytester, f"--lastcall-reports={fifo}") == [
        f"ERROR: --lastcall-reports {fifo}: a FIFO, not a directory; give a directory for the reports"]
    assert tree(pytester.path)["pipe"] == "fifo"


def test_a_directory_with_someone_elses_page_is_refused_and_its_files_kept(pytester: pytest.Pytester) -> None:
    site = pytester.path / "site"
    site.mkdir()
    (site / SUMMARY).write_text("<p>my own page</p>")
    (site / SESSION).write_text('{"mine": true}')
    before = tree(site)
    assert refused(pytester, "--lastcall-reports", str(site)) == [
        f"ERROR: --lastcall-reports {site}: holds {SUMMARY}, {SESSION} {TAIL}"]
    assert tree(site) == before  # no marker written either


def test_a_home_directory_of_dotfiles_is_refused(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dotfiles do not make a directory empty (a fresh home holds only them); .gitkeep alone does."""
    home = pytester.path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("export A=1\n")
    (home / ".gitkeep").touch()
    monkeypatch.setenv("HOME", str(home))
    before = tree(home)
    assert refused(pytester, "--lastcall-reports=~") == [
        f"ERROR: --lastcall-reports ~ ({home}): holds .bashrc {TAIL}"]
    assert tree(home) == before


def test_the_filesystem_root_is_refused(pytester: pytest.Pytester) -> None:
    written = [Path("/", name) for name in (SUMMARY, SESSION, MARKER)]
    assert not any(p.exists() for p in written)
    (line,) = refused(pytester, "--lastcall-reports=/")
    match = re.fullmatch(rf"ERROR: --lastcall-reports /: holds (.+?)(, \.\.\.)? {re.escape(TAIL)}", line)
    assert match, line
    assert all(os.path.lexists(Path("/", name)) for name in match[1].split(", "))
    assert not any(p.exists() for p in written)


def test_an_ini_value_is_refused_naming_the_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nlastcall_reports = docs\n")
    (pytester.path / "docs").mkdir()
    (pytester.path / "docs" / "guide.md").write_text("# guide\n")
    assert refused(pytester) == [
        f"ERROR: ini lastcall_reports = docs ({pytester.path / 'docs'}): holds guide.md {TAIL}"]
    assert sorted(os.listdir(pytester.path / "docs")) == ["guide.md"]


@pytest.mark.skipif(os.access("/proc/sys", os.W_OK) or not os.path.isdir("/proc/sys"),
                    reason="needs /proc/sys, which no process may write (a read-only mount): even root cannot")
def test_a_directory_lastcall_cannot_write_is_refused(pytester: pytest.Pytester) -> None:
    """/proc/sys is read-only for root too, so the check is real on a CI runner that runs as root."""
    assert refused(pytester, "--lastcall-reports=/proc/sys") == [
        "ERROR: --lastcall-reports /proc/sys: a directory lastcall cannot write"]
    assert refused(pytester, "--lastcall-reports=/proc/sys/lastcall-reports") == [
        "ERROR: --lastcall-reports /proc/sys/lastcall-reports: cannot be made: /proc/sys is a directory lastcall "
        "cannot write"]
    assert not os.path.exists("/proc/sys/lastcall-reports")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a directory whatever its mode")
def test_a_directory_without_write_permission_is_refused(pytester: pytest.Pytester) -> None:
    locked = pytester.path / "locked"
    locked.mkdir(mode=0o500)
    try:
        assert refused(pytester, f"--lastcall-reports={locked}") == [
            f"ERROR: --lastcall-reports {locked}: a directory lastcall cannot write"]
        assert os.listdir(locked) == []
    finally:
        locked.chmod(0o700)


def test_a_path_under_a_file_or_a_dangling_link_is_refused(pytester: pytest.Pytester) -> None:
    (pytester.path / "plain").write_text("x")
    (pytester.path / "dangling").symlink_to(pytester.path / "gone")
    before = tree(pytester.path)
    under = pytester.path / "plain" / "reports"
    assert refused(pytester, f"--lastcall-reports={under}") == [
        f"ERROR: --lastcall-reports {under}: cannot be made: {pytester.path / 'plain'} is a file, not a directory"]
    link = pytester.path / "dangling"
    assert refused(pytester, f"--lastcall-reports={link}") == [
        f"ERROR: --lastcall-reports {link}: a symbolic link to nothing"]
    assert tree(pytester.path) == before


def test_lastcall_run_refuses_it_with_exit_2_before_starting(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / SUMMARY).write_text("<p>mine</p>")
    before = tree(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(SCENARIO), "-k", ITEM,
                           "--lastcall-reports", str(taken)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        f"ERROR: --lastcall-reports {taken}: holds {SUMMARY} {TAIL}"]
    assert "passed" not in proc.stdout and "scenario run" not in proc.stdout  # nothing ran
    assert tree(tmp_path) == before


def test_xdist_is_refused_by_the_controller_before_any_worker_starts(pytester: pytest.Pytester) -> None:
    taken = pytester.path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("x")
    assert refused(pytester, "-n", "2", f"--lastcall-reports={taken}") == [
        f"ERROR: --lastcall-reports {taken}: holds keep.txt {TAIL}"]
    assert sorted(os.listdir(taken)) == ["keep.txt"]


def _scenario_session(pytester: pytest.Pytester, *args: str, keyword: str = "not catches") -> pytest.RunResult:
    shutil.copy(SCENARIO, pytester.path / "s.yaml")
    return pytester.runpytest_subprocess("s.yaml", "-k", keyword, *args, *QUIET)


@pytest.mark.slow  # real runs, seconds each: the refusals above are the quick suite's
def test_a_new_directory_is_made_with_its_marker_once_a_report_is_written(pytester: pytest.Pytester) -> None:
    new = pytester.path / "out" / "reports"
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest_subprocess("test_plain.py", f"--lastcall-reports={new}", *QUIET)
    assert result.ret == 0 and not (pytester.path / "out").exists()  # no report written, no directory made
    result = _scenario_session(pytester, f"--lastcall-reports={new}")
    assert result.ret == 0, result.stdout.str()
    assert (new / MARKER).read_text() == MARKER_TEXT
    runs = [p for p in new.iterdir() if p.is_dir() and p.name != SESSIONS]
    assert len(runs) == 1 and (runs[0] / SUMMARY).is_file() and (new / SESSION).is_file()
    # marked by the first session, it takes the next one's reports too
    assert _scenario_session(pytester, f"--lastcall-reports={new}").ret == 0
    assert len([p for p in new.iterdir() if p.is_dir() and p.name != SESSIONS]) == 2
    assert (new / MARKER).read_text() == MARKER_TEXT and len(list((new / SESSIONS).glob("*.html"))) == 2


@pytest.mark.slow  # real runs, seconds each: the refusals above are the quick suite's
def test_xdist_workers_write_into_one_marked_directory(pytester: pytest.Pytester) -> None:
    """The controller checks, each worker makes the directory as its first run writes: the marker is created
    exclusively, once, whoever comes first; an empty directory holding .gitkeep is taken as empty."""
    reports = pytester.path / "reports"
    reports.mkdir()
    (reports / ".gitkeep").touch()
    result = _scenario_session(pytester, "-n", "2", keyword="ctl-cleans")  # the rootdir's reports/, by default
    assert result.ret == 0, result.stdout.str()
    assert (reports / MARKER).read_text() == MARKER_TEXT and (reports / ".gitkeep").read_bytes() == b""
    assert sorted(p.name for p in reports.iterdir() if not p.is_dir()) == sorted([".gitkeep", MARKER, SUMMARY,
                                                                                  SESSION])
    assert len([p for p in reports.iterdir() if p.is_dir() and p.name != SESSIONS]) == 2  # the run and the catch


def test_the_repositorys_own_reports_directory_is_marked() -> None:
    """A fresh clone's reports/ holds .gitkeep and the committed marker: sessions in it are not refused."""
    assert (ROOT / "reports" / MARKER).read_text() == MARKER_TEXT
    assert unfit(ROOT / "reports") is None


def test_the_session_page_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    """A marked directory whose temporary names are links elsewhere (the names lastcall once used): the page and
    session.json replace only themselves."""
    reports = tmp_path / "reports"
    make_reports(reports)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    for name in (SUMMARY, SESSION):
        (reports / f".{name}.tmp").symlink_to(victim)
    (reports / SUMMARY).symlink_to(victim)  # the page itself a link: replaced, not written through
    page = write_summary(reports, [SessionRun("scenarios/a.yaml::a[x]", "passed")])
    assert page == reports / SUMMARY and not page.is_symlink() and "lastcall session" in page.read_text()
    assert victim.read_text() == "keep"
    assert sorted(p.name for p in reports.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()) == []


def test_a_large_directory_is_judged_on_its_first_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory of many entries and no marker: refused after the first few names, not a walk of them all."""
    big = tmp_path / "big"
    big.mkdir()
    for n in range(50):
        (big / f"f{n:02}").touch()
    seen: list[str] = []
    real = os.scandir

    class Counting:
        def __init__(self, path: Path) -> None:
            self.inner = real(path)

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self.inner.close()

        def __iter__(self) -> Counting:
            return self

        def __next__(self) -> os.DirEntry[str]:
            entry = next(self.inner)
            seen.append(entry.name)
            return entry

    monkeypatch.setattr("harness.report.reportsdir.os.scandir", Counting)
    why = unfit(big)
    assert why is not None and why.startswith("holds ") and why.endswith(f", ... {TAIL}")
    assert len(seen) == 5  # the four shown, and one more to say there are more
