"""One shard's report directory read back, for ``lastcall report --merge`` (harness.report.merge).

A shard's directory is data (a CI artifact, which a fork's pull request may have filled): its
``session.json`` and each run's ``verdicts.json`` are read bounded (harness.artifacts: regular files
only, a size limit, JSON depth bounded), and every field the merge uses is checked for the shape a
session writes (harness.report.summary.session_doc). A field of the wrong shape is one located line
(``DIR/session.json: runs[3]: NODEID: seconds 'long' is not a number``), exit 2 of the merge:

* the session: ``format`` this lastcall's; ``splits`` and ``group`` both absent or whole numbers with
  1 <= group <= splits <= :data:`MAX_SPLITS`; ``exitstatus`` absent or 0 to 255; ``target`` and
  ``lastcall`` absent or short strings; ``merged`` absent or a list; at most :data:`MAX_RUNS` runs;
* each run: ``nodeid`` a string of at most :data:`MAX_NODEID` characters; ``outcome`` one of passed,
  failed, skipped, interrupted; ``seconds`` a finite number from 0 to :data:`MAX_SECONDS`; ``run_id``,
  ``shard`` short strings; ``scenario_sha256`` empty or 64 hex digits; ``longrepr`` a string (cut to
  harness.report.summary.MAX_LONGREPR characters);
* ``page`` empty, or ``RUN.../index.html``: a relative path inside the shard's directory, with no scheme,
  no ``..``, no control characters, naming a regular file that is there (not a symbolic link, nor through
  one out of the directory), and no other run's page. The merged page links to it, and to nothing else
  it has not checked or written.

A run's verdicts.json only fills its row (harness.report.summary.row_doc): one that cannot be read, or
a field of the wrong shape in it, is left out of the row. What one merge reads of them is bounded too
(:data:`READ_BUDGET`).
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from harness.artifacts import MIB, ArtifactError, DataError, loads, read_bytes, read_json, shown
from harness.report.reportsdir import resolved
from harness.report.summary import (
    MAX_LONGREPR,
    MAX_VERDICTS_BYTES,
    SESSION,
    SESSION_FORMAT,
    SUMMARY,
    VERDICTS,
    SessionRun,
    encodable,
    row_doc,
)

__all__ = ["MergeError", "Shard", "Reads", "read_shard", "MAX_SPLITS", "MAX_RUNS", "MAX_NODEID", "MAX_SECONDS",
           "READ_BUDGET", "MAX_SESSION_BYTES"]

MAX_SESSION_BYTES = 8 * MIB  # a session.json: about 250 bytes a run
MAX_RUNS = 50_000  # runs in one session.json
MAX_SPLITS = 1000  # pytest-split groups of one session
MAX_NODEID = 2000  # characters of a node id
MAX_NAME = 1000  # characters of a run id, a target, a shard's label, a page path
MAX_SECONDS = 1e7  # of one run: past any watchdog's bound
READ_BUDGET = 1 << 30  # bytes of verdicts.json one merge reads, over every shard
OUTCOMES = ("passed", "failed", "skipped", "interrupted")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")  # what a browser takes for the scheme of a link
_SCANNED = 10_000  # entries of a directory looked at for a hint


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
        return (group, splits) if isinstance(splits, int) and isinstance(group, int) else None

    @property
    def exitstatus(self) -> int | None:
        status = self.meta.get("exitstatus")
        return status if isinstance(status, int) else None

    def describe(self) -> str:
        g = self.group
        where = f"group {g[0]}/{g[1]}" if g else "whole session"
        status = "" if self.exitstatus is None else f", pytest exit {self.exitstatus}"
        return f"{self.label}: {where}, {len(self.runs)} scenario run{'' if len(self.runs) == 1 else 's'}{status}"


class Reads:
    """What one merge has read of the shards' verdicts.json files, against :data:`READ_BUDGET`."""

    def __init__(self, budget: int | None = None) -> None:
        self.left = READ_BUDGET if budget is None else budget

    def row_doc(self, page: Path) -> dict[str, Any]:
        """The row fields of the verdicts.json beside ``page`` ({} when it cannot be read); MergeError when the
        merge has read its budget."""
        path = page.parent / VERDICTS
        try:
            size = os.lstat(path).st_size
        except OSError:
            return {}
        if min(size, MAX_VERDICTS_BYTES + 1) > self.left:
            raise MergeError([f"{shown(path)}: the shards' {VERDICTS} files are more than lastcall reads in one "
                              f"merge ({READ_BUDGET // MIB} MiB): merge fewer shards at once"])
        try:
            data = read_bytes(path, MAX_VERDICTS_BYTES, VERDICTS)
        except ArtifactError:
            return {}
        self.left -= len(data)
        try:
            return row_doc(loads(data))
        except DataError:
            return {}


