"""Run one matrix item of a scenario: start a cluster, play the steps, judge the run.

The runner is the generator and the nemesis of Jepsen's split: it performs the
steps (client-side faults on the sockets themselves, failpoints and signals in
the processes) and records each as ``step_started`` / ``step_returned`` in the
cluster's history, beside every process's own events.  Probes snapshot the
machine before the run and after every process is reaped (before the harness
removes what was left); the checkers of ``expect`` then judge the record.
Every armed fault is also judged by ``fault_fired``: a fault that never fired
makes the run vacuous.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.checkers import RunRecord, Verdict, judge
from harness.faults import client as cf
from harness.faults import env
from harness.history import Event
from harness.launch.cluster import Cluster, Proc, RemoteError, RunOutcome
from harness.probes.model import Snapshot
from harness.reference import wire
from harness.scenario.loader import MatrixItem
from harness.scenario.steps import is_handshake
from harness.timeouts import scale, scaled

__all__ = ["RunResult", "run_item", "StepError"]

MiB = 1 << 20


class StepError(Exception):
    """A step could not be performed (its wait timed out, its target was gone)."""


@dataclass
class RunResult:
    """What one run produced: the verdicts, the run's outcome, its history and snapshots."""

    item: MatrixItem
    variant: str
    run_id: str
    verdicts: list[Verdict]
    outcome: RunOutcome
    events: list[Event]
    snapshots: dict[str, Snapshot]
    step_error: str = ""
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def violated(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status == "violated"]

    @property
    def passed(self) -> bool:
        return not self.step_error and self.outcome.status == "ok" and all(v.ok for v in self.verdicts)


