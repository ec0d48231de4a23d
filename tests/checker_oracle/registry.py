"""The oracle's registry: what its copies of the checkers register with ``@checker``, by name.

The same decorator signature as harness.checkers.base.checker, registering into :data:`ORACLE` only: the
checkers' own registry keeps its names (a name registered twice there is an error).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.checkers.base import Verdict

__all__ = ["ORACLE", "checker"]

OracleFn = Callable[[Any, Any], Verdict]
ORACLE: dict[str, OracleFn] = {}


def checker(name: str, about: str, **_: Any) -> Callable[[OracleFn], OracleFn]:
    def register(fn: OracleFn) -> OracleFn:
        ORACLE[name] = fn
        return fn

    return register
