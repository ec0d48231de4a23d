"""The smallest mutator that can drive lastcall's multi-process suite: one-line breaks as source edits.

A mutant is one edit of one function's source, made as text (the rest of the file, its comments and its line
numbers stay as they are), so the mutated file can be written into a temporary copy of its package that the
run's processes import.  The operators (``OPERATORS``):

* ``remove``: a simple statement replaced by ``pass`` (an assignment, a call, a return, a raise, ...);
* ``negate``: the condition of an ``if``, ``while`` or conditional expression wrapped in ``not (...)``;
* ``unlock``: ``with <lock>:`` replaced by ``if True:`` (the block runs without the lock; a lock is a
  ``with`` on one name or attribute whose name says lock, cond, mutex or sem);
* ``flip_return``: ``return True`` <-> ``return False``, and ``return <comparison or not or and/or>``
  -> ``return not (...)``;
* ``compare``: ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``, ``is`` <-> ``is not``, ``in`` <-> ``not in``;
* ``constant``: a number ``n`` -> ``n + 1``, ``True`` <-> ``False``.

What only reports is left alone: docstrings, ``pass``, and every instrumentation call with what is inside it
(a call of a method named ``emit``, as a recorder's, and ``failpoints.hit(...)``): removing an event changes
what the history says, not what the listener does.  A mutant that does not compile, or whose text is the
original's, is not made.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import hashlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = ["OPERATORS", "Mutant", "functions_of", "mutants_of", "apply", "diff_of", "LOCK_WORDS", "anchor_of"]

OPERATORS = ("remove", "negate", "unlock", "flip_return", "compare", "constant")
LOCK_WORDS = ("lock", "cond", "mutex", "sem")
_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.FunctionDef,
             ast.AsyncFunctionDef, ast.ClassDef, ast.Match) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())


@dataclass(frozen=True)
class Mutant:
    """One edit of one function: the text from (line, col) to (end_line, end_col) becomes ``new``."""

    file: str  # the path as given (relative to the package's root in ids)
    qualname: str
    op: str
    line: int  # 1-based
    col: int  # 0-based, as ast
    end_line: int
    end_col: int
    new: str
    about: str  # the mutation in words: "`x < y` -> `x <= y`"
    anchor: str = ""  # its content's digest (:func:`anchor_of`), which its id carries

    @property
    def id(self) -> str:
        """FILE::QUALNAME::OP:ANCHOR: the function and what the edit changes, not where its line is; the same
        while the statement's text and the edit stay, wherever the function moves in its file."""
        return f"{self.file}::{self.qualname}::{self.op}:{self.anchor}"


def anchor_of(fn: ast.AST, lines: list[str], m: Mutant) -> str:
    """Six hex digits of the digest of the first line of the innermost statement of ``fn`` holding the edit, the
    text it replaces and its replacement (identical edits in one function are told apart by a ``.N``)."""
    def holds(node: ast.stmt) -> bool:
        return ((node.lineno, node.col_offset) <= (m.line, m.col)
                and ((node.end_lineno or 0), (node.end_col_offset or 0)) >= (m.end_line, m.end_col))

    holders = [n for n in ast.walk(fn) if isinstance(n, ast.stmt) and n is not fn and holds(n)]
    holder = max(holders, key=lambda n: (n.lineno, n.col_offset), default=None)
    first = lines[holder.lineno - 1].strip() if holder is not None else ""
    text = "\n".join((first, " ".join(source_of(lines, m).split()), m.new, m.op))
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def functions_of(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function and method of a module by qualname, as Python's ``__qualname__`` spells it (``func``,
    ``Class.method``, ``Outer.Inner.m``, and a function defined in one as ``func.<locals>.inner``: a closure's
    body is mutated under its own name, never as part of the function that defines it)."""
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def visit(body: Sequence[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[prefix + node.name] = node
                visit(_defined_in(node), f"{prefix}{node.name}.<locals>.")
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    return found


def _defined_in(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    """The functions and classes ``fn``'s body defines, at any depth of its blocks (not inside those), in order."""
    out: list[ast.stmt] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.append(child)
            elif isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
                visit(child)

    visit(fn)
    return out


