"""YAML in, with the position of every key and value, and duplicate keys refused.

:func:`parse` returns the data (plain dicts, lists and scalars) and a
:class:`Marks` table from key path to 1-based (line, column), so every later error
can point into the file.  The loader is PyYAML's safe loader with two changes:
only true/false are booleans (YAML 1.2; in YAML 1.1 ``on:`` would be the key
True), and a key given twice in one mapping is an error, not a silent overwrite.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml

from harness.scenario.errors import KeyPath, Problem

__all__ = ["Marks", "Document", "YamlProblem", "parse"]

Position = tuple[int, int]  # 1-based line, column
_BOOL = "tag:yaml.org,2002:bool"
SYNTAX_HINTS = {  # a phrase of yaml's problem text -> the usual fix
    "mapping values are not allowed here": "quote a value that contains ': ', or start a nested mapping "
                                           "on its own, indented line",
    "cannot start any token": "indent with spaces; YAML does not allow tabs",
    "expected <block end>": "check this line's indentation against the lines above it",
    "could not determine a constructor": "scenario files are plain data: remove the !tag",
}


class _Loader(yaml.SafeLoader):
    """SafeLoader where only true/false (any case) are booleans: ``on``/``off``/``yes``/``no`` stay strings."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


@dataclass
class Marks:
    """Where each value (and each mapping key) starts, by key path."""

    values: dict[KeyPath, Position] = field(default_factory=dict)
    keys: dict[KeyPath, Position] = field(default_factory=dict)

    def locate(self, path: KeyPath, at_key: bool = False) -> Position:
        """The position of ``path`` (its key if ``at_key``), else of its nearest located ancestor."""
        for n in range(len(path), -1, -1):
            table = self.keys if at_key and n == len(path) else self.values
            if path[:n] in table:
                return table[path[:n]]
        return (1, 1)


@dataclass(frozen=True)
class Document:
    """One parsed file: plain data, and where everything in it is."""

    data: object
    marks: Marks


class YamlProblem(Exception):
    """Raised by :func:`parse`: the file is not valid YAML, or repeats a key."""

    def __init__(self, position: Position, problem: Problem) -> None:
        super().__init__(problem.message)
        self.position = position
        self.problem = problem


def _pos(mark: yaml.Mark | None) -> Position:
    return (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)


def _walk(node: yaml.Node, path: KeyPath, marks: Marks, active: set[int]) -> None:
    marks.values[path] = _pos(node.start_mark)
    if id(node) in active:  # a recursive alias: &a [*a]
        return
    active.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[str, yaml.Node] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.value == "<<":
                continue
            name = str(key.value)
            if name in first:
                line = first[name].start_mark.line + 1
                raise YamlProblem(_pos(key.start_mark), Problem(
                    path, f"duplicate key {name!r} (first at line {line}); YAML would keep only the last one",
                    hint=f"remove one of the two '{name}:' lines, or merge them"))
            first[name] = key
            marks.keys[(*path, name)] = _pos(key.start_mark)
            _walk(value, (*path, name), marks, active)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*path, i), marks, active)
    active.discard(id(node))


def _syntax(exc: yaml.MarkedYAMLError) -> YamlProblem:
    problem = exc.problem or "not valid YAML"
    context = ""
    if exc.context and exc.context_mark is not None and exc.context_mark is not exc.problem_mark:
        context = f" ({exc.context} at line {exc.context_mark.line + 1})"
    hint = next((fix for phrase, fix in SYNTAX_HINTS.items() if phrase in problem), None)
    return YamlProblem(_pos(exc.problem_mark or exc.context_mark),
                       Problem((), f"invalid YAML: {problem}{context}", hint=hint))


def parse(text: str) -> Document:
    """Parse one YAML document with its marks; raises :class:`YamlProblem`."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        marks = Marks()
        if node is None:
            return Document(None, marks)
        _walk(node, (), marks, set())
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise _syntax(exc) from None
    except yaml.YAMLError as exc:  # no mark: e.g. an unsupported encoding
        raise YamlProblem((1, 1), Problem((), f"invalid YAML: {exc}")) from None
    finally:
        loader.dispose()
    return Document(data, marks)

