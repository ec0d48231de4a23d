"""The reference worker listener: one Unix socket per (rank, pp), served by one thread.

This module holds its configuration, its start and its stop (and their seams); the serving thread's request
path is its base, :class:`~harness.reference.serving.ServingLoop` (harness/reference/serving.py).  Together
they keep every line of the stop contract (docs/stop-contract.md).  How:

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
"variant seams" comments, and the request path's methods in serving.py;
harness/reference/variants.py lists the variants.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from harness import failpoints
from harness.errors import ConfigError, InjectedFault, ListenerError
from harness.events import label
from harness.history import Emitter, NullRecorder
from harness.reference import wire
from harness.reference.conn import Conn, State
from harness.reference.dirs import remove_empty_dirs, unlink_quietly
from harness.reference.paths import OwnerRecord, owner_path
from harness.reference.serving import Backend, ServingLoop

__all__ = ["Backend", "ListenerConfig", "WorkerListener", "DEFAULT_DRAIN_TIMEOUT"]

DEFAULT_DRAIN_TIMEOUT = 5.0  # seconds stop() waits for a handler inside the backend (kvcached's figure)
GIVE_UP_S = 1.0  # seconds stop waits for the thread to exit once it gave up on unread replies (a safety net)
_Conn = Conn  # the names planted-bug variants and benchmark arms import from here
_State = State


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


class WorkerListener(ServingLoop):
    """Serves one worker rank's socket until stopped.

    Lifecycle: ``start()`` once, then ``stop()`` any number of times from any thread.
    """

    config: ListenerConfig  # the whole of it; the request path reads only what ServingConfig names

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

    def _gone(self, timeout: float) -> bool:
        """The serving thread has ended, not only set ``_exited`` (its last step, after which it still returns
        through threading's bootstrap): joined, so no thread list read after a stop returned True names it."""
        assert self._thread is not None
        self._thread.join(timeout)
        return not self._thread.is_alive()

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
