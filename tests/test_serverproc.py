"""harness.bench.serverproc: a listener served from a forked child, stopped and reaped; failures reported.

The benchmark script itself (benchmarks/ipc_roundtrip.py) runs as a subprocess here, so that the
process that forks its servers is single-threaded, as when a person runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from lc_helpers import ROOT

from harness.bench.bare import BareListener
from harness.bench.serverproc import Served, ServerProcess
from harness.reference import wire
from harness.reference.backend import NoopBackend
from harness.reference.listener import WorkerListener
from harness.reference.paths import socket_path


def roundtrip(path: str) -> wire.Reply:
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(wire.encode_request(wire.Request(cmd="kv_tensors_created")))
        return wire.decode_reply(wire.recv_frame(s))


def fine() -> str:
    return ""


def child_is_gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["reference", "bare"])
def test_serves_from_another_process_and_stops_clean(tmp_path: Path, kind: str) -> None:
    def factory() -> tuple[Served, Callable[[], str]]:
        if kind == "reference":
            return WorkerListener(socket_path("sp", 0, root=tmp_path), NoopBackend()), fine
        return BareListener(tmp_path / "bare.sock", NoopBackend()), fine

    with ServerProcess(factory, kind) as sp:
        assert sp.pid != os.getpid()
        assert os.path.exists(sp.path)
        before = sp.cpu_ns()
        for _ in range(20):
            assert roundtrip(sp.path).status == "success"
        assert sp.cpu_ns() > before  # the serving thread's own CPU, read from /proc
    assert child_is_gone(sp.pid)
    assert not os.path.exists(sp.path)  # the child's stop() removed its socket
    assert list(tmp_path.iterdir()) == []  # nor its directory


def test_a_factory_that_raises_is_reported_and_reaped(tmp_path: Path) -> None:
    def factory() -> tuple[Served, Callable[[], str]]:
        raise ValueError("no backend for you")

    sp = ServerProcess(factory, "broken")
    with pytest.raises(RuntimeError, match=r"broken \(pid \d+\) did not start: failed ValueError: no backend for you"):
        sp.__enter__()
    assert child_is_gone(sp.pid)


def test_a_failed_check_after_stop_is_reported(tmp_path: Path) -> None:
    def factory() -> tuple[Served, Callable[[], str]]:
        return WorkerListener(socket_path("sp", 0, root=tmp_path), NoopBackend()), lambda: "4194304 bytes mapped"

    sp = ServerProcess(factory, "leaky")
    stopped_dirty = r"leaky \(pid \d+\) did not stop cleanly \(exit 1\): failed 4194304 bytes"
    with pytest.raises(RuntimeError, match=stopped_dirty), sp:
        assert roundtrip(sp.path).status == "success"
    assert child_is_gone(sp.pid)


class HangsInStop(BareListener):
    def stop(self, timeout: float = 5.0) -> bool:
        threading.Event().wait()  # never set: a stop that hangs
        return True


def test_a_stop_that_hangs_is_killed_not_waited_for(tmp_path: Path) -> None:
    def factory() -> tuple[Served, Callable[[], str]]:
        return HangsInStop(tmp_path / "hang.sock", NoopBackend()), fine

    sp = ServerProcess(factory, "hanging", timeout=0.5)
    with pytest.raises(RuntimeError, match=r"hanging \(pid \d+\) said nothing for 0.5s \(a start or stop that "
                                           r"hangs\): killed"), sp:
        assert roundtrip(sp.path).status == "success"
    assert child_is_gone(sp.pid)
    (tmp_path / "hang.sock").unlink()  # what a killed server leaves: ours to remove


@pytest.mark.slow
def test_ipc_roundtrip_benchmark_runs_and_prints_its_tables(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "benchmarks/ipc_roundtrip.py", "--windows", "1", "--requests", "3",
                          "--stop-reps", "1"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    text = out.stdout
    assert text.count("Round trip, one fresh connection per request") == 4
    assert "each listener in its own process" in text and "one GIL" in text
    assert "stop() latency" in text and "16 idle clients parked" in text
    assert "floor with 256 parked (the kernel and the file system alone" in text  # what the stop cannot go under
    assert "WARNING" not in text and "Traceback" not in out.stderr


def _allowed(tid: int) -> str:
    status = Path(f"/proc/{tid}/status").read_text()
    return next(line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("Cpus_allowed_list"))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two CPUs")
def test_a_pinned_server_process_serves_from_the_cpu_it_was_given(tmp_path: Path) -> None:
    """The round-trip benchmark pins the listeners to one CPU and its client to another (benchmarks/ipc_roundtrip.py:
    unpinned, which CPU a request woke made the windows disagree); the child and its serving thread run there."""
    cpu = sorted(os.sched_getaffinity(0))[-1]

    def factory() -> tuple[Served, Callable[[], str]]:
        return WorkerListener(socket_path("pin", 0, root=tmp_path), NoopBackend()), fine

    with ServerProcess(factory, "pinned", cpus=frozenset({cpu})) as sp:
        assert _allowed(sp.pid) == str(cpu) and _allowed(sp.tid) == str(cpu)
        assert roundtrip(sp.path).status == "success"
    assert child_is_gone(sp.pid)


def test_the_benchmarks_pin_plan_takes_two_cpus_or_none() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("ipc_roundtrip_pin", ROOT / "benchmarks" / "ipc_roundtrip.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cpus = sorted(os.sched_getaffinity(0))
    assert mod.pin_plan(False) == {}
    assert mod.pin_plan(True) == ({"client": cpus[0], "listeners": cpus[1]} if len(cpus) >= 2 else {})


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two CPUs")
def test_lastcall_bench_pins_every_thread_of_an_arm_and_its_client_for_the_run_only() -> None:
    """`lastcall bench` places its arms as the round-trip benchmark does: a cluster arm's worker already runs its
    serving and control threads when it is pinned, so every thread of it moves; the client's CPU is this thread's
    for the measurement only."""
    from harness.bench.command import on_cpu, pin_plan, pin_threads

    cpus = sorted(os.sched_getaffinity(0))
    assert pin_plan(True) == {"client": cpus[0], "arms": cpus[1]} and pin_plan(False) == {}
    child = subprocess.Popen([sys.executable, "-c", "import sys, threading\n"
                              "threading.Thread(target=sys.stdin.read, daemon=True).start()\n"
                              "print(flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "\n"  # its second thread is running
        tids = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
        assert len(tids) == 2
        pin_threads(child.pid, cpus[1])
        assert [_allowed(t) for t in tids] == [str(cpus[1])] * 2
    finally:
        child.communicate("")
    before = os.sched_getaffinity(0)
    with on_cpu(cpus[0]):
        assert os.sched_getaffinity(0) == {cpus[0]}
    assert os.sched_getaffinity(0) == before
