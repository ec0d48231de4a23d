"""Reading back what a run left: every file lastcall reads back is data from strangers.

A report directory travels (a CI artifact, a fork's pull request decides what is in
it), so what lastcall reads from one (history.jsonl, verdicts.json, snapshots.json,
session.json, JUnit XML) is read here, bounded, and never executed:

* :func:`read_bytes`: a regular file only (a FIFO, a device, a directory or a
  symbolic link is refused before anything is read; a FIFO is opened without
  blocking), at most ``limit`` bytes (``limit`` + 1 are ever read, so a file that
  grows while read is refused too).
* :func:`loads`: JSON with its nesting bounded (:data:`MAX_DEPTH`), integers of at
  most :data:`MAX_DIGITS` digits and no NaN or Infinity; anything else is a
  :class:`DataError` naming what is wrong.
* :func:`shown`: text read from a file, fit for a terminal: control characters,
  escape sequences and bidirectional overrides written as visible escapes.

Which inputs are trusted and which are data: docs/trust.md.  This module imports
nothing of the harness but its errors: every layer may use it.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from typing import Any

from harness.errors import ConfigError

__all__ = ["ArtifactError", "DataError", "read_bytes", "read_text", "loads", "read_json", "shown", "cut",
           "MAX_DEPTH", "MAX_DIGITS", "MAX_JSON_BYTES", "MAX_HISTORY_BYTES", "MIB"]

MIB = 1 << 20
MAX_JSON_BYTES = 16 * MIB  # verdicts.json, snapshots.json, session.json: a run's are tens of KiB
# A run's history budget: the recorder of a run stops storing events at it (the run ends "history budget
# reached"), and a history.jsonl over it was not written by lastcall. The library's largest are about 1 MiB.
MAX_HISTORY_BYTES = 32 * MIB
MAX_DEPTH = 32  # lists and objects inside each other in one JSON document or history line; lastcall writes 6
MAX_DIGITS = 20  # the longest integer read: 2**63 has 19 digits (Python's own limit, 4300, is slow to reach)
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


class ArtifactError(ConfigError):
    """A file lastcall reads back cannot be read as what it should be (exit code 2): the message is located."""


class DataError(ValueError):
    """One JSON document or line is not data lastcall reads: too deep, a number too long, NaN, bad syntax."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _size(n: int) -> str:
    return f"{n // MIB} MiB" if n % MIB == 0 else f"{n} bytes"


def read_bytes(path: str | os.PathLike[str], limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them.

    Error handling: :class:`ArtifactError` naming the path and ``what`` it should be, for a missing file,
    anything but a regular file (refused before a byte is read), and a file over ``limit``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
            raise ArtifactError(f"{path}: a symbolic link, not a regular file; lastcall never writes one "
                                f"(give the {what} itself)") from None
        raise ArtifactError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ArtifactError(f"{path}: {_kind(info.st_mode)}, not a regular file; give the {what}")
        if info.st_size > limit:
            raise ArtifactError(f"{path}: {info.st_size} bytes, over lastcall's limit of {_size(limit)} for a "
                                f"{what}")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > limit:  # it grew while it was read
        raise ArtifactError(f"{path}: more than {_size(limit)}, lastcall's limit for a {what}")
    return b"".join(chunks)


def read_text(path: str | os.PathLike[str], limit: int, what: str = "file") -> str:
    """:func:`read_bytes` decoded as UTF-8; a bad byte is an :class:`ArtifactError` giving its offset."""
    data = read_bytes(path, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ArtifactError(f"{path}:{line}: not UTF-8 (byte {exc.start}: {exc.reason}); not a {what} lastcall "
                            "wrote") from None


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise DataError(f"an integer of {len(text)} characters (lastcall reads at most {MAX_DIGITS} digits)")
    return int(text)


def _constant(name: str) -> Any:
    raise DataError(f"{name} is not a number lastcall writes")


def _depth_ok(value: Any) -> bool:
    """Whether ``value`` nests at most MAX_DEPTH lists and dicts; iterative, so it cannot recurse too deep."""
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                return False
            todo.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return True


def loads(text: str | bytes) -> Any:
    """One JSON document as lastcall writes it; :class:`DataError` (one line) otherwise.

    Nesting past :data:`MAX_DEPTH` is refused: the parser's own recursion limit stops a document nested far
    deeper first (a RecursionError, caught here), and the result is walked once more without recursion.
    """
    try:
        value = json.loads(text, parse_int=_int, parse_constant=_constant)
    except DataError:
        raise
    except RecursionError:
        raise DataError(f"nested deeper than {MAX_DEPTH} levels of lists and objects") from None
    except (ValueError, TypeError) as exc:
        raise DataError(f"not JSON: {exc}") from None
    if not _depth_ok(value):
        raise DataError(f"nested deeper than {MAX_DEPTH} levels of lists and objects")
    return value


def read_json(path: str | os.PathLike[str], what: str, limit: int = MAX_JSON_BYTES) -> Any:
    """The JSON document in the file at ``path`` (bounded as :func:`read_bytes` and :func:`loads`).

    Error handling: :class:`ArtifactError` naming the path, for every way it cannot be read.
    """
    data = read_bytes(path, limit, what)
    try:
        return loads(data)
    except DataError as exc:
        raise ArtifactError(f"{path}: not a {what} lastcall wrote: {exc}") from None


_VISIBLE = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def shown(text: object, limit: int | None = None) -> str:
    """``text`` fit for a terminal line: every control or format character (ESC and so every escape sequence,
    a newline, a bidirectional override) written as a visible escape; cut to ``limit`` characters with its
    length shown when longer."""
    s = str(text)
    if limit is not None:
        s = cut(s, limit)
    if s.isprintable():
        return s
    return "".join(ch if ch.isprintable()
                   else _VISIBLE.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
                   for ch in s)


def cut(text: str, limit: int) -> str:
    """``text`` when at most ``limit`` characters, else its first ``limit`` and how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"
