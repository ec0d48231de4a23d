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
import random
import signal
import socket
import threading
import time
from typing import Any

from harness.engine.tree import EngineStartError, EngineTree, GoneWatch, Member, shm_mapped, wait_accepting
from harness.errors import ConfigError
from harness.launch.pauses import resume_before_kill
from harness.probes.model import Snapshot
from harness.probes.snapshot import take
from harness.timeouts import bound_scale, scale, scaled

__all__ = ["EngineHost", "LAUNCHES", "members_data", "free_port", "release_port", "shm_owners", "remove_segments"]

LAUNCHES = 2  # launches the run's deadline allows for beyond the scenario's own (the first, one restart)
LOCK_NAME = "engine.lock"
TAIL_LINES = 60  # lines of a failed start's output kept in its event (the root cause is often far above the end)
AFTER_FAILURE_S = 30.0  # how long a start that printed its failure gets to exit (at least), else it hung
ACCEPT_S = 5.0  # how long after its ready line an engine's HTTP port gets to accept (vLLM listens just after it)
CLOSE_GRACE_S = 5.0  # seconds a tree still alive at the run's end gets after SIGTERM, before SIGKILL


PORT_FLOOR = 20000  # the lowest port free_port() tries


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (connect() and bind(0) take theirs from it); 32768 unread."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_CLAIMED: set[int] = set()  # the ports this process's live runs were given (claim=True), until release_port
_CLAIMED_LOCK = threading.Lock()


def free_port(claim: bool = False) -> int:
    """A free port on 127.0.0.1 below the kernel's ephemeral range, so that no other process's connect() or bind(0)
    is handed it in the moment an engine is down (``engine_restart`` binds the port again after a SIGKILL released
    it, and ``engine_port_released`` blames the engine for a port found taken); bind(0)'s port where the range
    leaves no room below it.  Never a port claimed by a live run of this process: with ``claim``, the port is
    that run's until :func:`release_port` (runs played beside each other on threads of one process, each launch
    on a port of their own, free or not at the moment of the pick)."""
    with _CLAIMED_LOCK:
        port = _pick(_CLAIMED)
        if claim:
            _CLAIMED.add(port)
    return port


def release_port(port: int | None) -> None:
    """The run that claimed ``port`` (free_port(claim=True)) has ended."""
    if port is not None:
        with _CLAIMED_LOCK:
            _CLAIMED.discard(port)


def _pick(taken: set[int]) -> int:
    low = _ephemeral_low()
    pick = random.SystemRandom()  # never the global state: a seeded test must not make two runs pick alike
    for port in pick.sample(range(PORT_FLOOR, low), min(64, max(0, low - PORT_FLOOR))):
        if port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def members_data(members: list[Member]) -> list[dict[str, Any]]:
    return [{"pid": m.pid, "ppid": m.ppid, "name": m.name} for m in members]


