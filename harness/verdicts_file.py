"""A run's verdicts.json, read back as data: every field lastcall uses, checked for its shape.

verdicts.json comes from a report directory, which anyone may have written (docs/trust.md).
:func:`read_meta` reads it bounded (harness.artifacts) and :func:`clean_meta` keeps only
the fields of :data:`FIELDS` whose shape is right: a field of the wrong shape is left out
with one located problem (``verdicts.json: outcome: a list, expected an object; left
out``), so a re-judge, a page or a merge row is built on what is sound, and nothing read
from it is ever imported or passed on as an option (``lastcall replay`` checks what it
takes further: harness.scenario.commands).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness.artifacts import ArtifactError, read_json
from harness.eventlines import KIND

__all__ = ["read_meta", "clean_meta", "FIELDS", "MAX_EXPECT", "MAX_SCALE", "PARTY_NAMES"]

MAX_EXPECT = 1000  # checkers one run is judged with: a scenario's expect list has at most 1000 entries
MAX_SCALE = 10_000.0  # LASTCALL_TIMEOUT_SCALE (at most 100) times a target's bound_scale (at most 100)
HEX = frozenset("0123456789abcdef")  # the digits of a sha256 as lastcall writes it
PARTY_NAMES = ("harness", "engine", "worker", "listener")  # harness.events.PARTIES, the names alone

Check = Callable[[Any], str | None]  # what is wrong with a value, or None


def _type(*types: type, name: str) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) and bool not in types:
            return f"a boolean, expected {name}"
        return None if isinstance(value, types) else f"a {_json_type(value)}, expected {name}"

    return check


def _json_type(value: Any) -> str:
    return {dict: "JSON object", list: "JSON list", str: "string", bool: "boolean", type(None): "null",
            int: "number", float: "number"}.get(type(value), type(value).__name__)


TEXT = _type(str, name="a string")
TEXT_OR_NULL = _type(str, type(None), name="a string or null")
OBJECT = _type(dict, name="an object")
FLAG = _type(bool, name="a boolean")


def _number(low: float, high: float) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"a {_json_type(value)}, expected a number"
        return None if low <= value <= high else f"{value} is outside {low:g} to {high:g}"

    return check


def _list_of(item: Check, name: str, most: int | None = None) -> Check:
    def check(value: Any) -> str | None:
        if not isinstance(value, list):
            return f"a {_json_type(value)}, expected a list of {name}"
        if most is not None and len(value) > most:
            return f"{len(value)} entries, over lastcall's limit of {most}"
        for i, x in enumerate(value):
            why = item(x)
            if why is not None:
                return f"[{i}]: {why}"
        return None

    return check


def _object_of(value_check: Check, name: str) -> Check:
    def check(value: Any) -> str | None:
        if not isinstance(value, dict):
            return f"a {_json_type(value)}, expected an object of {name}"
        for k, v in value.items():
            why = value_check(v)
            if why is not None:
                return f"[{str(k)[:40]!r}]: {why}"
        return None

    return check


def _fields(spec: Mapping[str, Check], required: tuple[str, ...] = ()) -> Check:
    def check(value: Any) -> str | None:
        if not isinstance(value, dict):
            return f"a {_json_type(value)}, expected an object"
        for key in required:
            if key not in value:
                return f"no {key!r}"
        for key, sub in spec.items():
            if key in value:
                why = sub(value[key])
                if why is not None:
                    return f"{key}: {why}"
        return None

    return check


def _sha256(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and len(value) == 64 and all(c in HEX for c in value)):
        return None
    if isinstance(value, str):
        return f"a string of {len(value)} characters, not a sha256 (64 lowercase hex digits)"
    return f"a {_json_type(value)}, expected null or a sha256 (64 lowercase hex digits)"


def _name(value: Any) -> str | None:
    return None if isinstance(value, str) and KIND.fullmatch(value) else "not a checker's name"


def _party(value: Any) -> str | None:
    return None if value in PARTY_NAMES else f"not one of {', '.join(PARTY_NAMES)}"


SCALAR = _type(str, int, float, bool, type(None), name="a string, number, boolean or null")
# the watchdog's bound when it fired (harness.launch.outcome): seconds, a scale, counts
WATCHDOG = _fields({"deadline_s": _number(0, 10**9), "config_s": _number(0, 10**9), "scale": _number(0, MAX_SCALE),
                    "launches": _number(0, 10**6), "launch_s": _number(0, 10**9), "scenarios": _number(0, 10**6)},
                   ("deadline_s",))
OUTCOME = _fields({"status": TEXT, "detail": TEXT, "exits": _object_of(SCALAR, "exit codes"),
                   "leftovers": _list_of(SCALAR, "paths"), "stacks": _object_of(TEXT, "stacks"),
                   "watchdog": WATCHDOG}, ("status",))
EXPECT_ENTRY = _fields({"checker": _name, "params": OBJECT, "allow_unknown": TEXT_OR_NULL}, ("checker",))
VERDICT = _fields({"checker": TEXT, "status": TEXT, "message": TEXT, "evidence": _list_of(OBJECT, "events"),
                   "notes": _list_of(TEXT, "notes"), "allowed": TEXT}, ("checker", "status"))
# a catches item's judgement (harness.scenario.catches.Catch): the planted bug, the checkers one of which must fire
CATCH = _fields({"bug": TEXT, "checkers": _list_of(_name, "checker names", MAX_EXPECT), "counted": FLAG,
                 "by": _list_of(_name, "checker names", MAX_EXPECT), "why": TEXT}, ("checkers", "counted"))
FIELDS: dict[str, Check] = {  # every key of verdicts.json lastcall reads (harness.report.write writes them)
    "format": _number(0, 1000), "scenario": TEXT, "scenario_sha256": _sha256, "matrix": TEXT, "params": OBJECT,
    "variant": TEXT,
    "run_id": TEXT, "nodeid": TEXT_OR_NULL, "target": TEXT_OR_NULL, "outcome": OUTCOME, "step_error": TEXT_OR_NULL,
    "broken": TEXT, "seconds": _number(0, 10**9), "scale": _number(1e-9, MAX_SCALE),
    "expect": _list_of(EXPECT_ENTRY, "checker entries", MAX_EXPECT), "passed": FLAG,
    "verdicts": _list_of(VERDICT, "verdicts", MAX_EXPECT), "absent": _list_of(_party, "party names"),
    "rejudged_from": TEXT, "catch": CATCH, "history_problems": _list_of(TEXT, "problems"),
}


def clean_meta(raw: Any, where: str) -> tuple[dict[str, Any], list[str]]:
    """The fields of ``raw`` (verdicts.json's document) whose shape is right, and one problem per field left
    out, located at ``where``; keys lastcall does not read are dropped without a word."""
    if not isinstance(raw, dict):
        return {}, [f"{where}: a {_json_type(raw)}, not a run's verdicts.json object; left out"]
    meta: dict[str, Any] = {}
    problems: list[str] = []
    for key, check in FIELDS.items():
        if key in raw:
            why = check(raw[key])
            if why is None:
                meta[key] = raw[key]
            else:
                problems.append(f"{where}: {key}: {why}; left out")
    return meta, problems


def read_meta(path: Path) -> tuple[dict[str, Any], list[str]]:
    """verdicts.json at ``path``, cleaned (:func:`clean_meta`); ({}, []) when there is none, ({}, [why]) when it
    cannot be read."""
    if not path.exists() and not path.is_symlink():
        return {}, []
    try:
        raw = read_json(path, "verdicts.json")
    except ArtifactError as exc:
        return {}, [f"{exc}; left out"]
    return clean_meta(raw, str(path))
