"""Framed msgpack messages over a stream socket: the control channel's and the fork server's wire.

The framing is the reference wire's (4-byte big-endian length, then one msgpack
value) with a larger frame limit, since a message may carry a stack dump.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import msgspec

from harness.reference import wire

__all__ = ["MAX_MESSAGE", "Channel"]

MAX_MESSAGE = 16 << 20  # largest control message (stack dumps of many threads fit)
_ENC = msgspec.msgpack.Encoder()
_DEC = msgspec.msgpack.Decoder()


class Channel:
    """One end of a message stream: thread-safe ``send``, and ``messages()`` for one reader thread."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()

    def send(self, msg: dict[str, Any]) -> bool:
        """Send one message; False if the peer is gone (the caller decides whether that matters)."""
        data = wire.frame(_ENC.encode(msg))
        try:
            with self._send_lock:
                self.sock.sendall(data)
            return True
        except OSError:
            return False

    def messages(self) -> Iterator[dict[str, Any]]:
        """Every message until the peer closes (or the socket is shut down)."""
        reader = wire.FrameReader(MAX_MESSAGE)
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            for body in reader.feed(data):
                msg = _DEC.decode(body)
                if isinstance(msg, dict):
                    yield msg

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
