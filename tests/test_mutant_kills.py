"""What kills the worker listener's survivors of the mutation measurement (docs/mutation.md): the
start_listener step's second start and modes, the checkers private_paths and idle_cost, the measure_idle and
fd_limit probes, and the planted bugs modelled on the mutants; each proven quiet on the reference and firing on
its bug, in-process (the scenarios prove the same through the worker processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from harness.checkers import RunRecord, judge
from harness.checkers.modes import HOST_TOO_SLOW, MIN_SHARE
from harness.history import Event
from harness.reference.backend import NoopBackend
from harness.reference.listener import ListenerConfig, WorkerListener
from harness.reference.listener_variants import LeavesUmask, SocketModeOpen, StartsTwice
from harness.reference.paths import owner_path, socket_path
from harness.reference.probe import process_umask, start_and_stop
from harness.scenario import machine_steps
from harness.scenario.errors import ScenarioError
from harness.scenario.loader import loads
from harness.scenario.machine_steps import cpu_ns, lowest_free_fd
from harness.scenario.player import StepError

HEAD = "name: t\nabout: t\ncatches: [no_conn_tracking]\ntopology: {tp: 1, pp: 1}\n"


class _Side:
    """A worker side with the reference's worker attributes start_and_stop reads."""

    def __init__(self, cls: type[WorkerListener]) -> None:
        self.worker = type("W", (), {"listener_cls": cls, "backend": NoopBackend(),
                                     "spec": type("S", (), {"config": ListenerConfig()})()})()


def _h(event: str, t: int, /, **data: Any) -> Event:
    return Event(t, 1, "harness", "", "MainThread", event, data)


def _started(modes: dict[str, Any] | None, t: int = 10) -> Event:
    return _h("step_returned", t, step="t1", kind="start_listener", category="start", ok=True, value=True,
              path="/r/w0.sock", **({"modes": modes} if modes is not None else {}))


# ------------------------------------------------------ start_listener: again
def test_a_second_start_of_one_listener_is_refused_and_changes_nothing(lc_root: Path, no_thread_leak: None) -> None:
    path = str(socket_path("second", 0, 0, lc_root))
    out = start_and_stop(_Side(WorkerListener), path=path, ipc="second", again=True)
    assert out["started"] and out["stops"] == [True]
    assert (out["again"]["started"], out["again"]["error_class"], out["again_stops"]) == (False, "ConfigError", [True])
    assert "already started" in out["again"]["error"]
    assert not any(lc_root.iterdir())


def test_starts_twice_serves_again_and_its_stop_does_not_stop_it(lc_root: Path, no_thread_leak: None) -> None:
    listener = StartsTwice(socket_path("second", 0, 0, lc_root), NoopBackend(), ipc="second")
    listener.start()
    assert listener.stop()
    listener.start()  # the planted bug: the second start succeeds and binds again
    assert listener.stop()  # ... and its stop, finding the listener torn down, returns True at once
    thread = listener.thread
    assert thread is not None
    # The second life's thread finds the first stop's flag still set and exits by itself (whether it is still
    # alive when stop() returns is a race, so it is joined, not asserted): what the stop leaves is the bound
    # socket, its owner record and its directory.
    thread.join(timeout=30)  # a safety net: it exits at once
    assert not thread.is_alive()
    assert listener.path.exists() and owner_path(listener.path).exists()
    listener._torn_down = False  # end the second life for the leak guards
    assert listener.stop() and not any(lc_root.iterdir())


# ------------------------------------------------------------- private_paths
def test_private_paths_ok_on_what_the_reference_start_made(lc_root: Path) -> None:
    out = start_and_stop(_Side(WorkerListener), path=str(socket_path("second", 0, 0, lc_root)), ipc="second")
    m = out["modes"]
    assert (m["socket"], m["dir"]) == (0o600, 0o700) and m["umask_before"] == m["umask_after"] == process_umask()
    assert judge("private_paths", RunRecord((_started(m),), {})).status == "ok"


