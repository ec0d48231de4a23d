"""What a snapshot of the machine holds: records by identity, not counts, as plain data.

Probes (the other modules of this package) fill these in; checkers only read
them.  Everything is JSON-serialisable (``Snapshot.to_dict`` / ``from_dict``)
so a stored run can be re-judged offline.
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import asdict, dataclass, field, fields, is_dataclass
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
    def from_dict(cls, d: Any) -> Snapshot:
        """The snapshot of ``d`` (what :meth:`to_dict` wrote, read back as data: every field checked against
        its annotation, nested records too). Error handling: ValueError naming the first field that is wrong."""
        out = _typed(cls, d, "snapshot")
        assert isinstance(out, Snapshot)
        return out


def _typed(cls: type, d: Any, where: str) -> object:
    """An instance of the dataclass ``cls`` from the JSON object ``d``, each field checked against its type."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: a {type(d).__name__}, expected an object")
    hints, names = _fields_of(cls)
    extra = [k for k in d if k not in names]
    if extra:
        raise ValueError(f"{where}: unknown field {str(extra[0])[:40]!r}")
    kw = {k: _value(hints[k], v, f"{where}.{k}") for k, v in d.items()}
    try:
        return cls(**kw)
    except TypeError as exc:  # a required field missing
        raise ValueError(f"{where}: {exc}") from None


@functools.cache
def _fields_of(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    """A record's field types and names, read once per record type (a snapshot holds thousands of records)."""
    return typing.get_type_hints(cls), frozenset(f.name for f in fields(cls))


def _value(hint: Any, v: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if v is None and type(None) in args:
            return None
        return _value(next(a for a in args if a is not type(None)), v, where)
    if origin is tuple:
        if not isinstance(v, (list, tuple)):
            raise ValueError(f"{where}: a {type(v).__name__}, expected a list")
        return tuple(_value(args[0], x, f"{where}[{i}]") for i, x in enumerate(v))
    if origin is dict:
        if not isinstance(v, dict):
            raise ValueError(f"{where}: a {type(v).__name__}, expected an object")
        key = args[0]
        return {(int(k) if key is int and isinstance(k, str) and k.lstrip("-").isdigit() else
                 _value(key, k, where)): _value(args[1], x, f"{where}[{str(k)[:20]!r}]") for k, x in v.items()}
    if hint is Any:
        return v
    if isinstance(hint, type) and is_dataclass(hint):
        return _typed(hint, v, where)
    if hint is bool:
        ok = isinstance(v, bool)
    elif hint is int:
        ok = type(v) is int
    elif hint is float:
        ok = type(v) in (int, float)
    else:
        ok = isinstance(v, hint)
    if not ok:
        raise ValueError(f"{where}: a {type(v).__name__}, expected {getattr(hint, '__name__', hint)}")
    return v
