"""``lastcall prune-reports [--keep N] [--dry-run] [DIR]``: remove the old runs and sessions of a reports directory.

Nothing is removed on its own: reports pile up until this is run. It keeps the :data:`DEFAULT_KEEP` newest
sessions (``--keep N``: the N newest), with every run directory they list, and the N newest run directories
whatever lists them (a session that never wrote its page: interrupted); it removes the other sessions' pages
and records (``sessions/<id>.html``, ``.json``) and the other run directories, then lists the remaining
sessions in ``index.html`` again. It prints a line for each thing removed and each kept, then the totals.

What it removes is only what lastcall made, and it follows no link:

* DIR must be a directory holding lastcall's reports marker (harness.report.reportsdir.MARKER); a link, a
  file or a directory without the marker is refused with exit 2 and nothing touched;
* a run directory is removed only when it holds the run marker (harness.report.reportsdir.RUN_MARKER) as a
  regular file; a directory without it is kept (a run written before the marker, or anything of the user's),
  and so is every symbolic link, whatever it points at: it is not followed, and its target is not looked at;
* the removal of a directory (shutil.rmtree) works through file descriptors, so a link planted inside it while
  it is removed is unlinked, never followed; on a platform whose rmtree cannot, nothing is removed (exit 2).

Which runs are newest: the time their run marker was written. Which sessions: their ids, which start with the
UTC time they ended (harness.report.sessions).
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.artifacts import shown
from harness.report.reportsdir import INDEX, MARKER, RUN_MARKER
from harness.report.sessions import SESSIONS, read_record, relist, session_ids

__all__ = ["register", "prune_command", "plan", "Plan", "DEFAULT_KEEP", "DEFAULT_DIR", "EXIT_OK", "EXIT_FAILED",
           "EXIT_USAGE"]

DEFAULT_KEEP = 20  # sessions and runs kept when --keep is not given
DEFAULT_DIR = "reports"
MAX_KEEP = 1_000_000
PROG = "lastcall prune-reports"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DESCRIPTION = (f"Remove the old runs and sessions of a reports directory: keep the {DEFAULT_KEEP} newest sessions "
               "(--keep N: the N newest) with every run directory they list, and the N newest run directories "
               "whatever lists them; remove the other sessions' pages and records (sessions/ID.html, .json) and "
               f"the other run directories, then list the remaining sessions in {INDEX} again. Only a run "
               f"directory holding lastcall's run marker ({RUN_MARKER}) is removed, only from a directory "
               f"holding its reports marker ({MARKER}), and no symbolic link is followed. Nothing is "
               "removed unless this is run. One line for each thing removed and each kept, then the totals.")
EPILOG = "exit codes: 0 pruned (or nothing to prune), 1 something could not be removed (each on one line), " \
         "2 DIR is not a reports directory of lastcall's (no marker, a link, not a directory) or a bad --keep"


@dataclass
class Plan:
    """What a prune removes and keeps: (kind, path, why) each, in the order printed."""

    remove: list[tuple[str, Path, str]] = field(default_factory=list)
    keep: list[tuple[str, Path, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _keep_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer, e.g. {DEFAULT_KEEP}") from None
    if not 1 <= value <= MAX_KEEP:
        raise argparse.ArgumentTypeError(f"{value} must be between 1 and {MAX_KEEP}")
    return value


def register(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    """Add ``prune-reports`` to lastcall's subcommands (``sub`` is build_parser's subparsers action)."""
    p = sub.add_parser("prune-reports", help="remove the old runs and sessions of a reports directory",
                       formatter_class=fmt, description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("dir", nargs="?", default=DEFAULT_DIR, metavar="DIR",
                   help=f"the reports directory (default: {DEFAULT_DIR})")
    p.add_argument("--keep", type=_keep_count, default=DEFAULT_KEEP, metavar="N",
                   help=f"keep the N newest sessions with their runs, and the N newest runs (default {DEFAULT_KEEP})")
    p.add_argument("--dry-run", action="store_true", help="print what would be removed and kept; remove nothing")
    p.set_defaults(func=lambda a: prune_command(a.dir, a.keep, a.dry_run))


def refused(root: Path) -> str | None:
    """Why ``root`` is no reports directory prune may remove from, or None."""
    try:
        info = os.lstat(root)
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link: give the reports directory itself (prune-reports follows no link)"
    if not stat.S_ISDIR(info.st_mode):
        return "not a directory; give a reports directory"
    try:
        marked = stat.S_ISREG(os.lstat(root / MARKER).st_mode)
    except OSError:
        marked = False
    if not marked:
        return f"holds no {MARKER}: not a reports directory of lastcall's; nothing removed"
    return None


def _sessions(root: Path, keep: int, out: Plan) -> set[str]:
    """Plan the sessions; returns the run directories the kept ones list."""
    ids, notes = session_ids(root)
    out.notes += notes
    listed: set[str] = set()
    for n, sid in enumerate(ids):
        where = root / SESSIONS / f"{sid}.json"
        if n >= keep:
            out.remove.append(("session", where.with_suffix(""), f"older than the {keep} newest sessions"))
            continue
        out.keep.append(("session", where.with_suffix(""), f"one of the {keep} newest sessions"))
        try:
            listed.update(read_record(root, sid).runs)
        except ValueError as exc:
            out.notes.append(f"{exc}: the runs it lists are not kept for it")
    return listed


def _run_marker_time(path: Path) -> int | None:
    try:
        info = os.lstat(path / RUN_MARKER)
    except OSError:
        return None
    return info.st_mtime_ns if stat.S_ISREG(info.st_mode) else None


def plan(root: Path, keep: int) -> Plan:
    """What pruning ``root`` (checked by :func:`refused`) to ``keep`` removes and keeps; reads, removes nothing."""
    out = Plan()
    listed = _sessions(root, keep, out)
    runs: list[tuple[int, str]] = []
    with os.scandir(root) as entries:
        for entry in entries:
            path = Path(entry.path)
            if entry.name == SESSIONS:
                continue
            if entry.is_symlink():
                out.keep.append(("link", path, "a symbolic link, not followed"))
            elif entry.is_dir(follow_symlinks=False):
                when = _run_marker_time(path)
                if when is None:
                    out.keep.append(("directory", path, f"holds no {RUN_MARKER}: not a run directory lastcall made"))
                else:
                    runs.append((when, entry.name))
    for n, (_, name) in enumerate(sorted(runs, key=lambda r: (-r[0], r[1]))):
        if n < keep:
            out.keep.append(("run", root / name, f"one of the {keep} newest runs"))
        elif name in listed:
            out.keep.append(("run", root / name, "listed by a session kept"))
        else:
            out.remove.append(("run", root / name, f"older than the {keep} newest runs, listed by no session kept"))
    return out


def _remove(kind: str, path: Path) -> None:
    """Remove one run directory (never through a link) or one session's record and page; raises OSError."""
    if kind == "run":
        if not stat.S_ISDIR(os.lstat(path).st_mode):  # it changed since it was planned
            raise OSError(f"{path} is no longer a directory")
        shutil.rmtree(path)  # fd-based (rmtree.avoids_symlink_attacks, checked): a link inside is unlinked only
        return
    for suffix in (".json", ".html"):
        name = path.with_suffix(suffix)
        try:
            if stat.S_ISREG(os.lstat(name).st_mode):
                os.unlink(name)
        except FileNotFoundError:
            pass


