"""Pydantic's validation errors, said the way a scenario author needs them.

Each error becomes a :class:`~harness.scenario.errors.Problem` at the key path the
author wrote (union tags and step kinds removed), with what was expected (read off
the JSON Schema, so the text and the editor agree), what was found, a did-you-mean
for unknown keys and names, and a hint where the fix is known.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from harness.scenario.errors import KeyPath, Problem, show

__all__ = ["explain", "did_you_mean", "one_of", "schema_at", "describe", "property_names"]

LISTS_OF_KINDS = ("steps", "expect")  # their items are tagged unions: loc[2] repeats the kind
HINTS = {  # (key, pydantic error type) -> the usual fix
    ("steps", "too_short"): "begin with '- start: cluster', then the steps that exercise the listener",
    ("expect", "too_short"): "name at least one checker, e.g. '- no_late_dispatch'",
    ("catches", "too_short"): "name a planted bug this scenario catches, e.g. catches: [no_conn_tracking]",
    ("catches", "missing"): "add e.g. 'catches: [no_conn_tracking]': a scenario that catches no planted bug "
                            "proves nothing",
}
_PHRASES = {"duration": "a duration such as 500ms, 2s or 1.5 (seconds)", "size": "a size such as 2MiB or 4096"}
_BOUNDS = {"greater_than": ("more than", "gt"), "greater_than_equal": ("at least", "ge"),
           "less_than": ("less than", "lt"), "less_than_equal": ("at most", "le")}


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when ``word`` is close to one of ``choices``, else ""."""
    if not isinstance(word, str):
        return ""
    near = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def one_of(choices: Sequence[object]) -> str:
    return "one of: " + ", ".join(str(c) for c in choices)


