"""Safety-net timeouts, stretched on slow machines.

Every wait in lastcall has a timeout that only catches a hang; none is used to
synchronise.  ``LASTCALL_TIMEOUT_SCALE`` (default 1) multiplies them all.
"""

from __future__ import annotations

import math
from typing import Any

from harness import envvars
from harness.errors import ConfigError

__all__ = ["scale", "scaled", "run_scale", "SAFETY_S"]

SAFETY_S = 10.0  # default safety net for one wait, before scaling


def scale() -> float:
    """The factor from LASTCALL_TIMEOUT_SCALE (finite, more than 0 and at most 100), default 1.

    Error handling: ConfigError naming the variable (harness.envvars): inf would disarm every watchdog.
    """
    return envvars.number("LASTCALL_TIMEOUT_SCALE")


def scaled(seconds: float = SAFETY_S) -> float:
    """``seconds`` times the timeout scale."""
    return seconds * scale()


def run_scale(target: Any) -> float:
    """The scale of one run against ``target``: LASTCALL_TIMEOUT_SCALE times the target's ``bound_scale``.

    A target may declare ``bound_scale`` (default 1): every bound and timeout its scenario states is multiplied
    by it in the steps and in the checkers (the run's ``RunRecord.scale``, recorded in verdicts.json).  The
    stand-in engine declares 0.2: the engine scenarios' bounds are written for real vLLM, and the stand-in, up
    in 0.2 s and gone in under 0.1 s, meets a fifth of them with room to spare, so a planted hang is told in a
    fifth of the time (docs/running.md).  Error handling: ConfigError naming the target when ``bound_scale``
    is not a finite number in (0, 100].
    """
    raw = getattr(target, "bound_scale", 1.0)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(raw, bool) or not math.isfinite(value) or not 0 < value <= 100:
        raise ConfigError(f"target {getattr(target, 'name', target)!r}: bound_scale must be a number in (0, 100], "
                          f"found {raw!r}")
    return scale() * value
