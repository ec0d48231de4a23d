"""``--lastcall-chain`` (``lastcall run --chain``): a session's engine scenario items run as chained runs.

Once collection is done (and after ``-k``/``-m`` deselected what they deselect), the session's scenario items
of an engine run are grouped per target (the run's variant: a catches item's planted bug is its own group)
and planned by :func:`harness.scenario.chain.plan`: a scenario that ends by restarting its engine hands that
ready, untouched engine to the next one of the same launch flags.  Every chain of two or more becomes one
chained run (:func:`harness.scenario.runner.run_chain`), played when its first item runs; each item then takes
its own result (its own window, report and verdicts) and passes or fails as it would alone.  The items of a
chain are moved next to each other, at the place of the first one; every other item keeps its place.

One process only: under pytest-xdist the items of a chain could land on two workers, each of which would then
play the whole chain, so ``-n`` with this option is a usage error (an engine that holds the machine's engine
lock runs one at a time anyway).  The first item of a chain carries the whole chain's time in ``--durations``
and JUnit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

__all__ = ["OPTION", "addoption", "check", "modifyitems", "Chain"]

OPTION = "--lastcall-chain"


def addoption(parser: pytest.Parser) -> None:
    parser.getgroup("lastcall").addoption(
        OPTION, action="store_true", default=False, dest="lastcall_chain",
        help="run engine scenarios as chained runs: one that ends by restarting its engine hands it to the next "
             "of the same flags, each judged on its own window (one process: not with -n)")


def check(config: pytest.Config) -> None:
    """A usage error for the option with pytest-xdist workers."""
    if config.getoption("lastcall_chain", default=False) and config.getoption("numprocesses", default=None):
        raise pytest.UsageError(f"{OPTION} runs in one process: drop -n (a chain's scenarios share one engine, "
                                "and real engines run one at a time anyway)")


class Chain:
    """The items of one chained run; the run is played once, when the first of them asks for its result."""

    def __init__(self, items: list[Any], variant: str) -> None:
        self.items = items
        self.variant = variant
        self._results: dict[int, Any] | None = None

    def result(self, item: Any) -> Any:
        if self._results is None:
            from harness.scenario.runner import run_chain

            out = run_chain([i.matrix for i in self.items], variant=self.variant)
            self._results = {id(i): r for i, r in zip(self.items, out, strict=True)}
        return self._results[id(item)]


def modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the engine scenario items into chains (each item's ``chain``) and put each chain's items together."""
    if not config.getoption("lastcall_chain", default=False):
        return
    from harness.scenario.chain import launch_key, plan
    from harness.scenario.collect import ScenarioItem

    groups: dict[str, list[ScenarioItem]] = {}
    for it in items:
        if isinstance(it, ScenarioItem) and launch_key(it.matrix) is not None:
            groups.setdefault(it.variant or it.matrix.scenario.target, []).append(it)
    for variant, members in groups.items():
        copies = [dataclasses.replace(it.matrix) for it in members]  # one object each, repeats of one item too
        back = {id(c): it for c, it in zip(copies, members, strict=True)}
        for ch in plan(copies):
            if len(ch) > 1:
                chain = Chain([back[id(c)] for c in ch], variant)
                for it in chain.items:
                    it.chain = chain
    out: list[pytest.Item] = []
    placed: set[int] = set()
    for it in items:
        mine: Chain | None = getattr(it, "chain", None)
        if mine is None:
            out.append(it)
        elif id(mine) not in placed:
            placed.add(id(mine))
            out.extend(mine.items)
    items[:] = out
