"""Verdicts, the run record checkers read, and the registry they sit in.

A checker is a pure function ``(run, params) -> Verdict``: it never opens a
socket, starts a process or reads a clock.  Three verdicts, as Jepsen's:
``ok``, ``violated`` (with the evidence events) and ``unknown`` (with why);
a checker that crashes yields ``unknown`` with the error, never a crash.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from harness.checkers.params import CHECKER_PARAMS, Params
from harness.errors import ConfigError
from harness.history import Event
from harness.probes.model import Snapshot

__all__ = ["Verdict", "RunRecord", "Checker", "CHECKERS", "checker", "judge", "judge_all", "key_of"]

OK, VIOLATED, UNKNOWN = "ok", "violated", "unknown"


@dataclass(frozen=True)
class Verdict:
    """What one checker concluded about one run."""

    checker: str
    status: str  # ok | violated | unknown
    message: str = ""
    evidence: tuple[Event, ...] = ()
    notes: tuple[str, ...] = ()  # reported, not violations (e.g. TIME_WAIT remnants)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_dict(self) -> dict[str, Any]:
        return {"checker": self.checker, "status": self.status, "message": self.message,
                "evidence": [e.__dict__ for e in self.evidence], "notes": list(self.notes)}


@dataclass(frozen=True)
class RunRecord:
    """Everything a checker may look at: the history and the snapshots, by label."""

    events: tuple[Event, ...]
    snapshots: dict[str, Snapshot] = field(default_factory=dict)
    scale: float = 1.0  # LASTCALL_TIMEOUT_SCALE of the run: every time bound a checker applies is stretched by it

    def of(self, *kinds: str) -> list[Event]:
        return [e for e in self.events if e.kind in kinds]

    @property
    def ordered(self) -> list[Event]:
        return sorted(self.events, key=lambda e: e.t_ns)


CheckFn = Callable[[RunRecord, Any], Verdict]


@dataclass(frozen=True)
class Checker:
    name: str
    fn: CheckFn
    about: str

    @property
    def params(self) -> type[Params]:
        return CHECKER_PARAMS[self.name]


CHECKERS: dict[str, Checker] = {}


def checker(name: str, about: str) -> Callable[[CheckFn], CheckFn]:
    """Register ``fn`` as the checker ``name`` (its parameters are CHECKER_PARAMS[name])."""
    if name not in CHECKER_PARAMS:
        raise ConfigError(f"checker {name!r} has no parameter model in harness/checkers/params.py")

    def register(fn: CheckFn) -> CheckFn:
        CHECKERS[name] = Checker(name, fn, about)
        return fn

    return register


def key_of(e: Event) -> tuple[int, str]:
    """Which listener an event belongs to: (pid, listener label)."""
    return (e.pid, str(e.data.get("listener", e.rank)))


def judge(name: str, run: RunRecord, params: dict[str, Any] | Params | None = None) -> Verdict:
    """Run one checker; a crash or bad parameters are ``unknown`` with the reason, never an exception."""
    chk = CHECKERS.get(name)
    if chk is None:
        return Verdict(name, UNKNOWN, f"no checker named {name!r}")
    try:
        p = params if isinstance(params, Params) else chk.params(**(params or {}))
    except ValidationError as exc:
        return Verdict(name, UNKNOWN, f"bad parameters: {exc}")
    try:
        return chk.fn(run, p)
    except Exception as exc:
        return Verdict(name, UNKNOWN, f"checker crashed: {type(exc).__name__}: {exc}",
                       notes=(traceback.format_exc(),))


def judge_all(run: RunRecord, expect: list[tuple[str, dict[str, Any]]]) -> list[Verdict]:
    return [judge(name, run, params) for name, params in expect]


def ok(name: str, message: str = "", notes: tuple[str, ...] = ()) -> Verdict:
    return Verdict(name, OK, message, notes=notes)


def violated(name: str, message: str, evidence: list[Event] | tuple[Event, ...] = (),
             notes: tuple[str, ...] = ()) -> Verdict:
    return Verdict(name, VIOLATED, message, tuple(evidence), notes)


def unknown(name: str, message: str) -> Verdict:
    return Verdict(name, UNKNOWN, message)
