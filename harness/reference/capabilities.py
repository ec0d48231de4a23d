"""What a target can do: a target that lacks a capability by design (a worker-only listener has no handshake side,
kvcached's listener has no failpoints inside it) has the scenarios that need it skipped with the reason, never
failed.  The reference and its planted bugs have :data:`WORKER_CAPABILITIES` (harness.reference.variants); each
other target declares its own (harness.targets).  What each step kind needs is declared by its class, on the
scenario side (harness.scenario.needs), and comes here as data."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["WORKER_CAPABILITIES", "TARGET_SITES", "missing_capabilities"]

WORKER_CAPABILITIES = frozenset({"worker_listener", "failpoints", "listener_failpoints", "wire",
                                 "integration_shutdown", "owner_records", "listener_events", "worker_events"})
TARGET_SITES = ("backend.", "process.")  # sites any target's processes pass (the gated backend, the process role)


def missing_capabilities(variant: Any, needs: Mapping[str, str]) -> list[str]:
    """What of ``needs`` ({need-key: capability}, harness.scenario.needs.step_needs) the target ``variant`` cannot
    do, as 'step (needs capability)' strings."""
    caps = frozenset(getattr(variant, "capabilities", frozenset()))
    return sorted(f"{kind} (needs {need})" for kind, need in needs.items() if need not in caps)
