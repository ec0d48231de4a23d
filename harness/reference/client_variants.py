"""Planted-bug variants of the reference engine's client (harness.reference.client), registered in
harness.reference.variants.VARIANTS."""

from __future__ import annotations

import socket

from harness.reference import wire
from harness.reference.client import Client, Connection

__all__ = ["ReplyWithoutDeadlineClient"]


class ReplyWithoutDeadline(Connection):
    """The exchange's deadline bounds the connect and the send, not the reply: the read blocks until the rank
    answers or closes.  A rank that crashed closes and a slow one answers, so only a rank that neither answers
    nor dies (paused: SIGSTOP, a debugger, a stalled host) shows it: the call waits as long as the rank is
    stopped, past the client's timeout."""

    @staticmethod
    def _recv(sock: socket.socket, n: int, deadline: float) -> bytes:
        sock.settimeout(None)
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise wire.PeerClosed(f"peer closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)


class ReplyWithoutDeadlineClient(Client):
    """The reference client, each rank spoken to through :class:`ReplyWithoutDeadline`."""

    connection = ReplyWithoutDeadline
