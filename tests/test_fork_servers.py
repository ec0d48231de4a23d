"""What a run's processes get from the fork server they fork from: torch only where their target uses it, and
their requester's import path.

A target whose processes never use torch forks from a fork server that did not preload it.

The reference's KV pages on the CPU are anonymous memory maps, and torch tensors only on another device (a
CUDA run forks from the server that preloaded torch, whatever its target says); the reference and the
third-party worked example (tests/thirdparty) say ``uses_torch = False``, and on the CPU their processes must
carry no torch: what their own deployment would run, and a faithful exit that does not pay torch's module
teardown.
Seen from outside: the shared objects each process has mapped (/proc/PID/maps) and who forked it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.launch.cluster import Cluster
from harness.launch.spawn import ForkServer, helper_pids
from harness.reference.allocator import MiB
from harness.targets import api, uses_torch
from harness.targets.api import check_target_object
from tests.thirdparty.target import TARGET

THIRD_PARTY = "tests.thirdparty.target:TARGET"


def _maps_torch(pid: int) -> bool:
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


# the CUDA run touches no CUDA on this machine: a worker makes no page until a map, and none is sent
@pytest.mark.parametrize(("variant", "device", "torch"), [(THIRD_PARTY, "cpu", False), ("reference", "cpu", False),
                                                         ("reference", "cuda", True)])
def test_a_run_forks_from_the_server_that_preloaded_what_its_target_uses(variant: str, device: str,
                                                                        torch: bool) -> None:
    assert uses_torch(variant, device) is torch
    with Cluster(variant=variant, drain_timeout=1.0, device=device) as c:
        server = ForkServer._shared if torch else ForkServer._light
        assert server is not None and server.pid in helper_pids()  # the harness's helper, never a run's process
        procs = [c.engine, *c.workers]
        for proc in procs:
            assert proc is not None
            assert _ppid(proc.pid) == server.pid, proc.label
            assert _maps_torch(proc.pid) is torch, proc.label
        assert _maps_torch(server.pid) is torch
    assert c.outcome.status == "ok", c.outcome


def test_a_reference_worker_maps_its_pages_on_the_cpu_without_loading_torch() -> None:
    """A map through the listener holds its pages in the worker, and torch stays out of the worker's process."""
    with Cluster(variant="reference", drain_timeout=1.0) as c:
        assert c.engine is not None
        w = c.worker(0)
        assert c.engine.call("map", offsets=[0, 2 * MiB]) == [0, 2 * MiB]
        assert sorted(w.call("mapped")) == [0, 2 * MiB]
        assert not _maps_torch(w.pid)
    assert c.outcome.status == "ok", c.outcome


def test_uses_torch_defaults_to_true_and_must_be_a_bool() -> None:
    assert TARGET.uses_torch is False
    assert uses_torch("kvcached==0.1.6")  # no attribute: its processes use torch (kvcached's pages are tensors)
    assert uses_torch("no_such_module_xyz:V")  # cannot be loaded here: the run's own load says why

    class Sloppy:
        name, about = "sloppy", "says uses_torch with a string"
        capabilities = frozenset({"worker_side"})
        codec = None
        engine_side = handshake_listener = None
        uses_torch = "no"

        def worker_side(self, spec: api.WorkerSpec, recorder: api.Recorder) -> None:
            return None

    assert "uses_torch is 'no', not True or False" in check_target_object(Sloppy())


def test_a_target_on_a_path_added_after_the_server_started_imports_in_its_children(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fork server's own sys.path is fixed when it starts (a worker's, at its first run); a conftest or a
    test may add a directory later. The children take the path their requester has when it asks, as they take
    its environment, so a target found there imports in them."""
    ForkServer.shared()  # started before the path exists (or earlier in this process)
    (tmp_path / "lc_late_path_target.py").write_text(
        "from dataclasses import replace\n"
        "from harness.reference.variants import VARIANTS\n"
        "TARGET = replace(VARIANTS['reference'], name='lc_late_path_target:TARGET')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with Cluster(variant="lc_late_path_target:TARGET", drain_timeout=1.0) as c:
        assert c.workers
    assert c.outcome.status == "ok", c.outcome


def test_lastcall_run_knows_before_pytest_starts_which_fork_servers_its_runs_fork_from(tmp_path: Path) -> None:
    """`lastcall run` starts those servers (ForkServer.prestart: no wait) while pytest starts and collects,
    so their preload overlaps it; an engine run forks from none (the harness launches its engine itself), and
    a run with errors starts nothing."""
    from harness.scenario.commands import preflight

    scenarios = Path(__file__).resolve().parent.parent / "scenarios"
    from harness.scenario.commands import runs_here

    assert preflight([str(scenarios / "stalled-read-is-cancelled.yaml")]) == ([], {False})  # its CPU items
    assert preflight([str(scenarios / "engine-sigterm-idle.yaml")]) == ([], set())
    assert preflight([str(scenarios / "stalled-read-is-cancelled.yaml")], target=THIRD_PARTY) == ([], {False})
    kv = "kvcached==0.1.6"  # its package imports torch
    expected = {True} if runs_here(kv) else set()
    assert preflight([str(scenarios / "stalled-read-is-cancelled.yaml")], target=kv) == ([], expected)
    problems, forks = preflight([str(scenarios / "stalled-read-is-cancelled.yaml")], target="refrence")
    assert problems and forks == set()
    # a target this machine lacks (vLLM's NIXL listener without vLLM): its items skip, so no server is started
    from harness.targets import load_target, unavailable, uses_torch

    lacking = unavailable(load_target("vllm_nixl")) is not None
    handshake = str(scenarios / "handshake-idle-shutdown-releases-the-port.yaml")
    assert preflight([handshake], target="vllm_nixl") == ([], set() if lacking else {uses_torch("vllm_nixl")})


def test_a_prestarted_server_is_the_shared_one_once_ready() -> None:
    server = ForkServer.prestart(False)  # returns at once; the first fork waits for its preload
    assert ForkServer.shared(False) is server and server in ForkServer.live()
    assert server._ready.is_set()  # shared() waited for it
