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
    "padded_id",
    "never_read",
    "slow_reader",
    "read_slowly",
    "hang_up_mid_reply",
    "pipeline",
    "CutReply",
]

Framer = Callable[[wire.Request], bytes]


class Peer:
    """A connection in a chosen state, and what is left of its frame."""

    def __init__(self, sock: socket.socket, rest: bytes = b"",
                 decode: Callable[[bytes], wire.Reply] = wire.decode_reply, *, unread: bool = False) -> None:
        self.sock = sock
        self.rest = rest
        self.unread = unread  # its reply is never read: what arrived of it is skipped when looking for the close
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
        return closed(self.sock, scaled() if timeout is None else timeout, skip_data=self.unread)

    def reset(self) -> None:
        """Close with an RST (SO_LINGER 0) instead of a FIN."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def close(self) -> None:
        self.sock.close()


def closed(sock: socket.socket, timeout: float, *, skip_data: bool = False) -> bool:
    """True if the other end closed or reset ``sock`` within ``timeout`` (data read first means no, unless
    ``skip_data``: then data is read past until the close)."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(1 << 16)
            if not data:
                return True
            if not skip_data:
                return False
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
    """Send a frame header that announces an empty body."""
    s = connect(path)
    s.sendall(b"\0\0\0\0")
    return Peer(s)


def oversize_length(path: str, max_frame: int = wire.MAX_FRAME) -> Peer:
    """Send a frame header that announces a body one byte over the largest frame."""
    s = connect(path)
    s.sendall(wire.HEADER.pack(max_frame + 1))
    return Peer(s)


def garbage_body(path: str, body: bytes = b"\xc1\xc1\xc1") -> Peer:
    """Send a whole frame whose body does not decode."""
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


# ------------------------------------------------------------- readers
def padded_id(name: str, reply_size: int | None) -> str:
    """A request id that makes its reply (which echoes it) about ``reply_size`` bytes: ``name#xxx...``."""
    if reply_size is None:
        return name
    return f"{name}#" + "x" * max(0, reply_size - len(name) - 16)  # 16: the reply's header and other fields


def never_read(path: str, req: wire.Request, frame: Framer = wire.encode_request) -> Peer:
    """Send the whole request, then never read its reply (the listener's write cannot finish)."""
    s = connect(path)
    s.sendall(frame(req))
    return Peer(s, unread=True)


def hang_up_mid_reply(peer: Peer, timeout: float) -> bool:
    """Wait until the reply to ``peer``'s request has begun to arrive (peeked, nothing read), then close the
    connection with all of it unread: the listener is writing to a client that is gone.  False if nothing
    arrived within ``timeout`` (the connection is closed all the same)."""
    peer.sock.settimeout(timeout)
    try:
        began = bool(peer.sock.recv(1, socket.MSG_PEEK))
    except OSError:
        began = False
    peer.close()
    return began


def slow_reader(path: str, req: wire.Request, frame: Framer = wire.encode_request) -> Peer:
    """Send the whole request; its reply is then read a byte at a time (:func:`read_slowly`)."""
    s = connect(path)
    s.sendall(frame(req))
    return Peer(s)


def read_slowly(sock: socket.socket, timeout: float, decode: Callable[[bytes], wire.Reply]) -> wire.Reply | None:
    """Read one reply a byte per recv() call; None if the listener closed the connection first."""
    sock.settimeout(timeout)
    data = bytearray()
    need = wire.HEADER.size
    try:
        while len(data) < need:
            byte = sock.recv(1)
            if not byte:
                return None
            data += byte
            if len(data) == wire.HEADER.size:
                need += wire.parse_length(bytes(data))
    except (ConnectionResetError, BrokenPipeError):
        return None
    return decode(bytes(data[wire.HEADER.size:]))


class CutReply:
    """A reply the listener began and never finished: the connection ended ``got`` bytes into its frame."""

    def __init__(self, got: int) -> None:
        self.got = got

    def __repr__(self) -> str:
        return f"CutReply(got={self.got})"


def _reply_frame(sock: socket.socket) -> bytes | CutReply | None:
    """One reply frame's body; None if the connection ended before any byte of it (the listener closed it at a
    frame boundary), a :class:`CutReply` if it ended inside the frame."""
    data = bytearray()
    need = wire.HEADER.size
    while len(data) < need:
        try:
            chunk = sock.recv(need - len(data))
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        if not chunk:
            return CutReply(len(data)) if data else None
        data += chunk
        if need == wire.HEADER.size and len(data) == need:
            need += wire.parse_length(bytes(data))
    return bytes(data[wire.HEADER.size:])


def pipeline(path: str, frames: list[bytes], timeout: float, decode: Callable[[bytes], wire.Reply], *,
             read_each: bool = False, gate: Callable[[int], None] | None = None) -> list[wire.Reply | CutReply | None]:
    """Send ``frames`` on one connection, back to back in one write (or each after the reply before, with
    ``read_each``, and after ``gate(i)`` returns for each request ``i`` after the first); the replies in the order
    read: None for each the listener closed the connection before (at a frame boundary, or shut for reading: the
    send fails with EPIPE), a :class:`CutReply` for one it closed the connection in the middle of (and None for
    each after it)."""
    s = connect(path, timeout)
    replies: list[wire.Reply | CutReply | None] = []
    try:
        if not read_each:
            s.sendall(b"".join(frames))
        for i, data in enumerate(frames):
            if read_each:
                if i and gate is not None:
                    gate(i)
                s.sendall(data)
            body = _reply_frame(s)
            if body is None:
                break
            if isinstance(body, CutReply):
                replies.append(body)
                break
            replies.append(decode(body))
    except BrokenPipeError:
        pass
    finally:
        s.close()
    return replies + [None] * (len(frames) - len(replies))
