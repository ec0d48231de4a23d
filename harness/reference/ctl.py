"""Find, delete and sweep what reference instances leave on the machine.

What an instance owns (harness/reference/paths.py)::

    <root>/lastcall-tp-<ipc>-<hash8>/w<rank>.sock  (+ w<rank>.owner)        pipeline stage 0
    <root>/lastcall-tp-<ipc>-<hash8>/pp<N>/w<rank>.sock  (+ w<rank>.owner)  stage N > 0
    <shm_dir>/lastcall-usage-<ipc>-<hash8>  (+ <segment>.owner)             the usage record

The ``<ipc>-<hash8>`` part is the instance *key*: it ties a socket directory to
its usage segment.  Each artifact's state comes from its owner record: ``alive``
(the recorded pid runs, with the recorded start time), ``dead`` (it does not),
or ``unknown`` (no readable record: a crash between bind and record, or a
directory left empty).

These functions return data; ``lastcall ctl`` (harness/commands/instances.py) formats it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import HarnessError
from harness.reference.paths import (
    DIR_PREFIX,
    USAGE_PREFIX,
    OwnerRecord,
    default_root,
    instance_dir,
    owner_path,
    usage_segment_name,
)
from harness.reference.usage import SHM_DIR

__all__ = [
    "OWNER_SUFFIX",
    "Artifact",
    "Instance",
    "InstanceInUse",
    "usage_owner_path",
    "list_instances",
    "delete_instance",
    "sweep",
    "SweepResult",
]

OWNER_SUFFIX = ".owner"  # a usage segment's owner record is the segment's name plus this, in the same dir


class InstanceInUse(HarnessError):
    """delete_instance was refused: an owner of the instance still runs (pass force=True to override)."""


def usage_owner_path(shm_dir: str | os.PathLike[str], name: str) -> Path:
    """The owner record of usage segment ``name``: ``<shm_dir>/<name>.owner``.

    The segment itself is 24 raw bytes, so its owner (an :class:`OwnerRecord` with
    kind ``"usage"``) lives in this companion file, written by whoever creates the
    segment and removed with it.
    """
    return Path(shm_dir) / f"{name}{OWNER_SUFFIX}"


@dataclass(frozen=True)
class Artifact:
    """One thing an instance left: a socket (with its owner record), a usage segment, or a bare dir."""

    kind: str  # "socket", "usage" or "dir" (an instance directory holding no socket or record)
    key: str  # "<ipc>-<hash8>": the instance this belongs to
    ipc: str  # the owner's ipc name, else the sanitised name from the path
    path: Path  # the socket, segment or directory (it may be gone while its record is left)
    owner: OwnerRecord | None
    state: str  # "alive", "dead" or "unknown" (no owner record)
    rank: int | None = None  # sockets only
    pp: int | None = None  # sockets only


@dataclass(frozen=True)
class Instance:
    """Everything found for one key; ``dir`` is its socket directory, if any."""

    key: str
    ipc: str
    dir: Path | None
    artifacts: tuple[Artifact, ...] = field(default=())

    @property
    def live_owners(self) -> list[OwnerRecord]:
        """Owner records whose process still runs, one per pid."""
        seen: dict[int, OwnerRecord] = {}
        for a in self.artifacts:
            if a.state == "alive" and a.owner is not None:
                seen.setdefault(a.owner.pid, a.owner)
        return list(seen.values())

    @property
    def alive(self) -> bool:
        return bool(self.live_owners)


def _state(rec: OwnerRecord | None) -> str:
    if rec is None:
        return "unknown"
    return "alive" if rec.alive() else "dead"


def _ipc_from_key(key: str) -> str:
    return key.rsplit("-", 1)[0] if "-" in key else key


def _rank_of(name: str) -> int | None:
    """``w3.sock`` / ``w3.owner`` -> 3; anything else -> None."""
    stem, _, _suffix = name.partition(".")
    return int(stem[1:]) if stem[:1] == "w" and stem[1:].isdigit() else None


def _socket_artifacts(key: str, base: Path) -> Iterator[Artifact]:
    stages: list[tuple[int, Path]] = [(0, base)]
    for sub in sorted(base.glob("pp*")):
        if sub.is_dir() and not sub.is_symlink() and sub.name[2:].isdigit():
            stages.append((int(sub.name[2:]), sub))
    for pp, d in stages:
        found = {_rank_of(p.name) for p in d.iterdir() if p.suffix in (".sock", OWNER_SUFFIX)}
        for rank in sorted(r for r in found if r is not None):
            sock = d / f"w{rank}.sock"
            rec = OwnerRecord.read(owner_path(sock))
            yield Artifact("socket", key, rec.ipc if rec else _ipc_from_key(key), sock, rec, _state(rec),
                           rank=rank, pp=pp)


def _scan(root: Path, shm_dir: Path) -> dict[str, Instance]:
    found: dict[str, tuple[Path | None, list[Artifact]]] = {}
    if root.is_dir():
        for d in sorted(root.glob(f"{DIR_PREFIX}*")):
            if not d.is_dir() or d.is_symlink():
                continue
            key = d.name[len(DIR_PREFIX):]
            try:
                arts = list(_socket_artifacts(key, d))
            except OSError:  # unreadable (another user's): show the directory itself
                arts = []
            if not arts:
                arts.append(Artifact("dir", key, _ipc_from_key(key), d, None, "unknown"))
            found[key] = (d, arts)
    if shm_dir.is_dir():
        names = {p.name.removesuffix(OWNER_SUFFIX) for p in shm_dir.glob(f"{USAGE_PREFIX}*")
                 if f"{OWNER_SUFFIX}.tmp" not in p.name}  # skip an owner record being written
        for name in sorted(names):
            key = name[len(USAGE_PREFIX):]
            rec = OwnerRecord.read(usage_owner_path(shm_dir, name))
            art = Artifact("usage", key, rec.ipc if rec else _ipc_from_key(key), shm_dir / name, rec, _state(rec))
            found.setdefault(key, (None, []))[1].append(art)
    out: dict[str, Instance] = {}
    for key, (sock_dir, arts) in found.items():
        ipc = next((a.owner.ipc for a in arts if a.owner is not None), _ipc_from_key(key))
        out[key] = Instance(key, ipc, sock_dir, tuple(arts))
    return out


def list_instances(root: str | os.PathLike[str] | None = None,
                   shm_dir: str | os.PathLike[str] = SHM_DIR) -> list[Instance]:
    """Every instance found under ``root`` (default: paths.default_root()) and in ``shm_dir``.

    Returns: instances sorted by key, each with its artifacts; never raises for
        a missing root or shm dir (nothing is found there).
    """
    found = _scan(Path(root if root is not None else default_root()), Path(shm_dir))
    return [found[k] for k in sorted(found)]


def _cannot(path: Path, exc: OSError, removed: list[Path]) -> HarnessError:
    done = f" (removed {len(removed)} path{'' if len(removed) == 1 else 's'} before it)" if removed else ""
    return HarnessError(f"cannot remove {path}: {exc.strerror or exc}{done}; is it another user's?")


def _remove_file(path: Path, removed: list[Path]) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        return  # a concurrent removal is normal
    except OSError as exc:
        raise _cannot(path, exc, removed) from exc
    removed.append(path)


def _socket_first(name: str) -> tuple[str, bool, str]:
    """Order ``w0.sock, w0.owner, w1.sock, ...``: each socket, then its record."""
    stem, _, suffix = name.partition(".")
    return stem, suffix != "sock", suffix


def _remove_tree(top: Path, removed: list[Path]) -> None:
    """Remove ``top`` bottom-up, recording each path; a symlink is unlinked, never followed."""
    if top.is_symlink() or not top.is_dir():
        _remove_file(top, removed)
        return
    for dirpath, dirnames, filenames in os.walk(top, topdown=False):
        here = Path(dirpath)
        for name in sorted(filenames, key=_socket_first):
            _remove_file(here / name, removed)
        for name in sorted(dirnames):
            if (here / name).is_symlink():
                _remove_file(here / name, removed)
        try:
            here.rmdir()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise _cannot(here, exc, removed) from exc
        removed.append(here)


def _remove_instance(inst: Instance, shm_dir: Path) -> list[Path]:
    removed: list[Path] = []
    for a in inst.artifacts:
        if a.kind == "usage":
            _remove_file(a.path, removed)
            owner = usage_owner_path(shm_dir, a.path.name)
            _remove_file(owner, removed)
            for tmp in sorted(shm_dir.glob(f"{owner.name}.tmp*")):
                _remove_file(tmp, removed)
    if inst.dir is not None:
        _remove_tree(inst.dir, removed)
    return removed


def _matches(inst: Instance, ipc: str, root: Path) -> bool:
    """``ipc`` names ``inst`` by its exact paths, or by the key/name ``ctl list`` printed."""
    try:
        if inst.dir is not None and inst.dir == instance_dir(ipc, root):
            return True
        if any(a.kind == "usage" and a.path.name == usage_segment_name(ipc) for a in inst.artifacts):
            return True
    except HarnessError:
        pass  # not a valid ipc name: it may still be a key
    return ipc in (inst.key, inst.ipc)


def delete_instance(ipc: str, root: str | os.PathLike[str] | None = None,
                    shm_dir: str | os.PathLike[str] = SHM_DIR, *, force: bool = False) -> list[Path]:
    """Remove instance ``ipc``: its usage segment and owner file, and its socket directory.

    ``ipc`` is the name the instance was started with (or the key ``ctl list`` shows).

    Returns: every path removed, files before their directories; empty when
        nothing of ``ipc`` exists.
    Resource handling: sockets are unlinked, not connected to; a live owner's
        listener keeps serving on its open socket but can no longer be reached.
    Error handling: InstanceInUse naming the live pid (nothing is removed)
        when an owner still runs and ``force`` is False; HarnessError naming
        the path that cannot be removed (what was removed before it stays removed).
    """
    base = Path(root if root is not None else default_root())
    shm = Path(shm_dir)
    targets = [inst for inst in _scan(base, shm).values() if _matches(inst, ipc, base)]
    if not force:
        for inst in targets:
            if inst.live_owners:
                pids = ", ".join(str(o.pid) for o in inst.live_owners)
                raise InstanceInUse(f"instance {ipc!r} is in use by live pid {pids}; stop it first, "
                                    f"or pass --force to delete it anyway")
    removed: list[Path] = []
    for inst in targets:
        removed += _remove_instance(inst, shm)
    return removed


@dataclass(frozen=True)
class SweepResult:
    """What :func:`sweep` did: the paths it removed, and the instances it kept because an owner lives."""

    removed: list[Path]
    kept: list[Instance]


def sweep(root: str | os.PathLike[str] | None = None, shm_dir: str | os.PathLike[str] = SHM_DIR) -> SweepResult:
    """Remove every instance none of whose owners runs (dead, or no owner record).

    Returns: the removed paths and the live instances left alone.
    Error handling: HarnessError naming the path that cannot be removed (ENOENT,
        a concurrent removal, is normal).
    """
    shm = Path(shm_dir)
    removed: list[Path] = []
    kept: list[Instance] = []
    for inst in list_instances(root, shm):
        if inst.alive:
            kept.append(inst)
        else:
            removed += _remove_instance(inst, shm)
    return SweepResult(removed, kept)
