"""One snapshot of what a run owns on the machine: the probes of this package, called together.

Taken at session start, before and after every run.  Every selector is by the
run's identity (its socket root, its ipc name in /dev/shm, its pids and process
group, its ports), so parallel runs (pytest-xdist) never see each other's
resources.  A probe never raises: what it could not read is in ``errors``.

What ``extra`` holds: ``zombies`` and ``reparented_away`` (pids, derived from
``procs``), the selection the snapshot was taken with (``pgids``, ``ports``,
``root``, ``shm_match``, ``unix_under``), and ``took_ms``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

from harness.probes.fs import SHM_DIR, paths_under, shm_entries
from harness.probes.gpu import gpu_processes
from harness.probes.model import ProcEntry, Snapshot
from harness.probes.net import sockets, trial_bind
from harness.probes.procs import processes, reparented_away, zombies

__all__ = ["take", "owners_from"]


def owners_from(procs: Iterable[ProcEntry]) -> dict[int, tuple[int, ...]]:
    """Socket inode -> pids holding it, from the fds already read for ``procs``."""
    held: dict[int, set[int]] = {}
    for p in procs:
        for fd in p.fds:
            if fd.kind == "socket" and fd.target.startswith("socket:["):
                held.setdefault(int(fd.target[8:-1]), set()).add(p.pid)
    return {inode: tuple(sorted(pids)) for inode, pids in held.items()}


def take(label: str, *, root: str | os.PathLike[str] | None = None, shm_match: str | None = None,
         shm_dir: str = SHM_DIR, pids: Iterable[int] = (), pgids: Iterable[int] = (),
         descendants_of: int | None = None, ports: Iterable[int] = (), bind_host: str = "127.0.0.1",
         harness_pids: Iterable[int] = (), unix_under: str | os.PathLike[str] | None = None,
         bind_reuseaddr: bool = True, gpu: bool = True, foreign_pgids: Iterable[int] = (),
         foreign_pids: Iterable[int] = (), shared_pgids: Iterable[int] = (),
         foreign_sids: Iterable[int] = ()) -> Snapshot:
    """A snapshot of everything the selection owns.

    ``root``: paths below it (None: none).  ``shm_match``: /dev/shm entries whose
    name contains it (None: none).  ``pids``/``pgids``/``descendants_of``: the
    processes (their union), with threads and fds; their sockets are listed
    too.  ``ports``: TCP sockets on these local ports (any state, any owner),
    and a trial bind of each on ``bind_host`` with SO_REUSEADDR when
    ``bind_reuseaddr`` (the server's own options: libzmq sets it; see
    harness/probes/net.py).  ``unix_under``: Unix sockets bound below this
    path, whoever holds them.  ``harness_pids``: the harness's own helpers
    (the fork server), recorded so checkers exclude them.  ``gpu``: query NVML.
    ``foreign_pgids``/``foreign_sids``/``foreign_pids``: other runs' process groups, sessions (their engine
    trees') and processes, left out of the descendants with everything below them; ``shared_pgids``: groups
    whose processes (not those below them) are left out of the descendants (the harness's own, while other
    runs share the process: see harness.launch.snapshots.for_cluster).
    An empty selection gives an empty snapshot (the GPU part aside).
    """
    t0 = time.monotonic_ns()
    errors: list[str] = []
    pid_list, pgid_list, port_list = sorted(set(pids)), sorted(set(pgids)), sorted(set(ports))
    paths = paths_under(root, errors) if root is not None else ()
    shm = shm_entries(shm_dir, shm_match, errors) if shm_match is not None else ()
    procs = processes(pid_list, pgid_list, descendants_of, errors, foreign_pgids=foreign_pgids,
                      foreign_pids=foreign_pids, shared_pgids=shared_pgids, foreign_sids=foreign_sids) \
        if pid_list or pgid_list or descendants_of is not None else ()
    under = os.fspath(unix_under) if unix_under is not None else None
    socks = sockets([p.pid for p in procs], port_list, under, errors, owners=owners_from(procs)) \
        if procs or port_list or under is not None else ()
    binds = tuple(trial_bind(bind_host, port, bind_reuseaddr) for port in port_list)
    found = gpu_processes(errors) if gpu else None
    helpers = tuple(sorted(set(harness_pids)))
    extra: dict[str, Any] = {
        "zombies": list(zombies(procs)),
        "reparented_away": list(reparented_away(procs, pgid_list, helpers)),
        "pgids": pgid_list, "ports": port_list, "root": None if root is None else os.fspath(root),
        "shm_match": shm_match, "unix_under": under,
        "took_ms": round((time.monotonic_ns() - t0) / 1e6, 3),
    }
    return Snapshot(label=label, t_ns=t0, paths=paths, shm=shm, sockets=socks, procs=procs, binds=binds,
                    gpu=None if found is None else found[0], gpu_used=None if found is None else found[1],
                    harness_pids=helpers, errors=tuple(errors), extra=extra)