def test_private_paths_violated_by_leaves_umask_and_socket_mode_open(lc_root: Path) -> None:
    old = os.umask(0o022)
    try:
        leaked = start_and_stop(_Side(LeavesUmask), path=str(socket_path("a", 0, 0, lc_root)), ipc="a")
        after = start_and_stop(_Side(WorkerListener), path=str(socket_path("b", 0, 0, lc_root)), ipc="b")
    finally:
        os.umask(old)
    assert leaked["modes"]["umask_after"] == 0o177 and after["modes"]["dir"] == 0o600  # no search bit
    for modes, why in ((leaked["modes"], "changed the process umask"), (after["modes"], "directory has mode 0o600")):
        v = judge("private_paths", RunRecord((_started(modes),), {}))
        assert v.status == "violated" and why in v.message
    opened = start_and_stop(_Side(SocketModeOpen), path=str(socket_path("c", 0, 0, lc_root)), ipc="c")
    v = judge("private_paths", RunRecord((_started(opened["modes"]),), {}))
    assert v.status == "violated" and "mode 0o601" in v.message


def test_private_paths_is_unknown_without_a_started_listener() -> None:
    assert judge("private_paths", RunRecord((_started(None),), {})).status == "unknown"
    assert judge("private_paths", RunRecord((), {})).status == "unknown"


