"""lastcall's pytest plugin (entry point ``lastcall``): markers and fixtures.

Cheap to import: it loads nothing heavy until a fixture is used.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.history import Recorder
from harness.names import temp_root

MARKERS = {
    "slow": "long tests, left out by -m 'not slow'",
    "gpu": "needs a CUDA device; skipped with the reason where there is none",
    "bench": "real-process benchmarks, run serially with -m bench",
    "kvcached": "runs kvcached's own code (target kvcached==VERSION); skipped unless `lastcall fetch` filled the cache",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    from harness.scenario.collect import addoption
    from harness.scenario.repeat import addoption as repeat_option

    addoption(parser)
    repeat_option(parser)
    parser.addini("lastcall_leak_check", type="bool", default=True,
                  help="fail any test that leaves a lastcall path, segment, thread, process or port behind")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    from harness.scenario.collect import collect_file

    return collect_file(file_path, parent)


_UNDO_SIGTERM = pytest.StashKey[Callable[[], None]]()


def pytest_configure(config: pytest.Config) -> None:
    from harness.interrupts import sigterm_interrupts
    from harness.scenario.collect import configure

    # SIGTERM (a CI job's timeout, a kill) unwinds the session like ^C, in the controller and in each
    # xdist worker, so every live run closes its cluster and removes what it owns; without it the fork
    # server SIGKILLs the engine and workers and their usage segments and sockets stay behind.
    config.stash[_UNDO_SIGTERM] = sigterm_interrupts()
    configure(config)
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    config.addinivalue_line("markers", "leaks_ok: this test may leave things behind on purpose (no leak check)")


def pytest_report_header(config: pytest.Config) -> list[str]:
    if os.environ.get("PYTEST_XDIST_WORKER") or not config.getini("lastcall_leak_check"):
        return []
    from harness.probes.leftovers import session_leftovers

    left = session_leftovers()
    if not left:
        return []
    return [f"lastcall: {len(left)} leftover(s) of earlier killed sessions (`lastcall ctl sweep` removes "
            f"those whose owner is dead): {', '.join(left[:5])}{' ...' if len(left) > 5 else ''}"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    from harness.report.summary import terminal_summary

    terminal_summary(terminalreporter, config)
    from harness.scenario.repeat import terminal_summary as flaky_summary

    flaky_summary(terminalreporter, config)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from harness.scenario.repeat import sessionfinish

    sessionfinish(session)


@pytest.fixture(autouse=True)
def _lastcall_leak_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test that left a path, shm segment, thread, child process or port behind (see leakguard)."""
    if not request.config.getini("lastcall_leak_check") or request.node.get_closest_marker("leaks_ok"):
        yield
        return
    from harness import leakguard

    before = leakguard.take()
    yield
    leaks = leakguard.diff(before)
    if leaks:
        pytest.fail(f"{request.node.nodeid} leaked: " + "; ".join(leaks), pytrace=False)


@pytest.fixture
def lc_root() -> Iterator[Path]:
    """A short, private root directory for socket paths (sun_path holds 107 bytes).

    Fails the test if anything is left in it afterwards: a leftover socket,
    owner record or directory is a bug of the listener under test.
    """
    root = temp_root()
    try:
        yield root
        left = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
        if left:
            pytest.fail(f"left behind under the socket root {root}: {left}", pytrace=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def lastcall_cluster() -> Iterator[object]:
    """Start real engine and worker processes whose run any test can judge: ``c = lastcall_cluster(tp=2)``.

    Takes the Cluster's keyword arguments (tp, pp, variant, drain_timeout, ...) and returns it started.
    ``c.verdicts("no_late_dispatch", ("stop_latency", {"within": 1.0}))`` closes the run (snapshots
    before cleanup) and judges it. Every cluster is closed at the end of the test.
    """
    from harness.launch.judged import JudgedCluster

    made: list[JudgedCluster] = []

    def start(**kw: object) -> JudgedCluster:
        c = JudgedCluster(**kw)
        made.append(c)
        return c.start()

    yield start
    for c in made:
        c.close()


@pytest.fixture
def recorder() -> Recorder:
    """An in-process history recorder; ``recorder.wait_for(kind)`` synchronises with the system under test."""
    return Recorder()


@pytest.fixture
def failpoints() -> Iterator[object]:
    """The failpoint module, reset (every parked thread released) after the test."""
    from harness import failpoints as fp

    fp.reset()
    try:
        yield fp
    finally:
        fp.reset()


@pytest.fixture
def no_thread_leak() -> Iterator[None]:
    """Fails the test if a lastcall thread it started is still alive at its end."""
    before = set(threading.enumerate())
    yield
    left = [t.name for t in threading.enumerate() if t not in before and t.name.startswith("lastcall-")]
    if left:
        pytest.fail(f"threads left running: {left}", pytrace=False)


def pytest_unconfigure(config: pytest.Config) -> None:
    undo = config.stash.get(_UNDO_SIGTERM, None)
    if undo is not None:
        undo()
