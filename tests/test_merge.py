"""``lastcall report --merge DIR...`` on synthetic shards: each shard's directory is written by the session
summary's own writer (harness.report.summary.write_summary, as a session's end writes it), with run
directories holding a verdicts.json and a page. Agreeing shards merge into one page and exit 0; repeats
that disagree across shards are FLAKY (exit 1); a failed run is exit 1; bad input is exit 2 with one
located line per problem and nothing written."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.report.junit import FLAKY_TYPE
from harness.report.summary import SESSION, SessionRun, terminal_summary, write_summary

A = "scenarios/a.yaml::a[tp1-pp1-cpu]"
B = "scenarios/b.yaml::b[tp1-pp1-cpu]"
SHA_A, SHA_B = "a" * 64, "b" * 64


def shard(root: Path, runs: list[tuple[str, str]], *, splits: int | None = 2, group: int | None = 1,
          exitstatus: int | None = 0, sha: dict[str, str] | None = None, target: str | None = None) -> Path:
    """A shard's report directory: a run directory per run (verdicts.json, index.html), then the summary."""
    digests = {"scenarios/a.yaml": SHA_A, "scenarios/b.yaml": SHA_B, **(sha or {})}
    out = []
    for n, (nodeid, outcome) in enumerate(runs):
        run_id = f"{root.name}x{n}"
        run_dir = root / run_id
        run_dir.mkdir(parents=True)
        violated = outcome == "failed"
        doc = {"format": 1, "scenario": nodeid.split("::")[1].split("[")[0], "matrix": "tp1-pp1-cpu",
               "variant": "reference", "run_id": run_id, "nodeid": nodeid, "outcome": {"status": "ok"},
               "passed": not violated, "verdicts": [{"checker": "no_late_dispatch",
                                                     "status": "violated" if violated else "held"}]}
        (run_dir / "verdicts.json").write_text(json.dumps(doc))
        (run_dir / "index.html").write_text("<html>run</html>")
        out.append(SessionRun(nodeid, outcome, 1.5, run_id, str(run_dir / "index.html"), doc,
                              scenario_sha256=digests[nodeid.split("::")[0]]))
    meta = {"lastcall": "0.1.0", "target": target, "exitstatus": exitstatus, "splits": splits, "group": group}
    assert write_summary(root, out, meta) is not None
    return root


def merge(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["report", "--merge", *argv])
    got = capsys.readouterr()
    return code, got.out, got.err


def links(page: Path) -> list[str]:
    return re.findall(r'href="([^"]+)"', page.read_text())


def junit(root: Path, cases: list[tuple[str, str]], name: str = "junit.xml") -> Path:
    """A shard's JUnit file as pytest writes it: classname the node id's file (/ as .), name the rest;
    a failed case has a <failure>, an errored one an <error>, a skipped one <skipped>."""
    suite = ET.Element("testsuite", {"name": "pytest", "errors": "0", "failures": "0", "skipped": "0",
                                     "tests": str(len(cases)), "time": "3.0", "timestamp": "2026-12-01T16:00:00"})
    for nodeid, outcome in cases:
        path, _, rest = nodeid.partition("::")
        case = ET.SubElement(suite, "testcase", {"classname": path.replace("/", "."), "name": rest, "time": "1.5"})
        if outcome != "passed":
            tag = {"failed": "failure", "error": "error", "skipped": "skipped"}[outcome]
            ET.SubElement(case, tag, {"message": f"{outcome} here"}).text = "the report"
    top = ET.Element("testsuites", {"name": "pytest tests"})
    top.append(suite)
    ET.ElementTree(top).write(root / name, encoding="utf-8", xml_declaration=True)
    return root / name


def cases_of(path: Path) -> list[tuple[str, str, tuple[str, ...]]]:
    """(classname, name, the tags of its children) of each testcase of a JUnit file."""
    return [(c.get("classname", ""), c.get("name", ""), tuple(ch.tag for ch in c))
            for c in ET.parse(path).getroot().iter("testcase")]


