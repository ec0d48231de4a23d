"""Targets for tests/test_events.py, loaded in the worker processes by module:attribute.

``reference@tests.lc_events_target:ColourfulListener``: the reference listener, also emitting one event with a
key outside harness.events.  ``tests.lc_events_target:BLACK_BOX``: the reference, whose capabilities declare
no listener or worker events.  ``tests.lc_events_target:CHATTY``: a listener emitting a kind of its own, which
its target declares.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from harness.events import EventKind
from harness.reference.listener import WorkerListener
from harness.reference.variants import VARIANTS, Variant


class ColourfulListener(WorkerListener):
    """Announces itself a second time with a key the vocabulary does not declare (``colour``)."""

    def start(self) -> None:
        super().start()
        self.rec.emit("listener_started", listener=self.label, path=str(self.path), rank=self.rank, pp=self.pp,
                      colour="blue")


def _black_box() -> Variant:
    ref = VARIANTS["reference"]
    return replace(ref, name="tests.lc_events_target:BLACK_BOX", bug="the reference, declaring it emits no events",
                   capabilities=ref.capabilities - {"listener_events", "worker_events"})


BLACK_BOX = _black_box()  # a target whose capabilities declare its listener and worker side unobserved


COLOUR_CHOSEN = EventKind("colour_chosen", "listener", "the listener picked its colour (a kind of this target's own)",
                          {"listener": "str", "colour": "str"})


class ChattyListener(WorkerListener):
    """Emits a kind of its own as it is stopped; its target declares it."""

    def stop(self, timeout: float | None = None) -> bool:
        self.rec.emit("colour_chosen", listener=self.label, colour="blue")
        return super().stop(timeout)


@dataclass(frozen=True)
class ChattyVariant(Variant):
    """The reference with ChattyListener, declaring the kind it adds (``events``, as any target may)."""

    events: tuple[EventKind, ...] = (COLOUR_CHOSEN,)


CHATTY = ChattyVariant(**{**{f.name: getattr(VARIANTS["reference"], f.name) for f in fields(Variant)},
                          "name": "tests.lc_events_target:CHATTY", "listener": ChattyListener})
