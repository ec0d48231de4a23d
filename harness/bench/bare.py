"""A bare listener with the reference's framing: the baseline the reference is measured against.

The loop is kvcached's before it tracked anything: accept one connection, read
one frame (4-byte big-endian length, msgpack body, via
:mod:`harness.reference.wire`), decode it, call the backend, write the reply,
close, and accept the next.  No connection tracking, no stop contract, no
history events, no peer check, one connection at a time, blocking reads.

Only the benchmark needs to stop it: :meth:`BareListener.stop` wakes the accept
wait through a self-pipe and joins the thread.  A client that connects and then
sends nothing would block the thread (and stop) in that client's read: the
benchmark's clients never do.  That is the price of being bare.
"""

from __future__ import annotations

import os
import selectors
import socket
import threading
from pathlib import Path

from harness.errors import BackendError, WireError
from harness.reference import wire
from harness.reference.serving import Backend

__all__ = ["BareListener"]


class BareListener:
    """Serves ``path`` with ``backend`` on one thread, one connection at a time."""

    def __init__(self, path: str | os.PathLike[str], backend: Backend, *, max_frame: int = wire.MAX_FRAME,
                 backlog: int = 128) -> None:
        self.path = Path(path)
        self.backend = backend
        self.max_frame = max_frame
        self.backlog = backlog
        self.served = 0  # connections answered
        self._server: socket.socket | None = None
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None

    @property
    def thread(self) -> threading.Thread | None:
        """The serving thread while started."""
        return self._thread

    def start(self) -> None:
        """Bind, listen and start the serving thread (a client may connect on return)."""
        if self._thread is not None:
            raise RuntimeError(f"bare listener at {self.path} already started")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(os.fspath(self.path))
            server.listen(self.backlog)
            server.setblocking(False)
        except OSError:
            server.close()
            raise
        self._server = server
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._serve, daemon=True, name=f"bare-listener-{self.path.name}")
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Wake the thread, join it, close and unlink. Returns whether the thread exited in time."""
        if self._thread is None:
            return True
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        self._thread.join(timeout)
        if self._thread.is_alive():
            return False
        self._thread = None
        if self._server is not None:
            self._server.close()
            self._server = None
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self._wake_r = self._wake_w = -1
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        return True

    def _serve(self) -> None:
        assert self._server is not None
        server = self._server
        with selectors.DefaultSelector() as sel:
            sel.register(server, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while True:
                events = sel.select()
                if any(key.fileobj == self._wake_r for key, _ in events):
                    return
                while True:  # take every pending connection before selecting again
                    try:
                        conn, _ = server.accept()
                    except (BlockingIOError, InterruptedError):
                        break
                    with conn:
                        conn.setblocking(True)
                        self._handle(conn)
                    self.served += 1

    def _handle(self, conn: socket.socket) -> None:
        try:
            body = wire.recv_frame(conn, self.max_frame)
        except (OSError, WireError):
            return
        try:
            req = wire.decode_request(body)
        except WireError as exc:
            reply = wire.Reply(status="error", error_type="bad_request", message=str(exc))
        else:
            try:
                reply = self.backend.handle(req)
                reply.id = req.id
            except BackendError as exc:
                reply = wire.Reply(status="error", id=req.id, error_type=exc.error_type,  # type: ignore[arg-type]
                                   phase=exc.phase, message=str(exc))
            except Exception as exc:
                reply = wire.Reply(status="error", id=req.id, error_type="operation_failed",
                                   message=f"{type(exc).__name__}: {exc}")
        try:
            conn.sendall(wire.encode_reply(reply))
        except OSError:
            pass
