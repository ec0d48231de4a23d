"""The pytest side of the reports: the option, the session page, the terminal summary.

* ``--lastcall-reports=DIR`` (ini ``lastcall_reports``, default ``reports``
  under the rootdir) is where each run writes ``<run id>/``; an empty value
  turns reports off.  lastcall writes only into a directory it made: one it
  creates, or an empty one (a ``.gitkeep`` may stay), gets its marker
  :data:`MARKER` before anything else is written in it; a file, a directory it
  cannot write and a non-empty directory without the marker (``/``, a home
  directory) are refused when the session starts (:func:`check_reports`, a
  pytest.UsageError), so it never replaces an ``index.html`` or
  ``session.json`` it did not write.
* At the end of the session (on the xdist controller, or the only process) the
  runs of *this* session are known from the test reports: each scenario item
  records ``lastcall_run_id`` and ``lastcall_report`` in its user_properties,
  which xdist carries from the workers.  They make ``reports/index.html`` (a
  table of scenario x matrix x variant) and the terminal summary: one line per
  failed scenario, the totals, where the page is.
* Beside the page, ``reports/session.json`` lists the same runs (node id, pytest
  outcome, seconds, run id, page, the sha256 of the scenario file) with the
  session's target override, pytest exit status and pytest-split group: what
  ``lastcall report --merge`` (harness.report.merge) reads from each shard.
* Every session's page is kept too, as ``reports/sessions/<session id>.html`` beside its record (harness.report.
  sessions), and ``index.html`` lists the earlier sessions below the runs of this one, newest first.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from harness.artifacts import MIB, ArtifactError, read_json, shown
from harness.report.reportsdir import INDEX, MARKER, make_reports, replace_text, unfit
from harness.report.sessions import SESSIONS, listing, new_session_id, record_doc, write_session

__all__ = ["addoption", "reports_dir", "check_reports", "terminal_summary", "collect_runs", "write_summary",
           "SessionRun", "session_meta", "row_doc", "read_row_doc", "href", "encodable", "SESSION", "SESSION_FORMAT",
           "MARKER", "MAX_VERDICTS_BYTES"]

INI_REPORTS = "lastcall_reports"
OPTION = "--lastcall-reports"
SUMMARY = INDEX  # the session page, in the reports directory
SESSION = "session.json"  # the session's runs, beside it, for lastcall report --merge
SESSION_FORMAT = 1  # session.json "format": bump when its keys change meaning
SCENARIO_SUFFIXES = (".yaml", ".yml")  # a node id whose file has one of these is a scenario
# a run's verdicts.json, read back for its row: tens of KiB as lastcall writes it
MAX_VERDICTS_BYTES = 4 * MIB
MAX_FIELD = 200  # characters of a name read from a verdicts.json (scenario, matrix, variant, checker) kept
MAX_ROW_VERDICTS = 256  # verdicts of one run read for its row: lastcall has fewer checkers
MAX_LONGREPR = 500  # characters of a failure's first line kept in session.json
VERDICTS = "verdicts.json"  # beside each run's page (harness.report.write.VERDICTS, not imported: this stays cheap)


def addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lastcall")
    group.addoption(OPTION, default=None, metavar="DIR",
                    help="where each scenario run writes its report (<run id>/index.html, history.jsonl, "
                         f"verdicts.json); empty turns reports off; default: the {INI_REPORTS} ini value")
    parser.addini(INI_REPORTS, default="reports", help="directory of scenario run reports, relative to the "
                  "rootdir (default reports; empty: no reports)")


def _configured(config: pytest.Config) -> Path | None:
    value = config.getoption(OPTION, default=None)
    if value is None:
        value = config.getini(INI_REPORTS)
    value = str(value or "").strip()
    if not value:
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() else Path(config.rootpath) / path


def reports_dir(config: pytest.Config) -> Path | None:
    """The reports directory of this session, or None when reports are off.

    Made (with its marker) when first asked for, by the process about to write in it: a session that writes no
    report leaves none behind. :func:`check_reports` has refused a directory unfit for it before anything ran."""

    path = _configured(config)
    if path is not None:
        try:
            make_reports(path)
        except OSError:
            pass  # the write that follows says what is wrong, in its own warning
    return path


def check_reports(config: pytest.Config) -> None:
    """Refuse (pytest.UsageError, one line) a reports directory lastcall may not write in: at configure time, on
    the xdist controller (or the only process), before any worker or run starts."""
    if hasattr(config, "workerinput"):  # the controller checked it; a worker only makes it (reports_dir)
        return

    path = _configured(config)
    why = None if path is None else unfit(path)
    if why is not None:
        given = config.getoption(OPTION, default=None)
        where = f"{OPTION} {given}" if given is not None else f"ini {INI_REPORTS} = {config.getini(INI_REPORTS)}"
        full = "" if given is not None and Path(given) == path else f" ({path})"
        raise pytest.UsageError(shown(f"{where}{full}: {why}"))


@dataclass
class SessionRun:
    """One scenario test of this session, as its reports say."""

    nodeid: str
    outcome: str = ""  # passed | failed | skipped | interrupted (set up, never ran to its end: ^C, SIGTERM)
    seconds: float = 0.0
    run_id: str = ""  # "" when no run happened (skipped, the file did not load)
    page: str = ""  # the run's index.html, "" when none was written
    doc: dict[str, Any] = field(default_factory=dict)  # its verdicts.json, {} when unreadable
    longrepr: str = ""  # first line of the failure, for runs without a report
    scenario_sha256: str = ""  # of the scenario file the item came from, "" when it could not be read
    shard: str = ""  # the shard's report directory, on a merged page only

    @property
    def violated(self) -> list[str]:
        return self.checkers("violated")

    def checkers(self, status: str) -> list[str]:
        """The checkers whose verdict is ``status``, as ``doc`` says (a verdict of another shape is none)."""
        verdicts = self.doc.get("verdicts")
        return [str(v.get("checker")) for v in (verdicts if isinstance(verdicts, list) else ())
                if isinstance(v, dict) and v.get("status") == status]

    @property
    def run_status(self) -> str:
        outcome = self.doc.get("outcome")
        return str(outcome.get("status", "")) if isinstance(outcome, dict) else ""


def encodable(text: str) -> bool:
    """Whether ``text`` has a UTF-8 form: JSON's ``\\ud800`` escape reads as a lone surrogate, which has none."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _name(value: Any) -> str | None:
    return value[:MAX_FIELD] if isinstance(value, str) and encodable(value) else None


