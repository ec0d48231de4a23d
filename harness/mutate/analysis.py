"""One mutation analysis: the unmutated run first, then each chosen mutant, then the scores and survivors.

Both ``./dev mutate`` (the reference's stop path) and ``lastcall mutate`` (a user's module through its
target) run here.  The scores: raw = killed / all run; non-equivalent = killed / (all run less those
mutation/equivalent.yaml shows equivalent).  A mutant is killed when a scenario fails on it, when its run
outlasts the timeout, or when the run cannot run at all (each said as such); it survives when every
scenario passes.
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import provenance
from harness.errors import ConfigError
from harness.mutate.mutator import Mutant, diff_of
from harness.mutate.plan import Entry, as_json, choose
from harness.mutate.run import KILLED, SURVIVED, Outcome, Subject, freeze, run_one

__all__ = ["Analysis", "analyse", "score_line", "say"]

TIMEOUT_FACTOR = 3.0  # a mutant's run may take this many times the unmutated run's ...
TIMEOUT_FLOOR_S = 90.0  # ... and at least this long


def say(line: str) -> None:
    """Print one line at once (a long run's progress, also into a file)."""
    print(line, flush=True)


@dataclass
class Analysis:
    """What a run measured."""

    outcomes: list[Outcome]
    equivalent: dict[str, Entry]
    explained: dict[str, Entry]
    sources: dict[str, str]  # file (as ids name it) -> unmutated source
    total: int  # mutants there were to choose from
    baselines: dict[str, float] = field(default_factory=dict)  # group -> seconds of the unmutated run
    flaky: list[str] = field(default_factory=list)  # items that failed once, then passed on the same code
    planned: int = 0  # mutants chosen (outcomes has fewer while the run is under way)
    commit: str = ""  # HEAD when the code and scenarios were frozen (+uncommitted when they differed from it)

    @property
    def killed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.killed]

    @property
    def survivors(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.killed]

    def is_equivalent(self, o: Outcome) -> bool:
        return o.mutant is not None and o.mutant.id in self.equivalent

    @property
    def non_equivalent(self) -> list[Outcome]:
        return [o for o in self.outcomes if not self.is_equivalent(o)]

    @property
    def wrongly_equivalent(self) -> list[Outcome]:
        """Mutants equivalent.yaml calls equivalent that a scenario killed: the claim is wrong."""
        return [o for o in self.killed if self.is_equivalent(o)]


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:.1f} %" if n else "n/a"


def score_line(a: Analysis) -> str:
    raw, ne = len(a.outcomes), len(a.non_equivalent)
    k_ne = sum(1 for o in a.non_equivalent if o.killed)
    return (f"raw score {len(a.killed)}/{raw} ({_pct(len(a.killed), raw)}); non-equivalent {k_ne}/{ne} "
            f"({_pct(k_ne, ne)}); {raw - ne} equivalent")


def analyse(groups: Sequence[tuple[str, list[Subject], list[str]]], *, target: str | None, sample: int | None,
            seed: int, only: Sequence[str] = (), timeout: float | None = None,
            equivalent: dict[str, Entry] | None = None, explained: dict[str, Entry] | None = None,
            echo: Callable[[str], None] = say, keyword: str | None = None,
            after: Callable[[Analysis], None] | None = None, workers: int | None = None) -> Analysis:
    """Run the chosen mutants of each group (name, its subjects, its scenario files).

    Error handling: ConfigError when a group has no scenario, or when its scenarios fail on the unmutated
        code (nothing could be measured against them).
    """
    commit = _commit(dirty=["harness", "scenarios", *(s.rel for _, subjects, _ in groups for s in subjects)])
    with freeze([s for _, subjects, _ in groups for s in subjects]), tempfile.TemporaryDirectory(
            prefix="lc-mut-scenarios-") as tmp:
        groups = [(name, subjects, _frozen(scenarios, Path(tmp) / str(i)))
                  for i, (name, subjects, scenarios) in enumerate(groups)]
        return _analyse(groups, target=target, sample=sample, seed=seed, only=only, timeout=timeout,
                        equivalent=equivalent, explained=explained, echo=echo, keyword=keyword, after=after,
                        workers=workers, commit=commit)


