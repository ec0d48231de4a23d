"""A verdict's evidence on the run's page: each event's data as nested key/value tables a person reads at a
glance (pids, paths, seconds as cells), escaped and bounded whatever the history holds; never a dict's repr."""

from __future__ import annotations

import re
from typing import Any

import pytest

from harness.checkers.base import violated
from harness.history import Event
from harness.report.html import KV_CHARS, KV_DEPTH, render_page

BLANK = render_page({"outcome": {"status": "ok"}}, [violated("engine_tree_exits", "m", [])], [])


def _cell(data: dict[str, Any]) -> str:
    """The data cell of the one evidence event's row on its page."""
    e = Event(1_000_000, 4242, "harness", "", "MainThread", "step_returned", data)
    page = render_page({"outcome": {"status": "ok"}}, [violated("engine_tree_exits", "m", [e])], [e])
    start = page.index('<td class="data">')
    return page[start:page.index("</td></tr>\n", start)]


def test_evidence_is_a_table_of_its_fields_never_a_repr() -> None:
    cell = _cell({"step": "gone", "ok": True, "value": {
        "gone": False, "seconds": 1.006, "survivors": [{"pid": 22699, "ppid": 22615, "name": "py\x1b[31mthon"}],
        "paths": ["/tmp/a.sock", "<b>x</b>"]}})
    assert "{&#x27;" not in cell and "{'" not in cell and "[{" not in cell
    assert "<th>step</th><td><code>gone</code></td>" in cell
    assert "<th>survivors</th>" in cell and "<tr><th>pid</th><th>ppid</th><th>name</th></tr>" in cell
    assert "<td><code>22699</code></td><td><code>22615</code></td>" in cell
    assert "<th>seconds</th><td><code>1.006</code></td>" in cell
    assert "<div><code>/tmp/a.sock</code></div>" in cell
    assert "py\\x1b[31mthon" in cell and "\x1b" not in cell
    assert "&lt;b&gt;x&lt;/b&gt;" in cell and "<b>x</b>" not in cell


def _deep(n: int) -> object:
    value: object = "bottom"
    for _ in range(n):
        value = {"a": value}
    return value


# Each is a line's worth of a history (some MB at most, as the JSON the history holds; the tooltips and the
# text timeline write the event's data out once before cutting it), far over one event's budget.
HOSTILE: dict[str, dict[str, Any]] = {
    "many keys, each a wide table": {f"k{i}": {f"j{j}": ["x" * 100] * 10 for j in range(50)} for i in range(50)},
    "many rows of many columns": {"value": [{f"c{i}": "y" * 60 for i in range(50)}] * 300},
    "many empty cells": {"value": [{}] * 50_000, "e": [""] * 50_000, "m": {str(i): "" for i in range(50_000)}},
    "a huge string": {"value": "z" * 10_000_000},
    "deep nesting": {"value": _deep(900), "list": [[[[[[["deep"]]]]]]]},
    "html in keys and values": {f"<script>alert({i})</script>": f'"><img src=x onerror=alert({i})>'
                                for i in range(5000)},
}


@pytest.mark.parametrize("name", HOSTILE)
def test_evidence_tables_are_bounded_and_escaped_whatever_the_data_holds(name: str) -> None:
    cell = _cell(HOSTILE[name])
    assert len(cell) < 15 * KV_CHARS, len(cell)
    assert "more" in cell or "too deep" in cell or "characters)" in cell
    assert "<script" not in cell and "<img" not in cell
    assert re.findall(r"</?(\w+)", cell) and set(re.findall(r"</?(\w+)", cell)) <= {
        "td", "tr", "th", "table", "code", "div", "span", "i"}
    assert "{&#x27;" not in cell and "[&#x27;" not in cell


def test_a_page_of_hostile_evidence_stays_bounded() -> None:
    """Every hostile event as evidence of one verdict, each the whole table's worth: the page grows by the
    budget of each at most."""
    events = [Event(1_000_000 + i, 4242, "harness", "", "MainThread", "x", d) for i, d in enumerate(HOSTILE.values())]
    page = render_page({"outcome": {"status": "ok"}}, [violated("c", "m", events)], events)
    assert len(page) - len(BLANK) < len(events) * 40 * KV_CHARS, len(page)


def test_nesting_deeper_than_the_tables_is_named_with_its_size() -> None:
    cell = _cell({"value": _deep(900), "list": [[[[[["deep"]]]]]]})
    assert cell.count("<table") <= KV_DEPTH + 1, cell.count("<table")
    assert "(a mapping of 1 keys, nested too deep to show)" in cell
    assert "(a list of 1 items, nested too deep to show)" in cell and "deep&#x27;" not in cell
