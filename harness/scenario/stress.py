"""The ``stress:`` step: seeded rounds of clients, requests and stops that widen the listener's racing points.

::

    - stress: {seed: 7, clients: 8, requests: 120, stops: 5, as: storm}

**The schedule** is a pure function of the seed and the step's parameters (:func:`schedule`): one round per
stop; each round widens one racing point (the seed orders ``points`` so that each comes once per cycle) with a
failpoint ``delay`` of a length the seed picks between ``min_delay`` and ``max_delay``, runs a number of client
threads the seed picks (each with its own seed: new connection or kept-alive, whole frame or split in two),
lets ``warm`` replies through, then stops the listener inside the widened window; every round after the first
begins with a restart.  The schedule is recorded as one ``stress_schedule`` event before anything plays, and
each round's outcome as a ``stress_round`` event: replaying the seed (the same file, or ``lastcall replay`` of
its report) records the same schedule.

**The racing points** (sites of harness.reference.listener and of its request path, harness.reference.serving,
each inside the lock the reference takes there):

* ``dispatch``: ``listener.dispatch_decided``, between the dispatch decision and the dispatch; a stop begins
  in the window.  Lost by a dispatch decision without the lock: ``no_late_dispatch``.
* ``frame``: ``listener.frame_completing``, between the frame-completion check and the queueing; a stop
  cancels that connection in the window.  Lost without the lock: ``stop_snapshot_exact`` (answered after its
  read was cancelled).
* ``snapshot``: ``listener.stop_snapshot``, stop itself, between its snapshot of the connections and their
  cancellation; the harness completes the frames of connections it holds half-sent in the window (the
  round's other clients are done by then, so that nothing else takes the serving thread).  Lost by a
  frame-completion decision without the lock: ``stop_snapshot_exact``.
* ``accept``: ``listener.accept_decided``, between the accept decision and the registration of the
  connection; a stop begins in the window.  Lost without the lock: ``stop_snapshot_exact`` (accepted after
  stop began).
* ``concurrent_stops``: ``cleanup.unlink``, inside the first stop's teardown; a second stop comes in the
  window (the seed may park a handler in the backend first, a pause released once both stops drain).  Lost
  by a teardown without its lock: ``teardown_once``.

The reference holds its lock through each window, so the stop (or the serving thread) waits and every
checker stays quiet: a delay is the fault, never a synchronisation; every wait is on a failpoint hit, an
event or a return, with ``timeout`` as its safety net.  The step's own assertion: a client sees only
success until the round's first stop is issued, and only success, ``shutting_down`` or a close after it; any
other outcome fails the step (StepError).
"""

from __future__ import annotations

import random
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from harness.faults import client as cf
from harness.reference import wire
from harness.scenario.player import Player, StepError, arm, counting, release, step_kind, wait
from harness.scenario.worker_steps import restart, stop

__all__ = ["schedule", "SITES"]

SITES = {"dispatch": "listener.dispatch_decided", "frame": "listener.frame_completing",
         "snapshot": "listener.stop_snapshot", "accept": "listener.accept_decided",
         "concurrent_stops": "cleanup.unlink"}
PARK_SITE = "backend.kv_tensors_created"


