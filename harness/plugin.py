"""lastcall's pytest plugin (entry point ``lastcall``): markers and fixtures.

Cheap to import: it loads nothing heavy until a fixture is used.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.history import Recorder

MARKERS = {
    "slow": "long tests, left out by -m 'not slow'",
    "gpu": "needs a CUDA device; skipped with the reason where there is none",
    "bench": "real-process benchmarks, run serially with -m bench",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    from harness.scenario.collect import addoption

    addoption(parser)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    from harness.scenario.collect import collect_file

    return collect_file(file_path, parent)


def pytest_configure(config: pytest.Config) -> None:
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")


@pytest.fixture
def lc_root() -> Iterator[Path]:
    """A short, private root directory for socket paths (sun_path holds 107 bytes).

    Fails the test if anything is left in it afterwards: a leftover socket,
    owner record or directory is a bug of the listener under test.
    """
    root = Path(tempfile.mkdtemp(prefix="lc-", dir="/tmp"))
    try:
        yield root
        left = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
        if left:
            pytest.fail(f"left behind under the socket root {root}: {left}", pytrace=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)


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
