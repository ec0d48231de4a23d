"""Safety-net timeouts, stretched on slow machines.

Every wait in lastcall has a timeout that only catches a hang; none is used to
synchronise.  ``LASTCALL_TIMEOUT_SCALE`` (default 1) multiplies them all.
"""

from __future__ import annotations

from harness import envvars

__all__ = ["scale", "scaled", "SAFETY_S"]

SAFETY_S = 10.0  # default safety net for one wait, before scaling


def scale() -> float:
    """The factor from LASTCALL_TIMEOUT_SCALE (finite, more than 0 and at most 100), default 1.

    Error handling: ConfigError naming the variable (harness.envvars): inf would disarm every watchdog.
    """
    return envvars.number("LASTCALL_TIMEOUT_SCALE")


def scaled(seconds: float = SAFETY_S) -> float:
    """``seconds`` times the timeout scale."""
    return seconds * scale()
