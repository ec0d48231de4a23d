"""What a target can do, and what each scenario step kind needs of it: a target that lacks a capability by
design (a worker-only listener has no handshake side, kvcached's listener has no failpoints inside it) has the
scenarios that need it skipped with the reason, never failed.  The reference and its planted bugs have
:data:`WORKER_CAPABILITIES` (harness.reference.variants); each other target declares its own (harness.targets)."""

from __future__ import annotations

from typing import Any

__all__ = ["WORKER_CAPABILITIES", "STEP_NEEDS", "TARGET_SITES", "step_needs", "missing_capabilities"]

WORKER_CAPABILITIES = frozenset({"worker_listener", "failpoints", "listener_failpoints", "wire",
                                 "integration_shutdown", "owner_records", "listener_events", "worker_events"})
# Which capability each scenario step kind needs; a target that lacks one by design is skipped with the reason.
STEP_NEEDS: dict[str, str] = {"hold_port": "handshake_listener", "send": "wire", "idle": "worker_listener",
                              "flood": "worker_listener", "arm": "failpoints", "shutdown": "integration_shutdown"}
for _kind in ("call", "stop", "restart", "remove", "replace", "workload", "exit"):
    STEP_NEEDS.setdefault(_kind, "worker_listener")  # worker scenarios skip on a handshake-only target
for _kind in ("handshake_start", "handshake", "hammer", "stop_hammer", "malformed_handshake", "handshake_shutdown",
              "cycle"):
    STEP_NEEDS.setdefault(_kind, "handshake_listener")  # handshake scenarios skip on a worker-only target
# an arm on a site inside the listener itself (listener.*, cleanup.*, exit_hook...), not a backend call or the
# process: a target whose listener is not the reference's has no such sites (harness.targets: capabilities)
for _kind in ("engine_request", "engine_signal", "wait_gone", "engine_restart", "engine_start"):
    STEP_NEEDS.setdefault(_kind, "engine_tree")  # engine scenarios skip on a listener target (pause needs nothing)
STEP_NEEDS["arm_listener_site"] = "listener_failpoints"
STEP_NEEDS["stress"] = "listener_failpoints"  # it arms sites inside the listener (harness.scenario.stress)
STEP_NEEDS["ctl"] = "owner_records"  # lastcall ctl reads the reference's owner records beside its sockets
STEP_NEEDS.update({"pipeline": "wire", "stale_socket": "owner_records",  # a predecessor's record, as the reference's
                   "start_listener": "owner_records"})  # a throw-away listener of the reference's own kind (probe)
TARGET_SITES = ("backend.", "process.")  # sites any target's processes pass (the gated backend, the process role)


def step_needs(steps: Any) -> set[str]:
    """The need-keys of a scenario's steps: their kinds, plus arm_listener_site for listener-internal sites."""
    kinds = {step.kind for step in steps}
    if any(STEP_NEEDS.get(k) == "engine_tree" for k in kinds):  # an engine scenario holds a port for the engine
        kinds.discard("hold_port")
    if any(step.kind == "arm" and not step.spec.site.startswith(TARGET_SITES) for step in steps):
        kinds.add("arm_listener_site")
    return kinds


def missing_capabilities(variant: Any, step_kinds: set[str]) -> list[str]:
    """What of ``step_kinds`` the target ``variant`` cannot do, as 'step (capability)' strings."""
    caps = frozenset(getattr(variant, "capabilities", frozenset()))
    return sorted(f"{kind} (needs {STEP_NEEDS[kind]})" for kind in step_kinds
                  if kind in STEP_NEEDS and STEP_NEEDS[kind] not in caps)
