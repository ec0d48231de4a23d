"""What checkers look up in a run: its events per listener and per process, in time order, found by bisection.

Asking, for each stop (exit hook, stop return), which events of its listener fall in a window by scanning the
history is quadratic in a history of many stops, which anyone may write and hand to ``lastcall report``.  These
indexes are built once per run record (:meth:`RunRecord.derived`, shared by every checker judging it) in time
order, a stable sort as ``run.ordered``: events of one time keep the history's order, so "the first such event at
or after t" is the event a scan of ``run.ordered`` finds first.
"""

from __future__ import annotations

import typing
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from harness.checkers.base import MAX_COLLECTED, RunRecord, key_of
from harness.history import Event

__all__ = ["Key", "Line", "EMPTY", "FOREVER", "in_order", "line", "by_key", "by_pid", "stops", "hook_end", "frozen",
           "first_by", "Left", "Collected", "CAPPED"]

Key = tuple[int, str]  # a listener: (pid, label), as key_of names it
FOREVER = 1 << 62  # the end of a window that nothing ends
CAPPED = (f"evidence collected up to {MAX_COLLECTED} events, the verdict certain: the history holds more of "
          "the same")


@dataclass(frozen=True)
class Line:
    """Events in time order and their times: the events of a window are a slice found by bisection."""

    events: list[Event] = field(default_factory=list)
    times: list[int] = field(default_factory=list)

    def first_from(self, t: int) -> Event | None:
        """The first event at or after ``t``."""
        i = bisect_left(self.times, t)
        return self.events[i] if i < len(self.events) else None

    def first_after(self, t: int) -> Event | None:
        """The first event strictly after ``t``."""
        i = bisect_right(self.times, t)
        return self.events[i] if i < len(self.events) else None

    def between(self, lo: int, hi: int, *, after: bool = False, before: bool = False) -> tuple[int, int]:
        """The slice (start, stop) of the events from ``lo`` to ``hi``, both included unless ``after`` (strictly
        after lo) or ``before`` (strictly before hi)."""
        start = (bisect_right if after else bisect_left)(self.times, lo)
        stop = (bisect_left if before else bisect_right)(self.times, hi)
        return start, max(start, stop)

    def upto(self, t: int) -> int:
        """How many events lie at or before ``t``."""
        return bisect_right(self.times, t)

    def before(self, t: int) -> int:
        """How many events lie strictly before ``t``."""
        return bisect_left(self.times, t)


EMPTY = Line()


def _lines(run: RunRecord, name: str, group: Callable[[Event], Hashable], kinds: tuple[str, ...] | None,
           keep: Callable[[Event], bool] | None) -> dict[Any, Line]:
    def make() -> dict[Any, Line]:
        out: dict[Any, Line] = {}
        for e in run.ordered if kinds is None else sorted(run.of(*kinds), key=lambda x: x.t_ns):
            if keep is None or keep(e):
                line = out.setdefault(group(e), Line())
                line.events.append(e)
                line.times.append(e.t_ns)
        return out

    return run.derived((name, kinds, keep), make)


def in_order(run: RunRecord, *kinds: str) -> list[Event]:
    """The events of these kinds in time order (as ``run.ordered`` holds them)."""
    return run.derived(("in_order", kinds), lambda: sorted(run.of(*kinds), key=lambda e: e.t_ns))


def line(run: RunRecord, *kinds: str) -> Line:
    """The events of these kinds in time order, every listener's and process's together."""
    def make() -> Line:
        events = in_order(run, *kinds)
        return Line(events, [e.t_ns for e in events])

    return run.derived(("line", kinds), make)


def by_key(run: RunRecord, *kinds: str, keep: Callable[[Event], bool] | None = None) -> dict[Key, Line]:
    """Each listener's events (of these kinds; all when none is given; those ``keep`` holds), in time order.

    ``keep`` is part of the index's name: pass a module-level function, not a new lambda at each call."""
    return _lines(run, "by_key", key_of, kinds or None, keep)


def by_pid(run: RunRecord, *kinds: str, keep: Callable[[Event], bool] | None = None) -> dict[int, Line]:
    """Each process's events (of these kinds; those ``keep`` holds), in time order."""
    return _lines(run, "by_pid", _pid, kinds or None, keep)


def _pid(e: Event) -> int:
    return e.pid


