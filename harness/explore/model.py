"""The explorer's model of one listener's life: its phase, the client connections, a parked handler."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from enum import Enum

from harness import failpoints
from harness.contract.rig import Pending
from harness.history import Event
from harness.reference import wire

__all__ = ["Phase"]

MiB = 1 << 20
MAP: wire.Command = "map_to_kv_tensors"


def _describe(e: Event) -> str:
    d = e.data
    bits = [f"{k}={d[k]}" for k in ("conn", "ok", "step", "n", "site", "id") if d.get(k) not in (None, "")]
    return e.kind + (f"({' '.join(bits)})" if bits else "")


class Phase(Enum):
    SERVING = "serving"  # started, no stop has begun
    STOPPING = "stopping"  # a stop began and returned False (or is still draining): nothing torn down
    STOPPED = "stopped"  # a stop returned True: torn down


class _Conn:
    """A client connection: ``idle`` (nothing sent), ``header`` (4 bytes sent, body withheld), ``kept`` (answered,
    kept alive), ``cancelled`` (a withheld body whose read stop cancelled), ``closed``."""

    def __init__(self, name: str, sock: socket.socket, state: str, cid: int, rest: bytes = b"") -> None:
        self.name = name
        self.sock = sock
        self.state = state
        self.cid = cid
        self.rest = rest


@dataclass
class _Parked:
    fault: str
    call: str
    fp: failpoints.Failpoint
    sock: socket.socket
    cid: int
    pending: Pending
    queued: bool


def _read_replies(sock: socket.socket, n: int) -> list[wire.Reply]:
    out: list[wire.Reply] = []
    try:
        for _ in range(n):
            out.append(wire.decode_reply(wire.recv_frame(sock)))
    except (wire.PeerClosed, OSError):
        pass
    return out


def _is_eof(sock: socket.socket, timeout: float) -> bool:
    """True if the listener closed or shut down ``sock`` within ``timeout`` (data read first is a failure)."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


def _map(page: int, name: str) -> wire.Request:
    return wire.Request(cmd=MAP, offsets=[page * 2 * MiB], id=name)
