"""Hooks lastcall's pytest plugin calls, for targets and the plugins that ship them.

A target adds the options it alone needs (a source tree, a server address) by
implementing :func:`pytest_lastcall_addoption` in any pytest plugin or conftest.py; the
built-in kvcached target does so for ``--kvcached-src`` (harness/targets/kvcached.py).
"""

from __future__ import annotations

import pytest

__all__ = ["pytest_lastcall_addoption"]


@pytest.hookspec(historic=True)
def pytest_lastcall_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Add a target's own command-line and ini options (called once, when lastcall adds its own).

    Put them in ``parser.getgroup("lastcall")`` and prefix them with the target's name
    (``--kvcached-src``), so they cannot collide with a suite's own options.  Historic:
    a plugin registered later (a conftest.py) is called too.
    """
