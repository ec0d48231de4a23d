"""Helpers the harness's own tests share (not a test module: pytest does not collect it)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness.launch.cluster import RemoteError
from harness.launch.judged import JudgedCluster
from harness.scenario.runner import STEP_KINDS

Make = Callable[..., JudgedCluster]


def until(cond: Callable[[], Any], limit: float = 5.0) -> Any:
    """Re-evaluate ``cond`` (a /proc or file-system read) until it is truthy; fail after ``limit`` seconds
    (a safety net, not a timer)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
    pytest.fail("condition not reached in time")


def handshake_clusters(**fixed: Any) -> Iterator[Make]:
    """The body of a ``make`` fixture: ``make(**kw)`` starts a handshake JudgedCluster (with ``fixed`` as defaults);
    every one made is closed when the test ends."""
    made: list[JudgedCluster] = []

    def start(**kw: Any) -> JudgedCluster:
        c = JudgedCluster(**{"cast": "handshake", **fixed, **kw})
        made.append(c)
        return c.start()

    yield start
    for c in made:
        c.close()


def step(c: JudgedCluster, name: str, kind: str, fn: Callable[[], object], **data: object) -> object:
    """Run ``fn`` as the step ``name`` of ``kind`` (a registered step kind), recorded as step_started /
    step_returned with the kind's category, as the Player records it (what the checkers read)."""
    data = {"category": STEP_KINDS[kind].category, **data}
    c.rec.emit("step_started", step=name, kind=kind, **data)
    try:
        value = fn()
    except RemoteError as exc:
        c.rec.emit("step_returned", step=name, kind=kind, ok=False, value=None, error=str(exc),
                   error_class=exc.error_class, **data)
        return exc
    c.rec.emit("step_returned", step=name, kind=kind, ok=True, value=value, **data)
    return value


def status(c: JudgedCluster, *checks: object) -> dict[str, str]:
    return {v.checker: v.status for v in c.verdicts(*checks)}  # type: ignore[arg-type]
