"""A real engine's process tree, launched from a command line: ready by its own words, signalled, reaped.

A real engine (``vllm serve``) is not one of lastcall's forked roles: it is a command whose API server
spawns an engine core that spawns workers, each with a name of its own (``VLLM::EngineCore``,
``VLLM::Worker``). :class:`EngineTree` starts that command

- in a session and process group of its own (``start_new_session``), so every process it starts, however
  deep, is found by its session id, even after it is orphaned and reparented;
- with this process a child subreaper, so an orphan is reparented here (and reaped here) instead of init;
- in a per-run directory: ``TMPDIR`` and the engine's own path variables point there, so every file it
  creates is attributable to this run;
- with its stdout and stderr read line by line by a thread: readiness is a line the engine prints (vLLM:
  ``Application startup complete``), seen as it is written, never a polled endpoint or a sleep.

Every wait has a deadline that is a safety net: a start that neither becomes ready nor fails by then is
reported as such (with the last lines the engine printed), and :meth:`close` kills whatever of the
session is left (SIGKILL to the group, then to any member that left it) and reaps it, so nothing started
here outlives the run.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError
from harness.launch.pauses import resume_before_kill
from harness.launch.spawn import SPAWN_LOCK, become_subreaper
from harness.launch.zygote import Zygote, ZygoteProcess
from harness.probes.procs import all_stats, read_stat

__all__ = ["EngineTree", "EngineStartError", "GoneWatch", "Member", "session_members", "process_stacks", "shm_mapped",
           "py_spy", "wait_accepting"]

TAIL = 200  # lines of the engine's output kept for messages and reports


class EngineStartError(HarnessError):
    """The engine exited before it became ready, or was not ready in time (``hung``: it was still running at
    the bound, whatever it printed); ``failure`` is the failure line it printed, if any."""

    def __init__(self, message: str, *, hung: bool = False, failure: str | None = None) -> None:
        super().__init__(message)
        self.hung = hung
        self.failure = failure


@dataclass(frozen=True)
class Member:
    """One process of the tree, as /proc shows it now."""

    pid: int
    ppid: int
    name: str  # the kernel's comm: vLLM renames its processes (VLLM::EngineCore, VLLM::Worker_TP0)
    state: str


def session_members(sid: int) -> list[Member]:
    """Every live process of session ``sid`` (zombies included), by pid."""
    return [Member(pid, st.ppid, st.comm, st.state) for pid, st in sorted(all_stats().items()) if st.sid == sid]


def py_spy() -> str | None:
    """The py-spy command (beside this interpreter, else on PATH), or None."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def process_stacks(pid: int, timeout: float = 20.0) -> str:
    """The stacks of one process: py-spy's dump of its Python threads, else the kernel's stack of it."""
    spy = py_spy()
    why = "no py-spy (pip install py-spy; ./dev vllm-engine-env installs it)"
    if spy is not None:
        try:
            out = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            why = f"py-spy dump gave nothing in {timeout:.0f} s"
        else:
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout
            why = f"py-spy dump failed: {(out.stderr or out.stdout).strip().splitlines()[-1:] or ['?']}"
    try:
        kernel = Path(f"/proc/{pid}/stack").read_text()
    except OSError as exc:
        return f"no stacks: {why}; /proc/{pid}/stack: {exc.strerror or exc}"
    return f"{why}; the kernel's stack (/proc/{pid}/stack):\n{kernel}"


