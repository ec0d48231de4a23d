"""YAML in, with the position of every key and value, and duplicate keys refused.

:func:`parse` returns the data (plain dicts, lists and scalars) and a
:class:`Marks` table from key path to 1-based (line, column), so every later error
can point into the file.  The loader is PyYAML's safe loader with two changes:
only true/false are booleans (YAML 1.2; in YAML 1.1 ``on:`` would be the key
True), and a key given twice in one mapping is an error, not a silent overwrite.

Hostile input cannot exhaust the machine: :func:`read_text` refuses what is not
a regular file and reads at most :data:`MAX_BYTES` + 1 bytes; while composing,
the nesting depth (:data:`MAX_DEPTH`) and the number of nodes written
(:data:`MAX_NODES`) are counted on the parser's events before each node is
built; the composed graph's size as aliases expand it (:data:`MAX_EXPANDED`) is
checked before anything walks or converts it; an integer longer than
:data:`MAX_DIGITS` digits is refused before Python converts it.  Each limit is a
:class:`YamlProblem` (or :class:`ReadProblem`) naming the limit and the way to
stay within it.
"""

from __future__ import annotations

import os
import pickle
import re
import stat
from dataclasses import dataclass, field

import yaml

from harness.scenario.errors import KeyPath, Problem

__all__ = ["Marks", "Document", "YamlProblem", "ReadProblem", "parse", "read_text",
           "MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "MAX_EXPANDED", "MAX_DIGITS"]

MAX_BYTES = 1 << 20  # the largest file read: scenarios in scenarios/ are under 2 KiB
MAX_DEPTH = 64  # lists and mappings inside each other, as written and as aliases expand them
MAX_NODES = 10_000  # values (scalars, lists, mappings, aliases) as written; a scenario has a few hundred
MAX_EXPANDED = 100_000  # values once every alias is expanded: what the position walk and pydantic see
MAX_DIGITS = 30  # the longest integer read (Python refuses to convert 4300 digits, and slowly below that)
_INT = "tag:yaml.org,2002:int"

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
    """SafeLoader where only true/false (any case) are booleans: ``on``/``off``/``yes``/``no`` stay strings,
    and where composing stops at :data:`MAX_DEPTH` levels or :data:`MAX_NODES` nodes."""

    _depth = 0
    _nodes = 0

    def _here(self) -> Position:
        mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
        return (mark.line + 1, mark.column + 1)

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise YamlProblem(self._here(), Problem((), (
                f"more than {MAX_NODES} values (lastcall's limit for one file); a scenario or workload has a few "
                f"hundred: split it into several files")))
        if not self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent):
            return super().compose_node(parent, index)
        if self._depth >= MAX_DEPTH:
            raise YamlProblem(self._here(), Problem((), _too_deep()))
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


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


class ReadProblem(Exception):
    """Raised by :func:`read_text`: the file cannot be read, is not a regular file, is too large, empty,
    or not UTF-8 (then ``position`` is where the first bad byte is)."""

    def __init__(self, message: str, position: Position | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.position = position


def _too_deep() -> str:
    return (f"nested deeper than {MAX_DEPTH} levels of lists and mappings (lastcall's limit, counting through "
            f"aliases); a scenario or workload needs a few: flatten the structure")


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _too_large(size: str, limit: int) -> str:
    shown = f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit} bytes"
    return (f"{size}, over lastcall's limit of {shown} for one file; a scenario or workload is a few KiB: "
            f"split it into several files")


def _utf8_problem(data: bytes, exc: UnicodeDecodeError) -> ReadProblem:
    start = data.rfind(b"\n", 0, exc.start) + 1
    line = data.count(b"\n", 0, exc.start) + 1
    column = len(data[start:exc.start].decode("utf-8")) + 1
    return ReadProblem(f"not UTF-8 text: byte 0x{data[exc.start]:02x} ({exc.reason}); save the file as UTF-8",
                       (line, column))


