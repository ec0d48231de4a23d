"""vLLM's own NIXL handshake listener (target vllm_nixl) on real processes: what lastcall finds in vLLM 0.33.0
(and in 0.11.1, best effort: the same, except where a test says how it differs).

The engine process (role hs_engine) runs vLLM's scheduler-side listener through
harness/targets/vllm_nixl.py; the peer (hs_peer) speaks vLLM's wire.  Each test
asserts the defect as it stands in 0.33.0 (see /work/shared/notes/vllm-nixl-listener.md),
judged by the same checkers as the reference in tests/test_handshake_launch.py:
a fixed vLLM fails these tests, which is the point of keeping them.

Marked ``vllm``; skipped, with the reason, where vLLM cannot be imported (the
main .venv).  Run them with ``./dev vllm-test`` (``.venv-vllm``).  An engine
process imports vLLM on its first start (about 11 s on CPU), so that start has a
long safety net; each figure is printed (``-s``) for the README.
"""

from __future__ import annotations

import signal
import socket
import statistics
from collections.abc import Iterator

import pytest
from lc_helpers import Make, handshake_clusters, status, step

from harness.launch.cluster import RemoteError
from harness.launch.judged import JudgedCluster
from harness.targets.vllm_nixl import TARGET
from harness.targets.vllm_nixl_layout import LAYOUT_011, layout
from harness.timeouts import scaled

REASON = TARGET.unavailable()
ON_011 = REASON is None and layout() is LAYOUT_011  # 0.11.x installed: where it differs, the test says how
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(REASON is not None, reason=str(REASON))]

NAME = "vllm_nixl"
FIRST_START_S = scaled(90)  # safety net for an engine's first start: it imports vLLM (about 11 s here)
DEFER_S = 3.0  # how long shutdown is shown not to return while a peer keeps handshaking

@pytest.fixture
def make() -> Iterator[Make]:
    yield from handshake_clusters(variant=NAME)


def first_start(c: JudgedCluster, port: int = 0) -> int:
    return int(c.engine.call("start", port=port, timeout=FIRST_START_S))  # type: ignore[union-attr]


def shutdown(c: JudgedCluster) -> object:
    return c.engine.call("shutdown", timeout=scaled(15))  # type: ignore[union-attr]


def stop_ms(c: JudgedCluster) -> list[float]:
    """How long each of vLLM's shutdown() calls took, as the adapter measured them around it."""
    return [float(e.data["took_ms"]) for e in c.rec.events("stop_returned") if e.data.get("took_ms") is not None]


def test_idle_shutdown_waits_for_the_receive_timeout(make: Make) -> None:
    """0.33.0: the stop event is seen only when a 1 s receive times out, so an idle shutdown (right after a
    handshake) takes about a second; the thread then exits and the port is free at once."""
    c = make()
    port = first_start(c)
    assert c.peer.call("fetch", port=port) == "agent-0-0"
    assert step(c, "stop", "handshake_shutdown", lambda: shutdown(c)) is True
    c.snapshot("after_stop", [port])
    took = stop_ms(c)
    print(f"\nvllm_nixl: idle shutdown after a handshake took {took[0]:.1f} ms")
    assert took[0] > 500, took  # the receive timeout, not a wake-up
    got = status(c, ("stop_latency", {"step": "stop", "within": 0.5}), "stop_result", "port_released",
                 "no_leaked_threads", "no_orphan_processes")
    assert got == {"stop_latency": "violated", "stop_result": "ok", "port_released": "ok",
                   "no_leaked_threads": "ok", "no_orphan_processes": "ok"}, got


def test_repeated_start_stop_rebinds_the_released_port(make: Make) -> None:
    """0.33.0 (fixed since 0.11.1): each shutdown releases the port, so the next start in the process binds
    it again; every shutdown takes about 1 s (the receive timeout)."""
    c = make()
    port = first_start(c)  # imports vLLM outside the timed cycle
    assert shutdown(c) is True
    ports = step(c, "cycle", "cycle", lambda: c.engine.call("cycle", n=5, port=port, timeout=scaled(60)))  # type: ignore[union-attr]
    assert ports == [port] * 5, ports
    c.snapshot("after_cycle", [port])
    took = stop_ms(c)[1:]
    print(f"\nvllm_nixl: idle shutdown right after start, 5 cycles: median {statistics.median(took):.1f} ms "
          f"({min(took):.1f} to {max(took):.1f})")
    assert min(took) > 500, took
    got = status(c, ("stop_result", {"step": "cycle", "returns": True}), "port_released", "no_leaked_threads")
    assert got == {"stop_result": "ok", "port_released": "ok", "no_leaked_threads": "ok"}, got


