"""Step categories: what a step does to the system under test, which the checkers select on.

Every ``step_started`` / ``step_returned`` event carries the step's own ``kind`` (``handshake_shutdown``,
``stop``, ``send``, ...) and its ``category``: a checker that judges every stop selects ``category ==
"stop"`` and so judges a worker ``stop``, an integration ``shutdown`` and a ``handshake_shutdown`` alike,
without the runner recording one under another's kind.  A step kind declares its category where it is
registered (harness.scenario.player); the category must be one of :data:`CATEGORIES`.

Histories written before steps carried a category (handshake steps then were recorded under ``restart``,
``stop`` and ``send``) are read through :data:`CATEGORY_OF_KIND`.  This module imports nothing of the
harness, so checkers and the runner can both use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["CATEGORIES", "CATEGORY_OF_KIND", "LIFECYCLE", "category_of", "check_categories"]

CATEGORIES: dict[str, str] = {
    "launch": "start the run's processes",
    "start": "start (or restart) a listener: ok with what it bound, or refused",
    "stop": "stop a listener (a stop, an integration shutdown, a handshake listener's shutdown)",
    "cycle": "start and stop listeners in turn; its value is what each round bound",
    "request": "one request on the listener's wire from the harness as a client, maybe malformed",
    "call": "a call of the engine side's client",
    "traffic": "connections that idle, flood, stall or hammer, and ending them",
    "fault": "arm or release a failpoint",
    "sync": "wait for something to happen",
    "measure": "watch a process from outside for a while: what it costs while its clients idle",
    "exit": "ask processes to end",
    "signal": "send a signal to a process",
    "environment": "change what the listener relies on: its paths, a port",
    "control": "lastcall ctl on the run's instance",
    "workload": "generated waves of calls",
}
LIFECYCLE = ("start", "stop", "cycle")  # the categories whose value says whether the listener did what it was told

CATEGORY_OF_KIND: dict[str, str] = {  # the category of a version-1 step event (no category key), by its kind
    "start": "launch", "restart": "start", "stop": "stop", "shutdown": "stop", "send": "request", "call": "call",
    "idle": "traffic", "flood": "traffic", "finish": "traffic", "hammer": "traffic", "stop_hammer": "traffic",
    "arm": "fault", "release": "fault", "wait": "sync", "exit": "exit", "kill": "signal", "remove": "environment",
    "replace": "environment", "hold_port": "environment", "ctl": "control", "workload": "workload",
}


def category_of(data: Mapping[str, Any]) -> str | None:
    """The category of a step event's data: its ``category``, else that of its ``kind`` (version 1)."""
    cat = data.get("category")
    if isinstance(cat, str):
        return cat
    return CATEGORY_OF_KIND.get(str(data.get("kind")))


def check_categories(classes: Iterable[Any]) -> None:
    """ValueError naming a step class (its ``kind``, its ``category``) whose category is not one of CATEGORIES."""
    for c in classes:
        if c.category not in CATEGORIES:
            raise ValueError(f"step kind {c.kind!r}: unknown category {c.category!r}; known: {', '.join(CATEGORIES)}")
