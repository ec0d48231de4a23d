"""Planted race bugs of the reference listener: each drops one lock the reference takes at a racing point.

The reference takes its listener lock (``_lock``) around every decision that races with ``stop()``: the
dispatch decision, the frame-completion decision and the accept decision, each marked by a comment on its
``with self._lock:`` line; and it serialises teardown between concurrent stops with ``_stop_lock``.  A
variant here runs the reference's own code with exactly one of those ``with`` statements not locking
(:class:`DroppedLock`: the listener's lock, not taken when entered from the line that carries the marker),
so nothing else changes.  They are caught only under pressure at the racing point: the stress scenarios
(harness.scenario.stress) widen it with a failpoint delay and stop the listener inside the window.

Registered by name in harness.reference.variants.VARIANTS.
"""

from __future__ import annotations

import contextlib
import inspect
import linecache
import sys
import threading
from types import TracebackType

from harness.errors import ConfigError
from harness.reference.listener import WorkerListener

__all__ = ["DroppedLock", "UnlockedDispatchDecision", "UnlockedFrameCompletion", "UnlockedAccept",
           "UnlockedConcurrentStops", "DISPATCH", "FRAME", "ACCEPT"]

DISPATCH = "# the dispatch decision"  # the comment on the reference's with-line of each decision
FRAME = "# the frame-completion decision"
ACCEPT = "# the accept decision"


def _require_marker(marker: str) -> None:
    """The reference's source must still mark the decision: otherwise the variant would drop nothing."""
    if marker not in inspect.getsource(WorkerListener):
        raise ConfigError(f"harness.reference.listener no longer marks {marker!r} on a `with self._lock:` line; "
                          f"the race variant dropping that lock has nothing to drop")


class DroppedLock:
    """A stand-in for the listener's lock that is not taken by the ``with`` statement on a line containing
    ``marker`` (and is the real lock everywhere else).  Each thread remembers whether its last enter locked."""

    def __init__(self, lock: threading.Lock, marker: str) -> None:
        self._lock = lock
        self._marker = marker
        self._held = threading.local()

    def _dropped_here(self) -> bool:
        frame = sys._getframe(2)  # the caller of __enter__ / acquire
        return self._marker in linecache.getline(frame.f_code.co_filename, frame.f_lineno)

    def __enter__(self) -> bool:
        stack = self._held.__dict__.setdefault("stack", [])
        if self._dropped_here():
            stack.append(False)
            return True
        self._lock.acquire()
        stack.append(True)
        return True

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._held.stack.pop():
            self._lock.release()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()


class _DropsOneLock(WorkerListener):
    MARKER = ""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        _require_marker(self.MARKER)
        self._lock = DroppedLock(self._lock, self.MARKER)  # type: ignore[assignment]


class UnlockedDispatchDecision(_DropsOneLock):
    """The dispatch decision without the lock: a stop that begins between the decision and the dispatch
    does not see it, and the request is dispatched after stop_started."""

    MARKER = DISPATCH


class UnlockedFrameCompletion(_DropsOneLock):
    """The frame-completion decision without the lock: a connection stop cancels between the check and the
    queueing is queued anyway, and answered after its read was cancelled."""

    MARKER = FRAME


class UnlockedAccept(_DropsOneLock):
    """The accept decision without the lock: a connection accepted while stop takes its snapshot is missed
    by it and joins the stopping listener (accepted after stop_started, then served)."""

    MARKER = ACCEPT


class UnlockedConcurrentStops(WorkerListener):
    """Teardown without ``_stop_lock``: two concurrent stops both tear the listener down, and one of them
    returns True while the other is still tearing it down."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self._stop_lock = contextlib.nullcontext()  # type: ignore[assignment]
