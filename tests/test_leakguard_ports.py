"""The leak guard's listening-port inventory (harness.leakguard._listening) is the one harness.probes.net gives.

It decodes only the process's own LISTEN lines of /proc/net/tcp and tcp6 (a take is three per test); it
must name the same sockets as ``sockets(pids=[pid])`` filtered to TCP in LISTEN, IPv4 and IPv6, and none
once they are closed.  tests/test_leak_guard_optin.py proves a leaked port still fails its test.
"""

from __future__ import annotations

import os
import socket

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
