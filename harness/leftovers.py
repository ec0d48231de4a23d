"""What earlier (killed) sessions left on the machine, listed at session start.

Three kinds of leftover, each judged by its owner, never by age:

* ``<root>/lc-*`` directories: the launcher's run directories
  (``/tmp/lc-<run_id>``, harness/launch/cluster.py) and the temporary roots
  of the plugin and the tests (``mkdtemp(prefix="lc-")``).  Live while any
  process listens on a Unix socket below it (the cluster's control socket
  ``c.sock``, a worker's socket: a listening socket is in /proc/net/unix only
  while some process holds it), or while an instance in it, or below its
  socket root ``r``, has a live owner;
* ``<root>/lastcall-tp-*`` instance directories and
* ``<shm_dir>/lastcall-usage-*`` segments: live when an owner record
  (harness/reference/paths.py OwnerRecord) names a process that still runs
  with the recorded start time (harness.reference.ctl.list_instances).

Dead or unknown owners are listed; ``lastcall ctl sweep`` removes the
instances.  A run directory made this very moment by a parallel session, before
it binds its control socket, would be listed too: the list is a report, and
nothing here removes anything.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from harness.probes.fs import SHM_DIR
from harness.probes.net import parse_unix
from harness.reference.ctl import list_instances

__all__ = ["RUN_DIR_PREFIX", "CONTROL_SOCKET", "session_leftovers"]

RUN_DIR_PREFIX = "lc-"  # Cluster.dir = /tmp/lc-<run_id>
CONTROL_SOCKET = "c.sock"  # the cluster's control socket inside its run dir
RUN_ROOT = "r"  # the cluster's socket root inside its run dir


def _under(path: str, top: Path) -> bool:
    return path.startswith(f"{top}/")


def _run_dir_alive(run_dir: Path, listening: list[str]) -> bool:
    if any(_under(path, run_dir) for path in listening):
        return True  # someone holds a listening socket in there: the control socket, or a worker's
    for sock_root in (run_dir / RUN_ROOT, run_dir):
        try:
            # the run's usage segments live in the shared shm dir and are judged there: scan none here
            if any(inst.alive for inst in list_instances(sock_root, shm_dir=sock_root)):
                return True
        except OSError:
            pass  # unreadable (another user's): reported as a leftover with an unknown owner
    return False


def session_leftovers(root: str | os.PathLike[str] | None = None, shm_dir: str | os.PathLike[str] = SHM_DIR,
                      errors: list[str] | None = None) -> list[str]:
    """Paths under ``root`` (default: the temp dir) and in ``shm_dir`` whose owner is dead or unknown, sorted.

    Error handling: never raises; a directory that cannot be read is noted in
        ``errors`` (when given) and skipped.
    """
    base = Path(root if root is not None else tempfile.gettempdir())
    found: list[str] = []
    try:
        run_dirs = sorted(p for p in base.glob(f"{RUN_DIR_PREFIX}*") if p.is_dir() and not p.is_symlink())
    except OSError as exc:
        if errors is not None:
            errors.append(f"list {base}: {exc.strerror or exc}")
        run_dirs = []
    if run_dirs:
        listening = [e.local for e in parse_unix(errors) if e.state == "LISTEN" and e.local]
        found += [str(d) for d in run_dirs if not _run_dir_alive(d, listening)]
    try:
        instances = list_instances(base, shm_dir)
    except OSError as exc:
        if errors is not None:
            errors.append(f"list instances in {base}, {shm_dir}: {exc.strerror or exc}")
        instances = []
    for inst in instances:
        if inst.alive:
            continue
        if inst.dir is not None:
            found.append(str(inst.dir))
        found += [str(a.path) for a in inst.artifacts if a.kind == "usage"]
    return sorted(set(found))
