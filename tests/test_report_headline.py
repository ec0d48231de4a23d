"""The top of a run's page: the verdicts in words, how the run ended in words, and a catches item's catch."""

from __future__ import annotations

import ast

import pytest
from lc_helpers import ROOT

from harness.checkers.base import ok, unknown, violated
from harness.launch.cluster import OUTCOME_STATUSES
from harness.report.html import OUTCOME_WORDS, outcome_words, render_page, verdict_words
from harness.verdicts_file import clean_meta


def test_every_outcome_status_has_its_words() -> None:
    assert set(OUTCOME_WORDS) == set(OUTCOME_STATUSES)


def test_every_status_the_harness_assigns_is_declared() -> None:
    """A status set anywhere in harness/ (``.status = "X"`` on an outcome, RunOutcome(status="X")) is declared."""
    found: set[str] = set()
    for path in (ROOT / "harness").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and any(isinstance(t, ast.Attribute) and t.attr == "status" and isinstance(t.value, ast.Attribute)
                            and t.value.attr == "outcome" for t in node.targets)):
                found.add(node.value.value)
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "RunOutcome":
                for kw in node.keywords:
                    if kw.arg == "status" and isinstance(kw.value, ast.IfExp):
                        found |= {n.value for n in (kw.value.body, kw.value.orelse) if isinstance(n, ast.Constant)}
    assert found and found <= set(OUTCOME_STATUSES), found - set(OUTCOME_STATUSES)


@pytest.mark.parametrize(("outcome", "words"), [
    ({"status": "ok"}, "ran to the end"),
    ({"status": "hung", "detail": "watchdog after 60 s"}, "hung: watchdog after 60 s"),
    ({"status": "hung"}, "hung: the harness ended it"),
    ({"status": "hung", "detail": "x", "watchdog": {"deadline_s": 60.0}}, "hung: watchdog after 60 s"),
    ({"status": "hung", "watchdog": {"deadline_s": 2.5, "config_s": 1.0, "scale": 2.5}}, "hung: watchdog after 2.5 s"),
    ({"status": "hung", "watchdog": {"config_s": 1.0}}, "hung: the harness ended it"),  # no bound: no number
    ({"status": "failed"}, "failed: could not start"),
    ({"status": "weird"}, "ended as 'weird'"),
])
def test_outcome_words(outcome: dict[str, str], words: str) -> None:
    assert outcome_words(outcome) == words


def test_verdict_words() -> None:
    v, u = violated("a", "m"), unknown("b", "m")
    assert verdict_words([v, v, v, u, ok("c")]) == "3 violated, 1 unknown"
    assert verdict_words([ok("c")] * 12) == "all 12 ok"
    assert verdict_words([]) == "no checker was run"


def _catch(counted: bool) -> dict[str, object]:
    return {"bug": "no_conn_tracking", "checkers": ["reads_cancelled", "stop_result"], "counted": counted,
            "by": ["reads_cancelled"] if counted else [], "why": "caught" if counted else "none <b>fired</b>"}


def test_a_caught_planted_bug_says_why_the_item_passed() -> None:
    doc = {"scenario": "s", "outcome": {"status": "ok"}, "catch": _catch(True)}
    page = render_page(doc, [violated("reads_cancelled", "m"), ok("x")], [])
    assert "expected to be caught: caught by reads_cancelled, so this item passed" in page
    assert 'data-kind="catch" data-counted="true"' in page
    assert page.index('data-kind="catch"') < page.index('id="verdicts"')
    assert "1 violated</b>; the run <span data-kind=\"outcome-words\">ran to the end" in page


def test_a_missed_catch_says_why_the_item_failed_escaped() -> None:
    page = render_page({"outcome": {"status": "ok"}, "catch": _catch(False)}, [ok("x")], [])
    assert "expected to be caught by reads_cancelled, stop_result: not caught, so this item failed" in page
    assert "none &lt;b&gt;fired&lt;/b&gt;" in page and "<b>fired" not in page


def test_no_catch_line_without_a_catch() -> None:
    assert 'data-kind="catch"' not in render_page({"outcome": {"status": "ok"}}, [ok("x")], [])


def test_a_catch_of_the_wrong_shape_is_left_out_with_its_place() -> None:
    meta, problems = clean_meta({"catch": {"checkers": "reads_cancelled", "counted": True}}, "v.json")
    assert "catch" not in meta and problems and problems[0].startswith("v.json: catch: ")
    meta, problems = clean_meta({"catch": _catch(True)}, "v.json")
    assert meta["catch"] == _catch(True) and problems == []
