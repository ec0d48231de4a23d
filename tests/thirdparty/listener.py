"""A listener lastcall did not write: a plain thread-per-connection Unix-socket server and its backend.

It is the worked example of docs/targets.md: written against harness.targets.api and harness.events
only (tests/test_thirdparty.py checks the imports), not a subclass of anything in harness.reference.
It speaks lastcall's reference framing (a 4-byte big-endian length, then one msgpack map) so the
harness's own client-side faults can write to it, and reports what it does through the recorder it is
given, as the listener events of harness.events.

Its stop keeps the contract: stop accepting, cancel every read in progress at once, drain the handlers
inside the backend for at most ``drain_timeout``, then close and unlink and return True; a drain that
times out returns False and tears nothing down (a later stop retries); a stop called from one of its own
handlers returns False at once.  A process that exits without stopping its listeners has them stopped by
one exit hook (registered with atexit once per process, however often listeners start), within one budget
of EXIT_BUDGET_S for all of them; one whose drain outlasts it stays as it is.  Four planted bugs, switched
by class attributes, are its target's ``variants`` (tests/thirdparty/target.py).  (The first version had
the fourth for real: its stop from a handler waited out the drain for itself;
stop-from-a-handler-returns-at-once found it.  It had no exit hook: exit-hook-runs-once-after-a-restart
found its socket file left by a process that exited without a stop; and its accept thread died of the
first failed accept: accept-failure-keeps-serving found nothing served after an EMFILE, and then, once it
judged idle_cost too, the accept thread spinning while the process was out of descriptors.)
"""

from __future__ import annotations

import atexit
import itertools
import os
import select
import socket
import struct
import threading
import time
from typing import Any

import msgspec

from harness.targets import api

HEADER = struct.Struct(">I")
MAX_FRAME = 1 << 20
JOIN_S = 10.0  # a safety net for joining a thread that has been told to end
ACCEPT_RETRY_MIN_S, ACCEPT_RETRY_MAX_S = 0.005, 0.1  # the pause after a failed accept, doubling up to its cap


PAGE_BYTES = 2 << 20  # a KV page: an offset that is not a multiple of it is refused