def _owners_by_maps(members: list[Member]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for m in members:
        for path in shm_mapped(m.pid):
            out.setdefault(path, set()).add(m.pid)
    return out


def shm_owners(snap: Snapshot, members: list[Member]) -> dict[str, list[int]]:
    """/dev/shm path -> the pids of the tree that hold it: an open fd (a segment), or a mapping (a semaphore,
    sem.mp-*, whose fd multiprocessing closed at once)."""
    out = _owners_by_maps(members)
    for p in snap.procs:
        for fd in p.fds:
            if fd.target.startswith("/dev/shm/"):
                out.setdefault(fd.target, set()).add(p.pid)
    return {path: sorted(pids) for path, pids in sorted(out.items())}


def remove_segments(owners: dict[str, list[int]]) -> list[dict[str, Any]]:
    """Unlink each /dev/shm path of ``owners`` (from :func:`shm_owners`, taken while the tree lived) still there;
    each removed one with the pids that held it."""
    removed = []
    for path in sorted(owners):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append({"path": path, "owners": owners[path]})
    return removed


class EngineHost:
    """The engine trees of one run (the first launch, then each restart), on one port."""

    def __init__(self, cluster: Any) -> None:
        from harness.targets import load_target

        self.c = cluster
        self.target = load_target(cluster.variant)
        if not callable(getattr(self.target, "engine_command", None)):
            raise ConfigError(f"target {cluster.variant!r} has no engine_command: an engine run needs an engine "
                              f"target (vllm_engine, engine_standin)")
        bound = getattr(self.target, "launch_bound", None)
        self.launch_s = scaled(float(bound() if callable(bound) else getattr(self.target, "launch_s", 10.0)))
        self.bound_scale = bound_scale(self.target)  # the target's clock: the drain its scenario asks is on it
        self.scale = scale() * self.bound_scale  # the scenario's bounds and timeouts are multiplied by it
        self.scenario = getattr(cluster, "scenario", None)
        # the runner counts the launches its scenarios need (harness.scenario.player.engine_launches; a chained
        # run every scenario it plays); LAUNCHES when it gives none
        self.launches = getattr(cluster, "launches", None) or LAUNCHES
        cluster.deadline_s += self.launches * self.launch_s  # the scenario's own deadline, plus each launch
        self.port = free_port(claim=True)  # released at close
        self._side_port: int | None = None  # the NIXL side channel's free port of the run (chosen once)
        self.trees: list[EngineTree] = []
        self.snaps: dict[str, Snapshot] = {}  # engine_ready<n>; the steps copy them into the run's snapshots
        self._lock: int | None = None
        self.gone_watch: GoneWatch | None = None  # the tree the last signal went to, watched since then
        self._closed = False
        self.owners: dict[int, dict[str, list[int]]] = {}  # launch -> /dev/shm path -> the pids holding it
        self.model = ""  # the model name requests carry (the target's, set at each launch)
        self.flags_of: list[Any] = []  # launch -> the flags it was launched with (a hand-over needs the same)
        self.ended: set[int] = set()  # launches already closed (between two scenarios of a chained run)
        self.handed: int | None = None  # the launch kept ready for the chain's next scenario (hand_over)

    def scaled(self, seconds: float) -> float:
        """``seconds`` of the scenario (a bound, a timeout) as this run applies it: times the run's scale."""
        return seconds * self.scale

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
        try:
            self.launch()
        except EngineStartError:
            if not self.start_may_fail():
                raise  # the run did not start

    def start_may_fail(self) -> bool:
        """Whether a failed first launch is what the scenario tests rather than a run that did not start: it
        holds a port the engine is told to use (config side_channel_port names a hold_port step).  The run
        then goes on to its steps with the failed tree (``engine_start_failed`` says how it failed)."""
        cfg = getattr(self.scenario, "config", None)
        return isinstance(getattr(cfg, "side_channel_port", None), str)

    def flags(self, scenario: Any = None) -> Any:
        """The target parameters of a launch for ``scenario`` (default: the run's; topology.tp, config's engine
        flags), for ``engine_command``; the side channel's port resolved (a held one, or a free port of the run)."""
        from harness.targets.vllm_engine import EngineFlags

        cfg = getattr(self.scenario if scenario is None else scenario, "config", None)
        tp = int(getattr(self.c, "tp", 1))
        if cfg is None:
            return EngineFlags(tp=tp)
        st = cfg.shutdown_timeout
        side: int | None = None
        if cfg.kv_connector is not None:
            side = self._side_channel_port(cfg.side_channel_port)
        # the drain a scenario asks of its engine is on the target's clock, as its bounds are (a fifth for the
        # stand-in): vLLM (bound_scale 1) is given the scenario's whole seconds
        drain = None if st is None else st * self.bound_scale
        return EngineFlags(tp=tp, shutdown_timeout=drain, kv_connector=cfg.kv_connector,
                           side_channel_port=side)

    def _side_channel_port(self, given: int | str | None) -> int:
        if isinstance(given, str):  # the port a hold_port step of the run holds (played before the start)
            for e in self.c.rec.events("step_returned"):
                if e.data.get("kind") == "hold_port" and e.data.get("step") == given and e.data.get("ok"):
                    return int(e.data["value"])
            raise ConfigError(f"config.side_channel_port: no hold_port step {given!r} holds a port before the start")
        if given:
            return given
        if self._side_port is None:
            self._side_port = free_port(claim=True)
        return self._side_port

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
        flags = self.flags()
        # a target's engine_command takes the flags when the scenario gives any (a module:attribute target
        # written for the defaults takes the port alone)
        cmd = self.target.engine_command(self.port) if flags.default() else self.target.engine_command(self.port, flags)
        preload = tuple(getattr(cmd, "preload", ()))  # a target's own EngineCommand may predate it
        tree = EngineTree(cmd.argv, self.c.root / f"e{n}", ready=cmd.ready, failed=cmd.failed, env=cmd.env,
                          path_vars=cmd.path_vars, preload=preload, preload_env=getattr(cmd, "preload_env", None))
        claim = getattr(self.c, "claim_session", None)  # the runs beside this one leave its session out
        tree.on_session = claim if callable(claim) else None
        self.trees.append(tree)
        self.flags_of.append(flags)
        self.model = cmd.model
        tree.on_started = lambda pid: self.c.rec.emit("engine_launched", pid=pid, port=self.port, launch=n,
                                                      argv=cmd.argv[1:], env=flags.env(),
                                                      launcher="zygote" if preload else "exec")
        try:
            ready_s = tree.start(timeout=self.launch_s, after_failure=min(scaled(AFTER_FAILURE_S), self.launch_s))
        except EngineStartError as exc:
            self._start_failed(tree, exc, n)
            raise
        assert tree.proc is not None
        # its ready line may come before its HTTP socket listens (vLLM's does): a request sent at once is refused
        wait_accepting("127.0.0.1", self.port, scaled(ACCEPT_S))
        members = tree.members()
        snap = take(f"engine_ready{n}", root=tree.tmp, pids=[m.pid for m in members], ports=(self.port,),
                    unix_under=tree.tmp, gpu=False)
        self.snaps[snap.label] = snap
        owners = shm_owners(snap, members)
        self.owners[n] = owners
        self.c.rec.emit("engine_ready", pid=tree.proc.pid, ready_s=round(ready_s, 3), members=members_data(members),
                        shm=sorted(owners), owners=owners)
        return tree

    def _start_failed(self, tree: EngineTree, exc: EngineStartError, n: int) -> None:
        """Record a failed launch; a hung one (neither ready nor gone at the bound) is a hung run: every
        process's stacks first (py-spy), then SIGTERM, a grace, and SIGKILL of what is left."""
        seconds = round(time.monotonic() - (tree.started_at or time.monotonic()), 3)
        data: dict[str, Any] = {"launch": n, "seconds": seconds, "hung": exc.hung, "status": tree.returncode,
                                "tail": tree.tail(TAIL_LINES)}
        if tree.failed_at is not None and tree.started_at is not None:  # when it said so (a hang comes after)
            data["failure_s"] = round(tree.failed_at - tree.started_at, 3)
        from harness.targets.vllm_engine import diagnose

        fix = diagnose(tree.tail(TAIL_LINES))
        if fix:
            data["fix"] = fix
        if exc.hung:
            self.c.outcome.status = "hung"
            members = [m for m in tree.members() if m.state != "Z"]
            owners = {p: sorted(pids) for p, pids in _owners_by_maps(members).items()}
            self.owners[n] = owners
            data["members"] = members_data(members)
            data["shm"], data["owners"] = sorted(owners), owners
            self._dump_stacks(tree, f"e{n}")
            for m in members:
                tree.signal(signal.SIGTERM, m.pid)
            data["gone_after_sigterm"] = tree.wait_gone(min(self.scaled(CLOSE_GRACE_S), self.launch_s))
            data["killed"] = members_data(tree.close())
        self.c.rec.emit("engine_start_failed", error=str(exc).splitlines()[0] + (f" (fix: {fix})" if fix else ""),
                        **data)

    def _dump_stacks(self, tree: EngineTree, launch: str) -> None:
        """Every live process's stacks into the run's outcome and its events (``stacks``)."""
        names = {m.pid: m.name for m in tree.members()}
        for pid, text in tree.stacks().items():
            label = f"{launch}/{names.get(pid, '?')}/{pid}"
            self.c.outcome.stacks[label] = text
            self.c.rec.emit("stacks", label=label, pid=pid, text=text)

    def _remove_segments(self, tree: EngineTree) -> list[dict[str, Any]]:
        """Remove the /dev/shm segments and semaphores (sem.*) the tree's processes held or mapped when ready
        that outlived it (a killed engine cannot remove them): nothing a run starts outlives it.  The checkers
        judged them before (wait_gone)."""
        return remove_segments(self.owners.get(self.trees.index(tree), {}))

    def watch(self, tree: EngineTree, before: list[Member] | None = None) -> GoneWatch:
        """Watch ``tree`` from now on (a signal was just sent to it; ``before``: its members read before the
        signal): ``gone_watch``, replacing the last one, each exit recorded as ``engine_process_exited``; the
        host's :meth:`close` ends it at the latest."""
        if self.gone_watch is not None:
            self.gone_watch.close()
        self.gone_watch = GoneWatch(tree, lambda pid, name: self.c.rec.emit("engine_process_exited", pid=pid,
                                                                            name=name), before or [])
        return self.gone_watch

    def kill(self) -> None:
        """The watchdog: every live process's stacks first (a hung run's evidence), then SIGKILL of all."""
        for n, tree in enumerate(self.trees):
            if any(m.state != "Z" for m in tree.members()):
                with contextlib.suppress(Exception):  # the stacks must never stop the kill
                    self._dump_stacks(tree, f"e{n}")
        for tree in self.trees:
            resume_before_kill(m.pid for m in tree.members())  # nothing the harness paused is killed stopped
            if tree.sid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(tree.sid, signal.SIGKILL)
            for m in tree.members():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(m.pid, signal.SIGKILL)

    def _close_tree(self, n: int) -> None:
        """End launch ``n``'s tree: SIGTERM to what is alive (a real engine then removes its segments itself), a
        grace, SIGKILL of what is left, its outliving segments removed; ``engine_closed`` names all of it."""
        if n in self.ended:
            return
        self.ended.add(n)
        tree = self.trees[n]
        live = [m for m in tree.members() if m.state != "Z"]
        for m in live:
            tree.signal(signal.SIGTERM, m.pid)
        if live:
            tree.wait_gone(self.scaled(CLOSE_GRACE_S))
        killed = tree.close()
        removed = self._remove_segments(tree)
        self.c.rec.emit("engine_closed", killed=members_data(killed), terminated=members_data(live),
                        removed=removed)

    # ------------------------------------------------------ a chained run
    def untouched(self) -> int | None:
        """The last launch, if it can be handed to a chained run's next scenario as that one's start: it became
        ready, every process of it is alive, and no step signalled it, paused one of its processes or sent it a
        request since its ready line (so it is what a fresh launch would be once ready); None otherwise."""
        if not self.trees or (n := len(self.trees) - 1) in self.ended:
            return None
        tree = self.trees[n]
        if tree.ready_at is None or tree.proc is None or tree.returncode is not None:
            return None
        members = tree.members()
        if tree.proc.pid not in {m.pid for m in members} or any(m.state == "Z" for m in members):
            return None
        ready = next((e for e in reversed(self.c.rec.events("engine_ready")) if e.data.get("pid") == tree.proc.pid),
                     None)
        if ready is None:
            return None
        for e in self.c.rec.events("step_started"):
            if e.t_ns > ready.t_ns and e.data.get("kind") in ("engine_signal", "engine_request", "engine_start",
                                                               "pause"):
                return None
        return n

    def between(self, next_scenario: Any) -> bool:
        """Between two scenarios of a chained run: keep the last launch for ``next_scenario`` when it is
        untouched and ``next_scenario``'s launch would take the same flags (``handed``), end every other tree
        (every tree when ``next_scenario`` is None: the scenario before failed).  Returns whether one is handed."""
        keep = self.untouched() if next_scenario is not None else None
        if keep is not None and self.flags(next_scenario) != self.flags_of[keep]:
            keep = None
        if self.gone_watch is not None and (keep is None or self.gone_watch.tree is not self.trees[keep]):
            self.gone_watch.close()
            self.gone_watch = None
        for n in range(len(self.trees)):
            if n != keep:
                self._close_tree(n)
        self.handed = keep
        return keep is not None

    def take_over(self, scenario: Any, giver: str) -> None:
        """A chained run's next scenario starts (its ``start``): on the launch :meth:`between` kept
        (``engine_handed``, with the launch's pid and ready time), else on a launch of its own (as :meth:`start`).

        Error handling: as :meth:`start`."""
        self.scenario = scenario
        n, self.handed = self.handed, None
        if n is None:
            try:
                self.launch()
            except EngineStartError:
                if not self.start_may_fail():
                    raise
            return
        tree = self.trees[n]
        assert tree.proc is not None and tree.ready_at is not None and tree.started_at is not None
        self.c.rec.emit("engine_handed", launch=n, pid=tree.proc.pid, ready_s=round(tree.ready_at - tree.started_at, 3),
                        giver=giver)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            for n in range(len(self.trees)):
                self._close_tree(n)
        finally:
            if self.gone_watch is not None:  # it ends once its tree is gone (killed above, at the latest)
                self.gone_watch.close()
            if self._lock is not None:
                os.close(self._lock)  # releases the flock
                self._lock = None
            release_port(self.port)
            release_port(self._side_port)
