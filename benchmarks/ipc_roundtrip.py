"""Round-trip cost of the reference listener vs a bare listener with the same framing.

Run:  .venv/bin/python benchmarks/ipc_roundtrip.py [--backend noop|allocator|both]
          [--placement process thread] [--quick] [--write [--append]]

``--write`` (a full run only) commits the figures: docs/data/ipc_roundtrip.json and its two tables in
docs/benchmarks.md; with ``--append`` the run is added beside those already there (the tables show each
run in a column of its own), else it replaces them.

What it measures (the client always on this process's main thread; history
recording off: the reference listener gets no recorder, i.e. a NullRecorder):

1. Per-request round trip with one fresh connection per request (connect, send
   one frame, read the reply, close: kvcached's ``_send_and_receive_message``),
   reference listener vs :class:`harness.bench.bare.BareListener`, each with
   its own backend of the same kind, interleaved ABBA windows, median of window
   medians, in two placements:

   * ``process`` (the target is judged here): each listener in a forked child
     (:class:`harness.bench.serverproc.ServerProcess`), as kvcached's listener
     runs in a worker process and its client in the engine's;
   * ``thread`` (informational): both listeners on threads of this process,
     sharing one backend object.  Client and listener then take turns on one
     GIL, so the reference's bookkeeping after each reply (the EOF read and the
     close of a connection a keep-alive listener must watch, which a
     one-request-per-connection loop never pays) lands on the client's clock
     instead of running on another core.

   The ops:

   * ``kv_tensors_created``: one small request;
   * ``map 16``: a map of 16 distinct page offsets, timed; the same offsets are
     unmapped right after by an untimed request to the same listener, so pages
     never run out with the real allocator (same on both backends);
   * ``unmap pair``: prepare + commit of a two-phase unmap of 16 offsets, both
     requests timed together; the 16 pages are mapped first by an untimed request.

   Once with the NoopBackend (listener cost dominates) and once with the real
   allocator (``AllocatorBackend(KVAllocator(page_size=2 MiB))``, CPU memory).
   Beside it, the serving thread's own CPU time per ``kv_tensors_created``
   request (``pthread_getcpuclockid`` in this process, ``/proc/PID/task/TID/schedstat``
   for a child), which wake-up latency does not inflate.
2. ``stop()`` latency of a reference listener with 0, 16 and 256 idle
   connections parked (connected and accepted), median of 15 fresh listeners each.
3. A ``kv_tensors_created`` round trip on a listener with 16 idle clients
   parked vs one with none (two reference listeners), interleaved windows.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import itertools
import os
import platform
import resource
import select
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import docpage

from harness.bench.bare import BareListener
from harness.bench.interleave import Arm, Request, Step, format_result, format_rows, run_interleaved
from harness.bench.serverproc import Served, ServerProcess, on_cpu, two_cpus
from harness.history import NullRecorder
from harness.reference import wire
from harness.reference.allocator import KVAllocator, MiB
from harness.reference.backend import AllocatorBackend, NoopBackend
from harness.reference.listener import WorkerListener
from harness.reference.paths import socket_path
from harness.reference.serving import Backend

PAGE = 2 * MiB
CAPACITY = 1 << 30  # group 0's address space: 512 pages; only 16 are ever mapped at once
PAGES = CAPACITY // PAGE
N_OFFSETS = 16
RATIO_TARGET = 1.10  # reference / bare, per op, no-op backend
STOP_TARGET_MS = 1.0  # median stop() with 256 parked connections
LOADED_TARGET = 2.0  # loaded / unloaded request latency
OPS = ("kv_tensors_created", "map 16", "unmap pair")
NAME = "ipc-roundtrip"  # docs/data/ipc_roundtrip.json and the markers of its tables in docs/benchmarks.md


# ----------------------------------------------------------------- client
def roundtrip(path: str, req: wire.Request) -> wire.Reply:
    """One request on a fresh connection: connect, send, receive, close."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        s.sendall(wire.encode_request(req))
        return wire.decode_reply(wire.recv_frame(s))
    finally:
        s.close()


