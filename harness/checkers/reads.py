"""Which reads in progress at each stop were not cancelled in time: reads_cancelled's question, per stop.

At a stop at ``t`` a listener's *live* connections are those its events up to ``t`` left reading (accepted, a
frame begun, an answer sent on a kept-alive connection) and not ended (a frame completed, the connection
closed); each must be cancelled (named in a ``reads_cancelled``, or closed) from ``t`` to ``t + within``.

Asking that afresh at each stop costs the history's length each time, and even walking each stop's live
connections costs their number: a forged history keeps thousands of connections live across thousands of
restarts, each cancelled by one close late enough to fall in every stop's window.  So each listener's stops are
walked in time order, its live connections kept as the events go by, and each connection holds its verdict
until it can change: *cancelled* while its next cancel time ``c`` is not before the stop (``t <= c <= t +
within`` for the later stops too, until one begins after ``c``), *not cancelled* while that next cancel time is
after the stop's deadline (until a deadline reaches it).  A connection is looked at again only when one of its
cancel times is passed or reached: the work is O((events + conns named) log).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Hashable, Iterable, Iterator

from harness.checkers.index import Line, frozen
from harness.history import Event

__all__ = ["Listener", "ADDS", "ENDS", "CANCELS"]

ADDS = ("accepted", "frame_started", "dispatch_finished", "dispatch_refused")  # reading, or idle and kept alive
ENDS = ("frame_completed", "connection_closed")
CANCELS = ("reads_cancelled", "connection_closed")


def cancel_times(line: Line) -> dict[Hashable, list[int]]:
    """Each connection's cancel times, in order: the listener's reads_cancelled naming it, its closes (by the
    frozen connection: a reads_cancelled's ``conns`` may name anything)."""
    out: dict[Hashable, list[int]] = {}
    for e in line.events:
        conns = e.data.get("conns", ()) if e.kind == "reads_cancelled" else (e.data.get("conn"),)
        for conn in conns if isinstance(conns, Iterable) else ():
            out.setdefault(frozen(conn), []).append(e.t_ns)
    return out


class Listener:
    """One listener's live connections as its stops see them, the stops taken in time order."""

    def __init__(self, changes: Line, cancels: Line, within_ns: int) -> None:
        self.changes, self.at = changes, 0
        self.cancels = cancel_times(cancels)
        self.within_ns = within_ns
        self.live: dict[object, Event] = {}  # conn -> its last event, in the order a fresh scan would build
        self.place: dict[object, int] = {}  # conn -> when it (last) joined live: its place in live's order
        self.joined = 0
        self.fresh: dict[object, None] = {}  # joined since the last stop: not yet judged
        self.bad: set[object] = set()  # live and not cancelled at the last stop
        self.token: dict[object, int] = {}  # conn -> the tick of its one current heap entry
        self.tick = 0
        self.held: list[tuple[int, int, object]] = []  # cancelled: (next cancel time, tick, conn), until passed
        self.waits: list[tuple[int, int, object]] = []  # not cancelled: (next cancel time, tick, conn), until reached

    def stop_at(self, t: int) -> tuple[int, set[object]]:
        """(how many connections are live, those not cancelled) at a stop at ``t``, no earlier than the last."""
        self._advance(t)
        deadline = t + self.within_ns
        for conn in self.fresh:
            self._judge(conn, t, deadline)
        self.fresh.clear()
        while self.held and self.held[0][0] < t:  # the cancel that held it is passed: its next one?
            self._again(self.held, t, deadline)
        while self.waits and self.waits[0][0] <= deadline:  # its next cancel is now within a deadline
            self._again(self.waits, t, deadline)
        return len(self.live), self.bad

    def in_order(self, conns: set[object]) -> Iterator[Event]:
        """The live events of ``conns`` in live's order."""
        return (self.live[c] for c in sorted(conns, key=self.place.__getitem__))

    def _advance(self, t: int) -> None:
        events, upto = self.changes.events, self.changes.upto(t)
        for e in events[self.at:upto]:
            conn = e.data.get("conn")
            if e.kind in ADDS:
                if conn not in self.live:
                    self.place[conn], self.joined = self.joined, self.joined + 1
                    self.fresh[conn] = None
                    self.token.pop(conn, None)
                self.live[conn] = e
            elif conn in self.live:
                del self.live[conn]
                self.fresh.pop(conn, None)
                self.bad.discard(conn)
                self.token.pop(conn, None)
                self.place.pop(conn, None)
        self.at = max(self.at, upto)

    def _again(self, heap: list[tuple[int, int, object]], t: int, deadline: int) -> None:
        _, tick, conn = heapq.heappop(heap)
        if self.token.get(conn) == tick:  # else: left live, or judged again since
            self._judge(conn, t, deadline)

    def _judge(self, conn: object, t: int, deadline: int) -> None:
        times = self.cancels.get(frozen(conn), [])
        i = bisect_left(times, t)
        nxt = times[i] if i < len(times) else None
        self.tick += 1
        self.token[conn] = self.tick
        if nxt is not None and nxt <= deadline:
            self.bad.discard(conn)
            heapq.heappush(self.held, (nxt, self.tick, conn))
        else:
            self.bad.add(conn)
            if nxt is not None:
                heapq.heappush(self.waits, (nxt, self.tick, conn))