def test_the_shards_junit_files_merge_into_one_testsuite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = shard(tmp_path / "dl" / "s1", [(A, "passed")], group=1)
    two = shard(tmp_path / "dl" / "s2", [(B, "failed")], group=2, exitstatus=1)
    junit(one, [(A, "passed"), ("tests/test_x.py::test_skipped", "skipped")])
    junit(two, [(B, "failed"), ("tests/test_x.py::test_setup", "error")])
    (two / "other.xml").write_text("<coverage/>")  # XML that is not JUnit: left alone
    out = tmp_path / "dl"  # beside the shards: its pages lie inside it, so it merges again
    code, stdout, err = merge(capsys, str(one), str(two), "--out", str(out))
    assert (code, err) == (1, "")  # B failed
    assert f"junit: {out / 'junit.xml'}, 4 testcases of 2 files" in stdout.splitlines()
    root = ET.parse(out / "junit.xml").getroot()
    assert root.tag == "testsuites" and [s.tag for s in root] == ["testsuite"]
    suite = root[0]
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped", "time")} == {
        "tests": "4", "failures": "1", "errors": "1", "skipped": "1", "time": "6.000"}
    assert cases_of(out / "junit.xml") == [
        ("scenarios.a.yaml", "a[tp1-pp1-cpu]", ()), ("tests.test_x.py", "test_skipped", ("skipped",)),
        ("scenarios.b.yaml", "b[tp1-pp1-cpu]", ("failure",)), ("tests.test_x.py", "test_setup", ("error",))]
    # the merged directory merges again, with its JUnit
    code, stdout, _ = merge(capsys, str(out), "--out", str(tmp_path / "again"))
    assert code == 1 and cases_of(tmp_path / "again" / "junit.xml") == cases_of(out / "junit.xml")


def test_a_repeat_that_disagrees_across_shards_is_flaky_in_the_merged_junit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a1, a2, b1, b2 = A[:-1] + "-r1]", A[:-1] + "-r2]", B[:-1] + "-r1]", B[:-1] + "-r2]"
    one = shard(tmp_path / "s1", [(a1, "passed"), (b1, "passed")], group=1)
    two = shard(tmp_path / "s2", [(a2, "failed"), (b2, "passed")], group=2, exitstatus=1)
    junit(one, [(a1, "passed"), (b1, "passed")])
    junit(two, [(a2, "failed"), (b2, "passed")])
    out = tmp_path / "m"
    code, stdout, _ = merge(capsys, str(one), str(two), "--out", str(out))
    assert code == 1
    line = f"FLAKY scenarios.a.yaml::a[tp1-pp1-cpu]: passed 1, failed 1 of 2 repeats (on {one}, {two})"
    assert "1 flaky item(s) marked failed" in stdout
    root = ET.parse(out / "junit.xml").getroot()
    by_name = {c.get("name"): c for c in root.iter("testcase")}
    marked = by_name["a[tp1-pp1-cpu-r1]"].findall("failure")  # it passed, but its item is flaky
    assert [(f.get("type"), f.get("message")) for f in marked] == [(FLAKY_TYPE, line)]
    assert [f.get("type") for f in by_name["a[tp1-pp1-cpu-r2]"].findall("failure")] == [None]  # its own failure
    assert by_name["b[tp1-pp1-cpu-r1]"].find("failure") is None  # B's repeats agree: passed
    assert root[0].get("failures") == "2"
    # the same items failed under a target override: another item each, not flaky with the passes above
    ok1 = shard(tmp_path / "u1", [(a1, "passed")], group=1)
    ok2 = shard(tmp_path / "u2", [(a2, "passed")], group=2)
    bad1 = shard(tmp_path / "t1", [(a1, "failed")], group=1, target="no_conn_tracking", exitstatus=1)
    bad2 = shard(tmp_path / "t2", [(a2, "failed")], group=2, target="no_conn_tracking", exitstatus=1)
    for d, outcome in ((ok1, "passed"), (ok2, "passed"), (bad1, "failed"), (bad2, "failed")):
        junit(d, [(a1 if d.name.endswith("1") else a2, outcome)])
    code, stdout, _ = merge(capsys, *map(str, (ok1, ok2, bad1, bad2)), "--out", str(tmp_path / "n"))
    assert code == 1 and "FLAKY" not in stdout and "marked failed" not in stdout, stdout
    assert [c[2] for c in cases_of(tmp_path / "n" / "junit.xml")] == [(), (), ("failure",), ("failure",)]


