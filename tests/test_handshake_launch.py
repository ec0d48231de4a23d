"""The handshake side channel on real processes: an engine owning the listener, a peer engine handshaking.

Each case runs on the reference (its checkers stay quiet) and on the planted bug
that reproduces the real vLLM defect (a checker fires).  port_released is judged
on a snapshot taken once shutdown returned, while the engine process still lives:
after the process exits the kernel frees the port whatever the listener did.
"""

from __future__ import annotations

import functools
import signal
import socket
from collections.abc import Iterator

import pytest
from lc_helpers import Make, handshake_clusters, status, step

from harness.launch.cluster import RemoteError
from harness.launch.judged import JudgedCluster
from harness.scenario.quick import catch_id
from harness.timeouts import scaled


@pytest.fixture
def make() -> Iterator[Make]:
    yield from handshake_clusters()


def shutdown_and_probe(c: JudgedCluster, port: int) -> object:
    ok = step(c, "stop", "handshake_shutdown", lambda: c.engine.call("shutdown", timeout=scaled(15)))  # type: ignore[union-attr]
    c.snapshot("after_stop", [port])
    return ok


@pytest.mark.parametrize(("variant", "expect"), [
    ("reference", {"port_released": "ok", "stop_latency": "ok", "stop_result": "ok"}),
    ("never_stopped", {"port_released": "violated"}),
    pytest.param("poll_timeout_1s", {"stop_latency": "violated"}, marks=pytest.mark.covered_by(
        catch_id("handshake-idle-shutdown-releases-the-port", "poll_timeout_1s"))),
])
def test_idle_shutdown_releases_the_port_at_once(make: Make, variant: str, expect: dict[str, str]) -> None:
    c = make(variant=variant)
    port = int(c.engine.call("start"))  # type: ignore[union-attr]
    assert c.peer.call("fetch", port=port) == "agent-0-0"
    shutdown_and_probe(c, port)
    got = status(c, "port_released", ("stop_latency", {"step": "stop", "within": 0.5}), "stop_result",
                 "no_orphan_processes")
    assert {k: got[k] for k in expect} == expect, got
    if variant == "reference":
        assert got["no_orphan_processes"] == "ok"


@pytest.mark.parametrize(("variant", "caught"), [("reference", False), pytest.param("poll_timeout_1s", True, marks=(
    pytest.mark.covered_by(catch_id("handshake-shutdown-under-continuous-handshakes", "poll_timeout_1s"))))])
def test_shutdown_under_continuous_traffic(make: Make, variant: str, caught: bool) -> None:
    c = make(variant=variant)
    # a 1 s join, as the library's scenario has it: the reference's shutdown wakes its thread at once; the planted
    # bug's, deferred by the traffic, gives up after it (False), not after the 5 s default
    port = int(c.engine.call("start", join_timeout=scaled(1.0)))  # type: ignore[union-attr]
    c.peer.call("hammer", port=port)
    c.wait(lambda e: e.kind == "handshake_served")
    shutdown_and_probe(c, port)
    c.peer.call("stop_hammering")
    got = status(c, ("stop_latency", {"step": "stop", "within": 0.5}), "port_released")
    assert (got["stop_latency"] == "violated") is caught, got
    if not caught:
        assert got["port_released"] == "ok"


@pytest.mark.parametrize(("variant", "caught"), [("reference", False), pytest.param(
    "ready_wait_no_timeout", True, marks=pytest.mark.covered_by(
        catch_id("handshake-held-port-is-a-typed-error", "ready_wait_no_timeout")))])
def test_port_held_before_start_is_a_typed_error_not_a_hang(make: Make, variant: str, caught: bool) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    c = make(variant=variant)
    try:
        result = step(c, "start", "handshake_start", lambda: c.engine.call(  # type: ignore[union-attr]
            "start", port=port, start_timeout=0.5, timeout=scaled(1.5)))  # the reference raises in milliseconds
    finally:
        holder.close()
    if caught:  # its start is stuck for good: end the engine now rather than through the exit budget
        c.engine.kill(signal.SIGKILL)  # type: ignore[union-attr]
    got = status(c, ("stop_latency", {"step": "start", "within": 1.0}), ("stop_result", {"step": "start",
                                                                                           "returns": False}))
    if caught:
        assert got["stop_latency"] == "violated", got
    else:
        assert got == {"stop_latency": "ok", "stop_result": "ok"}, got
        assert isinstance(result, RemoteError) and result.error_class == "PortInUse"
        assert f"127.0.0.1:{port}" in str(result)


