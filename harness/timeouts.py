"""Safety-net timeouts, stretched on slow machines.

Every wait in lastcall has a timeout that only catches a hang; none is used to
synchronise.  ``LASTCALL_TIMEOUT_SCALE`` (default 1) multiplies them all.
"""

from __future__ import annotations

import os

from harness.errors import ConfigError

__all__ = ["scale", "scaled", "SAFETY_S"]

SAFETY_S = 10.0  # default safety net for one wait, before scaling


def scale() -> float:
    """The factor from LASTCALL_TIMEOUT_SCALE (a positive number), default 1."""
    raw = os.environ.get("LASTCALL_TIMEOUT_SCALE", "1")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"LASTCALL_TIMEOUT_SCALE must be a positive number such as 2, got {raw!r}")
    return value


def scaled(seconds: float = SAFETY_S) -> float:
    """``seconds`` times the timeout scale."""
    return seconds * scale()
