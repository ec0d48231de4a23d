"""A report is data: ``lastcall replay`` takes from it only a scenario item's name and parameters, the sha256 of
its file, and a target that names no code (docs/trust.md); the file is found by name and sha256 among the user's
own roots, never at a path the report holds. One test per class of attack: each asserts the exit code, the
located message, and that nothing ran (pytest is never started, no file a report names is imported)."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.report.find_scenario import LIBRARY
from harness.report.replay import REPORTS_MARKER
from harness.scenario import commands

ITEM = "scenarios/mine.yaml::mine[tp1-pp1-cpu]"  # as the run recorded it, relative to its rootdir
SCENARIO = """name: mine
about: a scenario of the user's own tree
catches: [no_conn_tracking]
steps:
  - start: cluster
  - stop: {as: s1}
expect:
  - stop_result: {step: s1}
"""


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's tree (the current directory, one level into tmp_path) with one scenario and one run's report."""
    top = tmp_path / "work"
    (top / "scenarios").mkdir(parents=True)
    (top / "scenarios" / "mine.yaml").write_text(SCENARIO)
    run = top / "reports" / "1x2"
    run.mkdir(parents=True)
    (top / "reports" / REPORTS_MARKER).write_text("")
    monkeypatch.chdir(top)
    return top


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What ``lastcall run`` was asked to run, instead of running it (pytest is never started)."""
    calls: list[dict[str, Any]] = []

    def fake(paths: list[str], **kw: Any) -> int:
        calls.append({"paths": paths, **kw})
        return 0

    monkeypatch.setattr(commands, "run", fake)
    return calls


def _report(tree: Path, **fields: Any) -> Path:
    run = tree / "reports" / "1x2"
    doc = {"format": 1, "scenario": "mine", "scenario_sha256": sha(SCENARIO), "matrix": "tp1-pp1-cpu",
           "variant": "reference", "run_id": "1x2", "nodeid": ITEM, "target": None, **fields}
    (run / "verdicts.json").write_text(json.dumps(doc))
    return run


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _replay(run: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    rc = main(["replay", str(run), *args])
    return rc, capsys.readouterr().err


def mine(tree: Path) -> str:
    """The item replay runs: the found file's absolute path, the recorded name and parameters."""
    return f"{(tree / 'scenarios' / 'mine.yaml').resolve()}::mine[tp1-pp1-cpu]"


