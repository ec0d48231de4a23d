"""One accepted connection of the reference listener: its state, its frame reader and its unsent reply bytes.

A reply is written without ever blocking the serving thread: :meth:`Conn.write` sends what the socket takes
now and keeps the rest on the connection (``out``); the listener then waits for the socket to be writable
(EPOLLOUT, in the same epoll set) and calls :meth:`Conn.flush` until nothing is left.  A client that does not
read its reply therefore stalls only its own connection; while bytes are left the connection is not read
(its client cannot pile up replies it does not take).
"""

from __future__ import annotations

import os
import select
import socket
from collections import deque
from collections.abc import Callable

from harness.reference import wire

__all__ = ["State", "Conn", "deliver", "drain_pipe"]


class State:
    """A connection's state.  Plain string constants, not an Enum: an Enum member lookup costs about
    five times a class attribute's, and the request path and stop() test states per connection."""

    IDLE = "idle"  # no whole frame waits: between frames or in the middle of one (a stop treats both alike)
    QUEUED = "queued"  # a whole frame waits for the backend
    DISPATCHING = "dispatching"  # inside the backend call
    WRITING = "writing"  # answered, but part of a reply waits for its client to read (Conn.out)
    CANCELLED = "cancelled"  # shut down by stop(); only closing is left


class Conn:
    __slots__ = ("bodies", "cid", "out", "reader", "sock", "state")

    def __init__(self, sock: socket.socket, cid: int, max_frame: int) -> None:
        self.sock = sock
        self.cid = cid  # connection number, unique per listener: names it in the history
        self.reader = wire.FrameReader(max_frame)
        self.state = State.IDLE
        self.bodies: deque[bytes] = deque()  # completed frames not yet answered
        self.out = bytearray()  # reply bytes the socket has not taken yet (empty: nothing pending)

    def write(self, data: bytes) -> bool:
        """Send ``data`` after what is pending, as far as the socket takes it now; keep the rest.

        Returns: True when nothing is left to send.  Error handling: OSError when the peer is gone.
        """
        if self.out:
            self.out += data
            return self.flush()
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        if sent == len(data):
            return True
        self.out += memoryview(data)[sent:]
        return False

    def flush(self) -> bool:
        """Send what is pending, as far as the socket takes it now.

        Returns: True when nothing is left.  Error handling: OSError when the peer is gone.
        """
        while self.out:
            try:
                sent = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                return False
            del self.out[:sent]  # cheap: a bytearray drops its head by moving its start
        return True


def deliver(ep: select.epoll, writers: dict[int, Conn], given_up: Callable[[], bool], woken: Callable[[], None],
            failed: Callable[[Conn, OSError], None]) -> list[Conn]:
    """Write the pending bytes of ``writers`` (by fileno, registered for EPOLLOUT in ``ep``; any other fd in
    ``ep`` is the wake-up pipe, drained by ``woken``) until all are written or ``given_up()``.

    Returns: the connections left with bytes unwritten.  Error handling: a connection whose peer is gone is
        passed to ``failed`` (which closes it) and counts as done.
    """
    while writers and not given_up():
        for fd, _ in ep.poll():
            conn = writers.get(fd)
            if conn is None:
                woken()
                continue
            try:
                done = conn.flush()
            except OSError as exc:
                failed(conn, exc)
                done = True
            if done:
                del writers[fd]
                if conn.sock.fileno() != -1:
                    ep.unregister(fd)
    return list(writers.values())


def drain_pipe(fd: int) -> None:
    """Read the wake-up pipe empty."""
    try:
        while os.read(fd, 512):
            pass
    except OSError:  # empty (EAGAIN), or closed under us by a teardown: either way, woken
        pass
