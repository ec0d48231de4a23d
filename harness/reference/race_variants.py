"""Planted race bugs of the reference listener: each drops one lock the reference takes at a racing point.

The reference takes its listener lock (``_lock``) around every decision that races with ``stop()``: the
dispatch decision, the frame-completion decision and the accept decision, each marked by a comment on its
``with self._lock:`` line; and it serialises teardown between concurrent stops with ``_stop_lock``.  A
variant here runs the reference's own code with exactly one of those ``with`` statements not locking
(:class:`DroppedLock`: the listener's lock, not taken by the ``with`` on the line that carries the marker),
so nothing else changes.  They are caught only under pressure at the racing point: the stress scenarios
(harness.scenario.stress) widen it with a failpoint delay and stop the listener inside the window.

Registered by name in harness.reference.variants.VARIANTS.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import threading
from types import TracebackType

from harness.errors import ConfigError
from harness.reference.listener import WorkerListener

__all__ = ["DroppedLock", "UnlockedDispatchDecision", "UnlockedFrameCompletion", "UnlockedAccept",
           "UnlockedConcurrentStops", "DISPATCH", "FRAME", "ACCEPT", "marked_line"]

DISPATCH = "# the dispatch decision"  # the comment on the reference's with-line of each decision
FRAME = "# the frame-completion decision"
ACCEPT = "# the accept decision"


def marked_line(cls: type, marker: str) -> tuple[str, int]:
    """(file, line) of the one ``with self._lock:`` line of ``cls``'s source that carries ``marker``."""
    lines, first = inspect.getsourcelines(cls)
    found = [first + i for i, line in enumerate(lines) if "with self._lock:" in line and marker in line]
    if len(found) != 1:
        raise ConfigError(f"{cls.__module__} marks {marker!r} on {len(found)} `with self._lock:` lines, not one; "
                          f"the race variant dropping that lock cannot tell which to drop")
    code_file = next(f.__code__.co_filename for f in vars(cls).values() if inspect.isfunction(f))
    return code_file, found[0]  # the file name its code objects carry, as its frames show it


class DroppedLock:
    """A stand-in for the listener's lock that is not taken by the ``with`` statement at ``where`` (file, line)
    and is the real lock everywhere else.  Each thread remembers whether its last enter locked."""

    def __init__(self, lock: threading.Lock, where: tuple[str, int]) -> None:
        self._lock = lock
        self._where = where
        self._held = threading.local()

    def _dropped_here(self) -> bool:
        frame = sys._getframe(2)  # the caller of __enter__
        return (frame.f_code.co_filename, frame.f_lineno) == self._where

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
        self._lock = DroppedLock(self._lock, marked_line(WorkerListener, self.MARKER))  # type: ignore[assignment]


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
