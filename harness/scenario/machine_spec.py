"""Parameters of the worker run's steps that act on a worker process from outside, as the machine would: the
time its threads run while its clients idle (``measure_idle``), its descriptor limit (``fd_limit``).  Played by
harness.scenario.machine_steps."""

from __future__ import annotations

from pydantic import Field

from harness.scenario.fields import AS_DESCRIPTION, WORKER_0, Duration, StepName, Strict, Worker

__all__ = ["MeasureIdle", "FdLimit"]


class MeasureIdle(Strict):
    """Watch a worker process while the harness sends it nothing: how long its threads were on a CPU, and how long they
    waited for one (/proc/PID/task/*/schedstat), over a window of ``window`` (a measurement, not a wait for
    something), beside a calibration over the same window: a harness thread spins for the whole window and reads the
    share of a CPU it got, so both face the same contention. The value (``run_s``, ``wait_s``, ``window_s``,
    ``cpu_share``, and the same figures for each of five equal ``slices``) is what idle_cost judges, on the median
    slice. A thread that blocks in epoll is on a CPU for none of the window; one that spins (an fd always ready)
    for about the share the calibration got in every slice, however loaded the machine."""

    of: Worker = Field(WORKER_0, description="the worker process {rank, pp}")
    window: Duration = Field(0.3, gt=0, le=5, description="how long it is watched, e.g. 300ms")
    as_: StepName | None = Field(None, alias="as", description=AS_DESCRIPTION)


class FdLimit(Strict):
    """Environment fault: lower a worker process's descriptor limit (RLIMIT_NOFILE, set from outside with
    prlimit) to the descriptors it holds, so that its next accept fails with EMFILE; ``restore: true`` puts back
    the limit it had (the run's end does too)."""

    of: Worker = Field(WORKER_0, description="the worker process {rank, pp}")
    restore: bool = Field(False, description="put back the limit lowered by an fd_limit step before")
