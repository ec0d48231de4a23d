"""What a snapshot of the machine holds: records by identity, not counts, as plain data.

Probes (the other modules of this package) fill these in; checkers only read
them.  Everything is JSON-serialisable (``Snapshot.to_dict`` / ``from_dict``)
so a stored run can be re-judged offline.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["PathEntry", "ShmEntry", "SocketEntry", "FdEntry", "ProcEntry", "BindResult", "GpuProc", "Snapshot"]


@dataclass(frozen=True)
class PathEntry:
    """A file or directory under a watched root."""

    path: str
    kind: str  # "dir" | "socket" | "file" | "link" | "other"
    ino: int


@dataclass(frozen=True)
class ShmEntry:
    """An entry of /dev/shm."""

    name: str
    size: int
    ino: int


@dataclass(frozen=True)
class SocketEntry:
    """A TCP or Unix socket from /proc/net, with the pids whose fds hold it."""

    proto: str  # "tcp" | "tcp6" | "unix"
    state: str  # "LISTEN", "TIME_WAIT", "ESTABLISHED", ... ; unix: "LISTEN" or "CONNECTED"/"UNCONNECTED"
    local: str  # "127.0.0.1:5600", "[::1]:5600", or a unix path ("" when unnamed)
    port: int  # 0 for unix sockets
    inode: int
    pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class FdEntry:
    """One open file descriptor of a process."""

    fd: int
    kind: str  # "socket" | "pipe" | "anon" (eventfd, epoll, ...) | "file" | "dev" | "other"
    target: str  # the readlink of /proc/PID/fd/N


@dataclass(frozen=True)
class ProcEntry:
    """One process: identity, parentage, state, threads by name, fds by type."""

    pid: int
    ppid: int
    pgid: int
    start_ticks: int
    name: str
    state: str  # "R", "S", "Z", ...
    threads: tuple[str, ...] = ()
    fds: tuple[FdEntry, ...] = ()
    cmdline: str = ""


@dataclass(frozen=True)
class BindResult:
    """A trial bind of a port with the server's own options."""

    host: str
    port: int
    ok: bool
    error: str = ""  # "EADDRINUSE: Address already in use" when ok is False
    reuseaddr: bool = False  # whether the trial socket set SO_REUSEADDR (libzmq's listeners do on POSIX)


@dataclass(frozen=True)
class GpuProc:
    """A process holding memory on a GPU (NVML)."""

    device: int
    pid: int
    used_bytes: int


@dataclass(frozen=True)
class Snapshot:
    """The machine as a probe saw it at one moment (``label``: session_start, before, after ...)."""

    label: str
    t_ns: int
    paths: tuple[PathEntry, ...] = ()
    shm: tuple[ShmEntry, ...] = ()
    sockets: tuple[SocketEntry, ...] = ()
    procs: tuple[ProcEntry, ...] = ()
    binds: tuple[BindResult, ...] = ()
    gpu: tuple[GpuProc, ...] | None = None  # None: no GPU probe on this machine
    gpu_used: dict[int, int] | None = None  # device -> used bytes
    harness_pids: tuple[int, ...] = ()  # the harness's own helper processes, excluded from leak checks
    errors: tuple[str, ...] = ()  # what a probe could not read (reported, never fatal)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Snapshot:
        def tup(kind: type, items: Any) -> tuple[Any, ...]:
            return tuple(kind(**x) for x in items or ())

        procs = tuple(ProcEntry(**{**p, "threads": tuple(p.get("threads", ())),
                                   "fds": tup(FdEntry, p.get("fds"))}) for p in d.get("procs", ()))
        sockets = tuple(SocketEntry(**{**s, "pids": tuple(s.get("pids", ()))}) for s in d.get("sockets", ()))
        gpu = d.get("gpu")
        gpu_used = d.get("gpu_used")
        return cls(label=d["label"], t_ns=d["t_ns"], paths=tup(PathEntry, d.get("paths")),
                   shm=tup(ShmEntry, d.get("shm")), sockets=sockets, procs=procs, binds=tup(BindResult, d.get("binds")),
                   gpu=None if gpu is None else tup(GpuProc, gpu),
                   gpu_used=None if gpu_used is None else {int(k): int(v) for k, v in gpu_used.items()},
                   harness_pids=tuple(d.get("harness_pids", ())), errors=tuple(d.get("errors", ())),
                   extra=dict(d.get("extra", {})))