def _value(value: Any) -> str:
    """A value read from a file, as a message shows it: short, one line."""
    if isinstance(value, dict):
        return "(an object)"
    if isinstance(value, list):
        return "(a list)"
    if isinstance(value, str) and len(value) > 60:
        return shown(repr(value[:60])) + f"... ({len(value)} characters)"
    return shown(repr(value), 80)


def _below(path: Path) -> list[str]:
    """The subdirectories of ``path`` holding a session.json (the first few of them)."""
    found: list[str] = []
    try:
        with os.scandir(path) as entries:
            for n, entry in enumerate(entries):
                if n >= _SCANNED or len(found) > 4:
                    break
                if entry.is_dir(follow_symlinks=False) and os.path.lexists(os.path.join(entry.path, SESSION)):
                    found.append(entry.name)
    except OSError:
        return []  # no hint, then
    return sorted(found)


def _session(label: str) -> tuple[Path, Any]:
    """The session.json of the directory ``label``, parsed; MergeError when there is none to read."""
    path = Path(label)
    if not os.path.isdir(path):  # os.path's: false, not an exception, for any path it cannot stat
        raise MergeError([f"{shown(label)}: {'not a directory' if os.path.lexists(path) else 'no such directory'}"])
    doc_path = path / SESSION
    if not os.path.lexists(doc_path):
        below = [shown(n, 60) for n in _below(path)]
        hint = f"; its subdirectories {', '.join(below[:4])}{' ...' if len(below) > 4 else ''} are: give them" \
            if below else ""
        raise MergeError([f"{label}: not a lastcall session's report directory (no {SESSION}, which a session with "
                          f"reports on writes beside its {SUMMARY}){hint}"])
    try:
        return doc_path, read_json(doc_path, SESSION, MAX_SESSION_BYTES)
    except ArtifactError as exc:
        raise MergeError([shown(exc)]) from None


def _meta(doc: Any) -> dict[str, Any] | str:
    """The session's fields the merge uses, checked; or what is wrong with them."""
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        return "not a lastcall session.json (no list of runs)"
    if doc.get("format") != SESSION_FORMAT or type(doc.get("format")) is not int:
        return f"format {_value(doc.get('format'))}, this lastcall reads {SESSION_FORMAT}: merge with the lastcall " \
               "that wrote it"
    if len(doc["runs"]) > MAX_RUNS:
        return f"{len(doc['runs'])} runs: lastcall merges at most {MAX_RUNS} from one session"
    splits, group = doc.get("splits"), doc.get("group")
    if (splits, group) != (None, None) and not (
            type(splits) is int and type(group) is int and 1 <= group <= splits <= MAX_SPLITS):  # True is no group
        return f"group {_value(group)} of splits {_value(splits)}: not a pytest-split group (1 <= group <= " \
               f"splits <= {MAX_SPLITS})"
    status = doc.get("exitstatus")
    if status is not None and not (type(status) is int and 0 <= status <= 255):
        return f"exitstatus {_value(status)} is not a process's exit status (0 to 255)"
    for key in ("target", "lastcall"):
        if doc.get(key) is not None and not (isinstance(doc[key], str) and len(doc[key]) <= MAX_NAME
                                             and encodable(doc[key])):
            return f"{key} {_value(doc[key])} is not a name (text of at most {MAX_NAME} characters)"
    if doc.get("merged") is not None and not isinstance(doc["merged"], list):
        return f"merged {_value(doc['merged'])} is not a list of shards"
    return {k: doc.get(k) for k in ("lastcall", "target", "exitstatus", "splits", "group", "merged") if k in doc}


def read_shard(label: str, reads: Reads | None = None) -> Shard:
    """One shard's directory; MergeError (one located line per problem) when it is not a session's report
    directory, or its session.json is not one lastcall wrote."""
    doc_path, doc = _session(label)
    meta = _meta(doc)
    if isinstance(meta, str):
        raise MergeError([f"{shown(doc_path)}: {meta}"])
    shard = Shard(label.rstrip("/") or label, Path(label), meta)
    reads = reads or Reads()
    real = resolved(shard.path)
    pages: dict[Path, int] = {}
    problems = []
    for n, entry in enumerate(doc["runs"]):
        run = _run(entry, shard, real)
        if isinstance(run, SessionRun) and run.page:
            first = pages.setdefault(resolved(run.page), n)
            run = run if first == n else f"{shown(run.nodeid, 200)}: its page is runs[{first}]'s too"
        if isinstance(run, str):
            problems.append(f"{shown(doc_path)}: runs[{n}]: {run}")
        elif not problems:
            if run.page:
                run.doc = reads.row_doc(Path(run.page))
            shard.runs.append(run)
    if problems:
        raise MergeError(problems)
    return shard


