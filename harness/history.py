"""The history: one record of what every process did, on one clock.

An :class:`Event` is plain data: CLOCK_MONOTONIC nanoseconds (shared by every
process on Linux), pid, role, rank, thread name, a kind (past tense:
``stop_started``, ``dispatch_started``) and a small dict of data.  The
:class:`Recorder` is the only writer of a history: producers call ``emit``;
tests and checkers read ``events()`` or block in ``wait_for``.  JSONL in and
out; a torn last line (a writer killed mid-line) is tolerated and reported.

The kinds and their data keys are :mod:`harness.events`; with
``LASTCALL_STRICT_EVENTS=1`` a recorder checks every event it records against
them and keeps what is wrong in :attr:`Recorder.bad_events` (the run is then
broken, naming the event).  Histories written in an older format are read
through :func:`harness.events.upgrade`.

A history is bounded: a recorder stores at most its ``budget`` bytes of JSONL
(harness.artifacts.MAX_HISTORY_BYTES, what lastcall reads back), ending a history
cut there with a ``history_budget_reached`` event, and a request id longer than
harness.events.MAX_ID_CHARS is stored as its digest and size, never whole.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from harness import artifacts, envvars, eventlines
from harness import events as vocabulary

__all__ = ["SCHEMA_VERSION", "MARKER_ROOM", "Event", "Emitter", "Recorder", "NullRecorder", "marker", "write_jsonl",
           "read_jsonl"]

SCHEMA_VERSION = vocabulary.FORMAT_VERSION  # bump (in harness.events) when a field or key changes meaning
MARKER_ROOM = 2048  # bytes kept free under a budget for its history_budget_reached event (at most about 1300)
_LABEL = 64  # characters of the role, rank and thread names of that event: what keeps it inside MARKER_ROOM


@dataclass(frozen=True)
class Event:
    """One thing that happened, in one process, at one time."""

    t_ns: int
    pid: int
    role: str
    rank: str
    thread: str
    kind: str
    data: dict[str, Any] = field(default_factory=dict)
    v: int = SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), default=str)


class Emitter(Protocol):
    """What producers need: ``emit(kind, **data)``."""

    def emit(self, kind: str, /, **data: Any) -> None: ...


class NullRecorder:
    """Records nothing (benchmarks with history off)."""

    def emit(self, kind: str, /, **data: Any) -> None:
        return None


class Recorder:
    """Thread-safe in-process recorder; the single writer of one history.

    ``role`` and ``rank`` label every event it emits (``engine``/``worker``,
    ``pp0/rank1``).  :meth:`wait_for` is how tests synchronise with the system
    under test: it blocks until a matching event exists.
    """

    def __init__(self, role: str = "harness", rank: str = "", *, strict: bool | None = None,
                 budget: int | None = None) -> None:
        self.role = role
        self.rank = rank
        self.strict = strict if strict is not None else envvars.flag(vocabulary.STRICT_ENV)
        self.bad_events: list[str] = []  # strict only: one line per event that does not fit harness.events
        self.budget = artifacts.MAX_HISTORY_BYTES if budget is None else budget  # bytes of JSONL it may store
        self.stored = 0  # bytes of JSONL the stored events take (each line and its newline)
        self.cut: Event | None = None  # the history_budget_reached event, once the budget is reached
        self.dropped = 0  # events not stored since
        self._events: list[Event] = []
        self._cond = threading.Condition()
        self._aborted = False  # abort(): every wait returns at once, as if timed out (an interrupted run)

    def emit(self, kind: str, /, **data: Any) -> None:
        self.add(Event(time.monotonic_ns(), os.getpid(), self.role, self.rank,
                       threading.current_thread().name, kind, data))

    def add(self, ev: Event) -> None:
        """Append an event (this process's, or another's received by this recorder); checked when strict.

        A long request id is stored as its digest (harness.events.compact).  The history holds at most
        ``budget`` bytes of JSONL: the event that would pass it (less the room of the marker) is not stored,
        a ``history_budget_reached`` event is, every wait ends at once (as :meth:`abort`'s) and every later
        event is counted in ``dropped``, not stored.  The run's player ends the run at its next step."""
        if self.cut is not None:  # (a cheap test first: a run past its budget may still send many)
            with self._cond:
                self.dropped += 1
            return
        data = vocabulary.compact(ev.data) if isinstance(ev.data, dict) else ev.data
        if data is not ev.data:
            ev = replace(ev, data=data)
        size = len(ev.to_json()) + 1
        bad = vocabulary.problems(ev.kind, ev.data) if self.strict else []
        with self._cond:
            if self.cut is not None or self.stored + size > self.budget - MARKER_ROOM:
                self._cut_here()
                return
            if bad:
                self.bad_events.append(f"event {ev.kind!r} from {ev.rank or ev.role} (pid {ev.pid}): "
                                       + "; ".join(bad))
            self._events.append(ev)
            self.stored += size
            self._cond.notify_all()

    def _cut_here(self) -> None:
        """Under the lock: one event did not fit the budget; store the marker (once) and end every wait."""
        self.dropped += 1
        if self.cut is None:
            self.cut = marker(self.role, self.rank, self.budget, self.stored)
            self._events.append(self.cut)
            self.stored += len(self.cut.to_json()) + 1
            self._aborted = True
        self._cond.notify_all()

    def events(self, kind: str | None = None) -> list[Event]:
        with self._cond:
            evs = list(self._events)
        return evs if kind is None else [e for e in evs if e.kind == kind]

    def count(self) -> int:
        """How many events are stored: an index to pass as ``wait_for(after=)`` for what happens next."""
        with self._cond:
            return len(self._events)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events()]

    def wait_for(self, match: str | Callable[[Event], bool], timeout: float = 10.0,
                 *, after: int = 0) -> Event | None:
        """The first event (from index ``after``) matching a kind or predicate; None on timeout.  A predicate
        is given each event once, in order (it may count: harness.scenario.player.counting)."""
        pred = (lambda e: e.kind == match) if isinstance(match, str) else match
        found: list[Event] = []
        seen = [after]  # the events before this index did not match: each is looked at once

        def check() -> bool:
            evs = self._events
            for i in range(seen[0], len(evs)):
                if pred(evs[i]):
                    found.append(evs[i])
                    return True
            seen[0] = max(seen[0], len(evs))
            return False

        with self._cond:
            self._cond.wait_for(lambda: check() or self._aborted, timeout)
        return found[0] if found else None

    def wait_until(self, cond: Callable[[list[Event]], bool], timeout: float = 10.0) -> bool:
        """Block until ``cond(events so far)`` holds; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: cond(self._events) or self._aborted, timeout) and cond(self._events)

    def abort(self) -> None:
        """End every wait on this history now, and every later one at once, as a timeout would: the run it
        records is being interrupted (a run played on a thread of its own, interrupted by its caller), so its
        player unwinds instead of waiting."""
        with self._cond:
            self._aborted = True
            self._cond.notify_all()

    def write(self, path: str | os.PathLike[str]) -> int:
        return write_jsonl(path, self.events(), self.budget)


def marker(role: str, rank: str, budget: int, stored: int) -> Event:
    """The ``history_budget_reached`` event of a history cut at ``budget`` bytes after ``stored`` of them; its
    labels are cut so that it always fits in :data:`MARKER_ROOM`."""
    return Event(time.monotonic_ns(), os.getpid(), role[:_LABEL], rank[:_LABEL],
                 threading.current_thread().name[:_LABEL], vocabulary.BUDGET_KIND,
                 {"budget": budget, "stored": stored})


def write_jsonl(path: str | os.PathLike[str], events: Iterable[Event], limit: int | None = None) -> int:
    """Write ``events`` as JSONL, at most ``limit`` bytes (default harness.artifacts.MAX_HISTORY_BYTES, what
    lastcall reads back): a recorder's history fits (its budget is that); of any other list, the events that
    fit and a ``history_budget_reached`` event in the place of the first that does not.  Returns the bytes
    written."""
    limit = artifacts.MAX_HISTORY_BYTES if limit is None else limit
    written = 0
    with open(path, "w", encoding="ascii") as f:  # (to_json escapes every other character)
        for ev in events:
            line = ev.to_json() + "\n"
            if ev.kind != vocabulary.BUDGET_KIND and written + len(line) > limit - MARKER_ROOM:
                line = marker(ev.role, ev.rank, limit, written).to_json() + "\n"
                f.write(line)
                return written + len(line)
            f.write(line)
            written += len(line)
    return written


def read_jsonl(path: str | os.PathLike[str]) -> tuple[list[Event], list[str]]:
    """Events from a JSONL history, and a list of problems (unreadable or torn lines, by number).

    The file is data (harness.artifacts: a regular file of at most MAX_HISTORY_BYTES); each line is
    checked before an event is made of it (harness.eventlines: its fields, types and ranges, and the run's
    span), and an unreadable line is a problem, left out.  An event of an older format (``v``) is read as
    the current one (:func:`harness.events.upgrade`).
    Error handling: :class:`harness.artifacts.ArtifactError` when the file itself cannot be read.
    """
    text = artifacts.read_text(path, artifacts.MAX_HISTORY_BYTES, "history")
    events: list[Event] = []
    lines: list[int] = []
    problems: list[str] = []
    for n, line, last in eventlines.lines_of(text):
        doc, why = eventlines.check_line(line)
        if doc is None:
            problems.append(f"{path}:{n}: {'torn last line' if last else 'unreadable line'}: {why}")
            continue
        v = doc["v"]
        data = doc["data"] if v == SCHEMA_VERSION else vocabulary.upgrade(doc["kind"], doc["data"], v)
        events.append(Event(doc["t_ns"], doc["pid"], doc["role"], doc["rank"], doc["thread"], doc["kind"], data,
                            SCHEMA_VERSION))
        lines.append(n)
    far = eventlines.outside_span([e.t_ns for e in events])
    for i in sorted(far):
        problems.append(f"{path}:{lines[i]}: unreadable line: t_ns {events[i].t_ns} lies more than "
                        f"{eventlines.MAX_SPAN_NS // 10**9} s from the run's other events, longer than a run lasts")
    return [e for i, e in enumerate(events) if i not in far], problems
