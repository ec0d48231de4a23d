"""The Player: plays a scenario's steps against one cluster, each through the registry of step kinds.

The runner is the generator and the nemesis of Jepsen's split: it performs the steps (client-side faults on
the sockets themselves, failpoints and signals in the processes) and records each as ``step_started`` /
``step_returned`` in the cluster's history, beside every process's own events.  Every step is recorded under
its own kind (``kind``) with the category the checkers select on (``category``, harness.categories).

**The registry.**  :data:`STEP_KINDS` maps a step kind (the key of ``- kind: {...}`` in a scenario) to a
:class:`StepKind`: the function that plays it (``play(player, spec, name)``), its category, and the cast
whose listener it drives (``worker``, ``handshake``; None for a step any run can play: arm, wait, kill, ...).
:func:`step_kind` registers one.  The cast of a run follows from its steps (:func:`cast_for`), and its
processes from the cast's parts (harness.launch.parts): no run kind has a runner or a cluster of its own.
The worker listener's steps are in harness.scenario.worker_steps, the handshake listener's in
harness.scenario.handshake_steps, the common ones below; a step module registers its kinds when it is
imported, and harness.scenario.runner imports every built-in one (its ``STEP_KINDS`` is the whole registry).

**How a new kind of run plugs in** (the next one: a real vLLM engine, ``vllm serve`` as the engine side with
its workers inside it):

1. a :class:`~harness.launch.parts.Cast` registered in harness.launch.parts, its parts naming the role mains
   (harness.launch.roles.ROLE_MAINS) and the target attribute each runs (``engine_server``, say);
2. its step kinds, in a module of their own: ``@step_kind("serve_request")`` on a
   function of (player, spec, name), the step's parameter model in harness.scenario.steps (or in a
   ``*_spec`` module it imports) with the step's ``example`` (docs/steps.md), and the module imported by
   harness.scenario.runner;
3. state its steps share (a port, a server handle) in an object of its own: ``player.scratch(MyState)``.

Recording goes through :meth:`Player.started` / :meth:`Player.returned` (which add the kind's category), a
command that answers at once through :meth:`Player.command`, and a step that returns later (joined with
``wait: {returned: NAME}``) through :meth:`Player.background`, the one place a step's thread is started and
kept for :meth:`Player.finish_up` to join.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from harness.faults import client as cf
from harness.history import Event
from harness.launch import pauses
from harness.launch.cluster import Cluster, Proc, RemoteError
from harness.probes.model import Snapshot
from harness.scenario.loader import MatrixItem
from harness.scenario.steps import STEP_TYPES, StepBase, drives_engine
from harness.timeouts import scaled

__all__ = ["Player", "StepKind", "StepError", "HistoryBudgetReached", "STEP_KINDS", "step_kind", "cast_for",
           "GRACE_S", "Snap"]

GRACE_S = 1.0  # seconds the harness waits beyond a command's own bound before it calls the command hung

Snap = Callable[[Cluster, str], Snapshot]
Play = Callable[["Player", Any, str], None]
T = TypeVar("T")


class StepError(Exception):
    """A step could not be performed (its wait timed out, its target was gone).  ``waited_for``: the event kind
    a wait that timed out waited for (recorded in ``step_failed``; a catch is judged on it, not on the words)."""

    def __init__(self, message: str, *, waited_for: str | None = None) -> None:
        super().__init__(message)
        self.waited_for = waited_for


class HistoryBudgetReached(StepError):
    """The run's history reached its byte budget (harness.history.Recorder): no step is played after it."""


@dataclass(frozen=True)
class StepKind:
    """One registered step kind: how it is played, its category, the cast whose listener it drives."""

    kind: str
    category: str
    play: Play
    cast: str | None = None  # None: any run can play it
    marks: bool = True  # the event mark moves to "now" before it plays (a later wait: {event} looks after it)


STEP_KINDS: dict[str, StepKind] = {}


