"""``--repeat N``: run each scenario item N times; one that passes sometimes and fails sometimes is FLAKY.

Repeats are separate items (``name[tp1-pp1-cpu-r2]``, each with its own run id),
so they spread over xdist workers.  At the end of the session the outcomes are
grouped by the item without its repeat index: all failed is a failure, some
failed is reported as flaky, and a flaky item fails the session (exit 1) even
when its last repeat passed: it is never reported as passed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

__all__ = ["addoption", "repeats", "flaky", "terminal_summary", "sessionfinish"]

OPTION = "--repeat"
MAX = 1000  # more is a typo, not a flakiness hunt (lastcall run --repeat has the same bound)
_REPEAT = re.compile(r"-r(\d+)\]$")


def addoption(parser: pytest.Parser) -> None:
    parser.getgroup("lastcall").addoption(
        OPTION, type=int, default=1, metavar="N",
        help="run each scenario item N times; one that passes sometimes and fails sometimes is reported flaky")


def repeats(config: pytest.Config) -> int:
    n = int(config.getoption(OPTION, default=1) or 1)
    if not 1 <= n <= MAX:
        raise pytest.UsageError(f"--repeat must be from 1 to {MAX}, got {n}")
    return n


def base_id(nodeid: str) -> str:
    """The node id without its repeat index."""
    return _REPEAT.sub("]", nodeid)


def flaky(stats: Mapping[str, Iterable[Any]]) -> dict[str, tuple[int, int]]:
    """Items repeated whose outcomes differ: base node id -> (passed, failed)."""
    outcome: dict[str, list[bool]] = defaultdict(list)
    for key in ("passed", "failed"):
        for rep in stats.get(key, ()):
            if getattr(rep, "when", "call") == "call" and _REPEAT.search(getattr(rep, "nodeid", "")):
                outcome[base_id(rep.nodeid)].append(key == "passed")
    return {k: (sum(v), len(v) - sum(v)) for k, v in outcome.items() if any(v) and not all(v)}


def terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    found = flaky(terminalreporter.stats)
    if found:
        terminalreporter.section("lastcall: flaky scenarios")
        for nodeid, (ok, bad) in sorted(found.items()):
            terminalreporter.write_line(f"FLAKY {nodeid}: passed {ok}, failed {bad} of {ok + bad} repeats")


def sessionfinish(session: pytest.Session) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and flaky(reporter.stats) and session.exitstatus == 0:
        session.exitstatus = 1
