"""Every ``LASTCALL_*`` variable is declared once, in harness.envvars.VARS, and harness/ reads one only through
harness.envvars (number, flag, text): a variable read anywhere else would be missing from docs/environment.md
and from the check every command makes before it starts."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from lc_helpers import ROOT

from harness import envvars
from harness.errors import ConfigError

NAME = re.compile(r"\bLASTCALL_[A-Z][A-Z0-9_]*\b")
SOURCES = [*ROOT.glob("harness/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("benchmarks/*.py"),
           ROOT / "conftest.py", ROOT / "dev", ROOT / ".ci" / "run", *ROOT.glob("docs/**/*.md"), ROOT / "README.md"]


def test_every_lastcall_variable_named_anywhere_is_declared() -> None:
    named = {(m.group(0), str(p.relative_to(ROOT))) for p in SOURCES if p.is_file() and p != Path(__file__)
             for m in NAME.finditer(p.read_text(errors="replace"))}
    undeclared = sorted({f"{name} ({where})" for name, where in named if name not in envvars.VARS})
    assert undeclared == [], "declare each in harness/envvars.py VARS"


def _reads(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) of each os.environ.get / os.getenv / os.environ[...] read of a LASTCALL_ constant, either
    literal or a module-level name bound to one."""
    consts = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
              and isinstance(n.value.value, str) for t in n.targets if isinstance(t, ast.Name)}

    def name_of(arg: ast.expr) -> str | None:
        value = arg.value if isinstance(arg, ast.Constant) else consts.get(arg.id) if isinstance(arg, ast.Name) \
            else None
        return value if isinstance(value, str) and value.startswith("LASTCALL_") else None

    getters = ("os.environ.get", "os.getenv", "environ.get", "getenv")
    out = []
    for node in ast.walk(tree):
        arg = None
        if isinstance(node, ast.Call) and node.args and ast.unparse(node.func) in getters:
            arg = node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and ast.unparse(node.value) in (
                "os.environ", "environ"):
            arg = node.slice
        if arg is not None and (name := name_of(arg)) is not None:
            out.append((node.lineno, name))
    return out


def test_harness_reads_lastcall_variables_only_through_envvars() -> None:
    found = [f"{p.relative_to(ROOT)}:{line}: {name}" for p in sorted(ROOT.glob("harness/**/*.py"))
             if p.name != "envvars.py" for line, name in _reads(ast.parse(p.read_text()))]
    assert found == [], "read them with harness.envvars.number / flag / text"


def test_a_direct_read_is_found() -> None:
    planted = ('import os\nSRC = "LASTCALL_X"\na = os.environ.get("LASTCALL_Y")\nb = os.environ[SRC]\n'
               'os.environ[SRC] = "1"\n')
    assert _reads(ast.parse(planted)) == [(3, "LASTCALL_Y"), (4, "LASTCALL_X")]


@pytest.mark.parametrize("raw, ok", [("1", True), ("0", True), ("", True), ("yes", False), ("2", False)])
def test_a_flag_takes_0_or_1(raw: str, ok: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LASTCALL_STRICT_EVENTS", raw)
    if ok:
        assert envvars.flag("LASTCALL_STRICT_EVENTS") is (raw == "1")
        envvars.check()
    else:
        with pytest.raises(ConfigError, match=rf"LASTCALL_STRICT_EVENTS='{raw}': expected 0 or 1"):
            envvars.check()


def test_an_undeclared_variable_cannot_be_read() -> None:
    with pytest.raises(KeyError, match="LASTCALL_NOPE is not declared"):
        envvars.text("LASTCALL_NOPE")
