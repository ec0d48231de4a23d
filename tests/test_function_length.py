"""No function of harness/ is over MAX_LINES lines (from its ``def`` to its last line, docstring included;
methods and nested functions each counted on their own), except the few in ALLOWED, each with the reason it is
not split yet; an entry that is split (or gone) must leave the list."""

from __future__ import annotations

import ast
from pathlib import Path

from lc_helpers import ROOT

MAX_LINES = 80  # a function longer than this is split into named steps

# "path:qualname" -> why it is longer than MAX_LINES for now
ALLOWED = {
    # 126 lines: its checks of the arguments and its loop that starts one worker per arm are the parts to pull
    # out, but harness/bench/command.py is 481 lines, so they need a module of their own first (the 500-line
    # limit), and the bench's own tests are the ones that prove such a move
    "harness/bench/command.py:run_bench": "a split first needs bench/command.py split (481 lines)",
}


def long_functions(root: Path, under: str = "harness") -> dict[str, int]:
    """``path:qualname`` -> lines, of every function under ``root/under`` longer than MAX_LINES."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str, rel: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lines = (child.end_lineno or child.lineno) - child.lineno + 1
                    if lines > MAX_LINES:
                        out[f"{rel}:{name}"] = lines
                visit(child, f"{name}.", rel)
            else:
                visit(child, prefix, rel)

    for path in sorted((root / under).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        visit(ast.parse(path.read_text(), rel), "", rel)
    return out


def test_no_function_is_over_the_limit_unless_allowed() -> None:
    over = {name: n for name, n in long_functions(ROOT).items() if name not in ALLOWED}
    assert not over, "\n".join(f"{name} is {n} lines (at most {MAX_LINES}): split it into named steps"
                               for name, n in sorted(over.items()))


def test_every_allowed_function_is_still_over_the_limit() -> None:
    found = long_functions(ROOT)
    gone = [name for name in ALLOWED if name not in found]
    assert not gone, f"split or removed, so take them out of ALLOWED: {gone}"


def test_a_long_function_is_found_wherever_it_is_nested(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))  # with its def: one line over
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        f"def long():\n{body}\n\n\ndef short():\n    return 1\n\n\nclass C:\n    def method(self):\n"
        + "\n".join(f"    {line}" for line in body.splitlines()) + "\n\n"
        + "def outer():\n    def inner():\n" + "\n".join(f"    {line}" for line in body.splitlines()) + "\n")
    assert long_functions(tmp_path, "pkg") == {"pkg/m.py:long": MAX_LINES + 1, "pkg/m.py:C.method": MAX_LINES + 1,
                                               "pkg/m.py:outer": MAX_LINES + 2,
                                               "pkg/m.py:outer.inner": MAX_LINES + 1}
