"""Keep a real engine's runs as findings: ``python -m harness.engine.store RUNS_DIR FINDINGS_DIR``.

Each run directory under RUNS_DIR (``./dev vllm-engine-test`` leaves them in reports/vllm-engine) of the variant
(``--variant``, default vllm_engine) is stored under FINDINGS_DIR as its history, snapshots and verdicts, nothing
else: in ``reports/SCENARIO/`` when it ran alone, in ``reports-chained/SCENARIO/`` when it ran in a chain (its
history opens with the engine handed to it); a scenario stored already keeps its run, and the new one goes
beside it as ``SCENARIO.RUN_ID``, so runs add up across sessions.  ``--draft`` then prints an expected.yaml for
FINDINGS_DIR from every run stored there: each checker's status where every run agreed, else its rate.

A run directory is data: only regular files of at most MAX_BYTES each are copied, its fields read through
harness.verdicts_file (a run whose verdicts.json does not read is skipped, named).
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.engine.expected import tally
from harness.errors import ConfigError
from harness.verdicts_file import read_meta

__all__ = ["store", "draft", "FILES", "MAX_BYTES"]

FILES = ("history.jsonl", "snapshots.json", "verdicts.json")
MAX_BYTES = 32 << 20  # of one stored file (a history is at most 32 MiB: harness.report)
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,99}$")  # a scenario's name, as the loader allows it
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")  # lastcall's run ids (PID x HEX, -N in a chain)
_CHAINED = b'"engine_handed"'


def _chained(history: Path) -> bool:
    with open(history, "rb") as f:
        return _CHAINED in f.read(1 << 16)  # within its first events: a chain member handed its engine


def _stored(findings: Path) -> dict[str, Path]:
    """run_id -> where it is stored under ``findings`` already (a run is stored once)."""
    out = {}
    for meta in sorted(findings.glob("reports*/*/verdicts.json")):
        doc, problems = read_meta(meta)
        if not problems and isinstance(doc.get("run_id"), str):
            out[doc["run_id"]] = meta.parent
    return out


def store(runs: Path, findings: Path, variant: str = "vllm_engine") -> list[str]:
    """Store each run of ``variant`` under ``runs`` into ``findings``; one line per run: where it went, or why not."""
    out = []
    have = _stored(findings)
    for meta in sorted(runs.glob("*/verdicts.json")):
        run = meta.parent
        doc, problems = read_meta(meta)
        name = doc.get("scenario")
        if problems or not isinstance(name, str) or not _NAME.match(name):
            out.append(f"{run.name}: skipped: {'; '.join(problems) or 'no scenario name'}")
            continue
        if doc.get("variant") != variant:
            continue
        files = [run / f for f in FILES]
        bad = [f.name for f in files if f.is_symlink() or not f.is_file() or f.stat().st_size > MAX_BYTES]
        if bad:
            out.append(f"{run.name}: skipped: {', '.join(bad)} missing, not a regular file or over {MAX_BYTES} bytes")
            continue
        run_id = doc.get("run_id")
        if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
            out.append(f"{run.name}: skipped: its run_id is not one lastcall writes")
            continue
        if run_id in have:
            out.append(f"{run.name}: stored already as {have[run_id].relative_to(findings)}")
            continue
        place = findings / ("reports-chained" if _chained(run / "history.jsonl") else "reports")
        dest = place / name
        if dest.exists():
            dest = place / f"{name}.{run_id}"
        dest.mkdir(parents=True)
        for f in files:
            shutil.copyfile(f, dest / f.name)
        out.append(f"{run.name}: {name} -> {dest.relative_to(findings)}")
    return out


def draft(findings: Path, variant: str = "vllm_engine") -> str:
    """An expected.yaml of every run stored under ``findings``: each checker's status, or its rate."""
    dirs = [d for d in (findings / "reports", findings / "reports-chained") if d.is_dir()]
    lines = []
    for name, t in sorted(tally(dirs, variant).items()):
        n = t["runs"]
        lines += [f"{name}:", f"  runs: {n}"]
        if t["outcomes"].get("hung"):
            lines.append("  outcome: hung" if t["outcomes"]["hung"] == n else
                         f"  # outcome hung in {t['outcomes']['hung']} of {n}: judged per run, not as a rate")
        lines.append("  checkers:")
        for chk, counts in sorted(t["checkers"].items()):
            if len(counts) == 1:
                lines.append(f"    {chk}: {next(iter(counts))}")
            else:
                rare = min(counts, key=lambda s: (counts[s], s))
                rest = max(counts, key=lambda s: (counts[s], s))
                other = "" if rest == "ok" else f", else: {rest}"
                lines.append(f"    {chk}: {{{rare}: {counts[rare]}{other}}}"
                             + ("" if len(counts) == 2 else f"  # also {counts}"))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    variant = "vllm_engine"
    if "--variant" in args:
        i = args.index("--variant")
        variant, args = (args[i + 1] if i + 1 < len(args) else ""), args[:i] + args[i + 2:]
    usage = "usage: python -m harness.engine.store [--variant V] RUNS_DIR FINDINGS_DIR | --draft FINDINGS_DIR"
    try:
        if len(args) == 2 and args[0] == "--draft" and Path(args[1]).is_dir() and variant:
            print(draft(Path(args[1]), variant), end="")
            return 0
        if len(args) == 2 and all(Path(a).is_dir() for a in args) and variant:
            print("\n".join(store(Path(args[0]), Path(args[1]), variant)))
            return 0
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
