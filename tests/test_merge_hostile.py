"""``lastcall report --merge`` on shards a stranger filled (harness.report.shard, harness.report.junit): every
field of a session.json of the wrong shape or out of range, every page that is not a run's page inside its
shard, every JUnit file that is not plain data, every file that is no regular file or too large, is one
located line and exit 2, with nothing written; a verdicts.json of the wrong shape only leaves its row's
fields out. All cases run in one child process under RLIMIT_AS (1 GiB, the issue's bound: a billion-item
list, a read of /dev/zero or an expanded entity would end it in MemoryError, exit 3) through
``harness.cli.main``, and each test below reads its case's result."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lc_helpers import ROOT

from harness.cli import main
from harness.report.shard import MAX_RUNS
from harness.report.summary import MARKER, SESSION, SUMMARY

NODE = "scenarios/a.yaml::a[tp1-pp1-cpu]"
SHA = "a" * 64
GIB = 1 << 30
CHILD = """
import contextlib, io, json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from harness.cli import main
results = {}
for name, argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["report", "--merge", *argv])
    results[name] = [code, out.getvalue(), err.getvalue()]
print(json.dumps(results))
"""


def run_entry(n: int = 0, **fields: Any) -> dict[str, Any]:
    return {"nodeid": NODE if n == 0 else f"scenarios/a.yaml::a[tp1-pp1-cpu-r{n}]", "outcome": "passed",
            "seconds": 1.5, "run_id": f"run{n}", "page": f"run{n}/{SUMMARY}", "longrepr": "",
            "scenario_sha256": SHA, **fields}


def make_shard(d: Path, runs: list[dict[str, Any]] | None = None, *, pages: bool = True, **meta: Any) -> Path:
    """A shard as a session writes it: session.json and, for each run's page, RUN/index.html and verdicts.json."""
    d.mkdir(parents=True)
    runs = [run_entry()] if runs is None else runs
    for entry in runs:
        page = entry.get("page")
        if pages and isinstance(page, str) and page.endswith(f"/{SUMMARY}") and ".." not in page:
            run_dir = d / Path(page).parent
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / SUMMARY).write_text("<html>run</html>")
            (run_dir / "verdicts.json").write_text(json.dumps({"scenario": "a", "variant": "reference",
                                                               "verdicts": [], "outcome": {"status": "ok"}}))
    doc = {"format": 1, "lastcall": "0.1.0", "target": None, "exitstatus": 0, "splits": None, "group": None,
           **meta, "runs": runs}
    (d / SESSION).write_text(json.dumps(doc))
    return d


def raw_session(d: Path, text: str | bytes) -> Path:
    d.mkdir(parents=True)
    (d / SESSION).write_bytes(text.encode() if isinstance(text, str) else text)
    return d


def sparse(path: Path, size: int = GIB) -> None:
    with open(path, "wb") as f:
        f.truncate(size)


def junit_text(cases: str) -> str:
    return f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>'


def with_junit(d: Path, text: str | None = None, *, name: str = "junit.xml") -> Path:
    s = make_shard(d)
    if text is not None:
        (s / name).write_text(text)
    return s


LAUGHS = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lollollollollollollollollollol">'
          + "".join(f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">' for i in range(1, 10))
          + ']><testsuites><testsuite name="x"><testcase name="a" classname="&lol9;"/></testsuite></testsuites>')
EXTERNAL = ('<?xml version="1.0"?><!DOCTYPE t [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
            '<testsuites><testsuite name="x"><testcase name="&e;"/></testsuite></testsuites>')


def _fifo_page(d: Path) -> list[str]:
    s = make_shard(d)
    (s / "run0" / SUMMARY).unlink()
    os.mkfifo(s / "run0" / SUMMARY)
    return [str(s)]


def _page_out_by_link(d: Path) -> list[str]:
    outside = d / "outside"
    outside.mkdir(parents=True)
    (outside / SUMMARY).write_text("<script>alert(1)</script>")
    (outside / "verdicts.json").write_text("{}")
    s = make_shard(d / "s", pages=False)
    (s / "run0").symlink_to(outside)
    return [str(s)]


