"""The stand-in engine's vLLM flags (--tensor-parallel-size, --shutdown-timeout, --kv-transfer-config), its
start gate, and its planted variants hangs_stream, loses_signal_during_start, keeps_port and late_generation.

Each test launches the real stand-in command through EngineTree and drives it over HTTP and signals.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lc_helpers import free_port

from harness.engine.standin import GATE, READY_LINE, SHUTDOWN_LINE
from harness.engine.standin_http import ABORT_GRACE_S
from harness.engine.tree import EngineStartError, EngineTree
from harness.scenario.quick import catch_id

Make = Callable[..., tuple[EngineTree, int]]




@pytest.fixture
def make(short_tmp: Path) -> Iterator[Make]:
    """A stand-in tree, not yet started: (tree, port)."""
    trees: list[EngineTree] = []

    def build(variant: str = "standin", *extra: str, env: dict[str, str] | None = None) -> tuple[EngineTree, int]:
        port = free_port()
        tree = EngineTree([sys.executable, "-m", "harness.engine.standin", "serve", "--port", str(port),
                           "--variant", variant, *extra], short_tmp / f"run{len(trees)}", ready=READY_LINE,
                          failed=r"^ERROR: ", path_vars=("VLLM_RPC_BASE_PATH",), env=env)
        trees.append(tree)
        return tree, port

    yield build
    for t in trees:
        t.close()
        assert t.members() == []


def _stream(port: int, max_tokens: int = 100000,
            timeout: float = 30) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": max_tokens, "stream": True}))
    r = conn.getresponse()
    assert r.status == 200 and r.fp.readline().startswith(b"data: ")  # the stream is in flight
    return conn, r


def _post(port: int, max_tokens: int = 4) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": max_tokens}))
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        conn.close()


def _line_seen(tree: EngineTree, text: str) -> threading.Event:
    """An event set once the tree prints a line containing ``text`` (the reader thread's hook)."""
    seen = threading.Event()
    tree.on_line = lambda line: seen.set() if text in line else None
    return seen


def _bound_port(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


# ------------------------------------------------------------------ --tensor-parallel-size
def test_tensor_parallel_size_forks_that_many_workers_and_a_dead_worker_ends_the_tree(make: Make) -> None:
    tree, _ = make("standin", "--tensor-parallel-size", "2")
    tree.start(timeout=30)
    workers = tree.find(r"^VLLM::Worker")
    assert [m.name for m in workers] == ["VLLM::Worker_TP", "VLLM::Worker_TP"]  # Worker_TP0/1, kernel-truncated
    assert len(tree.members()) == 4
    tree.signal(signal.SIGKILL, workers[1].pid)
    assert tree.wait_gone(timeout=10)
    assert tree.returncode == 1  # its engine died under it
    assert list(tree.tmp.iterdir()) == []


# ------------------------------------------------------------------ --shutdown-timeout
def test_shutdown_timeout_lets_a_request_in_flight_finish_and_refuses_new_ones(make: Make) -> None:
    tree, port = make("standin", "--shutdown-timeout", "30", "--token-interval", "0.02")
    tree.start(timeout=30)
    began = _line_seen(tree, SHUTDOWN_LINE)
    conn, r = _stream(port, max_tokens=40)  # 0.8 s of tokens
    tree.signal(signal.SIGTERM)
    assert began.wait(10)
    status, body = _post(port)  # after shutdown began: refused, the server still up for the drain
    assert status == 503 and body == {"error": "shutting down"}
    rest = r.read().decode()
    conn.close()
    assert '"finish_reason": "length"' in rest and rest.endswith("data: [DONE]\n\n")  # drained, not aborted
    assert tree.wait_gone(timeout=10)
    assert tree.returncode == 0


def test_shutdown_timeout_aborts_what_is_still_running_when_it_ends(make: Make) -> None:
    tree, port = make("standin", "--shutdown-timeout", "1")
    tree.start(timeout=30)
    conn, r = _stream(port)
    t0 = time.monotonic()
    tree.signal(signal.SIGTERM)
    rest = r.read().decode()
    took = time.monotonic() - t0
    conn.close()
    assert '"finish_reason": "abort"' in rest and 0.9 < took < 5
    assert tree.wait_gone(timeout=10)


@pytest.mark.slow
def test_a_client_that_stops_reading_cannot_hold_the_stop(make: Make) -> None:
    tree, port = make("standin", "--token-interval", "0")  # tokens as fast as the socket takes them
    tree.start(timeout=30)
    blocked = _line_seen(tree, "the client is not reading")
    with socket.socket() as c:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.connect(("127.0.0.1", port))
        body = json.dumps({"prompt": "x", "max_tokens": 10**6, "stream": True}).encode()
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        assert c.recv(64).startswith(b"HTTP/1.1 200")  # ... and never reads again: the server's writes block
        assert blocked.wait(30)  # its socket's buffers are full: the stream's next write waits
        closing = _line_seen(tree, "connection(s) that did not end")
        t0 = time.monotonic()
        tree.signal(signal.SIGTERM)
        assert tree.wait_gone(timeout=ABORT_GRACE_S * 2 + 10)
        assert time.monotonic() - t0 < ABORT_GRACE_S * 2 + 5
        c.settimeout(30)  # a safety net: the tree is gone, so what its socket sent ends at once
        rest = b"".join(iter(lambda: _recv_or_empty(c), b""))
    # The stop closed the stalled connection after the abort's grace, unless the abort's end fitted in the
    # buffers by then (the kernel grows a TCP send buffer as it goes): then the stream ended whole, as it should.
    assert rest.endswith(b"data: [DONE]\n\n") or closing.wait(10), rest[-300:]
    assert tree.returncode == 0


def _recv_or_empty(c: socket.socket) -> bytes:
    try:
        return c.recv(1 << 16)
    except ConnectionResetError:
        return b""


# ------------------------------------------------------------------ --kv-transfer-config (NIXL)
NIXL = ("--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}')


def test_nixl_side_channel_listens_in_the_engine_core_and_is_closed_at_shutdown(make: Make) -> None:
    side = free_port()
    tree, _ = make("standin", *NIXL, env={"VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
                                          "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side)})
    tree.start(timeout=30)
    with socket.create_connection(("127.0.0.1", side), timeout=10):
        pass  # it listens
    tree.signal(signal.SIGTERM)
    assert tree.wait_gone(timeout=10) and tree.returncode == 0
    assert not _bound_port(side)


def test_a_held_nixl_port_fails_the_start_with_one_clear_error_and_nothing_left(make: Make) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        side = held.getsockname()[1]
        tree, _ = make("standin", *NIXL, env={"VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
                                              "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side)})
        with pytest.raises(EngineStartError, match=rf"NIXL side channel: cannot listen on 127.0.0.1:{side}: "
                                                   "Address already in use"):
            tree.start(timeout=30)
        assert tree.wait_gone(timeout=10)
        assert tree.returncode == 1 and list(tree.tmp.iterdir()) == []


def test_a_bad_kv_transfer_config_is_one_error_line(make: Make) -> None:
    tree, _ = make("standin", "--kv-transfer-config", "{nope")
    with pytest.raises(EngineStartError, match=r"ERROR: --kv-transfer-config is not JSON"):
        tree.start(timeout=30)
    assert tree.returncode == 2


# ------------------------------------------------------------------ the start gate
def _gated_start(tree: EngineTree) -> tuple[socket.socket, threading.Thread, list[object]]:
    """Start ``tree`` on a thread with the start gate held; once the engine core waits on it, (the gate's
    connection, the thread, [its ready seconds or its EngineStartError])."""
    tree.run_dir.mkdir(parents=True, exist_ok=True)
    gate = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    gate.bind(str(tree.run_dir / GATE))
    gate.listen()
    gate.settimeout(30)
    out: list[object] = []

    def start() -> None:
        try:
            out.append(tree.start(timeout=30))
        except EngineStartError as exc:
            out.append(exc)

    th = threading.Thread(target=start, daemon=True)
    th.start()
    conn, _ = gate.accept()  # the engine core is loading the model: the tree is starting, not ready
    gate.close()
    os.unlink(tree.run_dir / GATE)
    return conn, th, out


def test_sigterm_during_the_start_stops_the_tree_before_it_is_ready(make: Make) -> None:
    tree, _ = make()
    conn, th, out = _gated_start(tree)
    tree.signal(signal.SIGTERM)
    assert tree.wait_gone(timeout=10)
    conn.close()
    th.join(30)
    assert isinstance(out[0], EngineStartError) and tree.returncode == 0
    assert "Shutdown requested during start" in tree.tail()
    assert list(tree.tmp.iterdir()) == []


# the same planted flag, caught in a library scenario by the checker that names it
@pytest.mark.covered_by(catch_id("engine-sigterm-during-start", "engine_loses_signal_during_start"))
def test_planted_loses_signal_during_start_keeps_running_after_ready(make: Make) -> None:
    tree, _ = make("loses_signal_during_start")
    conn, th, out = _gated_start(tree)
    tree.signal(signal.SIGTERM)
    conn.close()  # the model is loaded: the start goes on
    th.join(30)
    assert isinstance(out[0], float)  # ready, the SIGTERM lost
    assert not tree.wait_gone(timeout=0.5) and len(tree.find(".")) == 3
    tree.signal(signal.SIGTERM)  # after ready it obeys
    assert tree.wait_gone(timeout=10)


# ------------------------------------------------------------------ the other planted variants
# the same planted flag, caught in a library scenario by the checker that names it
@pytest.mark.covered_by(catch_id("engine-client-disconnects-mid-stream", "engine_hangs_stream"))
def test_planted_hangs_stream_never_ends_a_stream_at_sigterm(make: Make) -> None:
    tree, port = make("hangs_stream")
    tree.start(timeout=30)
    conn, r = _stream(port, timeout=1.0)
    tree.signal(signal.SIGTERM)
    with pytest.raises(TimeoutError):
        while True:  # the tokens already sent, then nothing: no end, no error
            r.fp.readline()
    conn.close()
    assert not tree.wait_gone(timeout=0.5)


# the same planted flag, caught in a library scenario by the checker that names it
@pytest.mark.covered_by(catch_id("engine-sigkill-api-server", "engine_keeps_port"))
def test_planted_keeps_port_the_engine_core_outlives_its_api_server_holding_the_port(make: Make) -> None:
    tree, port = make("keeps_port")
    tree.start(timeout=30)
    tree.signal(signal.SIGKILL)
    assert not tree.wait_gone(timeout=0.5)
    assert sorted(m.name for m in tree.find(".")) == ["VLLM::EngineCor", "VLLM::Worker"]
    assert _bound_port(port)


def test_the_stand_in_after_a_sigkill_of_its_api_server_releases_the_port(make: Make) -> None:
    tree, port = make()
    tree.start(timeout=30)
    tree.signal(signal.SIGKILL)
    assert tree.wait_gone(timeout=10)
    assert not _bound_port(port)


# the same planted flag, caught in a library scenario by the checker that names it
@pytest.mark.covered_by(catch_id("engine-late-request-refused", "engine_late_generation"))
def test_planted_late_generation_generates_a_request_that_came_after_shutdown_began(make: Make) -> None:
    tree, port = make("late_generation", "--shutdown-timeout", "30")
    tree.start(timeout=30)
    began = _line_seen(tree, SHUTDOWN_LINE)
    conn, r = _stream(port, max_tokens=100)  # 1 s of tokens: the drain lasts that long
    tree.signal(signal.SIGTERM)
    assert began.wait(10)
    status, body = _post(port)
    assert status == 200 and body["usage"] == {"completion_tokens": 4}  # generated
    r.read()
    conn.close()
    assert tree.wait_gone(timeout=10)
