"""The stand-in engine (harness.engine.standin): a vLLM-shaped tree that shuts down correctly, and its planted bugs.

Each test launches the real stand-in command through EngineTree and drives it over HTTP and signals.
"""

from __future__ import annotations

import http.client
import json
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lc_helpers import free_port

from harness.engine.standin import READY_LINE
from harness.engine.tree import EngineTree
from harness.scenario.quick import catch_id

Launch = Callable[..., tuple[EngineTree, int]]




@pytest.fixture
def launch(short_tmp: Path) -> Iterator[Launch]:
    trees: list[EngineTree] = []

    def start(variant: str = "standin", *extra: str) -> tuple[EngineTree, int]:
        port = free_port()
        tree = EngineTree([sys.executable, "-m", "harness.engine.standin", "serve", "--port", str(port),
                           "--variant", variant, *extra], short_tmp / f"run{len(trees)}", ready=READY_LINE,
                          failed=r"^ERROR: ", path_vars=("VLLM_RPC_BASE_PATH",))
        trees.append(tree)
        tree.start(timeout=30)
        return tree, port

    yield start
    for t in trees:
        t.close()  # a planted bug's survivor is killed here (each test asserts on it first)
        assert t.members() == []


def _post(port: int, body: dict[str, object]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_the_tree_is_vllm_shaped_serves_and_sigterm_removes_everything(launch: Launch) -> None:
    tree, port = launch()
    names = sorted(m.name for m in tree.members())
    assert names[:2] == ["VLLM::EngineCor", "VLLM::Worker"] and len(names) == 3
    made = sorted(p.suffix for p in tree.tmp.iterdir())
    assert made == [".sock", ".state"]
    status, body = _post(port, {"prompt": "hi", "max_tokens": 4})
    assert status == 200 and json.loads(body)["choices"][0]["text"] == " tok" * 4
    status, body = _post(port, {"prompt": "hi", "max_tokens": 3, "stream": True})
    chunks = [c for c in body.decode().split("\n\n") if c]
    assert status == 200 and chunks[-1] == "data: [DONE]" and len(chunks) == 5
    assert json.loads(chunks[-2][6:])["choices"][0]["finish_reason"] == "length"
    tree.signal(signal.SIGTERM)
    assert tree.wait_gone(timeout=10)
    assert tree.returncode == 0
    assert list(tree.tmp.iterdir()) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_engine_core_dying_ends_the_tree_and_the_api_server_says_so(launch: Launch, sig: int) -> None:
    tree, _ = launch()
    core = tree.find(r"^VLLM::EngineCor")[0]
    tree.signal(sig, core.pid)
    assert tree.wait_gone(timeout=10)
    assert tree.returncode == 1


def test_sigkill_of_the_api_server_the_engine_core_cleans_up_after_itself(launch: Launch) -> None:
    tree, _ = launch()
    tree.signal(signal.SIGKILL)
    assert tree.wait_gone(timeout=10)
    assert list(tree.tmp.iterdir()) == []


def test_a_request_after_shutdown_began_is_refused_and_a_stream_in_flight_is_aborted(launch: Launch) -> None:
    tree, port = launch("standin", "--token-interval", "0.05")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": 10000, "stream": True}))
    r = conn.getresponse()
    assert r.fp.readline().startswith(b"data: ")  # the stream is in flight
    tree.signal(signal.SIGINT)
    rest = r.read().decode()
    conn.close()
    assert '"finish_reason": "abort"' in rest and rest.endswith("data: [DONE]\n\n")
    assert tree.wait_gone(timeout=10)
    assert tree.returncode == 0


# the same planted flag, caught in a library scenario by the checker that names it
@pytest.mark.covered_by(catch_id("engine-tp2-sigterm-idle", "engine_ignores_sigterm", "tp2-pp1-cpu"))
def test_planted_ignores_sigterm_survives_sigterm(launch: Launch) -> None:
    tree, _ = launch("ignores_sigterm")
    tree.signal(signal.SIGTERM)
    assert not tree.wait_gone(timeout=0.5)
    assert len(tree.find(".")) == 3


def test_planted_leaves_socket_file(launch: Launch) -> None:
    tree, _ = launch("leaves_socket_file")
    tree.signal(signal.SIGTERM)
    assert tree.wait_gone(timeout=10)
    assert [p.suffix for p in tree.tmp.iterdir()] == [".sock"]


# the same planted flag, caught in a library scenario by the checker that names it
@pytest.mark.covered_by(catch_id("engine-sigterm-idle", "engine_keeps_child"))
def test_planted_keeps_child_leaves_the_worker_orphaned(launch: Launch) -> None:
    tree, _ = launch("keeps_child")
    tree.signal(signal.SIGTERM)
    assert not tree.wait_gone(timeout=0.5)
    assert [m.name for m in tree.find(".")] == ["VLLM::Worker"]


def test_planted_exits_zero_after_engine_died(launch: Launch) -> None:
    tree, _ = launch("exits_zero_after_engine_died")
    tree.signal(signal.SIGKILL, tree.find(r"^VLLM::EngineCor")[0].pid)
    assert tree.wait_gone(timeout=10)
    assert tree.returncode == 0
