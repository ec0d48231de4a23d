"""Planted bugs of the worker listener modelled on mutants the scenario library once missed (docs/mutation.md):
each reproduces one survivor of the worker listener (harness/reference/listener.py, serving.py) as a subclass
(the reference is never edited), so that the scenario that now notices the break can name it in ``catches:``.
Registered in harness.reference.variants.VARIANTS.
"""

from __future__ import annotations

import os
import select
import socket
from typing import Any

from harness import failpoints
from harness.errors import ListenerError, WireError
from harness.reference import wire
from harness.reference.listener import WorkerListener, _Conn, _State
from harness.reference.serving import _PEERCRED

__all__ = ["CancelLeftToThread", "StartsTwice", "LeavesUmask", "SocketModeOpen", "BusyPollsAfterReply",
           "DiesOnAcceptFailure", "SpinsOnAcceptFailure", "UnrecordedDispatch", "MisreportsClose", "QueuesPartialReads",
           "FailedStartNotUndone", "AcceptsAfterStop", "AnsweredNotCancelled"]


class CancelLeftToThread(WorkerListener):
    """WorkerListener._serve (``_in_poll`` never reset once the thread first polled): stop always believes the serving
    thread waits in epoll, marks idle and reading connections cancelled and leaves shutting them down to the
    thread's exit; while the thread is held elsewhere (a slow accept) their clients are not told for as long."""

    def _cancel_reads(self, victims: list[_Conn]) -> None:
        for conn in victims:
            conn.state = _State.CANCELLED
        self.rec.emit("reads_cancelled", listener=self.label, n=len(victims), conns=[c.cid for c in victims],
                      by="thread_exit")


class StartsTwice(WorkerListener):
    """WorkerListener.start (the already-started check removed): a listener object started again after its stop binds
    and listens once more, and every later stop, finding it torn down, returns True at once: the second life of
    the listener is never stopped (its bound socket, owner record and directory are left; its thread, finding
    the first stop's flag still set, exits by itself, so a client that connects there is never answered)."""

    def start(self) -> None:
        self._thread = None
        super().start()


class LeavesUmask(WorkerListener):
    """WorkerListener.start (the umask not restored after the bind): the process keeps umask 0177, so whatever it
    creates afterwards lacks bits: the next listener's directory is 0600, without its search bit."""

    def start(self) -> None:
        super().start()
        os.umask(0o177)


class SocketModeOpen(WorkerListener):
    """WorkerListener.start (0o600 -> 0o601): the socket file gets a bit for other users beyond its owner's read and
    write."""

    def start(self) -> None:
        super().start()
        os.chmod(self.path, 0o601)


class BusyPollsAfterReply(WorkerListener):
    """WorkerListener._send (the return after a reply written whole removed): the connection is switched to EPOLLOUT,
    which is always ready, so the serving thread spins (and reads the connection on each wake-up) for as long as
    its client keeps the connection open."""

    def _send(self, conn: _Conn, reply: wire.Reply) -> None:
        super()._send(conn, reply)
        if conn.sock.fileno() != -1 and not conn.out:
            self._ep.modify(conn.sock.fileno(), select.EPOLLOUT)


class _Handed:
    """A server socket stand-in whose next accept returns a connection already accepted."""

    def __init__(self, fd: int, addr: Any) -> None:
        self.fd, self.addr = fd, addr

    def _accept(self) -> tuple[int, Any]:
        return self.fd, self.addr


class DiesOnAcceptFailure(WorkerListener):
    """WorkerListener._accept (the return after a failed accept removed): a failed accept (EMFILE: the process is out
    of descriptors) goes on with the connection it did not get, and the serving thread dies of it: nothing is
    served any more."""

    def _accept(self) -> None:
        server = self._server
        assert server is not None
        try:
            fd, addr = server._accept()  # type: ignore[attr-defined]
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.rec.emit("accept_failed", listener=self.label, error=str(exc))
            raise ListenerError(f"{self.label}: accept failed: {exc}") from exc  # the mutant: the fd is unbound
        self._server = _Handed(fd, addr)  # type: ignore[assignment]  # the reference's own path with this fd
        try:
            super()._accept()
        finally:
            self._server = server



class SpinsOnAcceptFailure(WorkerListener):
    """tests/thirdparty's listener before its accept backoff (and the reference's spin before its own): a failed
    accept (EMFILE: the process is out of descriptors) leaves the server socket watched, the level-triggered
    epoll reports the pending connection again at once, and the serving thread spins for as long as the
    process is out of descriptors; it serves again once they are back.  It records the first failure only: the
    reference recorded one each turn, and a spin that sends an event each turn is held back by the control
    channel as much as the harness is slow to read it (14 % of the window on a loaded machine, 76 % on an idle
    one), where the spin alone costs the window whatever the load."""

    _spin_recorded = False

    def _accept_failed(self, exc: OSError) -> None:
        if not self._spin_recorded:
            self._spin_recorded = True
            self.rec.emit("accept_failed", listener=self.label, error=str(exc))


