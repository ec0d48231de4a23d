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
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.checkers import CHECKERS, RunRecord, Verdict, judge
from harness.errors import ConfigError
from harness.history import Event, read_jsonl
from harness.probes.model import Snapshot
from harness.report.write import HISTORY, SNAPSHOTS, VERDICTS, verdicts_doc, write_page

__all__ = ["report_history", "load_history", "EXIT_OK", "EXIT_VIOLATED"]

EXIT_OK = 0  # no verdict is violated
EXIT_VIOLATED = 1  # a checker found a violation
EVIDENCE_SHOWN = 8  # evidence lines printed per verdict at most


def load_history(path: Path) -> tuple[list[Event], list[str]]:
    """The events that could be read, and one problem per line (or event) that could not.

    Raises ConfigError when the file is missing or unreadable as text (exit code 2).
    """
    try:
        events, problems = read_jsonl(path)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; give a run's history, e.g. reports/<run id>/{HISTORY}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it as a history: {exc}") from None
    sane = []
    for i, e in enumerate(events, 1):
        if isinstance(e.t_ns, int) and isinstance(e.pid, int) and isinstance(e.kind, str) and isinstance(e.data, dict):
            sane.append(Event(e.t_ns, e.pid, str(e.role), str(e.rank), str(e.thread), e.kind, e.data, e.v))
        else:
            problems.append(f"{path}: event {i} of those read: wrong field types (t_ns={e.t_ns!r}, kind={e.kind!r})")
    return sane, problems


def _load_json(path: Path, problems: list[str]) -> Any:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems.append(f"{path}: unreadable, left out: {exc}")
        return None


def _snapshots(raw: Any, path: Path, problems: list[str]) -> dict[str, Snapshot]:
    out: dict[str, Snapshot] = {}
    if not isinstance(raw, dict):
        return out
    for label, d in raw.items():
        try:
            out[str(label)] = Snapshot.from_dict(d)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            problems.append(f"{path}: snapshot {label!r} unreadable, left out: {exc}")
    return out


Expect = list[tuple[str, dict[str, Any], str | None]]  # checker, params, allow_unknown reason


def _expect(meta: dict[str, Any], checks: Sequence[str]) -> tuple[Expect, str]:
    if checks:
        return [(c, {}, None) for c in checks], "the checkers named with --check, with their defaults"
    listed = meta.get("expect")
    if isinstance(listed, list) and all(isinstance(x, dict) and "checker" in x for x in listed):
        return [(str(x["checker"]), dict(x.get("params") or {}), x.get("allow_unknown") or None)
                for x in listed], f"the expect list of {VERDICTS}"
    return ([(c, {}, None) for c in CHECKERS],
            f"every checker with its defaults (no expect list in a {VERDICTS} beside it)")


def _scale(meta: dict[str, Any]) -> float:
    """The scale the stored run's bounds were judged at (verdicts.json's ``scale``); 1 where it has none (a
    report written before it was recorded) or one that is not a positive finite number."""
    value = meta.get("scale", 1.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return 1.0
    return float(value)


def _line(v: Verdict, was: str | None, t0: int) -> list[str]:
    head = "ok" if v.ok else v.status.upper()
    change = f" (was {was})" if was is not None and was != v.status else ""
    out = [f"  {head} {v.checker}{change}" + (f": {v.message}" if v.message else "")]
    for e in v.evidence[:EVIDENCE_SHOWN]:
        data = " ".join(f"{k}={val}" for k, val in e.data.items() if k != "text")
        out.append(f"      evidence: {(e.t_ns - t0) / 1e6:9.3f} ms {e.rank or e.role} {e.kind} {data}")
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
    raw_meta = _load_json(path.parent / VERDICTS, problems)
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    snaps = _snapshots(_load_json(path.parent / SNAPSHOTS, problems), path.parent / SNAPSHOTS, problems)
    expect, source = _expect(meta, checks)
    from harness.targets import absent_of

    record = RunRecord(tuple(events), snaps, _scale(meta), absent=absent_of(meta.get("variant")))
    verdicts = [judge(name, record, params, allow_unknown=allow) for name, params, allow in expect]
    stored = meta.get("verdicts") if isinstance(meta.get("verdicts"), list) else []
    was = {i: d.get("status") for i, d in enumerate(stored or []) if isinstance(d, dict)}

    if unread:
        print(f"{path}: {unread} line{'' if unread == 1 else 's'} could not be read: "
              + "; ".join(problems[:unread][:5]) + (" ..." if unread > 5 else ""), file=sys.stderr)
    for p in problems[unread:]:
        print(f"lastcall report: {p}", file=sys.stderr)
    name = f"{meta.get('scenario') or '(no scenario recorded)'}[{meta.get('matrix') or '?'}]"
    stored_outcome = (meta.get("outcome") or {}).get("status", "?") if isinstance(meta.get("outcome"), dict) else "?"
    print(f"{path}: {len(events)} events, {name} on {meta.get('variant') or '?'}, stored outcome {stored_outcome}; "
          f"judged with {source}")
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
