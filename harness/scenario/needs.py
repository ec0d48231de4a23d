"""What target capability a scenario's steps need, made from the step classes (each kind's ``needs``,
harness.scenario.steps) and the two rules that depend on more than a step's kind.  The layers below take the
result as data ({need: capability}: harness.reference.capabilities.missing_capabilities,
harness.targets.missing_for), so a target that lacks one by design has the scenario skipped with the reason."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from harness.reference.capabilities import TARGET_SITES
from harness.scenario.steps import STEP_TYPES, StepBase

__all__ = ["STEP_NEEDS", "ARM_LISTENER_SITE", "kind_needs", "step_needs"]

# An arm on a site inside the listener itself (listener.*, cleanup.*, exit_hook...), not on one that any target's
# processes pass (TARGET_SITES): a target whose listener is not the reference's has no such sites.  A need-key of
# its own, so that the skip reason names it.
ARM_LISTENER_SITE = "arm_listener_site"
# need-key -> capability: each step kind that needs one, and the listener-site arm
STEP_NEEDS: Mapping[str, str] = {**{k: c.needs for k, c in STEP_TYPES.items() if c.needs is not None},
                                 ARM_LISTENER_SITE: "listener_failpoints"}


def kind_needs(kinds: Iterable[str]) -> dict[str, str]:
    """{kind: capability} for those of ``kinds`` that need one."""
    return {k: STEP_NEEDS[k] for k in kinds if k in STEP_NEEDS}


def step_needs(steps: Iterable[StepBase]) -> dict[str, str]:
    """{need-key: capability} of a scenario's steps: their kinds' needs, and arm_listener_site for an arm on a site
    inside the listener; an engine scenario's hold_port needs nothing (it holds a port for the engine)."""
    steps = list(steps)
    needs = kind_needs({step.kind for step in steps})
    if "engine_tree" in needs.values():
        needs.pop("hold_port", None)
    if any(step.kind == "arm" and not step.spec.site.startswith(TARGET_SITES) for step in steps):
        needs[ARM_LISTENER_SITE] = STEP_NEEDS[ARM_LISTENER_SITE]
    return needs
