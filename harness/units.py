"""Sizes and durations as people write them: ``512MiB``, ``1GiB``, ``500ms``, ``1.5``.

:func:`parse_size` returns whole bytes, :func:`parse_duration` seconds as a float.
Both raise :class:`~harness.errors.ConfigError` naming the bad value with an
example of a good one, so a CLI flag or a scenario key can pass the message on.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from harness.errors import ConfigError

__all__ = ["SIZE_UNITS", "DURATION_UNITS", "parse_size", "parse_duration"]

SIZE_UNITS: dict[str, int] = {  # suffix (lower case) -> bytes; binary and decimal both accepted
    "": 1, "b": 1,
    "k": 1 << 10, "kib": 1 << 10, "kb": 10**3,
    "m": 1 << 20, "mib": 1 << 20, "mb": 10**6,
    "g": 1 << 30, "gib": 1 << 30, "gb": 10**9,
    "t": 1 << 40, "tib": 1 << 40, "tb": 10**12,
}
DURATION_UNITS: dict[str, Fraction] = {  # suffix -> seconds; no suffix means seconds
    "": Fraction(1), "s": Fraction(1), "ms": Fraction(1, 1000), "us": Fraction(1, 10**6),
    "ns": Fraction(1, 10**9), "m": Fraction(60), "min": Fraction(60), "h": Fraction(3600),
}
_NUMBER_UNIT = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*")


def _split(text: str) -> tuple[Fraction, str] | None:
    match = _NUMBER_UNIT.fullmatch(text)
    if match is None:
        return None
    return Fraction(match.group(1)), match.group(2).lower()


def parse_size(value: str | int) -> int:
    """Bytes from ``1GiB``, ``512MiB``, ``2MiB``, ``64k``, ``1.5GiB`` or plain ``1048576``.

    Binary suffixes (KiB, MiB, GiB, TiB; K, M, G, T alone) are powers of 1024,
    decimal ones (kB, MB, GB, TB) powers of 1000; case does not matter.

    Returns: a whole number of bytes >= 0.
    Error handling: ConfigError naming the value, when it is not a size, is
        negative, or is not a whole number of bytes.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ConfigError(f"size must be a string or an int of bytes, e.g. '512MiB' or 1048576, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"size {value!r} is negative; give bytes >= 0, e.g. 1073741824 or '1GiB'")
        return value
    parsed = _split(value)
    if parsed is None or parsed[1] not in SIZE_UNITS:
        raise ConfigError(f"size {value!r} is not a size; write a number with an optional unit, "
                          f"e.g. '1GiB', '512MiB' or '4096' (units: B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)")
    number, unit = parsed
    size = number * SIZE_UNITS[unit]
    if size.denominator != 1:
        raise ConfigError(f"size {value!r} is not a whole number of bytes; e.g. '1536MiB' instead of '1.5001GiB'")
    return int(size)


def parse_duration(value: str | float | int) -> float:
    """Seconds from ``500ms``, ``2s``, ``1.5`` (seconds), ``250us``, ``1m`` or a number.

    Returns: a finite float >= 0.
    Error handling: ConfigError naming the value when it is not a duration,
        negative, or not finite.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(f"duration must be a string or a number of seconds, e.g. '500ms' or 0.5, got {value!r}")
    if not isinstance(value, str):
        if not (math.isfinite(value) and value >= 0):
            raise ConfigError(f"duration {value!r} must be finite and >= 0 seconds, e.g. 0.5 or '500ms'")
        return float(value)
    parsed = _split(value)
    if parsed is None or parsed[1] not in DURATION_UNITS:
        raise ConfigError(f"duration {value!r} is not a duration; write a number with an optional unit, "
                          f"e.g. '500ms', '2s' or '1.5' (units: ns, us, ms, s, m, h)")
    number, unit = parsed
    return float(number * DURATION_UNITS[unit])
