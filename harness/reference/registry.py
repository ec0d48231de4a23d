"""The module-level listener registry: start per (ipc, rank, pp), stop all, the exit hook.

kvcached keys its registry by (rank, pp); the ipc name is part of the key here so
that one process may host several instances (tests do).
"""

from __future__ import annotations

import atexit
import threading
import time

from harness import envvars, failpoints
from harness.errors import ConfigError, ListenerBusy
from harness.history import Emitter, NullRecorder
from harness.reference.listener import WorkerListener

__all__ = ["DEFAULT_EXIT_BUDGET", "Key", "Registry", "REGISTRY", "start_listener", "stop_listeners"]

DEFAULT_EXIT_BUDGET = 1.0  # seconds the exit hook may delay interpreter exit, whatever the count
Key = tuple[str, int, int]  # (ipc, rank, pp)


def _exit_budget_from_env() -> float:
    return envvars.number("LASTCALL_EXIT_BUDGET")  # DEFAULT_EXIT_BUDGET when unset; bounded and finite


class Registry:
    """Listeners of one process by (ipc, rank, pp).

    ``exit_hook=True`` registers :meth:`exit_hook` with atexit on first start.  Its recorder gets
    ``listener_registered`` / ``listener_unregistered`` as a listener enters and leaves it (checker
    registration_kept judges that only a stopped listener leaves), ``stop_all_returned`` and the exit hook's
    ``exit_hook_started`` / ``exit_hook_finished``.
    """

    def __init__(self, *, exit_budget: float | None = None, exit_hook: bool = False,
                 recorder: Emitter | None = None) -> None:
        self.exit_budget = _exit_budget_from_env() if exit_budget is None else exit_budget
        if not self.exit_budget >= 0:
            raise ConfigError(f"exit_budget must be >= 0 seconds, got {self.exit_budget!r}")
        self.rec: Emitter = recorder if recorder is not None else NullRecorder()
        self._want_hook = exit_hook
        self._hooked = False
        self._lock = threading.Lock()  # guards _entries (lifecycle only, never a request path)
        self._entries: dict[Key, WorkerListener] = {}

    @staticmethod
    def key_of(listener: WorkerListener) -> Key:
        return (listener.ipc, listener.rank, listener.pp)

    def get(self, key: Key) -> WorkerListener | None:
        with self._lock:
            return self._entries.get(key)

    def listeners(self) -> list[WorkerListener]:
        with self._lock:
            return list(self._entries.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def start(self, listener: WorkerListener) -> WorkerListener:
        """Start ``listener`` and register it, replacing a registered one on its key.

        Returns: the started listener.
        Error handling: ListenerBusy when the old listener on that key does not
            stop (it stays registered and serving); the new one is not started.
        """
        key = self.key_of(listener)
        old = self.get(key)
        if old is not None:
            if not self._stop_old(old):
                raise ListenerBusy(
                    f"{old.label} of {key[0]!r} is still draining and could not be stopped; the old listener "
                    f"is left running. Retry once its handler finishes, or raise drain_timeout")
            self._forget(key, old)
        listener.start()
        with self._lock:
            self._entries[key] = listener
            if self._want_hook and not self._hooked:
                atexit.register(self.exit_hook)
                self._hooked = True
        self.rec.emit("listener_registered", listener=listener.label, ipc=listener.ipc)
        return listener

    def _stop_old(self, old: WorkerListener) -> bool:
        return old.stop()

    def _forget(self, key: Key, listener: WorkerListener) -> None:
        with self._lock:
            if self._entries.get(key) is not listener:
                return
            del self._entries[key]
        self.rec.emit("listener_unregistered", listener=listener.label, ipc=listener.ipc)

    def stop_all(self, timeout: float | None = None) -> bool:
        """Stop every registered listener.

        Returns: True only when every listener stopped; those that did are
            unregistered, the others stay registered for a retry (a later call or
            the exit hook).  A concurrent call never returns True while one of them
            is still draining: each waits for the same drains.
        Error handling: never raises.
        """
        ok = True
        for listener in self.listeners():
            if listener.stop(timeout):
                self._forget(self.key_of(listener), listener)
            else:
                ok = False
        self.rec.emit("stop_all_returned", ok=ok, left=len(self))
        return ok

    def exit_hook(self) -> None:
        """Stop what is left at interpreter exit, within ``exit_budget`` seconds in all.

        Every listener is told to stop first (reads cancelled, threads woken), then
        each is waited for with what is left of the one budget: exit is never
        delayed by more than the budget, however many listeners cannot drain.
        """
        left = self.listeners()
        self.rec.emit("exit_hook_started", listeners=len(left), budget=self.exit_budget)
        failpoints.hit("exit_hook")
        deadline = time.monotonic() + self.exit_budget
        for listener in left:
            listener._begin_stop()
        ok = True
        for listener in left:
            if listener.stop(max(0.0, deadline - time.monotonic())):
                self._forget(self.key_of(listener), listener)
            else:
                ok = False
        self.rec.emit("exit_hook_finished", ok=ok, left=len(self))


REGISTRY = Registry(exit_hook=True)  # the process-wide registry, drained at exit


def start_listener(listener: WorkerListener) -> WorkerListener:
    """Start and register ``listener`` in the process-wide registry."""
    return REGISTRY.start(listener)


def stop_listeners(timeout: float | None = None) -> bool:
    """Stop every listener of the process-wide registry (True when all stopped)."""
    return REGISTRY.stop_all(timeout)