def engine_launches(scenario: Any) -> int:
    """The engine launches a scenario's run needs: the first, and one per engine step of the ``start`` category
    in it (engine_restart)."""
    return 1 + sum(1 for s in scenario.steps
                   if (k := STEP_KINDS.get(s.kind)) is not None and k.cast == "engine" and k.category == "start")


def step_kind(kind: str) -> Callable[[Play], Play]:
    """Register the decorated ``play(player, spec, name)`` as how step kind ``kind`` is played; what the kind is
    (its category, cast, marks) is its class's declaration in harness.scenario.steps.STEP_TYPES."""
    model = STEP_TYPES[kind]

    def register(fn: Play) -> Play:
        if kind in STEP_KINDS:
            raise ValueError(f"step kind {kind!r} is registered twice")
        STEP_KINDS[kind] = StepKind(kind, model.category, fn, model.cast, model.marks)
        return fn

    return register


def cast_for(steps: Iterable[StepBase], default: str = "worker") -> str:
    """The cast a run of ``steps`` needs: the one its step kinds drive, ``engine`` after ``start: engine``
    (``default`` when none names one)."""
    steps = list(steps)
    casts = sorted({k.cast for s in steps if (k := STEP_KINDS.get(s.kind)) is not None and k.cast is not None}
                   | ({"engine"} if drives_engine(steps) else set()))
    if len(casts) > 1:
        raise StepError(f"the steps drive more than one kind of run ({', '.join(casts)}); a scenario drives one")
    return casts[0] if casts else default


