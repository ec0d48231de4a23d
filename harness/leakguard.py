"""The session-level leak check: every test is checked for what it left behind, by name.

After each test (its teardown included) the guard looks, for this process only
(names carry the process tag, harness.names), at:

* paths under /tmp named ``lc-<tag>*`` and ``lastcall-tp-*<tag>*``,
* /dev/shm entries of this process's runs,
* lastcall threads of the system under test still alive (joined for a short grace first),
* child processes of this process other than the fork server and its idle state,
* TCP ports this process LISTENs on.

Anything new since the test began fails that test's teardown with a located
message naming it, so the session fails, also under pytest-xdist.  At session
start, leftovers of earlier killed sessions are listed (``lastcall ctl sweep``
removes those whose owner is dead).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from harness.names import TMP, process_tag

__all__ = ["Inventory", "take", "diff", "GRACE_S", "SUT_THREADS"]

GRACE_S = 2.0  # a thread of the system under test may still be finishing: join it this long at most
SUT_THREADS = ("lastcall-listener", "lastcall-handshake", "lastcall-hang", "lastcall-step-")


@dataclass(frozen=True)
class Inventory:
    paths: frozenset[str]
    shm: frozenset[str]
    threads: frozenset[threading.Thread]
    children: frozenset[int]
    ports: frozenset[str]


def _children(harness_pids: set[int]) -> frozenset[int]:
    from harness.probes.procs import all_stats, descendants

    return frozenset(p for p in descendants(all_stats(), os.getpid()) if p not in harness_pids)


def _harness_pids() -> set[int]:
    from harness.launch.spawn import ForkServer

    fs = ForkServer._shared
    return {fs.pid} if fs is not None and fs._alive else set()


def take() -> Inventory:
    tag = process_tag()
    try:
        paths = frozenset(os.path.join(TMP, n) for n in os.listdir(TMP)
                          if n.startswith(f"lc-{tag}") or (n.startswith("lastcall-tp-") and tag in n))
    except OSError:
        paths = frozenset()
    try:
        shm = frozenset(n for n in os.listdir("/dev/shm") if n.startswith("lastcall") and f"r{tag}" in n)
    except OSError:
        shm = frozenset()
    threads = frozenset(t for t in threading.enumerate() if t.name.startswith(SUT_THREADS))
    from harness.probes.net import sockets

    ports = frozenset(s.local for s in sockets(pids=[os.getpid()]) if s.proto.startswith("tcp")
                      and s.state == "LISTEN")
    return Inventory(paths, shm, threads, _children(_harness_pids()), ports)


def diff(before: Inventory) -> list[str]:
    """What is new since ``before``, after giving threads and children a short grace to end."""
    after = take()
    for t in after.threads - before.threads:
        t.join(GRACE_S)
    kids = after.children - before.children
    if kids:
        _reap_grace(kids)
    after = take()
    out = []
    if after.paths - before.paths:
        out.append(f"paths left in {TMP}: {sorted(after.paths - before.paths)}")
    if after.shm - before.shm:
        out.append(f"/dev/shm segments left: {sorted(after.shm - before.shm)}")
    alive = [t.name for t in after.threads - before.threads if t.is_alive()]
    if alive:
        out.append(f"threads still running: {sorted(alive)}")
    if after.children - before.children:
        out.append(f"child processes still running: {sorted(after.children - before.children)}")
    if after.ports - before.ports:
        out.append(f"ports still LISTENing: {sorted(after.ports - before.ports)}")
    return out


def _reap_grace(pids: frozenset[int]) -> None:
    """Wait (bounded) for children that are already exiting; reap our own zombies."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
