"""No module of harness/ reaches into pytest's or pytest-xdist's internals: what the plugin does, a user's
pytest does too, and an upgrade of either cannot change a verdict through an attribute nobody promised.

Read from the source (ast): an import of ``_pytest`` or of a module of ``xdist``'s, an attribute of a single
leading underscore read from a pytest object (a name as pytest's hooks and fixtures call them: config, item,
session, ...), and getattr/hasattr/setattr/delattr of such a name from one, or of one of xdist's scheduler
internals from anything.  (A target adapter reaches into the system under test's own privates: that is its job.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parent.parent / "harness"
# the names pytest's hooks and fixtures give its objects, and what is reached through them
PYTEST_OBJECTS = {"config", "item", "items", "session", "node", "request", "parser", "pluginmanager",
                  "terminalreporter", "reporter", "metafunc", "excinfo", "report", "collector", "parent", "nextitem",
                  "pytester", "worker", "plugin", "pytestconfig"}
# attributes of pytest-xdist's scheduler and worker controllers, none of them its API
XDIST_INTERNALS = {"torun", "nextitem_index", "node2pending", "workerqueue", "node2collection",
                   "registered_collections", "steal_items"}
PUBLIC_XDIST = {"xdist"}  # the package itself: is_xdist_worker, get_xdist_worker_id


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def touches(source: str, filename: str = "<string>") -> list[str]:
    """Where ``source`` reaches into pytest or xdist, one ``line: what`` each."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] == "_pytest"
                      or (a.name.startswith("xdist.") and a.name not in PUBLIC_XDIST)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top = node.module.split(".")[0]
            if top == "_pytest" or (top == "xdist" and node.module not in PUBLIC_XDIST):
                found.append(f"{node.lineno}: from {node.module} import ...")
            elif node.module in ("pytest", "xdist") and any(_private(a.name) for a in node.names):
                found.append(f"{node.lineno}: from {node.module} import a private name")
        elif isinstance(node, ast.Attribute) and _private(node.attr) and _root(node.value) in PYTEST_OBJECTS:
            found.append(f"{node.lineno}: {_root(node.value)}...{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            name = node.args[1].value
            if (_private(name) and _root(node.args[0]) in PYTEST_OBJECTS) or name in XDIST_INTERNALS:
                found.append(f"{node.lineno}: {node.func.id}(..., {name!r})")
    return found


def test_no_module_of_harness_touches_a_private_attribute_of_pytest_or_xdist() -> None:
    bad = {str(p.relative_to(HARNESS.parent)): hits for p in sorted(HARNESS.rglob("*.py"))
           if (hits := touches(p.read_text(), str(p)))}
    assert not bad, bad


@pytest.mark.parametrize("source", [
    "import _pytest.fixtures",
    "from _pytest.main import Session",
    "from xdist.dsession import DSession",
    "from xdist.scheduler import LoadScheduling",
    "info = item._fixtureinfo",
    "session = terminalreporter._session",
    "x = config.pluginmanager._name2plugin",
    "t = getattr(plugin, 'torun', None)",
    "n = getattr(worker, 'nextitem_index', None)",
    "info = getattr(item, '_fixtureinfo', None)",
    "hasattr(session, '_setupstate')",
])
def test_each_way_in_is_found(source: str) -> None:
    assert touches(source), source


@pytest.mark.parametrize("source", [
    "import xdist",
    "from xdist import is_xdist_worker",
    "w = getattr(config, 'workerinput', None)",
    "names = item.fixturenames",
    "self._lock = None",
    "x = other._private_of_ours",  # harness's own objects are harness's business
    "k = getattr(module, '_WorkerListener', None)",  # a target adapter reading its system under test
    "s = terminalreporter.stats",
])
def test_public_means_are_not(source: str) -> None:
    assert touches(source) == [], source
