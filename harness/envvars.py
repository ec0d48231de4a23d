"""The numeric ``LASTCALL_*`` environment variables, read one way: finite, bounded, named in every error.

::

    scale = number("LASTCALL_TIMEOUT_SCALE")     # 1.0 when unset; ConfigError for inf, nan, 1e308, -1
    check()                                      # every numeric variable that is set, before a command starts

A value that is not a number, not finite, or outside its bounds is a one-line
:class:`~harness.errors.ConfigError` naming the variable, the value and the range,
e.g. ``LASTCALL_TIMEOUT_SCALE='inf': expected a finite number more than 0 and at
most 100, e.g. 2``.  ``lastcall`` calls :func:`check` before any command, so a bad
value exits 2 before anything starts.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from harness.errors import ConfigError

__all__ = ["Bounds", "NUMERIC", "number", "check"]


@dataclass(frozen=True)
class Bounds:
    """What one variable accepts: ``low`` < value (or <= when ``low_inclusive``) <= ``high``."""

    default: float
    low: float
    high: float
    low_inclusive: bool
    example: str
    unit: str = ""  # " seconds", or "" for a plain factor

    def describe(self) -> str:
        low = f"from {self.low:g}" if self.low_inclusive else f"more than {self.low:g}"
        high = f"to {self.high:g}" if self.low_inclusive else f"and at most {self.high:g}"
        return f"{low} {high}{self.unit}"

    def admits(self, value: float) -> bool:
        above = value >= self.low if self.low_inclusive else value > self.low
        return math.isfinite(value) and above and value <= self.high


NUMERIC: dict[str, Bounds] = {  # every numeric LASTCALL_* variable; a module that reads a new one adds it here
    "LASTCALL_TIMEOUT_SCALE": Bounds(1.0, 0.0, 100.0, False, "2"),  # multiplies every safety-net timeout
    "LASTCALL_IPC_TIMEOUT": Bounds(60.0, 0.0, 3600.0, False, "60", " seconds"),  # the client's request timeout
    "LASTCALL_EXIT_BUDGET": Bounds(1.0, 0.0, 3600.0, True, "1", " seconds"),  # the exit hook's drain budget
    "LASTCALL_ENGINE_LAUNCH_S": Bounds(60.0, 0.0, 3600.0, False, "180", " seconds"),  # one real vLLM launch's bound
    "LASTCALL_ENGINE_PRELOAD": Bounds(0.0, 0.0, 1.0, True, "1"),  # 0: real vLLM launches exec; 1: fork a zygote
    "LASTCALL_ENGINE_CHAIN": Bounds(1.0, 0.0, 1.0, True, "0"),  # 1: ./dev vllm-engine-test chains scenarios; 0: alone
}


def number(name: str) -> float:
    """The value of the numeric variable ``name`` (one of :data:`NUMERIC`), or its default when unset.

    Error handling: ConfigError ``NAME='raw': expected a finite number RANGE, e.g. EXAMPLE``
        when the value is not a number, not finite, or out of range.
    """
    bounds = NUMERIC[name]
    raw = os.environ.get(name)
    if raw is None:
        return bounds.default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not bounds.admits(value):
        raise ConfigError(f"{name}={raw!r}: expected a finite number {bounds.describe()}, e.g. {bounds.example}")
    return value


def check() -> None:
    """Parse every numeric variable that is set; the first bad one raises (see :func:`number`)."""
    for name in NUMERIC:
        number(name)
