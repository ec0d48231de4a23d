"""The launcher: the processes of one run (its cast: by default an engine and tp x pp workers; or an engine
owning a handshake listener and a peer, harness.launch.parts), controlled and recorded, never left behind.

::

    with Cluster(tp=2, variant="reference") as c:
        c.worker(0).call("arm", site="backend.map_to_kv_tensors", action="pause", count=1)
        pending = c.engine.call_async("map", offsets=[0])
        c.wait(lambda e: e.kind == "fault_reached")
        ...
    outcome = c.outcome          # "ok", or "hung" with every process's stacks

Every process is forked from the preloaded fork server (spawn.py), connects back
to this cluster's control socket and sends its events there; the cluster's
:class:`~harness.history.Recorder` is the only writer of the run's history.
Names derive from a short run id, so parallel runs never collide.  A watchdog
bounds the whole run: past the deadline every process's stacks are gathered
into the history, the process group is killed and reaped, and the outcome is
``hung``.  Teardown is orderly exit, then SIGTERM, then SIGKILL, each on a
budget; every child is reaped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import envvars, events
from harness.history import Event, Recorder
from harness.launch.channel import Channel
from harness.launch.outcome import OUTCOME_STATUSES, RunOutcome
from harness.launch.parts import WORKER, Cast, cast_named
from harness.launch.pauses import resume_before_kill
from harness.launch.proc import Proc, RemoteError
from harness.launch.spawn import SPAWN_LOCK, ForkServer, LaunchError, become_subreaper
from harness.names import TMP, new_run_id
from harness.timeouts import scale, scaled

__all__ = ["Cluster", "Proc", "RemoteError", "RunOutcome", "OUTCOME_STATUSES", "LaunchError", "run_id_for",
           "exit_mode", "SPAWN_LOCK", "others_live", "Others"]

# Runs that share this process (played at once on threads of their own) are told apart by
# their process groups: each run's processes are forked into a group of their own, and each engine tree a hosted
# run launches (harness.engine.tree) into a session of its own.  SPAWN_LOCK is held from a run's fork (or a
# tree's launch) to the moment its group (or session) is claimed, and by every snapshot while it reads /proc, so
# a snapshot never sees a process of another run before that run has claimed it.  _LIVE: the runs between their
# start and the end of their close.
_LIVE: set[Cluster] = set()


@dataclass(frozen=True)
class Others:
    """What this process's other live runs hold: process groups, sessions (their engine trees') and pids."""

    pgids: frozenset[int] = frozenset()
    sids: frozenset[int] = frozenset()
    pids: frozenset[int] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.pgids or self.sids or self.pids)


def others_live(cluster: Cluster) -> Others:
    """The process groups, sessions and pids of this process's other live runs (empty when ``cluster`` runs
    alone).  Call it holding SPAWN_LOCK."""
    pgids: set[int] = set()
    sids: set[int] = set()
    pids: set[int] = set()
    for c in _LIVE:
        if c is not cluster:
            with c._lock:  # lock order: SPAWN_LOCK, then a cluster's own
                pids.update(c._procs)
                sids.update(c.sessions)
                pids.update(c.sessions)  # a tree's leader (its session's pid), before its setsid too (a zygote's)
            if c.pgid:
                pgids.add(c.pgid)
    return Others(frozenset(pgids), frozenset(sids), frozenset(pids))

ORDERLY_S = 10.0  # seconds for every process to exit after the exit command (scaled)
TERM_S = 3.0  # seconds after SIGTERM before SIGKILL (scaled)
STACKS_S = 1.0  # seconds to wait for a process to report its stacks over the control channel


def run_id_for(node_id: str, repeat: int = 0) -> str:
    """A short run id from (test node id, repeat index), prefixed by this process's tag (harness.names)."""
    return new_run_id(node_id, repeat)


