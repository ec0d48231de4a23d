"""The kinds of neighbour load benchmarks/load_robustness.py runs the scenario library under, each a context
manager (:func:`load`) that starts its neighbours, returns once each has said it is running, and leaves none behind.

Every neighbour is this file run as ``--neighbour ROLE READY_FD PARENT_PID ARGS...``: it writes ``ready`` to the
pipe READY_FD once its load is on, and the kernel kills it if its parent dies (PR_SET_PDEATHSIG).  Each is the
leader of its own process group, so ^C at the terminal reaches the benchmark and not it, and stopping the group
stops what it started: leaving a load sends each group SIGTERM, then SIGKILL, waits for each neighbour and checks
that no process of any group is left.  No neighbour needs root: the page cache is evicted file by file
(posix_fadvise DONTNEED), never system-wide.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve()
KINDS = ("none", "cpu2", "cpu4", "io", "memory", "forks", "mixed", "cold")
# not one of the table's kinds: .ci/run's single pass, a cold clone's first run with the mixed load beside it
CI = "ci"
SITE = Path(sysconfig.get_path("purelib"))  # the venv's site-packages (the benchmark runs with the venv's python)
WRITE_MIB = 64  # the io writer's file, rewritten in a loop
BIG_FILE = 1 << 20  # the io reader evicts and reads files of at least this size
FORKS_IN_FLIGHT = 4
READY_S = 120.0  # for a neighbour's handshake: the memory neighbour first touches half the machine's memory
STOP_S = 10.0  # for a neighbour group to end after SIGTERM, then after SIGKILL
PAGE_SIZE = mmap.PAGESIZE
PR_SET_PDEATHSIG = 1


# --- the neighbours ------------------------------------------------------------------------------------------

def _ready(fd: int) -> None:
    os.write(fd, b"ready\n")
    os.close(fd)


def _busy(fd: int) -> None:
    _ready(fd)
    while True:
        pass


def _writer(fd: int, where: str, mib: str) -> None:
    chunk, path = os.urandom(1 << 20), os.path.join(where, "io-load")
    first = True
    while True:
        with open(path, "wb") as f:
            for _ in range(int(mib)):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        if first:
            _ready(fd)
            first = False


def _reader(fd: int, where: str) -> None:
    files = [p for p in Path(where).rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_size >= BIG_FILE]
    if not files:
        raise SystemExit(f"io reader: no file of {BIG_FILE} bytes or more under {where}")
    first = True
    while True:
        for p in files:
            evict(p)
            with open(p, "rb") as f:
                while f.read(1 << 20):
                    pass
            evict(p)  # left cold for the suite, not cached by this read
            if first:
                _ready(fd)
                first = False


def _memory(fd: int, size: str) -> None:
    n = int(size)
    with contextlib.suppress(OSError):  # should memory still run out, the kernel picks this process first
        Path("/proc/self/oom_score_adj").write_text("1000")
    # its own address space capped just above what it maps: it can never take more than it was given
    vm = next(int(line.split()[1]) * 1024 for line in Path("/proc/self/status").read_text().splitlines()
              if line.startswith("VmSize:"))
    limit = vm + n + (64 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    view = memoryview(mmap.mmap(-1, n))
    pages = len(range(0, n, PAGE_SIZE))
    view[::PAGE_SIZE] = b"\1" * pages
    _ready(fd)
    byte = 1
    while True:  # each page written again every second: resident and recently used, not idle memory
        time.sleep(1.0)
        byte = byte % 255 + 1
        view[::PAGE_SIZE] = bytes([byte]) * pages


def _forks(fd: int, at_once: str) -> None:
    kids: set[int] = set()

    def stop(*_: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    first = True
    try:
        while True:
            while len(kids) < int(at_once):
                kids.add(os.posix_spawn("/bin/true", ["/bin/true"], os.environ))
            pid, _ = os.wait()
            kids.discard(pid)
            if first:
                _ready(fd)
                first = False
    finally:  # every child reaped here (one spawned as SIGTERM came is in no set): an orphan would be left to a
        # pid 1 that may never reap it
        with contextlib.suppress(ChildProcessError):
            while True:
                os.wait()


ROLES: dict[str, Callable[..., None]] = {"busy": _busy, "writer": _writer, "reader": _reader, "memory": _memory,
                                         "forks": _forks}


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent dies, however it dies (kept across exec)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)


def neighbour(argv: list[str]) -> None:
    role, fd, parent, *args = argv
    die_with_parent()
    if os.getppid() != int(parent):  # the parent died before the line above
        raise SystemExit(1)
    ROLES[role](int(fd), *args)


# --- the loads ------------------------------------------------------------------------------------------------

def evict(path: Path) -> None:
    """Drop one file's pages from the page cache (written back first: a dirty page is not dropped); no root
    needed, nothing else's cache touched."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def evict_tree(root: Path) -> int:
    n = 0
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            evict(p)
            n += 1
    return n


