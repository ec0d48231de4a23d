"""Planted race bugs of the reference listener: each drops one lock the reference takes at a racing point.

The reference takes its listener lock (``_lock``) around every decision that races with ``stop()``: the
dispatch decision, the frame-completion decision and the accept decision, each with its racing-point
failpoint inside the block (and a comment on its ``with self._lock:`` line); and it serialises teardown
between concurrent stops with ``_stop_lock``.  A variant here runs the reference's own code with exactly one
of those ``with`` statements not locking (:class:`DroppedLock`: the listener's lock, not taken by the
``with`` that encloses the named site), so nothing else changes.  The ``with`` is found in the loaded
bytecode (:func:`with_line`), never in the source file, which may have changed on disk since the import.
They are caught only under pressure at the racing point: the stress scenarios
(harness.scenario.stress) widen it with a failpoint delay and stop the listener inside the window.

Registered by name in harness.reference.variants.VARIANTS.
"""

from __future__ import annotations

import contextlib
import dis
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from harness.errors import ConfigError
from harness.reference.listener import WorkerListener

__all__ = ["DroppedLock", "UnlockedDispatchDecision", "UnlockedFrameCompletion", "UnlockedAccept",
           "UnlockedConcurrentStops", "DISPATCH", "FRAME", "ACCEPT", "with_line"]

DISPATCH = "# the dispatch decision"  # the comment on the reference's with-line of each decision (for readers)
FRAME = "# the frame-completion decision"
ACCEPT = "# the accept decision"


def with_line(func: Callable[..., Any], site: str) -> tuple[str, int]:
    """(file, line) of the ``with self._lock:`` of ``func`` that encloses ``failpoints.hit(site)``, read from its
    bytecode: the last ``with`` entered before the site's constant is loaded, its context ``self._lock``."""
    code = func.__code__
    last: int | None = None
    prev: list[dis.Instruction] = []
    for ins in dis.get_instructions(code):
        if ins.opname == "BEFORE_WITH":
            ctx = [i.argval for i in prev[-2:]]
            last = ins.positions.lineno if ins.positions is not None and ctx == ["self", "_lock"] else None
        elif ins.opname == "LOAD_CONST" and ins.argval == site:
            if last is None:
                break
            return code.co_filename, last
        prev.append(ins)
    raise ConfigError(f"{func.__qualname__} hits no failpoint {site!r} inside a `with self._lock:`; the race "
                      f"variant dropping that lock has nothing to drop")


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
    METHOD = ""  # the reference's method, and the racing-point site inside the with block dropped
    SITE = ""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        where = with_line(getattr(WorkerListener, self.METHOD), self.SITE)
        self._lock = DroppedLock(self._lock, where)  # type: ignore[assignment]


class UnlockedDispatchDecision(_DropsOneLock):
    """The dispatch decision without the lock: a stop that begins between the decision and the dispatch
    does not see it, and the request is dispatched after stop_started."""

    METHOD, SITE = "_dispatch_ready", "listener.dispatch_decided"  # the with-line marked DISPATCH


class UnlockedFrameCompletion(_DropsOneLock):
    """The frame-completion decision without the lock: a connection stop cancels between the check and the
    queueing is queued anyway, and answered after its read was cancelled."""

    METHOD, SITE = "_on_readable", "listener.frame_completing"  # the with-line marked FRAME


class UnlockedAccept(_DropsOneLock):
    """The accept decision without the lock: a connection accepted while stop takes its snapshot is missed
    by it and joins the stopping listener (accepted after stop_started, then served)."""

    METHOD, SITE = "_accept", "listener.accept_decided"  # the with-line marked ACCEPT


class UnlockedConcurrentStops(WorkerListener):
    """Teardown without ``_stop_lock``: two concurrent stops both tear the listener down, and one of them
    returns True while the other is still tearing it down."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self._stop_lock = contextlib.nullcontext()  # type: ignore[assignment]
