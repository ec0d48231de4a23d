"""A snapshot of what one run owns: its cluster's root, ipc name, process group and pids, told apart from
the other runs live in this process (harness.probes.snapshot.take, given the cluster's selection)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from harness.launch.cluster import SPAWN_LOCK, Cluster, others_live
from harness.launch.spawn import helper_pids
from harness.probes.model import Snapshot
from harness.probes.snapshot import take

__all__ = ["for_cluster"]


def for_cluster(cluster: Cluster, label: str, *, ports: Iterable[int] = (), gpu: bool = True) -> Snapshot:
    """A snapshot of one :class:`~harness.launch.cluster.Cluster`'s run.

    Uses its socket root (paths, and Unix sockets bound below it), its ipc name
    as the /dev/shm match, its process group, every pid it ever spawned, every
    descendant of this process, and the fork server as the harness's helper.
    Safe before ``start`` and after ``close`` (gone processes are left out).
    Never starts a fork server.

    Runs that share this process (played on threads of their own) are told apart by process group and session:
    the descendants leave out every other live run's group, its engine trees' sessions and its pids, and what
    is below them, and the processes of this process's own group (a step's short-lived helper, such as a dead
    owner's predecessor); this run's own group and pids are always in.  Alone (no other run live in this
    process), nothing is left out.
    The snapshot holds the launcher's SPAWN_LOCK, so no run forks unclaimed processes while it reads.
    """
    with SPAWN_LOCK:
        helpers = tuple(sorted(helper_pids()))
        with cluster._lock:
            pids = list(cluster._procs)
        others = others_live(cluster)
        shared = (os.getpgrp(),) if others else ()
        return take(label, root=cluster.root, shm_match=cluster.ipc, shm_dir=cluster.shm_dir, pids=pids,
                    pgids=(cluster.pgid,) if cluster.pgid else (), descendants_of=os.getpid(), ports=ports,
                    harness_pids=helpers, unix_under=cluster.root, gpu=gpu, foreign_pgids=others.pgids,
                    foreign_pids=others.pids, foreign_sids=others.sids, shared_pgids=shared)