def _frozen(scenarios: list[str], into: Path) -> list[str]:
    """Copies of the scenario files, for the whole run: one edited meanwhile changes no mutant's run."""
    into.mkdir()
    out = []
    for i, path in enumerate(scenarios):
        copy = into / str(i) / Path(path).name  # a directory each: two files of one name stay apart
        copy.parent.mkdir()
        shutil.copy2(path, copy)
        out.append(str(copy))
    return out


def _analyse(groups: Sequence[tuple[str, list[Subject], list[str]]], *, target: str | None, sample: int | None,
             seed: int, only: Sequence[str], timeout: float | None, equivalent: dict[str, Entry] | None,
             explained: dict[str, Entry] | None, echo: Callable[[str], None], keyword: str | None,
             after: Callable[[Analysis], None] | None, workers: int | None, commit: str = "") -> Analysis:
    everything: list[tuple[str, Subject, Mutant]] = []
    sources: dict[str, str] = {}
    for name, subjects, _ in groups:
        for s in subjects:
            sources[s.rel] = s.source()
            everything += [(name, s, m) for m in s.mutants()]
    chosen = {m.id for m in choose([m for _, _, m in everything], sample=sample, seed=seed, only=only)}
    plan = [(g, s, m) for g, s, m in everything if m.id in chosen]
    echo(f"lastcall mutate: {len(plan)} of {len(everything)} mutants"
         + (f" (sample {sample}, seed {seed})" if sample is not None and not only else ""))
    result = Analysis([], equivalent or {}, explained or {}, sources, len(everything), planned=len(plan),
                      commit=commit)
    paths = {name: scenarios for name, _, scenarios in groups}
    subjects_by = {name: subs for name, subs, _ in groups}
    for name in dict.fromkeys(g for g, _, _ in plan):
        if not paths[name]:
            raise ConfigError(f"mutate: no scenario drives the {name} listener: give scenario paths")
        base = run_one(subjects_by[name][0], None, paths[name], target=target, timeout=timeout or 1800.0,
                       keyword=keyword, workers=workers)
        if base.status != SURVIVED:  # once more: on a loaded machine a bound can be missed once
            echo(f"  unmutated: {base.status} by {', '.join(map(_short_item, base.failed[:1]))}: once more")
            again = run_one(subjects_by[name][0], None, paths[name], target=target, timeout=timeout or 1800.0,
                            keyword=keyword, workers=workers)
            if again.status == SURVIVED:
                result.flaky += [_short_item(f) for f in base.failed[:1]]
                echo(f"  unmutated: passed the second time: {', '.join(base.failed[:1])} is FLAKY here; a mutant "
                     "it kills may not be broken")
            base = again
        if base.status != SURVIVED:
            raise ConfigError(f"mutate: the {name} scenarios fail on the unmutated code ({base.status}: "
                              f"{', '.join(base.failed[:2]) or base.tail.splitlines()[-1:]}); nothing can be "
                              f"measured against them: make `lastcall run` pass first")
        result.baselines[name] = base.seconds
        echo(f"  unmutated: {len(paths[name])} {name} scenario files pass in {base.seconds:.0f} s")
    for i, (name, subject, m) in enumerate(plan, 1):
        limit = timeout or max(TIMEOUT_FLOOR_S, TIMEOUT_FACTOR * result.baselines[name])
        o = run_one(subject, m, paths[name], target=target, timeout=limit, echo=echo, keyword=keyword,
                    workers=workers)
        if o.status == KILLED and o.failed:  # confirmed by that scenario failing once more, else run again
            file = _file_of(paths[name], o.failed[0])
            again = run_one(subject, m, file, target=target, timeout=limit, keyword=keyword) if file else o
            if not again.killed:
                flaky = _short_item(o.failed[0])
                result.flaky.append(flaky)
                echo(f"    {flaky} failed once on this mutant and passed the second time (FLAKY): the whole run "
                     "once more, that scenario last; its outcome stands")
                o = run_one(subject, m, [p for p in paths[name] if p not in file] + file, target=target,
                            timeout=limit, echo=echo, keyword=keyword, workers=workers)
                o.rerun = True
        result.outcomes.append(o)
        _first(paths[name], o.failed)
        if after is not None:  # e.g. the JSON so far: a long run cut short keeps what it measured
            after(result)
        by = f" by {_short_item(o.failed[0])}" if o.failed else ""
        eq = " (equivalent)" if m.id in result.equivalent else ""
        echo(f"  [{i}/{len(plan)}] {m.id} {m.qualname}: {m.about}: {o.status}{by}{eq} ({o.seconds:.0f} s)")
    return result