def row_doc(doc: Any) -> dict[str, Any]:
    """What a run's row and FAILED line use of its verdicts.json ``doc``, each field of the shape lastcall writes
    or left out (a verdicts.json is data: a wrong shape is no row's error): scenario, matrix, variant, broken,
    step_error (strings), outcome ({"status": str}) and verdicts ([{"checker": str, "status": str}])."""
    if not isinstance(doc, dict):
        return {}
    out: dict[str, Any] = {k: doc[k] for k in ("scenario", "matrix", "variant", "broken", "step_error")
                           if isinstance(doc.get(k), str) and encodable(doc[k])}
    for key in ("scenario", "matrix", "variant"):
        if key in out:
            out[key] = out[key][:MAX_FIELD]
    outcome = doc.get("outcome")
    status = _name(outcome.get("status")) if isinstance(outcome, dict) else None
    if status is not None:
        out["outcome"] = {"status": status}
    verdicts = doc.get("verdicts")
    if isinstance(verdicts, list):
        out["verdicts"] = [{"checker": c, "status": st} for v in verdicts[:MAX_ROW_VERDICTS] if isinstance(v, dict)
                           for c, st in [(_name(v.get("checker")), _name(v.get("status")))]
                           if c is not None and st is not None]
    return out


def read_row_doc(page: str | os.PathLike[str]) -> dict[str, Any]:
    """:func:`row_doc` of the verdicts.json beside a run's ``page``; {} when it cannot be read (bounded:
    harness.artifacts)."""
    try:
        return row_doc(read_json(Path(page).parent / VERDICTS, VERDICTS, MAX_VERDICTS_BYTES))
    except ArtifactError:
        return {}


def _is_scenario(report: Any) -> bool:
    props = dict(getattr(report, "user_properties", ()) or ())
    return "lastcall_run_id" in props or report.nodeid.split("::")[0].endswith(SCENARIO_SUFFIXES)


def collect_runs(stats: Mapping[str, Iterable[Any]]) -> list[SessionRun]:
    """The scenario tests among a terminal reporter's ``stats``, one SessionRun per node id."""
    runs: dict[str, SessionRun] = {}
    for reports in stats.values():
        for rep in reports:
            if not hasattr(rep, "when") or not hasattr(rep, "nodeid") or not _is_scenario(rep):
                continue
            run = runs.setdefault(rep.nodeid, SessionRun(rep.nodeid))
            run.seconds += float(getattr(rep, "duration", 0.0) or 0.0)
            if rep.failed:
                run.outcome = "failed"
                run.longrepr = run.longrepr or str(getattr(rep, "longreprtext", "")).strip().split("\n")[0]
            elif rep.skipped and run.outcome != "failed":
                run.outcome = "skipped"
            elif rep.when == "call" and rep.passed and run.outcome == "":
                run.outcome = "passed"
            props = dict(getattr(rep, "user_properties", ()) or ())
            run.run_id = str(props.get("lastcall_run_id", run.run_id))
            run.page = str(props.get("lastcall_report", run.page))
    for run in runs.values():
        run.outcome = run.outcome or "interrupted"
        run.longrepr = run.longrepr[:MAX_LONGREPR]
        if run.page:
            run.doc = read_row_doc(run.page)
    return sorted(runs.values(), key=lambda r: r.nodeid)


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def href(page: str | os.PathLike[str], root: Path) -> str:
    """The link from a page in ``root`` to ``page``: relative, every character but letters, digits and ``/._-~``
    percent-encoded, so that no part of it reads as a scheme (``javascript:``), a query or a fragment."""
    rel = Path(os.path.relpath(Path(page).absolute(), root.absolute())).as_posix()
    return quote(rel, safe="/")