class _Obj:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def schedule(seed: int, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The rounds a seed plays: a pure function of the seed and the step's parameters (Stress.schedule_params)."""
    rng = random.Random(seed)
    stops, points = int(params["stops"]), list(params["points"])
    lo, hi = round(params["min_delay"] * 1000), round(params["max_delay"] * 1000)
    share, extra = divmod(int(params["requests"]), stops)
    order: list[str] = []
    rounds = []
    for i in range(stops):
        if not order:
            order = rng.sample(points, len(points))
        point = order.pop(0)
        requests = share + (1 if i < extra else 0)
        clients = rng.randint(1, int(params["clients"]))
        rounds.append({
            "round": i, "point": point, "site": SITES[point], "delay_ms": rng.randint(lo, hi),
            "clients": clients, "requests": requests, "warm": rng.randint(0, requests // 2),
            "fresh": rng.choice((0.25, 0.5, 1.0)), "split": rng.choice((0.0, 0.5)),
            "held": rng.randint(1, 4) if point == "snapshot" else 0,
            "park": point == "concurrent_stops" and rng.random() < 0.5,
            "client_seeds": [rng.randrange(1 << 32) for _ in range(clients)],
        })
    return rounds


@dataclass
class _Tally:
    """What the clients of one round saw, and when the round's first stop was issued."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    counts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "refused": 0, "closed": 0, "bad": 0})
    bad: list[str] = field(default_factory=list)
    stop_ns: int = 0  # 0: no stop issued yet
    over: threading.Event = field(default_factory=threading.Event)

    def note(self, outcome: str, why: str = "") -> None:
        with self.cond:
            if outcome in ("refused", "closed") and not self.stop_ns:
                outcome, why = "bad", f"{outcome} before any stop was issued ({why})"
            self.counts[outcome] += 1
            if outcome == "bad" and len(self.bad) < 5:
                self.bad.append(why)
            self.cond.notify_all()

    def wait_replies(self, n: int, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: sum(self.counts.values()) >= n, timeout)


def _exchange(sock: socket.socket, data: bytes, split: bool, timeout: float) -> wire.Reply | None:
    sock.settimeout(timeout)
    if split:  # the frame completes on a later read than the one that started it
        cut = max(1, len(data) // 2)
        sock.sendall(data[:cut])
        sock.sendall(data[cut:])
    else:
        sock.sendall(data)
    try:
        return wire.decode_reply(wire.recv_frame(sock))
    except (wire.PeerClosed, ConnectionResetError, BrokenPipeError):
        return None


def _client(pl: Player, path: str, name: str, cseed: int, budget: int, rnd: dict[str, Any], tally: _Tally,
            timeout: float) -> None:
    rng = random.Random(cseed)
    sock: socket.socket | None = None
    try:
        for n in range(budget):
            if tally.over.is_set():
                return
            if sock is None or rng.random() < rnd["fresh"]:
                if sock is not None:
                    sock.close()
                try:
                    sock = cf.connect(path, timeout)
                except OSError as exc:  # the listener is gone (stopped): this client is done
                    sock = None
                    tally.note("closed", f"connect: {exc}")
                    return
            req = wire.Request(cmd="kv_tensors_created", id=f"{name}.{n}")
            try:
                reply = _exchange(sock, pl.codec.encode_request(req), rng.random() < rnd["split"], timeout)
            except TimeoutError:
                tally.note("bad", f"{req.id}: no reply within {timeout}s")
                return
            except OSError as exc:
                reply = None
                tally.note("closed", f"{req.id}: {exc}")
                sock.close()
                sock = None
                continue
            if reply is None:
                tally.note("closed", f"{req.id}: closed")
                sock.close()
                sock = None
            elif reply.status == "success" and reply.id == req.id:
                tally.note("ok")
            elif reply.error_type == "shutting_down":
                tally.note("refused", str(req.id))
            else:
                tally.note("bad", f"{req.id}: {reply.status} {reply.error_type} {reply.message} (id {reply.id})")
    finally:
        if sock is not None:
            sock.close()


def _events(pl: Player, kind: str, pid: int, after: int, n: int, timeout: float) -> None:
    if pl.c.rec.wait_for(counting(n, lambda e: e.kind == kind and e.pid == pid), timeout, after=after) is None:
        raise StepError(f"stress: fewer than {n} {kind} event(s) from pid {pid} in {timeout}s")


def _round(pl: Player, s: Any, name: str, rnd: dict[str, Any]) -> dict[str, Any]:
    i, point, limit = rnd["round"], rnd["point"], pl.timeout(s.timeout)
    proc = pl.proc(s.on)
    tag = f"{name}_r{i}"
    if i:
        restart(pl, _Obj(on=s.on), f"{tag}_restart")
        wait(pl, _Obj(what="returned", returned=f"{tag}_restart", timeout=s.timeout), name)
    path = proc.path
    tally = _Tally()
    threads = [threading.Thread(target=_client, name=f"lastcall-stress-{tag}-c{k}", daemon=True,
                                args=(pl, path, f"{tag}c{k}", cseed, rnd["requests"] // rnd["clients"] + 1, rnd,
                                      tally, limit)) for k, cseed in enumerate(rnd["client_seeds"])]
    for t in threads:
        t.start()
    held: list[cf.Peer] = []
    extra: list[threading.Thread] = []  # the harness's own one-request clients (trigger, parked handler)
    stops = [f"{tag}_stop"]
    site_arm, delay = f"{tag}_widen", rnd["delay_ms"] / 1000
    try:
        if not tally.wait_replies(rnd["warm"], limit):
            raise StepError(f"stress round {i}: the clients got fewer than {rnd['warm']} replies in {limit}s")
        if point == "snapshot":  # the other clients finish first: nothing else may take the serving thread
            for t in threads:
                t.join(limit)
            mark = pl.c.mark()
            for k in range(rnd["held"]):
                req = wire.Request(cmd="kv_tensors_created", id=f"{tag}h{k}")
                held.append(cf.stall_mid_body(path, req, pl.codec.encode_request))
            _events(pl, "frame_started", proc.pid, mark, rnd["held"], limit)
        arm(pl, _Obj(on=s.on, site=rnd["site"], action="delay", count=1, delay=delay), site_arm)
        if point == "concurrent_stops":
            if rnd["park"]:
                arm(pl, _Obj(on=s.on, site=PARK_SITE, action="pause", count=1, delay=0.0), f"{tag}_park")
                extra.append(_one(pl, path, f"{tag}park", {"fresh": 1.0, "split": 0.0}, tally, limit))
                wait(pl, _Obj(what="reached", reached=f"{tag}_park", hits=1, timeout=s.timeout), name)
            mark = pl.c.mark()
            _issue_stop(pl, s, stops[0], tally)
            stops.append(f"{tag}_stop2")
            if rnd["park"]:  # both stops drain the parked handler, then race to tear down
                _events(pl, "drain_started", proc.pid, mark, 1, limit)
                _issue_stop(pl, s, stops[1], tally)
                _events(pl, "drain_started", proc.pid, mark, 2, limit)
                release(pl, f"{tag}_park", name)
                wait(pl, _Obj(what="reached", reached=site_arm, hits=1, timeout=s.timeout), name)
            else:
                wait(pl, _Obj(what="reached", reached=site_arm, hits=1, timeout=s.timeout), name)
                _issue_stop(pl, s, stops[1], tally)
        elif point == "snapshot":
            _issue_stop(pl, s, stops[0], tally)
            wait(pl, _Obj(what="reached", reached=site_arm, hits=1, timeout=s.timeout), name)
            for peer in held:  # the frames complete while stop holds its snapshot
                peer.finish()
        else:
            # a connection of the harness's own hits the site for sure (the other clients may have finished)
            extra.append(_one(pl, path, f"{tag}t", {"fresh": 1.0, "split": rnd["split"]}, tally, limit))
            wait(pl, _Obj(what="reached", reached=site_arm, hits=1, timeout=s.timeout), name)
            _issue_stop(pl, s, stops[0], tally)
        for stop_name in stops:
            wait(pl, _Obj(what="returned", returned=stop_name, timeout=s.timeout), name)
    finally:  # a failed wait too: no client of the round outlives it
        tally.over.set()
        for t in threads + extra:  # each ends with its reply or its close, within the safety net
            t.join(limit)
        for peer in held:
            peer.close()
    out = {"round": i, "point": point, "clients": dict(tally.counts), "stops": stops}
    pl.emit("stress_round", step=name, **out)
    if tally.bad:
        raise StepError(f"stress round {i} ({point}): {tally.counts['bad']} client outcome(s) the contract "
                        f"does not allow: {'; '.join(tally.bad)}")
    return out


def _one(pl: Player, path: str, name: str, mix: dict[str, Any], tally: _Tally, limit: float) -> threading.Thread:
    """One client of one request, started at once."""
    t = threading.Thread(target=_client, name=f"lastcall-stress-{name}", daemon=True,
                         args=(pl, path, name, 0, 1, mix, tally, limit))
    t.start()
    return t


def _issue_stop(pl: Player, s: Any, stop_name: str, tally: _Tally) -> None:
    with tally.cond:
        tally.stop_ns = tally.stop_ns or time.monotonic_ns()
    stop(pl, _Obj(on=s.on, timeout=None), stop_name)


@step_kind("stress")
def stress(pl: Player, s: Any, name: str) -> None:
    seed = s.seed if s.seed is not None else (pl.item.scenario.seed or 0)
    rounds = schedule(seed, s.schedule_params())
    pl.emit("stress_schedule", step=name, seed=seed, rounds=rounds)
    pl.started(name, "stress", seed=seed)
    results = [_round(pl, s, name, rnd) for rnd in rounds]
    pl.returned(name, "stress", True, results, seed=seed)