class Backend:
    """The KV pages this worker holds, per group; every call passes the failpoint site backend.<cmd>."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mapped: dict[int, set[int]] = {}
        self.torn_down = False

    def call(self, cmd: str, group_id: int, offsets: list[int]) -> dict[str, Any]:
        api.site(f"backend.{cmd}")
        with self._lock:
            if self.torn_down:
                raise RuntimeError("the backend is torn down")
            held = self._mapped.setdefault(group_id, set())
            stray = [o for o in offsets if not isinstance(o, int) or o < 0 or o % PAGE_BYTES]
            if stray and cmd in ("map_to_kv_tensors", "unmap_from_kv_tensors"):
                return {"status": "error", "error_type": "bad_request",
                        "message": f"offset {stray[0]!r} is no page's (pages are {PAGE_BYTES} bytes)"}
            if cmd == "map_to_kv_tensors":
                new = sorted(set(offsets) - held)
                held.update(offsets)
                return {"status": "success", "newly_mapped_offsets": new}
            if cmd == "unmap_from_kv_tensors":
                held.difference_update(offsets)
                return {"status": "success"}
            if cmd == "kv_tensors_created":
                return {"status": "success", "created": True}
        return {"status": "error", "error_type": "bad_request", "message": f"unsupported command {cmd!r}"}

    def mapped(self, group_id: int) -> list[int] | None:
        with self._lock:
            return None if self.torn_down else sorted(self._mapped.get(group_id, ()))

    def teardown(self) -> None:
        with self._lock:
            self.torn_down = True
            self._mapped.clear()


EXIT_BUDGET_S = 1.0
_live: set[ThreadedListener] = set()  # started and not torn down: what the exit hook stops
_live_lock = threading.Lock()
_hooked = False


def _stop_live_at_exit() -> None:
    """The exit hook: stop every listener this process left serving, within one budget for all of them."""
    deadline = time.monotonic() + EXIT_BUDGET_S
    with _live_lock:
        live = list(_live)
    for listener in live:
        listener.stop(max(0.0, deadline - time.monotonic()))


def _register(listener: ThreadedListener) -> None:
    global _hooked
    with _live_lock:
        _live.add(listener)
        if not _hooked:
            atexit.register(_stop_live_at_exit)
            _hooked = True


class ThreadedListener:
    """One socket, one accept thread, one thread per connection.  Thread-safe; stop is serialised."""

    cancels_reads = True  # False: no_conn_tracking (a read in progress stays parked until the drain ends)
    drains = True  # False: teardown_while_alive (stop tears down at once, a handler still in the backend)
    keeps_on_timeout = True  # False: timed_join_teardown (a drain timeout tears down and returns True anyway)
    returns_from_handler = True  # False: stop_from_handler_deadlocks (a handler's stop waits for itself)

    def __init__(self, path: str, backend: Backend, recorder: api.Recorder, *, label: str, rank: int, pp: int,
                 drain_timeout: float) -> None:
        self.path, self.backend, self.rec, self.label = path, backend, recorder, label
        self.rank, self.pp, self.drain_timeout = rank, pp, drain_timeout
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._stop_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._sock: socket.socket | None = None
        self._ino = 0  # the inode of the socket file this listener bound
        self._accept: threading.Thread | None = None
        self._wake_r = self._wake_w = -1
        self._conns: dict[int, socket.socket] = {}
        self._threads: dict[int, threading.Thread] = {}
        self._busy: set[int] = set()  # connections whose handler is inside the backend, or writing its reply
        self._writing: set[int] = set()  # of those, the ones past the backend, writing their reply
        self._stopping = False
        self._announced = False
        self.serving = False

    # ------------------------------------------------------------ life
    def start(self) -> None:
        if os.path.exists(self.path):
            os.unlink(self.path)  # a socket left by a dead owner of this path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.path)
        self._ino = os.stat(self.path).st_ino  # teardown unlinks the path only while it is still this socket
        sock.listen(64)
        self._sock = sock
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = self._announced = False
        self.serving = True
        self._accept = threading.Thread(target=self._accept_loop, name=f"tp-accept-{self.label}", daemon=True)
        self._accept.start()
        _register(self)
        self.rec.emit("listener_started", listener=self.label, path=self.path, rank=self.rank, pp=self.pp)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop accepting, cancel reads, drain, tear down; True, or False with everything kept for a retry.

        Concurrent stops each wait for the same drain; called from one of its own handlers it cannot drain
        itself, so it returns False at once (the handler's reply goes out; a later stop finishes)."""
        t0 = time.monotonic()
        with self._stop_lock:
            if not self.serving:
                return True  # idempotent: already stopped
            if not self._announced:
                self._announced = True
                with self._lock:  # the decision and its record together: no dispatch is decided between them
                    self._stopping = True
                    self.rec.emit("stop_started", listener=self.label)
                os.write(self._wake_w, b"x")  # the accept thread ends; the socket stays until teardown
                if self._accept is not None:
                    self._accept.join(JOIN_S)
                if self.cancels_reads:
                    self._cancel_reads()
        if self.returns_from_handler and threading.current_thread() in self._handler_threads():
            self.rec.emit("stop_returned", listener=self.label, ok=False, reason="called from its own handler",
                          took_ms=(time.monotonic() - t0) * 1e3)
            return False
        ok = self._drain(self.drain_timeout if timeout is None else timeout)
        with self._stop_lock:
            if not self.serving:  # a concurrent stop finished the job while this one drained
                self.rec.emit("stop_returned", listener=self.label, ok=True, took_ms=(time.monotonic() - t0) * 1e3)
                return True
            if not ok and self.keeps_on_timeout:
                self.rec.emit("stop_returned", listener=self.label, ok=False, reason="drain timed out",
                              took_ms=(time.monotonic() - t0) * 1e3)
                return False  # everything stays: the socket, its file, the handler; a later stop retries
            self._teardown(join=ok and self.drains)
            self.rec.emit("stop_returned", listener=self.label, ok=True, took_ms=(time.monotonic() - t0) * 1e3)
            return True

    def _handler_threads(self) -> list[threading.Thread]:
        with self._lock:
            return list(self._threads.values())

    def _cancel_reads(self) -> None:
        with self._lock:
            idle = [c for c in self._conns if c not in self._busy]
            for c in idle:
                _shut(self._conns[c])
        self.rec.emit("reads_cancelled", listener=self.label, n=len(idle), conns=idle)

    def _drain(self, timeout: float) -> bool:
        if not self.drains:
            return True
        self.rec.emit("drain_started", listener=self.label, timeout=timeout)
        with self._idle:
            ok = self._idle.wait_for(lambda: not self._busy, timeout)
            if not ok and self._busy <= self._writing:
                # only replies their clients do not read are left: the drain gives up on them (their
                # connections shut, the blocked sendall raises) instead of on the stop (contract line 11)
                for c in self._busy:  # self._idle holds self._lock
                    _shut(self._conns[c])
                ok = self._idle.wait_for(lambda: not self._busy, JOIN_S)
        self.rec.emit("drain_finished", listener=self.label, ok=ok)
        return ok

    def _teardown(self, *, join: bool) -> None:
        with self._lock:
            conns = list(self._conns.values())
            threads = list(self._threads.values())
        for c in conns:
            _shut(c)
        if join:  # every handler has left the backend: each ends at once, its connection shut
            for t in threads:  # one that already closed its connection included: it may not have returned yet
                t.join(JOIN_S)
            with self._lock:
                self._threads.clear()
        if self._sock is not None:
            self._sock.close()
            self.rec.emit("teardown_step", listener=self.label, step="close")
        os.close(self._wake_r)
        os.close(self._wake_w)
        try:
            if os.stat(self.path).st_ino == self._ino:  # another's socket that replaced ours is not ours to unlink
                os.unlink(self.path)
                self.rec.emit("teardown_step", listener=self.label, step="unlink")
        except FileNotFoundError:
            pass
        self.serving = False
        with _live_lock:
            _live.discard(self)

    # ------------------------------------------------------------ serving
    def _accept_loop(self) -> None:
        assert self._sock is not None
        delay = 0.0  # the backoff of a streak of failed accepts (0: none); its first is recorded
        while True:
            # Paused after a failed accept: the pending connection would wake select at once, and the loop would
            # spin for as long as the process is out of descriptors.  Only a stop ends the pause early.
            if delay and select.select([self._wake_r], [], [], delay)[0]:
                return
            ready, _, _ = select.select([self._sock.fileno(), self._wake_r], [], [])
            if self._wake_r in ready:
                return
            try:
                conn, _ = self._sock.accept()
            except OSError as exc:  # EMFILE and friends: the connection stays pending, the loop goes on
                if not delay:
                    self.rec.emit("accept_failed", listener=self.label, error=str(exc))
                delay = min(ACCEPT_RETRY_MAX_S, 2 * delay) if delay else ACCEPT_RETRY_MIN_S
                continue
            delay = 0.0
            n = next(self._ids)
            t = threading.Thread(target=self._serve, args=(n, conn), name=f"tp-conn-{self.label}-{n}", daemon=True)
            with self._lock:
                for k in [k for k, x in self._threads.items() if not x.is_alive()]:
                    del self._threads[k]  # ended: nothing left to join
                self._conns[n] = conn
                self._threads[n] = t
            self.rec.emit("accepted", listener=self.label, conn=n)
            t.start()

    def _serve(self, n: int, conn: socket.socket) -> None:
        why = "peer closed"
        try:
            while True:
                first = conn.recv(HEADER.size)
                if not first:
                    break
                self.rec.emit("frame_started", listener=self.label, conn=n)
                head = first + _recv_exact(conn, HEADER.size - len(first))
                (size,) = HEADER.unpack(head)
                if not 1 <= size <= MAX_FRAME:
                    self.rec.emit("bad_frame", listener=self.label, conn=n, error=f"length {size}")
                    why = "bad frame"
                    break
                body = _recv_exact(conn, size)
                if not self._answer(n, conn, body):
                    why = "stopping"
                    break
        except (OSError, EOFError) as exc:
            why = f"{type(exc).__name__}"
        finally:
            conn.close()
            with self._lock:  # the thread stays in _threads, for teardown to join: it is alive until it returns
                self._conns.pop(n, None)
            self.rec.emit("connection_closed", listener=self.label, conn=n, why=why)

    def _answer(self, n: int, conn: socket.socket, body: bytes) -> bool:
        """Decode, dispatch (unless stopping) and reply; False when the connection should end."""
        try:
            req = msgspec.msgpack.decode(body)
            if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
                raise ValueError("not a request map")
        except (msgspec.DecodeError, ValueError) as exc:
            self.rec.emit("bad_request", listener=self.label, conn=n, error=str(exc))
            _reply(conn, {"status": "error", "error_type": "bad_request", "message": str(exc)})
            return True
        cmd, rid = req["cmd"], req.get("id")
        with self._lock:  # the dispatch decision, recorded before a stop can record its own
            stopping = self._stopping
            self.rec.emit("frame_completed", listener=self.label, conn=n, cmd=cmd, after_stop=stopping)
            if not stopping:
                self._busy.add(n)
                self.rec.emit("dispatch_started", listener=self.label, conn=n, cmd=cmd, id=rid)
        if stopping:
            self.rec.emit("dispatch_refused", listener=self.label, conn=n, cmd=cmd, id=rid)
            _reply(conn, {"status": "error", "error_type": "shutting_down", "id": rid})
            return False
        try:
            reply = self.backend.call(cmd, int(req.get("group_id", 0)), list(req.get("offsets", ())))
        except Exception as exc:  # the backend's failure (an injected fault too) is the request's answer
            reply = {"status": "error", "error_type": "operation_failed", "message": str(exc)}
        self.rec.emit("dispatch_finished", listener=self.label, conn=n, cmd=cmd, id=rid, status=reply["status"])
        with self._idle:
            self._writing.add(n)
        try:
            _reply(conn, {**reply, "id": rid} if rid is not None else reply)
        finally:
            with self._idle:
                self._busy.discard(n)
                self._writing.discard(n)
                stopping = self._stopping
                self._idle.notify_all()
        return not stopping


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"{len(buf)} of {n} bytes before the peer closed")
        buf += chunk
    return buf


def _reply(conn: socket.socket, msg: dict[str, Any]) -> None:
    body = msgspec.msgpack.encode(msg)
    conn.sendall(HEADER.pack(len(body)) + body)


def _shut(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)  # the handler's recv returns at once
    except OSError:
        pass


class Client:
    """The engine's client of one worker: one connection, one request at a time."""

    def __init__(self, path: str, timeout: float) -> None:
        self.path, self.timeout = path, timeout
        self._sock: socket.socket | None = None

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self._sock is None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.settimeout(self.timeout)
            self._sock.connect(self.path)
        try:
            _reply(self._sock, msg)
            (size,) = HEADER.unpack(_recv_exact(self._sock, HEADER.size))
            reply: dict[str, Any] = msgspec.msgpack.decode(_recv_exact(self._sock, size))
            return reply
        except (OSError, EOFError):
            self.close()
            raise

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
