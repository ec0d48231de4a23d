"""Real processes: an engine and workers forked from the fork server, controlled and recorded.

Each seed case runs against the reference (the check passes) and against the
planted-bug variant it exists to catch (the same check fails).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.faults import client as cf
from harness.history import Event
from harness.launch.cluster import Cluster, LaunchError, RemoteError
from harness.launch.judged import JudgedCluster
from harness.reference import wire
from harness.reference.ctl import delete_instance
from harness.scenario.quick import catch_id
from harness.timeouts import scaled

MAP = "backend.map_to_kv_tensors"
MiB = 1 << 20
Make = Callable[..., Cluster]


@pytest.fixture
def make(lastcall_cluster: Make) -> Iterator[Make]:
    """Start judged clusters; every one is closed (and checked for leftovers) at the end of the test."""
    made: list[JudgedCluster] = []

    def start(**kw: object) -> JudgedCluster:
        c = lastcall_cluster(**kw)
        made.append(c)
        return c

    yield start
    for c in made:
        outcome = c.close()
        assert outcome.detail == "", outcome.detail


def violated(c: JudgedCluster, *checks: str) -> list[str]:
    """The names of the checkers (of ``checks``) that the run violated."""
    return [v.checker for v in c.verdicts(*checks) if v.status == "violated"]


def kinds_after(c: Cluster, t_ns: int, kind: str) -> list[Event]:
    return [e for e in c.rec.events() if e.kind == kind and e.t_ns > t_ns]


# ------------------------------------------------------------------ seed cases
def stalled_read_case(c: Cluster) -> list[str]:
    """Header sent, body withheld, a handler parked: stop cancels the read; the body never dispatches."""
    w = c.worker(0)
    problems = []
    mark = c.mark()
    peer = cf.stall_after_header(w.path, wire.Request(cmd="map_to_kv_tensors", offsets=[2 * MiB], id="late"))
    c.wait("frame_started", after=mark)
    w.call("arm", site=MAP, action="pause", count=1)
    mapped = c.engine.send("map", offsets=[0])
    c.wait("fault_reached")
    stop = w.send("stop")
    started = c.wait("stop_started")
    if not peer.closed_by_listener(scaled(2)):
        problems.append("the stalled read was not cancelled when stop began")
    peer.finish()
    w.call("release", site=MAP)
    if w.result(stop) is not True:
        problems.append("stop did not return True after the drain")
    c.engine.result(mapped)
    late = [e for e in kinds_after(c, started.t_ns, "dispatch_started") if e.data.get("id") == "late"]
    if late:
        problems.append(f"late dispatch: {late}")
    peer.close()
    return problems


def drained_case(c: Cluster) -> list[str]:
    """A handler parked inside backend.map_to_kv_tensors is drained and its reply delivered."""
    w = c.worker(0)
    w.call("arm", site=MAP, action="pause", count=1)
    mapped = c.engine.send("map", offsets=[0, 2 * MiB])
    c.wait("fault_reached")
    stop = w.send("stop")
    first = c.wait(lambda e: e.kind in ("drain_started", "stop_returned"))
    problems = []
    if first.kind == "stop_returned":
        problems.append("stop returned while the handler was inside the backend")
    w.call("release", site=MAP)
    if w.result(stop) is not True:
        problems.append("stop did not return True")
    try:
        if c.engine.result(mapped) != [0, 2 * MiB]:
            problems.append("the drained map's reply was wrong")
    except RemoteError as exc:
        problems.append(f"the drained map failed: {exc}")
    return problems


def drain_timeout_case(c: Cluster) -> list[str]:
    """Parked past drain_timeout: False, nothing torn down; after release a retry cleans everything."""
    w = c.worker(0)
    w.call("arm", site=MAP, action="pause", count=1)
    mapped = c.engine.send("map", offsets=[0])
    c.wait("fault_reached")
    problems = []
    if w.call("shutdown") is not False:
        problems.append("shutdown returned True while a handler was parked past drain_timeout")
    if not os.path.exists(w.path):
        problems.append("the socket was removed by a stop that timed out")
    if w.call("torn_down") is not False:
        problems.append("the allocator was torn down while a handler was parked")
    w.call("release", site=MAP)
    try:
        c.engine.result(mapped)
    except RemoteError as exc:
        problems.append(f"the parked map failed after release: {exc}")
    if w.call("shutdown") is not True or os.path.exists(w.path):
        problems.append("the retry did not stop and clean up")
    return problems


CASES = [
    pytest.param(stalled_read_case, "no_conn_tracking", id="stalled-read"),
    pytest.param(drained_case, "teardown_while_alive", id="drained"),
    pytest.param(drain_timeout_case, "timed_join_teardown", id="drain-timeout"),
]


CHECKS = {  # the seed cases re-expressed through the checkers: what each case's bug violates
    "stalled_read_case": ("reads_cancelled", "no_late_dispatch"),
    "drained_case": ("handler_drained", "no_dispatch_after_teardown"),
    "drain_timeout_case": ("retained_for_retry", "teardown_deferred", "no_dispatch_after_teardown"),
}
CLEAN = ("no_leftover_paths", "no_leftover_shm", "no_orphan_processes", "no_leaked_threads", "no_leaked_fds",
         "exit_without_stall")


@pytest.mark.parametrize(("case", "variant"), CASES)
def test_seed_case_on_reference(make: Make, case: Callable[[Cluster], list[str]], variant: str) -> None:
    c = make(drain_timeout=0.5)
    assert case(c) == []
    verdicts = c.verdicts(*CHECKS[case.__name__], *CLEAN)
    assert all(v.ok for v in verdicts), [(v.checker, v.status, v.message) for v in verdicts]


# the stalled read's catch is the library scenario's, on the same bug and checker (-m "not slow" keeps that one)
CATCH_CASES = [pytest.param(*CASES[0].values, id="stalled-read", marks=pytest.mark.covered_by(
    catch_id("stalled-read-is-cancelled", "no_conn_tracking"))),
    *CASES[1:]]


@pytest.mark.parametrize(("case", "variant"), CATCH_CASES)
def test_seed_case_catches_variant(make: Make, case: Callable[[Cluster], list[str]], variant: str) -> None:
    c = make(drain_timeout=0.5, variant=variant)
    try:
        problems = case(c)
    finally:
        for w in c.workers:  # the variant may have left a handler parked
            if w.alive:
                w.call("reset")
    assert problems, f"{case.__name__} did not catch {variant}"
    assert violated(c, *CHECKS[case.__name__]), f"no checker of {CHECKS[case.__name__]} fired on {variant}"


# ------------------------------------------------------------- process deaths
def test_worker_sigkilled_mid_request_leaves_socket_and_ctl_delete_cleans(make: Make) -> None:
    c = make(tp=2)
    victim = c.worker(1)
    victim.call("arm", site=MAP, action="pause", count=1)
    mapped = c.engine.send("map", offsets=[0])
    c.wait("fault_reached")
    victim.kill(signal.SIGKILL)
    assert victim.wait_exited()
    assert victim.exit_code == -signal.SIGKILL
    with pytest.raises(RemoteError, match="pp0/rank1"):
        c.engine.result(mapped)
    assert os.path.exists(victim.path), "a SIGKILLed worker cannot clean up: its socket must still be there"
    assert Path(victim.path).with_suffix(".owner").exists()
    removed = delete_instance(c.ipc, root=str(c.root), shm_dir=c.shm_dir, force=True)
    assert victim.path in [str(p) for p in removed]
    assert not os.path.exists(victim.path)


def test_engine_killed_every_worker_exits(make: Make) -> None:
    c = make(tp=2, pp=2)
    assert c.engine is not None
    c.engine.kill(signal.SIGKILL)
    for w in c.workers:
        assert w.wait_exited(), f"{w.label} outlived its engine"
        assert w.exit_code == 0
        # its last events reach the recorder through its pipe, read on the harness's own thread: an exit seen
        # first does not mean they have been read yet
        assert c.rec.wait_for(lambda e, label=w.label: e.kind == "main_returned" and e.rank == label,
                              scaled(5)) is not None, f"{w.label}: no main_returned"
    reasons = {e.rank: e.data["reason"] for e in c.rec.events("main_returned")}
    assert reasons == {w.label: "engine_died" for w in c.workers}
    assert all(not os.path.exists(w.path) for w in c.workers), "workers shut down in order before exiting"


@pytest.mark.slow
def test_hang_ignoring_sigterm_ends_as_hung_with_stacks() -> None:
    # the deadline covers the run from its first fork (not the fork server's start): room for a loaded machine,
    # and far under close()'s orderly wait and SIGTERM grace, so the watchdog is what ends it
    c = Cluster(deadline=3.0, drain_timeout=0.2)
    c.start()
    w = c.worker(0)
    w.call("arm", site=MAP, action="pause")
    c.engine.send("map", offsets=[0])
    c.wait("fault_reached")
    w.call("hang")  # SIGTERM ignored, a non-daemon thread that never ends
    t0 = time.monotonic()
    outcome = c.close()
    assert outcome.status == "hung"
    assert "lastcall-hang" in outcome.stacks[w.label]
    assert outcome.exits[w.label] == -signal.SIGKILL
    assert time.monotonic() - t0 < scaled(3.0) + scaled(10)
    assert any(e.kind == "stacks" for e in c.rec.events())
    assert outcome.leftovers, "the killed worker's socket is reported as left behind"


def test_worker_dying_at_start_gives_status_and_stderr() -> None:
    with pytest.raises(LaunchError) as info:
        Cluster(variant="no_such_module_xyz:V").start()
    msg = str(info.value)
    # the engine, the group leader, loads the target first and is the first one waited for
    assert "engine engine" in msg and "exited with status 1 before it was ready" in msg
    assert "cannot load target 'no_such_module_xyz:V'" in msg


# ------------------------------------------------------------------- exit hook
def test_exit_hook_runs_at_normal_exit_and_is_timed(make: Make) -> None:
    c = make(drain_timeout=5.0, exit_budget=0.5)
    w = c.worker(0)
    w.call("exit", shutdown=False)  # leave the listener registered: the exit hook must stop it
    assert w.wait_exited() and w.exit_code == 0
    ev = {e.kind: e for e in c.rec.events() if e.pid == w.pid}
    assert ev["exit_hook_started"].data["listeners"] == 1
    assert ev["exit_hook_finished"].data == {"ok": True, "left": 0}
    assert ev["main_returned"].t_ns < ev["exit_hook_started"].t_ns < ev["exit_hook_finished"].t_ns
    assert ev["exit_hook_finished"].t_ns < ev["process_exited"].t_ns
    assert not os.path.exists(w.path)


def test_exit_hook_bounded_when_it_cannot_drain(make: Make) -> None:
    c = make(drain_timeout=5.0, exit_budget=0.5)
    w = c.worker(0)
    w.call("arm", site=MAP, action="pause")
    c.engine.send("map", offsets=[0])
    c.wait("fault_reached")
    w.call("exit", shutdown=False)
    assert w.wait_exited()
    ev = {e.kind: e for e in c.rec.events() if e.pid == w.pid}
    hook_s = (ev["exit_hook_finished"].t_ns - ev["exit_hook_started"].t_ns) / 1e9
    assert ev["exit_hook_finished"].data["ok"] is False
    assert 0.4 < hook_s < 0.5 + scaled(1.0), f"the exit hook took {hook_s:.2f}s for a 0.5s budget"


@pytest.mark.covered_by(catch_id("exit-hook-bounded-when-it-cannot-drain", "unbounded_exit_hook"))
def test_exit_audit_catches_an_exit_hook_that_drains_each_listener_fully(make: Make) -> None:
    """The seed's hidden cost: with a handler parked, an exit hook that waits drain_timeout per listener
    stalls interpreter exit; exit_without_stall times it from the exit request to the process's end."""
    c = make(drain_timeout=3.0, exit_budget=0.3, variant="unbounded_exit_hook")
    w = c.worker(0)
    w.call("arm", site=MAP, action="pause")
    c.engine.send("map", offsets=[0])
    c.wait("fault_reached")
    w.call("exit", shutdown=False)
    assert w.wait_exited(scaled(20))
    assert violated(c, "exit_without_stall") == ["exit_without_stall"]