def wait_accepting(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` accepts a connection within ``timeout`` seconds.

    vLLM prints uvicorn's "Application startup complete" before uvicorn calls listen() on the socket vLLM
    bound earlier, so a client that connects on that line can be refused (a clean-clone run's first request
    was). Nothing the server prints comes after listen(), so this retries the connect, yielding the CPU
    between tries (the listen comes milliseconds after the line), until accepted or the safety-net bound.
    """
    import socket

    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=max(0.01, deadline - time.monotonic())):
                return True
        except ConnectionRefusedError:
            if time.monotonic() >= deadline:
                return False
            os.sched_yield()
        except OSError:
            return False


def shm_mapped(pid: int) -> set[str]:
    """The /dev/shm files ``pid`` has mapped (a POSIX semaphore, sem.*, is a mapping whose fd was closed)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    return {line.split(None, 5)[5].removesuffix(" (deleted)") for line in maps.splitlines()
            if len(line.split(None, 5)) == 6 and line.split(None, 5)[5].startswith("/dev/shm/")
            and not line.endswith(" (deleted)")}


class EngineTree:
    """One launch of an engine command. Not thread-safe: one controlling thread per tree.

    ::

        tree = EngineTree(["vllm", "serve", model, "--port", "8001"], run_dir, ready=r"startup complete")
        try:
            tree.start(timeout=120)       # returns once the ready line is printed
            ...                           # requests, faults
            tree.signal(signal.SIGTERM)   # the API server (the session leader)
            tree.wait_gone(timeout=60)    # True once no process of the session is left
        finally:
            tree.close()                  # kills and reaps whatever is left; idempotent
    """

    def __init__(self, argv: Sequence[str], run_dir: Path, *, ready: str, failed: str | None = None,
                 env: Mapping[str, str] | None = None, path_vars: Sequence[str] = (),
                 preload: Sequence[str] = (), preload_env: Mapping[str, str] | None = None) -> None:
        self.argv = list(argv)
        # modules a zygote imports once for every launch of this command (harness.launch.zygote); () execs it
        self.preload = tuple(preload)
        self._preload_env = dict(preload_env or {})
        self.run_dir = run_dir
        self.tmp = run_dir / "tmp"
        self._ready_rx = re.compile(ready)
        self._failed_rx = re.compile(failed) if failed else None
        self._env = dict(env or {})
        self._path_vars = tuple(path_vars)
        self.proc: subprocess.Popen[bytes] | ZygoteProcess | None = None
        self.sid: int | None = None
        self.lines: collections.deque[str] = collections.deque(maxlen=TAIL)
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self.failed_at: float | None = None  # when the engine printed its failure line (monotonic)
        self.returncode: int | None = None
        self._cond = threading.Condition()
        self._ready = False
        self._failure: str | None = None
        self._eof = False
        self._reader: threading.Thread | None = None
        self.on_line: Callable[[str], None] | None = None  # called on the reader thread for each line
        self.on_started: Callable[[int], None] | None = None  # called with the leader's pid once launched
        # called with the session (the leader's pid) holding SPAWN_LOCK, before any other run's snapshot can see
        # the tree: the run claims it (harness.launch.cluster.Cluster.claim_session)
        self.on_session: Callable[[int], None] | None = None

    # ---------------------------------------------------------------- start
    def environment(self) -> dict[str, str]:
        env = {**os.environ, **self._env, "TMPDIR": str(self.tmp), "PYTHONUNBUFFERED": "1"}
        for var in self._path_vars:
            env[var] = str(self.tmp)
        return env

    def start(self, timeout: float, after_failure: float = 30.0) -> float:
        """Launch and wait until the engine prints its ready line; seconds from launch to ready.

        A line matching ``failed`` does not end the wait: the engine must then exit within ``after_failure`` of
        that line (the bound from then on, earlier or later than ``timeout``); one still running then has hung.

        Error handling: EngineStartError when the engine exits first, or is not ready within the bound
            (``hung``); its message quotes the failure line or the engine's last lines. The tree is left for
            :meth:`close` (or a probe) either way.
        """
        if self.proc is not None:
            raise HarnessError("an EngineTree starts once; make a new one")
        self.tmp.mkdir(parents=True, exist_ok=True)
        become_subreaper()
        self.started_at = time.monotonic()
        try:
            zygote = Zygote.shared(sys.executable, self.preload, {**os.environ, **self._preload_env}, timeout) \
                if self.preload else None  # a fork of the zygote that has imported them runs the command's script
            with SPAWN_LOCK:  # the leader is in its own session once either returns; claimed before the lock goes
                if zygote is not None:
                    self.proc = zygote.spawn(self.argv, self.environment(), str(self.run_dir), timeout)
                else:
                    self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT, env=self.environment(),
                                                 cwd=self.run_dir, start_new_session=True)
                self.sid = self.proc.pid
                if self.on_session is not None:
                    self.on_session(self.sid)
        except (OSError, HarnessError) as exc:
            raise EngineStartError(f"cannot start {self.argv[0]}: {getattr(exc, 'strerror', None) or exc}") from None
        if self.on_started is not None:
            self.on_started(self.proc.pid)
        self._reader = threading.Thread(target=self._read, name=f"engine-output-{self.proc.pid}", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        with self._cond:  # a failure line is not the end: a start fails once the engine exits (else it hangs)
            while not (self._ready or self._eof):
                if self.failed_at is not None:  # it said it failed: it has after_failure to exit
                    deadline = self.failed_at + after_failure
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            ready, failure, eof = self._ready, self._failure, self._eof
        if ready:
            assert self.ready_at is not None
            return self.ready_at - self.started_at
        if eof:
            try:
                code = self.proc.wait(timeout)  # its output is closed: the leader is exiting
            except subprocess.TimeoutExpired:
                code = None
            self.returncode = code
            if failure:
                raise EngineStartError(f"the engine failed to start (status {code}): {failure}", failure=failure)
            raise EngineStartError(f"the engine exited with status {code} before it was ready; "
                                   f"its last lines:\n{self.tail(20)}")
        took = time.monotonic() - self.started_at
        if failure:
            assert self.failed_at is not None
            said = self.failed_at - self.started_at
            raise EngineStartError(f"the engine printed its failure {said:.0f} s after its launch and was still "
                                   f"running {took - said:.0f} s after it: {failure}", hung=True, failure=failure)
        raise EngineStartError(f"the engine was not ready {took:.0f} s after its launch; its last lines:\n"
                               f"{self.tail(20)}", hung=True)

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._cond:
                self.lines.append(line)
                if not self._ready and self._ready_rx.search(line):
                    self._ready = True
                    self.ready_at = time.monotonic()
                elif self._failed_rx is not None and self._failure is None and self._failed_rx.search(line):
                    self._failure = line.strip()
                    self.failed_at = time.monotonic()
                self._cond.notify_all()
            if self.on_line is not None:
                self.on_line(line)
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def tail(self, n: int = 20) -> str:
        with self._cond:
            return "\n".join(list(self.lines)[-n:])

    # ---------------------------------------------------------------- control
    def members(self) -> list[Member]:
        return [] if self.sid is None else session_members(self.sid)

    def find(self, name: str) -> list[Member]:
        """Live (not zombie) members whose process name matches ``name`` (a regular expression)."""
        rx = re.compile(name)
        return [m for m in self.members() if rx.search(m.name) and m.state != "Z"]

    def stacks(self, timeout: float = 20.0) -> dict[int, str]:
        """Every live member's stacks, by pid (a hung engine's evidence, taken before it is killed): py-spy's
        Python stacks (``py-spy dump``, beside this interpreter or on PATH), else the kernel's
        /proc/<pid>/stack, else a line saying how to get them."""
        return {m.pid: process_stacks(m.pid, timeout) for m in self.members() if m.state != "Z"}

    def signal(self, sig: int, pid: int | None = None) -> None:
        """Send ``sig`` to ``pid`` (default: the API server, the session leader); a gone pid is ignored.  One the
        harness paused is resumed first (harness.launch.pauses): a stop signal to a stopped process would wait."""
        target = pid if pid is not None else self.sid
        if target is None:
            return
        resume_before_kill([target])
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, sig)

    def wait_gone(self, timeout: float, seen: Callable[[list[Member]], None] | None = None) -> bool:
        """True once every process of the session has exited (the ones that are our children reaped).

        Waits on a pidfd per live member (readable when that process exits, whoever its parent is), so an
        exit is seen as it happens; ``timeout`` is a safety net.  ``seen`` is called with the live members
        each time one exits (and first): who was reparented to this subreaper, and when, is seen as it is.
        """
        deadline = time.monotonic() + timeout
        while True:
            self._reap()
            live = [m for m in self.members() if m.state != "Z"]
            if seen is not None:
                seen(live)
            if not live:
                self._reap()
                self._leader_status()
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            fds = []
            try:
                for m in live:
                    with contextlib.suppress(ProcessLookupError):
                        fds.append(os.pidfd_open(m.pid))
                if fds:
                    select.select(fds, [], [], left)
            finally:
                for fd in fds:
                    os.close(fd)

    def _leader_status(self) -> None:
        """The leader's status once it is gone: Popen.poll() says None while another thread holds its waitpid
        lock (close() on the watchdog's thread, say), so wait for it there (the leader has exited: at once)."""
        if self.proc is not None and self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.returncode = self.proc.wait(5.0)

    def _reap(self) -> None:
        if self.proc is not None and self.returncode is None:
            code = self.proc.poll()
            if code is not None:
                self.returncode = code
        leader = self.proc.pid if self.proc is not None else -1
        for m in self.members():  # orphans reparented to us (the subreaper) that have exited
            st = read_stat(m.pid)
            if m.state == "Z" and m.pid != leader and st is not None and st.ppid == os.getpid():
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(m.pid, os.WNOHANG)

    def close(self, grace: float = 0.0) -> list[Member]:
        """Kill (SIGKILL) and reap every process of the session still alive; what had to be killed."""
        if self.proc is None:
            return []
        if grace > 0:
            self.wait_gone(grace)
        left = [m for m in self.members() if m.state != "Z"]
        resume_before_kill(m.pid for m in left)  # nothing the harness paused is killed stopped
        if self.sid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.sid, signal.SIGKILL)
        for m in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(m.pid, signal.SIGKILL)
        self.wait_gone(10.0)
        if self._reader is not None:
            self._reader.join(5.0)
        # the leader reaped here, whoever else was waiting on it (Popen.poll() returns None while another
        # thread holds its waitpid lock)
        self._leader_status()
        self._reap()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return left


class GoneWatch:
    """When each process of a tree exits, seen from the moment it starts (a signal was just sent), on a thread of
    its own: a pidfd per live member, readable as that process exits, whoever its parent is, and the members
    read again after each exit (a process started meanwhile is watched too).

    ``gone_at`` is when the last of them was seen to exit (monotonic; None while any lives), so how long a stop
    took does not depend on when a step asked: a ``wait_gone`` that comes after a slow step still reports the
    tree's own time.  ``orphaned`` are the members seen alive with this process as their parent (the subreaper)
    although not its child at launch.  A member that exited between two reads of the members, before its pidfd
    was opened, counts as exited at the read that missed it (an upper bound).  :meth:`close` ends the thread.
    """

    def __init__(self, tree: EngineTree, on_exit: Callable[[int, str], None] | None = None,
                 before: Sequence[Member] = ()) -> None:
        self.tree = tree
        self.on_exit = on_exit  # called on the watch's thread as each process is seen to exit (pid, name)
        self.exits: dict[int, float] = {}
        # the members read before the signal: one that exits before the watch's first read exits at that read
        self._before = {m.pid for m in before if m.state != "Z"}
        self._names: dict[int, str] = {m.pid: m.name for m in before}
        self.orphaned: dict[int, str] = {}
        self.gone_at: float | None = None
        self.done = threading.Event()
        self.watching = threading.Event()  # set once every member of its first read is watched (or it is done)
        self._leader = tree.proc.pid if tree.proc is not None else -1
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name=f"lastcall-gone-watch-{tree.sid}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        watched: dict[int, int] = {}  # pidfd -> pid
        alive: set[int] = set(self._before)
        try:
            while True:
                live = [m for m in self.tree.members() if m.state != "Z"]
                now = time.monotonic()
                for pid in alive - {m.pid for m in live}:
                    self._exited(pid, now)  # gone before its pidfd was opened, or unwatched
                alive = {m.pid for m in live}
                self._names.update((m.pid, m.name) for m in live)
                missed = False
                for m in live:
                    if m.pid != self._leader and m.ppid == os.getpid():
                        self.orphaned[m.pid] = m.name
                    if m.pid not in watched.values():
                        try:
                            watched[os.pidfd_open(m.pid)] = m.pid
                        except ProcessLookupError:  # exited and reaped since the read: read the tree again
                            missed = True
                if not live:
                    self.gone_at = max(self.exits.values(), default=now)
                    self.done.set()
                    return
                if missed:
                    continue
                self.watching.set()
                ready, _, _ = select.select([*watched, self._stop_r], [], [])
                t = time.monotonic()
                if self._stop_r in ready:
                    return
                for fd in ready:
                    self._exited(watched.pop(fd), t)
                    os.close(fd)
        finally:
            self.watching.set()
            for fd in watched:
                os.close(fd)

    def _exited(self, pid: int, t: float) -> None:
        if pid in self.exits:
            return
        self.exits[pid] = t
        if self.on_exit is not None:
            self.on_exit(pid, self._names.get(pid, "?"))

    def seconds_since(self, since: float, now: float) -> float:
        """Seconds from ``since`` to the tree's end: to when its last process exited once it is gone, else to
        ``now``."""
        return (self.gone_at if self.gone_at is not None else now) - since

    def close(self) -> None:
        """End the thread (at once if the tree is gone) and release its descriptors; idempotent."""
        if self._stop_w >= 0:
            os.write(self._stop_w, b"x")
            self._thread.join(10.0)
            os.close(self._stop_w)
            os.close(self._stop_r)
            self._stop_w = self._stop_r = -1
