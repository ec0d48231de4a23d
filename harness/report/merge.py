"""``lastcall report --merge DIR...``: one session page and one exit status from the shards of a session.

A scenario library sharded over CI runners (pytest-split: ``--splits K --group G``)
leaves one report directory per shard; each holds the ``session.json`` its session
wrote beside its ``index.html`` (harness.report.summary).  The merge reads them
all, checks that they are one session's shards, and writes ``OUT/index.html`` and
``OUT/session.json`` (so a merge can itself be merged), linking every run's page
where it lies in its shard; and, when the shards hold their sessions' JUnit XML,
``OUT/junit.xml``: one testsuite of every shard's testcases (harness.report.junit).

Bad input is exit 2, with one located line per problem and nothing written: a DIR
that is not a session's report directory (or whose session.json is not one, has a
field of the wrong shape or out of range, or names a run page that is not a regular
file inside it: harness.report.shard), shards of an item's scenario file with other
contents (the shards ran different trees), shards split differently, a group of
``--splits K`` missing, no scenario run in any shard, ``--out`` one of the shards or
a directory lastcall did not make (harness.report.reportsdir; it may hold the shards
themselves), a JUnit file that is not well-formed or not plain data, some shards with
JUnit and others without. Every file is read bounded (harness.artifacts), and what is
printed of one is stripped of control characters.

Exit status otherwise: 1 when any run failed or was interrupted, any item is
FLAKY, or a shard's pytest exited other than 0 or 5 (nothing collected; a shard
whose session failed with no scenario run failed: a test that is none, an error); else 0.
FLAKY: repeats of one item (``--repeat``: ``name[...-r2]``, or one item run by two
shards) that disagree, passed on one and failed on another; as in one session
(harness.scenario.repeat), a flaky item is never reported as passed (in the merged
JUnit neither: its passing testcases carry a failure naming it FLAKY).
"""

from __future__ import annotations

import sys
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from harness.artifacts import shown
from harness.report.junit import MergedJUnit, merge_junit, read_junit, write_junit
from harness.report.reportsdir import resolved, unfit
from harness.report.shard import MergeError, Reads, Shard, read_shard
from harness.report.summary import SESSION, SessionRun, _failed_line, _totals, write_summary
from harness.report.write import ReportWarning
from harness.scenario.repeat import base_id

__all__ = ["merge_command", "merge", "read_shard", "Shard", "Merged", "MergeError", "DEFAULT_OUT"]

DEFAULT_OUT = "reports-merged"
PROG = "lastcall report"
OK_STATUS = (0, 5)  # pytest's exit statuses of a shard that failed nothing (5: its group collected nothing)
SHORT = 12  # hex digits of a sha256 shown in a message


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
    return f"{shown(where)}: {message}"


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
                problems.append(_located(shard.path / SESSION, f"{shown(run.nodeid)} ran under other contents "
                                         f"of {shown(name)} than in {first[1].label} (sha256 "
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
    reads = Reads()
    for label in labels:
        real = resolved(label)
        if real in seen:
            problems.append(_located(label, f"given twice (also as {shown(seen[real])})"))
            continue
        seen[real] = label
        try:
            shards.append(read_shard(label, reads))
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


def _out_refused(dirs: Sequence[str], target: Path) -> str | None:
    """Why the merge may not write into ``target``: it is one of the shards, or no reports directory of lastcall's
    (harness.report.reportsdir; it may hold the shards it merges, as the example workflow lays them)."""
    clash = [d for d in dirs if resolved(d) == resolved(target)]
    if clash:
        return f"is the shard {shown(clash[0])}: its own page would be replaced; give another directory"
    return unfit(target, {resolved(d) for d in dirs})


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
    refused = _out_refused(dirs, target)
    if refused is not None:
        print(_located(f"{PROG} --out {target}", refused), file=sys.stderr)
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
        print(f"{PROG}: --out {shown(target)}: " + "; ".join(str(w.message) for w in caught), file=sys.stderr)
        return 2
    _print_lines(merged)
    if merged.junit is not None:
        try:
            junit = write_junit(merged.junit, target)
        except OSError as exc:
            print(f"{PROG}: --out {shown(target)}: cannot write the merged JUnit: {exc}", file=sys.stderr)
            return 2
        n = len(merged.junit.files)
        print(shown(f"junit: {junit}, {merged.junit.cases} testcase{'' if merged.junit.cases == 1 else 's'} of {n} "
                    f"file{'' if n == 1 else 's'}" + (f", {len(merged.junit.flaky)} flaky item(s) marked failed"
                                                      if merged.junit.flaky else "")))
    print(shown(f"{_totals_line(merged)}; summary: {page}"))
    return merged.exit_code


def _print_lines(merged: Merged) -> None:
    """The shards, then a line per failed run, failed shard and FLAKY item: terminal-safe (harness.artifacts)."""
    for shard in merged.shards:
        print(shown(f"shard {shard.describe()}"))
    for run in merged.runs:
        if run.outcome == "failed":
            print(_failed_line(run))
    for shard in merged.bad_shards:
        print(shown(f"FAILED shard {shard.label}: pytest exited {shard.exitstatus}"))
    for item, repeats in merged.flaky.items():
        print(shown(_flaky_line(item, repeats)))
