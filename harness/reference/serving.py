"""The reference worker listener's serving thread: its request path, from an accepted connection to a closed one.

:class:`ServingLoop` is the base of :class:`harness.reference.listener.WorkerListener`, which holds the listener's
configuration, its state (set in its ``__init__``), its start and its stop (that module's docstring says how the
two sides keep the stop contract).  Here, run by the serving thread only:

* ``_serve``: the epoll loop over the server socket, every accepted connection and the self-pipe a stop wakes
  it through; after the loop, the answers of what is left (``shutting_down``), the replies not read yet, and
  the close of every connection.
* accept (the peer uid checked, the accept decision under the listener lock), non-blocking reads fed to each
  connection's :class:`~harness.reference.wire.FrameReader` (the frame-completion decision under the lock),
  the dispatch pass (the dispatch decision under the lock, the backend called on this thread), and writes
  that never block (what the socket does not take waits on its connection, harness.reference.conn).
* the pause of accepting after a failed accept.

Planted-bug variants subclass WorkerListener and override these methods as they override its seams
(harness/reference/variants.py lists them); the dispatch decision (``_may_dispatch``) is WorkerListener's
seam, the one method of the listener this path calls besides ``label``.
"""

from __future__ import annotations

import errno
import select
import socket
import struct
import threading
import time
from collections import deque
from typing import Protocol

from harness import failpoints
from harness.errors import BackendError, WireError
from harness.history import Emitter
from harness.osthread import name_os_thread
from harness.reference import wire
from harness.reference.conn import Conn, State, deliver, drain_pipe

__all__ = ["Backend", "ServingConfig", "ServingLoop", "RECV_CHUNK"]

_Conn = Conn  # the names the listener's code (and its planted-bug variants) calls these classes by
_State = State
RECV_CHUNK = 65536  # bytes read per readable event
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class Backend(Protocol):
    """What a listener dispatches into: one request in, one reply out.

    Raise a :class:`~harness.errors.BackendError` to send an error reply with its
    ``error_type`` and ``phase``; anything else becomes ``operation_failed``.
    """

    def handle(self, req: wire.Request) -> wire.Reply: ...


class ServingConfig(Protocol):
    """What the request path reads of its listener's configuration (harness.reference.listener.ListenerConfig)."""

    @property
    def max_frame(self) -> int: ...

    @property
    def check_peer_uid(self) -> bool: ...


