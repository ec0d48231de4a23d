"""The floors of harness/ (docs/architecture.md): no unit imports a unit of a higher floor, and no two units
import each other.  The graph is drawn from the sources with ``ast``: every import, at a module's top or inside
a function, ``TYPE_CHECKING`` ones included."""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

import pytest
from lc_helpers import ROOT

PAGE = ROOT / "docs" / "architecture.md"
HARNESS = ROOT / "harness"


def floors(page: str) -> dict[str, int]:
    """unit -> floor, from the page's table between its markers."""
    table = page.split("<!-- floors:begin -->")[1].split("<!-- floors:end -->")[0]
    out: dict[str, int] = {}
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].isdigit():
            continue
        for unit in re.findall(r"`([\w.]+)`", cells[1]):
            assert unit not in out, f"docs/architecture.md places {unit} twice"
            out[unit] = int(cells[0])
    return out


def unit_of(module: str, known: dict[str, int]) -> str:
    """``harness.a.b.c`` -> the longest listed prefix of ``a.b.c`` (``a.b`` when listed, else ``a``)."""
    parts = module.split(".")[1:]
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in known:
            return ".".join(parts[:n])
    return parts[0]


def imports(path: Path) -> list[tuple[str, int]]:
    """The harness modules ``path`` imports (absolute and relative), with their lines."""
    rel = path.relative_to(ROOT).with_suffix("").parts
    package = list(rel[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[:len(package) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            # a name may be a module (``from harness import cli``): the longest listed prefix decides
            names = [f"{base}.{a.name}" for a in node.names]
            out += [(m, node.lineno) for m in names]
    return [(m, line) for m, line in out if m == "harness" or m.startswith("harness.")]


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(rel[:-1] if rel[-1] == "__init__" else rel)


def graph(known: dict[str, int], paths: list[Path] | None = None) -> dict[tuple[str, str], list[str]]:
    """(importer unit, imported unit) -> where, for every edge between two units (of the modules ``paths``,
    default every module of harness/)."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(HARNESS.rglob("*.py")) if paths is None else paths:
        if path == HARNESS / "__init__.py":
            continue
        src = unit_of(module_name(path), known)
        for mod, line in imports(path):
            if mod == "harness":
                continue
            dst = unit_of(mod, known)
            if dst != src:
                edges[(src, dst)].append(f"{path.relative_to(ROOT)}:{line}")
    return edges


KNOWN = floors(PAGE.read_text())


@functools.cache
def real_graph() -> dict[tuple[str, str], list[str]]:
    return graph(KNOWN)


def test_every_unit_of_harness_has_a_floor() -> None:
    units = {unit_of(module_name(p), KNOWN) for p in HARNESS.rglob("*.py") if p != HARNESS / "__init__.py"}
    assert units - set(KNOWN) == set(), "give each a floor in docs/architecture.md"
    assert set(KNOWN) - units == set(), "docs/architecture.md places units that harness/ no longer has"


def test_no_unit_imports_a_higher_floor() -> None:
    # a unit without a floor is test_every_unit_of_harness_has_a_floor's failure
    upward = [f"{a} (floor {KNOWN[a]}) imports {b} (floor {KNOWN[b]}) at {', '.join(where)}"
              for (a, b), where in sorted(real_graph().items()) if a in KNOWN and b in KNOWN and KNOWN[b] > KNOWN[a]]
    assert upward == [], "\n".join(upward)


def test_no_two_units_import_each_other() -> None:
    edges = real_graph()
    both = [f"{a} <-> {b}: {edges[(a, b)][0]} and {edges[(b, a)][0]}" for a, b in sorted(edges)
            if a < b and (b, a) in edges]
    assert both == [], "\n".join(both)


@pytest.mark.parametrize("source, where", [
    ("from harness.scenario.player import Player\n", "harness/checkers/planted.py"),
    ("def f():\n    from harness import cli\n", "harness/reference/planted.py"),
    ("from ..report import html\n", "harness/launch/planted.py"),
])
def test_an_upward_import_is_found(source: str, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph sees a planted upward import: at the top, inside a function, and relative."""
    path = ROOT / where
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: source if self == path else _read(self, *a, **k))
    src = unit_of(module_name(path), KNOWN)
    found = [b for (a, b) in graph(KNOWN, [path]) if a == src and KNOWN[b] > KNOWN[a]]
    assert found, f"the planted import in {where} was not seen"


_read = Path.read_text
