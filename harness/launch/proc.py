"""A handle on one child process of a run (:class:`Proc`): its control channel's commands and replies, its exit,
its stderr; and :class:`RemoteError`, a command that failed inside the child.  The run that owns them is
harness.launch.cluster's :class:`~harness.launch.cluster.Cluster`, which reads each child's channel and reaps it."""

from __future__ import annotations

import itertools
import os
import signal
import threading
from typing import Any

from harness.errors import HarnessError
from harness.launch.channel import Channel
from harness.launch.pauses import resume_before_kill
from harness.timeouts import scaled

__all__ = ["Proc", "RemoteError"]


class RemoteError(HarnessError):
    """A command failed inside a child; ``error_type`` is the wire error type when there was one."""

    def __init__(self, message: str, error_type: str | None = None, error_class: str | None = None) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.error_class = error_class  # the exception class raised in the child, e.g. StateConsistencyError


class Proc:
    """A handle on one child process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.role = ""
        self.label = ""
        self.path = ""  # the worker's socket path, or the engine's usage segment
        self.stderr_path = ""
        self.chan: Channel | None = None
        self.ready = threading.Event()
        self.exited = threading.Event()
        self.status: int | None = None  # wait status
        self.exit_t_ns = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"<Proc {self.label} pid={self.pid}>"

    @property
    def exit_code(self) -> int | None:
        return None if self.status is None else os.waitstatus_to_exitcode(self.status)

    @property
    def alive(self) -> bool:
        return not self.exited.is_set()

    def _reply(self, msg: dict[str, Any]) -> None:
        with self._cond:
            self._replies[int(msg["id"])] = msg
            self._cond.notify_all()

    def _gone(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def send(self, op: str, **args: Any) -> int:
        """Send a command without waiting; returns its id for :meth:`result`."""
        if self.chan is None:
            raise RemoteError(f"{self.label or self.pid}: no control connection")
        cid = next(self._ids)
        if not self.chan.send({"t": "cmd", "id": cid, "op": op, "args": args}):
            raise RemoteError(f"{self.label}: control connection lost (process exited?)")
        return cid

    def result(self, cid: int, timeout: float | None = None) -> Any:
        """Wait for the reply to command ``cid``. RemoteError if it failed, or the process went away."""
        limit = scaled() if timeout is None else timeout
        with self._cond:
            self._cond.wait_for(lambda: cid in self._replies or self.exited.is_set(), limit)
            msg = self._replies.pop(cid, None)
        if msg is None:
            why = f"exited with status {self.exit_code}" if self.exited.is_set() else f"no reply in {limit:.1f}s"
            raise RemoteError(f"{self.label}: command {cid} got no reply: {why}")
        if not msg.get("ok"):
            raise RemoteError(f"{self.label}: {msg.get('error')}", msg.get("error_type"), msg.get("error_class"))
        return msg.get("value")

    def call(self, op: str, *, timeout: float | None = None, **args: Any) -> Any:
        """Run ``op`` in the child and return its value (RemoteError on failure)."""
        return self.result(self.send(op, **args), timeout)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.exited.is_set():
            return  # reaped: its pid may belong to someone else by now
        resume_before_kill([self.pid])  # one the harness paused is resumed first (harness.launch.pauses)
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def wait_exited(self, timeout: float | None = None) -> bool:
        return self.exited.wait(scaled() if timeout is None else timeout)

    def stderr_tail(self, n: int = 2000) -> str:
        try:
            with open(self.stderr_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""
