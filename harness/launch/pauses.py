"""The processes the harness paused (SIGSTOP), and their resumption (SIGCONT): nothing it paused stays stopped.

A pause is Jepsen's: a process that stops running without dying (SIGSTOP, as a stalled disk, a debugger or an
overloaded host stops it).  One process is paused, not its process group: a paused worker's engine core and
siblings run on and must cope with it, as Jepsen pauses one node.

Every pause is resumed, whichever comes first:

* a ``resume`` step (reason ``step``);
* its bound (reason ``bound``): a timer thread per pause waits on an event for ``bound`` seconds, and resumes
  the process unless it was resumed before;
* any signal the harness sends it, and any kill of its tree or run (reason ``before_kill``): the kill sites
  (harness.engine.tree, harness.engine.host, harness.launch.cluster) call :func:`resume_before_kill` with the
  pids they are about to signal, so a SIGCONT always precedes the kill;
* the end of the run's steps (reason ``run_end``: harness.scenario.player's finish_up).

Each resumption is recorded through the ``emit`` the pause was given (``process_resumed``), after the SIGCONT is
sent and before the caller's kill.  A pause returns once every thread of the process is stopped, and a
resumption once none is and its main thread has run again (:func:`_wait_state`): a signal sent to a process
whose threads are stopping or just woken goes to whichever thread the kernel finds free of pending work, seldom
the main one, and a Python process runs its handler only once its main thread runs Python again: a SIGTERM
right after the SIGCONT was seen to wait, unhandled, for the close.  The process
is signalled through a pidfd opened at the pause, so a pid reused after its process died is never signalled.
A process-wide registry, keyed by pid: the kill sites need no handle on the run that paused it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["pause", "resume", "resume_all", "resume_before_kill", "paused_pids", "MAX_BOUND_S", "DEFAULT_BOUND_S"]

RAN_S = 0.5  # seconds a pause (a resumption) waits at most for the threads to stop (run); a safety net: it is ms
DEFAULT_BOUND_S = 5.0  # seconds a pause lasts when its step names no bound
MAX_BOUND_S = 20.0  # the longest pause: well below an engine's launch bound (60 s), so a run never hangs on one

Emit = Callable[..., None]


@dataclass
class _Pause:
    pid: int
    pidfd: int
    step: str
    process: str
    bound: float
    emit: Emit
    since: float = field(default_factory=time.monotonic)
    over: threading.Event = field(default_factory=threading.Event)  # set once resumed, however
    timer: threading.Thread | None = None


_LOCK = threading.Lock()
_PAUSED: dict[int, _Pause] = {}  # pid -> its pause, while it is stopped


def pause(pid: int, *, step: str, process: str, bound: float, emit: Emit) -> None:
    """SIGSTOP ``pid`` and record ``process_paused``; it is resumed within ``bound`` seconds at the latest.

    Error handling: ProcessLookupError when the process is gone; ValueError when it is paused already or the
        bound is not in (0, MAX_BOUND_S]."""
    if not 0 < bound <= MAX_BOUND_S:
        raise ValueError(f"a pause's bound is from 0 to {MAX_BOUND_S:g} s, not {bound:g}")
    with _LOCK:
        if pid in _PAUSED:
            raise ValueError(f"{process} (pid {pid}) is paused already (by step {_PAUSED[pid].step})")
        pidfd = os.pidfd_open(pid)
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
        except ProcessLookupError:
            os.close(pidfd)
            raise
        _wait_state(pid, stopped=True)
        p = _Pause(pid, pidfd, step, process, bound, emit)
        _PAUSED[pid] = p
        emit("process_paused", step=step, pid=pid, process=process, bound=bound)
        p.timer = threading.Thread(target=_bound, args=(p,), name=f"lastcall-pause-{pid}", daemon=True)
        p.timer.start()


def _bound(p: _Pause) -> None:
    if not p.over.wait(p.bound):
        resume(p.pid, "bound")


def resume(pid: int, reason: str, step: str | None = None) -> bool:
    """SIGCONT ``pid`` if the harness paused it, and record ``process_resumed`` (with ``reason``); whether it was
    paused.  The bound's timer ends with it (joined unless this is the timer's own thread)."""
    with _LOCK:
        p = _PAUSED.pop(pid, None)
        if p is None:
            return False
        p.over.set()
        alive = True
        before = _states(pid)  # before the SIGCONT: the main thread's time on a CPU, frozen while stopped
        try:
            signal.pidfd_send_signal(p.pidfd, signal.SIGCONT)
        except ProcessLookupError:
            alive = False
        if alive:
            _wait_state(pid, stopped=False, before=before)
        os.close(p.pidfd)
        data: dict[str, Any] = {"step": step} if step else {}
        p.emit("process_resumed", pid=pid, process=p.process, reason=reason, paused_by=p.step,
               paused_s=round(time.monotonic() - p.since, 3), alive=alive, **data)
    if p.timer is not None and p.timer is not threading.current_thread():
        p.timer.join()
    return True


def _states(pid: int) -> tuple[set[str], int] | None:
    """The states of the threads of ``pid`` (/proc/PID/task/*/stat: R, S, D, T ...) and how long its main thread
    has been on a CPU, in ns (its schedstat; 0 where the kernel keeps none); None when the process is gone."""
    states = set()
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.add(f.read().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                continue  # the thread ended meanwhile
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            ran = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None if not os.path.exists(f"/proc/{pid}") else (states, 0)
    return states, ran


def _wait_state(pid: int, *, stopped: bool, before: tuple[set[str], int] | None = None) -> None:
    """Return once every thread of ``pid`` is stopped (``stopped``), or once none is and its main thread has run
    since ``before`` was read (its time on a CPU grew); or once it is gone (a zombie counts), or RAN_S passed.
    No event tells that another process's threads stopped or ran (waitid's WSTOPPED and WCONTINUED are for a
    parent): it is read from /proc, yielding the CPU between reads so the threads get it."""
    first = _states(pid) if before is None else before
    end = time.monotonic() + RAN_S
    while first is not None and time.monotonic() < end:
        now = _states(pid)
        if now is None or "Z" in now[0] or (now[0] <= {"T", "t"} if stopped else
                                             not now[0] & {"T", "t"} and (now[1] > first[1] or not first[1])):
            return
        os.sched_yield()


def resume_before_kill(pids: Iterable[int] | None = None) -> list[int]:
    """Resume (reason ``before_kill``) each of ``pids`` the harness paused (None: every paused process), before
    the caller signals them; the pids resumed."""
    with _LOCK:
        chosen = list(_PAUSED) if pids is None else [p for p in pids if p in _PAUSED]
    return [pid for pid in chosen if resume(pid, "before_kill")]


def paused_pids() -> list[int]:
    """The processes paused now, by pid."""
    with _LOCK:
        return sorted(_PAUSED)


def resume_all(pids: Iterable[int], reason: str) -> list[int]:
    """Resume each of ``pids`` that is still paused, with ``reason``; the pids resumed."""
    return [pid for pid in list(pids) if resume(pid, reason)]

