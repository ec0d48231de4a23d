"""The host of an engine run (the ``engine`` cast): the harness launches the target's engine tree itself.

A real engine is not one of lastcall's forked roles.  :class:`EngineHost` is what the cluster keeps as its
``host`` (harness.launch.parts.Cast.host): made with the cluster (it extends the run's watchdog deadline by the
launches the run may need), it starts the target's command with :class:`~harness.engine.tree.EngineTree` in
a directory of the run (``<root>/e<n>``, TMPDIR and ``VLLM_RPC_BASE_PATH`` at ``<root>/e<n>/tmp``) on a free
port; a restart launches again on the same port.  Every launch is recorded (``engine_launched``, then
``engine_ready`` with the tree's members, or ``engine_start_failed``) and probed when ready (a snapshot
``engine_ready<n>``: the tree's processes with their fds, sockets, its port and the files under its TMPDIR;
with the pids, what is left later is attributable to the process that held it).

``kill()`` (the watchdog) SIGKILLs every tree's session; ``close()`` (the cluster's close, before the probes'
after snapshot) sends SIGTERM to whatever of every tree is still alive, SIGKILLs and reaps what is left after a
grace, removes the /dev/shm segments the tree held when ready that outlived it (``engine_closed`` names all of
it) and releases the engine lock.  A target that is ``exclusive`` (real vLLM: its /tmp and /dev/shm names
cannot be told apart between two live engines) holds a lock file under the cache directory for the whole
run: one such engine on the machine at a time.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
from typing import Any

from harness.engine.tree import EngineStartError, EngineTree, Member
from harness.errors import ConfigError
from harness.probes.model import Snapshot
from harness.probes.snapshot import take
from harness.timeouts import scaled

__all__ = ["EngineHost", "LAUNCHES", "members_data", "free_port"]

LAUNCHES = 2  # launches the run's deadline allows for beyond the scenario's own (the first, one restart)
LOCK_NAME = "engine.lock"
CLOSE_GRACE_S = 5.0  # seconds a tree still alive at the run's end gets after SIGTERM, before SIGKILL


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def members_data(members: list[Member]) -> list[dict[str, Any]]:
    return [{"pid": m.pid, "ppid": m.ppid, "name": m.name} for m in members]


class EngineHost:
    """The engine trees of one run (the first launch, then each restart), on one port."""

    def __init__(self, cluster: Any) -> None:
        from harness.targets import load_target

        self.c = cluster
        self.target = load_target(cluster.variant)
        if not callable(getattr(self.target, "engine_command", None)):
            raise ConfigError(f"target {cluster.variant!r} has no engine_command: an engine run needs an engine "
                              f"target (vllm_engine, engine_standin)")
        self.launch_s = scaled(float(getattr(self.target, "launch_s", 10.0)))
        cluster.deadline_s += LAUNCHES * self.launch_s
        self.port = free_port()
        self.trees: list[EngineTree] = []
        self.snaps: dict[str, Snapshot] = {}  # engine_ready<n>; the steps copy them into the run's snapshots
        self._lock: int | None = None
        self._closed = False
        self.model = ""  # the model name requests carry (the target's, set at each launch)

    @property
    def tree(self) -> EngineTree:
        if not self.trees:
            raise ConfigError("no engine was launched")
        return self.trees[-1]

    def start(self) -> None:
        """The first launch (the cluster's start): raises EngineStartError or ConfigError when it fails."""
        from harness.targets import unavailable

        why = unavailable(self.target)
        if why:
            raise ConfigError(f"target {self.c.variant!r}: {why}")
        if getattr(self.target, "exclusive", False):
            self._take_lock()
        self.launch()

    def _take_lock(self) -> None:
        from harness.targets.fetch import cache_dir

        path = cache_dir() / LOCK_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)  # bounded by the other run's own watchdog, which ends its engine
        self._lock = fd

    def launch(self) -> EngineTree:
        """Launch the target's engine on the run's port and wait for its ready line; the tree.

        Error handling: EngineStartError (recorded as ``engine_start_failed``) when it exits, prints its
            failure, or is not ready within the target's launch bound; the tree is kept for close()."""
        n = len(self.trees)
        cmd = self.target.engine_command(self.port)
        tree = EngineTree(cmd.argv, self.c.root / f"e{n}", ready=cmd.ready, failed=cmd.failed, env=cmd.env,
                          path_vars=cmd.path_vars)
        self.trees.append(tree)
        self.model = cmd.model
        try:
            ready_s = tree.start(timeout=self.launch_s)
        except EngineStartError as exc:
            if tree.proc is not None:
                self.c.rec.emit("engine_launched", pid=tree.proc.pid, port=self.port, launch=n)
            self.c.rec.emit("engine_start_failed", error=str(exc).splitlines()[0])
            raise
        assert tree.proc is not None
        self.c.rec.emit("engine_launched", pid=tree.proc.pid, port=self.port, launch=n)
        members = tree.members()
        snap = take(f"engine_ready{n}", root=tree.tmp, pids=[m.pid for m in members], ports=(self.port,),
                    unix_under=tree.tmp, gpu=False)
        self.snaps[snap.label] = snap
        shm = sorted({fd.target for p in snap.procs for fd in p.fds if fd.target.startswith("/dev/shm/")})
        self.c.rec.emit("engine_ready", pid=tree.proc.pid, ready_s=round(ready_s, 3), members=members_data(members),
                        shm=shm)
        return tree

    def _remove_segments(self, tree: EngineTree) -> list[str]:
        """Remove the /dev/shm segments the tree's processes held when ready that outlived it (a killed engine
        cannot remove them): nothing a run starts outlives it.  The checkers judged them before (wait_gone)."""
        held = {fd.target for label, snap in self.snaps.items() if label == f"engine_ready{self.trees.index(tree)}"
                for p in snap.procs for fd in p.fds if fd.target.startswith("/dev/shm/")}
        removed = []
        for path in sorted(held):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                removed.append(path)
        return removed

    def kill(self) -> None:
        for tree in self.trees:
            if tree.sid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(tree.sid, signal.SIGKILL)
            for m in tree.members():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(m.pid, signal.SIGKILL)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            for tree in self.trees:
                live = [m for m in tree.members() if m.state != "Z"]
                for m in live:  # a stop first: a real engine then removes its segments itself
                    tree.signal(signal.SIGTERM, m.pid)
                if live:
                    tree.wait_gone(scaled(CLOSE_GRACE_S))
                killed = tree.close()
                removed = self._remove_segments(tree)
                self.c.rec.emit("engine_closed", killed=members_data(killed), terminated=members_data(live),
                                removed=removed)
        finally:
            if self._lock is not None:
                os.close(self._lock)  # releases the flock
                self._lock = None
