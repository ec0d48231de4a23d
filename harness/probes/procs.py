"""Processes by identity: parentage, state, threads by name, fds by type, read from /proc.

psutil misses pipes and eventfds in its fd view, so fds come from readlink of
``/proc/PID/fd/N``.  A process (or thread, or fd) that vanishes mid-read is
normal and skipped; what exists but cannot be read (another user's process) is
recorded in ``errors`` when a list is given.  Nothing here raises.

``processes`` selects the union of explicit pids, whole process groups and all
descendants of a pid (found by walking ppid links over every process in /proc,
so processes that left the group are still found when they stayed descendants).
Zombies (state ``Z``) and processes "reparented away" (in a run's process group,
but whose parent is neither a selected process nor a harness helper: the run's
own parent died and init or a subreaper inherited them) are derived by
:func:`zombies` and :func:`reparented_away`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from harness.probes.model import FdEntry, ProcEntry

__all__ = ["Stat", "read_stat", "all_stats", "classify_fd", "fds_of", "threads_of", "proc_entry", "descendants",
           "processes", "zombies", "reparented_away", "process_umask", "CMDLINE_MAX"]

CMDLINE_MAX = 300  # characters of the command line kept per process


@dataclass(frozen=True)
class Stat:
    """The fields of /proc/PID/stat the probes use."""

    pid: int
    comm: str
    state: str
    ppid: int
    pgid: int
    start_ticks: int  # field 22: start time in clock ticks since boot; with pid, the process's identity
    sid: int = 0  # field 6: the session (an engine tree's: harness.engine.tree starts each in one of its own)


def _note(errors: list[str] | None, what: str, exc: OSError) -> None:
    if errors is not None:
        errors.append(f"{what}: {exc.strerror or exc}")


def read_stat(pid: int, errors: list[str] | None = None) -> Stat | None:
    """/proc/PID/stat parsed; None when the process is gone (or the line is unreadable, noted)."""
    try:  # os.read, not open(): every snapshot reads every process's line, and a file object costs twice as much
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            raw = os.read(fd, 4096)  # one line, far shorter (comm is at most 64 bytes)
        finally:
            os.close(fd)
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError as exc:
        _note(errors, f"read /proc/{pid}/stat", exc)
        return None
    # comm (field 2) may hold spaces and parentheses: it runs from the first '(' to the last ')'.
    try:
        close = raw.rindex(b")")
        comm = raw[raw.index(b"(") + 1 : close].decode(errors="replace")
        rest = raw[close + 2 :].split()
        return Stat(pid, comm, rest[0].decode(), int(rest[1]), int(rest[2]), int(rest[19]), int(rest[3]))
    except (ValueError, IndexError):
        if errors is not None:
            errors.append(f"parse /proc/{pid}/stat: {raw[:200]!r}")
        return None


def all_stats(errors: list[str] | None = None) -> dict[int, Stat]:
    """Every process visible in /proc, by pid."""
    try:
        names = os.listdir("/proc")
    except OSError as exc:
        _note(errors, "list /proc", exc)
        return {}
    out: dict[int, Stat] = {}
    for name in names:
        if name.isdigit():
            st = read_stat(int(name), errors)
            if st is not None:
                out[st.pid] = st
    return out


def classify_fd(target: str) -> str:
    """``socket`` | ``pipe`` | ``anon`` (eventfd, epoll, timerfd, pidfd ...) | ``dev`` | ``file`` | ``other``."""
    if target.startswith("socket:["):
        return "socket"
    if target.startswith("pipe:["):
        return "pipe"
    if target.startswith("anon_inode:"):
        return "anon"
    if target.startswith("/dev/") and not target.startswith("/dev/shm/"):
        return "dev"
    if target.startswith("/"):
        return "file"  # including "/path (deleted)" and /dev/shm segments
    return "other"


def fds_of(pid: int, errors: list[str] | None = None) -> tuple[FdEntry, ...] | None:
    """The open fds of ``pid``, sorted; None when the process is gone."""
    base = f"/proc/{pid}/fd"
    try:
        names = os.listdir(base)
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError as exc:
        _note(errors, f"list {base}", exc)
        return ()
    out: list[FdEntry] = []
    for name in names:
        try:
            target = os.readlink(f"{base}/{name}")
        except FileNotFoundError:
            continue  # closed while we read: normal
        except OSError as exc:
            _note(errors, f"readlink {base}/{name}", exc)
            continue
        out.append(FdEntry(int(name), classify_fd(target), target))
    return tuple(sorted(out, key=lambda e: e.fd))


def threads_of(pid: int, errors: list[str] | None = None) -> tuple[str, ...] | None:
    """The names (comm) of every thread of ``pid``, sorted; None when the process is gone."""
    base = f"/proc/{pid}/task"
    try:
        tids = os.listdir(base)
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError as exc:
        _note(errors, f"list {base}", exc)
        return ()
    names: list[str] = []
    for tid in tids:
        try:
            with open(f"{base}/{tid}/comm", "rb") as f:
                names.append(f.read().rstrip(b"\n").decode(errors="replace"))
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread exited while we read: normal
        except OSError as exc:
            _note(errors, f"read {base}/{tid}/comm", exc)
    return tuple(sorted(names))


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(CMDLINE_MAX * 4)
    except OSError:
        return ""  # gone, or not ours: the cmdline is informative only
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:CMDLINE_MAX]


def proc_entry(pid: int, errors: list[str] | None = None, *, stat: Stat | None = None,
               fds: bool = True, threads: bool = True) -> ProcEntry | None:
    """One process as a :class:`ProcEntry`; None when it is gone (or vanishes while read).

    ``stat``: an already-read /proc/PID/stat (from :func:`all_stats`) to save a read.
    A zombie has no fds and one thread; it is returned with state ``Z``.
    """
    st = stat if stat is not None else read_stat(pid, errors)
    if st is None:
        return None
    thread_names: tuple[str, ...] | None = ()
    fd_list: tuple[FdEntry, ...] | None = ()
    if threads:
        thread_names = threads_of(pid, errors)
        if thread_names is None:
            return None
    if fds:
        fd_list = fds_of(pid, errors)
        if fd_list is None:
            return None
    return ProcEntry(pid=pid, ppid=st.ppid, pgid=st.pgid, start_ticks=st.start_ticks, name=st.comm,
                     state=st.state, threads=thread_names or (), fds=fd_list or (), cmdline=_cmdline(pid))


def descendants(stats: dict[int, Stat], root: int | Iterable[int]) -> set[int]:
    """Every process below ``root`` (or below any of several roots; not the roots themselves) by ppid links."""
    roots = {root} if isinstance(root, int) else set(root)
    children: dict[int, list[int]] = {}
    for st in stats.values():
        children.setdefault(st.ppid, []).append(st.pid)
    found: set[int] = set()
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found and child not in roots:
                found.add(child)
                stack.append(child)
    return found


def processes(pids: Iterable[int] | None = None, pgids: Iterable[int] | None = None,
              descendants_of: int | None = None, errors: list[str] | None = None, *,
              fds: bool = True, threads: bool = True, foreign_pgids: Iterable[int] = (),
              foreign_pids: Iterable[int] = (), shared_pgids: Iterable[int] = (),
              foreign_sids: Iterable[int] = ()) -> tuple[ProcEntry, ...]:
    """The union of ``pids``, every process of ``pgids`` and every descendant of ``descendants_of``.

    The descendants leave out the processes of ``foreign_pgids``, ``foreign_sids`` (sessions) and
    ``foreign_pids`` and every process below them, and the processes of ``shared_pgids`` themselves; a process
    of ``pids`` or ``pgids`` always stays.

    Returns: entries sorted by pid; a pid that no longer exists is left out
        (an exited and reaped process is no leftover).
    Resource handling: /proc is scanned in full only when ``pgids`` or
        ``descendants_of`` is given.
    """
    groups = {g for g in (pgids or ()) if g > 0}
    stats: dict[int, Stat] = {}
    wanted: set[int] = set()
    if groups or descendants_of is not None:
        stats = all_stats(errors)
        wanted |= {st.pid for st in stats.values() if st.pgid in groups}
        if descendants_of is not None:
            below = descendants(stats, descendants_of)
            f_groups, f_pids, s_groups = set(foreign_pgids), set(foreign_pids), set(shared_pgids)
            f_sids = set(foreign_sids)
            if f_groups or f_pids or s_groups or f_sids:
                foreign = {p for p in below if p in f_pids or stats[p].pgid in f_groups or stats[p].sid in f_sids}
                foreign |= descendants(stats, foreign)  # one walk for all of them
                foreign |= {p for p in below if stats[p].pgid in s_groups}
                below -= foreign
            wanted |= below
    wanted |= {p for p in (pids or ()) if p > 0}
    out: list[ProcEntry] = []
    for pid in sorted(wanted):
        entry = proc_entry(pid, errors, stat=stats.get(pid), fds=fds, threads=threads)
        if entry is not None:
            out.append(entry)
    return tuple(out)


def zombies(procs: Iterable[ProcEntry]) -> tuple[int, ...]:
    """Pids in state ``Z`` (exited, not yet reaped by their parent)."""
    return tuple(sorted(p.pid for p in procs if p.state == "Z"))


def reparented_away(procs: Iterable[ProcEntry], pgids: Iterable[int], harness_pids: Iterable[int]) -> tuple[int, ...]:
    """Pids in one of ``pgids`` whose parent is neither a process of ``procs`` nor a harness helper.

    Their original parent died, and init (or a subreaper, such as the harness
    itself) inherited them: nobody of the run will reap them.
    """
    entries = list(procs)
    groups = set(pgids)
    known = {p.pid for p in entries} | set(harness_pids)
    return tuple(sorted(p.pid for p in entries if p.pgid in groups and p.ppid not in known))


def process_umask() -> int | None:
    """This process's umask, read from /proc/self/status (``Umask:``, Linux 4.7+) without changing it; None when
    the kernel does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None
