"""A listener served from a forked child process: the shape the real listeners run in.

kvcached's client lives in the engine process and its listener in each worker
process; a benchmark that puts client and listener on two threads of one
process makes them take turns on one GIL, so every microsecond of the
listener's connection bookkeeping (the EOF read and close after a reply, which
in a deployment run on the worker's core while the engine prepares its next
request) lands on the client's clock.  :class:`ServerProcess` runs the listener
in a child instead: the client times round trips from the parent, as the engine
would.

The child is forked (no exec: the listener's class and backend are whatever the
factory builds) and talks to the parent over two pipes, no sleeps:

* ready: one line ``<socket path> <serving thread's tid>`` once ``start()`` returned;
* stop: the parent writes ``stop`` (or dies: EOF does the same), the child calls
  ``stop()`` and answers one line ``ok <detail>`` or ``failed <detail>``, then
  ``os._exit``; the parent reaps it.  A child silent for ``timeout`` (default
  the scaled safety net) is killed and reaped, and the parent raises: a start
  or stop that hangs never hangs the benchmark.

:meth:`ServerProcess.cpu_ns` reads the serving thread's CPU time from
``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds, Linux), the cross-process
counterpart of ``pthread_getcpuclockid``.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Protocol

from harness.timeouts import scaled

__all__ = ["Served", "ServerProcess", "two_cpus", "on_cpu", "pin_threads"]


# ---------------------------------------------------------------- placement on CPUs
# On a 2-CPU VM a round trip takes about 20 us when the listener shares the client's CPU and about 60 us when the
# request wakes the other; unpinned, which it is changes from window to window.  The benchmarks pin the client to
# one CPU and every listener to another (benchmarks/ipc_roundtrip.py, lastcall bench).
def two_cpus(enabled: bool = True) -> tuple[int, int] | None:
    """The first two CPUs this process may run on (the client's, the listeners'); None if fewer or not
    ``enabled``."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return (cpus[0], cpus[1]) if enabled and len(cpus) >= 2 else None


def pin_threads(pid: int, cpu: int) -> None:
    """Every thread of process ``pid`` on ``cpu`` (threads it starts later inherit it from their starter)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), {cpu})


@contextlib.contextmanager
def on_cpu(cpu: int | None) -> Iterator[None]:
    """This thread on ``cpu`` for the block (None: where it may run), then back."""
    if cpu is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


class Served(Protocol):
    """What the child serves: a listener with a path, a serving thread, start and stop."""

    @property
    def path(self) -> Path: ...

    def start(self) -> None: ...

    def stop(self) -> bool: ...


class ServerProcess:
    """``with ServerProcess(factory) as sp:`` serves ``factory()[0]`` in a child until the block ends.

    ``factory`` runs in the child and returns the listener and a check called
    after its stop (returns "" when all is well, else what is wrong, e.g. pages
    still mapped).  Leaving the block stops the listener and raises
    RuntimeError if stop returned False, the check failed or the child died.
    """

    def __init__(self, factory: Callable[[], tuple[Served, Callable[[], str]]], name: str = "server",
                 timeout: float | None = None, cpus: frozenset[int] | None = None) -> None:
        self.factory = factory
        self.name = name
        self.cpus = cpus  # the CPUs the child runs on (sched_setaffinity before it serves); None: where it may
        self.timeout = scaled() if timeout is None else timeout  # a safety net for each answer, not a timer
        self.pid = 0
        self.tid = 0
        self.path = ""
        self._cmd_w = -1
        self._out_r = -1

    def __enter__(self) -> ServerProcess:
        # a child makes tensors (the allocator, kvcached): it finds torch loaded, as a fork server's do.  Imported
        # here, not with the module: collecting a test module that imports this one must not load torch
        import torch  # noqa: F401

        cmd_r, cmd_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            for fd in (cmd_r, cmd_w, out_r, out_w):
                os.close(fd)
            raise
        if pid == 0:  # the child: never returns
            os.close(cmd_w)
            os.close(out_r)
            self._child(cmd_r, out_w)
        os.close(cmd_r)
        os.close(out_w)
        self.pid, self._cmd_w, self._out_r = pid, cmd_w, out_r
        line = self._line()
        if not line.startswith("ready "):
            self._reap()
            raise RuntimeError(f"{self.name} (pid {pid}) did not start: {line or 'exited without a word'}")
        _, self.path, tid = line.split(" ")
        self.tid = int(tid)
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        try:
            os.write(self._cmd_w, b"stop\n")
        except OSError:
            pass  # already gone: the reply line says why
        try:
            line = self._line()
        except RuntimeError:
            if et is None:
                raise
            return  # the body's own error says more; the child is killed and reaped
        code = self._reap()
        if et is None and (not line.startswith("ok") or code != 0):
            raise RuntimeError(f"{self.name} (pid {self.pid}) did not stop cleanly (exit {code}): "
                               f"{line or 'no answer'}")

    def cpu_ns(self) -> int:
        """CPU time the serving thread has used so far, in nanoseconds."""
        with open(f"/proc/{self.pid}/task/{self.tid}/schedstat") as f:
            return int(f.read().split()[0])

    # ------------------------------------------------------------ internals
    def _line(self) -> str:
        """The child's next line; a child silent past ``timeout`` (a start or stop that hangs) is killed."""
        data = b""
        deadline = time.monotonic() + self.timeout
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._out_r], [], [], left)[0]:
                os.kill(self.pid, signal.SIGKILL)
                self._reap()
                raise RuntimeError(f"{self.name} (pid {self.pid}) said nothing for {self.timeout:g}s "
                                   f"(a start or stop that hangs): killed")
            chunk = os.read(self._out_r, 4096)
            if not chunk:  # the child exited
                break
            data += chunk
        return data.decode(errors="replace").strip()

    def _reap(self) -> int:
        for fd in (self._cmd_w, self._out_r):
            if fd >= 0:
                os.close(fd)
        self._cmd_w = self._out_r = -1
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)

    def _child(self, cmd_r: int, out_w: int) -> None:
        code = 2
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C is the parent's: it stops us through the pipe
            if self.cpus:
                os.sched_setaffinity(0, self.cpus)  # before its serving thread starts: the thread inherits it
            listener, check = self.factory()
            listener.start()
            thread = getattr(listener, "thread", None)
            tid = getattr(thread, "native_id", None)
            if tid is None:
                raise RuntimeError(f"{type(listener).__name__} has no serving thread after start()")
            os.write(out_w, f"ready {os.fspath(listener.path)} {tid}\n".encode())
            os.read(cmd_r, 64)  # "stop", or EOF when the parent is gone
            ok = listener.stop()
            problem = check() if ok else "stop() returned False"
            if problem:
                os.write(out_w, f"failed {problem}\n".encode())
                code = 1
            else:
                os.write(out_w, b"ok\n")
                code = 0
        except BaseException as exc:  # reported to the parent, never raised out of a forked child
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            try:
                os.write(out_w, f"failed {last}\n".encode())
            except OSError:
                pass
        finally:
            os._exit(code)
