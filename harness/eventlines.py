"""The lines of a stored history, checked as data before an event is made of one.

A history.jsonl comes back from a report directory, which anyone may have written
(docs/trust.md).  Each line is one JSON object (harness.artifacts.loads: its depth and
numbers bounded) with exactly the fields of :class:`harness.history.Event`, each of
its type and in its range:

* ``t_ns``: an integer, ``0 <= t_ns < 2**63`` (CLOCK_MONOTONIC nanoseconds);
* ``pid``: an integer, ``0 <= pid < 2**31``;
* ``role``, ``rank``, ``thread``: text of at most :data:`MAX_NAME` characters;
* ``kind``: a name (:data:`KIND`), of a built-in kind or one a target declared;
* ``data``: an object; for a built-in kind, every key harness.events declares for it
  of its declared type (a key it does not declare is kept, a target's own; a required
  key missing is read as absent: a checker that needs it says unknown);
* ``v``: the event format, 1 to :data:`harness.events.FORMAT_VERSION` (absent: 1).

A line that fails is *unreadable*: it is reported by number and left out, and the rest
is judged.  Then the run's span is checked: every event lies within :data:`MAX_SPAN_NS`
of the others (the densest such window of the history is kept; an event outside it is
unreadable), so no value can stretch an axis or a duration past what a run can last.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from harness import events as vocabulary
from harness.artifacts import DataError, loads

__all__ = ["check_line", "lines_of", "outside_span", "FIELDS", "MAX_NAME", "MAX_SPAN_NS", "T_NS_END", "PID_END",
           "KIND"]

T_NS_END = 2**63  # t_ns is below this: a signed 64-bit clock, as CLOCK_MONOTONIC is
PID_END = 2**31  # pids are below this (Linux's pid_max is at most 2**22)
MAX_NAME = 1024  # characters of a role, rank or thread name (a thread named for its test item is ~100)
KIND = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}")  # an event kind's name
# The longest a run can last, first event to last: a scenario's watchdog is at most 1 h (its deadline's
# maximum), stretched at most 100 times (LASTCALL_TIMEOUT_SCALE's maximum), with its engine launches and the
# teardown after it on top; a week is past all of them. An event further from the others is not of this run.
MAX_SPAN_NS = 7 * 24 * 3600 * 10**9
FIELDS = ("t_ns", "pid", "role", "rank", "thread", "kind", "data", "v")


def _int_in(value: Any, end: int) -> bool:
    return type(value) is int and 0 <= value < end


def _problem(doc: Any) -> str | None:
    """What is wrong with one line's object, or None."""
    if not isinstance(doc, dict):
        return f"a JSON {type(doc).__name__}, not an event object"
    extra = [k for k in doc if k not in FIELDS]
    if extra:
        return f"unknown field {str(extra[0])[:40]!r} (an event has {', '.join(FIELDS)})"
    missing = [k for k in FIELDS[:-1] if k not in doc]
    if missing:
        return f"no {missing[0]!r}"
    if not _int_in(doc["t_ns"], T_NS_END):
        return f"t_ns {str(doc['t_ns'])[:40]} is not an integer from 0 to 2**63 - 1"
    if not _int_in(doc["pid"], PID_END):
        return f"pid {str(doc['pid'])[:40]} is not an integer from 0 to 2**31 - 1"
    for name in ("role", "rank", "thread"):
        if not isinstance(doc[name], str) or len(doc[name]) > MAX_NAME:
            return f"{name} is not text of at most {MAX_NAME} characters"
    kind = doc["kind"]
    if not isinstance(kind, str) or not KIND.fullmatch(kind):
        return f"kind {str(kind)[:40]!r} is not an event kind's name"
    v = doc.get("v", 1)
    if not (type(v) is int and 1 <= v <= vocabulary.FORMAT_VERSION):
        return (f"format v {str(v)[:20]} is not one this lastcall reads (1 to {vocabulary.FORMAT_VERSION}; a "
                "newer lastcall wrote it?)")
    data = doc["data"]
    if not isinstance(data, dict):
        return f"data is a JSON {type(data).__name__}, not an object"
    spec = vocabulary.KINDS.get(kind)
    if spec is not None:
        upgraded = vocabulary.upgrade(kind, data, v)
        wrong = [p for p in spec.problems(upgraded) if p.startswith("key ")]  # mistyped; a missing key reads as absent
        if wrong:
            return f"{kind}: {wrong[0]}"
    return None


def check_line(line: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the event's fields, None), or (None, what is wrong) for one line of a history."""
    try:
        doc = loads(line)
    except DataError as exc:
        return None, str(exc)
    why = _problem(doc)
    if why is not None:
        return None, why
    doc.setdefault("v", 1)
    return doc, None


def lines_of(text: str) -> Iterator[tuple[int, str, bool]]:
    """(line number, line, whether it is the last one) of every line of ``text`` that is not blank."""
    lines = text.split("\n")
    end = len(lines) - (1 if lines and not lines[-1] else 0)
    for n, line in enumerate(lines[:end], 1):
        if line.strip():
            yield n, line, n == end


def outside_span(times: list[int], span: int = MAX_SPAN_NS) -> set[int]:
    """The indexes of ``times`` outside the window of length ``span`` that holds the most of them (the
    earliest such window); sorting, then one pass: O(n log n)."""
    if not times:
        return set()
    order = sorted(range(len(times)), key=times.__getitem__)
    best, best_lo, lo = 0, 0, 0
    for hi in range(len(order)):
        while times[order[hi]] - times[order[lo]] > span:
            lo += 1
        if hi - lo + 1 > best:
            best, best_lo = hi - lo + 1, lo
    keep = set(order[best_lo:best_lo + best])
    return {i for i in range(len(times)) if i not in keep}