def _is_instrumentation(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if isinstance(f, ast.Attribute) and f.attr == "emit":
        return True
    return isinstance(f, ast.Attribute) and f.attr == "hit" and isinstance(f.value, ast.Name) \
        and f.value.id == "failpoints"


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk in source order, not entering instrumentation calls, nested functions and classes, f-strings
    (a message) or annotations."""
    for field, value in ast.iter_fields(node):
        if field in ("annotation", "returns", "decorator_list", "type_comment"):
            continue
        for child in value if isinstance(value, list) else [value]:
            if not isinstance(child, ast.AST) or _is_instrumentation(child) or isinstance(
                    child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.JoinedStr)):
                continue
            yield child
            yield from _walk(child)


def _body(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """The nodes of ``fn``'s body (not its signature), in source order."""
    for stmt in fn.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield stmt
        yield from _walk(stmt)


def _tests_of(fn: ast.AST) -> set[int]:
    """ids of what negate or flip_return negates as a whole: the conditions of ``fn``'s if, while and conditional
    expressions, and its returned values."""
    return {id(n.test) for n in ast.walk(fn) if isinstance(n, (ast.If, ast.While, ast.IfExp))} | {
        id(n.value) for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None}


def _lock_name(expr: ast.expr) -> str | None:
    name = expr.attr if isinstance(expr, ast.Attribute) else expr.id if isinstance(expr, ast.Name) else None
    return name if name is not None and any(w in name.lower() for w in LOCK_WORDS) else None


_EOL = re.compile(r"\r\n|\r|\n")


class _Segments:
    """``source`` split once into lines as ast counts them (at CR LF, CR and LF only), and the text of a
    node from them: what ``ast.get_source_segment`` gives, which splits the whole source again on every call
    (3 s of the stop path's 478 mutants went on that)."""

    def __init__(self, source: str) -> None:
        self.lines: list[str] = []
        start = 0
        for eol in _EOL.finditer(source):
            self.lines.append(source[start:eol.end()])
            start = eol.end()
        if start < len(source):
            self.lines.append(source[start:])

    def __call__(self, node: ast.expr | ast.stmt) -> str | None:
        if node.end_lineno is None or node.end_col_offset is None:
            return None
        first, last, col, end_col = node.lineno - 1, node.end_lineno - 1, node.col_offset, node.end_col_offset
        if first == last:
            return self.lines[first].encode()[col:end_col].decode()
        return (self.lines[first].encode()[col:].decode() + "".join(self.lines[first + 1:last])
                + self.lines[last].encode()[:end_col].decode())


def _expr(node: ast.expr, text: str, *, keep_lines: bool = True) -> tuple[int, int, int, int, str]:
    """An edit replacing expression ``node`` by ``text``, padded inside parentheses to keep the line count."""
    assert node.end_lineno is not None and node.end_col_offset is not None
    extra = node.end_lineno - node.lineno
    if keep_lines and extra and "\n" not in text:
        text = f"({text}{chr(10) * extra})"
    return node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, text


_Edit = tuple[int, int, int, int, str]  # line, column, end line, end column, the new text


def _candidates(fn: ast.FunctionDef | ast.AsyncFunctionDef, segment: _Segments) -> Iterator[tuple[str, _Edit, str]]:
    """(op, edit, about) for every mutation of ``fn``'s body, in source order."""
    tests = _tests_of(fn)
    for node in _body(fn):
        if isinstance(node, ast.stmt) and not isinstance(node, _COMPOUND) and not isinstance(node, ast.Pass):
            is_doc = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str)
            if not is_doc and not (isinstance(node, ast.Expr) and _is_instrumentation(node.value)):
                assert node.end_lineno is not None and node.end_col_offset is not None
                text = segment(node) or ""
                pad = "\n" * (node.end_lineno - node.lineno)
                yield "remove", (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset,
                                 "pass" + pad), f"`{_short(text)}` removed"
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            text = segment(node.test) or ""
            yield "negate", _expr(node.test, f"not ({text})"), f"condition `{_short(text)}` negated"
        if isinstance(node, ast.With) and len(node.items) == 1 and node.items[0].optional_vars is None:
            lock = node.items[0].context_expr
            if _lock_name(lock) is not None:
                assert lock.end_lineno is not None and lock.end_col_offset is not None
                text = segment(lock) or ""
                yield "unlock", (node.lineno, node.col_offset, lock.end_lineno, lock.end_col_offset, "if True"), \
                    f"`with {text}:` dropped (the block runs without the lock)"
        if isinstance(node, ast.Return) and node.value is not None:
            v = node.value
            if isinstance(v, ast.Constant) and isinstance(v.value, bool):
                yield "flip_return", _expr(v, repr(not v.value)), f"`return {v.value}` -> `return {not v.value}`"
            elif isinstance(v, (ast.Compare, ast.BoolOp)) or (isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not)):
                text = segment(v) or ""
                yield "flip_return", _expr(v, f"not ({text})"), f"`return {_short(text)}` -> `return not (...)`"
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                swap = _SWAP.get(type(op))
                if swap is None or (id(node) in tests and len(node.ops) == 1 and not isinstance(
                        op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE))):
                    continue  # the swap of ==, is, in as a whole condition (or returned) is its negation: made already
                new = ast.Compare(left=node.left, ops=[*node.ops[:i], swap(), *node.ops[i + 1:]],
                                  comparators=node.comparators)
                text = segment(node) or ""
                yield "compare", _expr(node, ast.unparse(new)), f"`{_short(text)}` -> `{_short(ast.unparse(new))}`"
        if isinstance(node, ast.Constant) and not _in_return_bool(fn, node):
            value = node.value
            if isinstance(value, bool):
                yield "constant", _expr(node, repr(not value)), f"`{value}` -> `{not value}`"
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                text = segment(node) or repr(value)
                yield "constant", _expr(node, repr(value + 1)), f"`{text}` -> `{value + 1!r}`"


