"""The step kinds of a worker run (cast ``worker``): the harness as a client of the workers' sockets, the
engine's calls, stop, shutdown, restart and exit of the workers, path faults, lastcall ctl, workloads.

Registered in harness.scenario.player's registry on import (harness.scenario.runner imports this module).
"""

from __future__ import annotations

import os
from typing import Any

from harness.faults import client as cf
from harness.faults import env
from harness.launch.cluster import Proc
from harness.reference import wire
from harness.scenario.edge_steps import send_reader_fault  # also registers the edge step kinds
from harness.scenario.machine_steps import cpu_ns  # noqa: F401  (registers measure_idle and fd_limit)
from harness.scenario.player import Player, StepError, step_kind, wait
from harness.scenario.steps import READER_FAULTS
from harness.timeouts import scaled

__all__ = ["MiB"]

MiB = 1 << 20
STALLS = ("stall_after_header", "stall_mid_body", "partial_header", "stall_byte_by_byte")


@step_kind("send")
def send(pl: Player, s: Any, name: str) -> None:
    path = pl.proc(s.to).path
    req = wire.Request(cmd=s.cmd or "kv_tensors_created", group_id=s.group_id, offsets=list(s.offsets),
                       transaction_id=s.transaction_id or "", commit=s.commit, id=cf.padded_id(name, s.reply_size))
    pl.started(name, "send", fault=s.fault)
    fault = s.fault
    frame = pl.codec.encode_request
    try:
        if fault in READER_FAULTS:  # harness.scenario.edge_steps
            send_reader_fault(pl, s, name, path, req)
            return
        if fault in STALLS:
            peer = getattr(cf, fault)(path, req, frame)
            peer.decode = pl.codec.decode_reply
            pl.peers[name] = [peer]
            pl.emit("peer_stalled", step=name, fault=fault)
            return
        peer = {"none": lambda: _whole(path, frame(req)), "zero_length": lambda: cf.zero_length(path),
                "oversize_length": lambda: cf.oversize_length(path),
                "garbage_body": lambda: cf.garbage_body(path),
                "one_byte_at_a_time": lambda: cf.one_byte_at_a_time(path, req, frame),
                "reset_mid_frame": lambda: cf.reset_mid_frame(path, req, frame)}[fault]()
        peer.decode = pl.codec.decode_reply
        pl.peers[name] = [peer]
        if fault == "reset_mid_frame":
            pl.returned(name, "send", True, {"status": None}, fault=fault)
            return
        if s.hang_up:  # gone before the listener answers: what it does with its reply is the listener's record
            peer.close()
            pl.returned(name, "send", True, {"status": None}, fault=fault, hang_up=True)
            return
        reply = peer.reply(pl.timeout(s.timeout))
        value = None if reply is None else {"status": reply.status, "error_type": reply.error_type}
        if s.refused is not None:  # the backend must refuse it: ok only on an error reply of that type
            ok = reply is not None and reply.status == "error" and reply.error_type == s.refused
        else:
            ok = fault != "none" or (reply is not None and reply.status != "error")
        pl.returned(name, "send", ok, value, fault=fault,
                    error="" if ok else "no reply (connection closed)" if reply is None
                    else f"served, not refused ({s.refused})" if reply.status != "error"
                    else f"{reply.error_type}: {reply.message}")
        if not s.keep_open:  # kept: a kept-alive client gone idle, closed with the run's peers
            peer.close()
    except OSError as exc:
        pl.returned(name, "send", False, None, fault=fault, error=f"{type(exc).__name__}: {exc}")


def _whole(path: str, data: bytes) -> cf.Peer:
    s = cf.connect(path)
    s.sendall(data)
    return cf.Peer(s)


@step_kind("idle")
def idle(pl: Player, s: Any, name: str) -> None:
    pl.peers[name] = cf.idle_connections(pl.proc(s.to).path, s.count)
    pl.emit("peer_idle", step=name, count=s.count)


@step_kind("flood")
def flood(pl: Player, s: Any, name: str) -> None:
    pl.peers[name] = cf.flood(pl.proc(s.to).path, s.count)
    pl.emit("peer_flood", step=name, count=len(pl.peers[name]))


@step_kind("call")
def call(pl: Player, s: Any, name: str) -> None:
    args: dict[str, Any] = {"group_id": s.group_id} if s.op == "kv_tensors_created" else \
        {"offsets": list(s.offsets), "group_id": s.group_id}
    pl.commands(name, "call", [(pl.proc("engine"), s.op, args)], lambda v: v[0], op=s.op, offsets=list(s.offsets))


@step_kind("stop")
def stop(pl: Player, s: Any, name: str) -> None:
    args = {} if s.timeout is None else {"timeout": s.timeout}
    pl.commands(name, "stop", [(p, "stop", args) for p in pl.procs(s.on)], all)


