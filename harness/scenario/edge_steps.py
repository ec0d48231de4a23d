"""The worker run's step kinds for the edges of a listener's life: pipelines on one kept-alive connection,
clients that do not read their replies, a dead predecessor's stale socket, throw-away starts and stops.

Registered in harness.scenario.player's registry on import (harness.scenario.worker_steps imports it).
"""

from __future__ import annotations

import os
from typing import Any

from harness.categories import category_of
from harness.events import id_key, stored_id
from harness.faults import client as cf
from harness.faults import env
from harness.launch.cluster import RemoteError
from harness.reference import wire
from harness.reference.paths import socket_path
from harness.scenario.player import Player, StepError, counting, step_kind

__all__ = ["send_reader_fault", "short_id"]



def short_id(rid: str | None) -> str | None:
    """A request id without its padding (harness.faults.client.padded_id): what the history keeps."""
    return None if rid is None else rid.split("#", 1)[0]


def send_reader_fault(pl: Player, s: Any, name: str, path: str, req: wire.Request) -> None:
    """``send`` with fault never_read (the reply is never read: a stalled client until the listener closes the
    connection) or slow_reader (read a byte per recv() in the background; ``wait: {returned: NAME}`` joins it;
    judged as a plain request: it is well-formed, only slow to take its reply)."""
    if s.fault == "never_read":
        peer = cf.never_read(path, req, pl.codec.encode_request)
        pl.peers[name] = [peer]
        if s.hang_up:  # gone mid-write: what the listener does with the rest is the listener's record
            began = cf.hang_up_mid_reply(peer, pl.timeout(None))
            pl.returned(name, "send", began, {"status": None}, fault=s.fault, hang_up=True,
                        error="" if began else "no reply began before the client hung up")
            return
        pl.emit("peer_stalled", step=name, fault=s.fault)
        return
    peer = cf.slow_reader(path, req, pl.codec.encode_request)
    sock = peer.sock
    pl.peers[name] = [peer]
    limit = pl.timeout(s.timeout)

    def read() -> None:
        try:
            reply = cf.read_slowly(sock, limit, pl.codec.decode_reply)
        except OSError as exc:
            pl.returned(name, "send", False, None, fault="none", reader=s.fault, error=f"{type(exc).__name__}: {exc}")
            return
        ok = reply is not None and reply.status != "error"
        value = None if reply is None else {"status": reply.status, "error_type": reply.error_type}
        pl.returned(name, "send", ok, value, fault="none", reader=s.fault,
                    error="" if ok else "no reply (connection closed)" if reply is None
                    else f"{reply.error_type}: {reply.message}")

    pl.background(name, read)


@step_kind("pipeline")
def pipeline(pl: Player, s: Any, name: str) -> None:
    path = pl.proc(s.to).path
    reqs = [wire.Request(cmd=r.cmd, offsets=list(r.offsets), group_id=r.group_id,
                         id=cf.padded_id(f"{name}.{i}", s.reply_size)) for i, r in enumerate(s.requests)]
    frames = [pl.codec.encode_request(r) for r in reqs]
    pl.started(name, "pipeline", n=len(reqs), read_each=s.read_each)
    limit = pl.timeout(s.timeout)

    def gate(n: int) -> None:
        """Request n waits for the n-th hit of each_after's site (counted from its arm)."""
        proc, site, t = pl.armed[s.each_after]
        if pl.c.rec.wait_for(counting(n, lambda e: e.kind == "fault_reached" and e.pid == proc.pid
                                      and e.data.get("site") == site and e.t_ns >= t), limit) is None:
            raise TimeoutError(f"each_after: {s.each_after} ({site} on {proc.label}) was not reached {n}x in {limit}s")

    def run() -> None:
        try:
            replies = cf.pipeline(path, frames, limit, pl.codec.decode_reply, read_each=s.read_each,
                                  gate=None if s.each_after is None else gate)
        except OSError as exc:
            pl.returned(name, "pipeline", False, None, error=f"{type(exc).__name__}: {exc}")
            return
        value = [None if r is None else {"cut": r.got} if isinstance(r, cf.CutReply)
                 else {"id": short_id(r.id), "status": r.status, "error_type": r.error_type} for r in replies]
        want = [short_id(q.id) for q in reqs]
        got = [v["id"] for v in value if v is not None and "id" in v]
        cut = [(want[i], v["cut"]) for i, v in enumerate(value) if v is not None and "cut" in v]
        # once a stop has begun the listener may close the connection instead of reading further: the requests
        # it had not read were never completed frames (stop contract lines 1 and 2), so they may go unanswered;
        # one it decided on (dispatched, or refused shutting_down) it owes a reply (lines 3 and 1)
        stopping = any(category_of(e.data) == "stop" for e in pl.c.rec.events("step_started"))
        unanswered = [q.id or "" for q, v in zip(reqs, value, strict=True) if v is None]
        owed = decided(pl, s.to, unanswered) if stopping and unanswered else []
        lost = 0 if stopping else len(unanswered)
        bad = [v for v in value if v is not None and v.get("status") == "error" and v["error_type"] != "shutting_down"]
        if cut:
            error = f"{cut[0][0]}: its reply was cut after {cut[0][1]} byte(s) (the connection closed mid-frame)"
        elif owed:
            them = "it" if len(owed) == 1 else "them"
            error = (f"{', '.join(owed)}: no reply, though the listener decided on {them} "
                     "(dispatch_started or dispatch_refused recorded; it owes the reply or shutting_down)")
        elif lost:
            error = f"{lost} of {len(reqs)} request(s) got no reply (connection closed)"
        elif got != want[:len(got)]:
            error = f"replies out of order: {got}, sent {want}"
        else:
            error = f"{bad[0]['id']}: {bad[0]['error_type']}" if bad else ""
        pl.returned(name, "pipeline", not error, value, n=len(reqs), error=error)

    pl.background(name, run)


