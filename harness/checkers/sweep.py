"""What a checker keeps as it goes through one listener's (or one process's) events in time order, asked at
times that only grow: each event is taken in once, where asking afresh at each stop, stop return or exit hook
would scan the history again (quadratic in a forged history of many).  Each answers exactly what a fresh scan of
the events up to the time asked would.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator

from harness.checkers.index import Line
from harness.history import Event

__all__ = ["Open", "Stopped", "Busy"]


class Open:
    """The events begun and not yet ended as of a time, by ``key`` (each key's last beginning, in the order a fresh
    scan of the line would leave them), kept as the line's events go by: each later time goes on from the last."""

    def __init__(self, line: Line, begins: str, key: Callable[[Event], Hashable]) -> None:
        self.line, self.at, self.begins, self.key = line, 0, begins, key
        self.open: dict[Hashable, Event] = {}

    def upto(self, t: int) -> dict[Hashable, Event]:
        """Those open once every event at or before ``t`` has happened (``t`` no earlier than the last asked)."""
        upto = self.line.upto(t)
        for e in self.line.events[self.at:upto]:
            if e.kind == self.begins:
                self.open[self.key(e)] = e
            else:
                self.open.pop(self.key(e), None)
        self.at = max(self.at, upto)
        return self.open


class Stopped:
    """A process's listeners as its allocator's teardowns see them, the teardowns taken in time order: each
    label's last stop_returned before, which failed, and how many of the labels it started have one."""

    def __init__(self, returns: Line, started: set[str]) -> None:
        self.returns, self.at = returns, 0
        self.started, self.seen = started, 0
        self.last: dict[str, Event] = {}
        self.place: dict[str, int] = {}  # label -> its place in last's order
        self.failing: set[str] = set()

    def unstopped_at(self, t: int) -> bool:
        """Whether, at a teardown at ``t``, a listener's last stop failed or a started one has none."""
        upto = self.returns.before(t)
        for e in self.returns.events[self.at:upto]:
            label = str(e.data.get("listener"))
            if label not in self.last:
                self.place[label] = len(self.place)
                self.seen += label in self.started
            self.last[label] = e
            if e.data.get("ok"):
                self.failing.discard(label)
            else:
                self.failing.add(label)
        self.at = max(self.at, upto)
        return bool(self.failing) or self.seen < len(self.started)

    def failed(self) -> Iterator[Event]:
        """The last stop_returned of each listener whose last stop failed, in last's order."""
        return (self.last[label] for label in sorted(self.failing, key=self.place.__getitem__))


class Busy:
    """A process's handlers inside the backend, per (listener label, connection), as its dispatches go by."""

    def __init__(self, line: Line) -> None:
        self.line, self.at = line, 0
        self.inside: dict[tuple[str, object], int] = {}  # dispatch_started less dispatch_finished
        self.open: dict[str, int] = {}  # label -> its connections with a handler inside
        self.labels = 0  # the labels with one

    def upto(self, t: int) -> int:
        """How many labels have a handler inside once every dispatch at or before ``t`` has happened."""
        upto = self.line.upto(t)
        for e in self.line.events[self.at:upto]:
            label = str(e.data.get("listener"))
            key = (label, e.data.get("conn"))
            was = self.inside.get(key, 0)
            self.inside[key] = now = was + (1 if e.kind == "dispatch_started" else -1)
            if (now > 0) != (was > 0):  # the connection's handler went in, or came out
                step = 1 if now > 0 else -1
                self.open[label] = self.open.get(label, 0) + step
                if self.open[label] == (1 if step > 0 else 0):  # the label's first went in, or its last came out
                    self.labels += step
        self.at = max(self.at, upto)
        return self.labels
