"""The reference target's worker and engine sides (harness.targets.WorkerSide / EngineSide).

A :class:`~harness.reference.variants.Variant` is a target: these wrap its
registry, worker and listener classes for the process roles, so the roles
(harness/launch/roles.py) speak only the plug-in contract.
"""

from __future__ import annotations

import os
from typing import Any

from harness.reference import wire
from harness.reference.listener import ListenerConfig
from harness.reference.paths import OwnerRecord, usage_segment_name
from harness.reference.usage import SHM_DIR, UsageRecord
from harness.reference.worker import WorkerSpec

__all__ = ["ReferenceWorkerSide", "ReferenceEngineSide"]


class ReferenceWorkerSide:
    """One rank of the reference (or a planted-bug variant of it) in a worker process."""

    def __init__(self, variant: Any, spec: dict[str, Any], recorder: Any) -> None:
        self.registry = variant.registry(exit_hook=True, exit_budget=spec.get("exit_budget"), recorder=recorder)
        device = spec.get("device", "cpu")
        if device == "cuda":
            device = f"cuda:{spec.get('rank', 0)}"
        wspec = WorkerSpec(spec["ipc"], rank=spec.get("rank", 0), pp=spec.get("pp", 0), root=spec["root"],
                           config=ListenerConfig(drain_timeout=spec.get("drain_timeout", 5.0)),
                           capacity=spec.get("capacity", 1 << 30), device=device)
        self.worker = variant.worker(wspec, registry=self.registry, listener_cls=variant.listener, recorder=recorder)
        self.path = self.worker.path

    def start(self) -> str:
        return str(self.worker.start().label)

    def stop(self, timeout: float | None = None) -> bool:
        return bool(self.registry.stop_all(timeout))

    def shutdown(self) -> bool:
        return bool(self.worker.shutdown())

    def mapped(self, group_id: int = 0) -> list[int] | None:
        a = self.worker.allocator
        return None if a.torn_down else sorted(a.mapped_offsets(group_id))

    def torn_down(self) -> bool:
        return bool(self.worker.allocator.torn_down)


class ReferenceEngineSide:
    """The engine: owns the /dev/shm usage record (and its owner record) and the client of every rank."""

    def __init__(self, variant: Any, spec: dict[str, Any], recorder: Any) -> None:
        from harness.reference.client import Client, targets_for

        ipc = spec["ipc"]
        shm_dir = spec.get("shm_dir", SHM_DIR)
        self.keep_segment = bool(getattr(variant, "keep_usage_segment", False))
        self.usage = UsageRecord.create(usage_segment_name(ipc), total=spec.get("capacity", 1 << 30),
                                        shm_dir=shm_dir)
        self.owner = os.path.join(shm_dir, usage_segment_name(ipc) + ".owner")
        OwnerRecord.for_self(ipc, "usage").write(self.owner)
        client = getattr(variant, "client", None) or Client
        self.client = client(targets_for(ipc, spec.get("tp", 1), spec.get("pp_size", 1), spec["root"]),
                             timeout=spec.get("ipc_timeout"))
        self.path = str(self.usage.path)

    def map(self, offsets: list[int], group_id: int = 0) -> list[int]:
        return self.client.map(offsets, group_id)

    def unmap(self, offsets: list[int], group_id: int = 0) -> None:
        self.client.unmap(offsets, group_id)

    def kv_tensors_created(self, group_id: int = 0) -> bool:
        return bool(self.client.kv_tensors_created(group_id))

    def broadcast(self, **req: Any) -> dict[str, Any]:
        replies = self.client.broadcast(wire.Request(**req))
        return {label: {"status": r.status, "error_type": r.error_type} for label, r in replies.items()}

    def close(self) -> None:
        self.client.close()
        self.usage.close()
        if not self.keep_segment:
            self.usage.unlink()
        try:
            os.unlink(self.owner)
        except FileNotFoundError:
            pass