def call(path: str, req: wire.Request, expect: str) -> wire.Reply:
    rep = roundtrip(path, req)
    if rep.status != expect:
        raise RuntimeError(f"{req.cmd} on {path}: expected {expect}, got {rep}")
    return rep


class Client:
    """The three ops against one socket path; offsets and transaction ids rotate via shared counters."""

    def __init__(self, path: str, seq: Iterator[int]) -> None:
        self.path = path
        self.seq = seq
        self.offsets: list[int] = []

    def created(self) -> None:
        call(self.path, wire.Request(cmd="kv_tensors_created"), "success")

    def pick(self) -> None:
        base = next(self.seq) * N_OFFSETS
        self.offsets = [((base + j) % PAGES) * PAGE for j in range(N_OFFSETS)]

    def map(self) -> None:
        rep = call(self.path, wire.Request(cmd="map_to_kv_tensors", offsets=self.offsets), "success")
        if len(rep.newly_mapped_offsets or ()) != N_OFFSETS:
            raise RuntimeError(f"map mapped {rep.newly_mapped_offsets}, expected {N_OFFSETS} new offsets")

    def unmap(self) -> None:
        call(self.path, wire.Request(cmd="unmap_from_kv_tensors", offsets=self.offsets), "success")

    def pick_and_map(self) -> None:
        self.pick()
        self.map()

    def unmap_pair(self) -> None:
        txn = f"t{next(self.seq)}"
        call(self.path, wire.Request(cmd="prepare_unmap_from_kv_tensors", offsets=self.offsets,
                                     transaction_id=txn), "prepared")
        call(self.path, wire.Request(cmd="commit_unmap_from_kv_tensors", transaction_id=txn), "committed")

    def ops(self) -> dict[str, Request]:
        return {
            "kv_tensors_created": self.created,
            "map 16": Step(self.map, before=self.pick, after=self.unmap),
            "unmap pair": Step(self.unmap_pair, before=self.pick_and_map),
        }


def park(path: str, n: int, listener: WorkerListener) -> list[socket.socket]:
    """Open ``n`` idle connections and return once the listener has accepted them all.

    The barrier: one request on an extra connection.  The listener accepts in
    queue order until EAGAIN before serving anything, so when that reply is in,
    every earlier connection was accepted; the count is checked anyway.
    """
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            socks.append(s)
            s.connect(path)
        call(path, wire.Request(cmd="kv_tensors_created"), "success")
        tracked = len(listener._conns)
        if tracked < n:
            raise RuntimeError(f"{tracked} connections tracked, expected at least {n}")
    except BaseException:
        close_all(socks)
        raise
    return socks


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()
    socks.clear()


def thread_cpu_ns(thread: threading.Thread | None) -> int:
    if thread is None or thread.ident is None:
        raise RuntimeError("server thread not running")
    return time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))


def server_cpu(servers: dict[str, tuple[str, Callable[[], int]]], n: int, rounds: int,
               out: dict[str, Any] | None = None) -> str:
    """Serving-thread CPU per kv_tensors_created request, arms alternated per round; medians."""
    per: dict[str, list[float]] = {name: [] for name in servers}
    names = list(servers)
    for r in range(rounds + 1):  # round 0 warms up
        for name in names if r % 2 else reversed(names):
            path, cpu_ns = servers[name]
            c0 = cpu_ns()
            for _ in range(n):
                call(path, wire.Request(cmd="kv_tensors_created"), "success")
            if r:
                per[name].append((cpu_ns() - c0) / n)
    base = statistics.median(per[names[-1]])
    if out is not None:
        out.update({f"{name}_us": statistics.median(v) / 1e3 for name, v in per.items()},
                   ratio=statistics.median(per[names[0]]) / base)
    rows = [[name, f"{statistics.median(v) / 1e3:.1f}", f"{statistics.median(v) / base:.3f}"]
            for name, v in per.items()]
    head = f"serving-thread CPU per kv_tensors_created request, {rounds} rounds x {n}, median"
    return head + "\n" + format_rows(["arm", "CPU (us/request)", f"vs {names[-1]}"], rows)


