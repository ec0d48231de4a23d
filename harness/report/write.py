"""Write one run's report directory: ``reports/<run id>/``.

::

    history.jsonl    every event, one JSON object a line (harness.history)
    snapshots.json   {label: Snapshot.to_dict()}: the machine before and after
    verdicts.json    the scenario, the sha256 of its file's bytes (``scenario_sha256``: what ``lastcall
                     replay`` finds the file by), matrix id, variant, test node id, the session's target override
                     (``target``, null for none: the replay needs it), outcome (with stacks), step error,
                     ``absent`` (the parties the target declares absent: a re-judge imports no target),
                     ``broken`` (why nothing the run shows counts, "" when it counts), seconds, each
                     checker's verdict with its evidence, and ``expect``: the checkers and their
                     parameters, so ``lastcall report`` can re-judge the history; on a catches item
                     ``catch``: the planted bug, its checkers, whether the catch counted, by which, and why
    index.html       the self-contained page (harness.report.html)
    .lastcall-run    the marker (harness.report.reportsdir.RUN_MARKER): lastcall prune-reports removes only
                     a directory holding it

Each file is written on its own (to a temporary name, then renamed), so a
failure of one still leaves the others; a failure is a warning, never an
exception into the runner.
"""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.checkers.base import Verdict
from harness.history import Event
from harness.report.reportsdir import INDEX, RUN_CHARS, mark_run

if TYPE_CHECKING:
    from harness.scenario.result import RunResult

__all__ = ["write_run", "write_page", "describe", "verdicts_doc", "ReportWarning", "HISTORY", "SNAPSHOTS",
           "VERDICTS", "PAGE", "FORMAT"]

HISTORY, SNAPSHOTS, VERDICTS, PAGE = "history.jsonl", "snapshots.json", "verdicts.json", INDEX
FORMAT = 1  # verdicts.json "format": bump when its keys change meaning
_UNSAFE = re.compile(rf"[^{RUN_CHARS}]")  # characters a run id may not bring into a directory name


class ReportWarning(UserWarning):
    """A report could not be (fully) written; the run itself is unaffected."""


def warn(message: str) -> None:
    """One warning line; under ``-W error`` it still does not raise into the caller."""
    try:
        warnings.warn(message, ReportWarning, stacklevel=3)
    except Warning:
        print(f"lastcall: warning: {message}", file=sys.stderr)


def describe(result: RunResult, nodeid: str | None = None, target: str | None = None) -> dict[str, Any]:
    """Everything of verdicts.json but the verdicts: what ran, how it ended, and what to judge it with
    (``target``: the session's target override, which a replay of ``nodeid`` needs)."""
    item = result.item
    expect: list[dict[str, Any]] = []
    for e in item.scenario.expect:
        expect.append({"checker": e.checker, "params": e.params.model_dump(mode="json"),
                       **({"allow_unknown": e.allow_unknown} if e.allow_unknown else {})})
    for v in result.verdicts[len(expect):]:  # checkers the runner added (fault_fired for armed faults)
        expect.append({"checker": v.checker, "params": {}})
    out = result.outcome
    from harness.targets import absent_of  # the run's own target, loaded by the run already

    return {"format": FORMAT, "scenario": item.scenario.name, "scenario_sha256": item.scenario.sha256,
            "matrix": item.id, "params": dict(item.params),
            "variant": result.variant, "run_id": result.run_id, "nodeid": nodeid, "target": target,
            "outcome": {"status": out.status, "detail": out.detail, "exits": dict(out.exits),
                        "leftovers": list(out.leftovers), "stacks": dict(out.stacks),
                        **({"watchdog": dict(out.watchdog)} if out.watchdog else {})},
            "step_error": result.step_error, "broken": getattr(result, "broken", ""),
            "seconds": round(result.seconds, 3), "scale": getattr(result, "scale", 1.0),
            "absent": sorted(absent_of(result.variant)), "expect": expect}


def verdicts_doc(meta: Mapping[str, Any], verdicts: Sequence[Verdict]) -> dict[str, Any]:
    return {**meta, "passed": _passed(meta, verdicts), "verdicts": [v.to_dict() for v in verdicts]}


def _passed(meta: Mapping[str, Any], verdicts: Sequence[Verdict]) -> bool:
    status = (meta.get("outcome") or {}).get("status", "ok")
    return not meta.get("step_error") and status == "ok" and all(v.passes for v in verdicts)


def _write(path: Path, fill: Callable[[Any], None]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        fill(f)
    os.replace(tmp, path)


def _json(path: Path, doc: Any) -> None:
    _write(path, lambda f: json.dump(doc, f, indent=1, default=str))


def write_page(run_dir: Path, meta: Mapping[str, Any], verdicts: Sequence[Verdict], events: Sequence[Event],
               problems: Sequence[str] = (), history: str | None = None) -> Path:
    """Write index.html of ``run_dir``; returns its path.  Raises OSError (callers decide)."""
    from harness.report.html import render_page

    page = run_dir / PAGE
    text = render_page(meta, verdicts, events, problems, history or str(run_dir / HISTORY), str(run_dir))
    _write(page, lambda f: f.write(text))
    return page


def write_run(result: RunResult, reports_dir: str | os.PathLike[str] = "reports",
              nodeid: str | None = None, target: str | None = None,
              catch: Mapping[str, Any] | None = None) -> Path | None:
    """Write ``reports_dir/<run id>/`` for ``result`` (``target``: the session's target override; ``catch``: a
    catches item's judgement, harness.scenario.catches.Catch as verdicts.json's ``catch``).

    Returns: the path of the run's index.html (its directory if the page could not be written), or None
        when not even the directory could be made.
    Resource handling: writes four files (each atomically); keeps nothing open.
    Error handling: never raises; whatever could not be written is one warning line naming the run.
    """
    errors: list[str] = []
    run_dir = Path(reports_dir) / (_UNSAFE.sub("_", result.run_id) or "run")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        mark_run(run_dir)
    except OSError as exc:
        warn(f"no report for run {result.run_id}: cannot create {run_dir}: {exc}")
        return None
    events = list(result.events)
    meta: dict[str, Any] = {}

    def attempt(what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception as exc:  # a report must never fail the run it reports
            errors.append(f"{what}: {type(exc).__name__}: {exc}")

    def jsonl(f: Any) -> None:
        for e in events:
            f.write(e.to_json() + "\n")

    attempt(HISTORY, lambda: _write(run_dir / HISTORY, jsonl))
    attempt(SNAPSHOTS, lambda: _json(run_dir / SNAPSHOTS,
                                      {k: s.to_dict() for k, s in result.snapshots.items()}))
    attempt("describe", lambda: meta.update(describe(result, nodeid, target)))
    if not meta:  # the scenario could not be described: keep what the result itself says
        meta = {"format": FORMAT, "run_id": result.run_id, "variant": result.variant, "nodeid": nodeid,
                "target": target, "outcome": {"status": getattr(result.outcome, "status", "unknown")},
                "broken": getattr(result, "broken", ""), "expect": []}
    if catch is not None:
        meta["catch"] = dict(catch)
    attempt(VERDICTS, lambda: _json(run_dir / VERDICTS, verdicts_doc(meta, result.verdicts)))
    attempt(PAGE, lambda: write_page(run_dir, meta, result.verdicts, events))
    if errors:
        warn(f"report of run {result.run_id} in {run_dir} is incomplete: {'; '.join(errors)}")
    page = run_dir / PAGE
    return page if page.exists() else run_dir