def read_text(path: str, limit: int = MAX_BYTES, expected: str = "a YAML mapping") -> str:
    """The UTF-8 text of the regular file at ``path``, of at most ``limit`` bytes.

    A FIFO, a device or a directory is refused before anything is read (a FIFO is
    opened without blocking); at most ``limit`` + 1 bytes are read, so a file that
    grows while read is refused too.  ``expected`` says what an empty file lacks.
    Error handling: :class:`ReadProblem`, the position set for a bad byte.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ReadProblem(f"cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ReadProblem(f"{_kind(info.st_mode)}, not a regular file; give the path of a YAML file")
        if info.st_size > limit:
            raise ReadProblem(_too_large(f"{info.st_size} bytes", limit))
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ReadProblem(f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > limit:  # it grew while it was read
        raise ReadProblem(_too_large(f"more than {limit} bytes", limit))
    if size == 0:
        raise ReadProblem(f"empty file; expected {expected}")
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _utf8_problem(data, exc) from None


def _expanded(root: yaml.Node) -> None:
    """Refuse a graph that aliases expand past :data:`MAX_EXPANDED` nodes or :data:`MAX_DEPTH` levels, or
    that contains itself; each node is sized once (memoised), so this costs the nodes as written."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, depth) once expanded
    active: set[int] = set()

    def size(node: yaml.Node) -> tuple[int, int]:
        known = sizes.get(id(node))
        if known is not None:
            return known
        if id(node) in active:
            raise YamlProblem(_pos(node.start_mark), Problem((), (
                "an alias inside the value it names (&a [*a]) never ends; repeat the value instead")))
        total, depth = 1, 0  # a scalar: no depth; a list or mapping: one more than its deepest child
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            active.add(id(node))
            children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else node.value
            for child in children:
                n, d = size(child)
                total, depth = total + n, max(depth, d)
            active.discard(id(node))
            depth += 1
            if depth > MAX_DEPTH:
                raise YamlProblem(_pos(node.start_mark), Problem((), _too_deep()))
        if total > MAX_EXPANDED:
            raise YamlProblem(_pos(node.start_mark), Problem((), (
                f"aliases expand this value to more than {MAX_EXPANDED} values (lastcall's limit); write the "
                f"repeated part out, or alias it fewer times")))
        sizes[id(node)] = (total, depth)
        return total, depth

    size(root)


def _short_int(node: yaml.Node, path: KeyPath) -> None:
    if isinstance(node, yaml.ScalarNode) and node.tag == _INT and len(node.value) > MAX_DIGITS:
        raise YamlProblem(_pos(node.start_mark), Problem(path, (
            f"a number of {len(node.value)} characters is longer than {MAX_DIGITS} (lastcall's limit); "
            f"write a smaller number, or quote it if it is text")))


def _walk(node: yaml.Node, path: KeyPath, marks: Marks) -> None:
    marks.values[path] = _pos(node.start_mark)
    _short_int(node, path)
    if isinstance(node, yaml.MappingNode):
        first: dict[str, yaml.Node] = {}
        for key, value in node.value:
            _short_int(key, path)
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
            _walk(value, (*path, name), marks)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*path, i), marks)


def _syntax(exc: yaml.MarkedYAMLError) -> YamlProblem:
    problem = exc.problem or "not valid YAML"
    context = ""
    if exc.context and exc.context_mark is not None and exc.context_mark is not exc.problem_mark:
        context = f" ({exc.context} at line {exc.context_mark.line + 1})"
    hint = next((fix for phrase, fix in SYNTAX_HINTS.items() if phrase in problem), None)
    return YamlProblem(_pos(exc.problem_mark or exc.context_mark),
                       Problem((), f"invalid YAML: {problem}{context}", hint=hint))


_PARSED: dict[tuple[str, int, int, int, int], bytes] = {}  # what parse gave each text, pickled: see parse
_PARSED_MAX = 1024  # texts kept; then the table starts over
_PARSED_TEXT_MAX = 1 << 16  # the longest text kept


def parse(text: str) -> Document:
    """Parse one YAML document with its marks; raises :class:`YamlProblem`, also for a limit passed.

    The same text parses to the same document, so a process keeps each one it parsed (a text of at most
    64 KiB, under the limits of the moment), pickled, and gives a fresh copy of it the next time: pytest's
    collection, ``lastcall run``'s preflight and lastcall's own tests load the
    same files again and again, and PyYAML's pure-Python parser (kept for its messages and its limits,
    counted as it composes) is most of a load.  A text that fails is parsed again each time."""
    key = (text, MAX_DEPTH, MAX_NODES, MAX_EXPANDED, MAX_DIGITS)
    kept = _PARSED.get(key)
    if kept is not None:
        return pickle.loads(kept)  # type: ignore[no-any-return]
    doc = _parse(text)
    if len(text) <= _PARSED_TEXT_MAX:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = pickle.dumps(doc, protocol=pickle.HIGHEST_PROTOCOL)
    return doc


def _parse(text: str) -> Document:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        marks = Marks()
        if node is None:
            return Document(None, marks)
        _expanded(node)
        _walk(node, (), marks)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise _syntax(exc) from None
    except yaml.YAMLError as exc:  # no mark: e.g. an unsupported encoding
        raise YamlProblem((1, 1), Problem((), f"invalid YAML: {exc}")) from None
    except (RecursionError, MemoryError, ValueError, OverflowError) as exc:  # past the limits: a bug, but the file's
        raise YamlProblem((1, 1), Problem((), f"cannot load this file ({type(exc).__name__}: {exc}); "
                                              f"make it smaller and simpler")) from None
    finally:
        loader.dispose()
    return Document(data, marks)