@pytest.mark.parametrize(("variant", "caught"), [("reference", False), pytest.param(
    "stop_from_handler_deadlocks", True, marks=pytest.mark.covered_by(
        catch_id("stop-from-a-handler-returns-at-once", "stop_from_handler_deadlocks")))])
def test_stop_from_a_handler_returns_false_at_once(make: Make, variant: str, caught: bool) -> None:
    """Environment fault: a handler calls stop on its own listener (from the serving thread) in a worker
    process. It must return False at once instead of waiting for itself; a later stop finishes."""
    c = make(drain_timeout=2.0, variant=variant)
    w = c.worker(0)
    w.call("stop_in_handler", site="backend.kv_tensors_created")
    c.engine.call("kv_tensors_created")
    ev = c.wait("stop_from_handler_returned")
    assert ev.data["ok"] is False
    assert w.call("stop") is True
    assert (ev.data["seconds"] >= 1.0) is caught, ev.data


@pytest.mark.parametrize(("variant", "caught"), [("reference", False), ("dispatch_after_stop", True)])
def test_queued_request_is_not_dispatched_after_stop(make: Make, variant: str, caught: bool) -> None:
    """Two requests pipelined on one connection, the first parked in the backend: once stop begins the
    second must not be dispatched (it gets shutting_down). no_late_dispatch judges it on real processes."""
    c = make(drain_timeout=5.0, variant=variant)
    w = c.worker(0)
    w.call("arm", site=MAP, action="pause", count=1)
    s = cf.connect(w.path)
    s.sendall(wire.encode_request(wire.Request(cmd="map_to_kv_tensors", offsets=[0], id="first"))
              + wire.encode_request(wire.Request(cmd="map_to_kv_tensors", offsets=[2 * MiB], id="queued")))
    c.wait("fault_reached")
    stop = w.send("stop")
    c.wait("stop_started")
    w.call("release", site=MAP)
    assert w.result(stop) is True
    replies = [wire.decode_reply(wire.recv_frame(s)) for _ in range(2)]
    s.close()
    assert replies[0].status == "success"
    assert (replies[1].error_type != "shutting_down") is caught
    assert ("no_late_dispatch" in violated(c, "no_late_dispatch")) is caught


