"""EngineTree: a command's whole process tree, ready by its own words, signalled, and nothing left running.

A small stand-in command (an "API server" that starts an "engine core" that starts a "worker", each renamed
as vLLM renames its processes) exercises the mechanism in the default suite; tests marked ``vllm_engine``
run the same on a real ``vllm serve`` in the engine venv (``./dev vllm-engine-test``).
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from harness.engine.tree import EngineStartError, EngineTree, GoneWatch, py_spy, shm_mapped
from harness.launch.zygote import helper_pids
from harness.probes.procs import read_stat

FAKE = textwrap.dedent('''
    import ctypes, os, signal, sys, tempfile, threading
    def name(n):
        ctypes.CDLL(None).prctl(15, n.encode(), 0, 0, 0)  # PR_SET_NAME, as vLLM's setproctitle does
    mode = sys.argv[1]
    if mode == "fail":
        print("ERROR: the model could not be loaded", flush=True); sys.exit(1)
    if mode == "exit":
        sys.exit(3)
    if mode == "hang":  # prints its failure and never exits (vLLM when a thread of its start dies)
        print("ERROR: Address already in use", flush=True); threading.Event().wait()
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])  # taken by sigwait below
    r, w = os.pipe()
    named_r, named_w = os.pipe()  # the worker says when it has its name: the tree is whole
    pid = os.fork()
    if pid == 0:  # the engine core
        name("VLLM::EngineCor")
        if os.fork() == 0:  # the worker: lives until its parent's pipe closes (or forever if orphan_lives)
            name("VLLM::Worker")
            os.write(named_w, b"k")
            os.close(w)
            if mode == "orphan":  # SIGTERM stays blocked: the worker ignores it
                threading.Event().wait()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
            os.read(r, 1)
            os._exit(0)
        os.close(r)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
        threading.Event().wait()
    os.close(r)
    os.read(named_r, 1)
    open(os.path.join(tempfile.gettempdir(), "made-by-the-engine"), "w").close()
    print("INFO: Application startup complete.", flush=True)
    signal.sigwait([signal.SIGTERM])
    os.kill(pid, signal.SIGKILL)  # its engine core dies; the worker sees the pipe close and exits
    os.waitpid(pid, 0)
    sys.exit(0)
''')


# Each launcher: the command exec'd, and forked from a zygote that preloaded modules (harness.launch.zygote;
# real vLLM's launches use it, each the `vllm` script run in a fork of a process that has imported vLLM)
LAUNCHERS = {"exec": (), "zygote": ("ctypes", "tempfile", "threading")}


@pytest.fixture(params=sorted(LAUNCHERS))
def launcher(request: pytest.FixtureRequest) -> tuple[str, ...]:
    return LAUNCHERS[request.param]


def _tree(tmp_path: Path, mode: str, preload: tuple[str, ...] = ()) -> EngineTree:
    script = tmp_path / "fake_engine.py"
    script.write_text(FAKE)
    return EngineTree([sys.executable, str(script), mode], tmp_path / "run", ready=r"Application startup complete",
                      failed=r"^ERROR: ", preload=preload)


def test_ready_by_its_own_line_then_sigterm_ends_the_whole_tree(tmp_path: Path, launcher: tuple[str, ...]) -> None:
    tree = _tree(tmp_path, "clean", launcher)
    try:
        took = tree.start(timeout=30)
        assert took >= 0
        assert sorted(m.name for m in tree.members())[:2] == ["VLLM::EngineCor", "VLLM::Worker"]
        assert len(tree.members()) == 3
        assert len(tree.find(r"^VLLM::Worker")) == 1
        assert (tree.tmp / "made-by-the-engine").exists()  # TMPDIR pointed into the run
        assert tree.proc is not None
        if launcher:  # the API server is the zygote's child, the zygote one of the harness's helpers
            assert read_stat(tree.proc.pid).ppid in helper_pids()
        tree.signal(signal.SIGTERM)
        assert tree.wait_gone(timeout=30)
        assert tree.returncode == 0
        assert tree.members() == []
    finally:
        assert tree.close() == []


def test_an_orphan_that_ignores_sigterm_is_found_by_its_session_and_killed_by_close(
        tmp_path: Path, launcher: tuple[str, ...]) -> None:
    tree = _tree(tmp_path, "orphan", launcher)
    try:
        tree.start(timeout=30)
        worker = tree.find(r"^VLLM::Worker")[0]
        tree.signal(signal.SIGTERM)
        assert not tree.wait_gone(timeout=0.5)  # the worker outlives its parents, reparented to us
        left = tree.members()
        assert [m.pid for m in left if m.state != "Z"] == [worker.pid]
        assert left[0].ppid == os.getpid()  # we are the subreaper
    finally:
        killed = tree.close()
    assert [m.pid for m in killed] == [worker.pid]
    assert tree.members() == []


def test_a_gone_watch_times_the_trees_end_itself_however_late_it_is_asked(tmp_path: Path) -> None:
    """wait_gone's seconds come from a GoneWatch started at the signal: when the last process exited, not when a
    later step looked (a late request once made a 0.3 s stop read as 10 s). Here the watch is watching every
    member before the signal, so it sees each exit (the harness starts it just after the signal: a process that
    is gone before its first read is not in ``exits``, and the read is the upper bound of its end; such a test
    once failed on a loaded machine when the stand-in's whole tree ended first)."""
    import time

    tree = _tree(tmp_path, "clean")
    try:
        tree.start(timeout=30)
        pids = {m.pid for m in tree.members()}
        watch = GoneWatch(tree)
        assert watch.watching.wait(30) and not watch.done.is_set()
        t_signal = time.monotonic()
        tree.signal(signal.SIGTERM)
        assert watch.done.wait(30)
        assert watch.gone_at is not None and set(watch.exits) == pids  # each exit, seen as it happened
        assert watch.gone_at == max(watch.exits.values()) <= time.monotonic()
        later = time.monotonic() + 600.0  # a wait_gone that begins ten minutes later reads the same
        assert watch.seconds_since(t_signal, later) == watch.gone_at - t_signal < 30
        watch.close()
        watch.close()  # idempotent
    finally:
        assert tree.close() == []


def test_a_gone_watch_seeded_with_the_members_before_the_signal_records_an_exit_it_could_not_watch(
        tmp_path: Path) -> None:
    """The tree gone before the watch's first read (a signal that ends it at once): each member read before the
    signal still gets its exit, at that read, and the watch's callback (engine_process_exited) with its name."""
    tree = _tree(tmp_path, "clean")
    try:
        tree.start(timeout=30)
        before = tree.members()
        tree.signal(signal.SIGTERM)
        assert tree.wait_gone(timeout=30)
        seen: list[tuple[int, str]] = []
        watch = GoneWatch(tree, lambda pid, name: seen.append((pid, name)), before)
        assert watch.done.wait(30)
        assert set(watch.exits) == {m.pid for m in before}
        assert sorted(seen) == sorted((m.pid, m.name) for m in before)
        watch.close()
    finally:
        assert tree.close() == []


def test_a_gone_watch_names_an_orphan_and_never_calls_a_survivor_gone(tmp_path: Path) -> None:
    tree = _tree(tmp_path, "orphan")
    try:
        tree.start(timeout=30)
        worker = tree.find(r"^VLLM::Worker")[0]
        tree.signal(signal.SIGTERM)
        watch = GoneWatch(tree)
        assert not tree.wait_gone(timeout=0.5)  # the worker lives on
        assert not watch.done.is_set() and watch.gone_at is None
        assert watch.orphaned == {worker.pid: "VLLM::Worker"}  # reparented here when its engine core died
        assert watch.seconds_since(1.0, 2.5) == 1.5  # not gone: the time until now
    finally:
        tree.close()
    assert watch.done.wait(30) and worker.pid in watch.exits
    watch.close()


@pytest.mark.parametrize(("mode", "message"), [
    ("fail", r"the engine failed to start \(status 1\): ERROR: the model could not be loaded"),
    ("exit", "the engine exited with status 3 before it was ready"),
])
def test_a_start_that_fails_is_a_clear_error_not_a_wait(tmp_path: Path, mode: str, message: str,
                                                       launcher: tuple[str, ...]) -> None:
    tree = _tree(tmp_path, mode, launcher)
    try:
        with pytest.raises(EngineStartError, match=message):
            tree.start(timeout=30)
    finally:
        tree.close()
    assert tree.members() == []


def test_a_start_that_prints_its_failure_but_never_exits_is_hung_at_the_bound_with_its_stacks(tmp_path: Path) -> None:
    """A failure line is not the end of a start: an engine that printed it and lives on hangs (vLLM's start when
    its NIXL listener thread dies); the bound is what is tested here, so it is short."""
    tree = _tree(tmp_path, "hang")
    try:
        with pytest.raises(EngineStartError, match=r"printed its failure 0 s after its launch and was still running "
                                                   r"1 s after it: ERROR: Address already in use") as info:
            tree.start(timeout=0.5, after_failure=1)
        assert info.value.hung and info.value.failure == "ERROR: Address already in use"
        stacks = tree.stacks(timeout=10)
        assert list(stacks) == [m.pid for m in tree.members()]
        assert all(text.strip() for text in stacks.values())
        if py_spy() is None:  # the main venv has no py-spy: the kernel's stack, and how to get Python's
            assert all("no py-spy (pip install py-spy" in text for text in stacks.values())
        else:
            assert all("Thread" in text for text in stacks.values()), stacks
    finally:
        tree.close()
    assert tree.members() == []


def test_a_semaphore_is_attributed_to_the_process_that_maps_it(tmp_path: Path) -> None:
    """multiprocessing's semaphores (/dev/shm/sem.mp-*) are mappings whose fd is closed: found in the maps."""
    path = Path(f"/dev/shm/sem.lc-test-{os.getpid()}")
    path.write_bytes(b"\0" * 32)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        import mmap

        fd = os.open(path, os.O_RDWR)
        m = mmap.mmap(fd, 32)
        os.close(fd)
        os.close(r)
        os.write(w, b"k")
        signal.pause()
        m.close()
        os._exit(0)
    try:
        os.close(w)
        assert os.read(r, 1) == b"k"
        assert str(path) in shm_mapped(pid)
        assert str(path) not in shm_mapped(os.getpid())
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
        path.unlink()