class Player:
    """Plays the steps of one run against one cluster, by the registry of step kinds."""

    def __init__(self, item: MatrixItem, cluster: Cluster, snaps: dict[str, Snapshot], snap: Snap) -> None:
        from harness.targets import codec_of, load_target

        self.item = item
        self.c = cluster
        self.cfg = item.scenario.config
        self.snaps = snaps
        self.snap = snap
        self.peers: dict[str, list[cf.Peer]] = {}  # the harness's own connections, by step
        self.armed: dict[str, tuple[Proc, str, int]] = {}  # name -> (process, site, t_ns armed)
        self.pending: list[tuple[threading.Thread, float]] = []  # background steps and their join bounds
        self.held: list[Any] = []  # what the harness holds until the run ends (sockets, replaced paths)
        self.ports: dict[str, int] = {}  # step name -> the TCP port it holds (hold_port) or bound
        self.stuck: list[Proc] = []  # processes with a command that never answered
        self.paused: dict[str, int] = {}  # pause step -> the pid it paused (resumed by finish_up at the latest)
        self.mark = 0  # the event index a wait: {event} counts from: moved by each marking step
        self.began: dict[str, int] = {}  # step name -> the event index at its start (wait: {event, since})
        self._scratch: dict[type, Any] = {}
        self._played = 0  # steps already played (play_prelude)
        self.slowness = 1.0  # the run's measured slowness (harness.timeouts.Slowness): stretches the safety nets
        self.codec = codec_of(load_target(cluster.variant))  # client-side faults speak the target's framing

    # ----------------------------------------------------------- addressing
    def proc(self, who: Any) -> Proc:
        if who == "engine":
            assert self.c.engine is not None
            return self.c.engine
        if not self.c.workers:
            raise StepError(f"a {self.c.cast.name} run has no worker {who.label}: its processes are "
                            + ", ".join(f"{p.label} ({name})" for name, ps in self.c.parts.items() for p in ps))
        try:
            return self.c.worker(who.rank, who.pp)
        except IndexError:
            raise StepError(f"no worker {who.label} in topology tp={self.c.tp} pp={self.c.pp}") from None

    def procs(self, on: Any) -> list[Proc]:
        if on != "all":
            return [self.proc(on)]
        if not self.c.workers:
            raise StepError(f"a {self.c.cast.name} run has no workers")
        return list(self.c.workers)

    def scratch(self, cls: type[T]) -> T:
        """The state the step kinds of one kind of run share (one ``cls()`` per run, made on first use)."""
        if cls not in self._scratch:
            self._scratch[cls] = cls()
        return self._scratch[cls]  # type: ignore[no-any-return]

    def timeout(self, t: float | None = None) -> float:
        """A wait's or a request's timeout: ``t``, the step's own, else the config's ipc_timeout, scaled.  Never
        stretched by the run's measured slowness: a scenario may rest a verdict on it (a reply that does not
        come within ipc_timeout fails requests_served; on a planted bug's path the run ends when a wait's
        expires, and what the cleanup then finds, a drain within its bound or not, is judged)."""
        return scaled(t if t is not None else self.cfg.ipc_timeout)

    def deadline(self) -> float:
        """The safety net of a background step's join, the config's deadline: scaled and stretched by the run's
        measured slowness.  Reaching it ends the run as hung, so a slow machine only reaches it later."""
        return scaled(self.cfg.deadline) * self.slowness

    def used_ports(self) -> list[int]:
        """Every port of the run: held by a step, or bound by a listener (from its own events)."""
        bound = {int(e.data["port"]) for e in self.c.rec.events("handshake_listener_started") if e.data.get("port")}
        return sorted(bound | set(self.ports.values()))

    # ------------------------------------------------------------ recording
    def emit(self, event: str, /, **data: Any) -> None:
        self.c.rec.emit(event, **data)

    def started(self, name: str, kind: str, **data: Any) -> None:
        self.emit("step_started", step=name, kind=kind, category=STEP_KINDS[kind].category, **data)

    def returned(self, name: str, kind: str, ok: bool, value: Any, *, probe: bool = False, **data: Any) -> None:
        """Record a step's return.  ``probe``: when the value says the listener is gone (True, or a non-empty
        list of rounds), snapshot ``after_<name>`` first (while the processes live: once one exits the kernel
        frees its ports whatever the listener did), keeping the return's own time so the probe does not count
        in the step's latency; ``wait: {returned: NAME}`` then implies the snapshot."""
        data = dict(step=name, kind=kind, category=STEP_KINDS[kind].category, ok=ok, value=value, **data)
        if not probe:
            self.emit("step_returned", **data)
            return
        t_ns = time.monotonic_ns()
        if ok and (value is True or (isinstance(value, list) and value)):
            label = f"after_{name}"
            self.snaps[label] = self.snap(self.c, label)
        rec = self.c.rec
        rec.add(Event(t_ns, os.getpid(), rec.role, rec.rank, threading.current_thread().name, "step_returned", data))

    def failed(self, name: str, kind: str, proc: Proc, exc: RemoteError, *, stuck: bool = True,
               **data: Any) -> None:
        """Record a command's failure.  With ``stuck``, one that got no answer at all (not an error raised in
        the process) marks the process stuck: :meth:`finish_up` SIGKILLs it rather than wait out the slow
        exit (a listener whose start or shutdown hangs costs seconds, not the whole exit budget)."""
        if stuck and exc.error_class is None:
            self.stuck.append(proc)
        self.returned(name, kind, False, None, error=str(exc), error_class=exc.error_class,
                      error_type=exc.error_type, **data)

    def command(self, name: str, kind: str, proc: Proc, op: str, args: dict[str, Any], timeout: float,
                ok_if: Callable[[Any], bool] | None = None, probe: bool = False,
                **data: Any) -> tuple[bool, Any]:
        """Run ``op`` in ``proc`` as the step ``name`` and wait for it: recorded started, then returned (ok when
        ``ok_if(value)``, default True) or failed.  Returns (answered, value)."""
        self.started(name, kind, **data)
        try:
            value = proc.call(op, timeout=timeout, **args)
        except RemoteError as exc:
            self.failed(name, kind, proc, exc, **data)
            return False, None
        self.returned(name, kind, True if ok_if is None else ok_if(value), value, probe=probe, **data)
        return True, value

    def background(self, name: str, body: Callable[[], None], join: float | None = None) -> None:
        """Run ``body`` (which waits for the step's outcome and records its return) on a thread of its own;
        :meth:`finish_up` joins it within ``join`` seconds (default the run's deadline)."""
        t = threading.Thread(target=body, name=f"lastcall-step-{name}", daemon=True)
        t.start()
        self.pending.append((t, self.deadline() if join is None else join))

    def commands(self, name: str, kind: str, calls: list[tuple[Proc, str, dict[str, Any]]],
                 combine: Callable[[list[Any]], Any], *, timeout: float | None = None, probe: bool = False,
                 stuck: bool = False, join: float | None = None, **data: Any) -> None:
        """Send ``calls`` (process, op, args) without waiting: a background step whose value is ``combine`` of
        their values, or the first error (within ``timeout``, default the run's deadline); ``probe`` and
        ``stuck`` as for :meth:`returned` and :meth:`failed`."""
        self.started(name, kind, **data)
        cids = [(p, p.send(op, **args)) for p, op, args in calls]
        limit = self.deadline() if timeout is None else timeout

        def collect() -> None:
            values, errors = [], []
            for p, cid in cids:
                try:
                    values.append(p.result(cid, timeout=limit))
                except RemoteError as exc:
                    errors.append((p, exc))
            if errors:
                self.failed(name, kind, errors[0][0], errors[0][1], stuck=stuck, **data)
            else:
                self.returned(name, kind, True, combine(values), probe=probe, **data)

        self.background(name, collect, join)

    # ------------------------------------------------------------- the steps
    def play_prelude(self) -> None:
        """Play the steps before the first ``start`` (hold_port: what must be in place when the processes
        start); :meth:`play` then plays the rest."""
        steps = self.item.scenario.steps
        k = next((i for i, s in enumerate(steps) if s.kind == "start"), 0)
        self._played = 0
        for i in range(k):
            self._play_one(i, steps[i])
            self._played = i + 1

    def play(self) -> None:
        steps = self.item.scenario.steps
        for i in range(self._played, len(steps)):
            self._play_one(i, steps[i])

    def _play_one(self, i: int, step: Any) -> None:
        if self.c.rec.cut is not None:  # its waits would end at once, its events would not be stored
            raise HistoryBudgetReached(f"history budget reached: steps[{i}] ({step.kind}) and the steps after it "
                                       "were not played")
        kind = STEP_KINDS.get(step.kind)
        if kind is None:
            raise StepError(f"no player for step kind {step.kind!r}; registered: {', '.join(sorted(STEP_KINDS))}")
        here = self.c.mark()
        if step.name:
            self.began[step.name] = here
        if kind.marks:
            self.mark = here
        kind.play(self, step.spec, step.name or f"step{i}")

    # --------------------------------------------------------------- cleanup
    def finish_up(self) -> None:
        """Release every armed fault (a failed step may have left a handler parked), let the steps still
        running return (each within its bound), end a process whose command never answered with SIGKILL rather
        than the slow exit, SIGTERM, SIGKILL of the close, and close the harness's own connections.  First,
        whatever a pause step paused and is still stopped is resumed (``process_resumed``, reason ``run_end``):
        a step still running may be waiting on it, and the close must find it running."""
        pauses.resume_all(self.paused.values(), "run_end")
        for proc in {p for p, _, _ in self.armed.values()}:
            if proc.alive:
                try:
                    proc.call("reset", timeout=scaled(2))
                except RemoteError:
                    pass
        for t, bound in self.pending:
            t.join(bound)
        for proc in dict.fromkeys(self.stuck):
            if proc.alive:
                self.emit("sigkill_sent", labels=[proc.label], reason="a command never answered")
                proc.kill(signal.SIGKILL)
                proc.wait_exited(scaled(5))
        for peers in self.peers.values():
            for p in peers:
                p.close()
        for s in self.held:
            s.close()


