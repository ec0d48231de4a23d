"""Pydantic's validation errors as plain located sentences, without a schema at hand.

``steps[3].timeout: must be greater than 0, got -1``: the key path as the author wrote it, what the value
must be, and what it was. Scenario files get richer text from :mod:`harness.scenario.explain` (it reads the
JSON Schema); this is for the places that hold only a model, such as a checker's parameters. Pydantic's own
phrasing ("Input should be ...", its documentation links) never reaches a user.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

__all__ = ["plain", "plain_one", "where"]

MAX_SHOWN = 60  # characters of a found value shown, the rest cut with "..."

_BOUNDS = {"greater_than": ("greater than", "gt"), "greater_than_equal": ("at least", "ge"),
           "less_than": ("less than", "lt"), "less_than_equal": ("at most", "le")}
_PARSING = {  # pydantic error type -> what the value must be
    "int_parsing": "a whole number", "int_type": "a whole number", "int_from_float": "a whole number",
    "float_parsing": "a number", "float_type": "a number", "bool_parsing": "true or false",
    "bool_type": "true or false", "string_type": "text", "list_type": "a list", "dict_type": "a mapping",
    "model_type": "a mapping", "model_attributes_type": "a mapping", "none_required": "null",
    "finite_number": "a finite number",
}


def where(loc: Sequence[str | int]) -> str:
    """``steps[3].timeout`` for the location ``("steps", 3, "timeout")``; ``(top level)`` for none."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."


def _bound(value: object) -> object:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _sentence(kind: str, ctx: dict[str, Any], value: object) -> str:
    if kind in _BOUNDS:
        relation, key = _BOUNDS[kind]
        return f"must be {relation} {_bound(ctx[key])}, got {_shown(value)}"
    if kind in _PARSING:
        return f"must be {_PARSING[kind]}, got {_shown(value)}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', 'the listed values')}, got {_shown(value)}"
    if kind == "enum":
        return f"must be one of {ctx.get('expected', 'the listed values')}, got {_shown(value)}"
    if kind in ("string_too_long", "too_long"):
        n = ctx.get("max_length")
        return f"must be at most {n} {'characters' if kind == 'string_too_long' else 'items'} long, got " \
               f"{len(value) if hasattr(value, '__len__') else _shown(value)}"
    if kind in ("string_too_short", "too_short"):
        n = ctx.get("min_length")
        return f"must be at least {n} {'characters' if kind == 'string_too_short' else 'items'} long, got " \
               f"{len(value) if hasattr(value, '__len__') else _shown(value)}"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx.get('pattern')}, got {_shown(value)}"
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    return f"is not accepted here, got {_shown(value)}"


_KEYED: dict[str, Callable[[str], str]] = {
    "missing": lambda key: f"missing required key {key!r}",
    "extra_forbidden": lambda key: f"unknown key {key!r}",
}


def plain_one(err: ErrorDetails) -> str:
    """One of pydantic's errors as ``PATH: sentence``."""
    loc, kind = list(err["loc"]), err["type"]
    if kind in _KEYED and loc:
        return f"{where(loc[:-1])}: {_KEYED[kind](str(loc[-1]))}"
    return f"{where(loc)}: {_sentence(kind, dict(err.get('ctx') or {}), err.get('input'))}"


def plain(exc: ValidationError) -> list[str]:
    """Every error of ``exc``, one plain located sentence each, in pydantic's order."""
    return [plain_one(err) for err in exc.errors(include_url=False)]
