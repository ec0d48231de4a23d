"""The pause nemesis, in any run: ``pause`` and ``resume`` of one process.

* ``pause`` (fault): SIGSTOP to one process: in an engine run the API server, the engine core or a worker of
  its tree (``to``, ``index`` as for ``engine_signal``); in a worker run a worker process of the reference
  cluster (``of: {rank, pp}``, as ``kill`` and ``measure_idle`` name it).  That one process, not its process
  group, as Jepsen pauses one node; the rest of the run (the tree's other processes, the cluster's engine and
  other ranks) runs on and must cope with a peer that neither answers nor dies.  Recorded as
  ``process_paused``; its value is the pid.  Played at any point of the steps: during a start (after an
  ``engine_start`` returned, the engine core held at its gate), with a request in flight (after a background
  ``engine_request`` and a ``wait: {event: engine_stream_started}``), or during a stop (before or after an
  ``engine_signal``); in a worker run with a call in flight (a ``call`` sent after the pause: its request waits
  unread in the paused worker's socket) or before a ``stop``.
* ``resume`` (fault): SIGCONT to what a named pause step paused, now (``process_resumed``, reason ``step``);
  ok when it was still paused.

Nothing stays stopped (harness.launch.pauses): a pause is resumed at its ``resume_after`` bound by a timer, and
before any signal or kill the harness sends it (an ``engine_signal`` or ``kill`` to it, the close of its tree or
of the cluster, the watchdog), and when the run's steps end (the player's finish_up), each recorded as
``process_resumed``.

Registered in harness.scenario.player's registry on import (harness.scenario.runner imports this module).
"""

from __future__ import annotations

from typing import Any

from harness.launch import pauses
from harness.scenario.engine_steps import _host, _pid_of
from harness.scenario.player import Player, StepError, step_kind
from harness.timeouts import scaled

__all__: list[str] = []



@step_kind("pause")
def pause(pl: Player, s: Any, name: str) -> None:
    if s.of is not None:  # a worker run's worker process
        proc = pl.proc(s.of)
        pid, process = proc.pid, proc.label
        where: dict[str, Any] = {"of": proc.label}
        bound = min(scaled(s.resume_after), pauses.MAX_BOUND_S)  # as every bound of the scenario is scaled
    else:
        if pl.c.host is None:
            raise StepError(f"pause: a {pl.c.cast.name} run has no engine tree; name the worker to pause with "
                            "of: {rank, pp}")
        host = _host(pl)
        pid, process = _pid_of(host.tree, s.to, s.index, "pause")
        where = {"to": s.to, "index": s.index}
        bound = min(host.scaled(s.resume_after), pauses.MAX_BOUND_S)
    pl.started(name, "pause", **where, pid=pid, process=process, resume_after=bound)
    try:
        pauses.pause(pid, step=name, process=process, bound=bound, emit=pl.emit)
    except ProcessLookupError:
        pl.returned(name, "pause", False, None, **where, error=f"{process} (pid {pid}) is gone")
        raise StepError(f"pause: {process} (pid {pid}) exited before it could be paused") from None
    except ValueError as exc:
        pl.returned(name, "pause", False, None, **where, error=str(exc))
        raise StepError(f"pause: {exc}") from None
    pl.paused[name] = pid
    pl.returned(name, "pause", True, pid, **where)


@step_kind("resume")
def resume(pl: Player, paused_by: str, name: str) -> None:
    pid = pl.paused.get(paused_by)
    if pid is None:
        raise StepError(f"resume: step {paused_by!r} paused nothing (it failed, or is not a pause step)")
    pl.started(name, "resume", pid=pid, paused_by=paused_by)
    resumed = pauses.resume(pid, "step", step=name)
    pl.returned(name, "resume", resumed, resumed, pid=pid, paused_by=paused_by)

