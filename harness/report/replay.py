"""``lastcall replay RUN_DIR``: rerun the scenario item that wrote a report, taking from it only what is data.

A run directory may come from anyone (a CI artifact of a fork's pull request: docs/trust.md), so
what it says is checked before anything runs, and no path it holds is ever opened:

* the test's node id must parse as ``PATH::NAME[PARAMS]`` (:data:`NODEID`); only its NAME and PARAMS are
  used, and the report's ``scenario`` must be that NAME;
* the scenario file is found by that name and the recorded ``scenario_sha256`` of its bytes among the
  user's own roots (harness.report.find_scenario: the ``--path`` directories, the current directory, the
  rootdir, lastcall's scenario library), never inside a report; a report that records no sha256 (one
  written before lastcall recorded it) is refused with the command to type instead. The item then runs
  as ``FILE::NAME[PARAMS]`` with FILE's absolute path, after ``--``, so a replay works from any
  directory; the current directory is not put on ``sys.path`` for it;
* the target (verdicts.json's ``target``, or its ``variant``) is taken only when it names no code:
  a built-in name, an installed ``lastcall.targets`` entry point or ``kvcached==VERSION``
  (harness.targets.names.trusted_by_name). Any other form (``module:attribute``,
  ``reference@module:attribute``) would import what the report names: it is refused with exit 2 and
  the shell-quoted command that runs it, for the user to type if they trust it.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.artifacts import shown
from harness.report.find_scenario import Refused, find, search_roots
from harness.report.summary import MARKER as REPORTS_MARKER  # the file a reports directory lastcall owns holds
from harness.verdicts_file import read_meta

__all__ = ["replay", "parse_nodeid", "NODEID", "REPORTS_MARKER"]

NODEID = re.compile(r"(?P<path>[A-Za-z0-9_][A-Za-z0-9_./-]{0,511}\.ya?ml)::(?P<name>[A-Za-z0-9_][A-Za-z0-9_.-]{0,199})"
                    r"\[(?P<params>[A-Za-z0-9_.=:+-]{1,300})\]")  # a scenario item's pytest node id
PROG = "lastcall replay"
USED = ("nodeid", "target", "variant", "scenario", "scenario_sha256")  # the fields of verdicts.json a replay reads


def parse_nodeid(nodeid: object) -> tuple[str, str, str]:
    """(path, name, params) of a scenario item's node id; Refused when it is anything else."""
    if not isinstance(nodeid, str):
        raise Refused("names no test (it was written outside pytest)")
    match = NODEID.fullmatch(nodeid)
    if match is None:
        raise Refused(f"its test {shown(nodeid, 200)!r} is not a scenario item's node id (PATH.yaml::NAME[PARAMS])")
    path = match["path"]
    if ".." in Path(path).parts:
        raise Refused(f"its test's file {shown(path)!r} climbs out of the current directory (..)")
    return path, match["name"], match["params"]


def _recorded(meta: dict[str, object], name: str, params: str) -> str:
    """The recorded sha256 of the scenario file; Refused when the report names another scenario than its test,
    or records no sha256."""
    scenario = meta.get("scenario")
    if scenario != name:
        raise Refused(f"its scenario {shown(scenario, 200)!r} is not its test's {name!r}")
    sha = meta.get("scenario_sha256")
    if not isinstance(sha, str):  # a report written before lastcall recorded it
        raise Refused(f"it records no scenario_sha256, the hash lastcall replay finds the scenario file by (a "
                       f"report of an older lastcall); rerun it from your own copy of the file: lastcall run "
                       f"FILE.yaml::{name}[{params}]")
    return sha


def _target(meta: dict[str, object], nodeid: str, path: str) -> str | None:
    """The target to replay on: the session's override as recorded, else the variant when it differs from the
    file's own; Refused, with the command to type, when it names code."""
    from harness.targets.names import trusted_by_name

    target = meta.get("target") or None
    if target is None and "-catches-" not in nodeid:  # none recorded (or a report older than "target")
        variant = meta.get("variant")
        if variant:
            from harness.errors import HarnessError
            from harness.scenario import load

            try:
                scenario = load(path)
            except HarnessError as exc:
                raise Refused(str(exc)) from None
            target = variant if variant != scenario.target else None
    if target is None:
        return None
    assert isinstance(target, str)  # harness.verdicts_file checked it
    if not trusted_by_name(target):
        command = f"lastcall run {shlex.quote(nodeid)} --target {shlex.quote(target)}"
        raise Refused(f"its target {shown(target, 200)!r} is not a built-in name or an installed entry point: "
                       f"replaying it would import code the report names. If you trust it, run: "
                       f"{shown(command, 600)}")
    return target


def replay(report: str, paths: Sequence[str] = ()) -> int:
    """Rerun the scenario item that produced ``report`` (a run's report dir, its verdicts.json or history), its
    file found by name and sha256 under ``paths`` and the other roots (harness.report.find_scenario).

    Returns: ``lastcall run``'s exit code; 2 when the report cannot be read, its scenario is not found, or it
        names what is refused.
    """
    from harness.scenario.commands import run

    p = Path(report)
    if not p.exists():
        print(f"{PROG}: {shown(report)}: no such report; give reports/<run id>, or its verdicts.json or "
              "history.jsonl", file=sys.stderr)
        return 2
    run_dir = p if p.is_dir() else p.parent
    meta_path = run_dir / "verdicts.json"
    meta, problems = read_meta(meta_path)
    try:
        if problems and not meta:
            raise Refused(f"cannot read it: {problems[0].removeprefix(f'{meta_path}: ')}")
        if not meta:
            raise Refused("no such file: give a run's report directory, reports/<run id>, or a file in it")
        used = [p for p in problems if p.startswith(tuple(f"{meta_path}: {k}:" for k in USED))]
        if used:  # a field the replay needs, of the wrong shape: nothing is guessed
            raise Refused(used[0].removeprefix(f"{meta_path}: "))
        _, name, params = parse_nodeid(meta.get("nodeid"))
        file = find(name, _recorded(meta, name, params), search_roots(paths), run_dir)
        item = f"{file}::{name}[{params}]"
        target = _target(meta, item, str(file))
    except Refused as exc:
        print(f"{PROG}: {shown(meta_path)}: {exc}", file=sys.stderr)
        return 2
    print(f"{PROG}: {shown(item)}" + (f" --target {target}" if target else ""), flush=True)
    return run([item], target=target, trust_cwd=False)
