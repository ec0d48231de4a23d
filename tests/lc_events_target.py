"""A listener for tests/test_events.py: the reference's, also emitting one event with a key outside harness.events.

Loaded in the worker processes as ``reference@tests.lc_events_target:ColourfulListener``.
"""

from __future__ import annotations

from harness.reference.listener import WorkerListener


class ColourfulListener(WorkerListener):
    """Announces itself a second time with a key the vocabulary does not declare (``colour``)."""

    def start(self) -> None:
        super().start()
        self.rec.emit("listener_started", listener=self.label, path=str(self.path), rank=self.rank, pp=self.pp,
                      colour="blue")