def _text(entry: dict[str, Any], key: str, limit: int = MAX_NAME) -> str | None:
    """``entry[key]`` when a string of at most ``limit`` characters ("" when absent or null); None otherwise."""
    value = entry.get(key)
    if value is None:
        return ""
    return value if isinstance(value, str) and len(value) <= limit and encodable(value) else None


def _run(entry: Any, shard: Shard, real: Path) -> SessionRun | str:
    """A SessionRun of one session.json entry (its row fields not read yet); or what is wrong with it."""
    if not isinstance(entry, dict) or not isinstance(entry.get("nodeid"), str) or not entry["nodeid"]:
        return "not a run (no nodeid)"
    nodeid = entry["nodeid"]
    if len(nodeid) > MAX_NODEID:
        return f"nodeid {_value(nodeid)}: lastcall reads node ids of at most {MAX_NODEID} characters"
    if not encodable(nodeid):
        return f"nodeid {_value(nodeid)} is not text: a lone surrogate has no UTF-8 form"
    name = shown(nodeid, 200)
    outcome, seconds = entry.get("outcome"), entry.get("seconds")
    seconds = 0.0 if seconds is None else seconds
    if outcome not in OUTCOMES or not isinstance(outcome, str):
        return f"{name}: outcome {_value(outcome)} is none of {', '.join(OUTCOMES)}"
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return f"{name}: seconds {_value(seconds)} is not a number"
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_SECONDS):
        return f"{name}: seconds {_value(seconds)} is not a run's duration (0 to {MAX_SECONDS:.0f})"
    texts = {k: _text(entry, k) for k in ("run_id", "shard", "scenario_sha256", "page")}
    longrepr = entry.get("longrepr")
    texts["longrepr"] = ("" if longrepr is None else longrepr[:MAX_LONGREPR]
                         if isinstance(longrepr, str) and encodable(longrepr) else None)
    bad = next((k for k, v in texts.items() if v is None), None)
    if bad is not None:
        most = "" if bad == "longrepr" else f" of at most {MAX_NAME} characters"
        return f"{name}: {bad} {_value(entry[bad])} is not text{most}"
    sha = texts["scenario_sha256"] or ""
    if sha and not _SHA256.fullmatch(sha):
        return f"{name}: scenario_sha256 {_value(sha)} is not a sha256 (64 hex digits)"
    run = SessionRun(nodeid, outcome, float(seconds), texts["run_id"] or "", longrepr=texts["longrepr"] or "",
                     scenario_sha256=sha, shard=f"{shard.label}/{texts['shard']}" if texts["shard"] else shard.label)
    if texts["page"]:
        page = _page(shard, real, texts["page"])
        if isinstance(page, str):
            return f"{name}: {page}"
        run.page = str(page)
    return run


def _page(shard: Shard, real: Path, text: str) -> Path | str:
    """The run's page ``text`` names inside the shard, checked: a regular file RUN.../index.html in it."""
    rel = PurePosixPath(text)
    if _SCHEME.match(text):
        return f"page {_value(text)} has a scheme: a run's page is a path inside {shown(shard.label)}"
    if (rel.is_absolute() or ".." in rel.parts or "\\" in text or not text.isprintable() or len(rel.parts) < 2
            or rel.name != SUMMARY):
        return f"page {_value(text)} is not a run's {SUMMARY} inside {shown(shard.label)} (RUN/{SUMMARY})"
    page = shard.path.joinpath(*rel.parts)
    if not os.path.isdir(page.parent):
        return f"its report {shown(page.parent)} is not there (an incomplete download of the shard?)"
    try:
        mode = os.lstat(page).st_mode
    except OSError as exc:
        return f"its page {shown(page)} cannot be read: {exc.strerror or exc} (an incomplete download of the shard?)"
    if not stat.S_ISREG(mode):
        return f"its page {shown(page)} is not a regular file: lastcall writes no link, FIFO or directory there"
    if not resolved(page).is_relative_to(real):
        return f"its page {shown(page)} lies outside {shown(shard.label)}, through a symbolic link"
    return page