def decided(pl: Player, to: Any, ids: list[str]) -> list[str]:
    """Which of ``ids`` (requests a pipeline got no reply to) the listener of worker ``to`` decided on: recorded a
    ``dispatch_started`` or ``dispatch_refused`` with that id (a target whose events carry no id decides on
    none).  A ping through the worker's control channel first: the channel is ordered, so every event the
    worker recorded before its listener closed the connection is in the history once the ping returns."""
    proc = pl.proc(to)
    try:
        proc.call("ping", timeout=pl.timeout())
    except RemoteError:
        pass  # a worker that is gone has recorded all it will
    seen = {id_key(e.data) for e in pl.c.rec.events() if e.pid == proc.pid
            and e.kind in ("dispatch_started", "dispatch_refused")}  # a padded id is stored as its digest
    return [short_id(i) or "" for i in ids if id_key(stored_id(i)) in seen]


@step_kind("stale_socket")
def stale_socket(pl: Player, s: Any, name: str) -> None:
    c = pl.c
    if s.ipc == c.ipc:
        raise StepError(f"stale_socket: {s.ipc!r} is the run's own instance, whose workers live; name another")
    path = os.fspath(socket_path(s.ipc, s.of.rank, s.of.pp, c.root))
    pl.started(name, "stale_socket", path=path)
    try:
        pid = env.leave_stale_socket(path, s.ipc, s.of.rank, s.of.pp)
    except (OSError, RuntimeError) as exc:
        pl.returned(name, "stale_socket", False, None, path=path, error=str(exc))
        raise StepError(f"stale_socket: {exc}") from None
    pl.returned(name, "stale_socket", True, pid, path=path)


@step_kind("start_listener")
def start_listener(pl: Player, s: Any, name: str) -> None:
    """A throw-away listener in worker ``on``'s process (harness.reference.probe): its start's outcome is this
    step's value (True: started), each stop after it a step ``NAME.stopN`` of kind stop (value: what it
    returned), so stop_result judges both; with ``again``, the second start of the same object is ``NAME.again``
    and its stop ``NAME.again.stop1``."""
    c = pl.c
    at = s.at if s.at is not None else s.on
    ipc = s.ipc or c.ipc
    path = os.fspath(socket_path(ipc, at.rank, at.pp, c.root))
    proc = pl.proc(s.on)
    pl.started(name, "start_listener", path=path, start=s.start)
    try:
        out = proc.call("start_listener", timeout=pl.timeout(), path=path, ipc=ipc, rank=at.rank, pp=at.pp,
                        start=s.start, stops=s.stops, **({"again": True} if s.again else {}),
                        **({"keep": True} if s.keep else {}))
    except RemoteError as exc:
        pl.failed(name, "start_listener", proc, exc, path=path)
        return
    pl.returned(name, "start_listener", True, bool(out["started"]), path=path, start=s.start,
                error_class=out["error_class"], error=out["error"] or "",
                **({"modes": out["modes"]} if out.get("modes") else {}))  # private_paths judges them
    for i, ok in enumerate(out["stops"], 1):
        pl.returned(f"{name}.stop{i}", "stop", True, ok, path=path)
    if s.again:
        again = out["again"]
        pl.returned(f"{name}.again", "start_listener", True, bool(again["started"]), path=path, start=True,
                    error_class=again["error_class"], error=again["error"] or "")
        for i, ok in enumerate(out["again_stops"], 1):
            pl.returned(f"{name}.again.stop{i}", "stop", True, ok, path=path)