# ---------------------------------------------------------------- placement on CPUs
# Unpinned on a 2-CPU VM, a round trip takes about 20 us when the scheduler puts the listener on the client's
# CPU and about 60 us when the request wakes the other one; which it is changes from window to window, so the
# per-window ratios swung between 0.24 and 4.6 and a run's medians said nothing about the
# listener.  Pinned (the default where there are 2 CPUs), the client runs on one CPU and every listener (its
# process, or its serving thread) on another: each request is the deployment's cross-CPU round trip, every
# window alike.  The stop part is never pinned: on one CPU its two threads would skip that wake.
PIN: dict[str, int] = {}  # {"client": cpu, "listeners": cpu} while pinned (main); empty: unpinned


def pin_plan(enabled: bool) -> dict[str, int]:
    """The two CPUs of a pinned run: the first two this process may run on; {} if fewer or not ``enabled``."""
    two = two_cpus(enabled)
    return {"client": two[0], "listeners": two[1]} if two else {}


def client_pinned() -> AbstractContextManager[None]:
    """This thread on the client's CPU for the block (when pinned), then back where it may run."""
    return on_cpu(PIN.get("client"))


def listener_cpus() -> frozenset[int] | None:
    return frozenset({PIN["listeners"]}) if PIN else None


def pin_listener(lst: Any) -> None:
    """An in-process listener's serving thread on the listeners' CPU (when pinned)."""
    tid = getattr(getattr(lst, "thread", None), "native_id", None)
    if PIN and tid is not None:
        os.sched_setaffinity(tid, {PIN["listeners"]})


def placement_note() -> str:
    return (f"; client on CPU {PIN['client']}, listeners on CPU {PIN['listeners']}" if PIN else "; unpinned")


# ---------------------------------------------------------------- servers
@contextmanager
def reference(root: Path, ipc: str, backend: Backend) -> Iterator[WorkerListener]:
    lst = WorkerListener(socket_path(ipc, 0, root=root), backend)  # recorder=None: NullRecorder
    lst.start()
    pin_listener(lst)
    try:
        yield lst
    finally:
        if not lst.stop():
            raise RuntimeError(f"reference listener {ipc} did not stop")


@contextmanager
def bare(root: Path, name: str, backend: Backend) -> Iterator[BareListener]:
    lst = BareListener(root / f"{name}.sock", backend)
    lst.start()
    pin_listener(lst)
    try:
        yield lst
    finally:
        if not lst.stop():
            raise RuntimeError(f"bare listener {name} did not stop")


def make_backend(kind: str) -> tuple[Backend, KVAllocator | None]:
    if kind == "noop":
        return NoopBackend(), None
    alloc = KVAllocator(page_size=PAGE)
    alloc.create_kv_tensors(0, CAPACITY)
    return AllocatorBackend(alloc), alloc


