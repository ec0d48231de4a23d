"""One reference worker: its allocator, its listener(s), and the integration shutdown.

This is what kvcached's ``shutdown_kvcached()`` does inside a vLLM worker, made
correct: stop the listeners first, and tear the allocator down only once they
have stopped.  When a drain times out the allocator and every listener are kept
as they are, for a retry (a later ``shutdown()`` or the exit hook).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from harness.events import label
from harness.history import Emitter, NullRecorder
from harness.reference.allocator import DEFAULT_PAGE_SIZE, KVAllocator
from harness.reference.backend import AllocatorBackend
from harness.reference.listener import ListenerConfig, WorkerListener
from harness.reference.paths import socket_path
from harness.reference.registry import REGISTRY, Registry
from harness.reference.serving import Backend

__all__ = ["WorkerSpec", "ReferenceWorker", "DEFAULT_CAPACITY"]

DEFAULT_CAPACITY = 1 << 30  # bytes of KV address space for group 0 (pages use memory only while mapped)


@dataclass(frozen=True)
class WorkerSpec:
    """Where a worker serves and how."""

    ipc: str
    rank: int = 0
    pp: int = 0
    root: str | None = None
    config: ListenerConfig = field(default_factory=ListenerConfig)
    capacity: int = DEFAULT_CAPACITY
    page_size: int = DEFAULT_PAGE_SIZE
    device: str = "cpu"


class ReferenceWorker:
    """A worker rank: allocator + listener, started together, shut down by the contract.

    ``listener_cls`` and ``registry`` are the seams planted-bug variants use.
    """

    def __init__(self, spec: WorkerSpec, *, registry: Registry | None = None,
                 listener_cls: type[WorkerListener] = WorkerListener, backend: Backend | None = None,
                 recorder: Emitter | None = None) -> None:
        self.spec = spec
        self.registry = registry if registry is not None else REGISTRY
        self.rec: Emitter = recorder if recorder is not None else NullRecorder()
        self.allocator = KVAllocator(page_size=spec.page_size, device=spec.device)
        self.backend: Backend = backend if backend is not None else AllocatorBackend(self.allocator)
        self.listener_cls = listener_cls
        self.listener: WorkerListener | None = None
        self._shutdown_lock = threading.Lock()  # one integration shutdown at a time
        self._shut_down = False

    @property
    def path(self) -> str:
        return os.fspath(socket_path(self.spec.ipc, self.spec.rank, self.spec.pp, self.spec.root))

    def start(self) -> WorkerListener:
        """Create group 0's KV tensors and start (and register) the listener.

        Returns: the listener, serving.
        Error handling: ListenerError / ListenerBusy from the registry; an
            allocator this call created is torn down again if the listener
            cannot start (a restart's is left to the listener still serving it).
        """
        first = not self.allocator.kv_tensors_created(0)
        if first:
            self.allocator.create_kv_tensors(0, self.spec.capacity)
        listener = self.listener_cls(self.path, self.backend, rank=self.spec.rank, pp=self.spec.pp,
                                     ipc=self.spec.ipc, config=self.spec.config, recorder=self.rec)
        try:
            self.listener = self.registry.start(listener)
        except Exception:
            if first:  # a refused restart leaves the old listener, and the allocator it serves, intact
                self.allocator.teardown()
            raise
        return self.listener

    def shutdown(self) -> bool:
        """The integration-level shutdown.

        Returns: True once every listener has stopped and the allocator is torn
            down (exactly once, however often this is called); False when a
            listener did not stop: the allocator is then left intact
            (``teardown_deferred``) and a later call retries.
        Error handling: never raises.
        """
        with self._shutdown_lock:
            if self._shut_down:
                return True
            if not self._stop_listeners():
                self.rec.emit("teardown_deferred", worker=label(self.spec.pp, self.spec.rank))
                return False
            worker = label(self.spec.pp, self.spec.rank)
            self.rec.emit("allocator_state", worker=worker, mapped=sorted(self.allocator.mapped_offsets(0)),
                          pending=self.allocator.pending_transaction())
            self.allocator.teardown()
            self.rec.emit("allocator_torn_down", worker=worker)
            self._shut_down = True
            return True

    def _stop_listeners(self) -> bool:
        return self.registry.stop_all()
