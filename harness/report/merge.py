"""``lastcall report --merge DIR...``: one session page and one exit status from the shards of a session.

A scenario library sharded over CI runners (pytest-split: ``--splits K --group G``)
leaves one report directory per shard; each holds the ``session.json`` its session
wrote beside its ``index.html`` (harness.report.summary).  The merge reads them
all, checks that they are one session's shards, and writes ``OUT/index.html`` and
``OUT/session.json`` (so a merge can itself be merged), linking every run's page
where it lies in its shard; and, when the shards hold their sessions' JUnit XML,
``OUT/junit.xml``: one testsuite of every shard's testcases (harness.report.junit).

Bad input is exit 2, with one located line per problem and nothing written: a DIR
that is not a session's report directory (or whose session.json is not one, or
names a run page that is not there), shards of an item's scenario file with other
contents (the shards ran different trees), shards split differently, a group of
``--splits K`` missing, no scenario run in any shard, ``--out`` one of the shards, a
JUnit file that is not well-formed, some shards with JUnit and others without.

Exit status otherwise: 1 when any run failed or was interrupted, any item is
FLAKY, or a shard's pytest exited other than 0 or 5 (nothing collected; a shard
whose session failed with no scenario run failed: a test that is none, an error); else 0.
FLAKY: repeats of one item (``--repeat``: ``name[...-r2]``, or one item run by two
shards) that disagree, passed on one and failed on another; as in one session
(harness.scenario.repeat), a flaky item is never reported as passed (in the merged
JUnit neither: its passing testcases carry a failure naming it FLAKY).
"""

from __future__ import annotations

import json
import sys
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from harness.report.junit import MergedJUnit, merge_junit, read_junit, write_junit
from harness.report.summary import SESSION, SESSION_FORMAT, SUMMARY, SessionRun, _failed_line, _totals, write_summary
from harness.report.write import VERDICTS, ReportWarning
from harness.scenario.repeat import base_id

__all__ = ["merge_command", "merge", "read_shard", "Shard", "Merged", "MergeError", "DEFAULT_OUT"]

DEFAULT_OUT = "reports-merged"
PROG = "lastcall report"
OK_STATUS = (0, 5)  # pytest's exit statuses of a shard that failed nothing (5: its group collected nothing)
SHORT = 12  # hex digits of a sha256 shown in a message


class MergeError(Exception):
    """The shards cannot be merged: one located line per problem, in ``problems``."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


@dataclass
class Shard:
    """One shard's report directory, as its session.json says."""

    label: str  # the directory as given
    path: Path
    meta: dict[str, Any]
    runs: list[SessionRun] = field(default_factory=list)

    @property
    def group(self) -> tuple[int, int] | None:
        """(group, splits) of a pytest-split shard, None for a whole session."""
        splits, group = self.meta.get("splits"), self.meta.get("group")
        return (int(group), int(splits)) if isinstance(splits, int) and isinstance(group, int) else None

    @property
    def exitstatus(self) -> int | None:
        status = self.meta.get("exitstatus")
        return status if isinstance(status, int) else None

    def describe(self) -> str:
        g = self.group
        where = f"group {g[0]}/{g[1]}" if g else "whole session"
        status = "" if self.exitstatus is None else f", pytest exit {self.exitstatus}"
        return f"{self.label}: {where}, {len(self.runs)} scenario run{'' if len(self.runs) == 1 else 's'}{status}"


@dataclass
class Merged:
    shards: list[Shard]
    runs: list[SessionRun]
    flaky: dict[str, list[SessionRun]]  # base item -> its repeats, which disagree
    bad_shards: list[Shard]  # pytest exited other than 0 or 5, and not for a run that failed
    junit: MergedJUnit | None = None  # the shards' JUnit files merged, None when no shard has one

    @property
    def exit_code(self) -> int:
        failed = any(r.outcome in ("failed", "interrupted") for r in self.runs)
        return 1 if failed or self.flaky or self.bad_shards or (self.junit and self.junit.flaky) else 0


