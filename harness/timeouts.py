"""Safety-net timeouts, stretched on slow machines.

Every wait in lastcall has a timeout that only catches a hang; none is used to
synchronise.  ``LASTCALL_TIMEOUT_SCALE`` (default 1) multiplies them all.
"""

from __future__ import annotations

import threading
from typing import Any

from harness import envvars
from harness.errors import ConfigError

__all__ = ["scale", "scaled", "run_scale", "bound_scale", "is_bound_scale", "SAFETY_S", "AT_ONCE_S", "thread_cpu",
           "Slowness", "MAX_SLOWNESS"]

SAFETY_S = 10.0  # default safety net for one wait, before scaling
# "At once", before scaling: how long the in-process reference may take for what the stop contract says happens
# at once (a cancelled read reads EOF, a stopped thread is gone, a client is served while another stalls).  It
# takes milliseconds; a planted bug that never does it waits this out, in the contract's checks and the
# lifecycle explorer alike (one figure for both: the contract's checks had waited 2 s, four times the
# explorer's, for the same events).
AT_ONCE_S = 0.5


def scale() -> float:
    """The factor from LASTCALL_TIMEOUT_SCALE (finite, more than 0 and at most 100), default 1.

    Error handling: ConfigError naming the variable (harness.envvars): inf would disarm every watchdog.
    """
    return envvars.number("LASTCALL_TIMEOUT_SCALE")


def scaled(seconds: float = SAFETY_S) -> float:
    """``seconds`` times the timeout scale."""
    return seconds * scale()


def is_bound_scale(value: object) -> bool:
    """Whether ``value`` may be a target's ``bound_scale``: a number in (0, 100] (nan and a bool are not)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value <= 100


def bound_scale(target: Any) -> float:
    """The target's ``bound_scale`` (default 1): every bound and timeout its engine scenarios state is multiplied
    by it in the steps and in the checkers, as the drain they ask of the engine is.  The stand-in engine
    declares 0.2: the engine scenarios' bounds are written for real vLLM, and the stand-in, up in 0.2 s and gone
    in under 0.1 s, meets a fifth of them with room to spare, so a planted hang is told in a fifth of the time
    (docs/running.md).  Error handling: ConfigError naming the target when it is not a number in (0, 100].
    """
    raw = getattr(target, "bound_scale", 1.0)
    if not is_bound_scale(raw):
        raise ConfigError(f"target {getattr(target, 'name', target)!r}: bound_scale must be a number in (0, 100], "
                          f"found {raw!r}")
    return float(raw)


def run_scale(target: Any) -> float:
    """The scale of one run against ``target``: LASTCALL_TIMEOUT_SCALE times its :func:`bound_scale` (the run's
    ``RunRecord.scale``, recorded in verdicts.json)."""
    return scale() * bound_scale(target)


# the most a measured slowness stretches a safety net: a machine slower than this is one to say so about
# (LASTCALL_TIMEOUT_SCALE), not to wait out
MAX_SLOWNESS = 10.0
MIN_MEASURED_NS = 2_000_000  # below 2 ms of the thread's own CPU the share says nothing: slowness 1


def thread_cpu() -> tuple[int, int]:
    """The calling thread's time on a CPU and waiting in a run queue for one, in ns (its
    /proc/self/task/TID/schedstat); (0, 0) where the kernel keeps none."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            ran, waited = f.read().split()[:2]
        return int(ran), int(waited)
    except (OSError, ValueError):
        return 0, 0


class Slowness:
    """How slow the machine is for this thread over some work it does anyway (a run's launch): of the time it
    could run, the share it ran.  ``factor`` is 1 / that share (1 on an idle machine, about 3 beside two busy
    loops per CPU), at most MAX_SLOWNESS: what a step's safety net is stretched by.  No CPU is spent to measure
    it: the harness's launch of a run (its snapshot, its forks) is the work watched."""

    def __init__(self) -> None:
        self.r0, self.w0 = thread_cpu()
        self.share, self.factor = 1.0, 1.0

    def measure(self) -> Slowness:
        r1, w1 = thread_cpu()
        ran, waited = r1 - self.r0, w1 - self.w0
        if ran >= MIN_MEASURED_NS:
            self.share = ran / (ran + waited)
            self.factor = min(MAX_SLOWNESS, max(1.0, 1.0 / self.share))
        return self