def exit_mode(fast_exit: bool | None) -> bool:
    """Whether a run's processes take the fast exit: only where its caller asked for it (it knows what the
    run judges) and ``LASTCALL_FAST_EXIT`` is not ``0``.  The variable can make exits more faithful, never
    less: ``LASTCALL_FAST_EXIT=1`` forces nothing (it once forced the fast exit on every run, runs that judge
    exit included), so a run that judges exit always gets the interpreter's whole finalization."""
    return fast_exit is True and envvars.flag("LASTCALL_FAST_EXIT")


class Cluster:
    """The processes of one run of one variant: by default an engine and ``tp x pp`` workers.

    ``fast_exit``: the processes skip the interpreter's module teardown after their exit hooks and threads
    (harness.launch.forkserver) when it is True, which only the caller that knows what the run judges may
    decide (harness.scenario.exitmode for a scenario run); None or False, the faithful exit, whatever the
    environment says.  ``LASTCALL_FAST_EXIT=0`` makes every exit faithful (:func:`exit_mode`).
    ``cast`` (a :class:`~harness.launch.parts.Cast` or its name) says which: ``worker`` (the default),
    ``handshake`` (an engine owning a handshake listener, and a peer), or any registered one.  ``engine`` is
    the cast's first process, ``workers`` its per-rank processes, ``peer`` its ``peer`` part (None if none).
    """

    def __init__(self, *, tp: int = 1, pp: int = 1, variant: str = "reference", drain_timeout: float = 5.0,
                 deadline: float = 60.0, exit_budget: float | None = None, device: str = "cpu",
                 capacity: int = 64 << 20, ipc_timeout: float = 10.0, run_id: str | None = None,
                 recorder: Recorder | None = None, shm_dir: str = "/dev/shm", cast: Cast | str = WORKER,
                 fast_exit: bool | None = None) -> None:
        self.cast = cast_named(cast) if isinstance(cast, str) else cast
        self.tp, self.pp = tp, pp
        self.variant = variant
        self.device = device
        self.run_id = run_id or run_id_for("cluster")
        self.dir = Path(f"{TMP}/lc-{self.run_id}")
        self.root = self.dir / "r"
        self.ipc = f"r{self.run_id}"
        self.shm_dir = shm_dir
        self.rec = recorder if recorder is not None else Recorder(role="harness")
        self.deadline_s = scaled(deadline)  # the watchdog's bound; an engine host adds its launches' to it
        self.deadline = deadline  # the scenario's own (unscaled): what the watchdog's bound is made of
        self.outcome = RunOutcome()
        self._common = {"ipc": self.ipc, "root": str(self.root), "tp": tp, "pp_size": pp, "variant": variant,
                        "drain_timeout": drain_timeout, "exit_budget": exit_budget, "device": device,
                        "capacity": capacity, "ipc_timeout": ipc_timeout, "shm_dir": shm_dir,
                        "fast_exit": exit_mode(fast_exit)}
        self._procs: dict[int, Proc] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition()  # notified when a process becomes ready or exits
        self._server: socket.socket | None = None
        self._closed = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._acceptor: threading.Thread | None = None
        self.engine: Proc | None = None
        self.workers: list[Proc] = []
        self.parts: dict[str, list[Proc]] = {}  # part name -> its processes
        self._cleaned = False
        self.pgid = 0
        self.sessions: set[int] = set()  # the sessions of the engine trees its host launched (claim_session)
        self.host: Any = None  # a hosted cast's host (harness.launch.parts.Cast.host); None otherwise
        self.scenario: Any = None  # the scenario run, when a runner gives it (a host reads its target flags)
        self.launches: int | None = None  # the engine launches its scenarios need, when a runner counts them

    def claim_session(self, sid: int) -> None:
        """An engine tree of this run was launched into session ``sid``: the snapshots of the runs beside it
        leave it out (others_live).  Call it holding SPAWN_LOCK, in the launch's critical section."""
        with self._lock:
            self.sessions.add(sid)

    # ------------------------------------------------------------------ start
    def start(self) -> Cluster:
        """Spawn the engine and workers and wait until every one is ready.

        Error handling: LaunchError naming the process, its exit status and the
        tail of its stderr when one dies (or hangs) before it is ready; what was
        started is torn down first.
        """
        become_subreaper()
        self.root.mkdir(parents=True, mode=0o700)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.dir / "c.sock"))
        server.listen(64)
        self._server = server
        self._acceptor = threading.Thread(target=self._accept, name="lastcall-control-accept", daemon=True)
        self._acceptor.start()
        if self.cast.host is not None:  # the harness starts this cast's processes itself, under the watchdog
            self.host = self.cast.host(self)  # may extend deadline_s by the launches it needs
            self._watchdog = threading.Thread(target=self._watch, name="lastcall-watchdog", daemon=True)
            self._watchdog.start()
            with SPAWN_LOCK:
                _LIVE.add(self)  # its trees claim their sessions as they launch (claim_session)
            self.host.start()
            return self
        specs = self._specs()
        # The process-wide fork server first (its preload has its own bound, READY_TIMEOUT_S, and a LaunchError):
        # its one-time start (torch's import, seconds on a loaded machine) is not the run's, so the watchdog's
        # deadline bounds the run alone, from its first fork on.  The one that did not preload torch for a target
        # whose processes never use it: they carry only what the target's own processes would.
        from harness.targets import uses_torch  # late: only a run that forks needs the targets

        with SPAWN_LOCK:  # a server it starts, and the forks until their group is known (others_live)
            forks = ForkServer.shared(torch=uses_torch(self.variant, self.device))
            self._watchdog = threading.Thread(target=self._watch, name="lastcall-watchdog", daemon=True)
            self._watchdog.start()
            _LIVE.add(self)
            pids = forks.spawn_group(specs, self._on_exit)
            self.pgid = pids[0]
            procs = [self._proc(pid) for pid in pids]  # claimed by pid too: one may not have joined the group yet
        for proc, spec in zip(procs, specs, strict=True):
            proc.role, proc.label, proc.stderr_path = spec["role"], spec["label"], spec["stderr"]
            self.rec.emit("process_spawned", pid=proc.pid, role=spec["role"], label=spec["label"])
            self.parts.setdefault(spec["part"], []).append(proc)
        self.engine = procs[0]
        self.workers = [p for part in self.cast.parts if part.per_rank for p in self.parts.get(part.name, [])]
        for proc in procs:
            self._wait_ready(proc)
        return self

    def _specs(self) -> list[dict[str, Any]]:
        """The processes of the run, from its cast: the group leader (the engine) first."""
        return [self._spec(part.role, r, p, part.name) for part in self.cast.parts
                for p, r in ([(p, r) for p in range(self.pp) for r in range(self.tp)] if part.per_rank
                             else [(0, 0)])]

    def _spec(self, role: str, rank: int, pp: int, part: str) -> dict[str, Any]:
        label = events.label(pp, rank) if role == "worker" else role
        stem = f"w{pp}-{rank}" if role == "worker" else role
        return dict(self._common, role=role, part=part, rank=rank, pp=pp, label=label,
                    ctl=str(self.dir / "c.sock"),
                    stderr=str(self.dir / f"{stem}.err"), stdout=str(self.dir / f"{stem}.out"),
                    stacks=str(self.dir / f"{stem}.stacks"))

    def _wait_ready(self, proc: Proc) -> None:
        with self._changed:
            self._changed.wait_for(lambda: proc.ready.is_set() or proc.exited.is_set() or self._closed.is_set(),
                                   scaled())
        if not proc.ready.is_set():
            why = f"exited with status {proc.exit_code}" if proc.exited.is_set() else "was not ready in time"
            tail = proc.stderr_tail()
            self.close()
            raise LaunchError(f"{proc.role} {proc.label} (pid {proc.pid}) {why} before it was ready;"
                              f" its stderr ends:\n{tail}")

    def _proc(self, pid: int) -> Proc:
        with self._lock:
            proc = self._procs.get(pid)
            if proc is None:
                proc = self._procs[pid] = Proc(pid)
            return proc

    # ------------------------------------------------------- control channel
    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(Channel(sock),), name="lastcall-control-reader",
                             daemon=True).start()

    def _read(self, chan: Channel) -> None:
        proc: Proc | None = None
        for msg in chan.messages():
            t = msg.get("t")
            if t == "event":
                self.rec.add(Event(int(msg["t_ns"]), int(msg["pid"]), str(msg["role"]), str(msg["rank"]),
                                   str(msg["thread"]), str(msg["kind"]), dict(msg["data"])))
            elif t == "reply" and proc is not None:
                proc._reply(msg)
            elif t == "hello":
                proc = self._proc(int(msg["pid"]))
                proc.chan = chan
            elif t == "ready" and proc is not None:
                proc.path = str(msg.get("path", ""))
                proc.ready.set()
                with self._changed:
                    self._changed.notify_all()
        chan.close()
        if proc is not None:
            proc._gone()

    def _on_exit(self, pid: int, status: int, t_ns: int) -> None:
        proc = self._proc(pid)
        proc.status, proc.exit_t_ns = status, t_ns
        self.rec.add(Event(t_ns, pid, proc.role, proc.label, "", "process_exited",
                           {"status": os.waitstatus_to_exitcode(status)}))
        proc.exited.set()
        proc._gone()
        with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------------- accessors
    def worker(self, rank: int = 0, pp: int = 0) -> Proc:
        return self.workers[pp * self.tp + rank]

    @property
    def peer(self) -> Proc:
        """The cast's peer process (a handshake run's peer engine); LookupError when the cast has none."""
        procs = self.parts.get("peer")
        if not procs:
            raise LookupError(f"a {self.cast.name} run has no peer process")
        return procs[0]

    def wait(self, match: str | Callable[[Event], bool], after: int = 0, timeout: float | None = None) -> Event:
        """The first matching event (from index ``after``); RemoteError on timeout."""
        ev = self.rec.wait_for(match, scaled() if timeout is None else timeout, after=after)
        if ev is None:
            raise RemoteError(f"no {match if isinstance(match, str) else 'matching'} event in time")
        return ev

    def mark(self) -> int:
        return self.rec.count()

    # -------------------------------------------------------------- watchdog
    def _watch(self) -> None:
        if self._closed.wait(self.deadline_s):
            return
        self.outcome.status = "hung"
        host = self.host
        self.outcome.watchdog = {"deadline_s": self.deadline_s, "config_s": self.deadline, "scale": scale(),
                                 "launches": getattr(host, "launches", 0), "launch_s": getattr(host, "launch_s", 0.0)}
        self.rec.emit("watchdog_fired", **self.outcome.watchdog)
        live = [p for p in list(self._procs.values()) if p.alive]
        resume_before_kill(p.pid for p in live)  # a paused process answers for its stacks, then is killed running
        for proc in live:
            self.outcome.stacks[proc.label] = self._stacks_of(proc)
            self.rec.emit("stacks", label=proc.label, pid=proc.pid, text=self.outcome.stacks[proc.label])
        self._kill_all()

    def _stacks_of(self, proc: Proc) -> str:
        try:
            return str(proc.call("stacks", timeout=scaled(STACKS_S)))
        except RemoteError:
            pass
        proc.kill(signal.SIGUSR1)  # faulthandler dumps every thread to the .stacks file
        proc.exited.wait(scaled(STACKS_S))  # a grace period for the dump, not a synchronisation
        path = self.dir / ((f"w{proc.label[2:].replace('/rank', '-')}" if proc.role == "worker" else proc.role)
                           + ".stacks")
        try:
            return path.read_text(errors="replace") or "(no stacks: the process did not answer)"
        except OSError:
            return "(no stacks)"

    def _kill_all(self) -> None:
        if self.host is not None:
            self.host.kill()
        resume_before_kill(p.pid for p in self._procs.values() if not p.exited.is_set())
        if self.pgid:
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for proc in list(self._procs.values()):
            proc.kill(signal.SIGKILL)
        for proc in list(self._procs.values()):
            proc.wait_exited(scaled(5))

    # ---------------------------------------------------------------- close
    def close(self, before_cleanup: Callable[[Cluster], None] | None = None) -> RunOutcome:
        """Orderly exit, then SIGTERM, then SIGKILL; reap everything; release the run's files.

        ``before_cleanup`` runs once every process is reaped and before the
        harness removes what the run left (the probes' "after" snapshot).

        Returns: the run's outcome (also kept as ``self.outcome``).
        Error handling: never raises; a process that will not die is reported
            in ``outcome.detail``.
        """
        if self.host is not None:  # before the probes' after snapshot: what it had to kill is in its events
            self.host.close()
        procs = list(self._procs.values())
        # a process the harness paused cannot exit: resumed first, or the orderly exit waits it out (ORDERLY_S)
        resume_before_kill(p.pid for p in procs if p.alive)
        if self.outcome.status != "hung":
            for proc in procs:
                if proc.alive and proc.chan is not None:
                    try:
                        proc.send("exit", shutdown=True)
                    except RemoteError:
                        pass
            self._wait_all(procs, scaled(ORDERLY_S))
            left = [p for p in procs if p.alive]
            for proc in left:
                self.rec.emit("sigterm_sent", label=proc.label, pid=proc.pid)
                proc.kill(signal.SIGTERM)
            self._wait_all(left, scaled(TERM_S))
            if any(p.alive for p in procs):
                self.rec.emit("sigkill_sent", labels=[p.label for p in procs if p.alive])
                self._kill_all()
        self._closed.set()
        if self._watchdog is not None and self._watchdog is not threading.current_thread():
            self._watchdog.join(scaled())
        self.outcome.exits = {p.label: p.exit_code for p in procs if p.exit_code is not None}
        stuck = [p.label for p in procs if p.alive]
        if stuck:
            self.outcome.detail = f"not reaped: {stuck}"
        if self._server is not None:
            # a close alone does not wake a thread blocked in accept() on it (Linux): the shutdown does, and
            # the acceptor ends instead of waiting there for the rest of the process's life, one per run
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)
            self._server.close()
            if self._acceptor is not None:
                self._acceptor.join(scaled())
        if before_cleanup is not None and not self._cleaned:
            try:
                before_cleanup(self)
            except Exception as exc:  # a probe must never stop the cleanup
                self.outcome.detail += f" before_cleanup failed: {type(exc).__name__}: {exc}"
        self._cleaned = True
        self.outcome.strays = self._kill_strays()
        self.outcome.leftovers = self.leftovers()
        self._remove_leftovers()
        with SPAWN_LOCK:
            _LIVE.discard(self)
        return self.outcome

    def interrupt(self) -> None:
        """Stop this run from another thread (its own runs on): every wait on its history returns at once and
        its processes are killed, so its player unwinds into its close, which reaps and removes the rest."""
        self.rec.abort()
        self._kill_all()

    def _kill_strays(self) -> list[int]:
        """Kill and reap whatever of the run's process group outlived its known processes (a grandchild a
        worker started, say), once the probes have seen it: nothing a run starts outlives it."""
        if not self.pgid:
            return []
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return []
        reaped = []
        end = time.monotonic() + scaled(5)
        while time.monotonic() < end:  # orphans come back to us: this process is a child subreaper
            try:
                pid, _ = os.waitpid(-self.pgid, 0)
            except ChildProcessError:
                break
            reaped.append(pid)
        self.rec.emit("strays_killed", pids=reaped)
        return reaped

    def leftovers(self) -> list[str]:
        """Paths of this run still present: everything under the socket root, and its shm segments."""
        found = sorted(str(p) for p in self.root.rglob("*")) if self.root.exists() else []
        try:
            found += sorted(os.path.join(self.shm_dir, n) for n in os.listdir(self.shm_dir) if self.ipc in n)
        except OSError:
            pass
        return found

    def _remove_leftovers(self) -> None:
        for path in self.leftovers():
            if path.startswith(self.shm_dir):
                try:
                    os.unlink(path)
                except OSError:
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def _wait_all(self, procs: list[Proc], budget: float) -> None:
        end = time.monotonic() + budget
        for proc in procs:
            proc.exited.wait(max(0.0, end - time.monotonic()))

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
