"""Load scenario files: every mistake found before any process starts, located and explained.

::

    sc = load("scenarios/stalled-read.yaml")          # ScenarioError on any mistake
    for item in expand(sc):                            # one per tp x pp x device
        print(item.id, item.params)                    # tp2-pp1-cpu {'tp': 2, 'pp': 1, 'device': 'cpu'}

A file passes three gates, each reporting every problem it finds, in file order:
YAML (syntax, duplicate keys), shape and types (the pydantic schema, with
did-you-mean for unknown keys, steps and checkers), and cross-references
(names, order, ranks, planted bugs) with what a run may cost in all
(harness.scenario.budget).  The first problem is the
:class:`ScenarioError` raised; the rest are in its ``also``.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.checkers.params import CHECKER_PARAMS
from harness.scenario import budget, refs
from harness.scenario.errors import KeyPath, Problem, ScenarioError, format_path, show
from harness.scenario.explain import did_you_mean, explain, one_of
from harness.scenario.schema import Scenario, _base_schema
from harness.scenario.steps import STEP_TYPES
from harness.scenario.yamlnodes import Marks, ReadProblem, YamlProblem, parse, read_text

__all__ = ["load", "loads", "load_many", "expand", "digest", "MatrixItem", "SUFFIXES"]

SUFFIXES = (".yaml", ".yml")  # what load_many collects from a directory
TOP_KEYS = "name, about, catches, steps, expect"  # the required keys, for messages about the whole file
SLEEP_HINT = ("synchronise on the thing you are waiting for: - wait: {reached: f1} (an armed failpoint), "
              "- wait: {event: stop_started}, or - wait: {returned: s1}")


@dataclass(frozen=True)
class MatrixItem:
    """One run of a scenario: a point of its topology matrix."""

    scenario: Scenario
    params: dict[str, Any]  # {"tp": 2, "pp": 1, "device": "cpu"}
    id: str  # "tp2-pp1-cpu": the pytest id


def _variant_names() -> tuple[str, ...]:
    from harness.targets.names import WORKER_VARIANTS  # static: importing the variants costs torch (~4 s)

    return WORKER_VARIANTS


# -------------------------------------------------------------------- shape
def _step_shape(i: int, item: object) -> Problem | None:
    at: KeyPath = ("steps", i)
    example = "a one-key mapping such as '- start: cluster'"
    if not isinstance(item, dict):
        hint = f"write '- {item}: ...'" if isinstance(item, str) and item in STEP_TYPES else None
        return Problem(at, f"expected a step, {example}; found {show(item)}", hint=hint)
    if len(item) != 1:
        keys = [str(k) for k in item]
        kinds = [k for k in keys if k in STEP_TYPES]
        other = next((k for k in keys if k not in kinds), "")
        hint = f"a step's parameters go inside its mapping: '- {kinds[0]}: {{..., {other}: ...}}'" if len(
            kinds) == 1 else None
        return Problem(at, f"expected a step, {example}; found {len(keys)} keys: {', '.join(keys)}" if keys
                       else f"expected a step, {example}; found an empty mapping", hint=hint)
    kind = str(next(iter(item)))
    if kind == "sleep":
        return Problem(at, "sleep is not a step: a fixed sleep is slow on a fast machine and flaky on a slow one",
                       hint=SLEEP_HINT, at=(*at, kind))
    if kind not in STEP_TYPES:
        known = one_of(list(STEP_TYPES))
        return Problem(at, f"unknown step {kind!r}; expected {known}{did_you_mean(kind, STEP_TYPES)}",
                       expected=known, found=repr(kind), at=(*at, kind))
    return None


def _expect_shape(j: int, entry: object) -> Problem | None:
    at: KeyPath = ("expect", j)
    names = sorted(CHECKER_PARAMS)
    keys = [k for k in entry if k != "allow_unknown"] if isinstance(entry, dict) else []
    if isinstance(entry, dict) and len(keys) == 1:  # allow_unknown: reason may stand beside the checker
        name, where = keys[0], (*at, str(keys[0]))
    elif isinstance(entry, str):
        name, where = entry, None
    else:
        return Problem(at, f"expected a checker name or a one-key mapping {{checker: params}}, found {show(entry)}")
    if name not in CHECKER_PARAMS:
        return Problem(at, f"unknown checker {name!r}; expected {one_of(names)}{did_you_mean(name, names)}",
                       expected=one_of(names), found=repr(name), at=where)
    return None


def _shape(data: dict[Any, Any]) -> list[Problem]:
    """Problems with the lists of one-key mappings, said better than a union error can."""
    problems: list[Problem] = []
    for key, check in (("steps", _step_shape), ("expect", _expect_shape)):
        items = data.get(key)
        if isinstance(items, list):
            problems += [p for i, item in enumerate(items) if (p := check(i, item)) is not None]
    return problems


# --------------------------------------------------------------------- load
def _raise(file: str, marks: Marks, problems: list[Problem]) -> ScenarioError:
    located = []
    for p in problems:
        line, column = marks.locate(p.at or p.path, at_key=p.at is not None)
        located.append(ScenarioError(file, line, column, format_path(p.path), p.message,
                                     expected=p.expected, found=p.found, hint=p.hint))
    located.sort(key=lambda e: (e.line or 0, e.column or 0))
    first = located[0]
    return ScenarioError(first.file, first.line, first.column, first.path, first.message, expected=first.expected,
                         found=first.found, hint=first.hint, also=tuple(located[1:]))


def _under(path: KeyPath, roots: Iterable[KeyPath]) -> bool:
    return any(path[: len(r)] == r for r in roots)


def loads(text: str, file: str = "<string>") -> Scenario:
    """A scenario from YAML text; ``file`` names it in errors. Raises :class:`ScenarioError`."""
    try:
        doc = parse(text)
    except YamlProblem as exc:
        raise _raise(file, Marks(values={exc.problem.path: exc.position}), [exc.problem]) from None
    data = doc.data
    if not isinstance(data, dict):
        found = "an empty file" if data is None else show(data)
        raise _raise(file, doc.marks, [Problem((), f"expected a mapping with keys {TOP_KEYS}, found {found}")])
    problems = _shape(data)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        roots = [p.path for p in problems]
        problems += [p for p in explain(exc, data, _base_schema()) if not _under(p.path, roots)]
        raise _raise(file, doc.marks, problems) from None
    if problems:  # pragma: no cover - a shape problem always fails validation too
        raise _raise(file, doc.marks, problems)
    problems = refs.check(scenario, _variant_names()) + budget.check(scenario)
    if problems:
        raise _raise(file, doc.marks, problems)
    scenario._locate(file, doc.marks)
    return scenario


def load(path: str | os.PathLike[str]) -> Scenario:
    """The scenario in the file at ``path``.

    Returns: the validated :class:`Scenario`, every cross-reference checked.
    Error handling: :class:`ScenarioError` located at FILE:LINE:COL with the key
        path, what was expected and found, and the fix where known; the file's
        further errors are in its ``also``.  Nothing is started.  A path that is
        not a regular file, a file over 1 MiB, an empty one and one that is not
        UTF-8 are refused before parsing (harness.scenario.yamlnodes.read_text).
    """
    file = os.fspath(path)
    try:
        text = read_text(file, expected=f"a mapping with keys {TOP_KEYS}")
    except ReadProblem as exc:
        line, column = exc.position or (None, None)
        raise ScenarioError(file, line, column, "", exc.message) from None
    scenario = loads(text, file)
    scenario._sha256 = digest(text.encode("utf-8"))  # strict UTF-8 decodes and encodes back to the same bytes
    return scenario


def digest(data: bytes) -> str:
    """The sha256 (hex) a scenario file's ``data`` is recorded and found by (Scenario.sha256)."""
    return hashlib.sha256(data).hexdigest()


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file())
    return [path]


def load_many(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[Scenario], list[ScenarioError]]:
    """Every scenario under ``paths`` (files, and directories searched for *.yaml/*.yml).

    Returns: the scenarios that loaded, and one error per file that did not
        (a directory with no scenario file in it is an error too).
    """
    scenarios: list[Scenario] = []
    errors: list[ScenarioError] = []
    for given in paths:
        files = _files(Path(given))
        if not files:
            errors.append(ScenarioError(os.fspath(given), None, None, "",
                                        f"no scenario files ({', '.join('*' + s for s in SUFFIXES)}) here"))
        for file in files:
            try:
                scenarios.append(load(file))
            except ScenarioError as exc:
                errors.append(exc)
    return scenarios, errors


# --------------------------------------------------------------------- matrix
def expand(scenario: Scenario) -> list[MatrixItem]:
    """One item per point of the topology matrix (tp x pp x device, in that order)."""
    axes = scenario.topology.axes()
    items = []
    for tp, pp, device in itertools.product(axes["tp"], axes["pp"], axes["device"]):
        items.append(MatrixItem(scenario, {"tp": tp, "pp": pp, "device": device}, f"tp{tp}-pp{pp}-{device}"))
    return items
