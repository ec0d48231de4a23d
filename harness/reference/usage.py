"""The engine-side usage record: three little-endian int64 in a /dev/shm segment.

Layout (24 bytes): ``total``, ``used``, ``prealloc``.  The segment is created by
hand (``os.open`` with ``O_CREAT | O_EXCL``, ``ftruncate``, ``mmap``) rather than
with :mod:`multiprocessing.shared_memory`, whose resource tracker unlinks and warns
behind the owner's back.  The owner creates and unlinks it; others attach with
:meth:`UsageRecord.open`.  Reads and writes are single 24-byte copies, not atomic
across processes: a reader racing a writer may see a mix of old and new fields.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import threading
from types import TracebackType

from harness.errors import ConfigError, HarnessError

__all__ = ["RECORD_SIZE", "SHM_DIR", "UsageRecord"]

SHM_DIR = "/dev/shm"
_LAYOUT = struct.Struct("<qqq")
RECORD_SIZE = _LAYOUT.size
_INT64_MAX = (1 << 63) - 1


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or name in (".", "..") \
            or "/" in name or "\0" in name or len(name.encode()) > 255:
        raise ConfigError(f"usage record name {name!r}: must be a non-empty file name of "
                          "at most 255 bytes without '/' or NUL")


def _check_value(field: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _INT64_MAX:
        raise ConfigError(f"{field}={value!r}: must be an int in [0, 2**63 - 1]")


class UsageRecord:
    """A handle on one usage segment; a context manager (exit closes, and unlinks if owner).

    Attributes:
        path: the segment's file, ``<shm_dir>/<name>``.
        name: the segment's name.
        owner: True for the handle that created it.
    """

    def __init__(self, path: str, name: str, fd: int, mm: mmap.mmap, *, owner: bool) -> None:
        """Internal: use :meth:`create` or :meth:`open`."""
        self.path = path
        self.name = name
        self.owner = owner
        self._fd: int | None = fd
        self._mm: mmap.mmap | None = mm
        self._lock = threading.Lock()

    @classmethod
    def create(cls, name: str, *, total: int, shm_dir: str = SHM_DIR) -> UsageRecord:
        """Create the segment exclusively (mode 0600) holding (total, 0, 0).

        Returns:
            The owner handle.

        Error handling:
            ConfigError for a bad name or total, or when the segment already exists
            (the message names the path and ``lastcall ctl delete``); OSError from the
            system otherwise (nothing is left behind).
        """
        _check_name(name)
        _check_value("total", total)
        path = os.path.join(shm_dir, name)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        except FileExistsError as exc:
            raise ConfigError(f"usage record {path} already exists (a leftover of an earlier "
                              "run?); remove it with `lastcall ctl delete` or pick another "
                              "name") from exc
        try:
            os.ftruncate(fd, RECORD_SIZE)
            mm = mmap.mmap(fd, RECORD_SIZE)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise
        mm[:RECORD_SIZE] = _LAYOUT.pack(total, 0, 0)
        return cls(path, name, fd, mm, owner=True)

    @classmethod
    def open(cls, name: str, *, shm_dir: str = SHM_DIR) -> UsageRecord:
        """Attach to an existing segment (not as owner).

        Returns:
            A non-owner handle.

        Error handling:
            ConfigError for a bad name; HarnessError naming the path when the segment
            is missing or smaller than 24 bytes.
        """
        _check_name(name)
        path = os.path.join(shm_dir, name)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError as exc:
            raise HarnessError(f"usage record {path} does not exist; is the engine that "
                               "creates it running?") from exc
        try:
            size = os.fstat(fd).st_size
            if size < RECORD_SIZE:
                raise HarnessError(f"usage record {path} holds {size} bytes, expected "
                                   f"{RECORD_SIZE}; remove it with `lastcall ctl delete`")
            mm = mmap.mmap(fd, RECORD_SIZE)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, name, fd, mm, owner=False)

    def _map(self) -> mmap.mmap:
        if self._mm is None:
            raise HarnessError(f"usage record {self.path}: handle is closed")
        return self._mm

    def read(self) -> tuple[int, int, int]:
        """Returns: (total, used, prealloc).

        Error handling:
            HarnessError if this handle is closed.
        """
        with self._lock:
            total, used, prealloc = _LAYOUT.unpack(self._map()[:RECORD_SIZE])
            return int(total), int(used), int(prealloc)

    def update(self, *, used: int | None = None, prealloc: int | None = None,
               total: int | None = None) -> None:
        """Overwrite the fields given; the others keep their values.

        Returns:
            None.

        Error handling:
            ConfigError for a value outside [0, 2**63 - 1]; HarnessError if closed.
        """
        for field, value in (("used", used), ("prealloc", prealloc), ("total", total)):
            if value is not None:
                _check_value(field, value)
        with self._lock:
            mm = self._map()
            old = _LAYOUT.unpack(mm[:RECORD_SIZE])
            new = (old[0] if total is None else total,
                   old[1] if used is None else used,
                   old[2] if prealloc is None else prealloc)
            mm[:RECORD_SIZE] = _LAYOUT.pack(*new)

    def close(self) -> None:
        """Unmap and close the file descriptor; idempotent. Does not unlink.

        Returns:
            None.

        Error handling:
            Never raises for a second call.
        """
        with self._lock:
            mm, self._mm = self._mm, None
            fd, self._fd = self._fd, None
        if mm is not None:
            mm.close()
        if fd is not None:
            os.close(fd)

    def unlink(self) -> bool:
        """Remove the segment's file (the owner's job; allowed on any handle).

        Returns:
            True if this call removed it, False if it was already gone.

        Error handling:
            ENOENT is normal (False); other OSErrors propagate.
        """
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return False
        return True

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._mm is None

    def __enter__(self) -> UsageRecord:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
        if self.owner:
            self.unlink()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"UsageRecord({self.path!r}, owner={self.owner}, {state})"
