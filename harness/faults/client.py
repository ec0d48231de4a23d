"""Client-side faults: the harness is the misbehaving peer, acting on the socket itself.

Each fault connects to a listener's socket and leaves the connection in a precise
state (a header sent and the body withheld, half a body, a reset mid-frame ...).
The returned :class:`Peer` holds the socket so the scenario can finish the frame
late (``finish()``), look for the listener's reaction (``closed_by_listener()``)
and close it.  Framing is the target's: pass ``frame=`` to speak another wire.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

from harness.reference import wire
from harness.timeouts import scaled

__all__ = [
    "Peer",
    "closed",
    "connect",
    "stall_after_header",
    "stall_mid_body",
    "partial_header",
    "zero_length",
    "oversize_length",
    "garbage_body",
    "reset_mid_frame",
    "one_byte_at_a_time",
    "stall_byte_by_byte",
    "idle_connections",
    "flood",
]

Framer = Callable[[wire.Request], bytes]


class Peer:
    """A connection in a chosen state, and what is left of its frame."""

    def __init__(self, sock: socket.socket, rest: bytes = b"",
                 decode: Callable[[bytes], wire.Reply] = wire.decode_reply) -> None:
        self.sock = sock
        self.rest = rest
        self.decode = decode  # the target's reply decoding (harness.targets.Codec.decode_reply)

    def finish(self) -> bool:
        """Send the withheld bytes; False if the listener had already closed the connection."""
        try:
            self.sock.sendall(self.rest)
            return True
        except OSError:
            return False

    def reply(self, timeout: float | None = None) -> wire.Reply | None:
        """The listener's reply, or None if it closed the connection instead."""
        self.sock.settimeout(scaled() if timeout is None else timeout)
        try:
            return self.decode(wire.recv_frame(self.sock))
        except (wire.PeerClosed, ConnectionResetError, BrokenPipeError):
            return None

    def closed_by_listener(self, timeout: float | None = None) -> bool:
        """True if the listener closed or reset the connection within ``timeout``."""
        return closed(self.sock, scaled() if timeout is None else timeout)

    def reset(self) -> None:
        """Close with an RST (SO_LINGER 0) instead of a FIN."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def close(self) -> None:
        self.sock.close()


def closed(sock: socket.socket, timeout: float) -> bool:
    """True if the other end closed or reset ``sock`` within ``timeout`` (data read first means no)."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1 << 16) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def connect(path: str, timeout: float | None = None) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(scaled() if timeout is None else timeout)
    s.connect(path)
    return s


def _split(path: str, req: wire.Request, cut: int, frame: Framer) -> Peer:
    data = frame(req)
    s = connect(path)
    s.sendall(data[:cut])
    return Peer(s, data[cut:])


def stall_after_header(path: str, req: wire.Request, frame: Framer = wire.encode_request) -> Peer:
    """Send the 4-byte length, withhold the body."""
    return _split(path, req, wire.HEADER.size, frame)


def _mid_body(data: bytes) -> int:
    """Where half a frame's body ends: the header and half the bytes after it."""
    return wire.HEADER.size + (len(data) - wire.HEADER.size) // 2


def _bytewise(path: str, data: bytes) -> socket.socket:
    """Connect and send ``data`` one byte per send() call."""
    s = connect(path)
    for i in range(len(data)):
        s.send(data[i : i + 1])
    return s


def stall_mid_body(path: str, req: wire.Request, frame: Framer = wire.encode_request) -> Peer:
    """Send the header and half the body."""
    return _split(path, req, _mid_body(frame(req)), frame)


def partial_header(path: str, req: wire.Request, frame: Framer = wire.encode_request) -> Peer:
    """Send two bytes of the length prefix."""
    return _split(path, req, 2, frame)


def zero_length(path: str) -> Peer:
    s = connect(path)
    s.sendall(b"\0\0\0\0")
    return Peer(s)


def oversize_length(path: str, max_frame: int = wire.MAX_FRAME) -> Peer:
    s = connect(path)
    s.sendall(wire.HEADER.pack(max_frame + 1))
    return Peer(s)


def garbage_body(path: str, body: bytes = b"\xc1\xc1\xc1") -> Peer:
    s = connect(path)
    s.sendall(wire.frame(body))
    return Peer(s)


def reset_mid_frame(path: str, req: wire.Request, frame: Framer = wire.encode_request) -> Peer:
    """Send part of the body, then reset the connection."""
    peer = stall_mid_body(path, req, frame)
    peer.reset()
    return peer


def one_byte_at_a_time(path: str, req: wire.Request, frame: Framer = wire.encode_request) -> Peer:
    """Send the whole frame one byte per send() call."""
    return Peer(_bytewise(path, frame(req)))


def stall_byte_by_byte(path: str, req: wire.Request, frame: Framer = wire.encode_request) -> Peer:
    """Send the header and half the body one byte per send() call, then stall."""
    data = frame(req)
    cut = _mid_body(data)
    return Peer(_bytewise(path, data[:cut]), data[cut:])


def idle_connections(path: str, n: int) -> list[Peer]:
    """``n`` connections that send nothing."""
    return [Peer(connect(path)) for _ in range(n)]


def flood(path: str, n: int) -> list[Peer]:
    """``n`` connections as fast as they can be made; refused ones are skipped (the listener may be stopping)."""
    peers = []
    for _ in range(n):
        try:
            peers.append(Peer(connect(path)))
        except OSError:
            break
    return peers
