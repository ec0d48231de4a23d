"""Where ``lastcall replay`` finds the scenario a report names: by its name and the sha256 of its file's bytes,
among the user's own roots, never at a path the report holds.

The roots, searched in this order (:func:`search_roots`):

1. each ``--path DIR`` given, in the order given;
2. the current directory;
3. the rootdir: the nearest directory from the current one up that holds one of pytest's ini files
   (:data:`INI_FILES`), as pytest would root a session started here; a report's own paths are never a root;
4. the scenario library shipped with lastcall (``scenarios/`` beside the ``harness`` package).

In each, ``*.yaml``/``*.yml`` files are read (bounded: :data:`MAX_DEPTH`, :data:`MAX_FILES`, :data:`MAX_READ`,
each file at most harness.scenario.yamlnodes.MAX_BYTES, symbolic links neither followed nor read) and hashed,
a directory searched as an earlier root not again; a directory named in
:data:`SKIP`, one holding lastcall's reports marker or a run's files, and the report's own directory and the one
above it are left out, with what is above them. The first file whose bytes hash to the recorded sha256 and that
loads as a scenario of the recorded name is the one replayed. A file of that name with other bytes is reported
(its ``name:`` line read without loading it), never run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.artifacts import ArtifactError, read_bytes, shown
from harness.report.reportsdir import MARKER

__all__ = ["Refused", "Root", "search_roots", "find", "INI_FILES", "MAX_DEPTH", "MAX_FILES", "MAX_READ", "SKIP",
           "LIBRARY"]

MAX_DEPTH = 8  # directory levels searched below a root: scenarios/ of a checkout is one or two
MAX_FILES = 5000  # scenario files read in one search, all roots together: a checkout holds tens
MAX_READ = 64 << 20  # bytes of them read in one search: scenarios in scenarios/ are under 2 KiB each
SKIP = frozenset({".git", ".hg", ".svn", ".venv", "venv", ".tox", "node_modules", "__pycache__", ".mypy_cache",
                  ".pytest_cache", ".ruff_cache", "reports"})  # directories never searched
INI_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")  # what roots a pytest session
LIBRARY = Path(__file__).resolve().parent.parent.parent / "scenarios"  # the scenarios lastcall ships
REPORT_FILES = (MARKER, "verdicts.json", "history.jsonl")  # a directory holding one is a report's
SUFFIXES = (".yaml", ".yml")  # harness.scenario.loader.SUFFIXES (not imported: the loader imports pydantic)
# a scenario file's top-level name: line, read without loading the file (only to say a file of that name differs)
NAME_LINE = re.compile(rb"^name:[ \t]*([\"']?)([A-Za-z0-9_][A-Za-z0-9_.-]{0,199})\1[ \t]*(?:#[^\n]*)?\r?$", re.M)


class Refused(Exception):
    """Why the report cannot be replayed (one line, exit code 2)."""


@dataclass(frozen=True)
class Root:
    """A directory searched, and why it is one ("--path", "the current directory", ...)."""

    path: Path
    why: str


@dataclass
class _Walk:
    """What one search saw: files read, the roots and why each was or was not searched, files that differ."""

    files: int = 0
    read: int = 0  # bytes
    looked: list[str] = field(default_factory=list)
    differs: list[tuple[Path, str]] = field(default_factory=list)  # (file, its sha256)
    full: bool = False  # MAX_FILES or MAX_READ was reached


def rootdir(start: Path) -> Path | None:
    """The nearest directory from ``start`` up holding one of :data:`INI_FILES`, or None."""
    for d in (start, *start.parents):
        if any((d / name).is_file() for name in INI_FILES):
            return d
    return None


def search_roots(given: Sequence[str]) -> list[Root]:
    """The roots in search order (the module docstring), each once; Refused for a ``--path`` that is no
    directory."""
    roots: list[Root] = []
    for g in given:
        p = Path(g)
        if not p.is_dir():
            raise Refused(f"--path {shown(g, 200)!r} is not a directory")
        roots.append(Root(p.resolve(), "--path"))
    here = Path.cwd().resolve()
    roots.append(Root(here, "the current directory"))
    top = rootdir(here)
    if top is not None:
        roots.append(Root(top, "the rootdir"))
    roots.append(Root(LIBRARY, "lastcall's scenario library"))
    unique: dict[Path, Root] = {}
    for r in roots:
        unique.setdefault(r.path, r)
    return list(unique.values())


def _reports_at(d: Path) -> bool:
    return any((d / name).exists() for name in REPORT_FILES)


def _files(root: Path, fenced: tuple[Path, ...], walk: _Walk) -> Iterator[Path]:
    """The scenario files under ``root``, depth first in name order, bounded (the module docstring)."""
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack:
        d, depth = stack.pop()
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            continue
        dirs = []
        for e in entries:
            if e.is_dir(follow_symlinks=False):  # a symbolic link is neither a directory nor a file here
                sub = Path(e.path)
                if depth < MAX_DEPTH and e.name not in SKIP and sub not in fenced and not _reports_at(sub):
                    dirs.append((sub, depth + 1))
            elif e.name.endswith(SUFFIXES) and "::" not in e.path and e.is_file(follow_symlinks=False):
                if walk.files >= MAX_FILES or walk.read >= MAX_READ:
                    walk.full = True
                    return
                walk.files += 1
                yield Path(e.path)
        stack.extend(reversed(dirs))  # the first by name is searched next


def _skipped(root: Root, fenced: tuple[Path, ...]) -> str | None:
    """Why ``root`` is not searched at all, or None."""
    if not root.path.is_dir():
        return "not a directory"
    for d in (root.path, *root.path.parents):
        if d in fenced:
            return f"it lies in the report's own directory {d}"
        if _reports_at(d):
            return f"it lies in {d}, a reports directory"
    return None


def _matches(file: Path, name: str) -> bool:
    """Whether ``file`` (of the recorded bytes) loads as the scenario ``name``; Refused when it does not load."""
    from harness.errors import HarnessError
    from harness.scenario import load

    try:
        return load(file).name == name
    except HarnessError as exc:
        raise Refused(f"{file} has the recorded sha256 but does not load: {exc}") from None


def find(name: str, sha256: str, roots: Sequence[Root], run_dir: Path) -> Path:
    """The first scenario file under ``roots`` named ``name`` whose bytes hash to ``sha256``.

    Error handling: Refused, listing where it looked, when there is none; naming the file and both hashes
    when a file of that name has other bytes.
    """
    from harness.scenario.loader import digest
    from harness.scenario.yamlnodes import MAX_BYTES

    run = run_dir.resolve()
    fenced = (run, run.parent)
    walk = _Walk()
    searched: list[Path] = []  # a root below one searched before is not searched again
    for root in roots:
        why = _skipped(root, fenced)
        walk.looked.append(f"{root.path} ({root.why}{'; not searched: ' + why if why else ''})")
        if why is not None:
            continue
        for file in _files(root.path, (*fenced, *searched), walk):
            try:
                data = read_bytes(file, MAX_BYTES, "scenario file")
            except ArtifactError:
                continue
            walk.read += len(data)
            have = digest(data)
            if have == sha256 and _matches(file, name):
                return file
            found = NAME_LINE.search(data)
            if found is not None and found[2].decode() == name:
                walk.differs.append((file, have))
        searched.append(root.path)
    if walk.differs:
        file, have = walk.differs[0]
        more = len(walk.differs) - 1
        raise Refused(f"found {name} at {file} but its content differs from the recorded run (sha256 {have[:12]}, "
                      f"recorded {sha256[:12]})" + (f"; {more} more file{'s' if more > 1 else ''} of that name "
                                                    "differ too" if more else ""))
    full = f" (stopped after {walk.files} files, {walk.read} bytes)" if walk.full else ""
    raise Refused(f"found no scenario {name} with the recorded sha256 {sha256[:12]}{full}; looked in "
                  f"{', '.join(walk.looked)}: give the directory that holds it with --path DIR")
