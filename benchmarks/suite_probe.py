"""A pytest plugin for benchmarks/suite_profile.py: every test report's phase, duration, times and xdist worker,
written as JSON to ``$LASTCALL_SUITE_PROBE`` when the session ends (by the controller only).

Loaded with ``-p suite_probe`` (benchmarks/ on PYTHONPATH); with the variable unset it records nothing.  Under
pytest-xdist the controller hears every worker's reports (``report.node`` is the worker), so one file holds
the whole run: which worker ran what, when, and for how long, phase by phase (set-up, call, teardown).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

_ROWS: list[dict[str, Any]] = []
_SESSION: dict[str, float] = {}


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    _SESSION["start"] = time.time()


def pytest_collection_finish(session: pytest.Session) -> None:
    if not _is_worker(session.config):
        _SESSION["collected"] = time.time()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not os.environ.get("LASTCALL_SUITE_PROBE"):
        return
    node = getattr(report, "node", None)  # the xdist worker that ran it, on the controller
    gateway = getattr(node, "gateway", None)
    worker = getattr(gateway, "id", None) or os.environ.get("PYTEST_XDIST_WORKER", "main")
    _ROWS.append({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                  "duration": report.duration, "start": report.start, "stop": report.stop, "worker": worker,
                  "slow": "slow" in report.keywords})


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("LASTCALL_SUITE_PROBE")
    if not out or _is_worker(session.config):
        return
    with open(out, "w") as f:
        json.dump({"session": {**_SESSION, "finish": time.time()}, "reports": _ROWS}, f)