# ------------------------------------------------------------------ the schema
def _deref(root: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _alternatives(root: dict[str, Any], schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The plain schemas a value may match: references followed, unions flattened."""
    schema = _deref(root, schema)
    if schema.get("title") in _PHRASES:
        return [schema]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return [alt for sub in schema[key] for alt in _alternatives(root, sub)]
    return [schema]


def schema_at(root: dict[str, Any], path: KeyPath) -> list[dict[str, Any]]:
    """Every plain schema that can describe the value at ``path``."""
    current = [root]
    for part in path:
        current = [alt["items"] if isinstance(part, int) else alt["properties"][part]
                   for s in current for alt in _alternatives(root, s)
                   if (isinstance(part, int) and "items" in alt)
                   or (isinstance(part, str) and part in alt.get("properties", {}))]
    return [alt for s in current for alt in _alternatives(root, s)]


def property_names(root: dict[str, Any], path: KeyPath) -> list[str]:
    return list(dict.fromkeys(p for alt in schema_at(root, path) for p in alt.get("properties", {})))


def _bounds(s: dict[str, Any]) -> str:
    low, high = s.get("minimum"), s.get("maximum")
    if low is not None and high is not None:
        return f" from {low} to {high}"
    if "exclusiveMinimum" in s:
        return f" > {s['exclusiveMinimum']}"
    return f" >= {low}" if low is not None else (f" <= {high}" if high is not None else "")


def _plural(text: str) -> str:
    if text == "a one-key mapping":
        return "one-key mappings"
    if text.startswith("one of: "):
        return f"values from ({text[len('one of: '):]})"
    for article in ("a ", "an "):
        if text.startswith(article):
            first, _, rest = text[len(article):].partition(" ")
            return f"{first}s {rest}".rstrip()
    return text


def _describe_one(root: dict[str, Any], s: dict[str, Any]) -> str:
    if s.get("title") in _PHRASES:
        return _PHRASES[s["title"]]
    if "enum" in s:
        return one_of(s["enum"]) if len(s["enum"]) > 1 else repr(s["enum"][0])
    if "const" in s:
        return repr(s["const"])
    kind = s.get("type")
    if kind == "integer":
        return "an integer" + _bounds(s)
    if kind == "number":
        return "a number" + _bounds(s)
    if kind == "boolean":
        return "true or false"
    if kind == "null":
        return "null"
    if kind == "array":
        if "items" not in s:
            return "a list"
        return "a list of " + " or ".join(dict.fromkeys(_plural(d) for d in _phrases(root, [s["items"]])))
    if kind == "object":
        props = list(s.get("properties", {}))
        return "a mapping {" + ", ".join(props) + "}" if props else "a mapping"
    return "text" if kind == "string" else "a value"


def _phrases(root: dict[str, Any], schemas: list[dict[str, Any]]) -> list[str]:
    alts = [alt for s in schemas for alt in _alternatives(root, s)]
    keyed = [alt for alt in alts if alt.get("type") == "object" and len(alt.get("properties", {})) == 1]
    if len(keyed) > 1:  # a tagged union of one-key mappings (steps, expect entries): their keys are listed elsewhere
        alts = [alt for alt in alts if alt not in keyed] + [{"title": "one-key"}]
    return list(dict.fromkeys("a one-key mapping" if alt.get("title") == "one-key" else _describe_one(root, alt)
                              for alt in alts))


def describe(root: dict[str, Any], schemas: list[dict[str, Any]]) -> str:
    """What the schemas accept, in words: 'an integer >= 1 or a list of integers >= 1'."""
    return " or ".join(_phrases(root, schemas)) or "nothing here"


# ------------------------------------------------------------------ the errors
def _child(node: object, part: str | int) -> tuple[bool, object]:
    """(True, node[part]) when ``part`` is a key or an index of ``node``, else (False, None)."""
    if isinstance(node, dict) and isinstance(part, str) and part in node:
        return True, node[part]
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return True, node[part]
    return False, None


def _resolve(data: object, loc: Sequence[str | int]) -> KeyPath:
    """The part of ``loc`` that exists in ``data``; union tags and the like are skipped."""
    node, out = data, []
    for part in loc:
        found, child = _child(node, part)
        if found:
            node = child
            out.append(part)
    return tuple(out)


def _value(data: object, path: KeyPath) -> object:
    """The value at a path :func:`_resolve` returned (every part exists)."""
    for part in path:
        data = _child(data, part)[1]
    return data


def _loc(err: ErrorDetails) -> list[str | int]:
    loc = list(err["loc"])
    if len(loc) > 2 and loc[0] in LISTS_OF_KINDS and isinstance(loc[1], int):
        del loc[2]
    return loc


def _hint(path: KeyPath, kind: str) -> str | None:
    last = next((p for p in reversed(path) if isinstance(p, str)), "")
    return HINTS.get((last, kind))


def _one(root: dict[str, Any], data: object, err: ErrorDetails) -> Problem:
    loc, kind, ctx = _loc(err), err["type"], err.get("ctx") or {}
    if kind == "missing":
        parent, name = _resolve(data, loc[:-1]), str(loc[-1])
        field: dict[str, Any] = next(
            (alt["properties"][name] for alt in schema_at(root, parent) if name in alt.get("properties", {})), {})
        what = field.get("description")
        return Problem(parent, f"missing required key {name!r}" + (f"; expected {what}" if what else ""),
                       hint=_hint((*parent, name), kind), expected=what)
    if kind == "invalid_key":
        parent, key = _resolve(data, loc[:-1]), loc[-1]
        return Problem(parent, f"expected a key of text, found the key {show(key)}", at=(*parent, str(key)))
    if kind == "extra_forbidden":
        parent, key = _resolve(data, loc[:-1]), str(loc[-1])
        known = property_names(root, parent)
        return Problem(parent, f"unknown key {key!r}; expected {one_of(known)}{did_you_mean(key, known)}",
                       expected=one_of(known), found=repr(key), at=(*parent, key))
    path = _resolve(data, loc)
    value = _value(data, path)  # as written: err["input"] may be after a conversion (0 -> 0.0)
    found = show(value)
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return Problem(path, str(ctx["error"]), hint=_hint(path, kind))
    if kind in _BOUNDS:
        relation, key = _BOUNDS[kind]
        bound = ctx[key]
        bound = int(bound) if isinstance(bound, float) and bound.is_integer() else bound
        limit = " (lastcall's limit)" if key in ("lt", "le") else ""  # every number has a maximum (README, Limits)
        return Problem(path, f"expected a value {relation} {bound}{limit}, found {found}", found=found)
    if kind == "string_too_short":
        return Problem(path, f"expected non-empty text, found {found}", expected="non-empty text", found=found)
    if kind == "string_too_long" or (kind == "too_long" and isinstance(value, str)):
        n = ctx["max_length"]
        expected = f"text of at most {n} characters"
        return Problem(path, f"expected {expected} (lastcall's limit), found {len(str(value))} characters: {found}",
                       expected=expected, found=found)
    if kind == "string_pattern_mismatch":
        expected = f"text matching {ctx['pattern']}"
        return Problem(path, f"expected {expected}, found {found}", expected=expected, found=found)
    if kind in ("too_short", "too_long"):
        n = ctx["min_length"] if kind == "too_short" else ctx["max_length"]
        limit = "at least" if kind == "too_short" else "at most"
        expected = f"{limit} {n} item{'' if n == 1 else 's'}"
        return Problem(path, f"expected {expected}, found {found}", hint=_hint(path, kind),
                       expected=expected, found=found)
    schemas = schema_at(root, path)
    expected = describe(root, schemas)
    words = [str(v) for s in schemas for v in (s.get("enum") or ([s["const"]] if "const" in s else []))]
    return Problem(path, f"expected {expected}, found {found}{did_you_mean(value, words)}",
                   expected=expected, found=found)


def explain(exc: ValidationError, data: object, schema: dict[str, Any]) -> list[Problem]:
    """One problem per place: where a union gave several errors for one value, the most specific one."""
    by_place: dict[tuple[KeyPath, KeyPath | None, str], Problem] = {}
    for err in exc.errors():
        problem = _one(schema, data, err)
        custom = err["type"] in ("value_error", "assertion_error")
        place = (problem.path, problem.at, problem.message if problem.message.startswith("missing") else "")
        if place not in by_place or custom:
            by_place[place] = problem
    problems = list(by_place.values())
    # "unknown key 'stpes' (did you mean 'steps'?)" already says what "missing required key 'steps'" would
    meant = {(p.path, p.message.rsplit("'", 2)[-2]) for p in problems
             if p.at is not None and "did you mean" in p.message}
    return [p for p in problems
            if not (p.message.startswith("missing required key ") and (p.path, p.message.split("'")[1]) in meant)]
