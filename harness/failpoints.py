"""Named failpoints: exact fault injection at fixed sites inside the system under test.

A site is a string such as ``listener.frame_read`` or ``backend.map_to_kv_tensors``;
the code under test calls :func:`hit` there.  While nothing is armed at a site,
``hit`` is one dict lookup (see benchmarks/failpoint_cost.py).  A test arms a site
with an action, waits until a thread reaches it, and releases it::

    fp = failpoints.arm("backend.map_to_kv_tensors", "pause")
    ...                       # a client sends a map request
    fp.wait_reached()         # the handler is now parked inside the backend call
    ...                       # stop the listener, look at what it does
    fp.release()              # the handler goes on

Actions: ``pause`` (park until released), ``raise`` (raise InjectedFault),
``delay`` (hold the thread for ``delay`` seconds: the fault itself, never a
synchronisation; a release ends it early, so a test that has seen what it judges
need not wait the rest of it out), ``crash`` (the process dies at once with SIGKILL),
``pass`` (nothing happens; only the hit is counted and can be waited for),
``call`` (run ``fn()`` on the thread that hit the site: e.g. stop the listener from
inside its own handler).
``count`` limits the action to the next n hits; later hits pass through.

Every hit, arm and release is reported to the observer installed with
:func:`set_observer` (the history recorder) as ``fault_armed``,
``fault_reached`` and ``fault_released`` events.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from harness.errors import FailpointError, InjectedFault

__all__ = ["ACTIONS", "Failpoint", "arm", "disarm", "reset", "hit", "get", "armed", "set_observer"]

ACTIONS = ("pause", "raise", "delay", "crash", "pass", "call")
MAX_PARK_S = 300.0  # a parked thread never waits longer than this: a safety net, not a timer

Observer = Callable[..., Any]
_ARMED: dict[str, Failpoint] = {}
_LOCK = threading.Lock()
_observer: Observer | None = None


def _notify(kind: str, **data: Any) -> None:
    obs = _observer
    if obs is not None:
        obs(kind, **data)


class Failpoint:
    """One armed site.  Created by :func:`arm`; thread-safe."""

    def __init__(self, site: str, action: str, *, count: int | None, delay: float, message: str,
                 fn: Callable[[], Any] | None = None) -> None:
        self.site = site
        self.fn = fn
        self.action = action
        self.count = count  # hits left that take the action; None = every hit
        self.delay = delay
        self.message = message
        self.hits = 0  # hits that took the action
        self._cond = threading.Condition()
        self._released = False
        self._gate = threading.Event()

    def fire(self) -> None:
        """Called by :func:`hit`: take the action if this hit is still counted."""
        with self._cond:
            if self.count is not None:
                if self.count <= 0:
                    return
                self.count -= 1
            self.hits += 1
            self._cond.notify_all()
            n = self.hits
        _notify("fault_reached", site=self.site, action=self.action, hit=n)
        if self.action == "pause":
            self._gate.wait(MAX_PARK_S)
        elif self.action == "raise":
            raise InjectedFault(f"failpoint {self.site}: {self.message}")
        elif self.action == "delay":
            self._gate.wait(self.delay)  # the injected latency is the fault, up to a release
        elif self.action == "call" and self.fn is not None:
            self.fn()
        elif self.action == "crash":
            os.kill(os.getpid(), signal.SIGKILL)

    def wait_reached(self, n: int = 1, timeout: float = 10.0) -> bool:
        """Block until the site has been hit ``n`` times in all; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self.hits >= n, timeout)

    def release(self) -> None:
        """Let every parked or delayed thread go on, and every later hit pass without parking or delay."""
        with self._cond:
            if self._released:
                return
            self._released = True
        self._gate.set()
        _notify("fault_released", site=self.site, hits=self.hits)

    @property
    def released(self) -> bool:
        return self._released


def arm(site: str, action: str = "pause", *, count: int | None = None, delay: float = 0.0,
        message: str = "injected fault", fn: Callable[[], Any] | None = None) -> Failpoint:
    """Arm ``site`` with ``action``; replaces (and releases) whatever was armed there.

    Raises FailpointError for an unknown action or a bad count.
    """
    if action not in ACTIONS:
        raise FailpointError(f"unknown failpoint action {action!r}; use one of {', '.join(ACTIONS)}")
    if count is not None and count < 1:
        raise FailpointError(f"count must be >= 1 or None, got {count!r}")
    if action == "call" and fn is None:
        raise FailpointError("action 'call' needs fn=, the callable to run at the site")
    fp = Failpoint(site, action, count=count, delay=delay, message=message, fn=fn)
    with _LOCK:
        old = _ARMED.get(site)
        _ARMED[site] = fp
    if old is not None:
        old.release()
    _notify("fault_armed", site=site, action=action, count=count)
    return fp


def disarm(site: str) -> None:
    """Remove the failpoint at ``site`` and release any thread parked there."""
    with _LOCK:
        fp = _ARMED.pop(site, None)
    if fp is not None:
        fp.release()


def reset() -> None:
    """Disarm every site, releasing every parked thread (test teardown)."""
    with _LOCK:
        fps = list(_ARMED.values())
        _ARMED.clear()
    for fp in fps:
        fp.release()


def get(site: str) -> Failpoint | None:
    """The failpoint armed at ``site``, if any."""
    return _ARMED.get(site)


def armed() -> dict[str, Failpoint]:
    """A snapshot of every armed site."""
    with _LOCK:
        return dict(_ARMED)


def hit(site: str) -> None:
    """Called at a site by the code under test. Costs one dict lookup when disarmed."""
    fp = _ARMED.get(site)
    if fp is not None:
        fp.fire()


def set_observer(observer: Observer | None) -> None:
    """Install the callable told of every arm, reach and release (``observer(kind, **data)``)."""
    global _observer
    _observer = observer