def _page_a_link(d: Path) -> list[str]:
    s = make_shard(d)
    (s / "run0" / SUMMARY).unlink()
    (s / "run0" / SUMMARY).symlink_to(s / "run0" / "verdicts.json")
    return [str(s)]


def _verdicts(d: Path, make: Callable[[Path], None]) -> list[str]:
    s = make_shard(d, [run_entry(outcome="failed", longrepr="boom")], exitstatus=1)
    verdicts = s / "run0" / "verdicts.json"
    verdicts.unlink()
    make(verdicts)
    return [str(s)]


def _write(text: str) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_text(text)

    return write


def _session_special(d: Path, make: Callable[[Path], None]) -> list[str]:
    d.mkdir(parents=True)
    make(d / SESSION)
    return [str(d)]


def _many_xml(d: Path) -> list[str]:
    s = make_shard(d)
    for n in range(65):
        (s / f"j{n:02}.xml").write_text(junit_text(""))
    return [str(s)]


def _out_holding(d: Path, extra: str | None) -> list[str]:
    s = make_shard(d / "s")
    if extra:
        (d / extra).write_text("mine")
    return [str(s), "--out", str(d)]


def _loop_run(d: Path) -> list[str]:
    s = make_shard(d, pages=False)
    (s / "run0").symlink_to(s / "run0")
    return [str(s)]


def _out_loop(d: Path) -> list[str]:
    s = make_shard(d / "s")
    (d / "loop").symlink_to(d / "loop")
    return [str(s), "--out", str(d)]


def _file_out(d: Path) -> list[str]:
    s = make_shard(d / "s")
    (d / "out").write_text("mine")
    return [str(s), "--out", str(d / "out")]


# name -> (make: the case's directory -> argv after --merge, exit code, the lines expected with {d} for the
# directory: all of stderr for exit 2, lines of stdout otherwise)
LEFT_OUT = f"FAILED {NODE}: boom ({{d}}/run0/index.html)"  # as session.json says, its verdicts.json left out
S = "lastcall report: {d}/session.json: "
R = S + "runs[0]: " + NODE + ": "
TAIL = (f"and no {MARKER}: not a reports directory of lastcall's, whose index.html and session.json it may "
        f"replace; give a new or empty directory (or create {MARKER} in it if it holds only lastcall's reports)")
