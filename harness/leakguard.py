"""The session-level leak check: a test is checked for what it left behind, by name.

Which tests (ini ``lastcall_leak_check``, :func:`mode`): by default (``lastcall``) only those that
asked for it, lastcall's own items (the scenario files), tests that use one of lastcall's fixtures
(directly or through another fixture) and tests marked ``lastcall``; with ``all`` every test of the
session; ``off`` none.  A test marked ``leaks_ok`` is never checked.  lastcall's own suite sets ``all``.
A plugin loaded wherever lastcall is installed must not change the verdict of a test that never asked
(a module-level server kept open for later tests is common in integration suites).

After each checked test (its teardown included) the guard looks, for this process only
(names carry the process tag, harness.names), at:

* paths under /tmp named ``lc-<tag>*`` and ``lastcall-tp-*<tag>*``,
* /dev/shm entries of this process's runs,
* lastcall threads of the system under test, and the harness's own per-run threads (a run's control
  acceptor and readers), still alive (joined for a short grace first),
* child processes of this process other than the fork server and its idle state,
* TCP ports this process LISTENs on,
* processes the harness paused (a ``pause`` step) and never resumed.

Anything new since the test began fails that test's teardown with a located
message naming it, so the session fails, also under pytest-xdist.  At session
start, leftovers of earlier killed sessions are listed (``lastcall ctl sweep``
removes those whose owner is dead).
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass

import pytest

from harness.launch.pauses import paused_pids, resume_before_kill
from harness.names import TMP, process_tag
from harness.probes.procs import process_umask

__all__ = ["Inventory", "take", "diff", "GRACE_S", "SUT_THREADS", "RUN_THREADS", "MODES", "INI", "mode", "applies",
           "asked_by", "may_apply", "FIXTURES"]

GRACE_S = 2.0  # a thread of the system under test may still be finishing: join it this long at most
SUT_THREADS = ("lastcall-listener", "lastcall-handshake", "lastcall-hang", "lastcall-step-")
# the harness's threads that belong to one run and must end with it (a run's control acceptor once outlived
# every run, unseen: the guard looked at the system under test's threads only)
RUN_THREADS = ("lastcall-control",)
INI = "lastcall_leak_check"
MODES = {"lastcall": "lastcall's own items, tests using its fixtures or marked lastcall (the default)",
         "all": "every test", "off": "no test"}
OWN_PACKAGE = "harness"  # a fixture or item defined in this package is lastcall's


def mode(config: pytest.Config) -> str:
    """The ini value, checked: a bad one is a located usage error, not a silent default."""
    raw = config.getini(INI)
    value = str(raw).strip().lower() if raw is not None else "lastcall"
    if value not in MODES:
        where = config.inipath or "the ini file"
        raise pytest.UsageError(f"{where}: {INI} = {raw!r}: expected one of "
                                + ", ".join(f"{k} ({v})" for k, v in MODES.items()))
    return value


def _ours(obj: object) -> bool:
    return str(getattr(obj, "__module__", "") or "").partition(".")[0] == OWN_PACKAGE


# the plugin's fixtures that ask for the guard (harness.plugin; each marks the test it serves, so one of the same
# name from a conftest.py, which pytest uses instead, asks for nothing); the deprecated aliases use two of them
FIXTURES = frozenset({"lc_root", "lastcall_cluster", "lastcall_recorder", "lastcall_failpoints", "no_thread_leak"})


def asked_by(item: pytest.Item, used: str | None = None) -> str | None:
    """Why ``item`` asked for the guard (a lastcall item, mark, or ``used``: the lastcall fixture that served it),
    or None."""
    if _ours(type(item)):
        return "a lastcall item"
    if item.get_closest_marker("lastcall") is not None:
        return "marked lastcall"
    return f"uses the lastcall fixture {used}" if used else None


def may_apply(item: pytest.Item, how: str) -> bool:
    """Whether the guard may check ``item`` under mode ``how``, known before its fixtures run: it asked, or it
    uses a fixture of one of lastcall's names (whether lastcall's own served it is known after: :func:`applies`).
    Only pytest's public ``fixturenames`` is read."""
    if how == "off" or item.get_closest_marker("leaks_ok") is not None:
        return False
    return (how == "all" or asked_by(item) is not None
            or not FIXTURES.isdisjoint(getattr(item, "fixturenames", ())))


def applies(item: pytest.Item, how: str, used: str | None = None) -> bool:
    """Whether the guard checks ``item`` under mode ``how``; ``used``: the lastcall fixture that served it."""
    if how == "off" or item.get_closest_marker("leaks_ok") is not None:
        return False
    return how == "all" or asked_by(item, used) is not None


@dataclass(frozen=True)
class Inventory:
    paths: frozenset[str]
    shm: frozenset[str]
    threads: frozenset[threading.Thread]
    children: frozenset[int]
    ports: frozenset[str]
    umask: int | None = None  # the process umask (None: unreadable); a listener started in-process may leave its own