def test_shards_without_junit_merge_without_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = shard(tmp_path / "s1", [(A, "passed")], group=1)
    two = shard(tmp_path / "s2", [(B, "passed")], group=2)
    code, stdout, _ = merge(capsys, str(one), str(two), "--out", str(tmp_path / "m"))
    assert code == 0 and "junit:" not in stdout and not (tmp_path / "m" / "junit.xml").exists()


def test_shards_that_agree_merge_into_one_page_and_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = shard(tmp_path / "dl" / "shard-1", [(A[:-1] + "-r1]", "passed"), (B, "passed")], group=1)
    two = shard(tmp_path / "dl" / "shard-2", [(A[:-1] + "-r2]", "passed")], group=2)
    out = tmp_path / "dl"  # beside the shards, as the example workflow merges them
    code, stdout, err = merge(capsys, str(one), str(two), "--out", str(out))
    assert (code, err) == (0, ""), stdout
    assert "3 scenario runs: 3 passed, 0 failed, 0 skipped, from 2 shards; summary: " in stdout
    assert "FLAKY" not in stdout and "FAILED" not in stdout
    page = out / "index.html"
    assert sorted(links(page)) == ["shard-1/shard-1x0/index.html", "shard-1/shard-1x1/index.html",
                                   "shard-2/shard-2x0/index.html"]
    assert all((out / link).is_file() for link in links(page))
    doc = json.loads((out / SESSION).read_text())
    assert [(r["nodeid"], r["outcome"], r["shard"]) for r in doc["runs"]] == [
        (A[:-1] + "-r1]", "passed", str(one)), (A[:-1] + "-r2]", "passed", str(two)), (B, "passed", str(one))]
    assert doc["exitstatus"] == 0 and [m["group"] for m in doc["merged"]] == [1, 2]
    assert 'id="flaky"' not in page.read_text() and "<th>shard</th>" in page.read_text()
    # the shards are untouched, and the merged directory merges again into the same runs
    assert json.loads((one / SESSION).read_text())["group"] == 1
    again = tmp_path / "again"
    code, stdout, _ = merge(capsys, str(out), "--out", str(again))
    assert code == 0, stdout
    rerun = json.loads((again / SESSION).read_text())["runs"]
    assert [r["nodeid"] for r in rerun] == [r["nodeid"] for r in doc["runs"]]
    assert all((again / link).is_file() for link in links(again / "index.html"))