CASES: dict[str, tuple[Callable[[Path], list[str]], int, list[str]]] = {
    # the session's own fields
    "a billion splits": (lambda d: [str(make_shard(d, splits=10**9, group=1))], 2, [
        S + "group 1 of splits 1000000000: not a pytest-split group (1 <= group <= splits <= 1000)"]),
    "a group that is True": (lambda d: [str(make_shard(d, splits=2, group=True))], 2, [
        S + "group True of splits 2: not a pytest-split group (1 <= group <= splits <= 1000)"]),
    "splits a float": (lambda d: [str(make_shard(d, splits=2.0, group=1))], 2, [
        S + "group 1 of splits 2.0: not a pytest-split group (1 <= group <= splits <= 1000)"]),
    "exitstatus a string": (lambda d: [str(make_shard(d, exitstatus="0"))], 2, [
        S + "exitstatus '0' is not a process's exit status (0 to 255)"]),
    "exitstatus huge": (lambda d: [str(make_shard(d, exitstatus=10**18))], 2, [
        S + "exitstatus 1000000000000000000 is not a process's exit status (0 to 255)"]),
    "target a list": (lambda d: [str(make_shard(d, target=["x"]))], 2, [
        S + "target (a list) is not a name (text of at most 1000 characters)"]),
    "merged a string": (lambda d: [str(make_shard(d, merged="x"))], 2, [S + "merged 'x' is not a list of shards"]),
    "format True": (lambda d: [str(make_shard(d, format=True))], 2, [
        S + "format True, this lastcall reads 1: merge with the lastcall that wrote it"]),
    "too many runs": (lambda d: [str(make_shard(d, [{}] * (MAX_RUNS + 1), pages=False))], 2, [
        S + f"{MAX_RUNS + 1} runs: lastcall merges at most {MAX_RUNS} from one session"]),
    # the file itself
    "nested 200k deep": (lambda d: [str(raw_session(d, '{"format": 1, "runs": ' + "[" * 200_000 + "]" * 200_000
                                                    + "}"))], 2, [
        S + "not a session.json lastcall wrote: nested deeper than 32 levels of lists and objects"]),
    "a 4000-digit number": (lambda d: [str(raw_session(d, '{"format": 1, "runs": [], "exitstatus": ' + "9" * 4000
                                                       + "}"))], 2, [
        S + "not a session.json lastcall wrote: an integer of 4000 characters (lastcall reads at most 20 digits)"]),
    "a FIFO": (lambda d: _session_special(d, os.mkfifo), 2, [S + "a FIFO, not a regular file; give the session.json"]),
    "a link to /dev/zero": (lambda d: _session_special(d, lambda p: p.symlink_to("/dev/zero")), 2, [
        S + "a symbolic link, not a regular file; lastcall never writes one (give the session.json itself)"]),
    "a GiB": (lambda d: _session_special(d, sparse), 2, [
        S + "1073741824 bytes, over lastcall's limit of 8 MiB for a session.json"]),
    # each run's fields
    "a node id too long": (lambda d: [str(make_shard(d, [run_entry(nodeid="x" * 3000)]))], 2, [
        S + "runs[0]: nodeid '" + "x" * 60 + "'... (3000 characters): lastcall reads node ids of at most 2000 "
        "characters"]),
    "escapes in a node id": (lambda d: [str(make_shard(d, [run_entry(nodeid="a\x1b[2J\x1b]0;x\x07", outcome=1)]))],
                             2, [S + "runs[0]: a\\x1b[2J\\x1b]0;x\\x07: outcome 1 is none of passed, failed, "
                                 "skipped, interrupted"]),
    "a lone surrogate in a node id": (lambda d: [str(raw_session(d, '{"format": 1, "runs": [{"nodeid": "a\\ud800", '
                                                                 '"outcome": "passed"}]}'))], 2, [
        S + "runs[0]: nodeid 'a\\ud800' is not text: a lone surrogate has no UTF-8 form"]),
    "a lone surrogate in a run id": (lambda d: [str(make_shard(d, [run_entry(run_id="r\udfff")]))], 2, [
        R + "run_id 'r\\udfff' is not text of at most 1000 characters"]),
    "an outcome that is a list": (lambda d: [str(make_shard(d, [run_entry(outcome=["passed"])]))], 2, [
        R + "outcome (a list) is none of passed, failed, skipped, interrupted"]),
    "seconds 1e308": (lambda d: [str(make_shard(d, [run_entry(seconds=1e308)]))], 2, [
        R + "seconds 1e+308 is not a run's duration (0 to 10000000)"]),
    "seconds negative": (lambda d: [str(make_shard(d, [run_entry(seconds=-1)]))], 2, [
        R + "seconds -1 is not a run's duration (0 to 10000000)"]),
    "seconds True": (lambda d: [str(make_shard(d, [run_entry(seconds=True)]))], 2, [
        R + "seconds True is not a number"]),
    "a run id that is an object": (lambda d: [str(make_shard(d, [run_entry(run_id={"a": 1})]))], 2, [
        R + "run_id (an object) is not text of at most 1000 characters"]),
    "a longrepr that is a list": (lambda d: [str(make_shard(d, [run_entry(longrepr=[1])]))], 2, [
        R + "longrepr (a list) is not text"]),
    "a digest that is none": (lambda d: [str(make_shard(d, [run_entry(scenario_sha256="zz")]))], 2, [
        R + "scenario_sha256 'zz' is not a sha256 (64 hex digits)"]),
    # each run's page
    "a javascript: page": (lambda d: [str(make_shard(d, [run_entry(page="javascript:alert(1)")]))], 2, [
        R + "page 'javascript:alert(1)' has a scheme: a run's page is a path inside {d}"]),
    "a page up and out": (lambda d: [str(make_shard(d, [run_entry(page="../javascript:alert(1)")]))], 2, [
        R + "page '../javascript:alert(1)' is not a run's index.html inside {d} (RUN/index.html)"]),
    "an absolute page": (lambda d: [str(make_shard(d, [run_entry(page="/etc/passwd")]))], 2, [
        R + "page '/etc/passwd' is not a run's index.html inside {d} (RUN/index.html)"]),
    "a page that is no index.html": (lambda d: [str(make_shard(d, [run_entry(page="run0/evil.svg")]))], 2, [
        R + "page 'run0/evil.svg' is not a run's index.html inside {d} (RUN/index.html)"]),
    "a page with a newline": (lambda d: [str(make_shard(d, [run_entry(page="run0\n/index.html")]))], 2, [
        R + "page 'run0\\n/index.html' is not a run's index.html inside {d} (RUN/index.html)"]),
    "the shard's own page": (lambda d: [str(make_shard(d, [run_entry(page=SUMMARY)]))], 2, [
        R + "page 'index.html' is not a run's index.html inside {d} (RUN/index.html)"]),
    "a page that is a FIFO": (_fifo_page, 2, [
        R + "its page {d}/run0/index.html is not a regular file: lastcall writes no link, FIFO or directory there"]),
    "a page that is a link": (_page_a_link, 2, [
        R + "its page {d}/run0/index.html is not a regular file: lastcall writes no link, FIFO or directory there"]),
    "a page out through a linked directory": (_page_out_by_link, 2, [
        "lastcall report: {d}/s/session.json: runs[0]: " + NODE + ": its page {d}/s/run0/index.html lies outside "
        "{d}/s, through a symbolic link"]),
    "a page of a 300-character name": (lambda d: [str(make_shard(d, [run_entry(page="r" * 300 + "/index.html")],
                                                                pages=False))], 2, [
        R + "its report {d}/" + "r" * 300 + " is not there (an incomplete download of the shard?)"]),
    "a run directory that is a link loop": (_loop_run, 2, [
        R + "its report {d}/run0 is not there (an incomplete download of the shard?)"]),
    "two runs, one page": (lambda d: [str(make_shard(d, [run_entry(), run_entry(1, page=f"run0/{SUMMARY}")]))], 2, [
        S + "runs[1]: scenarios/a.yaml::a[tp1-pp1-cpu-r1]: its page is runs[0]'s too"]),
    # JUnit files
    "a billion laughs": (lambda d: [str(with_junit(d, LAUGHS))], 2, [
        "lastcall report: {d}/junit.xml: a document type declaration (<!DOCTYPE>), which no JUnit file has: "
        "lastcall declares and expands no entities: not a JUnit file lastcall merges"]),
    "an external entity": (lambda d: [str(with_junit(d, EXTERNAL))], 2, [
        "lastcall report: {d}/junit.xml: a document type declaration (<!DOCTYPE>), which no JUnit file has: "
        "lastcall declares and expands no entities: not a JUnit file lastcall merges"]),
    "XML nested 100k deep": (lambda d: [str(with_junit(d, "<testsuites>" + "<a>" * 100_000 + "</a>" * 100_000
                                                       + "</testsuites>"))], 2, [
        "lastcall report: {d}/junit.xml: elements nested deeper than 32: not a JUnit file lastcall merges"]),
    "300k testcases": (lambda d: [str(with_junit(d, junit_text("<testcase/>" * 300_000)))], 2, [
        "lastcall report: {d}/junit.xml: more elements than lastcall reads in one merge (250000): not a JUnit file "
        "lastcall merges"]),
    "JUnit a link to /dev/zero": (lambda d: [str(_junit_special(d, lambda p: p.symlink_to("/dev/zero")))], 2, [
        "lastcall report: {d}/junit.xml: a symbolic link, not a regular file; lastcall never writes one (give the "
        "JUnit XML file itself)"]),
    "JUnit a FIFO": (lambda d: [str(_junit_special(d, os.mkfifo))], 2, [
        "lastcall report: {d}/junit.xml: a FIFO, not a regular file; give the JUnit XML file"]),
    "JUnit a GiB": (lambda d: [str(_junit_special(d, sparse))], 2, [
        "lastcall report: {d}/junit.xml: 1073741824 bytes, over lastcall's limit of 16 MiB for a JUnit XML file"]),
    "65 XML files": (_many_xml, 2, ["lastcall report: {d}: more than 64 *.xml files: lastcall merges at most 64 "
                                    "of a shard"]),
    # where the merge writes
    "--out a file": (_file_out, 2, ["lastcall report --out {d}/out: a file, not a directory; give a directory for "
                                    "the reports"]),
    "--out holding a link loop": (_out_loop, 2, [f"lastcall report --out {{d}}: holds loop {TAIL}"]),
    "--out holding a page of its own": (lambda d: _out_holding(d, SUMMARY), 2, [
        f"lastcall report --out {{d}}: holds {SUMMARY} {TAIL}"]),
    # read, and left out of the row (exit 1: the run failed)
    "verdicts of every wrong shape": (lambda d: _verdicts(d, _write(json.dumps({
        "verdicts": "x", "outcome": [1], "scenario": {"a": 1}, "variant": 5, "step_error": []}))), 1, [LEFT_OUT]),
    "verdicts of lone surrogates": (lambda d: _verdicts(d, _write(
        '{"variant": "\\ud800", "scenario": "\\udc00", "verdicts": [{"checker": "\\ud800", "status": "violated"}]}'
    )), 1, [f"FAILED {NODE} on ?: boom -> {{d}}/run0/index.html"]),  # its verdicts kept, each of them left out
    "verdicts a list": (lambda d: _verdicts(d, _write('[{"checker": 1}]')), 1, [LEFT_OUT]),
    "verdicts a FIFO": (lambda d: _verdicts(d, os.mkfifo), 1, [LEFT_OUT]),
    "verdicts a link to /dev/zero": (lambda d: _verdicts(d, lambda p: p.symlink_to("/dev/zero")), 1, [LEFT_OUT]),
    "verdicts a GiB": (lambda d: _verdicts(d, sparse), 1, [LEFT_OUT]),
    "JUnit times that are no durations": (lambda d: [str(with_junit(d, junit_text(
        '<testcase name="a" time="inf"/><testcase name="b" time="nan"/><testcase name="c" time="1e400"/>'
        '<testcase name="d" time="-5"/><testcase name="e" time="1.5"/>')))], 0, []),
}


