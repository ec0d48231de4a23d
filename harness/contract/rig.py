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
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import failpoints
from harness.errors import HarnessError
from harness.history import Event, Recorder
from harness.probes.fs import paths_under
from harness.probes.model import Snapshot
from harness.reference import wire
from harness.reference.listener import ListenerConfig, WorkerListener
from harness.reference.serving import Backend
from harness.reference.variants import Variant
from harness.reference.worker import ReferenceWorker, WorkerSpec
from harness.timeouts import scaled

__all__ = ["ContractViolation", "Rig", "Pending", "Taken", "violated", "recorded", "collect", "paths_snapshot"]

MiB = 1 << 20
_COLLECTING: list[list[Taken]] = []  # one list per open recorded(): every history made inside


@dataclass
class Taken:
    """One history a check produced, for the checkers: its recorder and the snapshots taken beside it."""

    rec: Recorder
    snapshots: dict[str, Snapshot] = field(default_factory=dict)

    def snapshot(self, label: str, root: Path) -> Snapshot:
        """Take (and keep) a snapshot of the paths under ``root``, labelled ``label`` (before, after...)."""
        snap = self.snapshots[label] = paths_snapshot(label, root)
        return snap


def paths_snapshot(label: str, root: Path) -> Snapshot:
    """A snapshot of the paths under ``root`` only (what no_leftover_paths and unlinks_only_own_socket read)."""
    errors: list[str] = []
    t_ns = time.monotonic_ns()
    return Snapshot(label=label, t_ns=t_ns, paths=paths_under(root, errors), errors=tuple(errors),
                    extra={"root": os.fspath(root)})


@contextmanager
def recorded() -> Iterator[list[Taken]]:
    """Collect every history made inside (each :class:`Rig`'s, a child's read back): what a check produced."""
    taken: list[Taken] = []
    _COLLECTING.append(taken)
    try:
        yield taken
    finally:
        _COLLECTING.remove(taken)


def collect(rec: Recorder) -> Taken:
    """Hand ``rec``'s history to every open :func:`recorded` (the checkers judge it with its snapshots)."""
    taken = Taken(rec)
    for histories in _COLLECTING:
        histories.append(taken)
    return taken


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
        self.taken = collect(self.rec)
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

    def stop_all(self) -> bool:
        """Stop every worker of the rig (the registry's stop_all): True only when each stopped."""
        return self.registry.stop_all()

    def registered(self, listener: WorkerListener) -> bool:
        """Whether ``listener`` is still the one registered on its key."""
        return self.registry.get(self.registry.key_of(listener)) is listener

    def torn_down(self, w: ReferenceWorker) -> bool:
        """Whether ``w``'s backend (the allocator) has been torn down."""
        return w.allocator.torn_down

    def tidy(self, w: ReferenceWorker) -> None:
        """Remove the directories ``w``'s listener made that are left empty (a check removed its socket)."""
        self.listener(w)._remove_empty_dirs()

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

    def snapshot(self, label: str) -> Snapshot:
        """Snapshot the paths under the rig's root now, for the checkers of snapshots (``after``: after a stop)."""
        return self.taken.snapshot(label, self.root)

    def mark(self) -> int:
        """The index of the next event: pass as ``after=`` to wait for what happens next."""
        return self.rec.count()

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