def test_shutdown_under_continuous_traffic_is_deferred(make: Make) -> None:
    """0.33.0: a peer handshaking back to back never lets a receive time out, so shutdown does not return
    while the traffic lasts; it returns within about a second once the peer stops."""
    c = make()
    port = first_start(c)
    assert c.peer.call("fetch", port=port) == "agent-0-0"
    mark = c.mark()
    c.peer.call("hammer", port=port)
    c.wait(lambda e: e.kind == "handshake_served", after=mark)  # the traffic flows
    c.rec.emit("step_started", step="stop", kind="handshake_shutdown", category="stop")
    cid = c.engine.send("shutdown")  # type: ignore[union-attr]
    with pytest.raises(RemoteError, match="no reply"):
        c.engine.result(cid, timeout=DEFER_S)  # type: ignore[union-attr]
    step(c, "stop_hammer", "stop_hammer", lambda: c.peer.call("stop_hammering"))
    value = c.engine.result(cid, timeout=scaled(15))  # type: ignore[union-attr]
    c.rec.emit("step_returned", step="stop", kind="handshake_shutdown", category="stop", ok=True,
               value=value)
    c.snapshot("after_stop", [port])
    assert value is True
    hammer = c.wait("hammer_finished")
    released = next(e for e in c.rec.events("step_started") if e.data.get("step") == "stop_hammer")
    returned = c.rec.events("stop_returned")[0]
    started = c.rec.events("stop_started")[0]
    print(f"\nvllm_nixl: shutdown under continuous handshakes took {(returned.t_ns - started.t_ns) / 1e6:.0f} ms "
          f"({hammer.data['ok']} handshakes served meanwhile, {hammer.data['failed']} failed); it returned "
          f"{(returned.t_ns - released.t_ns) / 1e6:.0f} ms after the peer stopped")
    assert returned.t_ns > released.t_ns  # deferred until the traffic stopped
    assert hammer.data["ok"] > 10 and hammer.data["failed"] == 0, hammer.data
    got = status(c, ("stop_latency", {"step": "stop", "within": 0.5}), "port_released")
    assert got == {"stop_latency": "violated", "port_released": "ok"}, got


def test_port_held_before_start_hangs_start(make: Make) -> None:
    """0.33.0: the bind fails inside the listener thread, which dies ('Address already in use'); the ready
    event is never set and vLLM waits for it with no timeout, so start never returns. The harness bounds
    the wait (3 s here), reports it, and ends the engine."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    c = make()
    try:
        first_start(c)  # vLLM imported: the held start below waits for vLLM only
        assert shutdown(c) is True
        result = step(c, "start", "handshake_start", lambda: c.engine.call(  # type: ignore[union-attr]
            "start", port=port, start_timeout=1.0, timeout=scaled(3)))
        died = c.wait(lambda e: e.kind == "thread_exception", timeout=scaled(5))
    finally:
        holder.close()
    assert isinstance(result, RemoteError) and result.error_class is None, result  # no reply: hung, not an error
    assert died.data["thread"] == "nixl_handshake_listener", died.data
    assert "Address already in use" in died.data["error"], died.data
    print(f"\nvllm_nixl: start on a held port: no return in {scaled(3):g} s; listener thread died with "
          f"{died.data['error']!r}")
    c.engine.kill(signal.SIGKILL)  # type: ignore[union-attr]  # its start is stuck for good
    got = status(c, ("stop_latency", {"step": "start", "within": 2.0}),
                 ("stop_result", {"step": "start", "returns": False}))
    assert got == {"stop_latency": "violated", "stop_result": "ok"}, got


@pytest.mark.parametrize(("kind", "kills"), [("garbage", True), ("unknown_rank", True), ("wrong_tag", ON_011)])
def test_one_malformed_handshake(make: Make, kind: str, kills: bool) -> None:
    """0.33.0: an undecodable body (msgspec DecodeError) or an unknown (pp, tp) rank (KeyError) escapes the
    loop and kills the thread: no reply, and every later handshake fails until restart (PR #54757). A wrong
    message tag is only logged, and served as if it were a handshake.
    0.11.1: the bad messages are 0.33's three-item shape, one more than 0.11 unpacks, so each of them
    (the wrong tag too) kills the thread with ``ValueError: too many values to unpack``."""
    c = make()
    port = first_start(c)
    assert c.peer.call("fetch", port=port) == "agent-0-0"
    bad = step(c, "bad", "malformed_handshake", lambda: c.peer.call("bad", port=port, kind=kind, within=1.0),
               fault="garbage_body")
    good = step(c, "good", "handshake", lambda: c.peer.call("fetch", port=port, within=1.0), fault="none")
    assert step(c, "stop", "handshake_shutdown", lambda: shutdown(c)) is True
    c.snapshot("after_stop", [port])
    deaths = c.rec.events("thread_exception")
    if kills:
        assert bad == "no reply", bad
        assert isinstance(good, RemoteError) and "no reply" in str(good), good
        assert [e.data["thread"] for e in deaths] == ["nixl_handshake_listener"], deaths
        print(f"\nvllm_nixl: one {kind} handshake killed the listener: {deaths[0].data['error']!r}; "
              f"shutdown then took {stop_ms(c)[0]:.1f} ms")
    else:
        assert bad == "replied" and good == "agent-0-0" and not deaths, (bad, good, deaths)
    got = status(c, "survives_bad_input", "requests_served", "port_released")
    expect = "violated" if kills else "ok"
    assert got == {"survives_bad_input": expect, "requests_served": expect, "port_released": "ok"}, got