def test_a_fault_that_never_fires_makes_the_run_vacuous(tmp_path: Path) -> None:
    from harness.scenario.loader import expand, load
    from harness.scenario.runner import run_item

    path = tmp_path / "vacuous.yaml"
    path.write_text(
        "name: vacuous\n"
        "about: arms a site nothing reaches. Catches nothing; a test of vacuity.\n"
        "catches: [no_conn_tracking]\n"
        "steps:\n"
        "  - start: cluster\n"
        "  - arm: {site: backend.unmap_from_kv_tensors, action: pause, as: never}\n"
        "  - call: {op: kv_tensors_created, as: q}\n"
        "  - wait: {returned: q}\n"
        "expect:\n"
        "  - requests_served\n")
    result = run_item(expand(load(str(path)))[0])
    assert not result.passed
    (v,) = [v for v in result.verdicts if v.checker == "fault_fired"]
    assert v.status == "violated"
    assert v.message == "vacuous: armed fault(s) ['never'] never fired, so this run proves nothing about them"


class _ScriptedServer:
    """Stands in for the fork server's channel: each spawn is answered with the next scripted pids."""

    def __init__(self, fs: object, groups: list[list[int]]) -> None:
        self.fs, self.groups = fs, groups

    def send(self, msg: dict[str, object]) -> bool:
        self.fs._handle({"op": "spawned", "req": msg["req"], "pids": self.groups.pop(0)})  # type: ignore[attr-defined]
        return True


