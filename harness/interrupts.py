"""SIGTERM as an interrupt: a kill unwinds a harness process like ^C, through every run's cleanup.

Used by the ``lastcall`` command, the pytest plugin (controller and xdist workers) and
``python -m harness.scenario.table``.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

__all__ = ["sigterm_interrupts"]


def sigterm_interrupts() -> Callable[[], None]:
    """Make SIGTERM unwind this process like ^C, so every run's finally blocks close its clusters.

    Without it, a ``kill`` of ``lastcall run`` or ``lastcall bench`` ends the
    harness at once: the fork server then kills the engine and workers, and the
    usage segments and sockets they own stay behind for ``lastcall ctl sweep``.
    Installed only on the main thread and only over the default action (a
    command with its own handler, ``serve``, keeps it); returns the undo.
    """
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return lambda: None

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("SIGTERM")

    def restore() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    signal.signal(signal.SIGTERM, interrupt)
    return restore
