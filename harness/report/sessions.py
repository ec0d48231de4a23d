"""Every session's page kept: ``reports/sessions/<session id>.html`` and ``.json``, listed from ``index.html``.

A session that writes its page (harness.report.summary.write_summary) also writes, under ``sessions/`` of
its reports directory, its own copy of that page and a small record (:func:`record_doc`): its id, title, when
it ended, its totals line, its pytest exit status and the names of the run directories it wrote there. The
reports directory's ``index.html`` is then the newest session's page followed by a list of the earlier ones
(:func:`listing`), newest first, at most :data:`MAX_LISTED` of them, each linking to its page.

A session id (:func:`new_session_id`) starts with the UTC time it ended, so the names sort by age. The records
are data read back from a directory anyone may have filled (a downloaded artifact): each is read bounded
(harness.artifacts: a regular file, never through a link, :data:`MAX_RECORD_BYTES` at most, :data:`LIST_BUDGET`
over one listing), every field used is checked (:func:`read_record`), and one that fails is left out of the
list with one line saying why, never an error of the session.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from harness.artifacts import MIB, ArtifactError, read_json, read_text, shown
from harness.report.reportsdir import INDEX, RUN_CHARS, replace_text

__all__ = ["new_session_id", "record_doc", "write_session", "read_record", "session_ids", "listing", "relist",
           "Record", "SESSIONS", "SESSION_ID", "RECORD_FORMAT", "MAX_LISTED", "MAX_RECORD_BYTES", "LIST_BUDGET",
           "BEGIN", "END"]

SESSIONS = "sessions"  # in a reports directory: each session's page and record
RECORD_FORMAT = 1  # sessions/<id>.json "format": bump when its keys change meaning
SESSION_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9]{6}-[0-9a-f]{6}")  # UTC date-time-microseconds-random
RUN_NAME = re.compile(rf"[{RUN_CHARS}]{{1,200}}")  # a run directory's name, as write_run makes it
MAX_LISTED = 200  # earlier sessions linked from one index.html
MAX_RECORD_BYTES = 4 * MIB  # one record: about 50 bytes a run
MAX_RUNS = 50_000  # run names in one record (harness.report.shard reads as many runs from a session.json)
MAX_TEXT = 500  # characters of a record's title, end time or totals line
LIST_BUDGET = 64 * MIB  # bytes of records one listing reads: past it, the older sessions are left out
MAX_INDEX_BYTES = 64 * MIB  # an index.html read back to list the sessions again (harness.report.prune)
_SCANNED = 100_000  # entries of sessions/ looked at
BEGIN = "<!-- lastcall:sessions current="  # then the id of the session whose page index.html is, and " -->"
END = "<!-- /lastcall:sessions -->"
_BEGIN = re.compile(re.escape(BEGIN) + r"(" + SESSION_ID.pattern + r") -->")


@dataclass(frozen=True)
class Record:
    """One session's record, as checked."""

    id: str
    title: str
    ended: str
    totals: str
    exitstatus: int | None
    runs: tuple[str, ...]  # the run directories it wrote in the reports directory


def new_session_id() -> str:
    """A fresh id: the UTC time now, to the microsecond, and 24 random bits (two sessions ending at once)."""
    now = time.time()
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime(now))}-{int(now % 1 * 1e6):06d}-{secrets.token_hex(3)}"


def record_doc(sid: str, title: str, totals: str, exitstatus: int | None, runs: Sequence[str]) -> dict[str, Any]:
    return {"format": RECORD_FORMAT, "id": sid, "title": title, "ended": time.strftime("%Y-%m-%d %H:%M:%S"),
            "totals": totals, "exitstatus": exitstatus, "runs": list(runs)}


def _real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def write_session(root: Path, sid: str, doc: str, page: str) -> None:
    """Write ``root/sessions/<sid>.json`` (``doc``) and ``.html`` (``page``); OSError when they cannot be, or
    ``sessions`` is anything but a directory (a link elsewhere is not written through)."""
    where = root / SESSIONS
    try:
        where.mkdir()
    except FileExistsError:
        pass
    if not _real_dir(where):
        raise OSError(f"{where} is not a directory (a symbolic link is not written through)")
    replace_text(where / f"{sid}.json", doc)
    replace_text(where / f"{sid}.html", page)