# ------------------------------------------------------------ any run's steps
@step_kind("start")  # its events came before it: a wait right after it must see them
def start(pl: Player, spec: Any, name: str) -> None:
    return None  # the cluster is started by the runner before the first step


@step_kind("arm")
def arm(pl: Player, s: Any, name: str) -> None:
    proc = pl.proc(s.on)
    t = time.monotonic_ns()  # before the arm: a hit right after arming counts
    if s.action == "stop_listener":  # stop from a handler: the handler at the site stops its own listener
        proc.call("stop_in_handler", site=s.site)
    else:
        proc.call("arm", site=s.site, action=s.action, count=s.count, delay=s.delay)
    pl.armed[name] = (proc, s.site, t)
    pl.emit("armed", step=name, site=s.site, pid=proc.pid, action=s.action, since_ns=t)


@step_kind("release")
def release(pl: Player, armed: str, name: str) -> None:
    proc, site, _ = pl.armed[armed]
    proc.call("release", site=site)


@step_kind("wait")
def wait(pl: Player, s: Any, name: str) -> None:
    limit = pl.timeout(s.timeout)
    rec = pl.c.rec
    what = s.what
    if what == "reached":
        proc, site, t = pl.armed[s.reached]
        if rec.wait_for(counting(s.hits, lambda e: e.kind == "fault_reached" and e.pid == proc.pid
                                 and e.data.get("site") == site and e.t_ns >= t), limit) is None:
            raise StepError(f"wait: {s.reached} ({site} on {proc.label}) was not reached {s.hits}x in {limit}s",
                            waited_for="fault_reached")
    elif what == "event":
        pid = None if s.on is None else pl.proc(s.on).pid
        after = pl.mark if s.since is None else pl.began[s.since]
        if rec.wait_for(lambda e: e.kind == s.event and (pid is None or e.pid == pid), limit, after=after) is None:
            raise StepError(f"wait: no {s.event} event{'' if s.on is None else ' on ' + str(s.on)} in {limit}s",
                            waited_for=s.event)
    elif what == "returned":
        if rec.wait_for(lambda e: e.kind == "step_returned" and e.data.get("step") == s.returned, limit) is None:
            raise StepError(f"wait: step {s.returned} did not return in {limit}s", waited_for="step_returned")
    else:
        peers = pl.peers.get(s.closed, [])
        if all(p.closed_by_listener(limit) for p in peers):
            pl.emit("peer_closed", step=s.closed)
        else:
            raise StepError(f"wait: the listener did not close {s.closed} in {limit}s", waited_for="peer_closed")


