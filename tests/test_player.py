"""One run mechanism: the Player's registry of step kinds, the cast a run's steps choose, and the record.

Every step kind of a scenario has one player and one category; the processes a run starts follow from the
cast its steps drive; every step is recorded under its own kind with its category, and the checkers select
on the category (a handshake shutdown is a stop without being recorded as one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lc_helpers import check, harness_events

from harness.categories import CATEGORY_OF_KIND, category_of
from harness.history import Event
from harness.launch.judged import JudgedCluster
from harness.launch.parts import CASTS, HANDSHAKE, WORKER, missing_parts
from harness.scenario import load
from harness.scenario.loader import expand
from harness.scenario.player import StepError, cast_for
from harness.scenario.runner import STEP_KINDS, run_item
from harness.scenario.steps import ENGINE_STEPS, STEP_TYPES
from harness.targets import load_target

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


H = harness_events(1)


# ------------------------------------------------------------------ the registry
def test_every_declared_step_kind_is_played_and_reads_as_a_version_1_history_did() -> None:
    assert set(STEP_KINDS) == set(STEP_TYPES)
    for kind, old in CATEGORY_OF_KIND.items():  # a version-1 history reads as a new one would
        assert STEP_KINDS[kind].category == old, kind


def test_every_cast_a_step_declares_is_a_cast_the_launcher_runs() -> None:
    assert {sk.cast for sk in STEP_KINDS.values()} - {None} <= set(CASTS)


def test_a_step_of_an_unknown_category_is_refused_where_it_is_declared() -> None:
    from harness.scenario import steps

    source = ("class OddStep(StepBase):\n    kind = 'odd'\n    category = 'nope'\n    odd: int = 0\n")
    namespace = {**vars(steps), "__name__": "planted"}
    exec(compile(source, "planted", "exec"), namespace)  # a new step module's declaration, as steps.py checks it
    with pytest.raises(ValueError, match="step kind 'odd': unknown category 'nope'"):
        steps.check_categories([namespace["OddStep"]])


def test_the_cast_of_every_scenario_follows_from_its_steps() -> None:
    for path in sorted(SCENARIOS.glob("*.yaml")):
        scn = load(str(path))
        engine = any(s.kind in ENGINE_STEPS for s in scn.steps)  # engine-*.yaml: a worker run or a real engine's
        want = "handshake" if path.name.startswith("handshake-") else "engine" if engine else "worker"
        assert cast_for(scn.steps) == want, path.name


def test_steps_of_two_casts_are_refused() -> None:
    start, stop, shake = (STEP_TYPES[k].model_validate({k: v}) for k, v in
                          (("start", "cluster"), ("stop", {}), ("handshake_start", {})))
    with pytest.raises(StepError, match="more than one kind of run"):
        cast_for([start, stop, shake])
    assert cast_for([start, shake]) == "handshake"
    assert cast_for([start]) == "worker"  # only steps any run plays: the default cast


def test_a_cast_names_the_target_parts_it_runs() -> None:
    assert missing_parts(WORKER, load_target("reference")) == []
    assert missing_parts(HANDSHAKE, load_target("reference")) == []
    assert missing_parts(HANDSHAKE, load_target("no_conn_tracking")) == ["handshake_listener"]


# ------------------------------------------------------- selection by category
def test_stop_result_judges_a_step_by_its_category_not_its_kind() -> None:
    shutdown = [H("step_started", 0, step="s1", kind="handshake_shutdown", category="stop"),
                H("step_returned", 10, step="s1", kind="handshake_shutdown", category="stop", ok=True,
                  value=False)]
    v = check("stop_result", shutdown, {"step": "s1", "returns": True})
    assert v.status == "violated" and "s1 returned False" in v.message
    # a kind the old selection knew ("stop") in a category that is not a lifecycle one is not judged
    fake = [H("step_returned", 10, step="s1", kind="stop", category="request", ok=True, value=False)]
    assert check("stop_result", fake, {"step": "s1", "returns": True}).status == "unknown"
    # a version-1 history (no category): its handshake start was recorded as a restart
    v1 = [H("step_returned", 10, step="l1", kind="restart", ok=False, value=None, error="PortInUse: held")]
    assert check("stop_result", v1, {"step": "l1", "returns": False}).status == "ok"
    assert category_of({"kind": "restart"}) == "start" and category_of({"kind": "nope"}) is None


def test_requests_served_judges_every_request_category_step() -> None:
    served = [H("step_returned", 10, step="h1", kind="handshake", category="request", ok=True, value="a",
                fault="none")]
    assert check("requests_served", served).status == "ok"
    failed = [H("step_returned", 10, step="h1", kind="handshake", category="request", ok=False, value=None,
                fault="none", error="no reply")]
    assert check("requests_served", failed).status == "violated"
    assert check("requests_served", [H("step_returned", 10, step="h1", kind="hammer", category="traffic",
                                       ok=True, value="hammering")]).status == "unknown"


# ------------------------------------------------------------ real processes
def _steps(result: Any) -> list[Event]:
    return [e for e in result.events if e.kind in ("step_started", "step_returned")]


def test_a_handshake_run_starts_its_cast_and_records_each_step_under_its_own_kind() -> None:
    item = expand(load(str(SCENARIOS / "handshake-idle-shutdown-releases-the-port.yaml")))[0]
    result = run_item(item, variant="reference")
    assert result.passed, [v for v in result.verdicts if not v.ok] or result.step_error
    spawned = sorted(e.data["role"] for e in result.events if e.kind == "process_spawned")
    assert spawned == ["hs_engine", "hs_peer"]  # no worker, no client engine
    kinds = {(e.data["step"], e.data["kind"], e.data["category"]) for e in _steps(result)}
    assert kinds == {("l1", "handshake_start", "start"), ("h1", "handshake", "request"),
                     ("s1", "handshake_shutdown", "stop")}
    assert "after_s1" in result.snapshots  # the port probe taken as the shutdown returned True


def test_a_worker_run_starts_an_engine_and_its_workers() -> None:
    item = expand(load(str(SCENARIOS / "executing-handler-is-drained.yaml")))[0]
    result = run_item(item, variant="reference")
    assert result.passed, [v for v in result.verdicts if not v.ok] or result.step_error
    spawned = [e.data["role"] for e in result.events if e.kind == "process_spawned"]
    assert spawned == ["engine"] + ["worker"] * (item.params["tp"] * item.params["pp"])
    assert all(e.data["category"] == STEP_KINDS[e.data["kind"]].category for e in _steps(result))


def test_a_wait_right_after_start_sees_the_events_of_the_start(tmp_path: Path) -> None:
    path = tmp_path / "wait-after-start.yaml"
    path.write_text("""name: wait-after-start
