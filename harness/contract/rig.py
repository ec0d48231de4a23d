"""The test rig for stop-contract checks: workers of one variant, clients, and cleanup.

A :class:`Rig` starts reference workers built from a :class:`Variant`'s classes
in a private registry, speaks the wire as a client (also half a frame), and on
close releases every failpoint and takes every listener down, even a variant's
that cannot stop by itself, so a check never leaks a thread, socket or path.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness import failpoints
from harness.errors import HarnessError
from harness.history import Event, Recorder
from harness.reference import wire
from harness.reference.listener import Backend, ListenerConfig, WorkerListener
from harness.reference.variants import Variant
from harness.reference.worker import ReferenceWorker, WorkerSpec
from harness.timeouts import scaled

__all__ = ["ContractViolation", "Rig", "Pending", "violated", "recorded"]

MiB = 1 << 20
_COLLECTING: list[list[Recorder]] = []  # one list per open recorded(): the recorder of every Rig made inside


@contextmanager
def recorded() -> Iterator[list[Recorder]]:
    """Collect the recorder of every :class:`Rig` made inside: the histories a check produced, for the checkers."""
    recorders: list[Recorder] = []
    _COLLECTING.append(recorders)
    try:
        yield recorders
    finally:
        _COLLECTING.remove(recorders)


class ContractViolation(HarnessError, AssertionError):
    """A line of the stop contract was broken; the message says how."""


def violated(message: str) -> ContractViolation:
    return ContractViolation(message)


class Pending:
    """A call running on its own thread; ``result()`` waits for it (safety timeout)."""

    def __init__(self, fn: Callable[[], Any], name: str) -> None:
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as exc:
            self._error = exc
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> Any:
        if not self._done.wait(scaled() if timeout is None else timeout):
            raise violated(f"{self._thread.name} did not finish within {timeout or scaled():.1f}s")
        if self._error is not None:
            raise self._error
        return self._value


class Rig:
    """Workers of one variant under one root, with a recorder for the history."""

    def __init__(self, variant: Variant, root: Path, *, drain_timeout: float = 5.0, ipc: str = "c") -> None:
        self.variant = variant
        self.root = root
        self.ipc = ipc
        self.rec = Recorder(role="worker")
        for recorders in _COLLECTING:
            recorders.append(self.rec)
        self.registry = variant.registry(recorder=self.rec)
        self.config = ListenerConfig(drain_timeout=drain_timeout)
        self.workers: list[ReferenceWorker] = []
        self.socks: list[socket.socket] = []
        self._pending: list[Pending] = []
        failpoints.set_observer(self.rec.emit)

    # ---------------------------------------------------------------- workers
    def worker(self, rank: int = 0, pp: int = 0, backend: Backend | None = None) -> ReferenceWorker:
        spec = WorkerSpec(self.ipc, rank=rank, pp=pp, root=str(self.root), config=self.config,
                          capacity=64 * MiB)
        w = self.variant.worker(spec, registry=self.registry, listener_cls=self.variant.listener,
                                backend=backend, recorder=self.rec)
        self.workers.append(w)
        w.start()
        return w

    def listener(self, w: ReferenceWorker) -> WorkerListener:
        assert w.listener is not None
        return w.listener

    # ---------------------------------------------------------------- clients
    def connect(self, w: ReferenceWorker) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(scaled())
        s.connect(w.path)
        self.socks.append(s)
        return s

    def request(self, w: ReferenceWorker, req: wire.Request, timeout: float | None = None) -> wire.Reply:
        s = self.connect(w)
        if timeout is not None:
            s.settimeout(timeout)
        s.sendall(wire.encode_request(req))
        return wire.decode_reply(wire.recv_frame(s))

    def request_async(self, w: ReferenceWorker, req: wire.Request) -> Pending:
        p = Pending(lambda: self.request(w, req), name=f"client-{req.cmd}")
        self._pending.append(p)
        return p

    def call_async(self, fn: Callable[[], Any], name: str) -> Pending:
        p = Pending(fn, name=name)
        self._pending.append(p)
        return p

    def step(self, kind: str, name: str, fn: Callable[[], Any], category: str = "stop") -> Any:
        """Run ``fn`` as the harness step ``name``, recorded as the scenario Player records one (step_started,
        step_returned with its value and category), so the checkers of steps (stop_result) judge it."""
        self.rec.emit("step_started", step=name, kind=kind, category=category)
        try:
            value = fn()
        except Exception as exc:
            self.rec.emit("step_returned", step=name, kind=kind, category=category, ok=False, value=None,
                          error=str(exc), error_class=type(exc).__name__)
            raise
        self.rec.emit("step_returned", step=name, kind=kind, category=category, ok=True, value=value)
        return value

    def mark(self) -> int:
        """The index of the next event: pass as ``after=`` to wait for what happens next."""
        return len(self.rec.events())

    def wait(self, match: str | Callable[[Event], bool], after: int = 0) -> Event:
        ev = self.rec.wait_for(match, scaled(), after=after)
        if ev is None:
            raise violated(f"no {match if isinstance(match, str) else 'matching'} event within {scaled():.0f}s")
        return ev

    def events(self, kind: str) -> list[Event]:
        return self.rec.events(kind)

    # ---------------------------------------------------------------- cleanup
    def close(self) -> None:
        """Release every failpoint, stop every listener, reap every thread."""
        failpoints.reset()
        for s in self.socks:
            s.close()
        self.registry.stop_all()
        for w in self.workers:
            if w.listener is not None:
                _force_down(w.listener)
            w.allocator.teardown()
        for p in self._pending:
            p._done.wait(scaled())
        failpoints.set_observer(None)

    def __enter__(self) -> Rig:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _force_down(listener: WorkerListener) -> None:
    """Take a listener down with the reference's own seams, whatever its variant broke."""
    if listener.thread is None:
        return
    if not listener.torn_down:
        listener._stopping = True
        WorkerListener._wake(listener)
        for c in list(listener._conns.values()):
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
    if not listener._exited.is_set():
        # a variant may have closed the wake pipe under a sleeping thread: wake it through its own epoll
        r, w = os.pipe()
        try:
            listener._ep.register(r, select.EPOLLIN)
            os.write(w, b"x")
        except (OSError, ValueError):
            pass
        listener._exited.wait(scaled())
        os.close(r)
        os.close(w)
    if not listener.torn_down:
        try:
            WorkerListener._teardown(listener)
        except OSError:
            pass
        listener._torn_down = True