@pytest.mark.parametrize(("variant", "caught"), [("reference", False), pytest.param("dies_on_bad_message", True, marks=(
    pytest.mark.covered_by(catch_id("handshake-malformed-messages-of-every-kind", "dies_on_bad_message"))))])
def test_malformed_handshakes_do_not_kill_the_listener(make: Make, variant: str, caught: bool) -> None:
    c = make(variant=variant)
    port = int(c.engine.call("start"))  # type: ignore[union-attr]
    for kind in ("garbage", "wrong_tag", "unknown_rank"):
        # the scenario's 500 ms (scaled): the reference answers in milliseconds, the planted bug never does
        step(c, f"bad_{kind}", "malformed_handshake",
             functools.partial(c.peer.call, "bad", port=port, kind=kind, within=scaled(0.5)), fault="garbage_body")
    step(c, "good", "handshake", lambda: c.peer.call("fetch", port=port, within=1.0), fault="none")
    shutdown_and_probe(c, port)
    got = status(c, "survives_bad_input", "requests_served")
    assert (got["survives_bad_input"] == "violated") is caught, got


@pytest.mark.parametrize(("variant", "caught"), [("reference", False), ("never_stopped", True)])
def test_repeated_start_stop_in_one_process(make: Make, variant: str, caught: bool) -> None:
    """The original hang: a listener not stopped keeps the port, so the next one in the process cannot bind."""
    c = make(variant=variant)
    result = step(c, "cycle", "cycle", lambda: c.engine.call("cycle", n=20, timeout=scaled(30)))  # type: ignore[union-attr]
    got = status(c, ("stop_result", {"step": "cycle", "returns": True}))
    assert (got["stop_result"] == "violated") is caught, (got, result)


def test_engine_killed_releases_the_port_and_leaves_no_process(make: Make) -> None:
    c = make()
    port = int(c.engine.call("start"))  # type: ignore[union-attr]
    c.engine.kill(signal.SIGKILL)  # type: ignore[union-attr]
    assert c.engine.wait_exited()  # type: ignore[union-attr]
    c.snapshot("after_kill", [port])
    got = status(c, "port_released", "no_orphan_processes")
    assert got == {"port_released": "ok", "no_orphan_processes": "ok"}, got


@pytest.mark.parametrize(("variant", "caught"), [("reference", False), ("join_timeout_zero", True)])
def test_shutdown_reports_true_only_once_the_thread_is_gone(make: Make, variant: str, caught: bool) -> None:
    """vLLM 0.11.0's join(timeout=0): with the thread parked in a reply, shutdown returns True at once and
    the port stays bound. The reference returns False (its bounded join), and True once released."""
    c = make(variant=variant)
    port = int(c.engine.call("start", join_timeout=0.3))  # type: ignore[union-attr]
    c.engine.call("arm", site="handshake.before_reply", action="pause", count=1)  # type: ignore[union-attr]
    fetching = c.peer.send("fetch", port=port)
    c.wait("fault_reached")
    first = step(c, "stop", "handshake_shutdown", lambda: c.engine.call("shutdown", timeout=scaled(15)))  # type: ignore[union-attr]
    if first is True:  # a shutdown that says it is done: the port must be free now, thread parked or not
        c.snapshot("after_stop", [port])
    c.engine.call("release", site="handshake.before_reply")  # type: ignore[union-attr]
    c.peer.result(fetching)
    step(c, "retry", "handshake_shutdown", lambda: c.engine.call("shutdown", timeout=scaled(15)))  # type: ignore[union-attr]
    c.snapshot("after_retry", [port])
    got = status(c, "port_released", ("stop_result", {"step": "stop", "returns": False}),
                 ("stop_result", {"step": "retry", "returns": True}))
    if caught:
        assert got["port_released"] == "violated", got
    else:
        assert set(got.values()) == {"ok"}, got
