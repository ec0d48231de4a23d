"""The reference worker listener: one Unix socket per (rank, pp), served by one thread.

It keeps every line of the stop contract (docs/stop-contract.md).  How:

* One serving thread multiplexes the server socket, every accepted connection
  and a self-pipe with epoll; reads are non-blocking and fed to a
  :class:`~harness.reference.wire.FrameReader`, so an idle or stalled client
  never delays another (no head-of-line blocking).  Backend calls run on that
  thread, one at a time (serialised per listener).  Replies are written without
  blocking either: what the socket does not take at once waits on its connection
  (harness.reference.conn) and is written as its client reads, so a client that
  does not read its reply stalls only itself.
* ``stop()`` takes the listener lock, sets the stop flag and records
  ``stop_started``; every dispatch decision is taken under the same lock, so
  the history orders them exactly.  Under that lock it shuts down every tracked
  connection that is reading or idle (reads are cancelled at once), then wakes
  the thread through the self-pipe: never through the socket path, so a
  removed or replaced socket file cannot make stop hang.
* The thread finishes the backend call it is in (its reply is still written:
  cancel reads, not writes), answers requests that completed but were not yet
  dispatched with ``shutting_down``, delivers the replies their clients have
  not read yet (stop gives up on them once its drain timeout has passed: the
  listener has nothing in use by them), closes every connection and exits.  Only
  then does stop tear down: close the server socket, unlink the socket file if
  it is still the one bound (same device and inode), remove the owner record
  and any directory left empty.

Hooks a planted-bug variant overrides are the ``_``-prefixed methods between
"variant seams" comments; harness/reference/variants.py lists the variants.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from harness import failpoints
from harness.errors import BackendError, ConfigError, InjectedFault, ListenerError, WireError
from harness.events import label
from harness.history import Emitter, NullRecorder
from harness.osthread import name_os_thread
from harness.reference import wire
from harness.reference.conn import Conn, State, deliver, drain_pipe
from harness.reference.dirs import remove_empty_dirs, unlink_quietly
from harness.reference.paths import OwnerRecord, owner_path

__all__ = ["Backend", "ListenerConfig", "WorkerListener", "DEFAULT_DRAIN_TIMEOUT"]

DEFAULT_DRAIN_TIMEOUT = 5.0  # seconds stop() waits for a handler inside the backend (kvcached's figure)
GIVE_UP_S = 1.0  # seconds stop waits for the thread to exit once it gave up on unread replies (a safety net)
_Conn = Conn  # the names planted-bug variants and benchmark arms import from here
_State = State
RECV_CHUNK = 65536  # bytes read per readable event
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class Backend(Protocol):
    """What a listener dispatches into: one request in, one reply out.

    Raise a :class:`~harness.errors.BackendError` to send an error reply with its
    ``error_type`` and ``phase``; anything else becomes ``operation_failed``.
    """

    def handle(self, req: wire.Request) -> wire.Reply: ...


@dataclass(frozen=True)
class ListenerConfig:
    """Tunables of one listener."""

    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    max_frame: int = wire.MAX_FRAME
    backlog: int = 128
    check_peer_uid: bool = True

    def __post_init__(self) -> None:
        if not self.drain_timeout >= 0:
            raise ConfigError(f"drain_timeout must be >= 0 seconds, got {self.drain_timeout!r}")
        if not 1 <= self.max_frame <= (1 << 31):
            raise ConfigError(f"max_frame must be between 1 and 2**31 bytes, got {self.max_frame!r}")


class WorkerListener:
    """Serves one worker rank's socket until stopped.

    Lifecycle: ``start()`` once, then ``stop()`` any number of times from any thread.
    """

    def __init__(self, path: str | os.PathLike[str], backend: Backend, *, rank: int = 0, pp: int = 0,
                 ipc: str = "", config: ListenerConfig | None = None, recorder: Emitter | None = None) -> None:
        self.path = Path(path)
        self.backend = backend
        self.rank = rank
        self.pp = pp
        self.ipc = ipc
        self.config = config or ListenerConfig()
        self.rec: Emitter = recorder if recorder is not None else NullRecorder()
        self._on = not isinstance(self.rec, NullRecorder)  # build request-path events only when recorded
        self._uid = os.getuid()
        self._ep: select.epoll  # set by the serving thread
        self._lock = threading.Lock()  # guards _stopping, _conns and every dispatch decision
        self._stop_lock = threading.Lock()  # serialises teardown between concurrent stops
        self._stopping = False  # set once, under _lock, by the first stop
        self._in_poll = False  # the serving thread waits in epoll (nothing in hand): stop may leave it the closing
        self._writes_only = False  # stopping, the thread only delivers unread replies: no handler can run any more
        self._give_up = False  # set by a stop whose drain timed out while only unread replies were left
        self._torn_down = False  # teardown finished: stop() is then a no-op returning True
        self._conns: dict[int, _Conn] = {}  # tracked connections by fileno
        self._next_cid = 0
        self._ready: deque[_Conn] = deque()  # connections with a whole frame waiting, FIFO
        self._server: socket.socket | None = None
        self._ident: tuple[int, int] | None = None  # (st_dev, st_ino) of the socket we bound
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None
        self._exited = threading.Event()  # set by the serving thread as its very last step

    @property
    def label(self) -> str:
        return label(self.pp, self.rank)

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def torn_down(self) -> bool:
        return self._torn_down

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    # ------------------------------------------------------------------ start
    def start(self) -> None:
        """Bind the socket and start serving.

        Returns: once the thread is serving (a client may connect at once).
        Resource handling: creates the directories (0700), the socket (0600) and
            its owner record; all are removed by a successful ``stop()``.
        Error handling: raises ListenerError (nothing left behind) when the
            socket cannot be bound; ConfigError when called twice.
        """
        if self._thread is not None:
            raise ConfigError(f"listener {self.label} at {self.path} was already started; start a new one")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._take_over_stale_path()
            old_umask = os.umask(0o177)
            try:
                failpoints.hit("listener.bind")  # armed with raise: the bind fails
                server.bind(os.fspath(self.path))
            finally:
                os.umask(old_umask)
            os.chmod(self.path, 0o600)
            st = os.stat(self.path)
            self._ident = (st.st_dev, st.st_ino)
            server.listen(self.config.backlog)
            server.setblocking(False)
            self._write_owner()
        except ListenerError:
            server.close()
            raise
        except (OSError, InjectedFault) as exc:
            self._undo_start(server)
            raise ListenerError(f"{self.label}: cannot listen on {self.path}: {exc}") from exc
        self._server = server
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        started = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(started,), daemon=True,
                                        name=f"lastcall-listener-{self.label}")
        self._thread.start()
        started.wait()
        self.rec.emit("listener_started", listener=self.label, path=str(self.path), rank=self.rank, pp=self.pp)

    def _take_over_stale_path(self) -> None:
        """Remove a socket left at our path by a dead owner; refuse one whose owner lives.

        (kvcached unlinks whatever is there, so a second process steals a live path.)
        """
        if not os.path.lexists(self.path):
            return
        rec = OwnerRecord.read(owner_path(self.path))
        if rec is not None and rec.alive():
            raise ListenerError(
                f"{self.label}: {self.path} is in use by live pid {rec.pid}; stop that listener, "
                f"or use another ipc name (a leftover of a dead owner is removed with `lastcall ctl delete`)")
        self.path.unlink()
        self.rec.emit("stale_socket_removed", listener=self.label, path=str(self.path))

    # ------------------------------------------------------------------- stop
    def stop(self, timeout: float | None = None) -> bool:
        """Stop serving, drain, and tear down.

        ``timeout`` overrides ``config.drain_timeout`` for this call (the exit hook
        uses it to share one budget among listeners).

        Returns: True once the serving thread has exited and everything the
            listener created is gone (also on every later call).  False when the
            drain did not finish in time, when called from a handler on the
            serving thread, or when a cleanup step failed: then nothing more is
            torn down and a later call retries.
        Resource handling: connections reading or idle are shut down at once;
            the handler inside the backend (if any) finishes and its reply is
            delivered; the socket file is unlinked only if it is the one bound.
        Error handling: never raises.
        """
        try:
            if self._torn_down:
                return True
            if self._thread is None:
                return self._finish_stop(True, reason="never started")
            self._begin_stop()
            if threading.current_thread() is self._thread:
                return self._stop_from_handler()
            limit = self.config.drain_timeout if timeout is None else timeout
            if not self._wait_drained(limit):
                return self._finish_stop(False, reason="drain timeout")
            with self._stop_lock:
                if not self._torn_down:
                    self._teardown()
                    self._torn_down = True
            return self._finish_stop(True)
        except Exception as exc:  # a cleanup error: keep everything for a retry
            self.rec.emit("cleanup_failed", listener=self.label, error=f"{type(exc).__name__}: {exc}")
            return self._finish_stop(False, reason=f"cleanup failed: {exc}")

    def _finish_stop(self, ok: bool, reason: str = "") -> bool:
        self.rec.emit("stop_returned", listener=self.label, ok=ok, reason=reason)
        return ok

    def _begin_stop(self) -> None:
        """Set the stop flag, cancel reads and wake the thread; only the first call acts."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            self.rec.emit("stop_started", listener=self.label)
            conns, idle, cancelled = list(self._conns.values()), _State.IDLE, _State.CANCELLED
            victims = [c for c in conns if c.state is idle]  # locals: no class attribute looked up per connection
            busy = not self._in_poll or (len(victims) < len(conns) and any(  # all of them victims: none is busy
                c.state in (_State.QUEUED, _State.DISPATCHING, _State.WRITING) for c in conns))
            failpoints.hit("listener.stop_snapshot")  # a racing point: the flag is set, the snapshot taken
            if busy:
                self._cancel_reads(victims)
            else:  # the thread waits in epoll with nothing to answer: woken below, it closes them all at once
                for conn in victims:
                    conn.state = cancelled
                self.rec.emit("reads_cancelled", listener=self.label, n=len(victims), conns=[c.cid for c in victims],
                              by="thread_exit")
        self._wake()

    # ------------------------------------------------------------ variant seams
    def _write_owner(self) -> None:
        """The owner record beside the socket: who holds it (``lastcall ctl`` and a restart read it)."""
        OwnerRecord.for_self(self.ipc, "socket", self.rank, self.pp).write(owner_path(self.path))

    def _undo_start(self, server: socket.socket) -> None:
        """A start that failed once the path was ours to take: close the socket, unlink what it bound (and its
        owner record), remove the directories it made; nothing is left behind."""
        server.close()
        if self._ident is not None:
            unlink_quietly(self.path, owner_path(self.path))
            self._ident = None
        self._remove_empty_dirs()

    def _cancel_reads(self, victims: list[_Conn]) -> None:
        """Under the lock: shut every reading or idle connection down (wakes a parked read)."""
        for conn in victims:
            conn.state = _State.CANCELLED
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.rec.emit("reads_cancelled", listener=self.label, n=len(victims), conns=[c.cid for c in victims])

    def _wake(self) -> None:
        """Wake the serving thread through the self-pipe (never through the socket path)."""
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # a full pipe is already a wake-up; a closed one means the thread is gone

    def _may_dispatch(self) -> bool:
        """Under the lock: may a request be dispatched now?"""
        return not self._stopping

    def _wait_drained(self, timeout: float) -> bool:
        """Wait until the serving thread has exited; False if ``timeout`` passed first.

        When the time is up and all the thread has left is replies its clients do not read, it is told to
        give up on them (their connections are closed): nothing of the listener is in use by them.
        """
        self.rec.emit("drain_started", listener=self.label, timeout=timeout)
        ok = self._exited.wait(timeout) and self._gone(timeout)
        if not ok and self._writes_only:
            self._give_up = True
            self._wake()
            ok = self._exited.wait(GIVE_UP_S) and self._gone(GIVE_UP_S)
        self.rec.emit("drain_finished", listener=self.label, ok=ok)
        return ok

    def _on_bad_request(self, conn: _Conn, exc: WireError) -> None:
        """A well-framed body that does not decode: answer bad_request, serve on."""
        self.rec.emit("bad_request", listener=self.label, conn=conn.cid, error=str(exc))
        self._send(conn, wire.Reply(status="error", error_type="bad_request", message=str(exc)))

    def _stop_from_handler(self) -> bool:
        """stop() called on the serving thread (from a handler): it cannot wait for itself."""
        return self._finish_stop(False, reason="called from the serving thread")

    def _teardown(self) -> None:
        """Unlink (only our own inode), close, remove the owner record and empty dirs.

        The socket file is unlinked while the server socket is still open: its inode cannot be
        reused by a file that replaces the path after a failed cleanup, so a retry's same-inode
        check never unlinks someone else's file.
        """
        self._step("unlink")
        try:
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._ident:
                self.path.unlink()
            else:
                self.rec.emit("teardown_step", listener=self.label, step="unlink_skipped", why="socket path replaced")
        except FileNotFoundError:
            self.rec.emit("teardown_step", listener=self.label, step="unlink_skipped", why="socket path gone")
        if self._server is not None:
            self._step("close")
            self._server.close()
        unlink_quietly(owner_path(self.path))
        self._step("rmdir")
        self._remove_empty_dirs()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1

    # ---------------------------------------------------------------- helpers
    def _step(self, step: str) -> None:
        failpoints.hit(f"cleanup.{step}")
        self.rec.emit("teardown_step", listener=self.label, step=step)

    def _remove_empty_dirs(self) -> None:
        remove_empty_dirs(self.path)

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
    # other connections are served meanwhile, and a stop still wakes the thread through its pipe.  (Written
    # here, below the rest, so that no line above moves: the mutation record names mutants by line.)
    ACCEPT_RETRY_MIN_S = 0.005
    ACCEPT_RETRY_MAX_S = 0.1
    _accept_retry_at: float | None = None  # the monotonic time accepting resumes, while paused
    _accept_delay = 0.0  # the backoff of the streak of failed accepts, 0 when there is none

    def _accept_failed(self, exc: OSError) -> None:
        """A failed accept (the serving thread): out of descriptors or memory, record the first of a streak and
        pause accepting; any other error (the connection aborted, which takes it off the backlog; a server socket
        closed under the thread, as a planted teardown does) is recorded and nothing pauses.  Never raises."""
        import errno
        import time

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
        import time

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

    def _gone(self, timeout: float) -> bool:
        """The serving thread has ended, not only set ``_exited`` (its last step, after which it still returns
        through threading's bootstrap): joined, so no thread list read after a stop returned True names it.
        (Written here, below the rest, so that no line above moves: the mutation record names mutants by line.)"""
        assert self._thread is not None
        self._thread.join(timeout)
        return not self._thread.is_alive()