class _Dropping:
    """A recorder that loses one kind of event."""

    def __init__(self, rec: Any, kind: str) -> None:
        self.rec, self.kind = rec, kind

    def emit(self, kind: str, /, **data: Any) -> None:
        if kind != self.kind:
            self.rec.emit(kind, **data)


class UnrecordedDispatch(WorkerListener):
    """WorkerListener._dispatch_ready (the instrumentation guard negated): with a recorder, dispatch_started is never
    recorded, so the checkers of a dispatch after stop or after the teardown pass on a history without a dispatch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rec = _Dropping(self.rec, "dispatch_started")


class MisreportsClose(WorkerListener):
    """WorkerListener._on_readable (the close reason's condition negated): a connection its client closed is recorded as
    cancelled by stop, with no stop begun."""

    def _close(self, conn: _Conn, *, why: str) -> None:
        super()._close(conn, why=why.replace("peer closed", "cancelled by stop"))


class QueuesPartialReads(WorkerListener):
    """WorkerListener._on_readable (the return after a read that completes no frame removed): such a read goes on to the
    frame-completion decision and queues its connection with nothing to answer, so a stop whose snapshot falls
    before the dispatch pass sees it queued, not reading, and does not shut it down: the pass cancels it for
    reading only, and its client is told when the serving thread exits.  (The reference's _on_readable with
    that one return removed.)"""

    def _on_readable(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(conn, why=f"read error: {exc}")
            return
        if not data:
            why = "cancelled by stop" if conn.state is _State.CANCELLED else "peer closed"
            self._close(conn, why=why + (" mid-frame" if conn.reader.in_frame else ""))
            return
        was_in_frame = conn.reader.in_frame
        try:
            bodies = conn.reader.feed(data)
        except WireError as exc:
            self.rec.emit("bad_frame", listener=self.label, conn=conn.cid, error=str(exc))
            self._send(conn, wire.Reply(status="error", error_type="bad_request", message=str(exc)))
            self._close(conn, why="framing lost")
            return
        if not was_in_frame:
            if self._on:
                self.rec.emit("frame_started", listener=self.label, conn=conn.cid)
            failpoints.hit("listener.frame_started")
        if not bodies:
            failpoints.hit("listener.frame_read")
            # the mutant: no return here
        with self._lock:
            if self._on:
                for _ in bodies:
                    self.rec.emit("frame_completed", listener=self.label, conn=conn.cid, after_stop=self._stopping)
            if conn.state is _State.CANCELLED:
                return
            failpoints.hit("listener.frame_completing")
            conn.bodies.extend(bodies)
            if conn.state is not _State.QUEUED:
                conn.state = _State.QUEUED
                self._ready.append(conn)
        failpoints.hit("listener.frame_read")


class FailedStartNotUndone(WorkerListener):
    """WorkerListener.start (the failed start's ``self._undo_start(server)`` removed): a start whose bind fails raises
    ListenerError without undoing what it did, so the directories it made stay behind (its socket's fd is closed
    only when the socket object is collected, as the mutant's is).  A later start and stop at the same path
    removes them, which hid the mutant: failed-start-leaves-nothing-behind now also fails a start where nothing
    starts afterwards.  (The call's only effect is _undo_start's body: a no-op in its place is the mutant.)"""

    def _undo_start(self, server: socket.socket) -> None:
        pass  # the mutant: nothing is undone


class AcceptsAfterStop(WorkerListener):
    """WorkerListener._accept (the accept decision's ``if self._stopping:`` block removed): a connection the serving
    thread accepts while a stop is under way (it was held between the accept and the decision) is kept, read and
    answered by the stopping listener instead of being closed unread: stop's snapshot missed it.  (The
    reference's _accept with that block removed.)"""

    def _accept(self) -> None:
        assert self._server is not None
        try:
            fd, _addr = self._server._accept()  # type: ignore[attr-defined]
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
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
        with self._lock:
            self._next_cid += 1
            cid = self._next_cid
            # the mutant: no `if self._stopping:` closing it unread
            failpoints.hit("listener.accept_decided")
            conn = _Conn(sock, cid, self.config.max_frame)
            self._conns[sock.fileno()] = conn
            if self._on:
                self.rec.emit("accepted", listener=self.label, conn=cid)
        self._ep.register(sock.fileno(), select.EPOLLIN)
        self._on_readable(conn)


class AnsweredNotCancelled(WorkerListener):
    """WorkerListener._dispatch_ready (the dispatch pass's post-dispatch cancel, ``if self._stopping and conn.state is
    _State.IDLE:`` with its block, removed): a connection answered after a stop began is left open for reading,
    so its client's next request is taken into the socket and never read, and the client is told only when the
    serving thread exits (after the drain gave up on another client's unread reply), instead of its send failing
    at once (EPIPE).  (The reference's _dispatch_ready with that block removed.)"""

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
                with self._lock:
                    go = self._may_dispatch()
                    failpoints.hit("listener.dispatch_decided")
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
                    # the mutant: no `if self._stopping and conn.state is _State.IDLE:` cancel
            failpoints.hit("listener.answered")