def test_a_reused_pid_is_not_reported_exited_by_its_predecessors_exit() -> None:
    """The pid of a process that exited can be handed to a later run's worker (the kernel wraps
    pid_max over a long suite). That worker must not hear its predecessor's exit: it did in CI, as
    "command 1 got no reply: exited with status 0" from a worker that was alive and well."""
    from harness.launch.spawn import ForkServer

    fs = ForkServer.__new__(ForkServer)
    fs._init_state()
    fs.chan = _ScriptedServer(fs, [[101, 102], [102, 103]])  # type: ignore[assignment]
    heard: list[tuple[str, int, int]] = []
    assert fs.spawn_group([{}, {}], lambda pid, st, t: heard.append(("first", pid, st))) == [101, 102]
    fs._handle({"op": "exited", "pid": 102, "status": 0, "t_ns": 1})
    assert fs.spawn_group([{}, {}], lambda pid, st, t: heard.append(("second", pid, st))) == [102, 103]
    assert heard == [("first", 102, 0)]  # the second group's 102 has not exited
    fs._handle({"op": "exited", "pid": 102, "status": 9, "t_ns": 2})
    fs._handle({"op": "exited", "pid": 101, "status": 0, "t_ns": 3})
    assert heard == [("first", 102, 0), ("second", 102, 9), ("first", 101, 0)]