def _junit_special(d: Path, make: Callable[[Path], None]) -> Path:
    s = make_shard(d)
    make(s / "junit.xml")
    return s


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Each entry under ``root``: its kind, and a small file's digest (a large one's size: sparse, never read)."""
    out: dict[str, tuple[Any, ...]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        if stat.S_ISREG(info.st_mode):
            out[str(path)] = ("file", info.st_size, hashlib.sha256(path.read_bytes()).hexdigest()
                              if info.st_size < 1 << 24 else info.st_mtime_ns)
        else:
            out[str(path)] = (stat.S_IFMT(info.st_mode), os.readlink(path) if path.is_symlink() else "")
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, str, Path, bool]]:
    """Every case made, then merged in one child process under RLIMIT_AS: name -> (exit code, stdout, stderr,
    its directory, whether nothing under it changed)."""
    base = tmp_path_factory.mktemp("hostile-merge")
    argvs: list[tuple[str, list[str]]] = []
    dirs: dict[str, Path] = {}
    for n, (name, (make, _code, _lines)) in enumerate(CASES.items()):
        d = base / f"c{n:02}"
        dirs[name] = d
        argv = make(d)
        argvs.append((name, argv if "--out" in argv else [*argv, "--out", str(base / f"out{n:02}")]))
    before = snapshot(base)
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(argvs)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)  # a safety net: each case ends at once (a FIFO read would not)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    after = snapshot(base)
    out: dict[str, tuple[int, str, str, Path, bool]] = {}
    for n, name in enumerate(CASES):
        d = dirs[name]
        mine = {k: v for k, v in before.items() if k.startswith(f"{d}/")}
        theirs = {k: v for k, v in after.items() if k.startswith(f"{d}/")}
        code, stdout, stderr = got[name]
        out[name] = (code, stdout, stderr, d, mine == theirs and not (base / f"out{n:02}").exists())
    return out


@pytest.mark.parametrize("name", [n for n, (_m, code, _l) in CASES.items() if code == 2])
def test_a_hostile_shard_is_one_located_line_exit_2_and_nothing_written(
        name: str, results: dict[str, tuple[int, str, str, Path, bool]]) -> None:
    code, stdout, stderr, d, untouched = results[name]
    assert (code, stdout) == (2, ""), stderr
    assert stderr.splitlines() == [line.replace("{d}", str(d)) for line in CASES[name][2]]
    assert untouched  # the shard as it was, no --out made (a refused --out kept as it was)


@pytest.mark.parametrize("name", [n for n, (_m, code, _l) in CASES.items() if code != 2])
def test_a_hostile_verdicts_or_junit_field_is_left_out_and_the_merge_goes_on(
        name: str, results: dict[str, tuple[int, str, str, Path, bool]]) -> None:
    code, stdout, stderr, d, _untouched = results[name]
    assert (code, stderr) == (CASES[name][1], ""), stdout + stderr
    out = d.parent / f"out{list(CASES).index(name):02}"
    assert (out / SUMMARY).is_file() and (out / MARKER).is_file()
    assert set(line.replace("{d}", str(d)) for line in CASES[name][2]) <= set(stdout.splitlines()), stdout
    if code == 0:
        assert 'time="1.500"' in (out / "junit.xml").read_text()  # inf, nan, 1e400 and -5 count as 0


def _merge(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["report", "--merge", *argv])
    got = capsys.readouterr()
    return code, got.out, got.err


def test_no_link_of_the_merged_page_reads_as_a_scheme(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A shard whose directory is named like a scheme, merged beside it: its runs' links are percent-encoded
    paths, never ``javascript:...``; each leads to the page the merge checked."""
    from urllib.parse import unquote

    shard = make_shard(tmp_path / "javascript:alert(1)")
    code, stdout, err = _merge(capsys, str(shard), "--out", str(tmp_path))
    assert (code, err) == (0, ""), stdout
    text = (tmp_path / SUMMARY).read_text()
    links = [line.split('"')[0] for line in text.split('href="')[1:]]
    assert links == ["javascript%3Aalert%281%29/run0/index.html"]
    assert (tmp_path / unquote(links[0])).is_file()


