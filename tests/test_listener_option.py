"""``--listener MODULE:ATTR`` (``reference@MODULE:ATTR``): a class the reference cannot build or drive is refused
before anything starts, in one line naming what it misses, exit 2; docs/targets.md states the interface it needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ConfigError
from harness.reference.listener import WorkerListener
from harness.targets import LISTENER_CALL, LISTENER_METHODS, listener_problems, load_target

ROOT = Path(__file__).resolve().parent.parent  # its own, not lc_helpers': `lastcall run` imports this module


class PathAndBackendOnly:
    """What a user writes first: a listener that takes only its path and backend, with start and stop."""

    def __init__(self, path: str, backend: Any) -> None:
        self.path = path

    def start(self) -> None: ...

    def stop(self, timeout: float | None = None) -> bool:
        return True


class Complete(PathAndBackendOnly):
    def __init__(self, path: str, backend: Any, *, rank: int = 0, pp: int = 0, ipc: str = "", config: Any = None,
                 recorder: Any = None) -> None:
        super().__init__(path, backend)

    def _begin_stop(self) -> None: ...


def make_listener(path: str, backend: Any, **kw: Any) -> WorkerListener:
    return WorkerListener(path, backend, **kw)


def test_the_reference_listener_its_subclasses_and_a_factory_function_pass() -> None:
    assert listener_problems(WorkerListener) == []
    assert listener_problems(Complete) == []
    assert listener_problems(make_listener) == []
    assert load_target(f"reference@{__name__}:make_listener").listener is make_listener


def test_a_wrong_class_is_refused_naming_each_thing_it_misses() -> None:
    with pytest.raises(ConfigError) as info:
        load_target(f"reference@{__name__}:PathAndBackendOnly")
    msg = str(info.value)
    assert "\n" not in msg
    assert f"it cannot be called as {LISTENER_CALL} (got an unexpected keyword argument 'rank')" in msg
    assert "it has no method _begin_stop()" in msg and "no method start()" not in msg


def test_the_page_states_the_interface_checked() -> None:
    page = (ROOT / "docs" / "targets.md").read_text()
    assert f"`factory{LISTENER_CALL}`" in page
    for name in LISTENER_METHODS:
        assert f"`{name}(" in page, name


def test_lastcall_run_refuses_it_in_one_line_exit_2() -> None:
    out = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--listener", f"tests.{Path(__file__).stem}:"
                          "PathAndBackendOnly", "scenarios/stalled-read-is-cancelled.yaml"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    [problem] = [ln for ln in out.stderr.splitlines() if "--listener" in ln]
    assert "unexpected keyword argument 'rank'" in problem and "Traceback" not in out.stderr
