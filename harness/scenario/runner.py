"""Run one matrix item of a scenario: start its processes, play the steps, judge the run.

:func:`run_item` is the one run mechanism of every kind of run.  The cast (which processes start: an engine
and workers, or an engine owning a handshake listener and a peer, harness.launch.parts) follows from the
scenario's steps through the player's registry of step kinds (harness.scenario.player, whose docstring says
how a new kind of run plugs in); the target must provide the parts the cast runs.  Probes snapshot the
machine before the run and after every process is reaped (before the harness removes what was left), with a
trial bind of every port the run used; the checkers of ``expect`` then judge the record.  Every armed fault
is also judged by ``fault_fired``: a fault that never fired makes the run vacuous.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import harness.scenario.engine_steps
import harness.scenario.handshake_steps
import harness.scenario.pause_steps
import harness.scenario.stress
import harness.scenario.worker_steps  # noqa: F401 - registers the worker run's step kinds
from harness.checkers import RunRecord, judge
from harness.checkers.base import cut_text
from harness.errors import ConfigError, HarnessError
from harness.events import BUDGET_KIND, declare
from harness.launch.cluster import Cluster, RunOutcome
from harness.launch.parts import cast_named, missing_parts
from harness.launch.snapshots import for_cluster
from harness.probes.model import Snapshot
from harness.scenario.exitmode import fast_exit_for
from harness.scenario.loader import MatrixItem
from harness.scenario.player import STEP_KINDS, Player, Snap, StepError, cast_for, engine_launches
from harness.scenario.result import RunResult
from harness.timeouts import Slowness, scale

__all__ = ["RunResult", "run_item", "StepError", "STEP_KINDS"]  # STEP_KINDS here: every built-in kind registered


def run_item(item: MatrixItem, *, variant: str | None = None, run_id: str | None = None,
             snapshot: Snap | None = None, on_cluster: Callable[[Cluster], None] | None = None) -> RunResult:
    """Run one matrix item against ``variant`` (default: the scenario's target) and judge it.

    The run: its cluster (the cast its steps drive) and the ``before`` snapshot; then, inside one try, the
    player, the start and the steps; then the player's cleanup and the cluster's close (the ``after``
    snapshot taken once every process is reaped, before the harness removes what was left); then the
    scenario's expectations, plus fault_fired when a fault was armed.  A failed step or launch (an unknown
    variant, a target lacking a part) is the run's outcome, recorded as ``step_failed``.

    ``on_cluster`` is given the run's cluster once it exists, before anything starts (a caller that plays the run
    on a thread of its own can interrupt it).

    Returns: the RunResult; never raises for a failing system under test.
    """
    scn, cfg = item.scenario, item.scenario.config
    chosen = variant or scn.target
    t0 = time.monotonic()
    cast = cast_named(cast_for(scn.steps))
    fast, _ = fast_exit_for(item, chosen, [e.checker for e in scn.expect])  # harness.scenario.exitmode
    c = Cluster(tp=item.params["tp"], pp=item.params["pp"], device=item.params["device"], variant=chosen,
                drain_timeout=cfg.drain_timeout, deadline=cfg.deadline, exit_budget=cfg.exit_budget,
                capacity=cfg.capacity, ipc_timeout=cfg.ipc_timeout, run_id=run_id, cast=cast, fast_exit=fast)
    if on_cluster is not None:
        on_cluster(c)
    snaps: dict[str, Snapshot] = {}
    player: Player | None = None

    def probe(cl: Cluster, label: str) -> Snapshot:
        return for_cluster(cl, label, ports=player.used_ports() if player is not None else ())

    snap = snapshot or probe
    slowness = Slowness()  # over the before snapshot and the launch: work this thread does anyway
    snaps["before"] = snap(c, "before")
    step_error = broken = ""
    started = False
    try:
        ready_target(chosen, cast)
        player = Player(item, c, snaps, snap)
        c.scenario = scn
        c.launches = engine_launches(scn)
        player.play_prelude()  # the steps before start (hold_port): the processes start with them in place
        c.start()
        started = True
        slowness.measure()
        c.rec.emit("host_measured", cpu_share=round(slowness.share, 4), slowness=round(slowness.factor, 3))
        player.slowness = slowness.factor
        player.play()
    except Exception as exc:  # a failed step or launch is the run's outcome, not a crash of the session
        step_error, broken = failed(c, exc, started)
    finally:
        if player is not None:
            player.finish_up()
        outcome = c.close(before_cleanup=lambda cl: snaps.__setitem__("after", snap(cl, "after")))
    step_error, broken = with_bad_events(c, step_error, broken)
    step_error = budget_end(c, outcome, step_error)
    bounds_scale = run_scale(c)
    from harness.targets import absent_of

    record = RunRecord(tuple(c.rec.events()), snaps, bounds_scale, absent=absent_of(chosen))
    verdicts = judge_expect(scn, record, armed=player is not None and bool(player.armed))
    return RunResult(item, chosen, c.run_id, verdicts, outcome, list(c.rec.events()), snaps, step_error,
                     time.monotonic() - t0, broken=broken, scale=bounds_scale)


def ready_target(chosen: str, cast: Any) -> None:
    """Load the run's target, declare its own event kinds (harness.events) and check it has every part
    ``cast`` runs; StepError naming what it lacks."""
    from harness.targets import load_target

    target = load_target(chosen)
    declare(getattr(target, "events", ()))
    lacking = missing_parts(cast, target)
    if lacking:
        raise StepError(f"target {chosen!r} has no {', '.join(lacking)}: a {cast.name} run needs it")


def with_bad_events(c: Cluster, step_error: str, broken: str) -> tuple[str, str]:
    """A run's step error and why it is broken, given the events it recorded outside harness.events
    (LASTCALL_STRICT_EVENTS=1), unless it already has its own."""
    bad = c.rec.bad_events
    if bad and not step_error:
        step_error = "bad event: " + "; ".join(bad[:3]) + (" ..." if len(bad) > 3 else "")
    if bad and not broken:
        broken = "it recorded an event outside harness.events (" + bad[0] + ")"
    return step_error, broken


def budget_end(c: Cluster, outcome: RunOutcome, step_error: str) -> str:
    """A run whose history reached its byte budget ends with outcome ``history_budget_reached`` (unless it
    hung) and that as its step error, after the error of a step that failed before the cut; otherwise
    ``step_error`` as it was."""
    rec = c.rec
    cut = rec.cut
    if cut is None:
        return step_error
    text = (f"{cut_text(RunRecord(tuple(rec.events())), cut)} ({rec.stored} of {rec.budget} bytes stored): the "
            f"run was ended there, and the {rec.dropped} event(s) recorded after it were not stored")
    if outcome.status == "ok":
        outcome.status = BUDGET_KIND
    outcome.detail = f"{outcome.detail} {text}".strip()
    failed_first = any(e.kind == "step_failed" for e in rec.events())  # a failure stored before the cut
    return f"{step_error}; then {text}" if step_error and failed_first else text


def run_scale(c: Cluster) -> float:
    """The run's scale: an engine host's (LASTCALL_TIMEOUT_SCALE times its target's bound_scale), else the
    variable's."""
    return float(getattr(c.host, "scale", None) or scale())


def judge_expect(scn: Any, record: RunRecord, *, armed: bool) -> list[Any]:
    """The verdicts of ``scn``'s expectations on ``record``, plus fault_fired (allowing nothing) when a fault
    was armed and the scenario does not name it."""
    expect: list[tuple[str, Any, Any]] = [(e.checker, e.params, e.allow_unknown) for e in scn.expect]
    if armed and "fault_fired" not in [name for name, _, _ in expect]:
        expect.append(("fault_fired", None, None))
    return [judge(name, record, params, allow_unknown=allow) for name, params, allow in expect]


def failed(c: Cluster, exc: Exception, started: bool) -> tuple[str, str]:
    """A run's failed step or launch ``exc``, recorded (``step_failed``): its step error, and why the run is
    broken (:func:`_broken`)."""
    step_error = f"{type(exc).__name__}: {exc}"
    waited = getattr(exc, "waited_for", None)
    c.rec.emit("step_failed", error=step_error, **({"waited_for": waited} if waited else {}))
    return step_error, _broken(exc, started, step_error)


def _broken(exc: Exception, started: bool, step_error: str) -> str:
    """Why a run that raised ``exc`` shows nothing a planted-bug catch may count (harness.scenario.catches),
    or "": a run that never started, and a crash of the harness itself (an exception that is neither a
    StepError, a HarnessError nor an OSError of talking to the system under test, e.g. a KeyError; or a
    ConfigError), are broken; a failed step of a started run is not."""
    if not started:
        return f"it did not start ({step_error})"
    if not isinstance(exc, (StepError, HarnessError, OSError)) or isinstance(exc, ConfigError):
        return f"the harness crashed ({step_error})"
    return ""

