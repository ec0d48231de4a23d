"""The docs, pyproject.toml and the code's comments and docstrings describe lastcall as it is, for its users: no
narration by numbered session ("Session 14, ..."), no "this host", no issue numbers ("issue 17 item 4").  History
lives in CHANGELOG.md and git; a measured figure lives in the generated table of the script that measures it.

Scanned: README.md, every docs/**/*.md but docs/decisions/ (records of decisions, dated as they were made),
pyproject.toml, and the comments (tokenize) and docstrings (ast) of every .py file under harness/, tests/ and
benchmarks/.  Other string literals are not read: a test's data may hold any text.  pytest's own "session" is
fine; only "session" followed by a number matches."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest
from lc_helpers import ROOT

NARRATION = re.compile(r"[Ss]ession \d+|this host|[Ii]ssue \d+")
SELF = Path(__file__).resolve()

Hit = tuple[str, int, str]  # path relative to the root, line, the matching text


def text_hits(path: Path) -> Iterator[Hit]:
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for m in NARRATION.finditer(line):
            yield str(path.relative_to(ROOT)), n, m.group(0)


def _docstrings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(first line, text) of each module, class and function docstring."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None and node.body:
                yield node.body[0].lineno, doc


def python_hits(path: Path) -> Iterator[Hit]:
    """Matches in the comments and docstrings of one .py file, each at its line."""
    source = path.read_text(encoding="utf-8")
    if not NARRATION.search(source):  # most files: nothing to place (tokenizing every file takes seconds)
        return
    rel = str(path.relative_to(ROOT))
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            for m in NARRATION.finditer(tok.string):
                yield rel, tok.start[0], m.group(0)
    for first, doc in _docstrings(ast.parse(source, filename=rel)):
        for m in NARRATION.finditer(doc):
            yield rel, first + doc.count("\n", 0, m.start()), m.group(0)


def markdown_pages() -> list[Path]:
    docs = ROOT / "docs"
    return sorted(p for p in docs.rglob("*.md") if (docs / "decisions") not in p.parents)


def python_files() -> list[Path]:
    return sorted(p for top in ("harness", "tests", "benchmarks") for p in (ROOT / top).rglob("*.py")
                  if p.resolve() != SELF and "__pycache__" not in p.parts)


def hits(group: str) -> list[Hit]:
    if group == "README.md":
        return list(text_hits(ROOT / "README.md"))
    if group == "docs":
        return [h for page in markdown_pages() for h in text_hits(page)]
    if group == "pyproject.toml":
        return list(text_hits(ROOT / "pyproject.toml"))
    assert group == "python comments and docstrings"
    return [h for path in python_files() for h in python_hits(path)]


@pytest.mark.parametrize("group", ["README.md", "docs", "pyproject.toml", "python comments and docstrings"])
def test_no_narration_by_session_host_or_issue(group: str) -> None:
    found = hits(group)
    assert not found, (
        f"{len(found)} narration(s) in {group}: say what is true now (the figure and its table, the reason, the "
        "bound) and move the history to CHANGELOG.md:\n" + "\n".join(f"  {p}:{n}: {t!r}" for p, n, t in found))


def test_the_scan_finds_narration_in_comments_and_docstrings_only(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A comment and a docstring are read; a string literal that is data is not; pytest's session is no match."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    f = tmp_path / "m.py"
    f.write_text('"""Module: as session 12 measured."""\n'
                 "X = 'issue 3 item 4'  # the bound this host met\n"
                 "def f():\n"
                 '    """Runs once per pytest session.\n\n    Since Issue 16: bounded."""\n'
                 "    return 'Session 9' + 'this host'\n")
    assert sorted(python_hits(f)) == [("m.py", 1, "session 12"), ("m.py", 2, "this host"), ("m.py", 6, "Issue 16")]
    page = tmp_path / "p.md"
    page.write_text("pytest's session.json and session start\nSession 21, the two-core machine\n")
    assert list(text_hits(page)) == [("p.md", 2, "Session 21")]
