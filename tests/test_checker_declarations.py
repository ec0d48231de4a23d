"""What each built-in checker declares beside its function: whether it observes the exit (the fast exit is derived
from it: tests/test_exitmode.py), and, for one with a time bound, what it times and how load changes it (rendered
into docs/checkers.md)."""

from __future__ import annotations

from harness.checkers.base import CHECKERS


def _built_in() -> dict[str, object]:
    return {n: c for n, c in CHECKERS.items() if c.fn.__module__.startswith("harness.")}


def test_every_checker_with_a_time_bound_says_what_it_times_and_how_load_changes_it() -> None:
    bounded = sorted(n for n, c in CHECKERS.items() if c.fn.__module__.startswith("harness.")
                     and "within" in c.params.model_fields)
    assert "reads_cancelled" in bounded and "exit_without_stall" in bounded
    silent = [n for n in bounded if not CHECKERS[n].timing]
    assert not silent, f"checkers with a time bound that do not declare timing=: {silent}"
    for name in bounded:
        assert "load" in CHECKERS[name].timing.lower() or "Load" in CHECKERS[name].timing, name


def test_the_declarations_reach_the_checkers_page() -> None:
    from harness.checkers.docs import render_markdown

    page = render_markdown()
    assert "## Time bounds, and what load does to them" in page and "## Which checkers observe the exit" in page
    for name, chk in _built_in().items():
        if chk.timing:  # type: ignore[attr-defined]
            assert f"| `{name}` | {chk.timing} |" in page  # type: ignore[attr-defined]