class _Player:
    """Plays the steps of one run against one cluster."""

    def __init__(self, item: MatrixItem, cluster: Cluster) -> None:
        self.item = item
        self.c = cluster
        self.cfg = item.scenario.config
        self.peers: dict[str, list[cf.Peer]] = {}
        self.armed: dict[str, tuple[Proc, str, int]] = {}  # name -> (process, site, t_ns armed)
        self.pending: list[threading.Thread] = []
        self.held: list[Any] = []
        self.ports: dict[str, int] = {}  # step name -> the TCP port it holds (hold_port) or bound
        self.mark = 0
        from harness.targets import codec_of, load_target

        self.codec = codec_of(load_target(cluster.variant))  # client-side faults speak the target's framing

    # ----------------------------------------------------------- addressing
    def proc(self, who: Any) -> Proc:
        if who == "engine":
            assert self.c.engine is not None
            return self.c.engine
        try:
            return self.c.worker(who.rank, who.pp)
        except IndexError:
            raise StepError(f"no worker {who.label} in topology tp={self.c.tp} pp={self.c.pp}") from None

    def procs(self, on: Any) -> list[Proc]:
        return list(self.c.workers) if on == "all" else [self.proc(on)]

    def emit(self, event: str, /, **data: Any) -> None:
        self.c.rec.emit(event, **data)

    def timeout(self, t: float | None = None) -> float:
        return scaled(t if t is not None else self.cfg.ipc_timeout)

    # ------------------------------------------------------------- the steps
    def play(self) -> None:
        for i, step in enumerate(self.item.scenario.steps):
            handler: Callable[[Any, str], None] = getattr(self, f"do_{step.kind}")
            name = step.name or f"step{i}"
            if step.kind != "wait":
                self.mark = self.c.mark()
            handler(step.spec, name)

    def do_start(self, spec: Any, name: str) -> None:
        return None  # the cluster is started by run_item before the first step

    def do_send(self, s: Any, name: str) -> None:
        path = self.proc(s.to).path
        req = wire.Request(cmd=s.cmd or "kv_tensors_created", group_id=s.group_id, offsets=list(s.offsets),
                           transaction_id=s.transaction_id or "", commit=s.commit, id=name)
        self.emit("step_started", step=name, kind="send", fault=s.fault)
        fault = s.fault
        frame = self.codec.encode_request
        try:
            if fault in ("stall_after_header", "stall_mid_body", "partial_header", "stall_byte_by_byte"):
                peer = getattr(cf, fault)(path, req, frame)
                peer.decode = self.codec.decode_reply
                self.peers[name] = [peer]
                self.emit("peer_stalled", step=name, fault=fault)
                return
            peer = {"none": lambda: _whole(path, frame(req)), "zero_length": lambda: cf.zero_length(path),
                    "oversize_length": lambda: cf.oversize_length(path),
                    "garbage_body": lambda: cf.garbage_body(path),
                    "one_byte_at_a_time": lambda: cf.one_byte_at_a_time(path, req, frame),
                    "reset_mid_frame": lambda: cf.reset_mid_frame(path, req, frame)}[fault]()
            peer.decode = self.codec.decode_reply
            self.peers[name] = [peer]
            if fault == "reset_mid_frame":
                self._returned(name, "send", True, {"status": None}, fault=fault)
                return
            reply = peer.reply(self.timeout())
            value = None if reply is None else {"status": reply.status, "error_type": reply.error_type}
            ok = fault != "none" or (reply is not None and reply.status != "error")
            self._returned(name, "send", ok, value, fault=fault,
                           error="" if ok else "no reply (connection closed)" if reply is None
                           else f"{reply.error_type}: {reply.message}")
            peer.close()
        except OSError as exc:
            self._returned(name, "send", False, None, fault=fault, error=f"{type(exc).__name__}: {exc}")

    def _returned(self, name: str, kind: str, ok: bool, value: Any, **data: Any) -> None:
        self.emit("step_returned", step=name, kind=kind, ok=ok, value=value, **data)

    def do_idle(self, s: Any, name: str) -> None:
        self.peers[name] = cf.idle_connections(self.proc(s.to).path, s.count)
        self.emit("peer_idle", step=name, count=s.count)

    def do_flood(self, s: Any, name: str) -> None:
        self.peers[name] = cf.flood(self.proc(s.to).path, s.count)
        self.emit("peer_flood", step=name, count=len(self.peers[name]))

    def do_arm(self, s: Any, name: str) -> None:
        proc = self.proc(s.on)
        t = time.monotonic_ns()  # before the arm: a hit right after arming counts
        if s.action == "stop_listener":  # stop from a handler: the handler at the site stops its own listener
            proc.call("stop_in_handler", site=s.site)
        else:
            proc.call("arm", site=s.site, action=s.action, count=s.count, delay=s.delay)
        self.armed[name] = (proc, s.site, t)
        self.emit("armed", step=name, site=s.site, pid=proc.pid, action=s.action, since_ns=t)

    def _async(self, name: str, kind: str, calls: list[tuple[Proc, str, dict[str, Any]]],
               combine: Callable[[list[Any]], Any], **data: Any) -> None:
        self.emit("step_started", step=name, kind=kind, **data)
        cids = [(p, p.send(op, **args)) for p, op, args in calls]

        def collect() -> None:
            values, errors = [], []
            for p, cid in cids:
                try:
                    values.append(p.result(cid, timeout=scaled(self.cfg.deadline)))
                except RemoteError as exc:
                    errors.append(exc)
            if errors:
                e = errors[0]
                self._returned(name, kind, False, None, error=str(e), error_class=e.error_class,
                               error_type=e.error_type, **data)
            else:
                self._returned(name, kind, True, combine(values), **data)

        t = threading.Thread(target=collect, name=f"lastcall-step-{name}", daemon=True)
        t.start()
        self.pending.append(t)

    def do_call(self, s: Any, name: str) -> None:
        args: dict[str, Any] = {"group_id": s.group_id} if s.op == "kv_tensors_created" else \
            {"offsets": list(s.offsets), "group_id": s.group_id}
        self._async(name, "call", [(self.proc("engine"), s.op, args)], lambda v: v[0], op=s.op,
                    offsets=list(s.offsets))

    def do_stop(self, s: Any, name: str) -> None:
        args = {} if s.timeout is None else {"timeout": s.timeout}
        self._async(name, "stop", [(p, "stop", args) for p in self.procs(s.on)], all)

    def do_shutdown(self, s: Any, name: str) -> None:
        self._async(name, "shutdown", [(p, "shutdown", {}) for p in self.procs(s.on)], all)

    def do_restart(self, s: Any, name: str) -> None:
        self._async(name, "restart", [(self.proc(s.on), "restart", {})], lambda v: v[0])

    def do_wait(self, s: Any, name: str) -> None:
        limit = self.timeout(s.timeout)
        what = s.what
        if what == "reached":
            proc, site, t = self.armed[s.reached]
            ev = self.c.rec.wait_until(lambda evs: sum(
                1 for e in evs if e.kind == "fault_reached" and e.pid == proc.pid and e.data.get("site") == site
                and e.t_ns >= t) >= s.hits, limit)
            if not ev:
                raise StepError(f"wait: {s.reached} ({site} on {proc.label}) was not reached {s.hits}x in {limit}s")
        elif what == "event":
            pid = None if s.on is None else self.proc(s.on).pid
            if self.c.rec.wait_for(lambda e: e.kind == s.event and (pid is None or e.pid == pid),
                                   limit, after=self.mark) is None:
                raise StepError(f"wait: no {s.event} event{'' if s.on is None else ' on ' + str(s.on)} in {limit}s")
        elif what == "returned":
            if self.c.rec.wait_for(lambda e: e.kind == "step_returned" and e.data.get("step") == s.returned,
                                   limit) is None:
                raise StepError(f"wait: step {s.returned} did not return in {limit}s")
        else:
            peers = self.peers.get(s.closed, [])
            if all(p.closed_by_listener(limit) for p in peers):
                self.emit("peer_closed", step=s.closed)
            else:
                raise StepError(f"wait: the listener did not close {s.closed} in {limit}s")

    def do_release(self, name_: str, name: str) -> None:
        proc, site, _ = self.armed[name_]
        proc.call("release", site=site)

    def do_finish(self, target: str, name: str) -> None:
        for peer in self.peers.get(target, []):
            if peer.finish():
                self.emit("peer_finished", step=target)
                reply = peer.reply(scaled(1.0))
                self._returned(target + ".late", "finish", reply is None, None if reply is None
                               else {"status": reply.status, "error_type": reply.error_type})

    def do_exit(self, s: Any, name: str) -> None:
        procs = self.procs(s.on)
        self.emit("step_started", step=name, kind="exit", shutdown=s.shutdown)
        for p in procs:
            p.send("exit", shutdown=s.shutdown)

        def collect() -> None:
            gone = all(p.wait_exited(scaled(self.cfg.deadline)) for p in procs)
            self._returned(name, "exit", gone, [p.exit_code for p in procs])

        t = threading.Thread(target=collect, name=f"lastcall-step-{name}", daemon=True)
        t.start()
        self.pending.append(t)

    def do_kill(self, s: Any, name: str) -> None:
        proc = self.proc(s.target)
        self.emit("step_started", step=name, kind="kill", signal=s.signal, pid=proc.pid)
        proc.kill(getattr(signal, s.signal))
        exited = proc.wait_exited(self.timeout())
        self._returned(name, "kill", exited, proc.exit_code)

    def do_remove(self, s: Any, name: str) -> None:
        path = self.proc(s.of).path
        (env.remove_socket if s.what == "socket" else env.remove_socket_dir)(path)
        self.emit("path_removed", step=name, path=path, what=s.what)

    def do_replace(self, s: Any, name: str) -> None:
        path = self.proc(s.of).path
        self.held.append(env.replace_socket(path))
        self.emit("path_replaced", step=name, path=path)

    def do_hold_port(self, s: Any, name: str) -> None:
        """Bind and listen on a TCP port of 127.0.0.1 (0: any free one) and keep it until the run ends."""
        self.emit("step_started", step=name, kind="hold_port", port=s.port)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", s.port))
            sock.listen()
        except OSError as exc:
            sock.close()
            self._returned(name, "hold_port", False, None, port=s.port, error=f"{type(exc).__name__}: {exc}")
            raise StepError(f"hold_port: cannot hold 127.0.0.1:{s.port}: {exc}") from None
        self.held.append(sock)
        port = int(sock.getsockname()[1])
        self.ports[name] = port
        self._returned(name, "hold_port", True, port, port=port)

    def do_ctl(self, s: Any, name: str) -> None:
        """``lastcall ctl list`` / ``delete`` on this run's socket root and /dev/shm, in-process."""
        from harness.reference.ctl import delete_instance, list_instances

        self.emit("step_started", step=name, kind="ctl", action=s.action)
        try:
            if s.action == "list":
                value: Any = [{"key": i.key, "alive": i.alive, "artifacts": [
                    {"kind": a.kind, "path": str(a.path), "state": a.state,
                     "pid": a.owner.pid if a.owner is not None else None} for a in i.artifacts]}
                    for i in list_instances(self.c.root, self.c.shm_dir) if i.ipc == self.c.ipc]
            else:
                value = [str(p) for p in delete_instance(self.c.ipc, self.c.root, self.c.shm_dir, force=s.force)]
        except Exception as exc:  # a refusal (InstanceInUse) or a failure is this step's outcome
            self._returned(name, "ctl", False, None, action=s.action, error=f"{type(exc).__name__}: {exc}")
            return
        self._returned(name, "ctl", True, value, action=s.action)

    def do_workload(self, s: Any, name: str) -> None:
        """Waves of map/unmap from the scenario's seed: Faker names each wave (its request, in the history)
        and picks its pages, so a seed replays the same workload."""
        from faker import Faker

        fake = Faker()
        fake.seed_instance(self.item.scenario.seed or 0)
        stop_at = fake.random_int(0, s.waves - 1) if s.stop_at == "random" else s.stop_at
        pages = self.cfg.capacity // (2 * MiB)
        for wave in range(s.waves):
            offsets = sorted(fake.random_sample(range(pages), length=min(s.pages, pages)))
            wname = f"{name}.{fake.unique.user_name()}"
            mark = self.c.mark()
            self.do_call(_Obj(op="map", offsets=[o * 2 * MiB for o in offsets], group_id=0), wname)
            if wave == stop_at:  # interrupt this wave while its map is inside a backend call (held by an
                # armed fault if there is one: the handler that fault holds, not just any dispatch)
                kind = "fault_reached" if self.armed else "dispatch_started"
                if self.c.rec.wait_for(kind, self.timeout(), after=mark) is None:
                    raise StepError(f"workload: wave {wave}'s map never reached a worker ({kind})")
                self.do_shutdown(_Obj(on="all"), f"{name}.shutdown")
            self.do_wait(_Obj(what="returned", returned=wname, timeout=self.cfg.deadline), name)
            if wave == stop_at:
                break
            self.do_call(_Obj(op="unmap", offsets=[o * 2 * MiB for o in offsets[::2]], group_id=0), wname + "u")
            self.do_wait(_Obj(what="returned", returned=wname + "u", timeout=self.cfg.deadline), name)

    # --------------------------------------------------------------- cleanup
    def finish_up(self) -> None:
        """Release every armed fault (a failed step may have left a handler parked), join the steps
        still running, close the harness's own connections."""
        for proc in {p for p, _, _ in self.armed.values()}:
            if proc.alive:
                try:
                    proc.call("reset", timeout=scaled(2))
                except RemoteError:
                    pass
        for t in self.pending:
            t.join(scaled(self.cfg.deadline))
        for peers in self.peers.values():
            for p in peers:
                p.close()
        for s in self.held:
            s.close()


