"""Backends a listener dispatches into: the allocator, and a no-op for benchmarks."""

from __future__ import annotations

from harness.errors import BadRequest
from harness.reference import wire
from harness.reference.allocator import KVAllocator

__all__ = ["AllocatorBackend", "NoopBackend"]


class AllocatorBackend:
    """Maps each wire command onto the reference :class:`KVAllocator`.

    Allocator errors propagate as BackendError subclasses; the listener turns
    them into error replies with their ``error_type`` and ``phase``.
    """

    def __init__(self, allocator: KVAllocator) -> None:
        self.allocator = allocator

    def handle(self, req: wire.Request) -> wire.Reply:
        a = self.allocator
        cmd = req.cmd
        if cmd == "kv_tensors_created":
            return wire.Reply(status="success", created=a.kv_tensors_created(req.group_id))
        if cmd == "map_to_kv_tensors":
            return wire.Reply(status="success", newly_mapped_offsets=a.map(req.group_id, req.offsets))
        if cmd == "unmap_from_kv_tensors":
            a.unmap(req.group_id, req.offsets)
            return wire.Reply(status="success")
        if not req.transaction_id:
            raise BadRequest(f"{cmd} needs a transaction_id (a non-empty str)", phase=_phase(cmd))
        if cmd == "prepare_unmap_from_kv_tensors":
            a.prepare_unmap(req.group_id, req.offsets, req.transaction_id)
            if req.commit:
                a.commit_unmap(req.transaction_id)
                return wire.Reply(status="committed")
            return wire.Reply(status="prepared")
        if cmd == "commit_unmap_from_kv_tensors":
            a.commit_unmap(req.transaction_id)
            return wire.Reply(status="committed")
        a.abort_unmap(req.transaction_id)
        return wire.Reply(status="aborted")


def _phase(cmd: str) -> str:
    return "commit" if cmd.startswith("commit") else "abort" if cmd.startswith("abort") else "prepare"


class NoopBackend:
    """Answers every request with a plausible success and touches nothing.

    The figures in the notes for kvcached were taken with its VMM calls stubbed
    out like this, so the listener's own cost dominates.
    """

    def handle(self, req: wire.Request) -> wire.Reply:
        if req.cmd == "kv_tensors_created":
            return wire.Reply(status="success", created=True)
        if req.cmd == "map_to_kv_tensors":
            return wire.Reply(status="success", newly_mapped_offsets=list(req.offsets))
        if req.cmd == "prepare_unmap_from_kv_tensors":
            return wire.Reply(status="committed" if req.commit else "prepared")
        if req.cmd == "commit_unmap_from_kv_tensors":
            return wire.Reply(status="committed")
        if req.cmd == "abort_unmap_from_kv_tensors":
            return wire.Reply(status="aborted")
        return wire.Reply(status="success")
