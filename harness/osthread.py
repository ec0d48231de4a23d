"""Name the current OS thread (/proc/PID/task/TID/comm), so probes see threads by name.

Python before 3.14 leaves every OS thread named after the process; lastcall's own
threads call :func:`name_os_thread` first thing, so leak checks by name work.
"""

from __future__ import annotations

import ctypes

__all__ = ["name_os_thread"]

PR_SET_NAME = 15  # prctl option (linux/prctl.h); the kernel keeps 15 bytes
_libc: ctypes.CDLL | None = None


def name_os_thread(name: str) -> None:
    """Set the calling thread's kernel name to the first 15 bytes of ``name``; never raises."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        _libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass
