"""What ``-m "not slow"`` leaves to the full suite: evidence it already holds, never evidence it would lose.

The full suite (``./dev test``, the CI gate) runs everything.  ``-m "not slow"`` is the quick loop, and two
rules move a test out of it, both applied at collection (before ``-m`` deselects), both checked there:

* **A planted bug caught twice by the same checkers** (ini ``lastcall_catch_once = true``).  Scenario items
  ``name[...-catches-BUG]`` of different scenarios that run the same bug (the same target spec) and pass on the
  same set of checkers prove the same thing for ``-m "not slow"``: that BUG's defect is real and those checkers
  see it.  One of them is kept (a test that another test names as its cover first, then the quickest by the
  committed ``.test_durations`` of pytest-split, then the first by node id); the others are marked ``slow``,
  each with the kept one as its cover.  Every scenario's reference items stay, so every scenario still runs
  and must pass; repeats (``--repeat``) of one item never cover each other, as they are one scenario.
* **A test that names its cover** (``@pytest.mark.covered_by("NODEID", ...)``): a test whose behaviour one or
  more other tests also prove (a Python-API run of what a scenario item runs from YAML, say) is marked
  ``slow``.  Each cover must be collected and not slow: a cover renamed away, or itself moved, is a
  ``pytest.UsageError`` at collection naming both, as an unknown mark is under ``--strict-markers``.  A cover
  whose file this session did not collect (``pytest tests/test_x.py``) is not checked.

Which tests moved and what covers each is listed in docs/running.md (written by ``python -m
harness.scenario.quick --write``; tests/test_quick.py checks the page against its own session).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.scenario.durations import durations

__all__ = ["INI", "MARK", "Move", "plan", "modifyitems", "moves_of", "table", "catch_id"]

INI = "lastcall_catch_once"
MARK = "covered_by"
MARK_DOC = ("covered_by(NODEID, ...): the named tests prove what this one does; it runs in the full suite and is "
            "left out by -m 'not slow' (each cover must be collected and not slow)")
_MOVES = pytest.StashKey[tuple["Move", ...]]()
_COMPLETE = pytest.StashKey[bool]()


@dataclass(frozen=True)
class Move:
    """One test left out of ``-m "not slow"``: its node id, the tests that cover it, and by which rule."""

    nodeid: str
    covers: tuple[str, ...]
    rule: str  # "catch_once" or "covered_by"


def catch_id(scenario: str, bug: str, point: str = "tp1-pp1-cpu", root: str = "scenarios") -> str:
    """The node id of a library scenario's catches item, for a ``covered_by``."""
    return f"{root}/{scenario}.yaml::{scenario}[{point}-catches-{bug}]"