def test_repeats_that_disagree_across_shards_are_flaky_and_fail(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    one = shard(tmp_path / "s1", [(A[:-1] + "-r1]", "passed"), (B[:-1] + "-r1]", "passed")], group=1)
    two = shard(tmp_path / "s2", [(A[:-1] + "-r2]", "failed"), (B[:-1] + "-r2]", "passed")], group=2)
    code, stdout, err = merge(capsys, str(one), str(two), "--out", str(tmp_path / "m"))
    assert (code, err) == (1, "")
    assert f"FLAKY {A}: passed 1, failed 1 of 2 repeats (on {one}, {two})" in stdout.splitlines()
    assert "FLAKY " + B not in stdout  # its repeats agree
    assert "1 flaky, from 2 shards" in stdout
    page = (tmp_path / "m" / "index.html").read_text()
    assert 'id="flaky"' in page and f"FLAKY {A}" in page


def test_one_item_run_by_two_shards_that_disagree_is_flaky(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a whole session and a rerun of it (no --splits): the same node id in both
    one = shard(tmp_path / "s1", [(A, "passed")], splits=None, group=None)
    two = shard(tmp_path / "s2", [(A, "failed")], splits=None, group=None, exitstatus=1)
    code, stdout, _ = merge(capsys, str(one), str(two), "--out", str(tmp_path / "m"))
    assert code == 1
    assert f"FLAKY {A}: passed 1, failed 1 of 2 repeats (on {one}, {two})" in stdout


def test_a_failed_run_fails_the_merge_with_its_violations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = shard(tmp_path / "s1", [(A, "passed")], group=1)
    two = shard(tmp_path / "s2", [(B, "failed")], group=2, exitstatus=1)
    code, stdout, _ = merge(capsys, str(one), str(two), "--out", str(tmp_path / "m"))
    assert code == 1
    assert [line for line in stdout.splitlines() if line.startswith("FAILED")] == [
        f"FAILED {B} on reference: violated no_late_dispatch -> {two / 's2x0' / 'index.html'}"]
    assert "2 scenario runs: 1 passed, 1 failed, 0 skipped, from 2 shards" in stdout
    assert 'class="run failed"' in (tmp_path / "m" / "index.html").read_text()


def test_a_shard_whose_pytest_failed_fails_the_merge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # every scenario run passed, but its session did not (a test that is no scenario, a collection error)
    one = shard(tmp_path / "s1", [(A, "passed")], group=1)
    two = shard(tmp_path / "s2", [(B, "passed")], group=2, exitstatus=1)
    code, stdout, _ = merge(capsys, str(one), str(two), "--out", str(tmp_path / "m"))
    assert code == 1 and f"FAILED shard {two}: pytest exited 1" in stdout
    # an empty group (more shards than items: pytest's 5) is no failure
    three = shard(tmp_path / "t1", [(A, "passed")], splits=2, group=1)
    four = shard(tmp_path / "t2", [], splits=2, group=2, exitstatus=5)
    assert merge(capsys, str(three), str(four), "--out", str(tmp_path / "n"))[0] == 0


def _bad(tmp: Path) -> dict[str, tuple[list[str], list[str]]]:
    """name -> (argv after --merge, the lines expected on stderr, as regexes)."""
    good = shard(tmp / "good", [(A, "passed")], group=1)
    two = shard(tmp / "two", [(B, "passed")], group=2)
    (tmp / "plain").mkdir()
    (tmp / "parent" / "x").mkdir(parents=True)
    (tmp / "parent" / "x" / SESSION).write_text("{}")
    (tmp / "garbled").mkdir()
    (tmp / "garbled" / SESSION).write_text('{"format": 1, "runs": [')
    (tmp / "future").mkdir()
    (tmp / "future" / SESSION).write_text('{"format": 99, "runs": []}')
    other = shard(tmp / "other", [(B, "passed")], group=2, sha={"scenarios/b.yaml": "c" * 64})
    other_a = shard(tmp / "other-a", [(A[:-1] + "-r2]", "passed")], group=2, sha={"scenarios/a.yaml": "d" * 64})
    three = shard(tmp / "three", [(B, "passed")], splits=3, group=2)
    gone = shard(tmp / "gone", [(B, "passed")], group=2)
    (gone / "gonex0" / "verdicts.json").unlink()
    (gone / "gonex0" / "index.html").unlink()
    (gone / "gonex0").rmdir()
    odd = shard(tmp / "odd", [(B, "passed")], group=2)
    doc = json.loads((odd / SESSION).read_text())
    doc["runs"].append({"nodeid": A, "outcome": "maybe"})
    (odd / SESSION).write_text(json.dumps(doc))
    slow = shard(tmp / "slow", [(B, "passed")], group=2)
    doc = json.loads((slow / SESSION).read_text())
    doc["runs"][0]["seconds"] = "long"
    (slow / SESSION).write_text(json.dumps(doc))
    beyond = shard(tmp / "beyond", [(B, "passed")], splits=2, group=3)
    empty1 = shard(tmp / "e1", [], splits=2, group=1, exitstatus=5)
    empty2 = shard(tmp / "e2", [], splits=2, group=2, exitstatus=5)
    cut = shard(tmp / "cut", [(B, "passed")], group=2)
    with_junit = shard(tmp / "with-junit", [(A, "passed")], group=1)
    junit(with_junit, [(A, "passed")])  # the shards beside it that have no JUnit are told so
    (cut / "junit.xml").write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest"><testcase ')
    t = re.escape
    return {
        "no such directory": ([str(good), str(tmp / "nope")], [rf"{t(str(tmp / 'nope'))}: no such directory"]),
        "not a report dir": ([str(good), str(tmp / "plain")],
                             [rf"{t(str(tmp / 'plain'))}: not a lastcall session's report directory \(no session"]),
        "a parent of shards": ([str(tmp / "parent")], [r"parent: not a lastcall session's .*its subdirectories x are: "
                                                       r"give them"]),
        "garbled": ([str(good), str(tmp / "garbled")], [rf"{t(str(tmp / 'garbled' / SESSION))}: not a session.json "
                                                         r"lastcall wrote: not JSON: Expecting value: line 1"]),
        "another format": ([str(tmp / "future")], [rf"{t(str(tmp / 'future' / SESSION))}: format 99, this lastcall "
                                                   r"reads 1"]),
        "other file contents": ([str(good), str(two), str(other)], [
            rf"{t(str(other / SESSION))}: {t(B)} ran under other contents of scenarios/b.yaml than in "
            rf"{t(str(two))} \(sha256 cccccccccccc vs bbbbbbbbbbbb\): the shards ran different trees"]),
        "repeat under other contents": ([str(good), str(other_a)], [
            rf"{t(str(other_a / SESSION))}: {t(A[:-1])}-r2\] ran under other contents of scenarios/a.yaml than in "
            rf"{t(str(good))} \(sha256 dddddddddddd vs aaaaaaaaaaaa\): the shards ran different trees"]),
        "split differently": ([str(good), str(three)], [r"shards were split differently: .*good is group 1/2, .*three "
                                                        r"is group 2/3"]),
        "a group missing": ([str(good)], [rf"shards: group 2 of --splits 2 is missing \(given: {t(str(good))} = 1\)"]),
        "a run's report missing": ([str(good), str(gone)], [
            rf"{t(str(gone / SESSION))}: runs\[0\]: {t(B)}: its report {t(str(gone / 'gonex0'))} is not there"]),
        "a bad outcome": ([str(good), str(odd)], [rf"{t(str(odd / SESSION))}: runs\[1\]: {t(A)}: outcome 'maybe' is "
                                                  r"none of passed"]),
        "seconds not a number": ([str(good), str(slow)], [rf"{t(str(slow / SESSION))}: runs\[0\]: {t(B)}: seconds "
                                                          r"'long' is not a number"]),
        "a group beyond its splits": ([str(good), str(beyond)], [rf"{t(str(beyond / SESSION))}: group 3 of splits 2: "
                                                                 r"not a pytest-split group"]),
        "given twice": ([str(good), str(two), str(good) + "/"], [rf"{t(str(good))}/: given twice"]),
        "no runs at all": ([str(empty1), str(empty2)], [r"no scenario run in any of "]),
        "out is a shard": ([str(good), str(two), "--out", str(two)],
                           [rf"lastcall report --out {t(str(two))}: is the shard {t(str(two))}: its own page would "
                            r"be replaced"]),
        "with --check": ([str(good), str(two), "--check", "no_late_dispatch"], [r"error: --check re-judges one "]),
        "two problems, two lines": ([str(tmp / "nope"), str(tmp / "plain")], [r"nope: no such", r"plain: not a "]),
        "a JUnit file cut short": ([str(good), str(cut)], [rf"{t(str(cut / 'junit.xml'))}: not well-formed XML "
                                                          r"\(.*\): an incomplete download of the shard\?"]),
        "JUnit on one shard only": ([str(with_junit), str(two)], [
            rf"{t(str(two))}: no JUnit file \(an \*.xml of <testsuites> or <testsuite>\) while "
            rf"{t(str(with_junit / 'junit.xml'))} is one: every shard's testcases are merged, none may be lost"]),
    }


CASES = ["no such directory", "not a report dir", "a parent of shards", "garbled", "another format",
         "other file contents", "repeat under other contents", "split differently", "a group missing",
         "a run's report missing", "a bad outcome", "seconds not a number", "a group beyond its splits",
         "given twice", "no runs at all", "out is a shard", "with --check", "two problems, two lines",
         "a JUnit file cut short", "JUnit on one shard only"]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_located_line_each_exit_2_and_nothing_written(
        case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = _bad(tmp_path)
    assert sorted(cases) == sorted(CASES)  # every case made is run
    argv, expected = cases[case]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    if "--out" not in argv:
        argv = [*argv, "--out", str(tmp_path / "merged")]
    code, stdout, err = merge(capsys, *argv)
    lines = err.splitlines()
    assert code == 2, (stdout, err)
    assert len(lines) == len(expected), err
    for line, pattern in zip(lines, expected, strict=True):
        assert line.startswith("lastcall report"), line
        assert re.search(pattern, line), (pattern, line)
    assert "Traceback" not in err and stdout == ""
    assert not (tmp_path / "merged").exists()
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # nothing lost


def test_report_without_history_or_merge_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report"]) == 2
    assert capsys.readouterr().err.strip() == ("lastcall report: error: give a run's HISTORY.jsonl, or --merge with "
                                               "the shards' report directories (see lastcall report --help)")


class _Config:
    """What terminal_summary reads of a pytest config: its options, ini, rootdir."""

    def __init__(self, root: Path, **options: Any) -> None:
        self.rootpath = root
        self.options = options

    def getoption(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)

    def getini(self, name: str) -> str:
        return "reports"


def test_a_session_writes_session_json_with_its_shard_target_exit_status_and_file_digests(tmp_path: Path) -> None:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "a.yaml").write_text("name: a\n")
    rep = SimpleNamespace(nodeid=A, when="call", passed=True, failed=False, skipped=False, duration=2.0,
                          user_properties=[])
    lines: list[str] = []
    reporter = SimpleNamespace(stats={"passed": [rep]}, write_sep=lambda *a: None, write_line=lines.append)
    terminal_summary(reporter, _Config(tmp_path, splits=3, group=2, lastcall_target="no_conn_tracking"),  # type: ignore[arg-type]
                     0)
    doc = json.loads((tmp_path / "reports" / SESSION).read_text())
    assert (doc["splits"], doc["group"], doc["exitstatus"], doc["target"]) == (3, 2, 0, "no_conn_tracking")
    assert doc["runs"] == [{"nodeid": A, "outcome": "passed", "seconds": 2.0, "run_id": "", "page": "", "longrepr": "",
                            "scenario_sha256": hashlib.sha256(b"name: a\n").hexdigest()}]
    # a shard whose group has no scenario writes its empty session.json (the merge counts its group) ...
    empty = tmp_path / "empty"
    reporter.stats = {}
    terminal_summary(reporter, _Config(empty, splits=3, group=3))  # type: ignore[arg-type]
    assert json.loads((empty / "reports" / SESSION).read_text())["runs"] == []
    # ... a session that is no shard and ran no scenario writes nothing (it would replace a scenario session's)
    none = tmp_path / "none"
    terminal_summary(reporter, _Config(none))  # type: ignore[arg-type]
    assert not (none / "reports").exists()


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=12)
FIELDS = st.fixed_dictionaries({}, optional={"nodeid": st.text(max_size=12) | JSON, "outcome": st.sampled_from(
    ["passed", "failed", "skipped", "interrupted"]) | JSON, "seconds": JSON, "page": JSON, "shard": JSON,
    "run_id": JSON, "scenario_sha256": JSON, "longrepr": JSON})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(meta=st.dictionaries(st.sampled_from(["format", "splits", "group", "exitstatus", "target"]), JSON),
       runs=st.lists(FIELDS, max_size=3) | JSON)
@example(meta={}, runs=[{"nodeid": "\x1e"}])  # found by CI: a name str.splitlines() splits kept the error on one line
@example(meta={}, runs=[{"nodeid": "a\nb", "outcome": "passed", "seconds": "x"}])
def test_any_session_json_is_merged_or_refused_never_a_traceback(meta: dict[str, Any], runs: Any,
                                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("fuzz")
    (root / "s").mkdir()
    (root / "s" / SESSION).write_text(json.dumps({"format": 1, **meta, "runs": runs}))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["report", "--merge", str(root / "s"), "--out", str(root / "m")])
    assert code in (0, 1, 2), err.getvalue()
    if code == 2:
        assert err.getvalue() and all(line.startswith("lastcall report") for line in err.getvalue().splitlines())
        assert not (root / "m").exists()
    else:
        assert (root / "m" / "index.html").is_file()
