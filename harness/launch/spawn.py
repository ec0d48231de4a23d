"""The harness's side of the fork server: start it once per process, spawn groups, hear exits."""

from __future__ import annotations

import atexit
import ctypes
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from harness.errors import HarnessError
from harness.launch.channel import Channel
from harness.timeouts import scaled

__all__ = ["LaunchError", "ForkServer", "become_subreaper"]

PR_SET_CHILD_SUBREAPER = 36  # prctl option (linux/prctl.h)
READY_TIMEOUT_S = 60.0  # safety net for the server's preload (torch import) before scaling

ExitCallback = Callable[[int, int, int], None]  # (pid, wait status, t_ns)


class LaunchError(HarnessError):
    """A process could not be started, or died before it was ready; the message has its status and stderr."""


def become_subreaper() -> bool:
    """Make this process a child subreaper, so orphans of what it started are reparented to it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


class ForkServer:
    """One preloaded fork server per harness process (``ForkServer.shared()``)."""

    _shared: ForkServer | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        fd, self.log_path = tempfile.mkstemp(prefix="lastcall-forkserver-", suffix=".log")
        with os.fdopen(fd, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness.launch.forkserver", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True)
        theirs.close()
        self.chan = Channel(ours)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._spawned: dict[int, list[int]] = {}
        self._next_req = 0
        self._exit_callbacks: dict[int, ExitCallback] = {}
        self._exits: dict[int, tuple[int, int]] = {}
        self._ready = threading.Event()
        self._alive = True
        self._reader = threading.Thread(target=self._read, name="lastcall-forkserver-reader", daemon=True)
        self._reader.start()
        if not self._ready.wait(scaled(READY_TIMEOUT_S)):
            self.stop()
            raise LaunchError(f"the fork server did not start; its log: {self._log_tail()}")
        self.pid = self.proc.pid

    @classmethod
    def shared(cls) -> ForkServer:
        """The process-wide server, started on first use and stopped at exit."""
        with cls._shared_lock:
            if cls._shared is None or not cls._shared._alive:
                cls._shared = cls()
                atexit.register(cls._shared.stop)
            return cls._shared

    def _log_tail(self) -> str:
        try:
            with open(self.log_path) as f:
                return f.read()[-2000:]
        except OSError:
            return "(no log)"

    def _read(self) -> None:
        for msg in self.chan.messages():
            op = msg.get("op")
            if op == "ready":
                self._ready.set()
            elif op == "spawned":
                with self._cond:
                    self._spawned[int(msg["req"])] = list(msg["pids"])
                    self._cond.notify_all()
            elif op == "exited":
                pid, status, t_ns = int(msg["pid"]), int(msg["status"]), int(msg["t_ns"])
                with self._cond:
                    self._exits[pid] = (status, t_ns)
                    cb = self._exit_callbacks.pop(pid, None)
                    self._cond.notify_all()
                if cb is not None:
                    cb(pid, status, t_ns)
        with self._cond:
            self._alive = False
            self._cond.notify_all()

    def spawn_group(self, specs: list[dict[str, Any]], on_exit: ExitCallback) -> list[int]:
        """Fork an engine (``specs[0]``) and its workers; ``on_exit`` hears each one's end."""
        with self._cond:
            self._next_req += 1
            req = self._next_req
        if not self.chan.send({"op": "spawn_group", "req": req, "specs": specs}):
            raise LaunchError("the fork server is gone")
        with self._cond:
            self._cond.wait_for(lambda: req in self._spawned or not self._alive, scaled())
            pids = self._spawned.pop(req, None)
            if pids is None:
                raise LaunchError(f"the fork server did not answer a spawn; its log: {self._log_tail()}")
            early = {}
            for pid in pids:
                if pid in self._exits:
                    early[pid] = self._exits.pop(pid)
                else:
                    self._exit_callbacks[pid] = on_exit
        for pid, (status, t_ns) in early.items():
            on_exit(pid, status, t_ns)
        return pids

    def stop(self) -> None:
        """Tell the server to kill what is left and exit; reap it."""
        if self.proc.poll() is None:
            self.chan.send({"op": "quit"})
            try:
                self.proc.wait(scaled())
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.chan.close()
        self._alive = False
        try:
            os.unlink(self.log_path)
        except OSError:
            pass
