"""The leak guard's listening-port inventory (harness.leakguard._listening) is the one harness.probes.net gives.

It asks the process's own socket descriptors whether they listen (a take is three per test; reading
/proc/net/tcp costs a millisecond a file here); it must name the same sockets as ``sockets(pids=[pid])``
filtered to TCP in LISTEN (what another process's inventory is), IPv4 and IPv6, and none once they are
closed.
tests/test_leak_guard_optin.py proves a leaked port still fails its test.
"""

from __future__ import annotations

import os
import socket

import pytest

from harness import leakguard
from harness.probes.net import sockets


def _probed(pid: int) -> frozenset[str]:
    return frozenset(s.local for s in sockets(pids=[pid]) if s.proto.startswith("tcp") and s.state == "LISTEN")


def test_own_listening_sockets_are_named_as_the_probe_names_them() -> None:
    base = leakguard._listening(os.getpid())
    assert base == _probed(os.getpid())
    opened = []
    try:
        v4 = socket.create_server(("127.0.0.1", 0))
        opened.append(v4)
        connected = socket.create_connection(v4.getsockname()[:2])  # ESTABLISHED, not LISTEN: not named
        opened.append(connected)
        if socket.has_ipv6:
            try:
                opened.append(socket.create_server(("::1", 0), family=socket.AF_INET6))
            except OSError:
                pass  # no IPv6 loopback here
        now = leakguard._listening(os.getpid())
        assert now == _probed(os.getpid())
        new = now - base
        assert f"127.0.0.1:{v4.getsockname()[1]}" in new
        assert len(new) == len([s for s in opened if s is not connected])
    finally:
        for s in opened:
            s.close()
    assert leakguard._listening(os.getpid()) == base


def test_the_kernels_children_lists_find_what_the_ppid_links_find() -> None:
    """Descendants from /proc/P/task/T/children (the leak guard's) equal those by ppid over every process (the
    probes'): a child, its own child, a child started by another thread, and a zombie not yet reaped."""
    import subprocess
    import sys
    import threading

    from harness.probes.procs import all_stats, descendants

    me = os.getpid()
    base = leakguard._kernel_descendants(me)
    if base is None:
        pytest.skip("this kernel has no /proc/PID/task/TID/children")
    r, w = os.pipe()
    grandchild = "import sys; sys.stdout.write('x'); sys.stdout.flush(); sys.stdin.read()"
    tree = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run([sys.executable, '-c', "
                             f"{grandchild!r}], stdin=sys.stdin); sys.stdin.read()"], stdin=r, stdout=subprocess.PIPE)
    from_thread: list[subprocess.Popen[bytes]] = []
    started, done = threading.Event(), threading.Event()

    def spawn() -> None:  # the thread stays alive: its child is on its own children list, not the main thread's
        from_thread.append(subprocess.Popen(["true"]))
        started.set()
        done.wait(30)

    t = threading.Thread(target=spawn)
    t.start()
    os.close(r)
    try:
        assert started.wait(30) and tree.stdout is not None and tree.stdout.read(1) == b"x"  # all three run
        zombie = from_thread[0]
        os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie of ours
        by_kernel, by_ppid = leakguard._kernel_descendants(me), descendants(all_stats(), me)
        assert by_kernel == by_ppid, (by_kernel, by_ppid)
        assert {tree.pid, zombie.pid} <= by_kernel and len(by_kernel - base) >= 3, by_kernel
    finally:
        done.set()
        t.join(30)
        os.close(w)
        tree.wait(timeout=30)
        tree.stdout.close()
        for p in from_thread:
            p.wait(timeout=30)
    assert leakguard._kernel_descendants(me) == base


def test_a_leaked_child_is_reported_killed_and_reaped_so_it_fails_one_test_only() -> None:
    """A child a test leaves running (here: the orphan of a process the test started, reparented to this
    subreaper, as test_sigterm's cleanup once left a `lastcall run` tree's) is named once, then killed and
    reaped: a zombie nobody reaps failed no_orphan_processes in every later run of that xdist worker."""
    import subprocess
    import sys

    from harness.launch.spawn import become_subreaper

    assert become_subreaper()  # as every process that runs a cluster already is
    before = leakguard.take()
    # a parent that starts a child blocked for good (a select on nothing), prints its pid and exits: the child
    # comes back to us
    code = ("import subprocess as s, sys; c = s.Popen([sys.executable, '-c', 'import select; "
            "select.select([], [], [])'], stdin=s.DEVNULL, stdout=s.DEVNULL, stderr=s.DEVNULL); "
            "print(c.pid, flush=True)")
    parent = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    orphan = int(parent.stdout.split()[0])
    assert orphan in leakguard.take().children - before.children
    leaks = leakguard.diff(before)
    assert leaks == [f"child processes still running: [{orphan}] (killed)"]
    with pytest.raises(ChildProcessError):
        os.waitpid(orphan, os.WNOHANG)  # reaped already: no zombie left
    assert orphan not in leakguard.take().children
