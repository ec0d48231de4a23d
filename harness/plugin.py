"""lastcall's pytest plugin (entry point ``lastcall``): markers and fixtures.

Cheap to import: it loads nothing heavy until a fixture is used.
"""

from __future__ import annotations

import shutil
import threading
import warnings
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


# plugins of the built-in targets: each adds its own options through harness.hookspecs.pytest_lastcall_addoption
TARGET_PLUGINS = ("harness.targets.kvcached",)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from harness import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    import importlib

    from harness.scenario.chain_items import addoption as chain_option
    from harness.scenario.collect import addoption
    from harness.scenario.quick import addini as quick_ini
    from harness.scenario.repeat import addoption as repeat_option

    addoption(parser)
    repeat_option(parser)
    chain_option(parser)
    quick_ini(parser)
    for name in TARGET_PLUGINS:
        if not pluginmanager.has_plugin(name):
            pluginmanager.register(importlib.import_module(name), name)
    hook = pluginmanager.hook.pytest_lastcall_addoption
    hook.call_historic(kwargs={"parser": parser, "pluginmanager": pluginmanager})
    parser.addini("lastcall_leak_check", type="string", default="lastcall",
                  help="which tests fail when they leave a lastcall path, segment, thread, process or port "
                       "behind: lastcall (its own items, tests using its fixtures or marked lastcall; the "
                       "default), all or off")


class _BeforeDeselection:
    """Marks what -m "not slow" leaves to the full suite (harness.scenario.quick) before -m deselects."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        from harness.scenario.quick import modifyitems

        modifyitems(config, items)


@pytest.hookimpl(trylast=True)  # after -k and -m deselected what they deselect
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from harness.scenario.chain_items import modifyitems

    modifyitems(config, items)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    from harness.scenario.collect import collect_file

    return collect_file(file_path, parent)


_UNDO_SIGTERM = pytest.StashKey[Callable[[], None]]()
_LEAK_MODE = pytest.StashKey[str]()
_LEAK_BEFORE = pytest.StashKey[object]()
_FIXTURE_USED = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    from harness import envvars
    from harness.errors import ConfigError
    from harness.interrupts import sigterm_interrupts
    from harness.leakguard import mode
    from harness.scenario.collect import configure

    try:  # LASTCALL_TIMEOUT_SCALE=inf would leave every watchdog unarmed: refused before anything runs
        envvars.check()
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    from harness.scenario.chain_items import check as check_chain

    check_chain(config)  # --lastcall-chain with -n: refused before anything runs
    from harness.report.summary import check_reports

    check_reports(config)  # a reports directory lastcall did not make (/, a home directory): refused too
    config.stash[_LEAK_MODE] = mode(config)  # a bad value stops the session here, located
    # SIGTERM (a CI job's timeout, a kill) unwinds the session like ^C, in the controller and in each
    # xdist worker, so every live run closes its cluster and removes what it owns; without it the fork
    # server SIGKILLs the engine and workers and their usage segments and sockets stay behind.
    config.stash[_UNDO_SIGTERM] = sigterm_interrupts()
    configure(config)
    config.pluginmanager.register(_BeforeDeselection(), "lastcall-before-deselection")
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    from harness.scenario.quick import MARK_DOC

    config.addinivalue_line("markers", MARK_DOC)
    config.addinivalue_line("markers", "leaks_ok: this test may leave things behind on purpose (no leak check)")
    config.addinivalue_line("markers", "lastcall: check this test with lastcall's leak guard "
                            "(ini lastcall_leak_check = lastcall, the default)")


def pytest_report_header(config: pytest.Config) -> list[str]:
    if hasattr(config, "workerinput") or config.stash.get(_LEAK_MODE, "off") == "off":  # xdist worker
        return []
    from harness.leftovers import session_leftovers

    left = session_leftovers()
    if not left:
        return []
    return [f"lastcall: {len(left)} leftover(s) of earlier killed sessions (`lastcall ctl sweep` removes "
            f"those whose owner is dead): {', '.join(left[:5])}{' ...' if len(left) > 5 else ''}"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    from harness.report.summary import terminal_summary

    terminal_summary(terminalreporter, config, exitstatus)
    from harness.scenario.repeat import terminal_summary as flaky_summary

    flaky_summary(terminalreporter, config)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from harness.scenario.repeat import sessionfinish

    sessionfinish(session)


def _leak_checked(item: pytest.Item) -> bool:
    """Whether the guard takes ``item``'s inventory: it may have asked (:func:`harness.leakguard.may_apply`)."""
    from harness.leakguard import may_apply

    return may_apply(item, item.config.stash.get(_LEAK_MODE, "lastcall"))