# ------------------------------------------------------------------ parts
def part_ipc(root: Path, kind: str, windows: int, requests: int, placement: str,
             figures: dict[str, Any] | None = None) -> str:
    """Reference vs bare round trips; ``placement``: "process" (each listener in its own child process,
    the client here: the deployment shape, which the target is judged on) or "thread" (both listeners on
    threads of this process, the client too: one GIL serialises their work, informational).  ``figures``
    gets the medians, ratios and CPU per request as data."""
    seq = itertools.count()
    cpu_out: dict[str, Any] = {}
    if placement == "process":
        def served(make: Callable[[Backend], Served]) -> Callable[[], tuple[Served, Callable[[], str]]]:
            def factory() -> tuple[Served, Callable[[], str]]:  # runs in the child
                backend, alloc = make_backend(kind)
                return make(backend), functools.partial(allocator_check, alloc)
            return factory

        with client_pinned(), \
                ServerProcess(served(lambda b: WorkerListener(socket_path(f"rt-{kind}", 0, root=root), b)),
                              "reference", cpus=listener_cpus()) as ref, \
                ServerProcess(served(lambda b: BareListener(root / f"bare-{kind}.sock", b)), "bare",
                              cpus=listener_cpus()) as base:
            arms = [Arm("reference", Client(ref.path, seq).ops()), Arm("bare", Client(base.path, seq).ops())]
            res = run_interleaved(arms, ops=OPS, windows=windows, requests=requests, baseline="bare")
            cpu = server_cpu({"reference": (ref.path, ref.cpu_ns), "bare": (base.path, base.cpu_ns)},
                             requests, windows, cpu_out)
    else:
        backend, alloc = make_backend(kind)
        try:
            with client_pinned(), reference(root, f"rt-{kind}", backend) as lref, \
                    bare(root, f"bare-{kind}", backend) as lbase:
                arms = [Arm("reference", Client(os.fspath(lref.path), seq).ops()),
                        Arm("bare", Client(os.fspath(lbase.path), seq).ops())]
                res = run_interleaved(arms, ops=OPS, windows=windows, requests=requests, baseline="bare")
                cpu = server_cpu({"reference": (os.fspath(lref.path), functools.partial(thread_cpu_ns, lref.thread)),
                                  "bare": (os.fspath(lbase.path), functools.partial(thread_cpu_ns, lbase.thread))},
                                 requests, windows, cpu_out)
        finally:
            problem = allocator_check(alloc)
        if problem:
            raise RuntimeError(problem)
    if kind == "noop" and placement == "process":
        targets = {op: f"<= {RATIO_TARGET:.2f} {verdict(res.ratio(op, 'reference') <= RATIO_TARGET)}"
                   for op in OPS}
    else:
        targets = {op: "(informational)" for op in OPS}
    where = {"process": "each listener in its own process, the client in this one",
             "thread": "both listeners and the client in one process (one GIL)"}[placement]
    title = f"Round trip, one fresh connection per request, backend: {kind}; {where}{placement_note()}"
    if figures is not None:
        figures.setdefault(placement, {})[kind] = {
            "ops": {op: {"reference_us": res.median_ns(op, "reference") / 1e3,
                         "bare_us": res.median_ns(op, "bare") / 1e3,
                         "ratio": res.ratio(op, "reference")}
                    for op in OPS},
            "cpu": cpu_out}
    return format_result(res, targets=targets, title=title) + "\n\n" + cpu


def allocator_check(alloc: KVAllocator | None) -> str:
    """Tear the allocator down; what is wrong if a map was not undone ("" if nothing)."""
    if alloc is None:
        return ""
    leaked = alloc.used_bytes()
    alloc.teardown()
    return f"{leaked} bytes still mapped after the run: a map was not undone" if leaked else ""


class _ThreadClock(NullRecorder):
    """Records nothing, but reads the serving thread's CPU clock as it exits (the listener still sees a
    NullRecorder: no request-path events are built)."""

    exit_cpu_ns = 0

    def emit(self, kind: str, /, **data: Any) -> None:
        if kind == "thread_exited":
            self.exit_cpu_ns = time.thread_time_ns()


EPOLL_WAITS = {"232", "281", "441"}  # x86_64 syscall numbers of epoll_wait, epoll_pwait, epoll_pwait2


def wait_idle(listener: WorkerListener, n: int, timeout: float = 5.0) -> None:
    """Return once the listener is idle with exactly ``n`` connections: its serving thread blocked in epoll
    (the kernel's word for it, /proc/self/task/TID/syscall) with nothing in hand.  park()'s barrier request
    leaves the thread closing its connection for a moment after the reply; a stop in that moment finds it
    busy and takes the other path (every connection shut down by the caller), which is not the idle stop
    this measures.  Each read of the file is a system call (it waits on the kernel, not on a clock); the
    timeout is a safety net."""
    thread = listener.thread
    if thread is None or thread.native_id is None:
        raise RuntimeError("the listener is not serving")
    path = f"/proc/self/task/{thread.native_id}/syscall"
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with open(path) as f:
            blocked_in = f.read().split(" ", 1)[0]
        if blocked_in in EPOLL_WAITS and listener._in_poll and len(listener._conns) == n:
            return
    raise RuntimeError(f"the listener was not idle with {n} connections within {timeout} s")