def prune_command(directory: str, keep: int = DEFAULT_KEEP, dry_run: bool = False) -> int:
    """Prune ``directory`` (see the module docstring); returns the exit status."""
    root = Path(directory)
    why = refused(root)
    if why is None and not shutil.rmtree.avoids_symlink_attacks:
        why = "this platform's shutil.rmtree may follow a link planted while it removes; nothing removed"
    if why is not None:
        print(f"{PROG}: {shown(directory)}: {why}", file=sys.stderr)
        return EXIT_USAGE
    try:
        todo = plan(root, keep)
    except OSError as exc:
        print(f"{PROG}: {shown(directory)}: cannot be read: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    done = {"run": 0, "session": 0}
    failed = 0
    for kind, path, reason in todo.remove:
        if not dry_run:
            try:
                _remove(kind, path)
            except OSError as exc:
                failed += 1
                print(shown(f"{PROG}: cannot remove {kind} {path}: {exc.strerror or exc}"), file=sys.stderr)
                continue
        done[kind] += 1
        print(shown(f"{'would remove' if dry_run else 'removed'} {kind} {path} ({reason})"))
    for kind, path, reason in todo.keep:
        print(shown(f"kept {kind} {path} ({reason})"))
    for note in todo.notes:
        print(shown(f"note: {note}"))
    if not dry_run and done["session"] and os.path.lexists(root / INDEX):
        unlisted = relist(root)
        if unlisted is not None:
            print(shown(f"note: {unlisted}"))
    kept = {k: sum(1 for t in todo.keep if t[0] == k) for k in done}
    print(f"{'would remove' if dry_run else 'removed'} {done['run']} run(s) and {done['session']} session(s); "
          f"kept {kept['run']} run(s) and {kept['session']} session(s)")
    return EXIT_FAILED if failed else EXIT_OK