def _text(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or len(value) > MAX_TEXT or not value.isprintable():
        raise ValueError(f"{key} {shown(repr(value), 60)} is not a line of text of at most {MAX_TEXT} characters")
    return value


def read_record(root: Path, sid: str, limit: int = MAX_RECORD_BYTES) -> Record:
    """``root/sessions/<sid>.json``, checked; ValueError with one line (its path first) when it is not a record
    lastcall wrote, or its page beside it is not a regular file."""
    path = root / SESSIONS / f"{sid}.json"
    try:
        doc = read_json(path, "session record", limit)
    except ArtifactError as exc:
        raise ValueError(shown(exc)) from None
    try:
        if not isinstance(doc, dict) or doc.get("format") != RECORD_FORMAT or type(doc.get("format")) is not int:
            raise ValueError(f"not a session record of format {RECORD_FORMAT}")
        if doc.get("id") != sid:
            raise ValueError(f"its id {shown(repr(doc.get('id')), 60)} is not its name's")
        status = doc.get("exitstatus")
        if status is not None and not (type(status) is int and 0 <= status <= 255):
            raise ValueError(f"exitstatus {shown(repr(status), 20)} is not a process's exit status (0 to 255)")
        runs = doc.get("runs")
        if not isinstance(runs, list) or len(runs) > MAX_RUNS:
            raise ValueError(f"runs is not a list of at most {MAX_RUNS} run directories")
        bad = next((r for r in runs if not (isinstance(r, str) and RUN_NAME.fullmatch(r) and r not in ("..", "."))),
                   None)
        if bad is not None:
            raise ValueError(f"runs: {shown(repr(bad), 60)} is not a run directory's name")
        if not stat.S_ISREG(os.lstat(path.with_suffix(".html")).st_mode):
            raise ValueError("its page is not a regular file")
        return Record(sid, _text(doc, "title"), _text(doc, "ended"), _text(doc, "totals"), status, tuple(runs))
    except OSError as exc:
        raise ValueError(f"{shown(path)}: its page cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{shown(path)}: {exc}") from None


def session_ids(root: Path) -> tuple[list[str], list[str]]:
    """The ids of the records under ``root/sessions``, newest first; and a line for each entry named as a record
    that is not a regular file (a link is never followed)."""
    where = root / SESSIONS
    ids: list[str] = []
    notes: list[str] = []
    if not _real_dir(where):
        if os.path.islink(where):
            notes.append(f"{shown(where)}: a symbolic link, not followed")
        return ids, notes
    try:
        with os.scandir(where) as entries:
            for n, entry in enumerate(entries):
                if n >= _SCANNED:
                    notes.append(f"{shown(where)}: more than {_SCANNED} entries; the rest are not looked at")
                    break
                sid, _, ext = entry.name.partition(".")
                if ext != "json" or not SESSION_ID.fullmatch(sid):
                    continue
                if entry.is_file(follow_symlinks=False):
                    ids.append(sid)
                else:
                    notes.append(f"{shown(entry.path)}: not a regular file, left out")
    except OSError as exc:
        notes.append(f"{shown(where)}: cannot be read: {exc.strerror or exc}")
    return sorted(ids, reverse=True), notes


def earlier(root: Path, current: str) -> tuple[list[Record], list[str]]:
    """The records of the sessions before ``current``, newest first, at most :data:`MAX_LISTED`; and a line for
    each left out."""
    ids, notes = session_ids(root)
    records: list[Record] = []
    left = LIST_BUDGET
    for sid in (s for s in ids if s != current):
        if len(records) >= MAX_LISTED:
            notes.append(f"more than {MAX_LISTED} earlier sessions: the older ones are not listed "
                         "(lastcall prune-reports removes them)")
            break
        try:
            size = os.lstat(root / SESSIONS / f"{sid}.json").st_size
            if size > left:
                notes.append(f"the records of the earlier sessions are more than {LIST_BUDGET // MIB} MiB: the "
                             "older ones are not listed")
                break
            left -= size
            records.append(read_record(root, sid))
        except OSError as exc:
            notes.append(f"{shown(root / SESSIONS / sid)}.json: {exc.strerror or exc}")
        except ValueError as exc:
            notes.append(f"{exc}; left out")
    return records, notes


def listing(root: Path, current: str) -> str:
    """The HTML of index.html's list of the sessions before ``current``, between :data:`BEGIN` and :data:`END`."""
    records, notes = earlier(root, current)
    h = escape
    items = "".join(f'<li><a href="{SESSIONS}/{r.id}.html">{h(r.ended)}</a> {h(r.title)}: {h(r.totals)}'
                    + (f" (pytest exit {r.exitstatus})" if r.exitstatus else "") + "</li>" for r in records)
    skipped = "".join(f"<li>{h(n)}</li>" for n in notes)
    return (f"{BEGIN}{current} -->\n<h2>earlier sessions</h2>"
            + (f'<ul id="sessions">{items}</ul>' if items else "<p>none</p>")
            + (f'<ul id="skipped-sessions">{skipped}</ul>' if skipped else "") + f"\n{END}")


def relist(root: Path) -> str | None:
    """List the sessions in ``root/index.html`` again, as they are now (after some were removed); None when done,
    else why not (its list is not one lastcall wrote, or it cannot be read or written)."""
    page = root / INDEX
    try:
        text = read_text(page, MAX_INDEX_BYTES, "session page")
    except ArtifactError as exc:
        return shown(exc)
    begin = list(_BEGIN.finditer(text))
    end = text.find(END)
    if len(begin) != 1 or text.count(END) != 1 or end < begin[0].end():
        return f"{shown(page)}: holds no list of sessions lastcall wrote; left as it is"
    try:
        replace_text(page, text[:begin[0].start()] + listing(root, begin[0][1]) + text[end + len(END):])
    except OSError as exc:
        return f"{shown(page)}: cannot be written: {exc.strerror or exc}"
    return None
