"""The reference wire protocol: length-prefixed msgpack maps, typed with msgspec.

A frame is a 4-byte unsigned big-endian length N (1 <= N <= max_frame, default
1 MiB) followed by N bytes of one msgpack map.  Nothing is ever unpickled or
evaluated: a frame is data.  Decoding never crashes: every malformed input
raises a :class:`~harness.errors.WireError` subclass whose ``error_type`` is
``bad_request``.

* :class:`FrameReader` is the incremental (non-blocking) parser the listener feeds;
* :func:`send_frame` / :func:`recv_frame` are the blocking helpers clients use.
"""

from __future__ import annotations

import socket
import struct
from typing import Annotated, Literal

import msgspec

from harness.errors import FrameDecodeError, FrameTooLarge, TargetError

__all__ = [
    "HEADER",
    "MAX_FRAME",
    "COMMANDS",
    "Command",
    "Request",
    "Reply",
    "encode_request",
    "encode_reply",
    "decode_request",
    "decode_reply",
    "frame",
    "parse_length",
    "FrameReader",
    "send_frame",
    "recv_frame",
    "PeerClosed",
]

HEADER = struct.Struct(">I")  # the 4-byte big-endian length prefix
MAX_FRAME = 1 << 20  # default largest body accepted (1 MiB)

Command = Literal[
    "kv_tensors_created",
    "map_to_kv_tensors",
    "unmap_from_kv_tensors",
    "prepare_unmap_from_kv_tensors",
    "commit_unmap_from_kv_tensors",
    "abort_unmap_from_kv_tensors",
]
COMMANDS: tuple[str, ...] = Command.__args__  # type: ignore[attr-defined]
Status = Literal["success", "prepared", "committed", "aborted", "error"]
ErrorType = Literal["bad_request", "state_consistency", "map_quarantined", "operation_failed", "shutting_down"]
NonNegative = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]


class Request(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """One request. ``commit`` on a prepare asks for prepare and commit in one step."""

    cmd: Command
    group_id: NonNegative = 0
    offsets: list[NonNegative] = msgspec.field(default_factory=list)
    transaction_id: str = ""
    commit: bool = False
    id: str | None = None


class Reply(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One reply; ``id`` echoes the request's."""

    status: Status
    id: str | None = None
    newly_mapped_offsets: list[int] | None = None
    created: bool | None = None
    error_type: ErrorType | None = None
    phase: str | None = None
    message: str | None = None


_ENCODER = msgspec.msgpack.Encoder()
_REQUEST_DECODER = msgspec.msgpack.Decoder(Request)
_REPLY_DECODER = msgspec.msgpack.Decoder(Reply)


class PeerClosed(TargetError, ConnectionError):
    """The peer closed the connection before a whole frame arrived."""


def frame(body: bytes) -> bytes:
    """Prefix ``body`` with its length."""
    return HEADER.pack(len(body)) + body


def encode_request(req: Request) -> bytes:
    """The whole frame (header and body) for ``req``."""
    return frame(_ENCODER.encode(req))


def encode_reply(rep: Reply) -> bytes:
    """The whole frame (header and body) for ``rep``."""
    return frame(_ENCODER.encode(rep))


def decode_request(body: bytes) -> Request:
    """Decode one request body. Raises FrameDecodeError saying what was wrong."""
    try:
        return _REQUEST_DECODER.decode(body)
    except msgspec.DecodeError as exc:  # ValidationError is a subclass
        raise FrameDecodeError(f"bad request body: {exc}") from None
    except Exception as exc:  # msgspec may raise others on hostile input; never crash
        raise FrameDecodeError(f"bad request body: {type(exc).__name__}: {exc}") from None


def decode_reply(body: bytes) -> Reply:
    """Decode one reply body. Raises FrameDecodeError saying what was wrong."""
    try:
        return _REPLY_DECODER.decode(body)
    except Exception as exc:
        raise FrameDecodeError(f"bad reply body: {exc}") from None


def parse_length(header: bytes, max_frame: int = MAX_FRAME) -> int:
    """The body length from a 4-byte header; FrameTooLarge when 0 or over ``max_frame``."""
    size: int = HEADER.unpack(header)[0]
    if size == 0:
        raise FrameTooLarge("frame length 0: a frame carries at least one byte of msgpack")
    if size > max_frame:
        raise FrameTooLarge(f"frame length {size} exceeds max_frame {max_frame}")
    return size


class FrameReader:
    """Incremental frame parser for a non-blocking connection.

    ``feed`` returns the bodies completed by the new bytes.  ``in_frame`` is True
    between the first byte of a frame and its last: a read in progress.
    A bad length raises FrameTooLarge; the framing is then lost for good.
    """

    __slots__ = ("_buf", "_need", "max_frame")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()
        self._need: int | None = None  # body length once the header is in

    @property
    def in_frame(self) -> bool:
        return bool(self._buf) or self._need is not None

    def feed(self, data: bytes) -> list[bytes]:
        if not self._buf and self._need is None and len(data) > HEADER.size:  # fast path: one whole frame
            size = parse_length(data[: HEADER.size], self.max_frame)
            if len(data) == HEADER.size + size:
                return [data[HEADER.size :]]
        self._buf += data
        out: list[bytes] = []
        while True:
            if self._need is None:
                if len(self._buf) < HEADER.size:
                    return out
                self._need = parse_length(bytes(self._buf[: HEADER.size]), self.max_frame)
                del self._buf[: HEADER.size]
            if len(self._buf) < self._need:
                return out
            out.append(bytes(self._buf[: self._need]))
            del self._buf[: self._need]
            self._need = None


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise PeerClosed(f"peer closed after {len(chunks)} of {n} bytes")
        chunks += chunk
    return bytes(chunks)


def send_frame(sock: socket.socket, body: bytes) -> None:
    """Send one whole frame (blocking)."""
    sock.sendall(frame(body))


def recv_frame(sock: socket.socket, max_frame: int = MAX_FRAME) -> bytes:
    """Receive one whole frame body (blocking). PeerClosed on EOF, FrameTooLarge on a bad length."""
    size = parse_length(_recv_exactly(sock, HEADER.size), max_frame)
    return _recv_exactly(sock, size)
