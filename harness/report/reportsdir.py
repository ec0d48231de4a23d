"""Where lastcall may write its reports: a directory it made, which holds its marker (harness.report.summary.MARKER).

``--lastcall-reports DIR`` (harness.report.summary) and ``lastcall report --merge ... --out DIR``
(harness.report.merge) write ``index.html`` and ``session.json`` into DIR: into ``/`` or a home directory
they would replace files lastcall did not write. So DIR is one of

* a path that is not there yet, under a directory lastcall can write: it is made, with the marker;
* an empty directory lastcall can write (a ``.gitkeep`` or ``.keep`` may stay, as git keeps an empty
  directory): the marker is written first;
* a directory holding the marker (one lastcall made, or one its user marked: ``touch DIR/.lastcall-reports``).

Anything else (a file, a FIFO, a directory lastcall cannot write, a non-empty directory without the marker)
is refused, before anything is written, with one line saying why (:func:`unfit`).

Each run directory lastcall makes in it holds :data:`RUN_MARKER` (:func:`mark_run`): ``lastcall prune-reports``
(harness.report.prune) removes only directories holding it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Collection
from pathlib import Path

from harness.artifacts import shown

__all__ = ["unfit", "make_reports", "mark_run", "replace_text", "resolved", "PLACEHOLDERS", "MARKER", "MARKER_TEXT",
           "RUN_MARKER", "RUN_MARKER_TEXT", "RUN_CHARS", "INDEX"]

# In a reports directory, the file that says lastcall made it: what lastcall writes into a directory holding
# other things than this marker would replace files it did not write (``--lastcall-reports ~``).
MARKER = ".lastcall-reports"
MARKER_TEXT = "lastcall writes its reports here: index.html, session.json and a directory per run\n"
# In a run's directory, the file that says lastcall made it: lastcall prune-reports removes no directory without it.
RUN_MARKER = ".lastcall-run"
RUN_MARKER_TEXT = "lastcall wrote this run's report; lastcall prune-reports may remove this directory\n"
RUN_CHARS = "A-Za-z0-9._-"  # the characters of a run directory's name (a regular expression's class)
INDEX = "index.html"  # the session page in a reports directory, and each run's page in its directory
PLACEHOLDERS = frozenset({".gitkeep", ".keep"})  # what an empty directory committed to git holds
_LISTED = 4  # names of a refused directory's entries shown
_SCANNED = 10_000  # entries of a directory looked at: the first that are not the marker's already refuse it


def resolved(path: str | os.PathLike[str]) -> Path:
    """``path`` made absolute, its links followed; a link loop (pathlib's RuntimeError) or an unreadable part
    leaves it as it is written, made absolute."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError, ValueError):
        return Path(os.path.abspath(path))


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISREG, "a file"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a directory")


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK | os.X_OK)


def _unmade(path: Path) -> str | None:
    """Why ``path``, which is not there, cannot be made: its nearest existing ancestor must be a directory
    lastcall can write."""
    above = path.parent
    while True:
        try:
            info = os.stat(above)
            break
        except (FileNotFoundError, NotADirectoryError):
            if above == above.parent:
                return "cannot be made: nothing above it exists"
            above = above.parent
        except OSError as exc:
            return f"cannot be made: {shown(above)}: {exc.strerror or exc}"
    if not stat.S_ISDIR(info.st_mode):
        return f"cannot be made: {shown(above)} is {_kind(info.st_mode)}, not a directory"
    if not _writable(above):
        return f"cannot be made: {shown(above)} is a directory lastcall cannot write"
    return None


def unfit(path: Path, holds: Collection[Path] = ()) -> str | None:
    """Why lastcall may not write its reports (index.html, session.json, run directories) into ``path``; None
    when it may: a path it can make, an empty directory it can write (:data:`PLACEHOLDERS` aside), or one
    holding its :data:`MARKER`. ``holds``: resolved paths the directory may hold besides (the shards a merge
    writes beside)."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "a symbolic link to nothing" if os.path.islink(path) else _unmade(path)
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    if not stat.S_ISDIR(info.st_mode):
        return f"{_kind(info.st_mode)}, not a directory; give a directory for the reports"
    if not _writable(path):
        return "a directory lastcall cannot write"
    try:
        if stat.S_ISREG(os.lstat(path / MARKER).st_mode):
            return None
    except OSError:
        pass
    try:
        others, many = _others(path, holds)
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    if many:
        return f"holds more than {_SCANNED} entries but no {MARKER}: give a new or empty directory"
    if not others:
        return None
    names = ", ".join(shown(n, 40) for n in others[:_LISTED]) + (", ..." if len(others) > _LISTED else "")
    return (f"holds {names} and no {MARKER}: not a reports directory of lastcall's, whose index.html and "
            f"session.json it may replace; give a new or empty directory (or create {MARKER} in it if it holds "
            "only lastcall's reports)")


def _others(path: Path, holds: Collection[Path]) -> tuple[list[str], bool]:
    """The first names in ``path`` that are neither placeholders nor ``holds``; and whether there were more
    entries than lastcall looks at."""
    others: list[str] = []
    with os.scandir(path) as entries:
        for n, entry in enumerate(entries):
            if n >= _SCANNED:
                return others, True
            if entry.name in PLACEHOLDERS or (holds and resolved(entry.path) in holds):
                continue
            others.append(entry.name)
            if len(others) > _LISTED:
                break
    return sorted(others), False


def _mark(path: Path, name: str, text: str) -> None:
    """Create ``path/name`` holding ``text``, exclusively: one that is there (or a link there) stays as it is."""
    try:
        fd = os.open(path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        return
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def make_reports(path: Path) -> None:
    """Make the reports directory ``path`` (and its parents) and its :data:`MARKER`; raises OSError.

    Any number of processes may make it at once (xdist workers each writing a run): the marker is created
    exclusively, never written over, and what is there already stays."""
    path.mkdir(parents=True, exist_ok=True)
    _mark(path, MARKER, MARKER_TEXT)


def mark_run(run_dir: Path) -> None:
    """Write the :data:`RUN_MARKER` of a run directory lastcall has just made; raises OSError."""
    _mark(run_dir, RUN_MARKER, RUN_MARKER_TEXT)


def replace_text(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: a fresh temporary file beside it (never one that was there, which
    could be a link elsewhere), then renamed over it; raises OSError."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:  # a name of undecodable bytes
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the page from whoever else reads the reports
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
