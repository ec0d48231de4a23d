"""The engine checkers (harness.checkers.engine): each quiet and firing on literal histories, then on real runs.

The literal histories are what the engine steps record (harness.scenario.engine_steps); the real runs launch
the stand-in engine (harness.engine.standin) and each planted-bug variant through the one run mechanism
(run_item), so each checker is proven quiet on the well-behaved stand-in and firing on the variant it
exists for, with the engine scenarios' own steps.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from lc_helpers import check, harness_events

from harness.history import Event
from harness.scenario import load
from harness.scenario.loader import expand
from harness.scenario.runner import run_item

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
HARNESS = 100
S = 1_000_000_000


H = harness_events(HARNESS)


def started(step: str, kind: str, t: int, **data: Any) -> Event:
    return H("step_started", t, step=step, kind=kind, **data)


def returned(step: str, kind: str, t: int, ok: bool, value: Any, **data: Any) -> Event:
    return H("step_returned", t, step=step, kind=kind, ok=ok, value=value, **data)


def sig(step: str = "term", to: str = "api_server", s: str = "SIGTERM", t: int = 10) -> list[Event]:
    return [started(step, "engine_signal", t, category="signal", to=to, sig=s, pid=1, process="python",
                    members=[]),
            returned(step, "engine_signal", t + 1, True, 1, category="signal", to=to, sig=s)]


def gone(*, ok: bool = True, seconds: float = 0.1, survivors: list[dict[str, Any]] | None = None,
         orphaned: list[dict[str, Any]] | None = None, status: int | None = 0,
         left: list[dict[str, str]] | None = None,
         after: str = "term", t: int = 20) -> list[Event]:
    value = {"gone": ok, "seconds": seconds, "survivors": survivors or [], "orphaned": orphaned or [],
             "status": status, "left": left or [], "after": after}
    return [started("gone", "wait_gone", t, category="sync", timeout=5.0, after=after),
            returned("gone", "wait_gone", t + 1, True, value, category="sync")]


WORKER = {"pid": 7, "ppid": 100, "name": "VLLM::Worker"}


# ------------------------------------------------------------------ engine_tree_exits
def test_engine_tree_exits_ok() -> None:
    v = check("engine_tree_exits", [*sig(), *gone(seconds=0.6)], {"within": 5})
    assert v.status == "ok" and "0.60s after term" in v.message
    late = check("engine_tree_exits", [*sig(), *gone(seconds=0.6, orphaned=[{"pid": 7, "name": "VLLM::Worker"}])])
    assert late.status == "ok"  # in time; the order is noted, not judged
    assert "reparented to the harness on the way out (its parent exited first): VLLM::Worker (pid 7)" in late.notes[-1]


def test_engine_tree_exits_violated() -> None:
    v = check("engine_tree_exits", [*sig(), *gone(ok=False, seconds=5.0, survivors=[WORKER], status=0,
                                                   orphaned=[{"pid": 7, "name": "VLLM::Worker"}])])
    assert v.status == "violated"
    assert "1 process(es) survived term" in v.message and "VLLM::Worker orphaned (pid 7)" in v.message
    slow = check("engine_tree_exits", [*sig(), *gone(seconds=7.5)], {"within": 5})
    assert slow.status == "violated" and "took 7.50s" in slow.message


def test_engine_tree_exits_unknown_without_a_wait() -> None:
    assert check("engine_tree_exits", sig()).status == "unknown"


# ------------------------------------------------------------------ engine_nothing_left
def test_engine_nothing_left_ok() -> None:
    assert check("engine_nothing_left", [*sig(), *gone()]).status == "ok"


def test_engine_nothing_left_violated() -> None:
    left = [{"path": "/tmp/lc-x/r/e0/tmp/abc", "kind": "socket"}, {"path": "/tmp/lc-x/r/e0/tmp/d", "kind": "socket"},
            {"path": "/dev/shm/psm_1", "kind": "shm"}]
    v = check("engine_nothing_left", [*sig(), *gone(left=left)])
    assert v.status == "violated" and "3 left (2 sockets, 1 shm): abc, d, psm_1" in v.message
    assert check("engine_nothing_left", sig()).status == "unknown"


# ------------------------------------------------------------------ engine_port_released
def test_engine_port_released_ok() -> None:
    v = check("engine_port_released", [*sig(), *gone(),
                                       returned("again", "engine_restart", 30, True, {"ready": True}, port=8000)])
    assert v.status == "ok"


def test_engine_port_released_violated() -> None:
    bad = returned("again", "engine_restart", 30, False, {"ready": False, "bindable": False}, port=8000,
                   error="the engine failed to start: ERROR: [Errno 98] Address already in use")
    v = check("engine_port_released", [*sig(), *gone(), bad])
    assert v.status == "violated" and "port 8000 failed (the port was still bound)" in v.message
    assert check("engine_port_released", [*sig(), *gone()]).status == "unknown"


# ------------------------------------------------------------------ engine_exit_status
def test_engine_exit_status_ok() -> None:
    assert check("engine_exit_status", [*sig(), *gone(status=0)]).status == "ok"
    died = [*sig("kill", "engine_core", "SIGKILL"), *gone(status=1, after="kill")]
    assert check("engine_exit_status", died).status == "ok"


def test_engine_exit_status_violated() -> None:
    died = [*sig("kill", "engine_core", "SIGKILL"), *gone(status=0, after="kill")]
    v = check("engine_exit_status", died)
    assert v.status == "violated" and "exited 0 although its engine_core got SIGKILL" in v.message
    stop = check("engine_exit_status", [*sig(s="SIGINT"), *gone(status=1)])
    assert stop.status == "violated" and "a stop asked by SIGINT exited with status 1" in stop.message


def test_engine_exit_status_unknown_when_nothing_exited_or_a_sigkill_of_the_server() -> None:
    assert check("engine_exit_status", [*sig(), *gone(ok=False, status=None)]).status == "unknown"
    assert check("engine_exit_status", [*sig("kill", s="SIGKILL"), *gone(status=-9, after="kill")]).status == \
        "unknown"


# ------------------------------------------------------------------ engine_requests_end
def test_engine_requests_end_ok() -> None:
    v = check("engine_requests_end", [started("s1", "engine_request", 5, category="request"),
                                      returned("s1", "engine_request", 30, True, {"outcome": "aborted"})])
    assert v.status == "ok" and "s1: aborted" in v.message


def test_engine_requests_end_violated() -> None:
    hung = check("engine_requests_end", [
        started("s1", "engine_request", 5), returned("s1", "engine_request", 30, False,
                                                     {"outcome": "hung", "error": "no answer in 20.0s"}),
        started("s2", "engine_request", 6)])
    assert hung.status == "violated"
    assert "s1: no answer in 20.0s" in hung.message and "s2: never returned" in hung.message


# ------------------------------------------------------------------ real runs on the stand-in
def _run(scenario: str, variant: str) -> dict[str, str]:
    result = run_item(expand(load(str(SCENARIOS / f"{scenario}.yaml")))[0], variant=variant)
    assert result.step_error == "", result.step_error
    return {v.checker: v.status for v in result.verdicts}


ALL_OK = {"engine_tree_exits": "ok", "engine_nothing_left": "ok", "engine_port_released": "ok",
          "engine_exit_status": "ok"}


@pytest.mark.slow
def test_the_stand_in_is_quiet_and_each_planted_bug_fires_its_checker_on_a_real_sigterm_run() -> None:
    assert _run("engine-sigterm-idle", "engine_standin") == ALL_OK
    assert _run("engine-sigterm-idle", "engine_ignores_sigterm") == {
        "engine_tree_exits": "violated", "engine_nothing_left": "violated", "engine_port_released": "violated",
        "engine_exit_status": "unknown"}  # the API server never exited: nothing to judge
    assert _run("engine-sigterm-idle", "engine_leaves_socket_file") == {**ALL_OK, "engine_nothing_left": "violated"}
    assert _run("engine-sigterm-idle", "engine_keeps_child") == {
        **ALL_OK, "engine_tree_exits": "violated", "engine_port_released": "violated"}


@pytest.mark.parametrize(("variant", "want"), [
    ("engine_standin", {"engine_tree_exits": "ok", "engine_exit_status": "ok"}),
    ("engine_exits_zero_after_engine_died", {"engine_tree_exits": "ok", "engine_exit_status": "violated"}),
])
def test_exit_status_on_a_real_engine_core_kill(variant: str, want: dict[str, str]) -> None:
    assert _run("engine-sigkill-engine-core", variant) == want


def test_a_real_run_leaves_no_process_and_records_the_tree() -> None:
    result = run_item(expand(load(str(SCENARIOS / "engine-sigkill-api-server.yaml")))[0], variant="engine_keeps_child")
    ready = [e for e in result.events if e.kind == "engine_ready"]
    assert len(ready) == 1 and sorted(m["name"] for m in ready[0].data["members"])[:2] == [
        "VLLM::EngineCor", "VLLM::Worker"]
    closed = [e for e in result.events if e.kind == "engine_closed"]
    assert len(closed) == 2  # the first tree and the restart (which failed: the orphan holds the port)
    assert [m["name"] for m in closed[0].data["terminated"]] == ["VLLM::Worker"]  # the orphan, stopped by close
    assert closed[0].data["killed"] == []  # (it obeys SIGTERM)
    assert "before_kill" in result.snapshots and "engine_ready0" in result.snapshots
    for e in result.events:
        for m in e.data.get("members", ()) if e.kind == "engine_ready" else ():
            with pytest.raises(ProcessLookupError):
                os.kill(m["pid"], 0)
