"""The preloading zygote (harness.launch.zygote): a fork that runs an engine's command as exec would.

Real vLLM launches fork from it (target ``vllm_engine``, with LASTCALL_ENGINE_PRELOAD=1); here a small script
stands for the ``vllm`` script, and each property a launch relies on is compared with the same command exec'd.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.engine.tree import EngineStartError, EngineTree
from harness.errors import HarnessError
from harness.launch.zygote import Zygote, ZygoteProcess, helper_pids
from harness.probes.procs import read_stat

# What a launched command can see of how it was started: its argv, first sys.path entry, directory, variables,
# temp directory, multiprocessing's key and original directory, and what a child it spawns (vLLM's EngineCore
# is a multiprocessing spawn) runs as its main module.
PROBE = textwrap.dedent('''
    import json, multiprocessing, os, sys, tempfile
    from multiprocessing import process

    def child(q):
        main = sys.modules["__mp_main__"]
        q.put({"main_file": getattr(main, "__file__", None), "argv": sys.argv, "cwd": os.getcwd()})

    if __name__ == "__main__":
        ctx = multiprocessing.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start()
        got = q.get(timeout=60)
        p.join(60)
        print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "x": os.environ.get("X"),
                          "tmp": tempfile.gettempdir(), "key": bytes(process.current_process().authkey).hex(),
                          "orig_dir": process.ORIGINAL_DIR, "spawned": got, "exitcode": p.exitcode}), flush=True)
        sys.exit(int(sys.argv[1]))
''')
PRELOAD = ("multiprocessing", "tempfile", "json")
# like vLLM's import, which leaves tempfile's directory computed (from the zygote's TMPDIR): a launch must not see it
CACHES_TMP = "import tempfile\ntempfile.gettempdir()\n"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "X": "the launch's", **extra}


@pytest.fixture
def zygote(tmp_path: Path):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "caches_tmp.py").write_text(CACHES_TMP)
    env = {**os.environ, "X": "the zygote's", "PYTHONPATH": os.pathsep.join([str(tmp_path / "mods"), *sys.path])}
    z = Zygote(sys.executable, (*PRELOAD, "caches_tmp"), env, ready_timeout=60)
    try:
        yield z
    finally:
        z.stop()


def _read(proc: subprocess.Popen[bytes] | ZygoteProcess) -> dict:
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    proc.stdout.close()
    return json.loads(out.strip().splitlines()[-1])


def test_a_forked_command_sees_what_the_same_command_execd_sees(tmp_path: Path, zygote: Zygote) -> None:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "tmp").mkdir()
    argv = [sys.executable, str(script), "3"]
    execd = subprocess.Popen(argv, stdout=subprocess.PIPE, env=_env(tmp_path), cwd=run, start_new_session=True)
    seen = [_read(execd)]
    assert execd.wait(60) == 3
    for _ in range(2):
        forked = zygote.spawn(argv, _env(tmp_path), str(run), timeout=60)
        assert read_stat(forked.pid).ppid == zygote.pid and os.getsid(forked.pid) == forked.pid
        seen.append(_read(forked))
        assert forked.wait(60) == 3
    same = ("argv", "path0", "cwd", "x", "tmp", "orig_dir", "spawned", "exitcode")
    for got in seen[1:]:
        assert {k: got[k] for k in same} == {k: seen[0][k] for k in same}
    assert seen[0]["spawned"]["main_file"] == str(script)  # the spawned child ran the script as its main
    assert seen[0]["tmp"] == str(tmp_path / "tmp") and seen[0]["x"] == "the launch's"
    assert len({s["key"] for s in seen}) == 3  # each its own key, as each new interpreter makes one


def test_a_forked_commands_status_is_its_exit_code_or_the_signal_that_ended_it(tmp_path: Path, zygote: Zygote) -> None:
    script = tmp_path / "wait.py"
    script.write_text("import sys, threading\nprint('up', flush=True)\nthreading.Event().wait()\n")
    proc = zygote.spawn([sys.executable, str(script)], _env(tmp_path), str(tmp_path), timeout=60)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(60) == -signal.SIGKILL
    proc.stdout.close()


def test_when_the_harness_side_goes_the_zygote_kills_what_it_started(tmp_path: Path) -> None:
    z = Zygote(sys.executable, PRELOAD, dict(os.environ), ready_timeout=60)
    script = tmp_path / "wait.py"
    script.write_text("import os, sys, threading\nif os.fork() == 0:\n    print('both', flush=True)\n"
                      "threading.Event().wait()\n")
    try:
        proc = z.spawn([sys.executable, str(script)], _env(tmp_path), str(tmp_path), timeout=60)
        assert proc.stdout is not None and proc.stdout.readline() == b"both\n"
        sid = proc.pid
        assert z.pid not in helper_pids()  # a private zygote, not a process-wide one: this test's to stop
    finally:
        z.stop()
    proc.stdout.close()
    assert z.proc.returncode == 0 and not os.path.exists(z.dir)
    left = [int(p) for p in os.listdir("/proc") if p.isdigit() and _sid(int(p)) == sid]
    for p in left:  # a SIGKILLed process runs on to its exit (state R) a moment after the kill: wait for it
        _exited(p, 10.0)
    stats = [read_stat(p) for p in left]
    assert all(st is None or st.state == "Z" for st in stats), stats  # the grandchild too: its whole session
    for p in left:  # the killed grandchild, an orphan, was reparented to this process (a subreaper): reap it
        with contextlib.suppress(ChildProcessError):
            os.waitpid(p, 0)


def _exited(pid: int, timeout: float) -> None:
    """Return once ``pid`` has exited (a zombie counts: its pidfd turns readable), or after ``timeout``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        select.select([fd], [], [], timeout)
    finally:
        os.close(fd)


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def test_a_preload_that_fails_or_starts_a_thread_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match=r"zygote did not start \(ModuleNotFoundError: No module named "
                                           r"'no_such_module_here'\)"):
        Zygote(sys.executable, ("json", "no_such_module_here"), dict(os.environ), ready_timeout=60)
    (tmp_path / "starts_a_thread.py").write_text("import threading\nthreading.Thread(target=threading.Event().wait, "
                                                 "name='at-import', daemon=True).start()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    with pytest.raises(HarnessError, match=r"importing starts_a_thread started threads \(at-import\): cannot fork"):
        Zygote(sys.executable, ("starts_a_thread",), env, ready_timeout=60)
    tree = EngineTree([sys.executable, "-c", "pass"], tmp_path / "run", ready="never", preload=("no_such_module_here",))
    with pytest.raises(EngineStartError, match=r"cannot start .*zygote did not start \(ModuleNotFoundError"):
        tree.start(timeout=60)
    assert tree.close() == []


@pytest.mark.slow
def test_an_engine_scenario_judges_a_zygote_launched_tree_as_it_judges_an_execd_one() -> None:
    """engine-sigterm-idle (a launch, a request, SIGTERM, a restart on the same port) through the whole run: the
    correct stand-in launched from a zygote passes every checker, both launches recorded as the zygote's; the
    stand-in that ignores SIGTERM, launched the same way, is caught by the checker that names it."""
    from harness.scenario import load
    from harness.scenario.loader import expand
    from harness.scenario.runner import run_item

    item = expand(load(str(Path(__file__).resolve().parent.parent / "scenarios" / "engine-sigterm-idle.yaml")))[0]
    good = run_item(item, variant="tests.zygote_target:STANDIN_PRELOADED")
    assert good.step_error == "" and good.outcome.status == "ok"
    assert {v.checker: v.status for v in good.verdicts} == {"engine_tree_exits": "ok", "engine_nothing_left": "ok",
                                                            "engine_port_released": "ok", "engine_exit_status": "ok"}
    assert [e.data.get("launcher") for e in good.events if e.kind == "engine_launched"] == ["zygote", "zygote"]
    bad = run_item(item, variant="tests.zygote_target:IGNORES_SIGTERM_PRELOADED")
    assert {v.checker: v.status for v in bad.verdicts}["engine_tree_exits"] == "violated"
