"""Run one matrix item of a handshake scenario: an engine owning a handshake listener, and a peer engine.

A scenario with any handshake step (harness.scenario.steps.HANDSHAKE_STEPS) runs
here instead of on a worker cluster: :func:`run_item` hands it over.  The cast
is a :class:`~harness.launch.hscluster.HandshakeCluster` (roles ``hs_engine`` and
``hs_peer``, harness/launch/hsroles.py); the listener class is the handshake
variant the run targets (``reference`` is the correct one).

What the steps record, so the existing checkers judge them:

* ``handshake_start`` is a ``restart``-kind step (stop_result: True once started,
  False on a typed error such as PortInUse); ``handshake_shutdown`` a ``stop``;
  ``cycle`` a ``restart`` whose value is the ports of its rounds.
* ``handshake`` is a well-formed ``send`` (requests_served, survives_bad_input);
  ``malformed_handshake`` a ``send`` with fault ``garbage_body`` and ``bad`` naming its kind.
* A shutdown (or cycle) that returns True is followed at once by a snapshot
  labelled ``after_<step>`` with a trial bind of the listener's ports, taken
  before the step's return is recorded (so ``wait: {returned: ...}`` implies it):
  port_released judges every ``after*`` snapshot.  It must be taken while the
  engine lives: once the process exits the kernel frees the port whatever the
  listener did.  The final ``after`` snapshot gets the same ports.

A command that never answers (a start that hangs on a held port) fails its step
once its safety net runs out; the engine is SIGKILLed before the run ends, so a
hung listener costs seconds, never a hung session.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from harness.history import Event
from harness.launch.cluster import Cluster, Proc, RemoteError
from harness.launch.hscluster import HandshakeCluster
from harness.probes.model import Snapshot
from harness.scenario.loader import MatrixItem
from harness.scenario.runner import RunResult, StepError, _Player, play_and_judge
from harness.timeouts import scaled

__all__ = ["HandshakePlayer", "run_handshake_item"]

GRACE_S = 1.0  # seconds the harness waits beyond a command's own bound before it calls the command hung

Snap = Callable[[Cluster, str], Snapshot]


class HandshakePlayer(_Player):
    """Plays the steps of one handshake run against one HandshakeCluster."""

    def __init__(self, item: MatrixItem, cluster: HandshakeCluster, snaps: dict[str, Snapshot], snap: Snap) -> None:
        super().__init__(item, cluster)
        self.hc = cluster
        self.snaps = snaps
        self.snap = snap
        self.port = 0  # the port of the listener last started (0: none yet)
        self.join_timeout = scaled(5.0)  # the join bound of the listener last started: what bounds its shutdown
        self.stuck: list[Proc] = []  # processes with a command that never answered
        self.hammering = ""

    # ----------------------------------------------------------- addressing
    def proc(self, who: Any) -> Proc:
        if who == "engine":
            assert self.c.engine is not None
            return self.c.engine
        raise StepError(f"a handshake run has no worker {who.label}: only the engine (owning the listener) "
                        "and its peer")

    def procs(self, on: Any) -> list[Proc]:
        return [self.proc("engine" if on == "all" else on)]

    @property
    def peer(self) -> Proc:
        return self.hc.peer

    def used_ports(self) -> list[int]:
        """Every port of the run: held by a step, or bound by a listener (from its own events)."""
        bound = {int(e.data["port"]) for e in self.c.rec.events("handshake_listener_started") if e.data.get("port")}
        return sorted(bound | set(self.ports.values()))

    def _port_of(self, port: int | str) -> int:
        if isinstance(port, int):
            return port
        if port not in self.ports:
            raise StepError(f"{port} holds no port (the step failed); nothing to start on")
        return self.ports[port]

    def _serving(self) -> int:
        if not self.port:
            raise StepError("no handshake listener was started; start one first: - handshake_start: {as: l1}")
        return self.port

    # ------------------------------------------------------------ recording
    def _sync(self, name: str, kind: str, proc: Proc, op: str, args: dict[str, Any], timeout: float,
              ok_if: Callable[[Any], bool] | None = None, **data: Any) -> tuple[bool, Any]:
        """Run ``op`` in ``proc`` as the step ``name``, recorded as step_started / step_returned."""
        self.emit("step_started", step=name, kind=kind, **data)
        try:
            value = proc.call(op, timeout=timeout, **args)
        except RemoteError as exc:
            self._failed(name, kind, proc, exc, **data)
            return False, None
        self._returned(name, kind, True if ok_if is None else ok_if(value), value, **data)
        return True, value

    def _failed(self, name: str, kind: str, proc: Proc, exc: RemoteError, **data: Any) -> None:
        if exc.error_class is None:  # no answer at all (not an error raised in the process): it is stuck
            self.stuck.append(proc)
        self._returned(name, kind, False, None, error=str(exc), error_class=exc.error_class,
                       error_type=exc.error_type, **data)

    def _returned_after_probe(self, name: str, kind: str, value: Any, **data: Any) -> None:
        """Record a successful return; when it says the listener is gone, snapshot the port first (while the
        engine lives), keeping the return's own time so the probe does not count in the step's latency."""
        t_ns = time.monotonic_ns()
        if value is True or (isinstance(value, list) and value):
            label = f"after_{name}"
            self.snaps[label] = self.snap(self.c, label)
        rec = self.c.rec
        rec.add(Event(t_ns, os.getpid(), rec.role, rec.rank, threading.current_thread().name, "step_returned",
                      dict(step=name, kind=kind, ok=True, value=value, **data)))

    # ------------------------------------------------------------- the steps
    def do_handshake_start(self, s: Any, name: str) -> None:
        port = self._port_of(s.port)
        args = {"port": port, "start_timeout": scaled(s.start_timeout), "join_timeout": scaled(s.join_timeout)}
        self.join_timeout = args["join_timeout"]
        ok, value = self._sync(name, "restart", self.proc("engine"), "start", args,
                               scaled(s.start_timeout) + scaled(GRACE_S), step_kind="handshake_start", port=port)
        if ok:
            self.port = self.ports[name] = int(value)

    def do_handshake(self, s: Any, name: str) -> None:
        port = self._serving()
        args = {"port": port, "pp": s.pp, "tp": s.tp, "within": scaled(s.within)}
        data = {"fault": "none", "step_kind": "handshake", "port": port, "pp": s.pp, "tp": s.tp}
        if s.background:
            self._async(name, "send", [(self.peer, "fetch", args)], lambda v: v[0], **data)
        else:
            self._sync(name, "send", self.peer, "fetch", args, scaled(s.within) + scaled(GRACE_S), **data)

    def do_hammer(self, s: Any, name: str) -> None:
        if self.hammering:
            raise StepError(f"the peer is already hammering ({self.hammering}); one hammer per run")
        port = self._serving()
        self.hammering = name
        self._sync(name, "hammer", self.peer, "hammer", {"port": port}, self.timeout(), port=port)

    def do_stop_hammer(self, target: str, name: str) -> None:
        self._sync(name, "stop_hammer", self.peer, "stop_hammering", {}, self.timeout(), hammer=target)

    def do_malformed_handshake(self, s: Any, name: str) -> None:
        port = self._serving()
        self._sync(name, "send", self.peer, "bad", {"port": port, "kind": s.kind, "within": scaled(s.within)},
                   scaled(s.within) + scaled(GRACE_S), ok_if=lambda v: v == "replied", fault="garbage_body",
                   bad=s.kind, step_kind="malformed_handshake", port=port)

    def do_handshake_shutdown(self, s: Any, name: str) -> None:
        eng = self.proc("engine")
        data = {"step_kind": "handshake_shutdown", "port": self.port}
        self.emit("step_started", step=name, kind="stop", **data)
        cid = eng.send("shutdown")

        def collect() -> None:
            try:  # a shutdown that outlives its own join bound (and a grace) is hung
                value = eng.result(cid, timeout=self.join_timeout + scaled(GRACE_S))
            except RemoteError as exc:
                self._failed(name, "stop", eng, exc, **data)
                return
            self._returned_after_probe(name, "stop", value, **data)

        t = threading.Thread(target=collect, name=f"lastcall-step-{name}", daemon=True)
        t.start()
        self.pending.append(t)

    def do_cycle(self, s: Any, name: str) -> None:
        eng = self.proc("engine")
        data = {"step_kind": "cycle", "n": s.n}
        self.emit("step_started", step=name, kind="restart", **data)
        try:
            value = eng.call("cycle", n=s.n, port=s.port, timeout=self.timeout())
        except RemoteError as exc:
            self._failed(name, "restart", eng, exc, **data)
            return
        ports = [int(p) for p in value]
        self.port = self.ports[name] = ports[-1]
        self._returned_after_probe(name, "restart", ports, **data)

    # --------------------------------------------------------------- cleanup
    def finish_up(self) -> None:
        """Let the steps still running return (each is bounded by its own safety net), end a process whose
        command never answered (its listener hangs) with SIGKILL rather than the slow exit, SIGTERM, SIGKILL
        of the close, then the common cleanup."""
        for t in self.pending:
            t.join(self.join_timeout + scaled(GRACE_S) + scaled(self.cfg.ipc_timeout))
        for proc in dict.fromkeys(self.stuck):
            if proc.alive:
                self.emit("sigkill_sent", labels=[proc.label], reason="a command never answered")
                proc.kill(signal.SIGKILL)
                proc.wait_exited(scaled(5))
        super().finish_up()


def run_handshake_item(item: MatrixItem, *, variant: str | None = None, run_id: str | None = None,
                       snapshot: Snap | None = None) -> RunResult:
    """Run one matrix item of a handshake scenario against the handshake variant ``variant`` (default: the
    scenario's target) and judge it.

    Returns: the RunResult; never raises for a failing system under test.
    """
    from harness.probes.snapshot import for_cluster

    scn, cfg = item.scenario, item.scenario.config
    chosen = variant or scn.target
    t0 = time.monotonic()
    c = HandshakeCluster(tp=item.params["tp"], pp=item.params["pp"], device=item.params["device"], variant=chosen,
                         deadline=cfg.deadline, ipc_timeout=cfg.ipc_timeout, run_id=run_id)
    snaps: dict[str, Snapshot] = {}
    holder: list[HandshakePlayer] = []

    def probe(cl: Cluster, label: str) -> Snapshot:
        return for_cluster(cl, label, ports=holder[0].used_ports() if holder else ())

    snap = snapshot or probe
    snaps["before"] = snap(c, "before")

    def make_player() -> HandshakePlayer:  # inside the run's try: a launch failure (an unknown variant, say)
        holder.append(HandshakePlayer(item, c, snaps, snap))  # is the run's outcome
        return holder[0]

    return play_and_judge(item, chosen, c, make_player, snaps, snap, t0)
