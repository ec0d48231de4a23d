"""Targets for tests/test_events.py, loaded in the worker processes by module:attribute.

``reference@tests.lc_events_target:ColourfulListener``: the reference listener, also emitting one event with a
key outside harness.events.  ``tests.lc_events_target:BLACK_BOX``: the reference, whose capabilities declare
no listener or worker events.
"""

from __future__ import annotations

from dataclasses import replace

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