def _first(scenarios: list[str], failed: list[str]) -> None:
    """Move the scenario file that killed a mutant to the front: the next mutant's run (which stops at its
    first failure) tries the scenarios that kill most first.  The order changes the time, never the outcome."""
    if failed:
        file = failed[0].split("::", 1)[0].rsplit("/", 1)[-1]
        hit = [s for s in scenarios if s.rsplit("/", 1)[-1] == file]
        for s in hit:
            scenarios.remove(s)
            scenarios.insert(0, s)


def _file_of(scenarios: list[str], nodeid: str) -> list[str]:
    """The scenario file (of ``scenarios``) an item id names, as a one-element list; [] if none does."""
    name = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return [s for s in scenarios if s.rsplit("/", 1)[-1] == name][:1]


def _short_item(nodeid: str) -> str:
    return nodeid.rsplit("/", 1)[-1]


def print_report(a: Analysis, echo: Callable[[str], None] = say) -> None:
    """The scores, then every survivor: id, file:line, the mutation, why (if explained), the diff."""
    echo(score_line(a))
    for o in a.survivors:
        m = o.mutant
        assert m is not None
        entry = a.equivalent.get(m.id) or a.explained.get(m.id)
        label = f"equivalent ({a.equivalent[m.id].reason})" if m.id in a.equivalent else "survivor"
        echo(f"\n{label} {m.id}  {m.file}:{m.line}  {m.qualname}: {m.about}")
        if entry is not None:
            echo(f"  why: {entry.why}" + (f" (shown by {entry.test})" if entry.test else ""))
        for line in diff_of(a.sources[m.file], m).rstrip().splitlines():
            echo(f"  {line}")
    for o in a.wrongly_equivalent:
        assert o.mutant is not None
        echo(f"\nWRONG: {o.mutant.id} is listed in mutation/equivalent.yaml but was {o.status}: remove the entry")


def to_json(a: Analysis, *, sample: int | None, seed: int, target: str | None, command: str) -> dict[str, Any]:
    def one(o: Outcome) -> dict[str, Any]:
        m = o.mutant
        assert m is not None
        entry = a.equivalent.get(m.id) or a.explained.get(m.id)
        return {"id": m.id, "file": m.file, "line": m.line, "qualname": m.qualname, "op": m.op, "about": m.about,
                "status": o.status, "failed": [_short_item(f) for f in o.failed[:1]],
                "seconds": round(o.seconds, 1), "equivalent": m.id in a.equivalent, "rerun": o.rerun,
                **({"explanation": as_json(entry)} if entry is not None else {}),
                **({"diff": diff_of(a.sources[m.file], m)} if not o.killed else {})}

    ne = a.non_equivalent
    return {"command": command, "planned": a.planned, "sample": sample, "seed": seed, "target": target,
            "mutants_in_scope": a.total,
            "commit": a.commit or _commit(), "date": datetime.date.today().isoformat(),
            "python": sys.version.split()[0], "machine": provenance.machine(),
            "unmutated_seconds": {k: round(v, 1) for k, v in a.baselines.items()}, "flaky_on_unmutated": a.flaky,
            "raw": {"killed": len(a.killed), "all": len(a.outcomes)},
            "non_equivalent": {"killed": sum(1 for o in ne if o.killed), "all": len(ne)},
            "mutants": [one(o) for o in a.outcomes]}


def _commit(dirty: Sequence[str] = ()) -> str:
    """HEAD, short; with ``+uncommitted`` when a path of ``dirty`` differs from it in the working tree (the
    run is then of code no commit holds).  Read when the run freezes its code: a commit landed while it runs
    is not what it measured."""
    here = Path(__file__).parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=here, timeout=10).stdout.strip()
        if head and dirty:
            top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                                 cwd=here, timeout=10).stdout.strip()
            changed = subprocess.run(["git", "status", "--porcelain", "--", *dirty], capture_output=True,
                                     text=True, cwd=top or here, timeout=30).stdout.strip()
            head += "+uncommitted" if changed else ""
        return head
    except (OSError, subprocess.SubprocessError):
        return ""


def write_json(data: dict[str, Any], path: str) -> None:
    Path(path).write_text(json.dumps(data, indent=1) + "\n")
