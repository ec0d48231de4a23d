"""The record of fresh mutation samples (docs/data/mutation_samples.json) and its table in docs/mutation.md.

A sample of the library's power is fresh when its seed is drawn at run time (``./dev mutate --sample N`` without
``--seed``): a library grown to notice one sample's survivors says little about the next, so the sample the
library was grown on is no measurement.  ``./dev mutate --record`` appends every sample it completes to the
record; none is ever dropped.  The headline (:func:`headline`) is the median non-equivalent score of five fresh
samples of at least MIN_SAMPLE mutants each, all on one commit: the newest commit that has five, and none
before it when it has fewer (the rule then says how many are still missing).
"""

from __future__ import annotations

import json
import secrets
import statistics
from pathlib import Path
from typing import Any

from harness.provenance import NOT_RECORDED, machine_text

__all__ = ["RECORD", "BEGIN", "END", "MIN_SAMPLE", "SAMPLES", "TARGET", "draw_seed", "entry", "outcomes_of",
           "append", "headline", "markdown", "render"]

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "docs" / "data" / "mutation_samples.json"
PAGE = ROOT / "docs" / "mutation.md"
BEGIN, END = "<!-- mutation-samples:begin -->", "<!-- mutation-samples:end -->"
MIN_SAMPLE = 30  # mutants a sample needs to count towards the headline
SAMPLES = 5  # fresh samples on one commit the headline is the median of
TARGET = 0.90  # of the non-equivalent mutants noticed


def draw_seed() -> int:
    """A seed no one chose: the sample is not one the library was grown to notice."""
    return 1 + secrets.randbelow(2**31 - 1)


def entry(doc: dict[str, Any], *, drawn: bool) -> dict[str, Any]:
    """One sample's line of the record, from a run's JSON (harness.mutate.analysis.to_json)."""
    return {"date": doc["date"], "commit": doc["commit"], "seed": doc["seed"], "drawn": drawn,
            "n": doc["raw"]["all"], "planned": doc.get("planned", doc["raw"]["all"]),
            "raw": dict(doc["raw"]), "non_equivalent": dict(doc["non_equivalent"]), "command": doc["command"],
            "machine": machine_text({"machine": doc.get("machine")}) or NOT_RECORDED}


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    return list(data["samples"])


def outcomes_of(path: Path, seed: int) -> Path:
    """Where a sample's every mutant outcome is kept beside its record: RECORD's stem as a folder, SEED.json."""
    return path.with_suffix("") / f"{int(seed)}.json"


def append(doc: dict[str, Any], *, drawn: bool, path: Path = RECORD) -> list[dict[str, Any]]:
    """Add the sample of ``doc`` to the record, and keep ``doc`` (its survivors, each mutant's outcome) beside it:
    a score without its survivors cannot be checked.  Every sample so far, this one last."""
    samples = [*_read(path), entry(doc, drawn=drawn)]
    kept = outcomes_of(path, doc["seed"])
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps(doc, indent=1) + "\n")
    path.write_text(json.dumps({"samples": samples}, indent=1) + "\n")
    return samples


def _score(s: dict[str, Any]) -> float | None:
    ne = s["non_equivalent"]
    return ne["killed"] / ne["all"] if ne["all"] else None


def _counts(s: dict[str, Any]) -> bool:
    return bool(s["drawn"]) and s["n"] >= MIN_SAMPLE and s["n"] == s["planned"] and _score(s) is not None


def headline(samples: list[dict[str, Any]]) -> str:
    """The rule's verdict in one sentence: the median of five fresh samples on the newest commit that has five,
    or how many the newest commit with any still needs."""
    by_commit: dict[str, list[float]] = {}
    for s in samples:
        score = _score(s)
        if _counts(s) and score is not None:
            by_commit.setdefault(s["commit"], []).append(score)
    if not by_commit:
        return (f"no fresh sample of at least {MIN_SAMPLE} mutants yet: the headline is the median of {SAMPLES} on "
                "one commit")
    newest = next(c for c in (s["commit"] for s in reversed(samples)) if c in by_commit)
    scores = by_commit[newest]
    if len(scores) < SAMPLES:
        return (f"{len(scores)} of the {SAMPLES} fresh samples needed on {newest}: no headline yet (each so far: "
                + ", ".join(f"{100 * x:.1f} %" for x in scores) + ")")
    med = statistics.median(scores[-SAMPLES:])
    met = "met" if med >= TARGET else "**missed**"
    return (f"median of the last {SAMPLES} fresh samples on {newest}: **{100 * med:.1f} %** of the non-equivalent "
            f"mutants noticed (target {100 * TARGET:.0f} %: {met})")


def markdown(samples: list[dict[str, Any]], path: Path = RECORD) -> str:
    rows = ["| date | commit | machine | seed | drawn | mutants | raw | non-equivalent |",
            "|---|---|---|---:|---|---:|---:|---:|"]
    for s in samples:
        raw, ne = s["raw"], s["non_equivalent"]
        cut = f" (of {s['planned']} drawn)" if s["planned"] != s["n"] else ""
        pct = f"{100 * ne['killed'] / ne['all']:.1f} %" if ne["all"] else "n/a"
        rows.append(f"| {s['date']} | {s['commit']} | {s.get('machine', NOT_RECORDED)} | {s['seed']} | "
                    f"{'yes' if s['drawn'] else 'no'} | "
                    f"{s['n']}{cut} | {raw['killed']} of {raw['all']} | {ne['killed']} of {ne['all']} ({pct}) |")
    if not samples:
        rows.append("| | | | | | | | |")
    where = path.with_suffix("").relative_to(ROOT) if path.is_relative_to(ROOT) else path.with_suffix("")
    kept = ["", f"Each sample's command and every mutant's outcome, its survivors named: `{where}/`, a file per "
            "seed."] if samples else []
    return "\n".join([headline(samples), "", *rows, *kept])


def render(page: Path = PAGE, path: Path = RECORD, markers: tuple[str, str] = (BEGIN, END)) -> None:
    """Write the record's table between the page's markers (the reference's unless others are given)."""
    text = page.read_text()
    begin, end = markers
    start, stop = text.index(begin) + len(begin), text.index(end)
    page.write_text(text[:start] + "\n" + markdown(_read(path), path) + "\n" + text[stop:])