@step_kind("shutdown")
def shutdown(pl: Player, s: Any, name: str) -> None:
    pl.commands(name, "shutdown", [(p, "shutdown", {}) for p in pl.procs(s.on)], all)


@step_kind("restart")
def restart(pl: Player, s: Any, name: str) -> None:
    pl.commands(name, "restart", [(pl.proc(s.on), "restart", {})], lambda v: v[0])


@step_kind("finish")
def finish(pl: Player, target: str, name: str) -> None:
    for peer in pl.peers.get(target, []):
        if peer.finish():
            pl.emit("peer_finished", step=target)
            reply = peer.reply(scaled(1.0))
            pl.returned(target + ".late", "finish", reply is None, None if reply is None
                        else {"status": reply.status, "error_type": reply.error_type})


@step_kind("exit")
def exit_(pl: Player, s: Any, name: str) -> None:
    procs: list[Proc] = pl.procs(s.on)
    pl.started(name, "exit", shutdown=s.shutdown)
    for p in procs:
        p.send("exit", shutdown=s.shutdown)

    def collect() -> None:
        gone = all(p.wait_exited(scaled(pl.cfg.deadline)) for p in procs)
        pl.returned(name, "exit", gone, [p.exit_code for p in procs])

    pl.background(name, collect)


@step_kind("remove")
def remove(pl: Player, s: Any, name: str) -> None:
    path = pl.proc(s.of).path
    (env.remove_socket if s.what == "socket" else env.remove_socket_dir)(path)
    pl.emit("path_removed", step=name, path=path, what=s.what)


@step_kind("replace")
def replace(pl: Player, s: Any, name: str) -> None:
    path = pl.proc(s.of).path
    pl.held.append(env.replace_socket(path))
    pl.emit("path_replaced", step=name, path=path, ino=os.stat(path).st_ino)  # unlinks_only_own_socket looks for it


@step_kind("ctl")
def ctl(pl: Player, s: Any, name: str) -> None:
    """``lastcall ctl list`` / ``delete`` on this run's socket root and /dev/shm, in-process."""
    from harness.reference.ctl import delete_instance, list_instances

    c = pl.c
    pl.started(name, "ctl", action=s.action)
    try:
        if s.action == "list":
            value: Any = [{"key": i.key, "alive": i.alive, "artifacts": [
                {"kind": a.kind, "path": str(a.path), "state": a.state,
                 "pid": a.owner.pid if a.owner is not None else None} for a in i.artifacts]}
                for i in list_instances(c.root, c.shm_dir) if i.ipc == c.ipc]
        else:
            value = [str(p) for p in delete_instance(c.ipc, c.root, c.shm_dir, force=s.force)]
    except Exception as exc:  # a refusal (InstanceInUse) or a failure is this step's outcome
        pl.returned(name, "ctl", False, None, action=s.action, error=f"{type(exc).__name__}: {exc}")
        return
    pl.returned(name, "ctl", True, value, action=s.action)


class _Obj:
    """A stand-in for a step model, for the steps a workload generates."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


@step_kind("workload")
def workload(pl: Player, s: Any, name: str) -> None:
    """Waves of map/unmap from the scenario's seed: a ``random.Random`` seeded by it picks the wave a
    ``stop_at: random`` interrupts and each wave's pages, so a seed replays the same workload.  Each wave is
    named by its place (its request, in the history: ``NAME.wave0``, ...).  Each wave's calls are call steps,
    the stop a shutdown step, recorded under their own kinds.  (Faker did this until the suite found its
    pytest plugin cost every pytest session in an environment with lastcall about 0.1 s at start.)"""
    import random

    rng = random.Random(pl.item.scenario.seed or 0)
    stop_at = rng.randint(0, s.waves - 1) if s.stop_at == "random" else s.stop_at
    pages = pl.cfg.capacity // (2 * MiB)
    for n in range(s.waves):
        offsets = sorted(rng.sample(range(pages), min(s.pages, pages)))
        wname = f"{name}.wave{n}"
        mark = pl.c.mark()
        call(pl, _Obj(op="map", offsets=[o * 2 * MiB for o in offsets], group_id=0), wname)
        if n == stop_at:  # interrupt this wave while its map is inside a backend call (held by an
            # armed fault if there is one: the handler that fault holds, not just any dispatch)
            kind = "fault_reached" if pl.armed else "dispatch_started"
            if pl.c.rec.wait_for(kind, pl.timeout(), after=mark) is None:
                raise StepError(f"workload: wave {n}'s map never reached a worker ({kind})")
            shutdown(pl, _Obj(on="all"), f"{name}.shutdown")
        wait(pl, _Obj(what="returned", returned=wname, timeout=pl.cfg.deadline), name)
        if n == stop_at:
            break
        call(pl, _Obj(op="unmap", offsets=[o * 2 * MiB for o in offsets[::2]], group_id=0), wname + "u")
        wait(pl, _Obj(what="returned", returned=wname + "u", timeout=pl.cfg.deadline), name)
