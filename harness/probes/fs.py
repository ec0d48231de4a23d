"""Paths under a run's socket root, and /dev/shm entries, by identity (path, kind, inode).

Both walks use ``lstat``: a symlink is recorded as a link and never followed.
Races are normal (a listener removes its socket while we walk): an entry that
vanishes mid-walk is skipped silently; one we may not read is recorded in
``errors`` (when a list is given) and skipped.  Nothing here raises.
"""

from __future__ import annotations

import os
import stat

from harness.probes.model import PathEntry, ShmEntry

__all__ = ["SHM_DIR", "kind_of", "paths_under", "shm_entries"]

SHM_DIR = "/dev/shm"


def kind_of(mode: int) -> str:
    """``dir`` | ``socket`` | ``file`` | ``link`` | ``other`` (fifo, device) for an lstat mode."""
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "link"
    return "other"


def _note(errors: list[str] | None, what: str, exc: OSError) -> None:
    if errors is not None:
        errors.append(f"{what}: {exc.strerror or exc}")


def paths_under(root: str | os.PathLike[str], errors: list[str] | None = None) -> tuple[PathEntry, ...]:
    """Every entry below ``root`` (not ``root`` itself), recursively, sorted by path.

    Returns: () when ``root`` does not exist (or is not a directory).
    Resource handling: symlinks are not followed; directories are read with scandir.
    """
    top = os.fspath(root)
    found: list[PathEntry] = []
    stack = [top]
    while stack:
        here = stack.pop()
        try:
            with os.scandir(here) as it:
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError):
            continue  # removed (or replaced by a file) while we walked: normal
        except OSError as exc:
            _note(errors, f"paths_under {here}", exc)
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                _note(errors, f"lstat {entry.path}", exc)
                continue
            kind = kind_of(st.st_mode)
            found.append(PathEntry(entry.path, kind, st.st_ino))
            if kind == "dir":
                stack.append(entry.path)
    return tuple(sorted(found, key=lambda p: p.path))


def shm_entries(shm_dir: str | os.PathLike[str] = SHM_DIR, match: str | None = None,
                errors: list[str] | None = None) -> tuple[ShmEntry, ...]:
    """Entries of ``shm_dir`` (not recursive) whose name contains ``match`` (all when None), sorted by name.

    ``match`` is typically a run's ipc name (its segments and their ``.owner``
    records), or ``"lastcall"`` for everything any lastcall instance made.
    Returns: () when ``shm_dir`` does not exist.
    """
    base = os.fspath(shm_dir)
    try:
        with os.scandir(base) as it:
            entries = [e for e in it if match is None or match in e.name]
    except FileNotFoundError:
        return ()
    except OSError as exc:
        _note(errors, f"shm_entries {base}", exc)
        return ()
    found: list[ShmEntry] = []
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError as exc:
            _note(errors, f"lstat {entry.path}", exc)
            continue
        found.append(ShmEntry(entry.name, st.st_size, st.st_ino))
    return tuple(sorted(found, key=lambda s: s.name))
