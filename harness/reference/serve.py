"""``lastcall serve``: one reference worker in the foreground until SIGTERM or SIGINT.

The protocol with whoever launched it: the socket path is the first line on
stdout, written (and flushed) once the listener accepts connections; the
process then blocks until SIGTERM or SIGINT, shuts the worker down by the stop
contract (retrying a drain that timed out until it succeeds), and exits 0 with
nothing left behind: socket, owner record and directories are gone.

Signals are caught through :func:`signal.set_wakeup_fd` on a self-pipe: the
main thread blocks in ``select`` on the pipe, so a signal is never missed (one
that arrives before the path is printed is still in the pipe) and nothing polls.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TextIO

from harness.errors import ConfigError
from harness.reference.worker import ReferenceWorker, WorkerSpec

__all__ = ["STOP_SIGNALS", "RETRY_PAUSE_S", "serve", "signal_name"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # either one starts the shutdown
RETRY_PAUSE_S = 1.0  # seconds between shutdown attempts when the drain failed for a reason other than a stuck handler

_Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


def _absorb(signum: int, frame: FrameType | None) -> None:
    """A Python-level handler that does nothing: the wakeup fd carries the signal number."""


class _SignalPipe:
    """Route STOP_SIGNALS into a non-blocking self-pipe for as long as the context is open."""

    def __init__(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise ConfigError("serve() must run on the main thread: it takes over SIGTERM and SIGINT")
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._old_fd = -1
        self._old: dict[int, _Handler] = {}

    def __enter__(self) -> _SignalPipe:
        self._old_fd = signal.set_wakeup_fd(self.w, warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            self._old[sig] = signal.signal(sig, _absorb)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        signal.set_wakeup_fd(self._old_fd)
        os.close(self.r)
        os.close(self.w)

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until a signal arrives (or ``timeout`` passes): its number, or None."""
        readable, _, _ = select.select([self.r], [], [], timeout)
        if not readable:
            return None
        try:
            data = os.read(self.r, 64)
        except BlockingIOError:
            return None
        return data[0] if data else None


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _shutdown(worker: ReferenceWorker, pipe: _SignalPipe, err: TextIO) -> None:
    """Shut down until it succeeds; between attempts wait for the stuck handler to finish."""
    attempt = 1
    while not worker.shutdown():
        listener = worker.listener
        print(f"lastcall serve: {listener.label if listener else 'worker'} did not drain within "
              f"{worker.spec.config.drain_timeout:g}s (attempt {attempt}); retrying", file=err, flush=True)
        attempt += 1
        thread = listener.thread if listener is not None else None
        if thread is not None and thread.is_alive():
            thread.join(RETRY_PAUSE_S)  # returns as soon as the handler finishes
        else:
            pipe.wait(RETRY_PAUSE_S)  # a cleanup error: pause, so a persistent one does not spin


def serve(spec: WorkerSpec, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run one reference worker (process-wide registry) until SIGTERM or SIGINT.

    Returns: 0 once the worker has shut down and everything it created is gone.
    Resource handling: the signal handlers and wakeup fd in place before are
        restored on return; a worker that started is always shut down, also
        when printing the path fails.
    Error handling: ConfigError when not on the main thread or for a bad spec
        (path too long); ListenerError when the socket cannot be bound (for
        example a live owner holds it); nothing is left behind in either case.
    """
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    with _SignalPipe() as pipe:
        worker = ReferenceWorker(spec)
        worker.start()
        try:
            print(worker.path, file=out, flush=True)
            signum = pipe.wait()
            while signum is None:  # a spurious wakeup: keep waiting
                signum = pipe.wait()
            print(f"lastcall serve: {signal_name(signum)}: shutting down {worker.path}", file=err, flush=True)
        finally:
            _shutdown(worker, pipe, err)
    return 0
