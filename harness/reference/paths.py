"""Where a reference instance keeps its sockets, records and shared memory.

The rule (docs/stop-contract.md, wire protocol)::

    <root>/lastcall-tp-<ipc>-<hash8>/w<rank>.sock          pipeline stage 0
    <root>/lastcall-tp-<ipc>-<hash8>/pp<N>/w<rank>.sock    pipeline stage N > 0
    /dev/shm/lastcall-usage-<ipc>-<hash8>                   the engine's usage record

``hash8`` is the first 8 hex digits of uuid5(NAMESPACE_DNS, ipc), as kvcached
derives its own directory, so two ipc names that sanitise alike still differ.
Each socket has an owner record beside it (``w<rank>.owner``: pid and process
start time) so ``lastcall ctl`` can tell a live instance from a leftover.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from harness import envvars
from harness.errors import ConfigError, SocketPathTooLong

__all__ = [
    "SUN_PATH_MAX",
    "IPC_NAME_MAX",
    "DIR_PREFIX",
    "USAGE_PREFIX",
    "default_root",
    "sanitize_ipc_name",
    "hash8",
    "instance_dir",
    "socket_path",
    "owner_path",
    "usage_segment_name",
    "OwnerRecord",
    "process_start_ticks",
]

SUN_PATH_MAX = 107  # bytes of sun_path usable on Linux: 108 with the terminating NUL
IPC_NAME_MAX = 64  # longest ipc name kept after sanitising (kvcached's limit)
DIR_PREFIX = "lastcall-tp-"  # every instance directory starts with this
USAGE_PREFIX = "lastcall-usage-"  # every usage segment in /dev/shm starts with this
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def default_root() -> str:
    """The root for instance directories: LASTCALL_ROOT, else the system temp dir."""
    return envvars.text("LASTCALL_ROOT") or tempfile.gettempdir()


def sanitize_ipc_name(name: str) -> str:
    """Replace every character outside ``[A-Za-z0-9_.-]`` with ``_`` and cut to 64.

    Raises ConfigError for an empty name or one made only of dots (it would name
    the directory itself).
    """
    if not isinstance(name, str):
        raise ConfigError(f"ipc name must be a str, got {type(name).__name__} {name!r}")
    clean = _UNSAFE.sub("_", name)[:IPC_NAME_MAX]
    if not clean.strip("."):
        raise ConfigError(f"ipc name {name!r} is empty after sanitising; pass a name such as 'engine0'")
    return clean


def hash8(ipc: str) -> str:
    """First 8 hex digits of uuid5(NAMESPACE_DNS, ipc): stable across processes and runs."""
    return uuid.uuid5(uuid.NAMESPACE_DNS, ipc).hex[:8]


def instance_dir(ipc: str, root: str | os.PathLike[str] | None = None) -> Path:
    """The directory holding every socket of instance ``ipc``."""
    clean = sanitize_ipc_name(ipc)
    return Path(root if root is not None else default_root()) / f"{DIR_PREFIX}{clean}-{hash8(ipc)}"


def _check_rank(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be an int >= 0, got {value!r}")


def socket_path(ipc: str, rank: int, pp: int = 0, root: str | os.PathLike[str] | None = None) -> Path:
    """The socket path of worker ``rank`` in pipeline stage ``pp``.

    Raises SocketPathTooLong (a ConfigError) when the path does not fit sun_path,
    before anything is created: shorten the root (``--root``/LASTCALL_ROOT) or the ipc name.
    """
    _check_rank("rank", rank)
    _check_rank("pp", pp)
    base = instance_dir(ipc, root)
    path = base / f"w{rank}.sock" if pp == 0 else base / f"pp{pp}" / f"w{rank}.sock"
    size = len(os.fsencode(path))
    if size > SUN_PATH_MAX:
        raise SocketPathTooLong(
            f"socket path {str(path)!r} is {size} bytes; a Unix socket path must be at most "
            f"{SUN_PATH_MAX} bytes on Linux. Use a shorter root (--root or LASTCALL_ROOT) "
            f"or a shorter ipc name"
        )
    return path


def owner_path(sock: str | os.PathLike[str]) -> Path:
    """The owner record beside a socket: ``w0.sock`` -> ``w0.owner``."""
    return Path(sock).with_suffix(".owner")


def usage_segment_name(ipc: str) -> str:
    """The /dev/shm name of the engine's 24-byte usage record for ``ipc``."""
    return f"{USAGE_PREFIX}{sanitize_ipc_name(ipc)}-{hash8(ipc)}"


def process_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (/proc/PID/stat field 22), None if gone.

    With the pid it identifies a process exactly: a recycled pid has another start time.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[19])


@dataclass(frozen=True)
class OwnerRecord:
    """Who owns an artifact: written beside it at creation, removed with it."""

    pid: int
    start_ticks: int
    ipc: str
    kind: str  # "socket" or "usage"
    rank: int = 0
    pp: int = 0

    @classmethod
    def for_self(cls, ipc: str, kind: str, rank: int = 0, pp: int = 0) -> OwnerRecord:
        pid = os.getpid()
        ticks = process_start_ticks(pid)
        return cls(pid=pid, start_ticks=ticks if ticks is not None else 0, ipc=ipc, kind=kind, rank=rank, pp=pp)

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write atomically (temp file + rename) with mode 0600."""
        tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(self), f)
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> OwnerRecord | None:
        """The record at ``path``, or None if it is missing or unreadable."""
        try:
            with open(path) as f:
                data = json.load(f)
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None

    def alive(self) -> bool:
        """True when the owning process still runs (same pid and same start time)."""
        return process_start_ticks(self.pid) == self.start_ticks