def stops(run: RunRecord) -> list[tuple[Event, int]]:
    """Each stop (the first stop_started of a listener's life) with the end of its window: the next
    listener_started on the same key (a restart reuses the label in the same process), else forever.  One pass:
    a listener's stop waits for its next listener_started, which both ends the window and begins a new life."""
    def make() -> list[tuple[Event, int]]:
        out: list[tuple[Event, int]] = []
        waiting: dict[Key, int] = {}  # key -> the index in out of its stop, until its next listener_started
        for e in run.ordered:
            if e.kind == "listener_started":
                i = waiting.pop(key_of(e), None)
                if i is not None:
                    out[i] = (out[i][0], e.t_ns)
            elif e.kind == "stop_started" and key_of(e) not in waiting:
                waiting[key_of(e)] = len(out)
                out.append((e, FOREVER))
        return out

    return list(run.derived("stops", make))


def hook_end(run: RunRecord, start: Event) -> Event | None:
    """The ``exit_hook_finished`` of the exit hook that ``start`` began, if it finished: its process's first at or
    after it."""
    return by_pid(run, "exit_hook_finished").get(start.pid, EMPTY).first_from(start.t_ns)


_LIST, _OBJECT = object(), object()  # tags no value of a history can be: a frozen list is no tuple it could hold


def frozen(value: Any) -> Hashable:
    """``value`` as a key of a dict, equal to another's exactly where the values are equal (``==``): a list as its
    frozen items, an object as the frozen set of its frozen items, anything else as itself.  A lookup by it finds
    what a scan comparing each value would, where the value is one a history holds (JSON: no NaN)."""
    if isinstance(value, list):
        return (_LIST, tuple(frozen(v) for v in value))
    if isinstance(value, dict):
        return (_OBJECT, frozenset((k, frozen(v)) for k, v in value.items()))
    return typing.cast(Hashable, value)


def first_by(events: Iterable[Event], key: Callable[[Event], Any]) -> dict[Hashable, Event]:
    """The first of ``events`` (in their order) for each frozen ``key``."""
    out: dict[Hashable, Event] = {}
    for e in events:
        out.setdefault(frozen(key(e)), e)
    return out


class Left:
    """Places in a list of events (its indexes), each taken at most once, asked for the first place left whose event
    is at or after a time: a tree of the least place over the events sorted by time, each ask and take log n."""

    def __init__(self, places: list[int], times: list[int]) -> None:
        order = sorted(range(len(places)), key=times.__getitem__)
        self.times = [times[i] for i in order]
        self.size = 1 << max(0, len(order) - 1).bit_length()
        self.tree = [_NONE] * (2 * self.size)  # a node: the least place left under it
        self.leaf: dict[int, int] = {}
        for at, i in enumerate(order):
            self.tree[self.size + at] = places[i]
            self.leaf[places[i]] = self.size + at
        for node in range(self.size - 1, 0, -1):
            self.tree[node] = min(self.tree[2 * node], self.tree[2 * node + 1])

    def first_from(self, t: int) -> int | None:
        """The least place left whose event is at or after ``t``."""
        lo, hi, best = bisect_left(self.times, t) + self.size, 2 * self.size, _NONE
        while lo < hi:
            if lo & 1:
                best, lo = min(best, self.tree[lo]), lo + 1
            if hi & 1:
                hi -= 1
                best = min(best, self.tree[hi])
            lo, hi = lo >> 1, hi >> 1
        return None if best == _NONE else best

    def take(self, place: int) -> None:
        node = self.leaf[place]
        self.tree[node] = _NONE
        while node > 1:
            node >>= 1
            self.tree[node] = min(self.tree[2 * node], self.tree[2 * node + 1])


_NONE = 1 << 62  # no place


class Collected:
    """Evidence events in the order found, at most MAX_COLLECTED of them; ``capped`` once more were offered."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.capped = False

    def add(self, evs: Iterable[Event]) -> bool:
        """Append ``evs`` while there is room; False once the evidence is capped (look no further)."""
        if self.capped:
            return False
        room = MAX_COLLECTED - len(self.events)
        taken = list(islice(evs, room + 1))
        if len(taken) > room:
            taken, self.capped = taken[:room], True
        self.events += taken
        return not self.capped

    @property
    def notes(self) -> tuple[str, ...]:
        return (CAPPED,) if self.capped else ()
