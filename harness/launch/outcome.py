"""How a run ended (:class:`RunOutcome`), and the watchdog's bound in words.

A run's watchdog (harness.launch.cluster) fires at one bound, in seconds: the scenario's ``config.deadline``
(a chained run's: the sum of its scenarios'), times ``LASTCALL_TIMEOUT_SCALE``, plus, for an engine run, the
allowance of each engine launch it may make (harness.engine.host).  When it fires, the outcome keeps what made
that bound (``watchdog``, the ``watchdog_fired`` event's data), so the page's headline and the terminal say
after how long the run was ended and why that long: :func:`watchdog_words` and :func:`watchdog_reason`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OUTCOME_STATUSES", "RunOutcome", "seconds_text", "watchdog_words", "watchdog_reason"]

OUTCOME_STATUSES = ("ok", "hung", "failed")  # every RunOutcome.status; the report page words each one


@dataclass
class RunOutcome:
    """How a run ended: ``ok``, ``hung`` (the harness ended a hang) or ``failed`` (could not start)."""

    status: str = "ok"
    stacks: dict[str, str] = field(default_factory=dict)
    exits: dict[str, int] = field(default_factory=dict)  # label -> exit code (negative: killed by signal)
    detail: str = ""
    leftovers: list[str] = field(default_factory=list)  # paths the run left, found before the harness removed them
    strays: list[int] = field(default_factory=list)  # processes of the run's group that outlived it, killed
    # when the watchdog fired: its watchdog_fired data (deadline_s, the bound it fired at, and what made it)
    watchdog: dict[str, Any] = field(default_factory=dict)


def seconds_text(s: float) -> str:
    """Seconds as the report page shows them (two decimals), without trailing zeros: 60, 2.5, 0.25."""
    return f"{s:.2f}".rstrip("0").rstrip(".") or "0"


def _number(w: Mapping[str, Any], key: str) -> float | None:
    value = w.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def watchdog_words(w: Mapping[str, Any]) -> str:
    """The headline of a run the watchdog ended: ``hung: watchdog after 60 s``; "" without its bound."""
    after = _number(w, "deadline_s")
    return "" if after is None else f"hung: watchdog after {seconds_text(after)} s"


def watchdog_reason(w: Mapping[str, Any]) -> str:
    """The terminal's line of it: ``hung: the watchdog ended the run after 2.5 s (config.deadline 1 s x
    LASTCALL_TIMEOUT_SCALE 2.5)``, with each engine launch's allowance; "" without its bound."""
    after = _number(w, "deadline_s")
    if after is None:
        return ""
    config, scale = _number(w, "config_s"), _number(w, "scale")
    parts = []
    if config is not None:
        n = int(_number(w, "scenarios") or 1)
        whose = f", the sum of the chained run's {n} scenarios'" if n > 1 else ""
        parts.append(f"config.deadline {seconds_text(config)} s{whose}"
                     + (f" x LASTCALL_TIMEOUT_SCALE {scale:g}" if scale is not None and scale != 1 else ""))
    launches, launch_s = int(_number(w, "launches") or 0), _number(w, "launch_s")
    if launches and launch_s is not None:
        parts.append(f"+ {launches} engine launch{'es' if launches > 1 else ''} x {seconds_text(launch_s)} s")
    why = f" ({' '.join(parts)})" if parts else ""
    return f"hung: the watchdog ended the run after {seconds_text(after)} s{why}"
