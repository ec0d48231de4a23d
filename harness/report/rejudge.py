"""``lastcall report HISTORY.jsonl``: re-judge a stored history and rebuild its page.

The checkers are pure functions of (history, snapshots), so a stored run can be
judged again after a checker changed.  What to judge it with comes from the
``expect`` list of the verdicts.json beside the history (``--check`` names
checkers instead; with neither, every checker with its defaults); the
snapshots from snapshots.json beside it.  A history with missing or garbled
lines is reported as such and judged on what could be read.  A history written
in an older event format is read through harness.events' mapping (version 1:
allocator events named the worker ``label``); an expect entry's
``allow_unknown`` is honoured, and the parties the stored variant declares
absent are not judged, as in the run.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.artifacts import ArtifactError, read_json, shown
from harness.checkers import CHECKERS, RunRecord, Verdict, judge_all
from harness.errors import ConfigError
from harness.history import Event, read_jsonl
from harness.probes.model import Snapshot
from harness.report.write import HISTORY, SNAPSHOTS, VERDICTS, verdicts_doc, write_page
from harness.targets.names import target_names
from harness.verdicts_file import read_meta

__all__ = ["report_history", "load_history", "EXIT_OK", "EXIT_VIOLATED"]

EXIT_OK = 0  # no verdict is violated
EXIT_VIOLATED = 1  # a checker found a violation
EVIDENCE_SHOWN = 8  # evidence lines printed per verdict at most
TEXT_SHOWN = 500  # characters of a message or problem printed at most (the page and verdicts.json keep it all)
VALUE_SHOWN = 120  # characters of one evidence value printed at most


def load_history(path: Path) -> tuple[list[Event], list[str]]:
    """The events that could be read, and one problem per line (or event) that could not.

    Raises ConfigError (harness.artifacts.ArtifactError) when the file is missing, not a regular file, over
    the history's size limit or not UTF-8 (exit code 2).
    """
    if not path.exists() and not path.is_symlink():
        raise ConfigError(f"{path}: no such file; give a run's history, e.g. reports/<run id>/{HISTORY}")
    return read_jsonl(path)


def _snapshots(path: Path, problems: list[str]) -> dict[str, Snapshot]:
    out: dict[str, Snapshot] = {}
    if not path.exists() and not path.is_symlink():
        return out
    try:
        raw = read_json(path, SNAPSHOTS)
    except ArtifactError as exc:
        problems.append(f"{exc}; left out")
        return out
    if not isinstance(raw, dict):
        problems.append(f"{path}: not an object of snapshots by label; left out")
        return out
    for label, d in raw.items():
        try:
            out[str(label)] = Snapshot.from_dict(d)
        except ValueError as exc:
            problems.append(f"{path}: snapshot {shown(label, 40)!r} unreadable, left out: {exc}")
    return out


Expect = list[tuple[str, dict[str, Any], str | None]]  # checker, params, allow_unknown reason


def _expect(meta: dict[str, Any], checks: Sequence[str]) -> tuple[Expect, str]:
    if checks:
        return [(c, {}, None) for c in checks], "the checkers named with --check, with their defaults"
    listed = meta.get("expect")  # shape checked by harness.verdicts_file
    if listed is not None:
        return [(x["checker"], dict(x.get("params") or {}), x.get("allow_unknown") or None)
                for x in listed], f"the expect list of {VERDICTS}"
    return ([(c, {}, None) for c in CHECKERS],
            f"every checker with its defaults (no expect list in a {VERDICTS} beside it)")


def _absent(meta: dict[str, Any]) -> frozenset[str]:
    """The parties the run's target declared absent: as verdicts.json recorded them; for a report without
    them, those of a built-in target named by its variant (lastcall's own code: nothing a file names is
    imported, docs/trust.md); else none."""
    if "absent" in meta:
        return frozenset(meta["absent"])
    variant = meta.get("variant")
    if isinstance(variant, str) and variant in target_names():
        from harness.targets import absent_of

        return absent_of(variant)
    return frozenset()


def _line(v: Verdict, was: str | None, t0: int) -> list[str]:
    head = "ok" if v.ok else v.status.upper()
    change = f" (was {was})" if was is not None and was != v.status else ""
    out = [f"  {head} {v.checker}{change}" + (f": {shown(v.message, TEXT_SHOWN)}" if v.message else "")]
    for e in v.evidence[:EVIDENCE_SHOWN]:
        data = " ".join(f"{shown(k, 40)}={shown(val, VALUE_SHOWN)}" for k, val in e.data.items() if k != "text")
        out.append(f"      evidence: {(e.t_ns - t0) / 1e6:9.3f} ms {shown(e.rank or e.role, 60)} {e.kind} {data}")
    if len(v.evidence) > EVIDENCE_SHOWN:
        out.append(f"      ... and {len(v.evidence) - EVIDENCE_SHOWN} more")
    return out


def report_history(history: str | Path, out: str | Path | None = None, checks: Sequence[str] = ()) -> int:
    """Re-judge ``history``, write verdicts.json and index.html into ``out`` (default: beside it), print the verdicts.

    Returns: EXIT_OK when no verdict is violated (unknown ones are printed), EXIT_VIOLATED otherwise.
    Error handling: a missing or unreadable history, or an output directory that cannot be written,
    is a ConfigError (exit code 2 from the CLI); garbled lines are problems, reported and skipped.
    """
    path = Path(history)
    events, problems = load_history(path)
    unread = len(problems)
    meta, meta_problems = read_meta(path.parent / VERDICTS)
    problems += meta_problems
    snaps = _snapshots(path.parent / SNAPSHOTS, problems)
    expect, source = _expect(meta, checks)
    record = RunRecord(tuple(events), snaps, float(meta.get("scale", 1.0)), absent=_absent(meta))
    verdicts = judge_all(record, expect)
    was = {i: d["status"] for i, d in enumerate(meta.get("verdicts", ()))}

    if unread:
        print(f"{shown(path)}: {unread} line{'' if unread == 1 else 's'} could not be read: "
              + "; ".join(shown(p, TEXT_SHOWN) for p in problems[:unread][:5]) + (" ..." if unread > 5 else ""),
              file=sys.stderr)
    for p in problems[unread:]:
        print(f"lastcall report: {shown(p, TEXT_SHOWN)}", file=sys.stderr)
    name = f"{meta.get('scenario') or '(no scenario recorded)'}[{meta.get('matrix') or '?'}]"
    stored_outcome = meta["outcome"]["status"] if "outcome" in meta else "?"
    print(f"{shown(path)}: {len(events)} events, {shown(name, 200)} on {shown(meta.get('variant') or '?', 200)}, "
          f"stored outcome {shown(stored_outcome, 60)}; judged with {source}")
    t0 = min((e.t_ns for e in events), default=0)
    for i, v in enumerate(verdicts):
        print("\n".join(_line(v, was.get(i) if not checks else None, t0)))

    out_dir = Path(out) if out is not None else path.parent
    doc = {**meta, "rejudged_from": str(path), "history_problems": problems, "expect":
           [{"checker": n, "params": p, **({"allow_unknown": a} if a else {})} for n, p, a in expect]}
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / VERDICTS).write_text(json.dumps(verdicts_doc(doc, verdicts), indent=1, default=str))
        page = write_page(out_dir, doc, verdicts, events, problems, history=str(path))
    except OSError as exc:
        raise ConfigError(f"cannot write the report to {out_dir}: {exc}; choose another place with --out DIR") from None
    counts = {s: sum(1 for v in verdicts if v.status == s) for s in ("violated", "unknown", "ok", "not_judged")}
    print(f"verdicts: {counts['violated']} violated, {counts['unknown']} unknown, {counts['ok']} ok"
          + (f", {counts['not_judged']} not judged" if counts["not_judged"] else "") + f"; page: {page}")
    return EXIT_VIOLATED if counts["violated"] else EXIT_OK