def counting(n: int, match: Callable[[Event], bool]) -> Callable[[Event], bool]:
    """A predicate for Recorder.wait_for that holds at the ``n``th event ``match`` holds for: wait_for looks at
    each event once, so a wait on many events costs one pass over the history, not one a new event."""
    seen = [0]

    def nth(e: Event) -> bool:
        seen[0] += match(e)
        return seen[0] >= n

    return nth


@step_kind("kill")
def kill(pl: Player, s: Any, name: str) -> None:
    proc = pl.proc(s.target)
    pl.started(name, "kill", signal=s.signal, pid=proc.pid)
    proc.kill(getattr(signal, s.signal))
    exited = proc.wait_exited(pl.timeout())
    pl.returned(name, "kill", exited, proc.exit_code)


@step_kind("hold_port")
def hold_port(pl: Player, s: Any, name: str) -> None:
    """Bind and listen on a TCP port of 127.0.0.1 (0: any free one) and keep it until the run ends."""
    pl.started(name, "hold_port", port=s.port)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", s.port))
        sock.listen()
    except OSError as exc:
        sock.close()
        pl.returned(name, "hold_port", False, None, port=s.port, error=f"{type(exc).__name__}: {exc}")
        raise StepError(f"hold_port: cannot hold 127.0.0.1:{s.port}: {exc}") from None
    pl.held.append(sock)
    port = int(sock.getsockname()[1])
    pl.ports[name] = port
    pl.returned(name, "hold_port", True, port, port=port)
