"""Planted-bug variants of the reference registry (registered in harness.reference.variants).

Each is a subclass of :class:`~harness.reference.registry.Registry` that breaks one rule of it.  From kvcached's
review and seed: :class:`ConcurrentStopReportsTrue`, :class:`DropRegistrationOnError`, :class:`RestartDropsOld`
and :class:`UnboundedExitHook`.  Modelled on a mutant of the recorded mutation measurement (docs/mutation.md)
that the scenario library did not notice before:

* :class:`HookPerStart`: the exit hook is registered with atexit at every start (registry.py's
  ``self._hooked = True`` lost), so a process that restarted its listener runs it once per start
  (scenarios/exit-hook-runs-once-after-a-restart.yaml);
* :class:`ExitHookWaitsASecond`: each listener the hook waits for gets at least a second, whatever is
  left of the budget (``max(1.0, ...)`` for ``max(0.0, ...)``), so a budget under a second is not kept
  (scenarios/exit-hook-keeps-a-short-budget.yaml);
* :class:`ExitHookSaysOk`: the exit hook records ``ok`` whatever it left registered (registry.py's ``ok = False``
  lost), so its record says every listener stopped when one could not drain
  (scenarios/exit-hook-bounded-when-it-cannot-drain.yaml, checker exit_hook_reports).
"""

from __future__ import annotations

import atexit
import time

from harness.reference.listener import WorkerListener
from harness.reference.registry import Registry

__all__ = ["ConcurrentStopReportsTrue", "DropRegistrationOnError", "RestartDropsOld", "UnboundedExitHook",
           "HookPerStart", "ExitHookWaitsASecond", "ExitHookSaysOk", "MIN_WAIT_S"]

MIN_WAIT_S = 1.0  # ExitHookWaitsASecond: the floor of each listener's wait


class HookPerStart(Registry):
    """start() registers the exit hook with atexit at every start, not once: at exit it runs once per start."""

    def start(self, listener: WorkerListener) -> WorkerListener:
        started = super().start(listener)
        if self._want_hook:
            atexit.register(self.exit_hook)  # again: the registry's own registration is the first
        return started


class ExitHookWaitsASecond(Registry):
    """The exit hook gives each listener it waits for at least MIN_WAIT_S, whatever is left of its budget."""

    def exit_hook(self) -> None:
        left = self.listeners()
        self.rec.emit("exit_hook_started", listeners=len(left), budget=self.exit_budget)
        deadline = time.monotonic() + self.exit_budget
        for listener in left:
            listener._begin_stop()
        ok = True
        for listener in left:
            if listener.stop(max(MIN_WAIT_S, deadline - time.monotonic())):
                self._forget(self.key_of(listener), listener)
            else:
                ok = False
        self.rec.emit("exit_hook_finished", ok=ok, left=len(self))


class ConcurrentStopReportsTrue(Registry):
    """kvcached review: stop_all empties the registry first, so a concurrent stop sees nothing
    left and reports True while the first is still draining."""

    def stop_all(self, timeout: float | None = None) -> bool:
        with self._lock:
            left = list(self._entries.values())
            self._entries.clear()
        ok = all([listener.stop(timeout) for listener in left])
        if not ok:
            with self._lock:
                for listener in left:
                    if not listener.torn_down:
                        self._entries[self.key_of(listener)] = listener
        return ok


class DropRegistrationOnError(Registry):
    """kvcached review: a cleanup exception drops the entry, leaving nothing for a retry."""

    def stop_all(self, timeout: float | None = None) -> bool:
        ok = True
        for listener in self.listeners():
            try:
                ok = listener.stop(timeout) and ok
            except Exception:
                ok = False
            finally:
                self._forget(self.key_of(listener), listener)
        self.rec.emit("stop_all_returned", ok=ok, left=len(self))
        return ok


class RestartDropsOld(Registry):
    """start() replaces a registered listener whether or not it stopped."""

    def _stop_old(self, old: WorkerListener) -> bool:
        old.stop()
        return True


class UnboundedExitHook(Registry):
    """The kvcached seed's hidden cost: the exit hook drains each listener for its full timeout."""

    def exit_hook(self) -> None:
        self.rec.emit("exit_hook_started", listeners=len(self), budget=None)
        for listener in self.listeners():
            listener.stop()
        self.rec.emit("exit_hook_finished", ok=len(self) == 0, left=len(self))


class ExitHookSaysOk(Registry):
    """The exit hook's record says ok whatever it left: a listener that could not drain is reported stopped."""

    def exit_hook(self) -> None:
        left = self.listeners()
        self.rec.emit("exit_hook_started", listeners=len(left), budget=self.exit_budget)
        deadline = time.monotonic() + self.exit_budget
        for listener in left:
            listener._begin_stop()
        for listener in left:
            if listener.stop(max(0.0, deadline - time.monotonic())):
                self._forget(self.key_of(listener), listener)
        self.rec.emit("exit_hook_finished", ok=True, left=len(self))
