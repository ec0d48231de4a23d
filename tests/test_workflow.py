"""The example workflow (.github/workflows/lastcall.yml): a matrix of pytest-split shards and a merge job.
Its lastcall commands exist with the options it gives them (the documented-commands check), pytest-split
knows the options it passes to pytest, and the wiring holds: K groups 1..K and --splits K, each shard's
reports and JUnit in the artifact it uploads under a name the merge downloads, the merge job after every
shard (even a failed one), over the directories the download makes. The committed .test_durations names
scenario items of the library and splits it into non-empty, disjoint groups."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml
from lc_helpers import ROOT

from tests.test_documented_commands import COMMAND, _leading, problems_of

WORKFLOW = ROOT / ".github" / "workflows" / "lastcall.yml"
DURATIONS = ROOT / ".test_durations"
GROUP = "${{ matrix.group }}"
GROUP_WORD = "@GROUP@"  # the matrix expression, one shell word, as lastcall_argv splits it


def workflow() -> dict[str, Any]:
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(doc, dict) and isinstance(doc.get("jobs"), dict), WORKFLOW
    return doc


def steps_running(job: dict[str, Any], word: str) -> list[dict[str, Any]]:
    return [s for s in job["steps"] if word in str(s.get("run", ""))]


def uses(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in job["steps"] if str(s.get("uses", "")).startswith(action + "@")]


def script(run: str) -> str:
    """A step's script without its comments."""
    return "\n".join(line for line in (raw.split(" #")[0].strip() for raw in run.splitlines())
                     if line and not line.startswith("#"))


def lastcall_argv(run: str) -> list[list[str]]:
    """Each `lastcall ...` command line of a step's script, as the shell splits it (a folded >- is one line)."""
    return [shlex.split(line.replace(GROUP, GROUP_WORD)) for line in script(run).splitlines()
            if line.startswith("lastcall ")]


def shard_and_merge() -> tuple[dict[str, Any], dict[str, Any]]:
    jobs = workflow()["jobs"]
    shards = [j for j in jobs.values() if "matrix" in j.get("strategy", {})]
    merges = [j for j in jobs.values() if steps_running(j, "lastcall report --merge")]
    assert len(shards) == 1 and len(merges) == 1, sorted(jobs)
    return shards[0], merges[0]


def test_every_lastcall_command_of_the_workflow_exists_with_its_options() -> None:
    found: dict[tuple[str, ...], dict[str, set[str]]] = {}
    for name, job in workflow()["jobs"].items():
        for n, step in enumerate(job["steps"]):
            for m in COMMAND.finditer(script(str(step.get("run", "")))):
                tokens = m.group(1).split()
                tokens = tokens[:tokens.index("--")] if "--" in tokens else tokens
                words = tuple(_leading(tokens))
                options = {t for t in tokens[len(words):] if t.startswith("--")}
                found.setdefault(words, {}).setdefault(f"{WORKFLOW.name}:{name}.steps[{n}]", set()).update(options)
    assert ("run", "scenarios/") not in found  # the PATH ends the words: run's key is ("run",)
    assert {("validate",), ("run",), ("report",)} <= set(found), sorted(found)
    assert not problems_of(found), problems_of(found)


def test_pytest_split_knows_the_options_the_shards_pass_to_pytest() -> None:
    import pytest_split.plugin

    names: list[str] = []

    class Recorder:
        def getgroup(self, *a: Any, **k: Any) -> Recorder:
            return self

        def addoption(self, *given: str, **k: Any) -> None:
            names.extend(given)

    pytest_split.plugin.pytest_addoption(Recorder())  # type: ignore[arg-type]
    shard, _ = shard_and_merge()
    (run,) = [s["run"] for s in steps_running(shard, "lastcall run")]
    (argv,) = lastcall_argv(run)
    after = argv[argv.index("--") + 1:]
    assert {"--splits", "--group"} <= set(names)
    assert {"--splits", "--group"} <= {a for a in after if a.startswith("--")}, after


def test_the_shards_and_the_merge_are_wired_consistently() -> None:
    shard, merge = shard_and_merge()
    groups = shard["strategy"]["matrix"]["group"]
    assert shard["strategy"].get("fail-fast") is False  # a failing shard must not cancel the others
    (run,) = [s["run"] for s in steps_running(shard, "lastcall run")]
    (argv,) = lastcall_argv(run)
    pytest_args = argv[argv.index("--") + 1:]
    splits = int(pytest_args[pytest_args.index("--splits") + 1])
    assert groups == list(range(1, splits + 1)), (groups, splits)
    assert pytest_args[pytest_args.index("--group") + 1] == GROUP_WORD
    own = argv[:argv.index("--")]
    reports = own[own.index("--lastcall-reports") + 1]
    junit = own[own.index("--junitxml") + 1]
    (upload,) = uses(shard, "actions/upload-artifact")
    assert upload.get("if") == "always()"  # a failed shard's reports are what the merge needs most
    path = str(upload["with"]["path"]).rstrip("/")
    assert path == reports.rstrip("/") and Path(junit).parent == Path(path), (path, reports, junit)
    artifact = str(upload["with"]["name"])
    assert GROUP in artifact, artifact  # one artifact per shard
    names = [artifact.replace(GROUP, str(g)) for g in groups]

    assert merge.get("needs") in ("shard", ["shard"]) and merge.get("if") == "always()"
    (download,) = uses(merge, "actions/download-artifact")
    pattern, into = str(download["with"]["pattern"]), str(download["with"]["path"]).rstrip("/")
    assert not download["with"].get("merge-multiple")  # each artifact in a directory of its own
    assert all(fnmatch.fnmatch(n, pattern) for n in names), (names, pattern)
    (cmd,) = lastcall_argv(steps_running(merge, "lastcall report --merge")[0]["run"])
    dirs = cmd[cmd.index("--merge") + 1:cmd.index("--out")]
    out = cmd[cmd.index("--out") + 1]
    made = [f"{into}/{n}/" for n in names]  # what the download makes: path/<artifact name>/
    assert len(dirs) == 1 and sorted(d for d in made if fnmatch.fnmatch(d, dirs[0])) == sorted(made), (dirs, made)
    assert all(out.rstrip("/") != d.rstrip("/") for d in made)
    merged = uses(merge, "actions/upload-artifact")
    assert merged and str(merged[0]["with"]["path"]).rstrip("/") == out.rstrip("/")  # the page and what it links


def test_the_committed_durations_name_library_items_and_split_it_into_groups() -> None:
    import pytest_split.algorithms as algorithms

    durations = json.loads(DURATIONS.read_text())
    assert isinstance(durations, dict) and durations
    bad = [k for k, v in durations.items() if not isinstance(v, (int, float)) or v < 0]
    assert not bad, bad
    files = {k.split("::")[0] for k in durations}
    stale = sorted(f for f in files if not re.fullmatch(r"scenarios/[^/]+\.ya?ml", f) or not (ROOT / f).is_file())
    assert not stale, f"{stale}: refresh .test_durations (docs/reports.md, Sharding)"

    class Item:
        def __init__(self, nodeid: str) -> None:
            self.nodeid = nodeid

    shard, _ = shard_and_merge()
    splits = len(shard["strategy"]["matrix"]["group"])
    items = [Item(k) for k in sorted(durations)]
    groups = algorithms.Algorithms["duration_based_chunks"].value(splits, items, durations)  # type: ignore[arg-type]
    chosen = [[i.nodeid for i in g.selected] for g in groups]
    assert all(chosen), chosen
    assert sorted(n for g in chosen for n in g) == sorted(durations)  # disjoint, and nothing left out
