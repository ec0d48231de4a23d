"""The engine host (harness.engine.host): the run's watchdog covers the engine tree; exclusive engines take turns.

The watchdog test runs a stand-in engine that ignores SIGTERM with a short launch allowance, and a wait_gone
longer than the run's deadline: the watchdog must fire, kill the whole tree and make the run ``hung``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.engine.host import EngineHost
from harness.history import Recorder
from harness.scenario.loader import expand, loads
from harness.scenario.runner import run_item
from harness.targets.vllm_engine import EngineTarget

# a stand-in that ignores SIGTERM, allowed 2 s per launch: the run's deadline is 0.5 s + 2 x 2 s
STUBBORN = EngineTarget("stubborn", "ignores SIGTERM, short launch allowance", "standin", variant="ignores_sigterm",
                        launch_s=2.0)

HUNG = """\
name: engine-watchdog-kills-the-tree
about: a tree that ignores SIGTERM outlives the run's deadline; the watchdog kills it
target: tests.test_engine_host:STUBBORN
catches: [engine_ignores_sigterm]
config: {deadline: 500ms}
steps:
  - start: engine
  - engine_signal: {to: api_server, sig: SIGTERM, as: term}
  - wait_gone: {timeout: 60s, as: gone}
expect:
  - engine_tree_exits: {within: 1s}
"""


@pytest.mark.slow
def test_the_watchdog_kills_an_engine_tree_that_outlives_the_deadline_with_every_processs_stacks() -> None:
    """One hung run (it waits out its deadline) for both: the watchdog kills the tree, and the hung outcome
    carries every process's stacks (this was test_engine_flags' test of the same item, run a second time)."""
    result = run_item(expand(loads(HUNG, "<hung>"))[0])
    assert result.outcome.status == "hung"
    kinds = [e.kind for e in result.events]
    assert "watchdog_fired" in kinds
    ready = next(e for e in result.events if e.kind == "engine_ready")
    stacks: list[Any] = [e for e in result.events if e.kind == "stacks"]
    assert sorted(e.data["pid"] for e in stacks) == sorted(m["pid"] for m in ready.data["members"])
    assert all(e.data["text"].strip() for e in stacks)
    assert set(result.outcome.stacks) == {e.data["label"] for e in stacks}
    assert all(label.startswith("e0/") for label in result.outcome.stacks)
    gone = next(e for e in result.events if e.kind == "step_returned" and e.data.get("step") == "gone")
    assert gone.data["value"]["gone"] is True  # killed by the watchdog, long before the step's 60 s
    assert gone.data["value"]["seconds"] < 30
    assert gone.data["value"]["status"] == -9
    for m in ready.data["members"]:
        with pytest.raises(ProcessLookupError):
            os.kill(m["pid"], 0)


def _host(tmp: Path, variant: str) -> EngineHost:
    cluster = SimpleNamespace(variant=variant, root=tmp, rec=Recorder(role="harness"), deadline_s=1.0)
    return EngineHost(cluster)


def test_an_exclusive_engine_waits_for_the_lock_of_the_one_running(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LASTCALL_CACHE", str(tmp_path / "cache"))
    first, second = _host(tmp_path / "a", "vllm_engine"), _host(tmp_path / "b", "vllm_engine")
    assert first.target.exclusive and first.c.deadline_s > 1.0  # the launches are added to the deadline
    first._take_lock()
    took = threading.Event()

    def take() -> None:
        second._take_lock()
        took.set()

    t = threading.Thread(target=take, daemon=True)
    t.start()
    assert not took.wait(0.3)  # held by the first engine's run
    first.close()  # releases it
    assert took.wait(10)
    second.close()
    t.join(10)
    assert (tmp_path / "cache" / "engine.lock").exists()


def test_wait_accepting_waits_for_listen_not_for_bind() -> None:
    """vLLM prints its ready line between bind() and listen(): a bound socket refuses, a listening one accepts."""
    import socket

    from harness.engine.tree import wait_accepting

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert not wait_accepting("127.0.0.1", port, 0.05)  # bound, not listening: refused until the bound
        s.listen(1)
        assert wait_accepting("127.0.0.1", port, 5)


def test_an_engines_port_is_free_and_outside_the_ephemeral_range() -> None:
    """engine_restart binds its port again after a SIGKILL released it: a port from the ephemeral range could be
    handed to another process's connect() or bind(0) in that moment, and engine_port_released would blame the
    engine (a clean-clone CI run saw "Address already in use" on the stand-in's restart)."""
    import socket

    from harness.engine.host import PORT_FLOOR, _ephemeral_low, free_port

    ports = {free_port() for _ in range(20)}
    assert all(PORT_FLOOR <= p < _ephemeral_low() for p in ports), sorted(ports)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: each was released when free_port returned


def test_a_port_claimed_by_a_live_run_is_never_picked_for_another_until_released(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs played beside each other on threads each pick their engine's port while the other's
    engine may be down (before its launch, during a restart): the pick skips every port a live run claimed.
    A window of one port that was just free: claimed, it is skipped (bind(0)'s port instead); released, it is
    picked again."""
    import socket

    import harness.engine.host as host

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        only = int(s.getsockname()[1])
    monkeypatch.setattr(host, "PORT_FLOOR", only)
    monkeypatch.setattr(host, "_ephemeral_low", lambda: only + 1)
    mine = host.free_port(claim=True)
    try:
        assert mine == only
        assert host.free_port() != only  # free on the machine, but claimed
    finally:
        host.release_port(mine)
    assert host.free_port() == only
