"""``lastcall replay RUN_DIR``: rerun the scenario item that wrote a report, taking from it only what is data.

A run directory may come from anyone (a CI artifact of a fork's pull request: docs/trust.md), so
what it says is checked before anything runs:

* the test's node id must parse as ``PATH::NAME[PARAMS]`` (:data:`NODEID`): never an option, and it
  reaches pytest after ``--``;
* PATH must be a ``.yaml``/``.yml`` scenario file of the user's own tree: relative, without ``..``,
  under the current directory, and outside the run directory, its reports directory and any
  directory holding lastcall's reports marker or another run's files (a conftest.py there would be
  loaded); the current directory is not put on ``sys.path`` for it;
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
from pathlib import Path

from harness.artifacts import shown
from harness.report.summary import MARKER as REPORTS_MARKER  # the file a reports directory lastcall owns holds
from harness.verdicts_file import read_meta

__all__ = ["replay", "parse_nodeid", "NODEID", "REPORTS_MARKER"]

NODEID = re.compile(r"(?P<path>[A-Za-z0-9_][A-Za-z0-9_./-]{0,511}\.ya?ml)::(?P<name>[A-Za-z0-9_][A-Za-z0-9_.-]{0,199})"
                    r"\[(?P<params>[A-Za-z0-9_.=:+-]{1,300})\]")  # a scenario item's pytest node id
RUN_FILES = ("verdicts.json", "history.jsonl")  # a directory holding one is a run's report
PROG = "lastcall replay"
USED = ("nodeid", "target", "variant")  # the fields of verdicts.json a replay reads


class _Refused(Exception):
    """Why the report cannot be replayed (one line, exit code 2)."""


def parse_nodeid(nodeid: object) -> tuple[str, str, str]:
    """(path, name, params) of a scenario item's node id; _Refused when it is anything else."""
    if not isinstance(nodeid, str):
        raise _Refused("names no test (it was written outside pytest)")
    match = NODEID.fullmatch(nodeid)
    if match is None:
        raise _Refused(f"its test {shown(nodeid, 200)!r} is not a scenario item's node id (PATH.yaml::NAME[PARAMS])")
    path = match["path"]
    if ".." in Path(path).parts:
        raise _Refused(f"its test's file {shown(path)!r} climbs out of the current directory (..)")
    return path, match["name"], match["params"]


def _owned_by_reports(directory: Path, stop: Path) -> Path | None:
    """The first directory from ``directory`` up to ``stop`` that is a reports directory or a run's, or None."""
    for d in (directory, *directory.parents):
        if (d / REPORTS_MARKER).exists() or any((d / f).exists() for f in RUN_FILES):
            return d
        if d == stop:
            break
    return None


def _scenario_file(path: str, run_dir: Path) -> Path:
    """The scenario file ``path`` names, checked to be the user's own (see the module docstring)."""
    here = Path.cwd().resolve()
    file = (here / path).resolve()
    if not file.is_relative_to(here):
        raise _Refused(f"its test's file {shown(path)!r} lies outside the current directory {here}")
    for d in (run_dir.resolve(), run_dir.resolve().parent):
        if file.is_relative_to(d):
            raise _Refused(f"its test's file {shown(path)!r} lies inside the report's own directory {d}: a "
                           "scenario comes from your tree, not from a report")
    owner = _owned_by_reports(file.parent, here)
    if owner is not None:
        raise _Refused(f"its test's file {shown(path)!r} lies inside {owner}, a reports directory: a scenario "
                       "comes from your tree, not from a report")
    if not file.is_file():
        raise _Refused(f"its test's file {shown(path)!r} is not here: run lastcall replay from the directory the "
                       "run was started in")
    return file


def _target(meta: dict[str, object], nodeid: str, path: str) -> str | None:
    """The target to replay on: the session's override as recorded, else the variant when it differs from the
    file's own; _Refused, with the command to type, when it names code."""
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
                raise _Refused(str(exc)) from None
            target = variant if variant != scenario.target else None
    if target is None:
        return None
    assert isinstance(target, str)  # harness.verdicts_file checked it
    if not trusted_by_name(target):
        command = f"lastcall run {shlex.quote(nodeid)} --target {shlex.quote(target)}"
        raise _Refused(f"its target {shown(target, 200)!r} is not a built-in name or an installed entry point: "
                       f"replaying it would import code the report names. If you trust it, run: "
                       f"{shown(command, 600)}")
    return target


def replay(report: str) -> int:
    """Rerun the scenario item that produced ``report`` (a run's report dir, its verdicts.json or history).

    Returns: ``lastcall run``'s exit code; 2 when the report cannot be read or names what is refused.
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
            raise _Refused(f"cannot read it: {problems[0].removeprefix(f'{meta_path}: ')}")
        if not meta:
            raise _Refused("no such file: give a run's report directory, reports/<run id>, or a file in it")
        used = [p for p in problems if p.startswith(tuple(f"{meta_path}: {k}:" for k in USED))]
        if used:  # a field the replay needs, of the wrong shape: nothing is guessed
            raise _Refused(used[0].removeprefix(f"{meta_path}: "))
        path, _, _ = parse_nodeid(meta.get("nodeid"))
        nodeid = str(meta["nodeid"])
        _scenario_file(path, run_dir)
        target = _target(meta, nodeid, path)
    except _Refused as exc:
        print(f"{PROG}: {shown(meta_path)}: {exc}", file=sys.stderr)
        return 2
    print(f"{PROG}: {nodeid}" + (f" --target {target}" if target else ""), flush=True)
    return run([nodeid], target=target, trust_cwd=False)