def addini(parser: pytest.Parser) -> None:
    parser.addini(INI, type="bool", default=False,
                  help="mark slow every scenario catches item whose bug and checkers another scenario's catches "
                  "item already proves (-m 'not slow' keeps one)")


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _slow(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is not None


def _runs(item: pytest.Item) -> bool:
    return item.get_closest_marker("skip") is None


def _named(item: pytest.Item) -> tuple[str, ...]:
    return tuple(c for m in item.iter_markers(MARK) for c in m.args)


def plan(items: Sequence[pytest.Item], *, catch_once: bool, seconds: Mapping[str, float]) -> list[Move]:
    """The moves for these collected items (before ``-m`` deselects), in node id order."""
    from harness.scenario.collect import ScenarioItem

    for it in items:
        if it.get_closest_marker(MARK) is not None and not _named(it):
            raise pytest.UsageError(f"{it.nodeid}: {MARK} names no test; give the node id of each test that covers "
                                    f"it, e.g. @pytest.mark.{MARK}(\"tests/test_x.py::test_y\")")
    moves = [Move(it.nodeid, _named(it), MARK) for it in items if _named(it) and not _slow(it)]
    if catch_once:
        named = {c for m in moves for c in m.covers}
        groups: dict[tuple[Any, ...], dict[str, list[pytest.Item]]] = defaultdict(lambda: defaultdict(list))
        for it in items:
            if isinstance(it, ScenarioItem) and it.catch is not None and not _slow(it) and _runs(it):
                bug, checkers = it.catch
                key = (it.variant or bug, tuple(sorted(checkers)))
                groups[key][it.matrix.scenario.name].append(it)
        for by_scenario in groups.values():
            if len(by_scenario) < 2:
                continue

            def rank(name: str, by: Mapping[str, list[pytest.Item]] = by_scenario) -> tuple[bool, float, str]:
                its = by[name]
                cost = sum(seconds.get(i.nodeid, math.inf) for i in its)
                return (not any(i.nodeid in named for i in its), cost, its[0].nodeid)

            kept, *rest = sorted(by_scenario, key=rank)
            cover = tuple(i.nodeid for i in by_scenario[kept])
            moves += [Move(i.nodeid, cover, "catch_once") for name in rest for i in by_scenario[name]]
    return sorted(moves, key=lambda m: m.nodeid)


def _check(items: Sequence[pytest.Item], moves: Iterable[Move]) -> None:
    ids = {it.nodeid for it in items}
    files = {_file(i) for i in ids}
    moved = {m.nodeid for m in moves}
    slow = {it.nodeid for it in items if _slow(it)}
    for m in moves:
        for cover in m.covers:
            if cover == m.nodeid:
                raise pytest.UsageError(f"{m.nodeid}: {MARK} names the test itself")
            if _file(cover) not in files:
                continue  # not collected this session: not checked
            if cover not in ids:
                raise pytest.UsageError(f"{m.nodeid}: its {MARK} cover {cover} is not a collected test "
                                        f"(renamed or removed?)")
            if cover in moved or cover in slow:
                raise pytest.UsageError(f"{m.nodeid}: its {MARK} cover {cover} is itself slow: -m 'not slow' "
                                        f"would keep neither")


def modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the moves slow (before -m deselects) and keep them for the docs check."""
    catch_once = bool(config.getini(INI))
    moves = plan(items, catch_once=catch_once, seconds=durations(config.rootpath) if catch_once else {})
    _check(items, moves)
    by_id = {m.nodeid: m for m in moves}
    for it in items:
        if it.nodeid in by_id:
            it.add_marker(pytest.mark.slow)
    config.stash[_MOVES] = tuple(moves)
    config.stash[_COMPLETE] = config.args_source == pytest.Config.ArgsSource.TESTPATHS


def moves_of(config: pytest.Config) -> tuple[Move, ...] | None:
    """This session's moves, or None when it did not collect the whole suite (arguments named on the line)."""
    if not config.stash.get(_COMPLETE, False):
        return None
    return config.stash.get(_MOVES, ())


BEGIN, END = "<!-- not-slow-moves:begin -->", "<!-- not-slow-moves:end -->"


def table(moves: Iterable[Move]) -> str:
    """The docs table of the moves: each test, by which rule, and its covers."""
    rows = ["| left out of `-m \"not slow\"` | rule | covered by (kept in `-m \"not slow\"`) |", "|---|---|---|"]
    for m in moves:
        rows.append(f"| `{m.nodeid}` | {m.rule} | {'<br>'.join(f'`{c}`' for c in m.covers)} |")
    return "\n".join(rows)


def page_table(page: Path) -> str:
    text = page.read_text()
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip("\n")


def _collect(rootdir: Path) -> tuple[Move, ...]:
    from harness.scenario import quick  # the plugin's module (under -m this one is __main__, with other keys)

    got: list[tuple[Move, ...] | None] = []

    class Grab:
        @pytest.hookimpl(trylast=True)
        def pytest_collection_finish(self, session: pytest.Session) -> None:
            got.append(quick.moves_of(session.config))

    code = pytest.main(["--collect-only", "-qq", "-p", "no:cacheprovider", "--rootdir", str(rootdir)],
                       plugins=[Grab()])
    if code != 0 or not got or got[0] is None:
        raise SystemExit(f"collection failed (exit {int(code)}): the moves are unknown")
    return got[0]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m harness.scenario.quick [--write]``: print (or write into docs/running.md) the moves."""
    import argparse
    import os

    ap = argparse.ArgumentParser(prog="python -m harness.scenario.quick", description=main.__doc__)
    ap.add_argument("--write", action="store_true", help="write the table into docs/running.md")
    args = ap.parse_args(argv)
    root = Path.cwd()
    os.chdir(root)
    text = table(_collect(root))
    if args.write:
        page = root / "docs" / "running.md"
        old = page.read_text()
        start, stop = old.index(BEGIN) + len(BEGIN), old.index(END)
        page.write_text(old[:start] + "\n" + text + "\n" + old[stop:])
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
