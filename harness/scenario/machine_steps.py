"""The worker run's steps that act on a worker process from outside, as the machine would: ``measure_idle``
(how long its threads run while its clients idle) and ``fd_limit`` (its descriptor limit lowered, so an accept
fails with EMFILE).  Parameters: harness.scenario.machine_spec.

Registered in harness.scenario.player's registry on import (harness.scenario.worker_steps imports it).
"""

from __future__ import annotations

import os
import resource
import threading
import time
from itertools import pairwise
from typing import Any

from harness.scenario.player import Player, StepError, step_kind
from harness.timeouts import thread_cpu

__all__ = ["cpu_ns", "cpu_share", "measure_window", "lowest_free_fd", "CALIBRATION_S", "SLICES"]

# the shortest spin that measures the share of a CPU a busy thread gets: long enough to span several of the
# kernel's time slices (a few ms each)
CALIBRATION_S = 0.05
SLICES = 5  # of a measure_idle window: idle_cost judges the median one


def cpu_ns(pid: int) -> tuple[int, int]:
    """How long the threads of ``pid`` have been on a CPU, and how long they waited in a run queue for one, in
    ns (the first two fields of /proc/PID/task/TID/schedstat, summed over its threads).  A thread blocked in a
    system call adds to neither; one that spins adds the wall time to their sum, split between the two by how
    many threads share the CPUs.  A thread that ends meanwhile is not counted.

    Error handling: StepError when the process is gone or the kernel keeps no schedstat.
    """
    run = wait = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError as exc:
        raise StepError(f"measure_idle: cannot list the threads of pid {pid}: {exc.strerror}") from None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ran, waited = f.read().split()[:2]
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        except (OSError, ValueError) as exc:
            raise StepError(f"measure_idle: cannot read /proc/{pid}/task/{tid}/schedstat: {exc}") from None
        run, wait = run + int(ran), wait + int(waited)
    return run, wait


def cpu_share(spin_s: float = CALIBRATION_S) -> float:
    """The share of one CPU a thread that never blocks gets on this machine now: the calling thread spins for
    ``spin_s`` of wall time and reads its own schedstat (on a CPU / on a CPU or waiting for one).  1.0 on an idle
    machine; beside k other busy threads on n CPUs about n / (k + 1)."""
    r0, w0 = thread_cpu()
    end = time.monotonic() + spin_s
    while time.monotonic() < end:
        pass  # the calibration spins: what a thread that never blocks would get
    r1, w1 = thread_cpu()
    return (r1 - r0) / max(1, (r1 - r0) + (w1 - w0))


def measure_window(pid: int, window: float) -> dict[str, Any]:
    """What ``pid``'s threads did over ``window`` seconds, beside what a thread that never blocks got over the
    same seconds: the calibration spins on a thread of its own for the whole window, so both face the same
    contention however the machine's load comes and goes (a spin before the window measured another moment:
    a neighbour that stopped or started between them moved the verdict).  The value idle_cost judges.

    The window is also cut into SLICES equal slices, each with both figures (``slices``: run_s, wall_s,
    cpu_share): a spinning thread is on a CPU in every slice, while a burst charged to an idle process (the
    kernel's interrupt work done while one of its threads ran, a collection) fills one or two; idle_cost
    judges the median slice."""
    bounds: list[tuple[int, int, int, int]] = []  # (t_ns, pid's run_ns, spinner's run_ns, spinner's wait_ns)
    failed: list[StepError] = []

    def spin() -> None:
        start, span = time.monotonic_ns(), int(max(window, CALIBRATION_S) * 1e9) // SLICES
        try:
            bounds.append((start, cpu_ns(pid)[0], *thread_cpu()))
            for k in range(1, SLICES + 1):
                while time.monotonic_ns() < start + k * span:
                    pass  # the calibration spins: what a thread that never blocks would get
                bounds.append((time.monotonic_ns(), cpu_ns(pid)[0], *thread_cpu()))
        except StepError as exc:  # the process is gone: the step's error, raised on the player's thread
            failed.append(exc)

    spinner = threading.Thread(target=spin, name="lastcall-calibration", daemon=True)
    (r0, q0), t0 = cpu_ns(pid), time.monotonic_ns()
    spinner.start()
    spinner.join()  # it spins until its own clock passes the window's end: it always returns
    (r1, q1), t1 = cpu_ns(pid), time.monotonic_ns()
    if failed:
        raise failed[0]
    slices = [{"run_s": (b[1] - a[1]) / 1e9, "wall_s": (b[0] - a[0]) / 1e9,
               "cpu_share": (b[2] - a[2]) / max(1, (b[2] - a[2]) + (b[3] - a[3]))} for a, b in pairwise(bounds)]
    first, last = bounds[0], bounds[-1]
    return {"run_s": (r1 - r0) / 1e9, "wait_s": (q1 - q0) / 1e9, "runnable_s": (r1 - r0 + q1 - q0) / 1e9,
            "window_s": (t1 - t0) / 1e9,
            "cpu_share": (last[2] - first[2]) / max(1, (last[2] - first[2]) + (last[3] - first[3])), "slices": slices}


@step_kind("measure_idle")
def measure_idle(pl: Player, s: Any, name: str) -> None:
    proc = pl.proc(s.of)
    pl.started(name, "measure_idle", pid=proc.pid, window=s.window)
    pl.returned(name, "measure_idle", True, measure_window(proc.pid, s.window), pid=proc.pid)


def lowest_free_fd(pid: int) -> int:
    """The lowest descriptor number ``pid`` does not hold (the kernel's next one), from /proc/PID/fd."""
    held = {int(n) for n in os.listdir(f"/proc/{pid}/fd")}
    return next(n for n in range(len(held) + 1) if n not in held)


class _Limit:
    """A lowered RLIMIT_NOFILE of another process, put back by :meth:`close` (once)."""

    def __init__(self, pid: int, old: tuple[int, int]) -> None:
        self.pid, self.old, self.done = pid, old, False

    def close(self) -> None:
        if not self.done:
            self.done = True
            try:
                resource.prlimit(self.pid, resource.RLIMIT_NOFILE, self.old)
            except (ProcessLookupError, OSError):
                pass  # the process is gone: nothing to put back


@step_kind("fd_limit")
def fd_limit(pl: Player, s: Any, name: str) -> None:
    proc = pl.proc(s.of)
    limits = [h for h in pl.held if isinstance(h, _Limit) and h.pid == proc.pid and not h.done]
    if s.restore:
        if not limits:
            raise StepError(f"fd_limit: restore, but no fd_limit step lowered the limit of {proc.label}")
        for lim in limits:
            lim.close()
        pl.emit("fd_limit_restored", step=name, pid=proc.pid)
        return
    if limits:
        raise StepError(f"fd_limit: the limit of {proc.label} is already lowered; restore it first")
    try:
        old = resource.prlimit(proc.pid, resource.RLIMIT_NOFILE)
        n = lowest_free_fd(proc.pid)
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (n, old[1]))
    except OSError as exc:
        raise StepError(f"fd_limit: cannot lower the descriptor limit of {proc.label}: {exc}") from None
    pl.held.append(_Limit(proc.pid, old))
    pl.emit("fd_limit_lowered", step=name, pid=proc.pid, limit=n, was=old[0])