class ServingLoop:
    """The serving thread's part of a worker listener; only :class:`~harness.reference.listener.WorkerListener`
    makes one whole (it sets every attribute declared here and defines the methods below that raise)."""

    backend: Backend
    rank: int
    pp: int
    config: ServingConfig
    rec: Emitter
    _on: bool  # build request-path events only when recorded
    _uid: int
    _ep: select.epoll  # set by the serving thread
    _lock: threading.Lock  # guards _stopping, _conns and every dispatch decision
    _stopping: bool
    _in_poll: bool  # the serving thread waits in epoll (nothing in hand)
    _writes_only: bool  # stopping, the thread only delivers unread replies
    _give_up: bool  # a stop whose drain timed out gave up on the unread replies
    _conns: dict[int, _Conn]  # tracked connections by fileno
    _next_cid: int
    _ready: deque[_Conn]  # connections with a whole frame waiting, FIFO
    _server: socket.socket | None
    _wake_r: int
    _exited: threading.Event  # set by the serving thread as its very last step

    # ------------------------------------------------- WorkerListener's, used here
    @property
    def label(self) -> str:
        """The listener's name in events."""
        raise NotImplementedError

    def _may_dispatch(self) -> bool:
        """Under the lock: may a request be dispatched now? (a variant seam of WorkerListener)"""
        raise NotImplementedError

    # ----------------------------------------------------------- serving side
    # The request path.  Events are built only when a recorder listens (``self._on``).
    def _serve(self, started: threading.Event) -> None:
        assert self._server is not None
        name_os_thread(f"lc-listen-{self.pp}.{self.rank}")
        ep = select.epoll()
        server_fd = self._server.fileno()
        ep.register(server_fd, select.EPOLLIN)
        ep.register(self._wake_r, select.EPOLLIN)
        self._ep = ep
        started.set()
        try:
            while not self._stopping:
                self._in_poll = True
                ready = ep.poll(self._poll_timeout() if self._accept_delay else -1)
                self._in_poll = False
                for fd, _ in ready:
                    if fd == server_fd:
                        self._accept()
                    elif fd == self._wake_r:
                        self._drain_pipe()
                    else:
                        conn = self._conns.get(fd)
                        if conn is None or conn.state is _State.CANCELLED:
                            continue
                        if conn.out:  # registered for EPOLLOUT only while part of a reply waits
                            self._on_writable(conn)
                        else:
                            self._on_readable(conn)
                if self._ready:
                    self._dispatch_ready()
            self._dispatch_ready()  # everything left answers shutting_down
            self._deliver_unread(ep, server_fd)
        except BaseException as exc:
            self.rec.emit("thread_crashed", listener=self.label, error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            ep.close()
            with self._lock:
                left = list(self._conns.values())
                self._conns.clear()
            for conn in left:  # one pass: no per-connection unregister, lock or read
                conn.sock.close()
                if self._on:
                    self.rec.emit("connection_closed", listener=self.label, conn=conn.cid, why="listener stopping")
            self.rec.emit("thread_exited", listener=self.label)
            self._exited.set()

    def _drain_pipe(self) -> None:
        drain_pipe(self._wake_r)

    def _accept(self) -> None:
        """Accept one pending connection (epoll is level-triggered: more pending ones wake it again).

        The raw accept and a plain socket object skip the enum conversions of socket.accept().
        """
        assert self._server is not None
        try:
            fd, _addr = self._server._accept()  # type: ignore[attr-defined]
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # EMFILE and friends: leave it pending, pause accepting, keep serving the rest
            self._accept_failed(exc)
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, fd)
        failpoints.hit("listener.accepted")
        if self.config.check_peer_uid:
            pid, uid, _gid = _PEERCRED.unpack(
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
            if uid != self._uid:
                self.rec.emit("peer_rejected", listener=self.label, peer_pid=pid, peer_uid=uid)
                sock.close()
                return
        sock.setblocking(False)
        with self._lock:  # the accept decision
            self._next_cid += 1
            cid = self._next_cid
            if self._stopping:
                self.rec.emit("accepted_after_stop", listener=self.label, conn=cid)
                sock.close()
                return
            failpoints.hit("listener.accept_decided")  # a racing point (harness.scenario.stress)
            conn = _Conn(sock, cid, self.config.max_frame)
            self._conns[sock.fileno()] = conn
            if self._on:
                self.rec.emit("accepted", listener=self.label, conn=cid)
        self._ep.register(sock.fileno(), select.EPOLLIN)
        self._on_readable(conn)  # a client's frame has usually arrived with its connect

    def _on_readable(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(RECV_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(conn, why=f"read error: {exc}")
            return
        if not data:
            why = "cancelled by stop" if conn.state is _State.CANCELLED else "peer closed"
            if conn.reader.in_frame:
                why += " mid-frame"
            self._close(conn, why=why)
            return
        was_in_frame = conn.reader.in_frame
        try:
            bodies = conn.reader.feed(data)
        except WireError as exc:  # a bad length: framing is lost; answer if we can, then close
            self.rec.emit("bad_frame", listener=self.label, conn=conn.cid, error=str(exc))
            self._send(conn, wire.Reply(status="error", error_type="bad_request", message=str(exc)))
            self._close(conn, why="framing lost")
            return
        if not was_in_frame:
            if self._on:
                self.rec.emit("frame_started", listener=self.label, conn=conn.cid)
            failpoints.hit("listener.frame_started")
        if not bodies:  # a frame begun stays IDLE: the stop cancels a connection between frames and one mid-frame alike
            failpoints.hit("listener.frame_read")
            return
        with self._lock:  # the frame-completion decision
            if self._on:
                for _ in bodies:
                    self.rec.emit("frame_completed", listener=self.label, conn=conn.cid, after_stop=self._stopping)
            if conn.state is _State.CANCELLED:
                return  # stop shut this one down: its frame is never dispatched
            failpoints.hit("listener.frame_completing")  # a racing point (harness.scenario.stress)
            conn.bodies.extend(bodies)
            if conn.state is not _State.QUEUED:
                conn.state = _State.QUEUED
                self._ready.append(conn)
        failpoints.hit("listener.frame_read")

    def _dispatch_ready(self) -> None:
        while self._ready:
            conn = self._ready.popleft()
            while conn.bodies and conn.sock.fileno() != -1:
                body = conn.bodies.popleft()
                try:
                    req = wire.decode_request(body)
                except WireError as exc:
                    self._on_bad_request(conn, exc)
                    continue
                failpoints.hit("listener.before_dispatch")
                with self._lock:  # the dispatch decision
                    go = self._may_dispatch()
                    failpoints.hit("listener.dispatch_decided")  # a racing point (harness.scenario.stress)
                    if go:
                        conn.state = _State.DISPATCHING
                        if self._on:
                            self.rec.emit("dispatch_started", listener=self.label, conn=conn.cid, cmd=req.cmd,
                                          id=req.id)
                    else:
                        self.rec.emit("dispatch_refused", listener=self.label, conn=conn.cid, cmd=req.cmd, id=req.id)
                if go:
                    reply = self._call_backend(req)
                    if self._on:
                        self.rec.emit("dispatch_finished", listener=self.label, conn=conn.cid, cmd=req.cmd,
                                      status=reply.status)
                else:
                    reply = wire.Reply(status="error", id=req.id, error_type="shutting_down",
                                       message=f"{self.label} is shutting down; request not dispatched")
                self._send(conn, reply)
            if conn.sock.fileno() != -1:
                with self._lock:
                    if conn.state is _State.QUEUED or conn.state is _State.DISPATCHING:
                        conn.state = _State.WRITING if conn.out else _State.IDLE
                    if self._stopping and conn.state is _State.IDLE:
                        # answered, and no further read may be dispatched: cancel it now
                        conn.state = _State.CANCELLED
                        try:
                            conn.sock.shutdown(socket.SHUT_RD)
                        except OSError:
                            pass
            failpoints.hit("listener.answered")  # this connection's pass is over, its post-dispatch cancel done

    def _call_backend(self, req: wire.Request) -> wire.Reply:
        try:
            failpoints.hit(f"backend.{req.cmd}")
            reply = self.backend.handle(req)
            reply.id = req.id
            return reply
        except BackendError as exc:
            return wire.Reply(status="error", id=req.id, error_type=exc.error_type,  # type: ignore[arg-type]
                              phase=exc.phase, message=str(exc))
        except Exception as exc:
            return wire.Reply(status="error", id=req.id, error_type="operation_failed",
                              message=f"{type(exc).__name__}: {exc}")

    def _on_bad_request(self, conn: _Conn, exc: WireError) -> None:  # a variant seam
        """A well-framed body that does not decode: answer bad_request, serve on."""
        self.rec.emit("bad_request", listener=self.label, conn=conn.cid, error=str(exc))
        self._send(conn, wire.Reply(status="error", error_type="bad_request", message=str(exc)))

    def _send(self, conn: _Conn, reply: wire.Reply) -> None:
        """Write a reply without blocking: what the socket does not take now waits on the connection, which
        is then watched for EPOLLOUT instead of EPOLLIN (harness.reference.conn); a vanished peer only loses
        its own connection."""
        try:
            if conn.write(wire.encode_reply(reply)):
                return
        except OSError as exc:
            self._reply_failed(conn, exc)
            return
        self._ep.modify(conn.sock.fileno(), select.EPOLLOUT)

    def _on_writable(self, conn: _Conn) -> None:
        """The client read some of its reply: write more; once all is written, read the connection again."""
        try:
            if not conn.flush():
                return
        except OSError as exc:
            self._reply_failed(conn, exc)
            return
        self._ep.modify(conn.sock.fileno(), select.EPOLLIN)
        with self._lock:
            if conn.state is _State.WRITING:
                conn.state = _State.IDLE

    def _deliver_unread(self, ep: select.epoll, server_fd: int) -> None:
        """Stopping, every request answered: write what clients have not read yet, until they read it or a
        stop whose drain timed out gives up on them (their connections are closed)."""
        writers = {fd: c for fd, c in self._conns.items() if c.out}  # only this thread changes _conns
        if not writers:
            return
        for fd in [server_fd, *(fd for fd in self._conns if fd not in writers)]:
            ep.unregister(fd)  # nothing more is accepted or read; the rest are closed at exit
        self._writes_only = True
        left = deliver(ep, writers, lambda: self._give_up, self._drain_pipe, self._reply_failed)
        for conn in left:
            self._close(conn, why="reply not read before the drain timeout")

    def _reply_failed(self, conn: _Conn, exc: OSError) -> None:
        self.rec.emit("reply_failed", listener=self.label, conn=conn.cid, error=str(exc))
        self._close(conn, why=f"reply failed: {exc}")

    def _close(self, conn: _Conn, *, why: str) -> None:
        if conn.sock.fileno() == -1:
            return  # already closed (a failed reply, then the close of a lost framing)
        with self._lock:
            self._conns.pop(conn.sock.fileno(), None)
        conn.sock.close()  # closing the only descriptor also takes it out of the epoll set
        conn.bodies.clear()
        conn.out.clear()
        if self._on:
            self.rec.emit("connection_closed", listener=self.label, conn=conn.cid, why=why)

    # -------------------------------------------------------- a failed accept
    # Out of descriptors (EMFILE, ENFILE) or kernel memory (ENOBUFS, ENOMEM), accept() fails and the connection
    # stays pending in the backlog, so a level-triggered epoll reports the server socket again at once: watched
    # on, the serving thread would spin (and record a failure each turn) for as long as the process is out of
    # them.  Accepting pauses instead, as Go's net/http and asyncio do: the server socket stays in the epoll set
    # with no events for a backoff that doubles from ACCEPT_RETRY_MIN_S to ACCEPT_RETRY_MAX_S, then is watched
    # again; the first failure of a streak is recorded, and an accept that does not fail ends the streak.  The
    # other connections are served meanwhile, and a stop still wakes the thread through its pipe.
    ACCEPT_RETRY_MIN_S = 0.005
    ACCEPT_RETRY_MAX_S = 0.1
    _accept_retry_at: float | None = None  # the monotonic time accepting resumes, while paused
    _accept_delay = 0.0  # the backoff of the streak of failed accepts, 0 when there is none

    def _accept_failed(self, exc: OSError) -> None:
        """A failed accept (the serving thread): out of descriptors or memory, record the first of a streak and
        pause accepting; any other error (the connection aborted, which takes it off the backlog; a server socket
        closed under the thread, as a planted teardown does) is recorded and nothing pauses.  Never raises."""
        first = not self._accept_delay
        if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM) and self._watch_server(0):
            self._accept_delay = (self.ACCEPT_RETRY_MIN_S if first
                                  else min(self.ACCEPT_RETRY_MAX_S, 2 * self._accept_delay))
            self._accept_retry_at = time.monotonic() + self._accept_delay
            if not first:
                return  # paused before it is recorded, and recorded once a streak
        self.rec.emit("accept_failed", listener=self.label, error=str(exc))

    def _poll_timeout(self) -> float:
        """epoll's timeout for the serving thread in a streak of failed accepts (``_serve`` asks only then): the
        seconds until accepting resumes, or none (-1) once it has (watching the server socket again) or once the
        accept after the last retry did not fail (the streak is over)."""
        at = self._accept_retry_at
        if at is None:
            self._accept_delay = 0.0
            return -1
        left = at - time.monotonic()
        if left > 0:
            return left
        self._accept_retry_at = None
        self._watch_server(select.EPOLLIN)
        return -1

    def _watch_server(self, events: int) -> bool:
        """Set the server socket's epoll events (0: paused); False when it is gone (closed under the thread, as
        a planted teardown does): nothing to pause or watch again."""
        server = self._server
        try:
            self._ep.modify(server.fileno() if server is not None else -1, events)
        except (OSError, ValueError):
            return False
        return True
