"""Helpers the harness's own tests share (not a test module: pytest does not collect it)."""

from __future__ import annotations

import ast
import ctypes
import os
import select
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.checkers import RunRecord, Verdict, judge
from harness.history import Event
from harness.launch.cluster import RemoteError
from harness.launch.judged import JudgedCluster
from harness.probes.model import Snapshot
from harness.scenario.runner import STEP_KINDS

Make = Callable[..., JudgedCluster]
ROOT = Path(__file__).resolve().parent.parent  # the checkout: tests read its docs, scenarios and tools
LISTENER_PY = ROOT / "harness" / "reference" / "listener.py"
SERVING_PY = ROOT / "harness" / "reference" / "serving.py"  # WorkerListener's base: the request path


def listener_methods() -> dict[str, ast.FunctionDef]:
    """The methods of a WorkerListener by name, as its class resolves them: ServingLoop's (serving.py), then
    WorkerListener's own (listener.py), which define the few ServingLoop only declares."""
    out: dict[str, ast.FunctionDef] = {}
    for path, name in ((SERVING_PY, "ServingLoop"), (LISTENER_PY, "WorkerListener")):
        tree = ast.parse(path.read_text())
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
        out.update({f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)})
    return out


def free_port() -> int:
    """A TCP port of 127.0.0.1 nothing listened on a moment ago (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def harness_events(pid: int = 1) -> Callable[..., Event]:
    """``H(kind, t_ns, **data)``: an event of the harness (pid ``pid``), for the checkers' tests' histories."""
    def make(kind: str, t: int, /, **data: Any) -> Event:
        return Event(t, pid, "harness", "", "MainThread", kind, data)

    return make


def check(name: str, events: list[Event], params: dict[str, Any] | None = None, **snapshots: Snapshot) -> Verdict:
    """The verdict of checker ``name`` on a history of ``events`` (and probe ``snapshots`` by label)."""
    return judge(name, RunRecord(tuple(events), dict(snapshots)), params)


def refused_at_load(step: str, says: str, expect: str = "stop_result") -> None:
    """A scenario whose only step after ``start: cluster`` is ``step`` (e.g. ``send: {...}``) fails to load with
    a ScenarioError matching ``says``."""
    from harness.scenario.errors import ScenarioError
    from harness.scenario.loader import loads

    text = ("name: t\nabout: t\ncatches: [no_conn_tracking]\nsteps:\n  - start: cluster\n"
            f"  - {step}\nexpect: [{expect}]\n")
    with pytest.raises(ScenarioError, match=says):
        loads(text, "<t>")


def until(cond: Callable[[], Any], limit: float = 5.0) -> Any:
    """Re-evaluate ``cond`` (a /proc or file-system read) until it is truthy; fail after ``limit`` seconds
    (a safety net, not a timer)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
    pytest.fail("condition not reached in time")


def exited(pid: int, limit: float = 5.0) -> None:
    """Block until process ``pid`` (a child not yet reaped, or any process) has exited: its pidfd turns readable
    then, the process left a zombie until its parent reaps it; fail after ``limit`` seconds (a safety net)."""
    fd = os.pidfd_open(pid)
    try:
        if not select.select([fd], [], [], limit)[0]:
            pytest.fail(f"process {pid} did not exit in {limit}s")
    finally:
        os.close(fd)


_IN_CREATE, _IN_MOVED_TO = 0x100, 0x80  # <sys/inotify.h>


def until_created(cond: Callable[[], Any], directory: str, pid: int, limit: float = 5.0) -> Any:
    """Re-evaluate ``cond`` each time an entry appears in ``directory`` (inotify) or process ``pid`` ends (a
    pidfd), blocked in between: a wait that takes no CPU from the processes it waits for, where :func:`until`
    would spin a core of a two-core machine away from them.  ``cond`` must turn truthy only on one of those
    (an entry it looks for, the process gone); fail after ``limit`` seconds (a safety net, not a timer)."""
    libc = ctypes.CDLL(None, use_errno=True)
    watch = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if watch < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    try:
        if libc.inotify_add_watch(watch, os.fsencode(directory), _IN_CREATE | _IN_MOVED_TO) < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {directory}")
        gone = os.pidfd_open(pid)
        try:
            end = time.monotonic() + limit
            while True:  # watched before the first look: an entry made since is an event, one made before is seen
                value = cond()
                if value:
                    return value
                left = end - time.monotonic()
                if left <= 0:
                    pytest.fail("condition not reached in time")
                if watch in select.select([watch, gone], [], [], left)[0]:
                    try:
                        while os.read(watch, 65536):
                            pass
                    except BlockingIOError:
                        pass
        finally:
            os.close(gone)
    finally:
        os.close(watch)


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
