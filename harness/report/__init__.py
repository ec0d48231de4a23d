"""Reports of runs: reports/<run id>/ (history, snapshots, verdicts, an HTML page) and the session summary.

* :func:`write_run` writes one run's directory after the runner returns; it
  never raises into the caller (a report failure is a warning line).
* :func:`render_page` is the self-contained HTML page of one run: inline CSS
  and SVG, no scripts, nothing fetched.
* :func:`report_history` re-judges a stored history (``lastcall report``).
* The pytest side (options, terminal summary, session page) is in
  :mod:`harness.report.summary`.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["write_run", "render_page", "report_history"]

_HOME = {"write_run": "write", "render_page": "html", "report_history": "rejudge"}  # name -> its module


def __getattr__(name: str) -> Any:
    """Import lazily: the pytest plugin imports harness.report.summary at startup and must stay cheap."""
    if name in _HOME:
        return getattr(importlib.import_module(f"harness.report.{_HOME[name]}"), name)
    raise AttributeError(f"module 'harness.report' has no attribute {name!r}")