def test_a_sound_report_is_replayed_with_its_node_id_after_the_separator(
        tree: Path, started: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    run = _report(tree, target="no_conn_tracking")
    assert _replay(run, capsys) == (0, "")
    assert started == [{"paths": [mine(tree)], "target": "no_conn_tracking", "trust_cwd": False}]


@pytest.mark.parametrize("nodeid", ["--basetemp=/tmp/lastcall-victim", "--junitxml=/tmp/lastcall-victim.xml",
                                    "-pthis", "-p", "scenarios/mine.yaml::mine[tp1-pp1-cpu] --basetemp=x",
                                    "/etc/mine.yaml::mine[tp1-pp1-cpu]", "scenarios/mine.yaml", "scenarios",
                                    "scenarios/mine.py::test_x", ["scenarios/mine.yaml::mine[a]"], 7])
def test_a_node_id_that_is_not_a_scenario_item_is_refused(tree: Path, started: list[dict[str, Any]], nodeid: object,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    run = _report(tree, nodeid=nodeid)
    rc, err = _replay(run, capsys)
    meta = run / "verdicts.json"
    assert rc == 2 and started == []
    if isinstance(nodeid, str):
        assert err == (f"lastcall replay: {meta}: its test {nodeid!r} is not a scenario item's node id "
                       "(PATH.yaml::NAME[PARAMS])\n")
    else:
        assert err == f"lastcall replay: {meta}: nodeid: a {'JSON list' if isinstance(nodeid, list) else 'number'}" \
                      ", expected a string or null; left out\n"


def test_pytest_never_sees_a_node_id_as_an_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """Even ``lastcall run``'s own paths reach pytest after ``--`` (pytest reads -p before it parses options, so
    the node id's shape is checked first: the test above)."""
    seen: list[list[str]] = []
    monkeypatch.setattr("pytest.main", lambda args: seen.append(list(args)) or 0)
    monkeypatch.setattr(commands, "preflight", lambda *a: ([], set()))
    assert commands.run([ITEM], target="reference", trust_cwd=False) == 0
    (args,) = seen
    assert args[-2:] == ["--", ITEM]


def test_the_current_directory_is_not_put_on_the_path_for_a_replay(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pytest.main", lambda args: 0)
    monkeypatch.setattr(commands, "preflight", lambda *a: ([], set()))
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    commands.run([ITEM], trust_cwd=False)
    assert os.getcwd() not in sys.path
    commands.run([ITEM])  # the user's own command line: a module:attribute target from here is found
    assert os.getcwd() in sys.path


def looked(*roots: tuple[Path, str]) -> str:
    """The message's list of where a search looked, the library and the rootdir of the tests' own checkout
    left to the caller."""
    return ", ".join(f"{p} ({why})" for p, why in roots)


@pytest.mark.parametrize("where", ["run", "reports", "marked", "up"])
def test_a_scenario_file_inside_a_report_is_never_found(tree: Path, started: list[dict[str, Any]], where: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A scenario a report brings with it (and a conftest.py beside it, which pytest would load) is never run:
    its node id and sha256 name it exactly, and the search leaves out every directory of a report."""
    place = {"run": "reports/1x2", "reports": "reports", "marked": "downloaded/shard", "up": "../outside"}[where]
    folder = (tree / place).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    evil = SCENARIO.replace("name: mine", "name: evil")
    (folder / "evil.yaml").write_text(evil)
    (folder / "conftest.py").write_text(f"open({str(tree / 'ran')!r}, 'w').close()\n")
    if where == "marked":
        (tree / "downloaded" / REPORTS_MARKER).write_text("")
    nodeid = f"{place if where != 'up' else 'outside'}/evil.yaml::evil[tp1-pp1-cpu]"
    run = _report(tree, nodeid=nodeid, scenario="evil", scenario_sha256=sha(evil))
    rc, err = _replay(run, capsys)
    assert rc == 2 and started == [] and not (tree / "ran").exists()
    assert err.startswith(f"lastcall replay: {run / 'verdicts.json'}: found no scenario evil with the recorded "
                          f"sha256 {sha(evil)[:12]}; looked in {looked((tree, 'the current directory'))}, ")
    assert err.endswith(" (lastcall's scenario library): give the directory that holds it with --path DIR\n")
    rc, err = _replay(run, capsys, "--path", str(folder))
    if where == "up":  # a directory of the user's own, named by the user: searched
        assert (rc, [s["paths"] for s in started]) == (0, [[f"{folder / 'evil.yaml'}::evil[tp1-pp1-cpu]"]])
    else:  # nor when the user names it: it is a report's
        assert rc == 2 and started == [] and f"{folder} (--path; not searched: it lies in " in err


@pytest.mark.parametrize("target", ["reports.1x2.evil:TARGET", "reference@reports.1x2.evil:Listener",
                                    "kvcached==../../../tmp/x", "kvcached==0.1.6 ", "os:system"])
def test_a_target_that_names_code_is_refused_with_the_command_to_trust_it(
        tree: Path, started: list[dict[str, Any]], target: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = _report(tree, target=target)
    (run / "evil.py").write_text(f"open({str(tree / 'ran')!r}, 'w').close()\nTARGET = Listener = None\n")
    (run / "__init__.py").write_text("")
    (tree / "reports" / "__init__.py").write_text("")
    rc, err = _replay(run, capsys)
    assert rc == 2 and started == [] and not (tree / "ran").exists()
    assert "reports.1x2.evil" not in sys.modules
    quoted = shlex.quote(target)
    assert err == (f"lastcall replay: {run / 'verdicts.json'}: its target {target!r} is not a built-in name or an "
                   f"installed entry point: replaying it would import code the report names. If you trust it, run: "
                   f"lastcall run {shlex.quote(mine(tree))} --target {quoted}\n")


def test_a_variant_that_names_code_is_refused_too(tree: Path, started: list[dict[str, Any]],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    run = _report(tree, variant="reports.1x2.evil:TARGET")
    rc, err = _replay(run, capsys)
    assert rc == 2 and started == [] and "its target 'reports.1x2.evil:TARGET' is not a built-in name" in err


def test_a_verdicts_file_that_is_not_a_regular_file_is_refused_at_once(
        tree: Path, started: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    run = tree / "reports" / "1x2"
    os.mkfifo(run / "verdicts.json")  # opened without blocking, refused before a byte is read
    rc, err = _replay(run, capsys)
    assert rc == 2 and started == []
    assert err == (f"lastcall replay: {run / 'verdicts.json'}: cannot read it: a FIFO, not a regular file; give the "
                   "verdicts.json; left out\n")
    (run / "verdicts.json").unlink()
    (run / "verdicts.json").symlink_to("/dev/zero")
    rc, err = _replay(run, capsys)
    assert rc == 2 and "a symbolic link, not a regular file" in err


def test_a_missing_scenario_says_where_it_looked(tree: Path, started: list[dict[str, Any]],
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "scenarios" / "mine.yaml").unlink()
    (tree / "pytest.ini").write_text("[pytest]\n")
    (tree / "sub").mkdir()
    monkeypatch.chdir(tree / "sub")
    run = _report(tree)
    rc, err = _replay(run, capsys)
    assert (rc, started) == (2, [])
    where = looked((tree / "sub", "the current directory"), (tree, "the rootdir"),
                   (LIBRARY, "lastcall's scenario library"))
    assert err == (f"lastcall replay: {run / 'verdicts.json'}: found no scenario mine with the recorded sha256 "
                   f"{sha(SCENARIO)[:12]}; looked in {where}: give the directory that holds it with --path DIR\n")


def test_the_rootdir_is_searched_from_a_directory_below_it(tree: Path, started: list[dict[str, Any]],
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "pytest.ini").write_text("[pytest]\n")
    (tree / "sub").mkdir()
    monkeypatch.chdir(tree / "sub")
    assert _replay(_report(tree), capsys) == (0, "")
    assert [s["paths"] for s in started] == [[mine(tree)]]


# ------------------------------------------------------------------ finding the scenario by name and sha256
LIBRARY_FILE = LIBRARY / "accept-failure-keeps-serving.yaml"  # a scenario lastcall ships


def test_a_replay_from_outside_the_checkout_finds_the_library_scenario(
        tmp_path: Path, started: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The node id the run recorded is relative to its rootdir; from a directory that holds no scenarios the
    file is found in lastcall's library by its name and the sha256 of its bytes."""
    run = tmp_path / "artifact" / "1x2"
    run.mkdir(parents=True)
    name = LIBRARY_FILE.stem
    doc = {"format": 1, "scenario": name, "scenario_sha256": hashlib.sha256(LIBRARY_FILE.read_bytes()).hexdigest(),
           "variant": "reference", "nodeid": f"scenarios/{LIBRARY_FILE.name}::{name}[tp1-pp1-cpu]", "target": None}
    (run / "verdicts.json").write_text(json.dumps(doc))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert _replay(run, capsys) == (0, "")
    assert started == [{"paths": [f"{LIBRARY_FILE}::{name}[tp1-pp1-cpu]"], "target": None, "trust_cwd": False}]


def test_a_copy_whose_bytes_differ_is_refused(tree: Path, started: list[dict[str, Any]],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    changed = tree / "scenarios" / "mine.yaml"
    changed.write_text(SCENARIO + "# edited since the run\n")
    rc, err = _replay(_report(tree), capsys)
    assert (rc, started) == (2, [])
    assert err == (f"lastcall replay: {tree / 'reports' / '1x2' / 'verdicts.json'}: found mine at "
                   f"{changed.resolve()} but its content differs from the recorded run (sha256 "
                   f"{sha(changed.read_text())[:12]}, recorded {sha(SCENARIO)[:12]})\n")


@pytest.mark.parametrize("genuine", [True, False])
def test_the_path_a_report_records_is_never_used(tree: Path, started: list[dict[str, Any]], genuine: bool,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The record's node id points at another file of the same name: the replay runs the file of the recorded
    bytes (or refuses), never the one the record points at."""
    other = tree / "other" / "mine.yaml"
    other.parent.mkdir()
    other.write_text(SCENARIO.replace("about: a scenario", "about: another scenario"))
    if not genuine:
        (tree / "scenarios" / "mine.yaml").unlink()
    rc, err = _replay(_report(tree, nodeid="other/mine.yaml::mine[tp1-pp1-cpu]"), capsys)
    if genuine:
        assert (rc, [s["paths"] for s in started]) == (0, [[mine(tree)]])
    else:
        assert (rc, started) == (2, []) and f"found mine at {other.resolve()} but its content differs" in err


def test_the_paths_given_are_searched_first(tree: Path, started: list[dict[str, Any]], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    mine_dir = tmp_path / "mine"
    mine_dir.mkdir()
    (mine_dir / "copy.yaml").write_text(SCENARIO)
    run = _report(tree)
    assert _replay(run, capsys, "--path", str(tmp_path / "nothing-here"), "--path", str(mine_dir))[0] == 2
    assert _replay(run, capsys, "--path", str(mine_dir)) == (0, "")
    assert [s["paths"] for s in started] == [[f"{mine_dir.resolve() / 'copy.yaml'}::mine[tp1-pp1-cpu]"]]
    assert _replay(run, capsys, "--path", str(tmp_path / "nothing-here")) == (
        2, f"lastcall replay: {run / 'verdicts.json'}: --path {str(tmp_path / 'nothing-here')!r} is not a "
           "directory\n")


def test_a_report_without_a_sha256_is_refused_with_the_command_to_type(
        tree: Path, started: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    for absent in (False, True):  # null (a scenario loaded from text), or no key at all (an older lastcall)
        old = _report(tree, scenario_sha256=None)
        if absent:
            doc = json.loads((old / "verdicts.json").read_text())
            del doc["scenario_sha256"]
            (old / "verdicts.json").write_text(json.dumps(doc))
        rc, err = _replay(old, capsys)
        assert (rc, started) == (2, [])
        assert err == (f"lastcall replay: {old / 'verdicts.json'}: it records no scenario_sha256, the hash "
                       "lastcall replay finds the scenario file by (a report of an older lastcall); rerun it from "
                       "your own copy of the file: lastcall run FILE.yaml::mine[tp1-pp1-cpu]\n")


HUGE = "x" * 1_000_000


@pytest.mark.parametrize(("fields", "why"), [
    ({"scenario": "../../etc/mine"}, "its scenario '../../etc/mine' is not its test's 'mine'"),
    ({"scenario": HUGE}, f"its scenario '{'x' * 200}... (1000000 characters)' is not its test's 'mine'"),
    ({"nodeid": "../mine.yaml::../mine[tp1-pp1-cpu]"}, "its test '../mine.yaml::../mine[tp1-pp1-cpu]' is not a "
                                                        "scenario item's node id (PATH.yaml::NAME[PARAMS])"),
    ({"nodeid": HUGE}, f"its test '{'x' * 200}... (1000000 characters)' is not a scenario item's node id "
                       "(PATH.yaml::NAME[PARAMS])"),
    ({"scenario_sha256": HUGE}, "scenario_sha256: a string of 1000000 characters, not a sha256 (64 lowercase hex "
                                "digits); left out"),
    ({"scenario_sha256": "A" * 64}, "scenario_sha256: a string of 64 characters, not a sha256 (64 lowercase hex "
                                    "digits); left out"),
    ({"scenario_sha256": ["0" * 64]}, "scenario_sha256: a JSON list, expected null or a sha256 (64 lowercase hex "
                                      "digits); left out"),
    ({"scenario": 7}, "scenario: a number, expected a string; left out"),
])
def test_a_hostile_record_is_refused_located(tree: Path, started: list[dict[str, Any]], fields: dict[str, Any],
                                             why: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = _report(tree, **fields)
    assert _replay(run, capsys) == (2, f"lastcall replay: {run / 'verdicts.json'}: {why}\n")
    assert started == []


@pytest.mark.parametrize("skip", [".git", ".venv", "node_modules", "reports", "linked", "deep", "marked"])
def test_the_search_is_bounded(tree: Path, started: list[dict[str, Any]], skip: str, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A copy of the recorded bytes in a directory the search leaves out is not found (and the same copy one
    level up is: each case can fail)."""
    from harness.report import find_scenario

    (tree / "scenarios" / "mine.yaml").unlink()
    monkeypatch.setattr(find_scenario, "MAX_DEPTH", 2)
    outside = tmp_path / "outside"
    outside.mkdir()
    place = {"linked": "scenarios/linked", "deep": "a/b/c", "marked": "got/shard"}.get(skip, f"scenarios/{skip}")
    if skip == "linked":  # a symbolic link to a directory is never followed
        (tree / place).symlink_to(outside, target_is_directory=True)
        folder = outside
    else:
        folder = tree / place
        folder.mkdir(parents=True)
    if skip == "marked":
        (tree / "got" / REPORTS_MARKER).write_text("")
    (folder / "mine.yaml").write_text(SCENARIO)
    run = _report(tree)
    rc, err = _replay(run, capsys)
    assert (rc, started) == (2, []) and "found no scenario mine" in err
    (tree / "scenarios" / "mine.yaml").write_text(SCENARIO)
    assert _replay(run, capsys) == (0, "")


@pytest.mark.parametrize(("limit", "stop", "go"), [("MAX_FILES", 3, 4), ("MAX_READ", 27, 28)])
def test_the_search_stops_at_its_limits(tree: Path, started: list[dict[str, Any]], limit: str, stop: int, go: int,
                                        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.report import find_scenario

    monkeypatch.setattr(find_scenario, limit, stop)
    for i in range(3):
        (tree / "scenarios" / f"a{i}.yaml").write_text(f"name: a{i}\n")  # 9 bytes each, read before mine.yaml
    rc, err = _replay(_report(tree), capsys)
    assert (rc, started) == (2, []) and f"found no scenario mine with the recorded sha256 {sha(SCENARIO)[:12]} " \
                                        "(stopped after 3 files, 27 bytes); looked in" in err
    monkeypatch.setattr(find_scenario, limit, go)
    assert _replay(_report(tree), capsys) == (0, "")


def test_a_directory_searched_as_a_root_is_not_searched_again(tree: Path, started: list[dict[str, Any]],
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The current directory lies in the rootdir: the rootdir's search leaves it out (its files count once)."""
    from harness.report import find_scenario

    (tree / "zzz").mkdir()  # searched after scenarios/, in name order
    (tree / "scenarios" / "mine.yaml").rename(tree / "zzz" / "mine.yaml")
    (tree / "pytest.ini").write_text("[pytest]\n")
    monkeypatch.chdir(tree / "scenarios")
    for i in range(3):
        (tree / "scenarios" / f"a{i}.yaml").write_text(f"name: a{i}\n")
    monkeypatch.setattr(find_scenario, "MAX_FILES", 4)  # a0..a2 here, then zzz/mine.yaml in the rootdir
    assert _replay(_report(tree), capsys) == (0, "")
    assert [s["paths"] for s in started] == [[f"{tree.resolve() / 'zzz' / 'mine.yaml'}::mine[tp1-pp1-cpu]"]]


def test_a_symbolic_link_to_the_scenario_is_not_read(tree: Path, started: list[dict[str, Any]], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    real = tree / "scenarios" / "mine.yaml"
    target = tmp_path / "elsewhere.yaml"
    real.rename(target)
    real.symlink_to(target)
    rc, err = _replay(_report(tree), capsys)
    assert (rc, started) == (2, []) and "found no scenario mine" in err