def closed_by_peer(socks: list[socket.socket]) -> int:
    """How many of the parked clients see their connection closed (EOF at once, without blocking)."""
    n = 0
    for s in socks:
        s.setblocking(False)
        try:
            n += s.recv(1) == b""
        except (BlockingIOError, ConnectionResetError):
            pass
    return n


def stop_floor(root: Path, n: int, reps: int) -> tuple[float, float]:
    """What the kernel and the file system alone take of a stop with ``n`` parked, in one thread, medians in
    us: (the closes: an epoll with ``n`` accepted Unix connections registered, closed, then each connection,
    as the serving thread does; the teardown's calls: stat, unlink of the socket file, close of the server
    socket, unlink of the owner record, rmdir of the directory, in ``root``'s file system).  No lock, event,
    flag or thread of the listener: the floor its stop() cannot go under in that order, on this machine."""
    closes: list[int] = []
    teardown: list[int] = []
    for i in range(reps):
        d = root / f"floor-{n}-{i}"
        d.mkdir()
        path, owner = d / "w0.sock", d / "w0.owner"
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(os.fspath(path))
        server.listen(n + 1)
        owner.write_bytes(b"x")
        clients: list[socket.socket] = []
        accepted: list[socket.socket] = []
        try:
            for _ in range(n):
                c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                clients.append(c)
                c.connect(os.fspath(path))
                accepted.append(server.accept()[0])
            ep = select.epoll()
            for a in accepted:
                ep.register(a.fileno(), select.EPOLLIN)
            t0 = time.perf_counter_ns()
            ep.close()
            for a in accepted:
                a.close()
            t1 = time.perf_counter_ns()
            os.stat(path)
            path.unlink()
            server.close()
            owner.unlink()
            d.rmdir()
            t2 = time.perf_counter_ns()
        finally:
            close_all(clients)
            close_all(accepted)
            server.close()
        closes.append(t1 - t0)
        teardown.append(t2 - t1)
    return statistics.median(closes) / 1e3, statistics.median(teardown) / 1e3


