"""The contract checks' rig for any target: its worker sides, built as a scenario's workers build them.

:class:`TargetRig` is :class:`~harness.contract.rig.Rig` for a :class:`UnderCheck` (a target, or one of
its planted bugs, loaded by name): each ``worker()`` is ``target.worker_side(spec, recorder)``, started in
this process, serving on its own ``path``; its ``stop`` is the one the checks call.  What the target API
has no seam for (a registry, the reference's own cleanup sites) stays the reference rig's, and the checks
that need it are not applicable to a target (harness.contract.of_target says which and why).
:func:`open_rig` picks the rig for what a check was given.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import failpoints
from harness.contract.rig import MiB, Pending, Rig, collect
from harness.history import Recorder
from harness.reference.variants import Variant
from harness.timeouts import scaled

__all__ = ["UnderCheck", "TargetRig", "open_rig"]


@dataclass(frozen=True)
class UnderCheck:
    """A target the contract checks run against: ``name`` as the rows print it, ``target`` the loaded object."""

    name: str
    target: Any


class TargetRig(Rig):
    """Worker sides of one target under one root, with a recorder for the history."""

    def __init__(self, under: UnderCheck, root: Path, *, drain_timeout: float = 5.0, ipc: str = "c") -> None:
        # Rig.__init__ builds a reference registry: a target has none, so only its other parts are set here
        self.under, self.target = under, under.target
        self.root, self.ipc, self.drain_timeout = root, ipc, drain_timeout
        self.rec = Recorder(role="worker")
        self.taken = collect(self.rec)
        self.workers: list[Any] = []
        self.socks: list[socket.socket] = []
        self._pending: list[Pending] = []
        failpoints.set_observer(self.rec.emit)

    def worker(self, rank: int = 0, pp: int = 0, backend: Any = None) -> Any:
        if backend is not None:
            raise TypeError("a target's backend is its own: the target API has no seam to replace it")
        spec = {"ipc": self.ipc, "root": os.fspath(self.root), "rank": rank, "pp": pp, "tp": 2, "pp_size": 2,
                "drain_timeout": self.drain_timeout, "exit_budget": None, "capacity": 64 * MiB, "device": "cpu",
                "ipc_timeout": scaled(), "variant": self.under.name}
        w = self.target.worker_side(spec, self.rec)
        self.workers.append(w)
        w.start()
        return w

    def listener(self, w: Any) -> Any:
        return w  # a worker side's stop is the listener's (harness.targets.api.WorkerSide)

    def stop_all(self) -> bool:
        return all([w.stop() for w in self.workers])  # every one is stopped, whatever the first returned

    def registered(self, listener: Any) -> bool:
        return True  # a target has no registry of its own the check can read: its path is what is asserted

    def torn_down(self, w: Any) -> bool:
        return bool(w.torn_down())

    def tidy(self, w: Any) -> None:
        parent = Path(w.path).parent
        if parent != self.root and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()

    def close(self) -> None:
        """Release every failpoint, stop every worker side (a planted bug's stop may fail: it is retried once)."""
        failpoints.reset()
        for s in self.socks:
            s.close()
        for w in self.workers:
            if not w.stop(scaled()):
                w.stop(scaled())
        for p in self._pending:
            p._done.wait(scaled())
        failpoints.set_observer(None)


def open_rig(variant: Variant | UnderCheck, root: Path, **kw: Any) -> Rig:
    """The rig for what a check runs against: a reference variant's, or a target's worker sides."""
    if isinstance(variant, UnderCheck):
        return TargetRig(variant, root, **kw)
    return Rig(variant, root, **kw)