def _located(where: Path | str, message: str) -> str:
    return f"{where}: {message}"


def _shown(text: str) -> str:
    """A name read from a shard, fit for a one-line error: control characters (a newline, or \\x1e, which
    str.splitlines() also splits on) are written as escapes."""
    return text if text.isprintable() else repr(text)[1:-1]


def read_shard(label: str) -> Shard:
    """One shard's directory; MergeError (one located line) when it is not a session's report directory."""
    path = Path(label)
    doc_path = path / SESSION
    if not path.is_dir():
        raise MergeError([_located(label, "no such directory" if not path.exists() else "not a directory")])
    if not doc_path.is_file():
        below = sorted(p.parent.name for p in path.glob(f"*/{SESSION}"))
        hint = f"; its subdirectories {', '.join(below[:4])}{' ...' if len(below) > 4 else ''} are: give them" \
            if below else ""
        raise MergeError([_located(label, f"not a lastcall session's report directory (no {SESSION}, which a "
                                          f"session with reports on writes beside its {SUMMARY}){hint}")])
    try:
        doc = json.loads(doc_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise MergeError([_located(doc_path, f"unreadable: {exc}")]) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise MergeError([_located(doc_path, "not a lastcall session.json (no list of runs)")])
    if doc.get("format") != SESSION_FORMAT:
        raise MergeError([_located(doc_path, f"format {doc.get('format')!r}, this lastcall reads {SESSION_FORMAT}: "
                                             "merge with the lastcall that wrote it")])
    meta = {k: v for k, v in doc.items() if k != "runs"}
    splits, group = meta.get("splits"), meta.get("group")
    if (splits, group) != (None, None) and not (
            type(splits) is int and type(group) is int and 1 <= group <= splits):  # type(): True is no group
        raise MergeError([_located(doc_path, f"group {group!r} of splits {splits!r}: not a pytest-split group "
                                             "(1 <= group <= splits)")])
    shard = Shard(label.rstrip("/") or label, path, meta)
    problems = []
    for n, entry in enumerate(doc["runs"]):
        run = _run(entry, shard)
        if isinstance(run, str):
            problems.append(_located(doc_path, f"runs[{n}]: {run}"))
        else:
            shard.runs.append(run)
    if problems:
        raise MergeError(problems)
    return shard


def _run(entry: Any, shard: Shard) -> SessionRun | str:
    """A SessionRun of one session.json entry, its verdicts.json read from beside its page; or what is wrong."""
    if not isinstance(entry, dict) or not isinstance(entry.get("nodeid"), str) or not entry["nodeid"]:
        return "not a run (no nodeid)"
    nodeid = entry["nodeid"]
    shown = _shown(nodeid)
    outcome, seconds = entry.get("outcome"), entry.get("seconds") or 0.0
    if outcome not in ("passed", "failed", "skipped", "interrupted"):
        return f"{shown}: outcome {outcome!r} is none of passed, failed, skipped, interrupted"
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return f"{shown}: seconds {seconds!r} is not a number"
    run = SessionRun(nodeid, outcome, float(seconds), str(entry.get("run_id") or ""),
                     longrepr=str(entry.get("longrepr") or ""), scenario_sha256=str(entry.get("scenario_sha256") or ""),
                     shard=f"{shard.label}/{entry['shard']}" if entry.get("shard") else shard.label)
    if entry.get("page"):
        page = shard.path / str(entry["page"])
        if not page.parent.is_dir():
            return (f"{shown}: its report {_shown(str(page.parent))} is not there (an incomplete download of the "
                    "shard?)")
        run.page = str(page)
        try:
            doc = json.loads((page.parent / VERDICTS).read_text(encoding="utf-8"))
            run.doc = doc if isinstance(doc, dict) else {}
        except (OSError, UnicodeDecodeError, ValueError):
            run.doc = {}  # as in the session's own page: the row shows what session.json says
    return run


def _key(shard: Shard, run: SessionRun) -> tuple[str, str]:
    """An item: its node id without the repeat index, under the session's target override."""
    return str(shard.meta.get("target") or ""), base_id(run.nodeid)


def _check(shards: list[Shard]) -> list[str]:
    """Why these are not shards of one session: other scenario file contents, other splits, a missing group."""
    problems: list[str] = []
    files: dict[str, tuple[str, Shard]] = {}
    for shard in shards:
        for run in shard.runs:
            name = run.nodeid.split("::")[0]
            if not run.scenario_sha256:
                continue
            first = files.setdefault(name, (run.scenario_sha256, shard))
            if first[0] != run.scenario_sha256:
                problems.append(_located(shard.path / SESSION, f"{_shown(run.nodeid)} ran under other contents "
                                         f"of {_shown(name)} than in {first[1].label} (sha256 "
                                         f"{run.scenario_sha256[:SHORT]} vs {first[0][:SHORT]}): the shards ran "
                                         "different trees"))
                files[name] = (run.scenario_sha256, shard)  # one line per disagreeing shard, not per item
    by_target: dict[str, list[Shard]] = defaultdict(list)
    for shard in shards:
        if shard.group:
            by_target[str(shard.meta.get("target") or "")].append(shard)
    for target, split in by_target.items():
        on = f" (target {target})" if target else ""
        sizes = sorted({s.group[1] for s in split if s.group})
        if len(sizes) > 1:
            problems.append(f"shards{on} were split differently: " + ", ".join(
                f"{s.label} is group {s.group[0]}/{s.group[1]}" for s in split if s.group))
            continue
        have = {s.group[0] for s in split if s.group}
        missing = [g for g in range(1, sizes[0] + 1) if g not in have]
        if missing:
            problems.append(f"shards{on}: group{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(str(g) for g in missing)} of --splits {sizes[0]} "
                            f"{'are' if len(missing) > 1 else 'is'} missing (given: "
                            f"{', '.join(f'{s.label} = {s.group[0]}' for s in split if s.group)}): nothing of "
                            "a shard may be lost")
    if not any(s.runs for s in shards):
        problems.append(f"no scenario run in any of {', '.join(s.label for s in shards)}")
    return problems


def merge(labels: Sequence[str]) -> Merged:
    """Read and check the shards; MergeError with every problem found."""
    problems: list[str] = []
    shards: list[Shard] = []
    seen: dict[Path, str] = {}
    for label in labels:
        resolved = Path(label).resolve()
        if resolved in seen:
            problems.append(_located(label, f"given twice (also as {seen[resolved]})"))
            continue
        seen[resolved] = label
        try:
            shards.append(read_shard(label))
        except MergeError as exc:
            problems.extend(exc.problems)
    if problems:
        raise MergeError(problems)
    problems = _check(shards)
    files, junit_problems = read_junit([(s.label, s.path, str(s.meta.get("target") or "")) for s in shards])
    if problems or junit_problems:
        raise MergeError(problems + junit_problems)
    runs = sorted((r for s in shards for r in s.runs), key=lambda r: (r.nodeid, r.shard))
    repeats: dict[tuple[str, str], list[SessionRun]] = defaultdict(list)
    for shard in shards:
        for run in shard.runs:
            if run.outcome in ("passed", "failed"):
                repeats[_key(shard, run)].append(run)
    flaky = {(f"{k[1]} (target {k[0]})" if k[0] else k[1]): sorted(v, key=lambda r: (r.shard, r.nodeid))
             for k, v in repeats.items() if len({r.outcome for r in v}) > 1}
    bad = [s for s in shards if s.exitstatus is not None and s.exitstatus not in OK_STATUS  # and not for a run of it
           and not any(r.outcome in ("failed", "interrupted") for r in s.runs)]
    return Merged(shards, runs, dict(sorted(flaky.items())), bad, merge_junit(files, _flaky_text) if files else None)


def _flaky_text(item: str, passed: int, failed: int, where: Sequence[str]) -> str:
    return f"FLAKY {item}: passed {passed}, failed {failed} of {passed + failed} repeats (on {', '.join(where)})"


def _flaky_line(item: str, repeats: list[SessionRun]) -> str:
    ok = sum(r.outcome == "passed" for r in repeats)
    return _flaky_text(item, ok, len(repeats) - ok, sorted({r.shard for r in repeats}))


def _notes(merged: Merged) -> str:
    h = escape
    shards = "".join(f"<li>{h(s.describe())}</li>" for s in merged.shards)
    bad = "".join(f"<li>{h(s.label)}: pytest exited {s.exitstatus}</li>" for s in merged.bad_shards)
    flaky = "".join(f'<li class="violated">{h(_flaky_line(k, v))}</li>' for k, v in merged.flaky.items())
    return (f'<h2>shards</h2><ul id="shards">{shards}</ul>'
            + (f'<h2>shards that failed</h2><ul id="bad-shards">{bad}</ul>' if bad else "")
            + (f'<h2>flaky</h2><ul id="flaky">{flaky}</ul>' if flaky else ""))


def _totals_line(merged: Merged) -> str:
    flaky = f", {len(merged.flaky)} flaky" if merged.flaky else ""
    return f"{_totals(merged.runs)}{flaky}, from {len(merged.shards)} shard{'' if len(merged.shards) == 1 else 's'}"


def merge_command(dirs: Sequence[str] | None, history: str | None, out: str | None, checks: Sequence[str]) -> int:
    """``lastcall report --merge DIR... [--out OUT]``: print the failures, FLAKY items and totals, write the
    page; returns the exit status (0 passed, 1 failed or flaky, 2 bad input)."""
    if not dirs or history is not None or checks:
        why = ("give a run's HISTORY.jsonl, or --merge with the shards' report directories" if not dirs and
               history is None else "--merge takes report directories, not a HISTORY.jsonl" if history is not None
               else "--check re-judges one history; --merge takes each shard's verdicts as they are")
        print(f"{PROG}: error: {why} (see {PROG} --help)", file=sys.stderr)
        return 2
    target = Path(out or DEFAULT_OUT)
    clash = [d for d in dirs if Path(d).resolve() == target.resolve()]
    if clash:
        print(_located(f"{PROG} --out {target}", f"is the shard {clash[0]}: its own page would be replaced; "
                       "give another directory"), file=sys.stderr)
        return 2
    try:
        merged = merge(dirs)
    except MergeError as exc:
        for line in exc.problems:
            print(f"{PROG}: {line}", file=sys.stderr)
        return 2
    meta = {"merged": [{"dir": s.label, **s.meta} for s in merged.shards], "exitstatus": merged.exit_code}
    with warnings.catch_warnings(record=True) as caught:  # a page that cannot be written: one line, exit 2
        warnings.simplefilter("always", ReportWarning)
        page = write_summary(target, merged.runs, meta, title="lastcall session merged from shards",
                             totals=_totals_line(merged), notes=_notes(merged))
    if page is None:
        print(f"{PROG}: --out {target}: " + "; ".join(str(w.message) for w in caught), file=sys.stderr)
        return 2
    for shard in merged.shards:
        print(f"shard {shard.describe()}")
    for run in merged.runs:
        if run.outcome == "failed":
            print(_failed_line(run))
    for shard in merged.bad_shards:
        print(f"FAILED shard {shard.label}: pytest exited {shard.exitstatus}")
    for item, repeats in merged.flaky.items():
        print(_flaky_line(item, repeats))
    if merged.junit is not None:
        try:
            junit = write_junit(merged.junit, target)
        except OSError as exc:
            print(f"{PROG}: --out {target}: cannot write the merged JUnit: {exc}", file=sys.stderr)
            return 2
        n = len(merged.junit.files)
        print(f"junit: {junit}, {merged.junit.cases} testcase{'' if merged.junit.cases == 1 else 's'} of {n} "
              f"file{'' if n == 1 else 's'}" + (f", {len(merged.junit.flaky)} flaky item(s) marked failed"
                                                if merged.junit.flaky else ""))
    print(f"{_totals_line(merged)}; summary: {page}")
    return merged.exit_code