def test_the_merge_writes_again_into_the_directory_it_made(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard = make_shard(tmp_path / "dl" / "s1")
    out = tmp_path / "dl"
    assert _merge(capsys, str(shard), "--out", str(out))[0] == 0
    assert (out / MARKER).is_file()
    (out / SUMMARY).write_text("stale")
    assert _merge(capsys, str(shard), "--out", str(out))[0] == 0  # marked: its own page, replaced
    assert "stale" not in (out / SUMMARY).read_text()


def test_the_merge_reads_no_more_verdicts_than_its_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    shard = make_shard(tmp_path / "s", [run_entry(0), run_entry(1, page=f"run1/{SUMMARY}")])
    size = (shard / "run0" / "verdicts.json").stat().st_size
    monkeypatch.setattr("harness.report.shard.READ_BUDGET", size + size // 2)  # one file, not two
    code, stdout, err = _merge(capsys, str(shard), "--out", str(tmp_path / "m"))
    assert (code, stdout) == (2, "")
    assert err.splitlines() == [f"lastcall report: {shard}/run1/verdicts.json: the shards' verdicts.json files are "
                                "more than lastcall reads in one merge (0 MiB): merge fewer shards at once"]
    assert not (tmp_path / "m").exists()


def test_what_the_terminal_shows_of_a_file_is_stripped_of_escapes(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    shard = make_shard(tmp_path / "s", [run_entry(outcome="failed", nodeid="a.yaml::a[\x1b[2J]")], exitstatus=1)
    (shard / "run0" / "verdicts.json").write_text(json.dumps({
        "variant": "\x1b]0;owned\x07", "outcome": {"status": "ok"},
        "verdicts": [{"checker": "\x1b[31mred\u202e", "status": "violated"}]}))
    code, stdout, err = _merge(capsys, str(shard), "--out", str(tmp_path / "m"))
    assert (code, err) == (1, "")
    assert "\x1b" not in stdout and "\u202e" not in stdout
    assert (f"FAILED a.yaml::a[\\x1b[2J] on \\x1b]0;owned\\x07: violated \\x1b[31mred\\u202e -> "
            f"{shard}/run0/index.html") in stdout.splitlines()


def test_the_sessions_own_page_reads_each_verdicts_json_bounded(tmp_path: Path) -> None:
    """The session's runs (harness.report.summary.collect_runs): a verdicts.json that is a FIFO, a link to
    /dev/zero or of the wrong shape leaves its row's fields out; the page is written."""
    from types import SimpleNamespace

    from harness.report.summary import collect_runs, write_summary

    reports = tmp_path / "reports"
    makes: list[Callable[[Path], None]] = [os.mkfifo, lambda p: p.symlink_to("/dev/zero"),
                                           _write('{"verdicts": [1, {"checker": []}], "outcome": "x"}')]
    reps = []
    for n, make in enumerate(makes):
        run_dir = reports / f"run{n}"
        run_dir.mkdir(parents=True)
        (run_dir / SUMMARY).write_text("<html>run</html>")
        make(run_dir / "verdicts.json")
        reps.append(SimpleNamespace(nodeid=f"s.yaml::s[{n}]", when="call", passed=False, failed=True, skipped=False,
                                    duration=1.0, longreprtext="boom", user_properties=[
                                        ("lastcall_run_id", f"run{n}"), ("lastcall_report", str(run_dir / SUMMARY))]))
    runs = collect_runs({"failed": reps})
    assert [(r.doc, r.violated, r.run_status) for r in runs] == [({}, [], ""), ({}, [], ""),
                                                                ({"verdicts": []}, [], "")]
    assert write_summary(reports, runs) == reports / SUMMARY


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=12)
VERDICT_KEYS = st.sampled_from(["scenario", "matrix", "variant", "broken", "step_error", "outcome", "verdicts"])
VERDICTS_DOC = st.dictionaries(VERDICT_KEYS, JSON | st.lists(st.dictionaries(
    st.sampled_from(["checker", "status"]), JSON | st.sampled_from(["violated", "unknown", "ok"])), max_size=3)) | JSON
ATTRS = st.dictionaries(st.sampled_from(["name", "classname", "time", "timestamp"]),
                        st.text(st.characters(blacklist_categories=["Cs", "Cc"]), max_size=12)
                        | st.sampled_from(["inf", "nan", "-1", "1e400", "1.5"]), max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=VERDICTS_DOC, outcome=st.sampled_from(["passed", "failed"]))
def test_any_verdicts_json_is_merged_never_a_traceback(doc: Any, outcome: str,
                                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("fuzz-verdicts")
    shard = make_shard(root / "s", [run_entry(outcome=outcome)], exitstatus=0 if outcome == "passed" else 1)
    (shard / "run0" / "verdicts.json").write_text(json.dumps(doc))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["report", "--merge", str(shard), "--out", str(root / "m")])
    assert (code, err.getvalue()) == (0 if outcome == "passed" else 1, "")
    assert (root / "m" / SUMMARY).is_file() and "\x1b" not in out.getvalue()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cases=st.lists(st.tuples(ATTRS, st.sampled_from(["", "<failure/>", "<error/>", "<skipped/>"])), max_size=4))
def test_any_junit_testcases_merge_never_a_traceback(cases: list[tuple[dict[str, str], str]],
                                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("fuzz-junit")
    body = "".join(f"<testcase {' '.join(f'{k}={quoteattr(v)}' for k, v in attrs.items())}>{child}</testcase>"
                   for attrs, child in cases)
    shard = with_junit(root / "s", junit_text(body))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["report", "--merge", str(shard), "--out", str(root / "m")])
    assert code in (0, 1) and err.getvalue() == ""  # 1: two testcases of one name disagree, FLAKY
    merged = (root / "m" / "junit.xml").read_text()
    assert "inf" not in merged.split('name="lastcall merged"')[1].split(">")[0]  # the suite's time is finite
