"""The child's end of the control channel: what every role main of a forked process is given.

:class:`ControlClient` connects back to the harness's control socket, says hello, sends every event the
process records (the harness's recorder is the only writer of the history) and runs commands on threads of
their own, so a parked call never blocks the channel.  :class:`ExitRequest` holds the first reason to end the
process.  The role mains (harness.launch.roles) and the child's entry point (harness.launch.child) both import
this module; it imports neither, so the three form no cycle.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from harness.events import compact
from harness.launch.channel import Channel
from harness.osthread import name_os_thread
from harness.reference.conn import drain_pipe

__all__ = ["ControlClient", "ExitRequest", "Handler", "SHUTDOWN_TRIES", "process_resources"]

SHUTDOWN_TRIES = 3  # integration shutdown attempts before a child gives up and lets the exit hook try

Handler = Callable[..., Any]


class ExitRequest:
    """The first reason to end this process, with whether to shut down in order first.

    The main thread waits for it in ``select`` on a pipe that is also the process's signal wakeup fd
    (:func:`signal.set_wakeup_fd`), not on a lock: the kernel hands a process-directed signal (a SIGTERM) to any
    thread that does not block it, and Python runs the handler only on the main thread, once that thread runs
    Python again.  Parked on a lock, the main thread would sleep on while the handler waited (for a signal
    taken by the control thread or a listener thread); the wakeup fd gets a byte from whichever thread the
    signal interrupted, so ``select`` returns, the handler runs and sets this request."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.reason = ""
        self.shutdown = True

    def set(self, reason: str, shutdown: bool = True) -> None:
        if not self._event.is_set():
            self.reason, self.shutdown = reason, shutdown
            self._event.set()
            try:
                os.write(self._w, b"x")
            except OSError:
                pass  # a full pipe is already a wake-up

    def wait(self) -> None:
        if threading.current_thread() is not threading.main_thread():  # no signal handler runs here: a lock will do
            self._event.wait()
            return
        old = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        try:
            while not self._event.is_set():
                select.select([self._r], [], [])
                drain_pipe(self._r)
        finally:
            signal.set_wakeup_fd(old)


class ControlClient:
    """The child's end of the control channel; also the child's event emitter."""

    def __init__(self, path: str, role: str, label: str, lost: Callable[[], None]) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        self.chan = Channel(sock)
        self.role = role
        self.label = label
        self.handlers: dict[str, Handler] = {}
        self._lost = lost
        self.chan.send({"t": "hello", "role": role, "label": label, "pid": os.getpid()})
        self._thread = threading.Thread(target=self._serve, name="lastcall-control", daemon=True)
        self._thread.start()

    def emit(self, kind: str, /, **data: Any) -> None:
        # a long request id leaves as its digest: the channel never carries a padded id to the history
        self.chan.send({"t": "event", "t_ns": time.monotonic_ns(), "pid": os.getpid(), "role": self.role,
                        "rank": self.label, "thread": threading.current_thread().name, "kind": kind,
                        "data": compact(data)})

    def send(self, msg: dict[str, Any]) -> None:
        self.chan.send(msg)

    def _serve(self) -> None:
        name_os_thread("lc-control")
        for msg in self.chan.messages():
            if msg.get("t") == "cmd":
                threading.Thread(target=self._run_cmd, args=(msg,), name=f"lastcall-cmd-{msg.get('op')}",
                                 daemon=True).start()
        self._lost()

    def _run_cmd(self, msg: dict[str, Any]) -> None:
        op = str(msg.get("op"))
        handler = self.handlers.get(op)
        try:
            if handler is None:
                raise KeyError(f"unknown command {op!r}; known: {', '.join(sorted(self.handlers))}")
            reply = {"t": "reply", "id": msg["id"], "ok": True, "value": handler(**msg.get("args", {}))}
        except Exception as exc:
            reply = {"t": "reply", "id": msg["id"], "ok": False, "error": f"{type(exc).__name__}: {exc}",
                     "error_type": getattr(exc, "error_type", None), "error_class": type(exc).__name__}
        self.chan.send(reply)


def process_resources() -> dict[str, Any]:
    """This process's threads by name and fds by (kind, target): what leak checkers compare."""
    from harness.probes.procs import proc_entry

    entry = proc_entry(os.getpid())
    fds = [] if entry is None else [[f.fd, f.kind, f.target] for f in entry.fds]
    return {"threads": sorted(t.name for t in threading.enumerate()), "fds": fds}
