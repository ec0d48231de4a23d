"""A report is data: ``lastcall replay`` takes from it only a scenario item's node id of the user's own tree and
a target that names no code (docs/trust.md). One test per class of attack: each asserts the exit code, the
located message, and that nothing ran (pytest is never started, no file a report names is imported)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.report.replay import REPORTS_MARKER
from harness.scenario import commands

ITEM = "scenarios/mine.yaml::mine[tp1-pp1-cpu]"
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
    doc = {"format": 1, "scenario": "mine", "matrix": "tp1-pp1-cpu", "variant": "reference", "run_id": "1x2",
           "nodeid": ITEM, "target": None, **fields}
    (run / "verdicts.json").write_text(json.dumps(doc))
    return run


def _replay(run: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(["replay", str(run)])
    return rc, capsys.readouterr().err


def test_a_sound_report_is_replayed_with_its_node_id_after_the_separator(
        tree: Path, started: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    run = _report(tree, target="no_conn_tracking")
    assert _replay(run, capsys) == (0, "")
    assert started == [{"paths": [ITEM], "target": "no_conn_tracking", "trust_cwd": False}]


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
                      ", expected a string; left out\n"


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


@pytest.mark.parametrize("where", ["run", "reports", "marked", "up"])
def test_a_scenario_file_inside_a_report_is_refused(tree: Path, started: list[dict[str, Any]], where: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A scenario a report brings with it (and a conftest.py beside it, which pytest would load) is never run."""
    place = {"run": "reports/1x2", "reports": "reports", "marked": "downloaded/shard",
             "up": "scenarios/../../outside"}[where]
    folder = (tree / place).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "evil.yaml").write_text(SCENARIO.replace("name: mine", "name: evil"))
    (folder / "conftest.py").write_text(f"open({str(tree / 'ran')!r}, 'w').close()\n")
    if where == "marked":
        (tree / "downloaded" / REPORTS_MARKER).write_text("")
    nodeid = f"{place}/evil.yaml::evil[tp1-pp1-cpu]"
    run = _report(tree, nodeid=nodeid)
    rc, err = _replay(run, capsys)
    assert rc == 2 and started == [] and not (tree / "ran").exists()
    meta = run / "verdicts.json"
    why = {"run": f"lies inside the report's own directory {run.resolve()}: a scenario comes from your tree, not "
                  "from a report",
           "reports": f"lies inside the report's own directory {run.resolve().parent}: a scenario comes from your "
                      "tree, not from a report",
           "marked": f"lies inside {tree.resolve() / 'downloaded'}, a reports directory: a scenario comes from "
                     "your tree, not from a report",
           "up": "climbs out of the current directory (..)"}[where]
    assert err == f"lastcall replay: {meta}: its test's file {place + '/evil.yaml'!r} {why}\n"


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
                   f"lastcall run '{ITEM}' --target {quoted}\n")


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


def test_a_missing_scenario_file_says_where_to_run_the_replay(tree: Path, started: list[dict[str, Any]],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    run = _report(tree, nodeid="scenarios/gone.yaml::gone[tp1-pp1-cpu]")
    rc, err = _replay(run, capsys)
    assert (rc, started) == (2, [])
    assert err == (f"lastcall replay: {run / 'verdicts.json'}: its test's file 'scenarios/gone.yaml' is not here: "
                   "run lastcall replay from the directory the run was started in\n")
