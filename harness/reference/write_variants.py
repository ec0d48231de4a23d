"""Planted bugs of the worker listener's reply write path: what the socket does not take at once waits on its
connection (harness.reference.conn) and is written as its client reads.  Each is a subclass overriding one
seam of harness/reference/listener.py (the reference is never edited).  Registered in
harness.reference.variants.VARIANTS.
"""

from __future__ import annotations

import select

from harness.reference import wire
from harness.reference.listener import WorkerListener, _Conn, _State

__all__ = ["BlockingWrite", "ShortWriteLost", "PartialFlushAbandoned", "DeadReaderSpins", "ReplyLeavesWriting",
           "WRITE_TIMEOUT"]

WRITE_TIMEOUT = 5.0  # seconds blocking_write's reply write may block (the reference's old bound)


class BlockingWrite(WorkerListener):
    """The reference as it once was: a short write falls back to a blocking write bounded by WRITE_TIMEOUT, so a
    client that does not read its reply holds the serving thread, and every other client waits."""

    def _send(self, conn: _Conn, reply: wire.Reply) -> None:
        try:
            conn.sock.settimeout(WRITE_TIMEOUT)
            conn.sock.sendall(wire.encode_reply(reply))
            conn.sock.setblocking(False)
        except OSError as exc:
            self._reply_failed(conn, exc)


class ShortWriteLost(WorkerListener):
    """One send() per reply: what the socket did not take at once is dropped, so a reply larger than the
    socket buffer arrives cut short and its client waits for the rest."""

    def _send(self, conn: _Conn, reply: wire.Reply) -> None:
        try:
            conn.sock.send(wire.encode_reply(reply))
        except BlockingIOError:
            pass
        except OSError as exc:
            self._reply_failed(conn, exc)


class PartialFlushAbandoned(WorkerListener):
    """WorkerListener._on_writable (the ``return`` after a flush that did not finish removed): once its client
    has read part of a pending reply, the listener goes back to watching the connection for reading, and the
    rest waits until the client sends again or a stop delivers it; a client that only reads waits for the end
    of its reply until it gives up.  (The reference's _on_writable with that return removed.)"""

    def _on_writable(self, conn: _Conn) -> None:
        try:
            conn.flush()  # the mutant: its False (more is pending) no longer returns
        except OSError as exc:
            self._reply_failed(conn, exc)
            return
        self._ep.modify(conn.sock.fileno(), select.EPOLLIN)
        with self._lock:
            if conn.state is _State.WRITING:
                conn.state = _State.IDLE


class DeadReaderSpins(WorkerListener):
    """WorkerListener._on_writable (the ``self._reply_failed(conn, exc)`` of a failed flush removed): a client
    gone while its reply was pending is neither recorded nor closed, so its connection stays in the epoll set
    for writing, reported at once every turn (the peer is gone), and the serving thread spins on a CPU until a
    stop delivers what is left (whose write fails, and closes it).  (The reference's _on_writable with that
    call removed.)"""

    def _on_writable(self, conn: _Conn) -> None:
        try:
            if not conn.flush():
                return
        except OSError:
            return  # the mutant: no _reply_failed
        self._ep.modify(conn.sock.fileno(), select.EPOLLIN)
        with self._lock:
            if conn.state is _State.WRITING:
                conn.state = _State.IDLE


class ReplyLeavesWriting(WorkerListener):
    """WorkerListener._on_writable (``conn.state = _State.IDLE`` once the last of a reply is written removed): a
    connection whose reply took more than one write stays WRITING while it is idle, so a stop does not count it
    among the idle connections it shuts down at once, and its client is told only when the serving thread
    exits.  (The reference's _on_writable with that assignment removed.)"""

    def _on_writable(self, conn: _Conn) -> None:
        try:
            if not conn.flush():
                return
        except OSError as exc:
            self._reply_failed(conn, exc)
            return
        self._ep.modify(conn.sock.fileno(), select.EPOLLIN)  # the mutant: the state stays WRITING