about: the processes' start-up events come before the start step; a wait right after it must see them
catches: [no_conn_tracking]
topology: {tp: 1}
steps:
  - start: cluster
  - wait: {event: listener_started, on: {rank: 0}, timeout: 2s}
  - stop: {on: all, as: s1}
  - wait: {returned: s1}
expect:
  - stop_result: {step: s1, returns: true}
""")
    result = run_item(expand(load(str(path)))[0], variant="reference")
    assert result.passed, result.step_error or [v for v in result.verdicts if not v.ok]


@pytest.mark.parametrize("since", [True, False])
def test_a_wait_since_a_step_counts_events_recorded_before_a_later_marking_step(tmp_path: Path,
                                                                                since: bool) -> None:
    # stop_started is recorded before hold_port moves the mark: only since: s1 still counts it
    path = tmp_path / "wait-since.yaml"
    path.write_text(f"""name: wait-since
about: an event recorded before a marking step is counted by a wait since an earlier step
catches: [no_conn_tracking]
topology: {{tp: 1}}
steps:
  - start: cluster
  - stop: {{on: all, as: s1}}
  - wait: {{returned: s1}}
  - hold_port: {{as: h1}}
  - wait: {{event: stop_started, on: {{rank: 0}}, {'since: s1, ' if since else ''}timeout: 500ms}}
expect:
  - stop_result: {{step: s1, returns: true}}
""")
    result = run_item(expand(load(str(path)))[0], variant="reference")
    if since:
        assert result.passed, result.step_error or [v for v in result.verdicts if not v.ok]
    else:
        assert "no stop_started event" in str(result.step_error)


def test_a_target_lacking_the_cast_s_part_fails_the_run_before_anything_starts() -> None:
    item = expand(load(str(SCENARIOS / "handshake-idle-shutdown-releases-the-port.yaml")))[0]
    result = run_item(item, variant="no_conn_tracking")
    assert "has no handshake_listener: a handshake run needs it" in result.step_error
    assert not [e for e in result.events if e.kind == "process_spawned"]
    assert not result.passed


def test_the_peer_is_the_peer_part_not_a_worker() -> None:
    c = JudgedCluster(cast="handshake")
    try:
        c.start()
        assert c.workers == [] and c.peer.role == "hs_peer" and c.engine is not None
        assert c.engine.role == "hs_engine" and [p.role for p in c.parts["peer"]] == ["hs_peer"]
    finally:
        c.close()
    w = JudgedCluster(tp=2)
    try:
        w.start()
        assert [p.label for p in w.workers] == ["pp0/rank0", "pp0/rank1"]
        with pytest.raises(LookupError, match="a worker run has no peer process"):
            _ = w.peer
    finally:
        w.close()