# ------------------------------------------------------- measure_idle, idle_cost
def _child(code: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"  # it is in its loop or its block
    return proc


def _window(pid: int, seconds: float) -> tuple[float, float]:
    """The seconds ``pid``'s threads were on a CPU, and waited for one, over a window of ``seconds``."""
    r0, w0 = cpu_ns(pid)
    threading.Event().wait(seconds)  # the window measured
    r1, w1 = cpu_ns(pid)
    return (r1 - r0) / 1e9, (w1 - w0) / 1e9


@pytest.mark.parametrize("spins", [False, True])
def test_cpu_time_is_none_for_a_blocked_process_and_the_window_for_a_spinning_one(spins: bool) -> None:
    body = "while True: pass" if spins else "sys.stdin.read()"
    proc = _child(f"import sys\nprint('ready', flush=True)\n{body}")
    try:
        run, wait = _window(proc.pid, 0.3)
    finally:
        proc.kill()
        proc.wait()
    assert (run + wait) / 0.3 > 0.8 if spins else run + wait < 0.015


@pytest.fixture
def busy_loops() -> Any:
    """As many busy processes as this machine has CPUs, and one more: every CPU contended."""
    procs = [_child("print('ready', flush=True)\nwhile True: pass") for _ in range((os.cpu_count() or 1) + 1)]
    yield len(procs)
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("spins", [False, True])
def test_idle_cost_tells_a_spinner_from_a_blocked_thread_on_a_contended_machine(busy_loops: int, spins: bool) -> None:
    """Beside more busy loops than CPUs a spinner gets less than its whole window, and a blocked thread's wake-ups
    wait for a CPU: judged on its own CPU time against what the calibration's spin got over the same window (as
    measure_idle measures), the verdict is the one an idle machine gives, whatever else the machine runs."""
    body = "while True: pass" if spins else "sys.stdin.read()"
    proc = _child(f"import sys\nprint('ready', flush=True)\n{body}")
    try:
        value = machine_steps.measure_window(proc.pid, 0.3)
    finally:
        proc.kill()
        proc.wait()
    share = value["cpu_share"]
    assert share < 0.9, f"{busy_loops} busy loops beside it, the calibration still got {share:.0%} of a CPU"
    _assert_judged_as_idle(value, spins)


def _assert_judged_as_idle(value: dict[str, float], spins: bool) -> None:
    """The verdict an idle machine gives (a spinner violated, a blocked thread ok), unless the calibration got
    under MIN_SHARE of a CPU: then, and only then, no verdict."""
    assert len(value["slices"]) == machine_steps.SLICES  # the window in equal slices of wall time, back to back
    walls = sum(sl["wall_s"] for sl in value["slices"])  # the spinner's boundaries, inside the step's own window
    assert 0.3 - 1e-6 <= walls <= value["window_s"] + 1e-6, (walls, value["window_s"])
    step = _h("step_returned", 10, step="m1", kind="measure_idle", category="measure", ok=True, value=value)
    v = judge("idle_cost", RunRecord((step,), {}))
    if value["cpu_share"] < MIN_SHARE:
        assert v.status == "not_judged" and HOST_TOO_SLOW in v.message, v.message
    else:
        assert v.status == ("violated" if spins else "ok"), v.message


def test_idle_cost_holds_when_the_load_comes_as_the_window_opens(monkeypatch: pytest.MonkeyPatch) -> None:
    """Busy loops that start as the window opens (the first read of the worker's CPU time): the calibration spins
    over that same window, so it sees them as the spinner does. A calibration before the window saw a quiet
    machine, and a spinner given a fifth of a CPU then looked idle against it."""
    spinner = _child("print('ready', flush=True)\nwhile True: pass")
    loops: list[subprocess.Popen[str]] = []
    real = machine_steps.cpu_ns

    def window_opens(pid: int) -> tuple[int, int]:
        if not loops:  # the window's first read: the neighbours come now
            spin = "print('ready', flush=True)\nwhile True: pass"
            loops.extend(_child(spin) for _ in range(4 * (os.cpu_count() or 1)))
        return real(pid)

    monkeypatch.setattr(machine_steps, "cpu_ns", window_opens)
    try:
        value = machine_steps.measure_window(spinner.pid, 0.3)
    finally:
        for proc in (spinner, *loops):
            proc.kill()
            proc.wait()
    assert loops and value["cpu_share"] < 0.5, value
    _assert_judged_as_idle(value, spins=True)


def test_a_process_gone_in_the_window_is_the_steps_error_on_the_callers_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _child("import sys\nprint('ready', flush=True)\nsys.stdin.read()")
    real, reads = machine_steps.cpu_ns, []

    def gone_at_the_second_boundary(pid: int) -> tuple[int, int]:
        reads.append(pid)
        if len(reads) == 3:  # the window's first read, the spinner's first bound, then its second: gone
            proc.kill()
            proc.wait()
        return real(pid)

    monkeypatch.setattr(machine_steps, "cpu_ns", gone_at_the_second_boundary)
    try:
        with pytest.raises(StepError, match=f"cannot list the threads of pid {proc.pid}"):
            machine_steps.measure_window(proc.pid, 0.1)
    finally:
        proc.kill()
        proc.wait()


def _window_step(value: dict[str, Any]) -> Event:
    return _h("step_returned", 10, step="m1", kind="measure_idle", category="measure", ok=True, value=value)


def _sliced(runs: list[float], share: float = 1.0) -> Event:
    slices = [{"run_s": r, "wall_s": 0.06, "cpu_share": share} for r in runs]
    return _window_step({"run_s": sum(runs), "wait_s": 0.0, "runnable_s": sum(runs), "window_s": 0.3,
                         "cpu_share": share, "slices": slices})


def test_idle_cost_judges_the_median_slice() -> None:
    burst = judge("idle_cost", RunRecord((_sliced([0.0, 0.06, 0.04, 0.001, 0.0]),), {}))
    assert burst.status == "ok" and "the median of 5 slices 2% of the spinner's" in burst.message, burst.message
    spin = judge("idle_cost", RunRecord((_sliced([0.05, 0.06, 0.055, 0.06, 0.05], share=0.9),), {}))
    assert spin.status == "violated" and "the median of 5 slices 102% of the spinner's" in spin.message
    loaded = judge("idle_cost", RunRecord((_sliced([0.015] * 5, share=0.2),), {}))  # a fifth of a CPU each slice
    assert loaded.status == "violated", loaded.message
    few = _sliced([0.0, 0.06, 0.06, 0.06, 0.0], share=0.5)  # slices the spinner got under MIN_SHARE tell nothing
    few.data["value"]["slices"][0]["cpu_share"] = few.data["value"]["slices"][4]["cpu_share"] = 0.01
    assert judge("idle_cost", RunRecord((few,), {})).status == "violated"


@pytest.mark.parametrize("slices", [None, "x", [{"run_s": 1}], [{"run_s": "a", "wall_s": 1, "cpu_share": 1}]])
def test_idle_cost_without_well_formed_slices_judges_the_whole_window(slices: object) -> None:
    step = _measured(0.29)
    step.data["value"]["slices"] = slices
    assert judge("idle_cost", RunRecord((step,), {})).status == "violated"


def _measured(run: float, window: float = 0.3, *, share: float = 1.0, wait: float = 0.0) -> Event:
    return _h("step_returned", 10, step="m1", kind="measure_idle", category="measure", ok=True,
              value={"run_s": run, "wait_s": wait, "runnable_s": run + wait, "window_s": window, "cpu_share": share})


def test_idle_cost_ok() -> None:
    assert judge("idle_cost", RunRecord((_measured(0.01),), {})).status == "ok"
    assert judge("idle_cost", RunRecord((_measured(0.01, wait=0.2),), {})).status == "ok"  # waiting is the host's
    assert judge("idle_cost", RunRecord((), {})).status == "unknown"


def test_idle_cost_violated() -> None:
    fired = judge("idle_cost", RunRecord((_measured(0.29),), {}))
    assert fired.status == "violated" and "on a CPU 97% of 0.30s, a spinning thread 100%" in fired.message
    loaded = judge("idle_cost", RunRecord((_measured(0.06, share=0.2),), {}))  # a spinner given a fifth of a CPU
    assert loaded.status == "violated", loaded.message


def test_idle_cost_of_an_older_history_judges_the_runnable_time() -> None:
    old = _h("step_returned", 10, step="m1", kind="measure_idle", category="measure", ok=True,
             value={"runnable_s": 0.29, "window_s": 0.3})
    assert judge("idle_cost", RunRecord((old,), {})).status == "violated"


def test_idle_cost_is_not_judged_on_a_host_too_slow_to_tell() -> None:
    v = judge("idle_cost", RunRecord((_measured(0.01, share=0.05),), {}))
    assert (v.status, v.message) == ("not_judged", "not judged here: host too slow (m1: a thread that never blocks "
                                     "got 5% of a CPU, under 10%)")
    assert not v.message.startswith("ok") and v.passes  # neither a failure nor, as an item, a pass (collect.py)


# ------------------------------------------------ dispatches_recorded, close_reasons
def _l(event: str, t: int, /, **data: Any) -> Event:
    return Event(t, 7, "worker", "0", "lastcall-listener-pp0.tp0", event, {"listener": "pp0.tp0", **data})


def test_dispatches_recorded_ok() -> None:
    evs = (_l("listener_started", 1), _l("dispatch_started", 2, conn=1, cmd="map"),
           _l("dispatch_finished", 3, conn=1, cmd="map"), _l("dispatch_started", 4, conn=1, cmd="map"),
           _l("dispatch_finished", 5, conn=1, cmd="map"))
    assert judge("dispatches_recorded", RunRecord(evs, {})).status == "ok"
    assert judge("dispatches_recorded", RunRecord(evs[:1], {})).status == "unknown"  # no dispatch to judge


def test_dispatches_recorded_violated() -> None:  # unrecorded_dispatch: the finish without its start
    evs = (_l("listener_started", 1), _l("dispatch_started", 2, conn=1, cmd="map"),
           _l("dispatch_finished", 3, conn=1, cmd="map"), _l("dispatch_finished", 5, conn=1, cmd="map"))
    v = judge("dispatches_recorded", RunRecord(evs, {}))
    assert v.status == "violated" and "1 of 2" in v.message


def test_close_reasons_ok() -> None:
    evs = (_l("listener_started", 1), _l("connection_closed", 2, conn=1, why="peer closed"),
           _l("stop_started", 3), _l("reads_cancelled", 4, n=1, conns=[2]),
           _l("connection_closed", 5, conn=2, why="cancelled by stop"))
    assert judge("close_reasons", RunRecord(evs, {})).status == "ok"
    assert judge("close_reasons", RunRecord(evs[:1], {})).status == "unknown"


def test_close_reasons_violated() -> None:  # misreports_close: a client's close named a stop's cancel
    evs = (_l("listener_started", 1), _l("connection_closed", 2, conn=1, why="cancelled by stop"),
           _l("stop_started", 3), _l("reads_cancelled", 4, n=0, conns=[]))
    v = judge("close_reasons", RunRecord(evs, {}))
    assert v.status == "violated" and "conn 1" in v.message


# ------------------------------------------------------------------- fd_limit
_DUPS = """import os, sys
print('ready', flush=True)
for _ in sys.stdin:
    try:
        fd = os.dup(0)
        print(fd, flush=True)
        os.close(fd)
    except OSError as exc:
        print(exc.errno, 'errno', flush=True)
"""


def test_a_limit_at_the_lowest_free_fd_makes_the_next_descriptor_fail_with_emfile() -> None:
    import errno
    import resource

    from harness.scenario.machine_steps import _Limit

    proc = _child(_DUPS)
    assert proc.stdin is not None and proc.stdout is not None

    def dup() -> str:
        proc.stdin.write("\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        return proc.stdout.readline().strip()  # type: ignore[union-attr]

    try:
        n = lowest_free_fd(proc.pid)
        assert dup() == str(n)  # what the kernel gives next, seen from outside
        old = resource.prlimit(proc.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (n, old[1]))
        limit = _Limit(proc.pid, old)
        assert dup() == f"{errno.EMFILE} errno"
        limit.close()
        limit.close()  # once
        assert dup() == str(n) and resource.prlimit(proc.pid, resource.RLIMIT_NOFILE) == old
    finally:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------ the loader
def test_again_and_keep_open_are_checked_at_load_time() -> None:
    ok = HEAD + textwrap.dedent("""\
        steps:
          - start: cluster
          - start_listener: {ipc: second, again: true, as: t1}
          - send: {cmd: kv_tensors_created, keep_open: true, as: q1}
          - measure_idle: {window: 100ms}
          - fd_limit: {}
          - fd_limit: {restore: true}
        expect:
          - stop_result: {step: t1.again, returns: false}
          - stop_result: {step: t1.again.stop1, returns: true}
          - idle_cost
        """)
    assert [s.kind for s in loads(ok, "t.yaml").steps][-3:] == ["measure_idle", "fd_limit", "fd_limit"]
    with pytest.raises(ScenarioError, match=r"undefined step name 't1\.again'"):
        loads(ok.replace("again: true, ", ""), "t.yaml")
    with pytest.raises(ScenarioError, match="keep_open: only a plain request"):
        loads(ok.replace("keep_open: true", "keep_open: true, fault: never_read"), "t.yaml")


def test_an_item_resting_on_a_checker_the_host_was_too_slow_for_is_skipped_with_the_reason() -> None:
    from types import SimpleNamespace

    from harness.checkers.base import Verdict
    from harness.scenario.collect import _skip_if_host_too_slow

    slow = judge("idle_cost", RunRecord((_measured(0.01, share=0.05),), {}))
    other = Verdict("private_paths", "not_judged", "not judged: the target declares no listener events")
    result = SimpleNamespace(verdicts=[slow, other])
    with pytest.raises(pytest.skip.Exception, match="idle_cost: not judged here: host too slow"):
        _skip_if_host_too_slow(result)  # a reference item: neither its pass nor its failure
    with pytest.raises(pytest.skip.Exception):
        _skip_if_host_too_slow(result, ["idle_cost"])  # a catches item whose catcher could not be judged
    _skip_if_host_too_slow(result, ["requests_served"])  # another checker's catch: judged as ever
    _skip_if_host_too_slow(SimpleNamespace(verdicts=[other]))  # not judged for a capability: no skip
