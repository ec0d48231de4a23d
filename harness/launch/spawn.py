"""The harness's side of the fork server: start it once per process, spawn groups, hear exits."""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from harness.errors import HarnessError
from harness.launch.channel import Channel
from harness.timeouts import scaled

__all__ = ["LaunchError", "ForkServer", "become_subreaper", "helper_pids", "helper_threads", "SPAWN_LOCK"]

# Held from the moment a run starts a process (a fork of its group, an engine tree's launch) until the run has
# claimed it (its group, its session), and by every snapshot of a run while it reads /proc: a snapshot never
# sees a process of another run of this process before that run has claimed it (harness.launch.cluster).
SPAWN_LOCK = threading.RLock()

PR_SET_CHILD_SUBREAPER = 36  # prctl option (linux/prctl.h)
READY_TIMEOUT_S = 60.0  # safety net for the server's preload (torch import) before scaling

ExitCallback = Callable[[int, int, int], None]  # (pid, wait status, t_ns)


class LaunchError(HarnessError):
    """A process could not be started, or died before it was ready; the message has its status and stderr."""


def become_subreaper() -> bool:
    """Make this process a child subreaper, so orphans of what it started are reparented to it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _kill_group(pids: list[int]) -> None:
    if not pids:
        return
    try:
        os.killpg(pids[0], signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _child_env() -> dict[str, str]:
    """This process's environment as it is now, with its sys.path first on PYTHONPATH: the server imports
    what this process imports (a module:attribute target from the rootdir, say), whatever the cwd is when it
    starts (a pytester test may have chdir'd into its temp dir by then), and so do the children's children."""
    here = [p for p in sys.path if p and os.path.isabs(p) and os.path.isdir(p)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(
        [*here, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))}


class ForkServer:
    """A preloaded fork server, at most two per harness process (``ForkServer.shared(torch)``): one that
    preloaded torch (``_shared``, for the targets whose processes use it: kvcached's package imports it, and
    every run on a CUDA device, whose KV pages are torch tensors), and one that did not (``_light``, for a CPU
    run of a target that declares ``uses_torch = False``, harness.targets.api.Target, as the reference does:
    its CPU pages are anonymous memory maps; harness.targets.uses_torch). A process forked from the first
    carries torch whether it uses it or not, and pays for it at a faithful exit (about 0.25 s of CPU in module
    teardown); a torch-free target's own processes never load it, and forked from the second they do not
    either."""

    _shared: ForkServer | None = None
    _light: ForkServer | None = None
    _shared_lock = threading.Lock()

    def __init__(self, torch: bool = True) -> None:
        self.torch = torch
        ours, theirs = socket.socketpair()
        fd, self.log_path = tempfile.mkstemp(prefix="lastcall-forkserver-", suffix=".log")
        # The server imports what this process imports (a module:attribute target from the rootdir, say),
        # whatever the cwd is when it starts: a pytester test may have chdir'd into its temp dir by then.
        env = _child_env()
        with os.fdopen(fd, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness.launch.forkserver", str(theirs.fileno()),
                 *(() if torch else ("--no-torch",))],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, env=env)
        theirs.close()
        self.chan = Channel(ours)
        self._init_state()
        self._reader = threading.Thread(target=self._read, name="lastcall-forkserver-reader", daemon=True)
        self._reader.start()
        self.pid = self.proc.pid

    def await_ready(self) -> ForkServer:
        """Wait until the server has preloaded what it preloads (once; at once afterwards).

        Error handling: LaunchError with its log's tail when it is not ready within READY_TIMEOUT_S (scaled);
            the server is stopped first."""
        if not self._ready.wait(scaled(READY_TIMEOUT_S)):
            self.stop()
            raise LaunchError(f"the fork server did not start; its log: {self._log_tail()}")
        return self

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._spawned: dict[int, list[int]] = {}
        self._next_req = 0
        # A group's exit callback waits here under its request number until the server's "spawned"
        # names its pids; the reader binds it to them before it reads anything after that message.
        # The server reaps (and reports) a child only after it has sent the "spawned" naming it, so
        # every exit of a group's process finds its callback bound, and an exit can never be matched
        # to a later process that reused the pid (the old table of unclaimed exits was: a worker
        # whose pid had been an earlier run's was "exited with status 0" before it had done anything).
        self._pending: dict[int, ExitCallback] = {}
        self._exit_callbacks: dict[int, ExitCallback] = {}
        self._ready = threading.Event()
        self._alive = True

    @classmethod
    def shared(cls, torch: bool = True) -> ForkServer:
        """The process-wide server that preloaded torch (``torch``, the default) or the one that did not,
        started on first use (or by :meth:`prestart`), ready, and stopped at exit."""
        return cls.prestart(torch).await_ready()

    @classmethod
    def prestart(cls, torch: bool = True) -> ForkServer:
        """Start the process-wide server now without waiting for its preload (torch's import, about a second),
        so that it overlaps whatever this process does before its first fork (``lastcall run``: pytest's own
        start and collection); :meth:`shared` waits for it.  At most one of each kind; stopped at exit."""
        attr = "_shared" if torch else "_light"
        with cls._shared_lock:
            server: ForkServer | None = getattr(cls, attr)
            if server is None or not server._alive:
                server = cls(torch)
                setattr(cls, attr, server)
                atexit.register(server.stop)
            return server

    @classmethod
    def live(cls) -> list[ForkServer]:
        """The process-wide servers now alive (none, one or both)."""
        return [fs for fs in (cls._shared, cls._light) if fs is not None and fs._alive]

    def _log_tail(self) -> str:
        try:
            with open(self.log_path) as f:
                return f.read()[-2000:]
        except OSError:
            return "(no log)"

    def _read(self) -> None:
        for msg in self.chan.messages():
            self._handle(msg)
        with self._cond:
            self._alive = False
            self._cond.notify_all()

    def _handle(self, msg: dict[str, Any]) -> None:
        """One message from the server, in the order it sent them (the reader thread)."""
        op = msg.get("op")
        if op == "ready":
            self._ready.set()
        elif op == "spawned":
            req, pids = int(msg["req"]), [int(p) for p in msg["pids"]]
            with self._cond:
                on_exit = self._pending.pop(req, None)
                if on_exit is None:
                    # spawn_group gave up waiting (and raised): nobody will drive or reap-watch this group.
                    # Its engine leads its process group, and none of it can have been reaped yet (its
                    # exits would come after this message), so the pgid is still theirs.
                    _kill_group(pids)
                    return
                for pid in pids:
                    self._exit_callbacks[pid] = on_exit
                self._spawned[req] = pids
                self._cond.notify_all()
        elif op == "exited":
            pid, status, t_ns = int(msg["pid"]), int(msg["status"]), int(msg["t_ns"])
            with self._cond:
                cb = self._exit_callbacks.pop(pid, None)
            if cb is not None:
                cb(pid, status, t_ns)

    def spawn_group(self, specs: list[dict[str, Any]], on_exit: ExitCallback) -> list[int]:
        """Fork an engine (``specs[0]``) and its workers; ``on_exit`` hears each one's end."""
        with self._cond:
            self._next_req += 1
            req = self._next_req
            self._pending[req] = on_exit
        # the children get this process's environment as it is now (see harness.launch.forkserver)
        if not self.chan.send({"op": "spawn_group", "req": req, "specs": specs, "env": _child_env()}):
            with self._cond:
                self._pending.pop(req, None)
            raise LaunchError("the fork server is gone")
        with self._cond:
            self._cond.wait_for(lambda: req in self._spawned or not self._alive, scaled())
            pids = self._spawned.pop(req, None)
            if pids is None:
                self._pending.pop(req, None)
                raise LaunchError(f"the fork server did not answer a spawn; its log: {self._log_tail()}")
        return pids

    def stop(self) -> None:
        """Tell the server to kill what is left and exit; reap it."""
        if self.proc.poll() is None:
            self.chan.send({"op": "quit"})
            try:
                self.proc.wait(scaled())
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.chan.close()
        self._alive = False
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def helper_pids() -> set[int]:
    """The harness's own helper processes now alive (the fork servers, each engine zygote): never a run's."""
    from harness.launch import zygote

    return {fs.pid for fs in ForkServer.live()} | zygote.helper_pids()


def helper_threads() -> set[threading.Thread]:
    """Their reader threads in this process, started on first use and stopped at exit."""
    from harness.launch import zygote

    return {fs._reader for fs in ForkServer.live()} | zygote.helper_threads()