def part_stop(root: Path, parked: tuple[int, ...], reps: int, figures: dict[str, Any] | None = None) -> str:
    """stop() from the call to True, each of the n parked connections checked closed once it returns.  The
    profile beside it: the CPU time of the caller's thread (the stop flag, waking the thread, the teardown)
    and of the serving thread from the call until it exits (closing the connections), medians."""
    rows: list[list[str]] = []
    for n in parked:
        times: list[int] = []
        caller: list[int] = []
        thread: list[int] = []
        for i in range(reps):
            clock = _ThreadClock()
            lst = WorkerListener(socket_path(f"stop-{n}-{i}", 0, root=root), NoopBackend(), recorder=clock)
            lst.start()
            socks: list[socket.socket] = []
            try:
                socks = park(os.fspath(lst.path), n, lst)
                wait_idle(lst, n)
                th0 = thread_cpu_ns(lst.thread)
                c0 = time.thread_time_ns()
                t0 = time.perf_counter_ns()
                ok = lst.stop()
                t1 = time.perf_counter_ns()
                c1 = time.thread_time_ns()
                if not ok:
                    raise RuntimeError(f"stop() returned False with {n} parked")
                if lst.path.exists() or lst.path.parent.exists():
                    raise RuntimeError(f"stop() left {lst.path} or its directory behind")
                closed = closed_by_peer(socks)
                if closed != n:
                    raise RuntimeError(f"stop() returned True with {n - closed} of {n} parked connections open")
                times.append(t1 - t0)
                caller.append(c1 - c0)
                thread.append(clock.exit_cpu_ns - th0)
            finally:
                close_all(socks)
                lst.stop()
        target = f"<= {STOP_TARGET_MS:.1f} ms {verdict(statistics.median(times) / 1e6 <= STOP_TARGET_MS)}" \
            if n == max(parked) else ""
        if figures is not None:
            figures.setdefault("stop_median_ms", {})[str(n)] = statistics.median(times) / 1e6
            figures.setdefault("stop_cpu_us", {})[str(n)] = {"caller": statistics.median(caller) / 1e3,
                                                             "thread": statistics.median(thread) / 1e3}
        rows.append([str(n), f"{statistics.median(times) / 1e6:.3f}", f"{min(times) / 1e6:.3f}",
                     f"{max(times) / 1e6:.3f}", f"{reps}/{reps}", f"{statistics.median(caller) / 1e3:.0f}",
                     f"{statistics.median(thread) / 1e3:.0f}", target])
    head = (f"stop() latency, reference listener, idle connections parked (all closed when it returns); {reps} "
            "fresh listeners per row; CPU: medians of the caller's and the serving thread's CPU time")
    n = max(parked)
    closes_us, teardown_us = stop_floor(root, n, reps)
    if figures is not None:
        figures["stop_floor_us"] = {str(n): {"closes": closes_us, "teardown": teardown_us}}
    floor = (f"floor with {n} parked (the kernel and the file system alone, one thread, no listener): "
             f"{closes_us:.0f} us closing the epoll and the {n} connections, {teardown_us:.0f} us for the "
             f"teardown's stat, unlinks, close and rmdir under {root.parent}; {(closes_us + teardown_us) / 1e3:.3f} ms")
    return head + "\n" + format_rows(["parked", "median (ms)", "min (ms)", "max (ms)", "returned True",
                                      "caller CPU (us)", "thread CPU (us)", "target"], rows) + "\n" + floor


def part_loaded(root: Path, parked: int, windows: int, requests: int, figures: dict[str, Any] | None = None) -> str:
    backend = NoopBackend()
    seq = itertools.count()
    with client_pinned(), reference(root, "unloaded", backend) as quiet, reference(root, "loaded", backend) as busy:
        socks = park(os.fspath(busy.path), parked, busy)
        try:
            arms = [Arm("unloaded", {"kv_tensors_created": Client(os.fspath(quiet.path), seq).created}),
                    Arm("loaded", {"kv_tensors_created": Client(os.fspath(busy.path), seq).created})]
            res = run_interleaved(arms, windows=windows, requests=requests, baseline="unloaded")
            still = len(busy._conns)
        finally:
            close_all(socks)
    if still < parked:
        raise RuntimeError(f"only {still} of {parked} parked connections survived the run")
    ok = res.ratio("kv_tensors_created", "loaded") <= LOADED_TARGET
    if figures is not None:
        figures["loaded_ratio"] = res.ratio("kv_tensors_created", "loaded")
    title = (f"Request latency with {parked} idle clients parked (loaded) vs none (unloaded); "
             f"two reference listeners, no-op backend{placement_note()}")
    return format_result(res, targets={"kv_tensors_created": f"<= {LOADED_TARGET:.1f} {verdict(ok)}"},
                         title=title)


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


# ------------------------------------------------------------------ the docs tables
LABELS = {"kv_tensors_created": "kv_tensors_created", "map 16": "map, 16 offsets",
          "unmap pair": "unmap prepare+commit pair"}  # the docs table's words for each op


