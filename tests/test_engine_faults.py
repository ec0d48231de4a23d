"""The engine faults and their checkers (harness.scenario.engine_steps, harness.checkers.engine): the new
checkers quiet and firing on literal histories, then every new engine scenario quiet on the well-behaved
stand-in and firing on the planted variant it names in ``catches``, through the one run mechanism.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lc_helpers import check

from harness.history import Event
from harness.scenario import load
from harness.scenario.loader import expand
from harness.scenario.runner import run_item

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
S = 1_000_000_000


def H(kind: str, t: float, /, **data: Any) -> Event:
    return Event(int(t * S), 100, "harness", "", "MainThread", kind, data)


def started(step: str, kind: str, t: float, **data: Any) -> Event:
    return H("step_started", t, step=step, kind=kind, **data)


def returned(step: str, kind: str, t: float, ok: bool, value: Any, **data: Any) -> Event:
    return H("step_returned", t, step=step, kind=kind, ok=ok, value=value, **data)


def launch(n: int, t: float, pid: int) -> Event:
    return H("engine_launched", t, pid=pid, port=8000, launch=n)


def ready(t: float, pid: int, ready_s: float = 0.1) -> Event:
    return H("engine_ready", t, pid=pid, ready_s=ready_s, members=[])


# ------------------------------------------------------------------ engine_start_ends
def test_engine_start_ends_ok_for_a_ready_start_and_a_clear_failure() -> None:
    v = check("engine_start_ends", [launch(0, 1, 10), ready(1.2, 10), launch(1, 5, 11),
                                    H("engine_start_failed", 5.3, error="ERROR: [Errno 98] Address already in use")])
    assert v.status == "ok" and "launch 0: ready in 0.20s" in v.message and "Address already in use" in v.message


def test_engine_start_ends_violated_when_a_start_never_ends_or_hangs_or_is_slow() -> None:
    never = check("engine_start_ends", [launch(0, 1, 10)])
    assert never.status == "violated" and "launch 0: neither ready nor failed (it never ended)" in never.message
    hung = check("engine_start_ends", [launch(0, 1, 10), H("engine_start_failed", 121, hung=True,
                                                           error="the engine was neither ready nor gone 120 s")])
    assert hung.status == "violated" and "neither ready nor gone at its bound" in hung.message
    slow = check("engine_start_ends", [launch(0, 1, 10), ready(13, 10)], {"within": 10})
    assert slow.status == "violated" and "took 12.0s to be ready (bound 10s)" in slow.message


def test_engine_start_ends_violated_when_a_stop_during_the_start_was_lost() -> None:
    lost = returned("again", "engine_start", 3, True, {"ready": True, "stopped": True, "ready_s": 0.2})
    v = check("engine_start_ends", [launch(0, 1, 10), ready(1.1, 10), launch(1, 2, 11), ready(2.2, 11), lost])
    assert v.status == "violated" and "again: a stop signal sent while it was starting was lost" in v.message
    stopped = returned("again", "engine_start", 3, True, {"ready": False, "stopped": True})
    v = check("engine_start_ends", [launch(0, 1, 10), ready(1.1, 10), launch(1, 2, 11),
                                    H("engine_start_failed", 2.1, error="the engine exited with status 0"), stopped])
    assert v.status == "ok" and "again: stopped during its start, never ready" in v.message


def test_engine_start_ends_unknown_without_a_launch() -> None:
    assert check("engine_start_ends", []).status == "unknown"


# ------------------------------------------------------------------ engine_refuses_late_requests
def _late(value: dict[str, Any]) -> list[Event]:
    return [launch(0, 1, 10), ready(1.1, 10),
            started("s1", "engine_request", 2, stream=True), H("engine_shutdown_began", 3, step="term", line="x"),
            started("late", "engine_request", 3.1, after_shutdown_began=True),
            returned("late", "engine_request", 3.2, True, value),
            returned("s1", "engine_request", 4, True, {"outcome": "aborted", "tokens": 40})]


def test_engine_refuses_late_requests_ok_when_refused_or_cut() -> None:
    v = check("engine_refuses_late_requests", _late({"outcome": "refused", "status": 503, "tokens": 0}))
    assert v.status == "ok" and v.message == "late: refused (503)"  # s1 came before: not judged
    assert check("engine_refuses_late_requests",
                 _late({"outcome": "cut", "status": None, "error": "ConnectionRefusedError"})).status == "ok"
    assert check("engine_refuses_late_requests",
                 _late({"outcome": "aborted", "status": 200, "tokens": 0})).status == "ok"


def test_engine_refuses_late_requests_violated_when_generated() -> None:
    v = check("engine_refuses_late_requests", _late({"outcome": "complete", "status": 200, "tokens": 4}))
    assert v.status == "violated" and "late: generated after shutdown began (complete, 4 token(s))" in v.message
    part = check("engine_refuses_late_requests", _late({"outcome": "aborted", "status": 200, "tokens": 3}))
    assert part.status == "violated"


def test_engine_refuses_late_requests_unknown_without_a_late_request_and_a_restart_ends_lateness() -> None:
    assert check("engine_refuses_late_requests", _late({"outcome": "complete"})[:4]).status == "unknown"
    # a late request the step never sent (the shutdown line was not seen in time) refused nothing: no evidence
    unsent = check("engine_refuses_late_requests", _late({"outcome": "not_sent", "status": None,
                                                          "error": "the engine never said its shutdown began"}))
    assert unsent.status == "unknown" and unsent.message == "no late request was sent: late: not_sent", unsent
    after_restart = [*_late({"outcome": "refused", "tokens": 0})[:4], launch(1, 3.5, 11), ready(3.6, 11),
                     started("r2", "engine_request", 4), returned("r2", "engine_request", 4.1, True,
                                                                   {"outcome": "complete", "tokens": 4})]
    assert check("engine_refuses_late_requests", after_restart).status == "unknown"


def test_engine_exit_status_does_not_judge_a_start_cut_short() -> None:
    sig = [started("t", "engine_signal", 1, to="api_server", sig="SIGTERM", ready=False),
           returned("t", "engine_signal", 1.1, True, 1)]
    gone = returned("g", "wait_gone", 2, True, {"gone": True, "seconds": 0.1, "survivors": [], "orphaned": [],
                                                  "status": 1, "left": [], "after": "t"})
    v = check("engine_exit_status", [*sig, gone])
    assert v.status == "unknown" and "SIGTERM during the start" in v.message


@pytest.mark.parametrize(("status", "verdict"), [(1, "ok"), (0, "violated")])
def test_engine_exit_status_judges_a_start_whose_engine_core_died(status: int, verdict: str) -> None:
    sig = [started("k", "engine_signal", 1, to="engine_core", sig="SIGKILL", ready=False, process="VLLM::EngineCor"),
           returned("k", "engine_signal", 1.1, True, 1)]
    gone = returned("g", "wait_gone", 2, True, {"gone": True, "seconds": 0.1, "survivors": [], "orphaned": [],
                                                  "status": status, "left": [], "after": "k"})
    v = check("engine_exit_status", [*sig, gone])
    assert v.status == verdict, v
    if status == 0:
        assert v.message == "g: the API server exited 0 although its engine_core got SIGKILL (VLLM::EngineCor died " \
                            "under it)", v.message


# ------------------------------------------------------------------ real runs on the stand-in
def _run(scenario: str, variant: str) -> tuple[dict[str, str], Any]:
    result = run_item(expand(load(str(SCENARIOS / f"{scenario}.yaml")))[0], variant=variant)
    assert result.step_error == "", result.step_error
    return {v.checker: v.status for v in result.verdicts}, result


NEW = ("engine-stream-reader-stalls", "engine-client-disconnects-mid-stream", "engine-sigkill-worker",
       "engine-sigint-worker", "engine-sigterm-worker-tp2", "engine-sigterm-during-start",
       "engine-late-request-refused", "engine-restart-right-after-sigkill")


# Every scenario item of the default run already runs each of these on the stand-in and passes only when every
# verdict is ok (none of them allows unknown), and each ``-catches-VARIANT`` item fails unless one checker its
# ``catches`` names for the variant fires. What is asserted here beyond that is what those items do not: where
# ``catches`` names several checkers for a variant, each must fire. The rest of the pairs are checked to be
# declared, so the scenario item that proves them exists.
SLOW = pytest.mark.slow
CATCHES = [  # (scenario, planted variant, the checkers its catches name: each must fire)
    ("engine-sigkill-worker", "engine_exits_zero_after_engine_died"),
    ("engine-sigint-worker", "engine_exits_zero_after_engine_died"),
    ("engine-sigterm-worker-tp2", "engine_exits_zero_after_engine_died"),
    ("engine-sigterm-worker-tp2", "engine_keeps_child"),
    ("engine-late-request-refused", "engine_late_generation"),
    ("engine-restart-right-after-sigkill", "engine_keeps_port"),
    ("engine-sigkill-api-server", "engine_keeps_port"),  # a list: any checker of it
    ("engine-stream-reader-stalls", "engine_hangs_stream"),
    ("engine-client-disconnects-mid-stream", "engine_hangs_stream"),
    ("engine-sigterm-during-start", "engine_loses_signal_during_start"),
]


def test_every_new_engine_scenario_names_its_planted_variants_so_its_items_prove_them() -> None:
    assert {s for s, _ in CATCHES} >= set(NEW)
    for scenario, variant in CATCHES:
        catches = load(str(SCENARIOS / f"{scenario}.yaml")).catches
        assert variant in catches, (scenario, variant)


@pytest.mark.parametrize(("scenario", "variant"), [
    pytest.param(s, v, marks=SLOW) for s, v in CATCHES
    if isinstance(c := load(str(SCENARIOS / f"{s}.yaml")).catches, dict) and len(c[v]) > 1])
def test_a_planted_variant_fires_every_checker_its_catches_name(scenario: str, variant: str) -> None:
    catches = load(str(SCENARIOS / f"{scenario}.yaml")).catches
    assert isinstance(catches, dict) and len(catches[variant]) > 1
    verdicts, _ = _run(scenario, variant)
    assert {c: verdicts[c] for c in catches[variant]} == {c: "violated" for c in catches[variant]}, verdicts


def test_a_stalled_reader_is_read_again_once_the_tree_is_gone() -> None:
    _, result = _run("engine-stream-reader-stalls", "engine_standin")
    s1 = next(e for e in result.events if e.kind == "step_returned" and e.data.get("step") == "s1")
    assert s1.data["value"]["stopped_reading_after"] == 2 and s1.data["value"]["resumed"] == "tree_gone"
    assert s1.data["value"]["outcome"] == "aborted"
    assert [e.data["events"] for e in result.events if e.kind == "engine_client_stalled"] == [2]


def test_a_signal_during_a_gated_start_lands_before_ready() -> None:
    _, result = _run("engine-sigterm-during-start", "engine_standin")
    sig = next(e for e in result.events if e.kind == "step_started" and e.data.get("step") == "term_starting")
    assert sig.data["ready"] is False
    assert [e.data["gated"] for e in result.events if e.kind == "engine_starting"] == [True]
    again = next(e for e in result.events if e.kind == "step_returned" and e.data.get("step") == "again")
    assert again.data["value"]["ready"] is False and again.data["value"]["stopped"] is True


def test_a_late_request_finds_a_shutdown_line_recorded_before_its_signal_steps_return() -> None:
    """The engine's shutdown line is watched for from before the signal is sent, so the tree's reader thread can
    record it before the signal step's return is appended (a real vLLM run: the line in the history before the
    return whose timestamp is 47 ms earlier). A late request must find it there at once, not wait out its timeout
    for a line it already has (it did: 'not_sent' 10 s later, and the tree's exit measured from then)."""
    from types import SimpleNamespace

    from harness.history import Recorder
    from harness.scenario.engine_steps import _shutdown_began

    rec = Recorder()
    rec.emit("step_started", step="term", kind="engine_signal", category="signal")
    rec.emit("engine_shutdown_began", step="term", line="[shutdown] API server: shutdown triggered")
    rec.emit("step_returned", step="term", kind="engine_signal", category="signal", ok=True)
    pl = SimpleNamespace(c=SimpleNamespace(rec=rec, host=SimpleNamespace(scaled=lambda t: t)))
    found = _shutdown_began(pl, SimpleNamespace(timeout=0.05))  # type: ignore[arg-type]
    assert found is not None and found.kind == "engine_shutdown_began"
    rec.emit("step_started", step="kill", kind="engine_signal", category="signal")  # a later signal: a later line
    assert _shutdown_began(pl, SimpleNamespace(timeout=0.05)) is None  # type: ignore[arg-type]
