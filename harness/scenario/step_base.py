"""The bases of the step models (harness.scenario.steps): what every step kind declares, and the defaults that
the kinds on one run's listener share, so that a kind states only where it differs."""

from __future__ import annotations

from typing import Any, ClassVar

from harness.scenario.fields import Strict

__all__ = ["StepBase", "OnWorker", "OnEngine", "OnHandshake"]


class StepBase(Strict):
    """One step: a mapping with exactly one key, its ``kind``.

    Each kind is declared once, by its class (harness.scenario.steps): ``kind``, its ``category``
    (harness.categories), the ``cast`` whose listener it drives (None: any run plays it), the target capability
    it ``needs`` (None: none of its own; a target that lacks it by design has the scenario skipped with the
    reason, harness.scenario.needs), whether it ``observes_exit`` (it judges how a process exits, so the fast exit
    is off in its run: harness.scenario.exitmode), whether the event mark ``marks`` moves to "now" before it plays
    (a later ``wait: {event}`` looks after it), and its ``example``.  The ``Step`` union,
    :data:`~harness.scenario.steps.STEP_TYPES`, the cast tuples and the needs map are made from these classes;
    the player registers how each is played (``@step_kind(kind)``, harness.scenario.player)."""

    kind: ClassVar[str]
    category: ClassVar[str]
    cast: ClassVar[str | None] = None
    needs: ClassVar[str | None] = None
    observes_exit: ClassVar[bool] = False
    marks: ClassVar[bool] = True
    # the step in a short list of steps, written once here: docs/steps.md shows it and a test loads it
    # (harness.scenario.stepdocs wraps it in a scenario) through the loader
    example: ClassVar[str]

    @property
    def spec(self) -> Any:
        """The step's value: its parameter model, or the name it was given."""
        return getattr(self, self.kind)

    @property
    def name(self) -> str | None:
        """The step's ``as:`` name, if any."""
        return getattr(self.spec, "as_", None)


class OnWorker(StepBase):
    """A step on the worker listener's run (cast ``worker``): a handshake-only target skips its scenarios."""

    cast: ClassVar[str | None] = "worker"
    needs: ClassVar[str | None] = "worker_listener"


class OnEngine(StepBase):
    """A step on a real engine's tree (cast ``engine``): a listener target skips its scenarios."""

    cast: ClassVar[str | None] = "engine"
    needs: ClassVar[str | None] = "engine_tree"


class OnHandshake(StepBase):
    """A step on a handshake listener's run (cast ``handshake``): a worker-only target skips its scenarios."""

    cast: ClassVar[str | None] = "handshake"
    needs: ClassVar[str | None] = "handshake_listener"
