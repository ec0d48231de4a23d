"""A run of the handshake side channel: an engine owning a handshake listener, and a peer engine."""

from __future__ import annotations

from typing import Any

from harness.launch.cluster import Proc
from harness.launch.judged import JudgedCluster
from harness.probes.model import Snapshot

__all__ = ["HandshakeCluster"]


class HandshakeCluster(JudgedCluster):
    """``engine`` is the listener's process (role hs_engine); ``peer`` handshakes with it (role hs_peer).

    ``variant`` names a handshake variant (harness.reference.handshake_variants).
    """

    def _specs(self) -> list[dict[str, Any]]:
        return [self._spec("hs_engine", 0, 0), self._spec("hs_peer", 0, 0)]

    @property
    def peer(self) -> Proc:
        return self.workers[0]

    def snapshot(self, label: str, ports: list[int]) -> Snapshot:
        """A mid-run snapshot (processes alive) with a trial bind of ``ports``; kept under ``label``."""
        from harness.probes.snapshot import for_cluster

        snap = for_cluster(self, label, ports=ports)
        self.snapshots[label] = snap
        return snap