def _children(harness_pids: set[int]) -> frozenset[int]:
    found = _kernel_descendants(os.getpid())
    if found is None:  # a kernel without the children lists: every process's ppid, as the probes read it
        from harness.probes.procs import all_stats, descendants

        found = descendants(all_stats(), os.getpid())
    return frozenset(p for p in found if p not in harness_pids)


def _kernel_descendants(root: int) -> set[int] | None:
    """Every process below ``root`` from the kernel's per-thread children lists (/proc/P/task/T/children, zombies
    included), as ``descendants(all_stats(), root)`` finds them by ppid without reading every process's stat
    (a take is three a test; a shared machine has hundreds of processes).  None without those lists."""
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return None
    found: set[int] = set()
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone meanwhile
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):
                continue  # the thread ended meanwhile
            for kid in kids:
                if kid not in found and kid != root:
                    found.add(kid)
                    stack.append(kid)
    return found


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
    threads = frozenset(t for t in threading.enumerate() if t.name.startswith(SUT_THREADS + RUN_THREADS))
    from harness.launch.spawn import helper_pids

    return Inventory(paths, shm, threads, _children(helper_pids()), _listening(os.getpid()), process_umask())


def _listening(pid: int) -> frozenset[str]:
    """The local addresses of ``pid``'s TCP sockets that LISTEN (as harness.probes.net.sockets gives them).

    Taken three times a test.  For this process, from its own descriptors: each socket in /proc/self/fd is
    asked whether it is a TCP socket that accepts connections (SO_ACCEPTCONN) and where (getsockname), through
    a socket object that never owns the descriptor.  Reading /proc/net/tcp and tcp6 instead cost about 1.1 ms
    a file on this machine's kernel even when they are empty (6.6 ms a test, about 10 s of the default suite),
    and decoding every line of a shared machine's tables about 0.1 s a take (docs/suite-profile.md).  Another
    process's: as the probes give them (harness.probes.net.sockets)."""
    if pid != os.getpid():
        from harness.probes.net import sockets

        return frozenset(s.local for s in sockets(pids=[pid]) if s.proto.startswith("tcp") and s.state == "LISTEN")
    out: set[str] = set()
    base = "/proc/self/fd"
    try:
        names = os.listdir(base)
    except OSError:
        return frozenset()
    for name in names:
        try:
            if not os.readlink(f"{base}/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=int(name))  # closed meanwhile, or no longer a socket: OSError
        except (OSError, ValueError):
            continue
        try:
            if (sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM
                    and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)):
                host, port = sock.getsockname()[:2]
                out.add(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        except OSError:
            continue
        finally:
            sock.detach()  # the descriptor stays its owner's
    return frozenset(out)


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
    stopped = paused_pids()  # a pause the harness never resumed (harness.launch.pauses): resumed now, then reported
    if stopped:
        resume_before_kill(stopped)
        out.append(f"processes left paused (SIGSTOP): {stopped} (resumed)")
    if after.paths - before.paths:
        out.append(f"paths left in {TMP}: {sorted(after.paths - before.paths)}")
    if after.shm - before.shm:
        out.append(f"/dev/shm segments left: {sorted(after.shm - before.shm)}")
    alive = [t.name for t in after.threads - before.threads if t.is_alive()]
    if alive:
        out.append(f"threads still running: {sorted(alive)}")
    if after.children - before.children:
        left = sorted(after.children - before.children)
        out.append(f"child processes still running: {left} (killed)")
        _kill_and_reap(left)
    if after.ports - before.ports:
        out.append(f"ports still LISTENing: {sorted(after.ports - before.ports)}")
    if after.umask != before.umask and before.umask is not None and after.umask is not None:
        # put back, or every process this one starts later (a fork server, its workers) inherits it
        os.umask(before.umask)
        out.append(f"the process umask changed from {before.umask:#05o} to {after.umask:#05o} (put back)")
    return out


def _kill_and_reap(pids: list[int]) -> None:
    """SIGKILL what a test left running, and reap those that are this process's children (a subreaper's: the
    orphans of what the test started come back to it): reported once, a leak must not stay to fail every later
    test of this process (a zombie nobody reaps would). Each wait is on a pidfd, bounded as a safety net."""
    import select
    import signal

    fds = []
    for pid in pids:
        try:
            fds.append((pid, os.pidfd_open(pid)))
            os.kill(pid, signal.SIGKILL)
        except OSError:  # gone already, or not ours to signal
            continue
    for pid, fd in fds:
        try:
            select.select([fd], [], [], GRACE_S * 10)
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass  # a grandchild: its own parent reaps it
        finally:
            os.close(fd)


def _reap_grace(pids: frozenset[int]) -> None:
    """Wait (bounded) for children that are already exiting; reap our own zombies."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