def _used(request: pytest.FixtureRequest, name: str) -> None:
    """A lastcall fixture marks the test that uses it: the leak guard checks that test (a fixture of the same name
    from a conftest.py, which would be used instead, marks nothing)."""
    request.node.stash[_FIXTURE_USED] = name


def _fail_on_leaks(item: pytest.Item, before: object) -> None:
    from harness import leakguard

    assert isinstance(before, leakguard.Inventory)
    if not leakguard.applies(item, item.config.stash.get(_LEAK_MODE, "lastcall"), item.stash.get(_FIXTURE_USED, None)):
        return
    leaks = leakguard.diff(before)
    if leaks:
        pytest.fail(f"{item.nodeid} leaked: " + "; ".join(leaks), pytrace=False)


@pytest.fixture(autouse=True)
def _lastcall_leak_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test that left a path, shm segment, thread, child process or port behind (see leakguard).

    A fixture, for a test function: it is set up before the test's other function fixtures and torn
    down after them, so what a fixture owns counts, and what a wider-scoped fixture holds does not."""
    if not _leak_checked(request.node):
        yield
        return
    from harness import leakguard

    before = leakguard.take()
    yield
    _fail_on_leaks(request.node, before)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """The guard for items without fixtures (lastcall's scenario items): the inventory before setup."""
    if not isinstance(item, pytest.Function) and _leak_checked(item):
        from harness import leakguard

        item.stash[_LEAK_BEFORE] = leakguard.take()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    before = item.stash.get(_LEAK_BEFORE, None)
    if before is not None:
        del item.stash[_LEAK_BEFORE]
    yield  # a teardown that failed already fails the item: no leak check on top
    if before is not None:
        _fail_on_leaks(item, before)


@pytest.fixture
def lc_root(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A short, private root directory for socket paths (sun_path holds 107 bytes).

    Fails the test if anything is left in it afterwards: a leftover socket,
    owner record or directory is a bug of the listener under test.
    """
    _used(request, "lc_root")
    root = temp_root()
    try:
        yield root
        left = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
        if left:
            pytest.fail(f"left behind under the socket root {root}: {left}", pytrace=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def lastcall_cluster(request: pytest.FixtureRequest) -> Iterator[object]:
    """Start real engine and worker processes whose run any test can judge: ``c = lastcall_cluster(tp=2)``.

    Takes the Cluster's keyword arguments (tp, pp, variant, drain_timeout, ...) and returns it started.
    ``c.verdicts("no_late_dispatch", ("stop_latency", {"within": 1.0}))`` closes the run (snapshots
    before cleanup) and judges it. Every cluster is closed at the end of the test.
    """
    from harness.launch.judged import JudgedCluster

    _used(request, "lastcall_cluster")
    made: list[JudgedCluster] = []

    def start(**kw: object) -> JudgedCluster:
        c = JudgedCluster(**kw)
        made.append(c)
        return c.start()

    yield start
    for c in made:
        c.close()


@pytest.fixture
def lastcall_recorder(request: pytest.FixtureRequest) -> Recorder:
    """An in-process history recorder; ``lastcall_recorder.wait_for(kind)`` synchronises with the system under
    test."""
    _used(request, "lastcall_recorder")
    return Recorder()


@pytest.fixture
def lastcall_failpoints(request: pytest.FixtureRequest) -> Iterator[object]:
    """The failpoint module, reset (every parked thread released) after the test."""
    from harness import failpoints as fp

    _used(request, "lastcall_failpoints")
    fp.reset()
    try:
        yield fp
    finally:
        fp.reset()


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"lastcall: the fixture {old!r} is deprecated and goes in the next release; use {new!r}",
                  DeprecationWarning, stacklevel=2)


@pytest.fixture
def recorder(lastcall_recorder: Recorder) -> Recorder:
    """Deprecated alias of ``lastcall_recorder`` (a DeprecationWarning when used)."""
    _deprecated("recorder", "lastcall_recorder")
    return lastcall_recorder


@pytest.fixture
def failpoints(lastcall_failpoints: object) -> object:
    """Deprecated alias of ``lastcall_failpoints`` (a DeprecationWarning when used)."""
    _deprecated("failpoints", "lastcall_failpoints")
    return lastcall_failpoints


@pytest.fixture
def no_thread_leak(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails the test if a lastcall thread it started is still alive at its end (the process-wide fork
    server's reader and an engine zygote's, started on first use and stopped at exit, are not)."""
    from harness.launch.spawn import helper_threads

    _used(request, "no_thread_leak")
    before = set(threading.enumerate())
    yield
    kept = helper_threads()
    left = [t.name for t in threading.enumerate()
            if t not in before and t not in kept and t.name.startswith("lastcall-")]
    if left:
        pytest.fail(f"threads left running: {left}", pytrace=False)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    undo = config.stash.get(_UNDO_SIGTERM, None)
    if undo is not None:
        undo()
