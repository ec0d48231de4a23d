"""The target adapter of tests/thirdparty/listener.py: what makes a listener lastcall did not write a target.

``tests.thirdparty.target:TARGET`` runs the scenario library (``pytest scenarios --lastcall-target
tests.thirdparty.target:TARGET``); its ``variants`` are its own planted bugs, to which the scenarios'
``catches`` names resolve.  It imports only harness.targets.api and harness.events from lastcall.

Its capabilities say what it has: a worker listener on lastcall's framing, the backend.* failpoint sites,
the integration shutdown, and listener events.  What it lacks is declared, not faked: no worker-side
events (so checkers of the worker party are "not judged"), no sites inside its listener, no owner
records, no handshake listener (the scenarios needing those are skipped with the reason).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from harness.events import label
from harness.targets import api
from tests.thirdparty.listener import Backend, Client, ThreadedListener

CAPABILITIES = frozenset({"worker_listener", "wire", "failpoints", "integration_shutdown", "listener_events"})


def socket_path(spec: api.WorkerSpec, rank: int, pp: int) -> str:
    """Where rank ``rank`` of stage ``pp`` serves: under the run's socket root, named by the run."""
    return os.path.join(spec["root"], f"tp-{spec['ipc']}-pp{pp}-r{rank}.sock")


class Worker:
    """api.WorkerSide: one listener and its backend."""

    def __init__(self, listener_cls: type[ThreadedListener], spec: api.WorkerSpec, recorder: api.Recorder) -> None:
        rank, pp = spec.get("rank", 0), spec.get("pp", 0)
        self.path = socket_path(spec, rank, pp)
        self.backend = Backend()
        self.listener = listener_cls(self.path, self.backend, recorder, label=label(pp, rank), rank=rank, pp=pp,
                                     drain_timeout=spec.get("drain_timeout", 5.0))

    def start(self) -> str:
        if self.listener.serving:
            raise RuntimeError(f"{self.listener.label} is still serving: stop it first")
        self.listener.start()
        return self.listener.label

    def stop(self, timeout: float | None = None) -> bool:
        return self.listener.stop(timeout)

    def shutdown(self) -> bool:
        if not self.listener.stop():
            return False  # the backend stays for a retry
        self.backend.teardown()
        return True

    def mapped(self, group_id: int = 0) -> list[int] | None:
        return self.backend.mapped(group_id)

    def torn_down(self) -> bool:
        return self.backend.torn_down


class Engine:
    """api.EngineSide: a client of every worker, one request to each in turn."""

    path = ""  # the engine owns nothing on the machine

    def __init__(self, spec: api.WorkerSpec, recorder: api.Recorder) -> None:
        timeout = spec.get("ipc_timeout") or 10.0
        self.clients = [Client(socket_path(spec, r, p), timeout) for p in range(spec.get("pp_size", 1))
                        for r in range(spec.get("tp", 1))]

    def _all(self, msg: dict[str, Any]) -> list[dict[str, Any]]:
        replies = [c.request(msg) for c in self.clients]
        bad = [r for r in replies if r.get("status") == "error"]
        if bad:
            raise RuntimeError(f"{len(bad)} worker(s) answered {bad[0].get('error_type')}: {bad[0].get('message')}")
        return replies

    def map(self, offsets: list[int], group_id: int = 0) -> list[int]:
        replies = self._all({"cmd": "map_to_kv_tensors", "group_id": group_id, "offsets": offsets})
        return sorted({o for r in replies for o in r.get("newly_mapped_offsets") or ()})

    def unmap(self, offsets: list[int], group_id: int = 0) -> None:
        self._all({"cmd": "unmap_from_kv_tensors", "group_id": group_id, "offsets": offsets})

    def kv_tensors_created(self, group_id: int = 0) -> bool:
        return all(r.get("created") for r in self._all({"cmd": "kv_tensors_created", "group_id": group_id}))

    def close(self) -> None:
        for c in self.clients:
            c.close()


class NoConnTracking(ThreadedListener):
    cancels_reads = False


class TeardownWhileAlive(ThreadedListener):
    drains = False


class TimedJoinTeardown(ThreadedListener):
    keeps_on_timeout = False


class StopFromHandlerDeadlocks(ThreadedListener):
    returns_from_handler = False


@dataclass(frozen=True)
class ThirdPartyTarget:
    """api.Target for the threaded listener (or one of its planted bugs)."""

    name: str
    about: str
    listener: type[ThreadedListener] = ThreadedListener
    capabilities: frozenset[str] = CAPABILITIES
    codec: None = None  # lastcall's reference framing
    handshake_listener: None = None
    variants: dict[str, str] = field(default_factory=dict)
    uses_torch: bool = False  # its processes never import torch: they fork from a server that did not preload it

    def worker_side(self, spec: api.WorkerSpec, recorder: api.Recorder) -> Worker:
        return Worker(self.listener, spec, recorder)

    def engine_side(self, spec: api.WorkerSpec, recorder: api.Recorder) -> Engine:
        return Engine(spec, recorder)


_HERE = "tests.thirdparty.target"
TARGET = ThirdPartyTarget(f"{_HERE}:TARGET", "a thread-per-connection Unix-socket listener (tests/thirdparty)",
                          variants={"no_conn_tracking": f"{_HERE}:NO_CONN_TRACKING",
                                    "teardown_while_alive": f"{_HERE}:TEARDOWN_WHILE_ALIVE",
                                    "timed_join_teardown": f"{_HERE}:TIMED_JOIN_TEARDOWN",
                                    "stop_from_handler_deadlocks": f"{_HERE}:STOP_FROM_HANDLER_DEADLOCKS"})
NO_CONN_TRACKING = replace(TARGET, name=f"{_HERE}:NO_CONN_TRACKING", listener=NoConnTracking, variants={},
                           about="a read in progress at stop is not cancelled: it stays parked until the drain ends")
TEARDOWN_WHILE_ALIVE = replace(TARGET, name=f"{_HERE}:TEARDOWN_WHILE_ALIVE", listener=TeardownWhileAlive, variants={},
                               about="stop tears down and returns True while a handler is inside the backend")
TIMED_JOIN_TEARDOWN = replace(TARGET, name=f"{_HERE}:TIMED_JOIN_TEARDOWN", listener=TimedJoinTeardown, variants={},
                              about="a drain that times out tears down and returns True anyway")
STOP_FROM_HANDLER_DEADLOCKS = replace(TARGET, name=f"{_HERE}:STOP_FROM_HANDLER_DEADLOCKS", variants={},
                                      listener=StopFromHandlerDeadlocks,
                                      about="a stop called from a handler waits out the drain for itself")
