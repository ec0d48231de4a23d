"""The worked example: a listener lastcall did not write (tests/thirdparty/) is enough for the scenario library.

The adapter imports only harness.targets.api and harness.events from lastcall (checked with ast); the
scenarios run against it, its own planted bugs (the target's ``variants``) are caught by the checkers
the scenarios name for them, and the checkers it cannot feed (the worker party's: it declares no
worker_events) are "not judged", never ok.  A fast subset of four scenarios runs in-process; the whole
library runs through pytest, as a user would (``pytest scenarios --lastcall-target ...``), marked slow.
"""

from __future__ import annotations

import ast
import os
import socket
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from lc_helpers import ROOT

from harness.checkers import CHECKERS
from harness.scenario.catches import judge_catch, resolve
from harness.scenario.loader import expand, load
from harness.scenario.runner import run_item
from harness.targets import load_target
from harness.targets.api import check_target_object
from tests.thirdparty.listener import JOIN_S, Backend, ThreadedListener
from tests.thirdparty.target import TARGET

HERE = Path(__file__).resolve().parent / "thirdparty"
SPEC = "tests.thirdparty.target:TARGET"
ALLOWED_HARNESS = {"harness.targets.api", "harness.events"}
FAST = {  # scenario -> the target's own planted bugs it must catch
    "stalled-read-is-cancelled": {"no_conn_tracking"},
    "executing-handler-is-drained": {"teardown_while_alive"},
    "drain-timeout-keeps-everything": {"timed_join_teardown", "teardown_while_alive"},
    "stop-from-a-handler-returns-at-once": {"stop_from_handler_deadlocks"},
}
WORKER_PARTY = {n for n, c in CHECKERS.items() if "worker" in c.evidence_for(c.params.model_construct())}


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            # `from harness.targets import api` imports harness.targets.api
            out.update(f"{node.module}.{a.name}" if node.module == "harness.targets" else node.module
                       for a in node.names)
    return out


@pytest.mark.parametrize("name", ["listener.py", "target.py"])
def test_the_adapter_imports_only_the_target_api_and_events(name: str) -> None:
    mods = _imports(HERE / name)
    assert {m for m in mods if m.split(".")[0] == "harness"} <= ALLOWED_HARNESS, mods
    others = {m.split(".")[0] for m in mods} - {"harness", "tests", "__future__"}
    assert others <= set(sys.stdlib_module_names) | {"msgspec"}, others  # the stdlib and a msgpack codec
    assert not [c for c in ThreadedListener.__mro__ if c.__module__.startswith("harness")]  # not a subclass


def test_it_is_a_target() -> None:
    assert check_target_object(TARGET) == []
    assert load_target(SPEC) is TARGET
    for bug, spec in TARGET.variants.items():
        assert check_target_object(load_target(spec)) == [], bug



def test_stop_joins_a_handler_that_closed_its_connection_but_has_not_returned(tmp_path: Path) -> None:
    """A handler thread is alive from its connection_closed until it returns; a teardown that joined only the
    handlers still holding a connection left it running, and no_leaked_threads saw it under load (CI of
    68da425, many-idle-connections-at-stop).  Held there by a gate, it is among the threads stop joins."""
    closed, hold = threading.Event(), threading.Event()

    class Held(ThreadedListener):
        def _serve(self, n: int, conn: socket.socket) -> None:
            super()._serve(n, conn)
            hold.wait(JOIN_S)  # a safety net: the test opens it

    class Rec:
        def emit(self, kind: str, **data: object) -> None:
            if kind == "connection_closed":
                closed.set()

    path = str(tmp_path / "s.sock")
    lst = Held(path, Backend(), Rec(), label="held", rank=0, pp=0, drain_timeout=1.0)
    lst.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(path)
        assert closed.wait(JOIN_S)
        [held] = [t for t in threading.enumerate() if t.name.startswith("tp-conn-held-")]
        assert held.is_alive() and held in lst._handler_threads()  # what teardown joins
    finally:
        hold.set()
        assert lst.stop()
    assert not [t for t in threading.enumerate() if t.name.startswith("tp-conn-held-")]

def _run(scenario: str, spec: str) -> tuple[object, object]:
    sc = load(str(ROOT / "scenarios" / f"{scenario}.yaml"))
    return sc, run_item(expand(sc)[0], variant=spec)


@pytest.mark.parametrize("scenario", FAST)
def test_a_scenario_passes_on_it_and_catches_its_bugs_by_name(scenario: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LASTCALL_STRICT_EVENTS", "1")  # every event it emits fits harness.events
    sc, r = _run(scenario, SPEC)
    assert r.passed, [str(v) for v in r.verdicts]  # type: ignore[attr-defined]
    for v in r.verdicts:  # type: ignore[attr-defined]
        if v.checker in WORKER_PARTY:  # it declares no worker events: never an ok on nothing
            assert v.status == "not_judged", v
    caught = set()
    for bug in sc.catch_names():  # type: ignore[attr-defined]
        spec, why = resolve(TARGET, bug)
        if spec is None:
            assert bug not in TARGET.variants and "declares no variant" in why
            continue
        _, br = _run(scenario, spec)
        catch = judge_catch(br, sc.catch_checkers(bug))  # type: ignore[arg-type, attr-defined]
        assert catch.counted, (bug, catch.why)
        caught.add(bug)
    assert caught == FAST[scenario]


@pytest.mark.slow
def test_the_scenario_library_runs_against_it(tmp_path: Path) -> None:
    """``pytest scenarios --lastcall-target tests.thirdparty.target:TARGET``: nothing fails; what skips says why.
    With -n 2, as the stress proof's sub-session: its 48 runs wait (drains, exits) more than they compute, and
    with -n 0 the item was the default suite's longest (30 s), which a worker ran alone at the end."""
    xml = tmp_path / "junit.xml"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "scenarios", "--lastcall-target", SPEC, "-n", "2", "-q", "-m", "not gpu",
         "-p", "no:cacheprovider", "--lastcall-reports=", f"--junitxml={xml}"],
        cwd=ROOT, capture_output=True, text=True, timeout=1200, env={**os.environ, "LASTCALL_STRICT_EVENTS": "1"})
    assert out.returncode == 0, out.stdout[-4000:]
    cases = ET.parse(xml).getroot().iter("testcase")
    passed: list[tuple[str, ET.Element | None]] = []
    skipped: list[tuple[str, ET.Element | None]] = []
    for case in cases:
        skip = case.find("skipped")
        (skipped if skip is not None else passed).append((case.get("name", ""), skip))
    reasons = [s.get("message", "") for _, s in skipped if s is not None]
    assert all("declares no variant" in m or "lacks by design" in m or "cannot show" in m for m in reasons), reasons
    assert any("cannot show" in m and "needs worker events" in m for m in reasons), reasons  # not judged: skipped
    caught = {bug for n, _ in passed for bug in TARGET.variants if f"catches-{bug}]" in n}
    assert caught == set(TARGET.variants), caught  # every planted bug of its own is caught somewhere
    assert len(passed) >= 20
