"""Making and driving the explorer's state machines: one class per variant, a trace replayed without Hypothesis."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.explore.machine import ListenerMachine
from harness.names import temp_root
from harness.reference.variants import Variant

__all__ = ["machine_for", "run_steps"]



def run_steps(machine: type[ListenerMachine], steps: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Drive one example of ``machine`` through ``steps`` in order, without Hypothesis.

    Each step is a rule's name and its arguments (``("park", {"page": 0, "queued": True})``;
    ``("send_body", {"name": "h1"})`` finishes that connection).  The invariants
    are checked after every step, as Hypothesis does; the caller keeps each
    step's precondition.  Raises :class:`ExplorationFailure` where the contract breaks.
    """
    m = machine()
    try:
        m.stop_contract()
        for kind, args in steps:
            if kind == "send_body":
                m.finish(**args)
            else:
                getattr(m, kind)(**args)
            m.stop_contract()
    finally:
        m.teardown()


def machine_for(variant: Variant, root_factory: Callable[[], Path] = temp_root, *,
                replace_after_failed_cleanup: bool = False) -> type[ListenerMachine]:
    """A state machine class exploring ``variant``'s lifecycle; its ``TestCase`` is a test.

    ``root_factory`` makes each example's private socket root (a short directory,
    removed at the example's end).  ``replace_after_failed_cleanup`` adds an
    interleaving where the reference itself is known to break the contract
    (:data:`REFERENCE_GAPS`): the socket file replaced after a failed cleanup
    closed the server socket (the retry must not unlink the replacement).
    """
    attrs: dict[str, Any] = {"variant": variant, "root_factory": staticmethod(root_factory),
                             "replace_after_failed_cleanup": replace_after_failed_cleanup, "__module__": __name__,
                             "__doc__": f"Lifecycle explorer over the {variant.name!r} variant."}
    return type(f"Explore_{variant.name}", (ListenerMachine,), attrs)