def tables(result: Mapping[str, Any]) -> str:
    """docs/benchmarks.md's two tables of a result (``--write``'s JSON): a column per run."""
    runs = result["runs"]
    ipc = [r["ipc"] for r in runs]

    def met(ok: bool | list[bool]) -> str:  # a list: each run's, named where the runs disagree
        oks = ok if isinstance(ok, list) else [ok]
        if all(oks) or not any(oks):
            return "met" if all(oks) else "missed"
        runs_ = {v: ", ".join(str(n) for n, o in enumerate(oks, 1) if o is v) for v in (True, False)}
        return f"met in run {runs_[True]}, missed in run {runs_[False]}"

    def ratios(i: Mapping[str, Any]) -> str:
        return " / ".join(f"{i['ops'][op]['ratio']:.3f}" for op in OPS)

    def cpu(c: Mapping[str, Any], unit: str = " us") -> str:
        return f"{c['reference_us']:.1f} / {c['bare_us']:.1f}{unit} ({c['ratio']:.3f})"

    head = "| op (no-op backend), own processes | " + " | ".join(
        f"run {n}: reference / bare (us) | ratio" for n in range(1, len(runs) + 1)) + " | target |"
    one = [head, "|---|" + "---|---|" * len(runs) + "---|"]
    for op in OPS:
        figs = [i["process"]["noop"]["ops"][op] for i in ipc]
        cells = [f"{f['reference_us']:.1f} / {f['bare_us']:.1f} | {f['ratio']:.3f}" for f in figs]
        ok = [f["ratio"] <= RATIO_TARGET for f in figs]
        one.append(f"| {LABELS[op]} | " + " | ".join(cells) + f" | <= {RATIO_TARGET:.2f}: {met(ok)} |")
    stop_ok = [r["stop_median_ms"]["256"] <= STOP_TARGET_MS for r in runs]
    loaded_ok = [r["loaded_ratio"] <= LOADED_TARGET for r in runs]
    rows = [("serving-thread CPU per request, reference / bare, own processes",
             [cpu(i["process"]["noop"]["cpu"]) for i in ipc], ""),
            ("one process (one GIL): ratio kv_tensors_created / map 16 / unmap pair",
             [ratios(i["thread"]["noop"]) for i in ipc], "informational"),
            ("one process: serving-thread CPU per request, reference / bare",
             [cpu(i["thread"]["noop"]["cpu"]) for i in ipc], "informational"),
            ("real allocator, own processes: ratio kv_tensors_created / map 16 / unmap pair",
             [ratios(i["process"]["allocator"]) for i in ipc], "informational"),
            ("stop() median with 0 / 16 / 256 idle connections parked",
             [" / ".join(f"{r['stop_median_ms'][n]:.2f}" for n in ("0", "16", "256")) + " ms" for r in runs],
             f"<= {STOP_TARGET_MS:g} ms at 256: {met(stop_ok)}"),
            ("stop() with 256 parked: CPU of the caller / of the serving thread (profile)",
             [f"{r['stop_cpu_us']['256']['caller']:.0f} / {r['stop_cpu_us']['256']['thread']:.0f} us"
              if "stop_cpu_us" in r else "not measured" for r in runs], "informational"),
            ("stop() with 256 parked: its floor, the kernel and the file system alone (closes + teardown's calls)",
             [f"{f['closes']:.0f} + {f['teardown']:.0f} us = {(f['closes'] + f['teardown']) / 1e3:.2f} ms"
              if (f := r.get("stop_floor_us", {}).get("256")) else "not measured" for r in runs], "informational"),
            ("a request while 16 idle clients are parked vs none", [f"{r['loaded_ratio']:.3f}" for r in runs],
             f"<= {LOADED_TARGET:g}x: {met(loaded_ok)}")]
    two = ["| measure | " + " | ".join(f"run {n}" for n in range(1, len(runs) + 1)) + " | target |",
           "|---|" + "---|" * len(runs) + "---|"]
    two += [f"| {label} | " + " | ".join(cells) + (f" | {target} |" if target else " | |")
            for label, cells, target in rows]
    return "\n".join(one) + "\n\n" + "\n".join(two) + "\n\n" + "\n".join(
        f"- run {n}: {made(r)}" for n, r in enumerate(runs, 1)) + "\n\n" + docpage.provenance(result)