class _Obj:
    """A stand-in for a step model, for the steps a workload generates."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def _whole(path: str, data: bytes) -> cf.Peer:
    s = cf.connect(path)
    s.sendall(data)
    return cf.Peer(s)


def run_item(item: MatrixItem, *, variant: str | None = None, run_id: str | None = None,
             snapshot: Callable[[Cluster, str], Snapshot] | None = None) -> RunResult:
    """Run one matrix item against ``variant`` (default: the scenario's target) and judge it.

    A scenario with a handshake step runs on a HandshakeCluster (harness.scenario.hsrunner).

    Returns: the RunResult; never raises for a failing system under test.
    """
    from harness.probes.snapshot import for_cluster

    if is_handshake(item.scenario.steps):  # an engine owning a handshake listener, and a peer
        from harness.scenario.hsrunner import run_handshake_item

        return run_handshake_item(item, variant=variant, run_id=run_id, snapshot=snapshot)
    snap = snapshot or for_cluster
    scn, cfg = item.scenario, item.scenario.config
    chosen = variant or scn.target
    t0 = time.monotonic()
    c = Cluster(tp=item.params["tp"], pp=item.params["pp"], device=item.params["device"], variant=chosen,
                drain_timeout=cfg.drain_timeout, deadline=cfg.deadline, exit_budget=cfg.exit_budget,
                capacity=cfg.capacity, ipc_timeout=cfg.ipc_timeout, run_id=run_id)
    snaps: dict[str, Snapshot] = {"before": snap(c, "before")}
    player = _Player(item, c)
    return play_and_judge(item, chosen, c, lambda: player, snaps, snap, t0)


def play_and_judge(item: MatrixItem, chosen: str, c: Cluster, make_player: Callable[[], _Player],
                   snaps: dict[str, Snapshot], snap: Callable[[Cluster, str], Snapshot], t0: float) -> RunResult:
    """What every kind of run shares once its cluster and first snapshot exist: start the cluster, play the
    steps, clean up (the player's own cleanup, then the cluster's, with the ``after`` snapshot taken before
    it), judge the scenario's expectations (plus fault_fired when a fault was armed).

    The cluster starts and closes as a plain Cluster: a JudgedCluster's own snapshots are not used, the run
    keeps its own.  A failed step or launch (``make_player`` included) is the run's outcome, never raised.
    """
    player: _Player | None = None
    step_error = ""
    try:
        player = make_player()
        Cluster.start(c)
        player.play()
    except Exception as exc:  # a failed step or launch is the run's outcome, not a crash of the session
        step_error = f"{type(exc).__name__}: {exc}"
        c.rec.emit("step_failed", error=step_error)
    finally:
        if player is not None:
            player.finish_up()
        outcome = Cluster.close(c, before_cleanup=lambda cl: snaps.__setitem__("after", snap(cl, "after")))
    record = RunRecord(tuple(c.rec.events()), snaps, scale())
    expect: list[tuple[str, Any]] = [(e.checker, e.params) for e in item.scenario.expect]
    if player is not None and player.armed and "fault_fired" not in [n for n, _ in expect]:
        expect.append(("fault_fired", None))
    verdicts = [judge(n, record, p) for n, p in expect]
    return RunResult(item, chosen, c.run_id, verdicts, outcome, list(c.rec.events()), snaps, step_error,
                     time.monotonic() - t0)
