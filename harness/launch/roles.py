"""The role mains of a forked child: a worker (listener + allocator) and an engine (client + usage record)."""

from __future__ import annotations

import os
from typing import Any

from harness import failpoints
from harness.launch.child import SHUTDOWN_TRIES, ControlClient, ExitRequest, process_resources
from harness.reference import wire
from harness.reference.listener import ListenerConfig
from harness.reference.paths import OwnerRecord, usage_segment_name
from harness.reference.usage import SHM_DIR, UsageRecord
from harness.reference.variants import load_variant
from harness.reference.worker import WorkerSpec

__all__ = ["worker_main", "engine_main"]


def worker_main(spec: dict[str, Any], ctl: ControlClient, exit_req: ExitRequest) -> int:
    """Serve one rank until asked to end; shut down by the contract; return."""
    variant = load_variant(spec.get("variant", "reference"))
    registry = variant.registry(exit_hook=True, exit_budget=spec.get("exit_budget"), recorder=ctl)
    device = spec.get("device", "cpu")
    if device == "cuda":
        device = f"cuda:{spec.get('rank', 0)}"
    wspec = WorkerSpec(spec["ipc"], rank=spec.get("rank", 0), pp=spec.get("pp", 0), root=spec["root"],
                       config=ListenerConfig(drain_timeout=spec.get("drain_timeout", 5.0)),
                       capacity=spec.get("capacity", 1 << 30), device=device)
    worker = variant.worker(wspec, registry=registry, listener_cls=variant.listener, recorder=ctl)
    ctl.emit("process_resources", when="before_start", **process_resources())
    worker.start()
    ctl.handlers.update({
        "shutdown": worker.shutdown,
        "stop": lambda timeout=None: registry.stop_all(timeout),
        "mapped": lambda group_id=0: sorted(worker.allocator.mapped_offsets(group_id))
        if not worker.allocator.torn_down else None,
        "torn_down": lambda: worker.allocator.torn_down,
        "restart": lambda: worker.start().label,
        "stop_in_handler": lambda site="backend.kv_tensors_created": _stop_in_handler(ctl, registry, site),
    })
    ctl.send({"t": "ready", "path": worker.path})
    exit_req.wait()
    ctl.emit("exit_requested", reason=exit_req.reason, shutdown=exit_req.shutdown)
    stopped = False
    if exit_req.shutdown:
        for _ in range(SHUTDOWN_TRIES):
            if worker.shutdown():
                stopped = True
                break
    ctl.emit("process_resources", when="after_shutdown" if stopped else "at_exit", **process_resources())
    failpoints.hit("process.exit")
    failpoints.hit("process.exit")
    ctl.emit("main_returned", reason=exit_req.reason)
    return 0


def _stop_in_handler(ctl: ControlClient, registry: Any, site: str) -> str:
    """Environment fault: the next handler to hit ``site`` calls stop on its own listener (from the
    serving thread). Its result and duration become a ``stop_from_handler_returned`` event."""
    import time

    def stop_here() -> None:
        t0 = time.monotonic()
        ok = registry.stop_all()
        ctl.emit("stop_from_handler_returned", ok=ok, seconds=time.monotonic() - t0)

    failpoints.arm(site, "call", count=1, fn=stop_here)
    return site


def engine_main(spec: dict[str, Any], ctl: ControlClient, exit_req: ExitRequest) -> int:
    """Own the usage record and drive the workers with the client until asked to end."""
    from harness.reference.client import Client, targets_for

    ipc = spec["ipc"]
    shm_dir = spec.get("shm_dir", SHM_DIR)
    usage = UsageRecord.create(usage_segment_name(ipc), total=spec.get("capacity", 1 << 30), shm_dir=shm_dir)
    owner = os.path.join(shm_dir, usage_segment_name(ipc) + ".owner")
    OwnerRecord.for_self(ipc, "usage").write(owner)
    client = Client(targets_for(ipc, spec.get("tp", 1), spec.get("pp_size", 1), spec["root"]),
                    timeout=spec.get("ipc_timeout"))

    def map_(offsets: list[int], group_id: int = 0) -> list[int]:
        return client.map(offsets, group_id)

    def unmap(offsets: list[int], group_id: int = 0) -> None:
        client.unmap(offsets, group_id)

    def broadcast(**req: Any) -> dict[str, Any]:
        replies = client.broadcast(wire.Request(**req))
        return {label: {"status": r.status, "error_type": r.error_type} for label, r in replies.items()}

    ctl.handlers.update({"map": map_, "unmap": unmap, "kv_tensors_created": client.kv_tensors_created,
                         "broadcast": broadcast})
    ctl.send({"t": "ready", "path": usage.path})
    try:
        exit_req.wait()
        ctl.emit("exit_requested", reason=exit_req.reason, shutdown=exit_req.shutdown)
    finally:
        client.close()
        usage.close()
        if not load_variant(spec.get("variant", "reference")).keep_usage_segment:
            usage.unlink()
        try:
            os.unlink(owner)
        except FileNotFoundError:
            pass
    failpoints.hit("process.exit")
    ctl.emit("main_returned", reason=exit_req.reason)
    return 0