def _row(run: SessionRun, root: Path, shards: bool = False) -> str:
    h = escape
    doc = row_doc(run.doc)
    name = str(doc.get("scenario") or run.nodeid.split("::")[-1].split("[")[0])
    matrix = str(doc.get("matrix") or "")
    link = ""
    if run.page:
        link = f'<a href="{h(href(run.page, root), quote=True)}">{h(run.run_id or "report")}</a>'
    violated = ", ".join(run.violated)
    broken = f"; broken: {doc['broken']}" if doc.get("broken") else ""  # nothing the run shows counts
    return (f'<tr class="run {run.outcome}" data-nodeid="{h(run.nodeid, quote=True)}" data-outcome="{run.outcome}">'
            f"<td>{h(name)}</td><td>{h(matrix)}</td><td>{h(str(doc.get('variant') or ''))}</td>"
            f'<td><span class="badge {run.outcome}">{run.outcome}</span></td><td>{h(run.run_status + broken)}</td>'
            f'<td class="violated">{h(violated)}</td><td>{run.seconds:.2f}s</td><td>{link}</td>'
            + (f"<td>{h(run.shard)}</td>" if shards else "") + f"<td><code>{h(run.nodeid)}</code></td></tr>")


SUMMARY_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1f24} h1{font-size:1.3em}
table{border-collapse:collapse} td,th{padding:2px 10px;border-bottom:1px solid #eee;text-align:left}
code{font:12px ui-monospace,Menlo,monospace;color:#57606a} .violated{color:#cf222e}
.badge{padding:0 .5em;border-radius:.8em;color:#fff} .badge.passed{background:#1a7f37}
.badge.failed{background:#cf222e} .badge.skipped{background:#8c959f} .badge.interrupted{background:#9a6700}
tr.failed{background:#fff5f5}
"""


def _totals(runs: list[SessionRun]) -> str:
    count = {k: sum(1 for r in runs if r.outcome == k) for k in ("passed", "failed", "skipped", "interrupted")}
    cut = f", {count['interrupted']} interrupted" if count["interrupted"] else ""
    return (f"{len(runs)} scenario run{'' if len(runs) == 1 else 's'}: {count['passed']} passed, "
            f"{count['failed']} failed, {count['skipped']} skipped{cut}")


def session_doc(root: Path, runs: list[SessionRun], meta: Mapping[str, Any]) -> dict[str, Any]:
    """session.json: ``meta`` (target, exitstatus, splits, group, ...) and each run, pages relative to root."""
    def page(run: SessionRun) -> str:
        return Path(os.path.relpath(Path(run.page).absolute(), root.absolute())).as_posix() if run.page else ""

    return {"format": SESSION_FORMAT, **meta,
            "runs": [{"nodeid": r.nodeid, "outcome": r.outcome, "seconds": round(r.seconds, 3), "run_id": r.run_id,
                      "page": page(r), "longrepr": r.longrepr, "scenario_sha256": r.scenario_sha256,
                      **({"shard": r.shard} if r.shard else {})} for r in runs]}


def _page(title: str, stamp: str, totals: str, notes: str, rows: str, shards: bool, tail: str = "") -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{SUMMARY_CSS}</style></head><body><h1>{escape(title)}, {escape(stamp)}</h1>"
            f'<p id="totals">{escape(totals)}</p>{notes}<table id="runs"><tr><th>scenario</th>'
            "<th>matrix</th><th>variant</th><th>result</th><th>run outcome</th><th>violated</th><th>duration</th>"
            f"<th>report</th>{'<th>shard</th>' if shards else ''}<th>test</th></tr>\n{rows}\n</table>{tail}"
            "</body></html>\n")


def _run_names(root: Path, runs: list[SessionRun]) -> list[str]:
    """The directories in ``root`` these runs wrote (a merge's runs lie in their shards: none)."""
    return [Path(r.page).parent.name for r in runs if r.page and Path(r.page).absolute().parent.parent
            == root.absolute()]


def write_summary(root: Path, runs: list[SessionRun], meta: Mapping[str, Any] | None = None, *,
                  title: str = "lastcall session", totals: str | None = None, notes: str = "") -> Path | None:
    """Write ``root/index.html`` and ``root/session.json`` for these runs, and keep the page and a record of the
    session in ``root/sessions`` (the index lists the earlier ones); None (and a warning) when the page cannot be
    written.  ``notes`` is HTML put between the totals and the table (a merge's shards, FLAKY)."""
    from harness.report.write import warn

    stamp = time.strftime("%Y-%m-%d %H:%M:%S")  # wall clock, for the reader only
    shards = any(r.shard for r in runs)
    totals = totals or _totals(runs)
    sid = new_session_id()
    path = root / SUMMARY
    try:
        make_reports(root)
        replace_text(root / SESSION, json.dumps(session_doc(root, runs, meta or {}), indent=1))
        status = (meta or {}).get("exitstatus")
        record = record_doc(sid, title, totals, status if isinstance(status, int) else None, _run_names(root, runs))
        try:
            own = "\n".join(_row(r, root / SESSIONS, shards) for r in runs)
            write_session(root, sid, json.dumps(record, indent=1), _page(title, stamp, totals, notes, own, shards))
        except OSError as exc:
            warn(f"this session's page is not kept in {root / SESSIONS}: {exc}")
        rows = "\n".join(_row(r, root, shards) for r in runs)
        replace_text(path, _page(title, stamp, totals, notes, rows, shards, listing(root, sid)))
    except OSError as exc:
        warn(f"no session summary: cannot write {path}: {exc}")
        return None
    return path


def session_meta(config: pytest.Config, status: int | None) -> dict[str, Any]:
    """What session.json says of the session: its target override, pytest exit status (``status``, as the
    terminal summary hook is given it), pytest-split group."""
    from harness import __version__

    # the override as given (harness.scenario.collect.chosen_target applies it; importing it here would be a cycle)
    given = [config.getoption(f"lastcall_{n}", None) or config.getoption(f"lastcall_{n}_alias", None)
             or os.environ.get(f"LASTCALL_{n.upper()}") for n in ("target", "listener")]
    return {"lastcall": __version__, "target": "@".join(str(g) for g in given if g) or None,
            "exitstatus": None if status is None else int(status),
            "splits": config.getoption("splits", None), "group": config.getoption("group", None)}


def _digests(root: Path, runs: list[SessionRun]) -> None:
    """Each run's scenario_sha256: of the file its node id names, read now (the end of its session)."""
    seen: dict[str, str] = {}
    for run in runs:
        name = run.nodeid.split("::")[0]
        if name not in seen:
            try:
                seen[name] = hashlib.sha256((root / name).read_bytes()).hexdigest()
            except OSError:
                seen[name] = ""
        run.scenario_sha256 = seen[name]


def _failed_line(run: SessionRun) -> str:
    """One terminal line for a failed run; what it shows of files (its verdicts.json, a shard's session.json) is
    cut and stripped of control characters (harness.artifacts.shown)."""
    doc = row_doc(run.doc)
    if not doc:
        why = run.longrepr or "no report"
        return shown(f"FAILED {run.nodeid}: {why}" + (f" ({run.page})" if run.page else ""))
    parts = []
    if run.violated:
        parts.append("violated " + ", ".join(run.violated))
    unknown = run.checkers("unknown")
    if unknown:
        parts.append("unknown " + ", ".join(unknown))
    if run.run_status not in ("", "ok"):
        parts.append(f"outcome {run.run_status}")
    if doc.get("step_error"):
        parts.append(f"step failed: {str(doc['step_error'])[:80]}")
    if not parts:
        parts.append(run.longrepr or "see the report")
    return shown(f"FAILED {run.nodeid} on {doc.get('variant', '?')}: {'; '.join(parts)} -> {run.page}")


def terminal_summary(terminalreporter: Any, config: pytest.Config, exitstatus: int | None = None) -> None:
    """One line per failed scenario, the totals, where the session page is (controller only)."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller reports the session
        return
    runs = collect_runs(terminalreporter.stats)
    meta = session_meta(config, exitstatus)
    if not runs and not meta["splits"]:  # a shard writes its (empty) session.json: the merge counts its groups
        return
    root = reports_dir(config)
    _digests(Path(config.rootpath), runs)
    page = write_summary(root, runs, meta) if root is not None else None
    if not runs:
        return
    terminalreporter.write_sep("-", "lastcall scenarios")
    for run in runs:
        if run.outcome == "failed":
            terminalreporter.write_line(_failed_line(run))
    where = f"; summary: {page}" if page else ("; reports are off" if root is None else "")
    terminalreporter.write_line(_totals(runs) + where)
