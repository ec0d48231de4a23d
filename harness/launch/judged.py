"""A cluster whose run is judged by checkers: what the ``lastcall_cluster`` fixture gives any test.

::

    def test_my_shutdown(lastcall_cluster):
        c = lastcall_cluster(tp=2)               # started; snapshots taken before start
        ...                                      # drive it
        v = c.verdicts("no_late_dispatch", "no_leftover_paths", "no_orphan_processes")
        assert all(x.ok for x in v), v

``verdicts()`` closes the cluster if it is still running (taking the "after"
snapshot once every process is reaped, before anything is cleaned up), then
judges the run's history and snapshots with the named checkers.  ``cast="handshake"`` gives an engine
owning a handshake listener and its peer (``c.peer``) instead of workers (harness.launch.parts).
"""

from __future__ import annotations

from typing import Any

from harness.checkers import RunRecord, Verdict, judge_all
from harness.launch.cluster import Cluster, RunOutcome
from harness.launch.snapshots import for_cluster
from harness.probes.model import Snapshot

__all__ = ["JudgedCluster"]


class JudgedCluster(Cluster):
    """A Cluster with before/after snapshots and checker verdicts."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.snapshots: dict[str, Snapshot] = {}
        self._outcome: RunOutcome | None = None

    def start(self) -> JudgedCluster:
        self.snapshots["before"] = for_cluster(self, "before")
        super().start()
        return self

    def close(self, before_cleanup: Any = None) -> RunOutcome:
        if self._outcome is None:
            def snap(c: Cluster) -> None:
                self.snapshots["after"] = for_cluster(c, "after")
                if before_cleanup is not None:
                    before_cleanup(c)

            self._outcome = super().close(before_cleanup=snap)
        return self._outcome

    def snapshot(self, label: str, ports: list[int]) -> Snapshot:
        """A mid-run snapshot (processes alive) with a trial bind of ``ports``; kept under ``label``."""
        snap = for_cluster(self, label, ports=ports)
        self.snapshots[label] = snap
        return snap

    def record(self) -> RunRecord:
        return RunRecord(tuple(self.rec.events()), dict(self.snapshots))

    def verdicts(self, *checks: str | tuple[str, dict[str, Any]]) -> list[Verdict]:
        """Close the run (if needed) and judge it with each named checker (optionally with parameters)."""
        self.close()
        return judge_all(self.record(), checks)