def made(run: Mapping[str, Any]) -> str:
    """When and how a run was made (its machine, python and command are in the line under the tables)."""
    pin = run.get("pinned")
    where = (f"client on CPU {pin['client']}, listeners on CPU {pin['listeners']}" if pin else "unpinned")
    return ", ".join([run.get("date", "date not recorded"), f"commit {run.get('commit') or 'not recorded'}",
                      f"{run['windows']} windows x {run['requests']} requests",
                      f"{run['stop_reps']} fresh listeners per stop row", where])


def raise_fd_limit(need: int) -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need and soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if soft < need:
        raise SystemExit(f"fd limit {soft} is below the {need} this benchmark needs; raise `ulimit -n`")
    return f"fd limit {soft}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--backend", choices=["noop", "allocator", "both"], default="both")
    p.add_argument("--windows", type=int, default=21, help="measured windows per op and arm (default 21)")
    p.add_argument("--requests", type=int, default=300, help="requests per window (default 300)")
    p.add_argument("--stop-reps", type=int, default=15, help="fresh listeners per stop row (default 15)")
    p.add_argument("--quick", action="store_true", help="smoke run: 3 windows x 50 requests, 3 stop reps")
    p.add_argument("--placement", nargs="+", choices=["process", "thread"], default=["process", "thread"],
                   help="where the listeners of the round-trip part run (default: both, process first)")
    p.add_argument("--skip", nargs="*", default=[], choices=["ipc", "stop", "loaded"], help="parts to leave out")
    p.add_argument("--write", action="store_true", help="commit the figures to docs/ (data and tables; a full run)")
    p.add_argument("--append", action="store_true", help="with --write: add this run beside those already there")
    p.add_argument("--no-pin", action="store_true", help="leave the round trips' client and listeners wherever the "
                   "scheduler puts them (default: client on one CPU, listeners on another, where there are 2)")
    args = p.parse_args(argv)
    PIN.clear()
    PIN.update(pin_plan(not args.no_pin))
    if args.write and (args.quick or args.skip or args.backend != "both" or len(set(args.placement)) < 2):
        p.error("--write needs a full run: every part, both backends, both placements, no --quick")
    if args.quick:
        args.windows, args.requests, args.stop_reps = 3, 50, 3
    parked = (0, 16, 256)
    fd_note = raise_fd_limit(2 * max(parked) + 64)
    kinds = ["noop", "allocator"] if args.backend == "both" else [args.backend]
    print(f"# ipc_roundtrip  {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"# python {platform.python_version()} on {platform.platform()}, {os.cpu_count()} CPUs, {fd_note}")
    print(f"# argv: {' '.join(sys.argv[1:]) or '(defaults)'}\n", flush=True)
    root = Path(tempfile.mkdtemp(prefix="lc-", dir="/tmp"))
    sections: list[Callable[[], str]] = []
    ipc: dict[str, Any] = {}
    run: dict[str, Any] = {**docpage.measured(__file__, sys.argv[1:] if argv is None else argv),
                           "windows": args.windows, "requests": args.requests, "stop_reps": args.stop_reps,
                           "ipc": ipc, "pinned": dict(PIN)}
    if "ipc" not in args.skip:
        sections += [functools.partial(part_ipc, root, k, args.windows, args.requests, where, ipc)
                     for where in args.placement for k in kinds]
    if "stop" not in args.skip:
        sections.append(lambda: part_stop(root, parked, args.stop_reps, run))
    if "loaded" not in args.skip:
        sections.append(lambda: part_loaded(root, 16, args.windows, args.requests, run))
    try:
        for section in sections:
            print(section() + "\n", flush=True)
    finally:
        leftovers = sorted(p.name for p in root.iterdir())
        shutil.rmtree(root, ignore_errors=True)
    if leftovers:
        print(f"WARNING: left behind under the temp root: {leftovers}")
        return 1
    if args.write:
        import json

        before = json.loads(docpage.data_path(NAME).read_text())["runs"] if args.append else []
        result: dict[str, Any] = {"runs": [*before, run]}
        docpage.write(NAME, result, tables(result))
        import targets_block

        targets_block.write()  # the README's table of the measured targets
    return 0


if __name__ == "__main__":
    sys.exit(main())