def _in_return_bool(fn: ast.AST, node: ast.Constant) -> bool:
    """Whether ``node`` is the constant of a ``return True/False`` (flip_return's, not constant's)."""
    return isinstance(node.value, bool) and any(isinstance(r, ast.Return) and r.value is node for r in ast.walk(fn))


def _short(text: str, width: int = 60) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 3] + "..."


def mutants_of(source: str, file: str, qualnames: Sequence[str] | None = None) -> list[Mutant]:
    """Every mutant of the functions ``qualnames`` (all of the module's when None) of ``source``, in order.

    Raises: KeyError naming a qualname the module does not define; SyntaxError for a file that does not parse.
    """
    tree = ast.parse(source)
    funcs = functions_of(tree)
    names = list(funcs) if qualnames is None else list(dict.fromkeys(qualnames))
    missing = [n for n in names if n not in funcs]
    if missing:
        raise KeyError(", ".join(missing))
    out: list[Mutant] = []
    seen: set[str] = set()
    lines = source.splitlines(keepends=True)
    segments = _Segments(source)
    for name in names:
        fn = funcs[name]
        for op, (line, col, end_line, end_col, new), about in _candidates(fn, segments):
            m = Mutant(file, name, op, line, col, end_line, end_col, new, about)
            if m.new == source_of(lines, m) or not _function_compiles(lines, fn, m):
                continue
            anchor = anchor_of(fn, lines, m)
            m = dataclasses.replace(m, anchor=anchor)
            n = 1
            while m.id in seen:  # the same edit of the same statement text twice in one function
                n += 1
                m = dataclasses.replace(m, anchor=f"{anchor}.{n}")
            seen.add(m.id)
            out.append(m)
    return out


def source_of(lines: list[str], m: Mutant) -> str:
    """The text ``m`` replaces."""
    text = "".join(lines)
    return text[_offset(lines, m.line, m.col):_offset(lines, m.end_line, m.end_col)]


def _function_compiles(lines: list[str], fn: ast.FunctionDef | ast.AsyncFunctionDef, m: Mutant) -> bool:
    """Whether the function ``m`` edits still compiles (the function alone: the rest of the file is unchanged)."""
    assert fn.end_lineno is not None
    first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
    part = lines[first - 1:fn.end_lineno]
    edited = apply("".join(part), Mutant(m.file, m.qualname, m.op, m.line - first + 1, m.col, m.end_line - first + 1,
                                         m.end_col, m.new, m.about))
    text = edited.replace("\n" + " " * fn.col_offset, "\n")[fn.col_offset:] if fn.col_offset else edited
    try:
        compile(text, "<mutant>", "exec", dont_inherit=True)
    except SyntaxError:  # the function alone may not dedent (a multi-line string): judge the whole file
        return _compiles(apply("".join(lines), m))
    except ValueError:
        return False
    return True


def _compiles(text: str) -> bool:
    try:
        compile(text, "<mutant>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def apply(source: str, m: Mutant) -> str:
    """``source`` with ``m``'s edit made (line and column as ast counts them: columns are UTF-8 bytes)."""
    lines = source.splitlines(keepends=True)
    start = _offset(lines, m.line, m.col)
    end = _offset(lines, m.end_line, m.end_col)
    return source[:start] + m.new + source[end:]


def _offset(lines: list[str], line: int, col: int) -> int:
    before = sum(len(s) for s in lines[: line - 1])
    return before + len(lines[line - 1].encode()[:col].decode())


def diff_of(source: str, m: Mutant, context: int = 1) -> str:
    """The unified diff of ``m`` against ``source`` (a few lines)."""
    new = apply(source, m)
    return "".join(difflib.unified_diff(source.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{m.file}", tofile=f"b/{m.file}", n=context))