def mem_available() -> int:
    return meminfo()["MemAvailable"]


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes."""
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        out[key] = int(rest.split()[0]) * 1024
    return out


class Neighbours:
    """Processes started beside the suite, each the leader of its own process group (so ^C at the terminal
    reaches the suite, not them, and stopping a group stops what a neighbour started)."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, role: str, *args: str) -> None:
        """Start one and return once it has written its line: its load is on."""
        r, w = os.pipe()
        try:
            self.procs.append((role, subprocess.Popen(
                [sys.executable, str(SCRIPT), "--neighbour", role, str(w), str(os.getpid()), *args],
                pass_fds=(w,), start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)))
        finally:
            os.close(w)
        try:
            got = b""
            deadline = time.monotonic() + READY_S
            while not got.endswith(b"\n") and (left := deadline - time.monotonic()) > 0:
                if not select.select([r], [], [], left)[0]:
                    break
                if not (part := os.read(r, 64)):
                    break
                got += part
        finally:
            os.close(r)
        if got != b"ready\n":
            raise RuntimeError(f"load neighbour {role} did not start (it said {got!r})")

    def pids(self) -> list[int]:
        return [p.pid for _, p in self.procs]

    def dead(self) -> list[str]:
        return [f"{role} (exit {p.returncode})" for role, p in self.procs if p.poll() is not None]

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for _, p in self.procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, sig)
            deadline = time.monotonic() + STOP_S
            for _, p in self.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(max(0.0, deadline - time.monotonic()))
            if all(p.returncode is not None and not group_alive(p.pid) for _, p in self.procs):
                return
        left = [p.pid for _, p in self.procs if p.returncode is None or group_alive(p.pid)]
        raise RuntimeError(f"load neighbours' process groups {left} still have processes after SIGKILL")


def group_members(pgid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process in process group ``pgid``, from /proc (a zombie's state is Z)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[2]) == pgid:
            out.append((int(d.name), fields[0]))
    return out


def group_alive(pgid: int, zombies: bool = True) -> bool:
    return any(zombies or state != "Z" for _, state in group_members(pgid))


@dataclass
class Load:
    """Where a repeat runs under a load: its directory, what its environment adds, the neighbours (if any)."""

    cwd: Path
    env: dict[str, str] = field(default_factory=dict)
    group: Neighbours | None = None

    def dead(self) -> list[str]:
        return self.group.dead() if self.group else []


def roles(kind: str, tmp: str, *, write_mib: int = WRITE_MIB, read_root: Path = SITE,
          memory_bytes: int | None = None) -> list[tuple[str, ...]]:
    """The neighbours of a kind of load: (role, args...) each."""
    if kind == "memory":  # at most half of what is available, read as the load starts
        return [("memory", str(memory_bytes if memory_bytes is not None else mem_available() // 2))]
    busy: list[tuple[str, ...]] = [("busy",)]
    io: list[tuple[str, ...]] = [("writer", tmp, str(write_mib)), ("reader", str(read_root))]
    forks: list[tuple[str, ...]] = [("forks", str(FORKS_IN_FLIGHT))]
    kinds: dict[str, list[tuple[str, ...]]] = {"none": [], "cpu2": busy * 2, "cpu4": busy * 4, "io": io,
                                               "forks": forks, "mixed": busy * 2 + io + forks}
    return kinds[kind]


@contextlib.contextmanager
def load(kind: str, **options: Any) -> Iterator[Load]:
    """A kind of load, on while the block runs; its neighbours are all gone when it ends, however it ends."""
    if kind == "cold":
        with cold_start() as where:
            yield where
        return
    if kind == "ci":  # CI's one pass: a cold clone's first run with the mixed load beside it
        with cold_start() as where, neighbours("mixed", **options) as group:
            yield Load(where.cwd, where.env, group)
        return
    with neighbours(kind, **options) as group:
        yield Load(ROOT, group=group)


@contextlib.contextmanager
def neighbours(kind: str, **options: Any) -> Iterator[Neighbours]:
    """The neighbours of a kind of load, started, and all gone when the block ends."""
    with tempfile.TemporaryDirectory(prefix="load-robustness-") as tmp:
        group = Neighbours()
        try:
            for role, *args in roles(kind, tmp, **options):
                group.start(role, *args)
            yield group
        finally:
            group.stop()


@contextlib.contextmanager
def cold_start() -> Iterator[Load]:
    """A fresh clone of HEAD whose harness is the one imported (the venv is this tree's; PYTHONPATH puts the
    clone first), with an empty bytecode cache and the clone's and site-packages' pages out of the page cache."""
    tmp = Path(tempfile.mkdtemp(prefix="load-robustness-cold-"))
    try:
        clone, cache = tmp / "clone", tmp / "pycache"
        subprocess.run(["git", "clone", "-q", "--local", str(ROOT), str(clone)], check=True)
        cache.mkdir()
        evict_tree(clone)
        evict_tree(SITE)
        path = os.pathsep.join(filter(None, [str(clone), os.environ.get("PYTHONPATH")]))
        yield Load(clone, {"PYTHONPATH": path, "PYTHONPYCACHEPREFIX": str(cache)})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__" and sys.argv[1:2] == ["--neighbour"]:
    neighbour(sys.argv[2:])