def test_an_exit_before_spawn_group_returns_reaches_the_group_once() -> None:
    """A child may die before the harness has read the pids: its exit still reaches its group, once."""
    from harness.launch.spawn import ForkServer

    fs = ForkServer.__new__(ForkServer)
    fs._init_state()
    heard: list[int] = []

    class DiesAtOnce(_ScriptedServer):
        def send(self, msg: dict[str, object]) -> bool:
            super().send(msg)
            fs._handle({"op": "exited", "pid": 7, "status": 256, "t_ns": 1})
            return True

    fs.chan = DiesAtOnce(fs, [[7]])  # type: ignore[assignment]
    assert fs.spawn_group([{}], lambda pid, st, t: heard.append(pid)) == [7]
    fs._handle({"op": "exited", "pid": 7, "status": 256, "t_ns": 2})  # not ours any more: ignored
    assert heard == [7]


def test_a_group_spawned_after_spawn_group_gave_up_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A "spawned" that arrives after its spawn_group raised (no answer in time) names a group nobody
    drives: its process group is killed rather than left to the end of the session."""
    import harness.launch.spawn as spawn

    fs = spawn.ForkServer.__new__(spawn.ForkServer)
    fs._init_state()
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(spawn.os, "killpg", lambda pgid, sig: killed.append((pgid, sig)))
    fs._handle({"op": "spawned", "req": 99, "pids": [301, 302]})
    assert killed == [(301, signal.SIGKILL)]
    assert fs._spawned == {} and fs._exit_callbacks == {}


def test_a_fork_server_started_from_another_cwd_imports_what_the_harness_imports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a pytester test may have chdir'd into its temp dir when the worker's fork server starts: a
    # module:attribute target from the rootdir (tests.lc_events_target here) must still import in the children
    from harness.launch.spawn import ForkServer
    from harness.scenario.loader import expand, loads
    from harness.scenario.runner import run_item

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ForkServer, "_shared", None)
    try:
        sc = loads("name: from-elsewhere\nabout: a target from the rootdir\ncatches: [no_conn_tracking]\n"
                   "steps:\n  - start: cluster\n  - stop: {as: s1}\n  - wait: {returned: s1}\n"
                   "expect:\n  - stop_result: {step: s1}\n", "<elsewhere>")
        result = run_item(expand(sc)[0], variant="tests.lc_events_target:BLACK_BOX")
    finally:
        if ForkServer._shared is not None:
            ForkServer._shared.stop()
    assert result.step_error in (None, ""), result.step_error
    assert {v.checker: v.status for v in result.verdicts} == {"stop_result": "ok"}


def test_a_closed_run_leaves_no_thread_of_its_own_behind() -> None:
    """The run's control socket's acceptor ends at close: a close alone never woke a thread blocked in
    accept() (Linux), and every run left one behind for the rest of the process's life (hundreds in an xdist
    worker). Its readers end with their processes."""
    import threading

    before = {t for t in threading.enumerate() if t.name.startswith("lastcall-control")}
    with Cluster(drain_timeout=1.0) as c:
        assert c._acceptor is not None and c._acceptor.is_alive()
    assert not c._acceptor.is_alive()
    left = {t for t in threading.enumerate() if t.name.startswith("lastcall-control")} - before
    assert not left, sorted(t.name for t in left)


def test_the_leak_guard_names_a_runs_own_thread_left_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's control threads are the guard's too (harness.leakguard.RUN_THREADS): the acceptor above had
    outlived every run unseen, since the guard looked only at the system under test's threads."""
    import threading

    from harness import leakguard

    monkeypatch.setattr(leakguard, "GRACE_S", 0.05)
    before = leakguard.take()
    release = threading.Event()
    stuck = threading.Thread(target=release.wait, name="lastcall-control-accept", daemon=True)
    stuck.start()
    try:
        assert leakguard.diff(before) == ["threads still running: ['lastcall-control-accept']"]
    finally:
        release.set()
        stuck.join()
    assert leakguard.diff(before) == []
