"""Run matrix items of scenarios: start their processes, play the steps, judge each item on its own.

:func:`run_chain` is the one run mechanism of every kind of run, and :func:`run_item` a chain of one: one
cluster, one history, played item after item (a chained engine run hands each item's restarted engine to the
next, harness.scenario.chain), each item judged on its own window of the history. The cast (which processes
start: an engine and workers, or an engine owning a handshake listener and a peer, harness.launch.parts) follows
from the scenario's steps through the player's registry of step kinds (harness.scenario.player, whose docstring
says how a new kind of run plugs in); the target must provide the parts the cast runs. Probes snapshot the
machine before the run and after every process is reaped (before the harness removes what was left), with a
trial bind of every port the run used; the checkers of ``expect`` then judge the record. Every armed fault is
also judged by ``fault_fired``: a fault that never fired makes the run vacuous.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import harness.scenario.engine_steps
import harness.scenario.handshake_steps
import harness.scenario.pause_steps
import harness.scenario.stress
import harness.scenario.worker_steps  # noqa: F401 - registers the worker run's step kinds
from harness.checkers import RunRecord, judge_all
from harness.checkers.base import cut_text
from harness.errors import ConfigError, HarnessError, TargetError
from harness.events import BUDGET_KIND, declare
from harness.history import Event
from harness.launch.cluster import Cluster, RunOutcome
from harness.launch.parts import cast_named, missing_parts
from harness.launch.snapshots import for_cluster
from harness.probes.model import Snapshot
from harness.scenario.chain import launch_key
from harness.scenario.exitmode import fast_exit_for
from harness.scenario.loader import MatrixItem
from harness.scenario.player import STEP_KINDS, Player, StepError, cast_for, engine_launches
from harness.scenario.result import RunResult
from harness.timeouts import Slowness, scale

# STEP_KINDS here: every built-in kind registered
__all__ = ["RunResult", "run_item", "run_chain", "window", "StepError", "STEP_KINDS"]


def run_item(item: MatrixItem, *, variant: str | None = None, run_id: str | None = None) -> RunResult:
    """Run one matrix item against ``variant`` (default: the scenario's target) and judge it: a chain of one.

    Returns: the RunResult; never raises for a failing system under test.
    """
    return run_chain([item], variant=variant, run_id=run_id)[0]


def run_chain(items: Sequence[MatrixItem], *, variant: str | None = None,
              run_id: str | None = None) -> list[RunResult]:
    """Run ``items`` on one cluster, one after the other, and judge each on its own; one RunResult per item.

    The run: its cluster (the cast the first item's steps drive) and each item's ``before`` snapshot; then,
    inside one try, the player, the start (the first item's; a later item takes over the engine the one
    before handed on, harness.engine.host) and the steps; then the player's cleanup, and, after the last item,
    the cluster's close (the ``after`` snapshot taken once every process is reaped, before the harness removes
    what was left); then each item's expectations, plus fault_fired when a fault was armed.  A failed step or
    launch (an unknown variant, a target lacking a part) is that item's outcome, recorded as ``step_failed``.
    More than one item must be engine scenarios of one launch key (harness.scenario.chain.plan makes them):
    ``chain_item_began`` / ``chain_item_ended`` bound each one's window, and their run ids are ``<run id>-<k>``.

    Returns: the RunResults in order; never raises for a failing system under test.
    """
    if len(items) > 1 and (None in (keys := {launch_key(i) for i in items}) or len(keys) != 1):
        raise ConfigError("a chained run takes engine scenarios of one launch key, each starting with its start "
                          f"step: {', '.join(i.scenario.name for i in items)}")
    first = items[0].scenario
    chosen = variant or first.target
    cfg = first.config
    fast = all(fast_exit_for(i, chosen, [e.checker for e in i.scenario.expect])[0] for i in items)
    c = Cluster(tp=items[0].params["tp"], pp=items[0].params["pp"], device=items[0].params["device"],
                variant=chosen, drain_timeout=cfg.drain_timeout,
                deadline=sum(i.scenario.config.deadline for i in items),
                exit_budget=cfg.exit_budget, capacity=cfg.capacity, ipc_timeout=cfg.ipc_timeout, run_id=run_id,
                cast=cast_named(cast_for(first.steps)), fast_exit=fast)
    c.launches = sum(engine_launches(i.scenario) for i in items)  # the engine host allows each one's launches
    playing: list[Player] = []  # the item being played: the snapshots trial-bind the ports it used

    def snap(cl: Cluster, label: str) -> Snapshot:
        ports = set(playing[-1].used_ports()) if playing else set()
        return for_cluster(cl, label, ports=sorted(ports | ({cl.host.port} if cl.host is not None else set())))

    slowness = Slowness()  # over the first before snapshot and the launch: work this thread does anyway
    per = [_play_item(c, items, k, chosen, snap, playing, slowness) for k in range(len(items))]
    return _results(c, items, per, chosen)


def _play_item(c: Cluster, items: Sequence[MatrixItem], k: int, chosen: str, snap: Any, playing: list[Player],
               slowness: Slowness) -> dict[str, Any]:
    """Play item ``k`` of the run on ``c``; what judging it needs (its window of the history, its snapshots,
    its step error, its outcome when it was the last)."""
    item, n = items[k], len(items)
    scn, t0 = item.scenario, time.monotonic()
    snaps: dict[str, Snapshot] = {}
    began = len(c.rec.events()) if n > 1 else 0
    if n > 1:
        c.rec.emit("chain_item_began", index=k, scenario=scn.name, of=n, run=c.run_id)
    playing.clear()
    snaps["before"] = snap(c, "before")
    step_error = broken = ""
    started = False
    player: Player | None = None
    outcome: RunOutcome | None = None
    try:
        ready_target(chosen, c.cast)
        if c.rec.events("watchdog_fired"):  # its thread has ended: nothing more starts without a safety net
            raise StepError("not run: the chained run's watchdog fired in an earlier scenario")
        player = Player(item, c, snaps, snap)
        playing.append(player)
        c.scenario = scn
        if c.host is None:
            if k:
                raise StepError("not run: the chained run's first start failed before its engine host")
            player.play_prelude()  # the steps before start (hold_port): the processes start with them in place
            c.start()
            slowness.measure()
            c.rec.emit("host_measured", cpu_share=round(slowness.share, 4), slowness=round(slowness.factor, 3))
        else:  # the engine the scenario before handed on, or a launch of its own
            c.host.take_over(scn, items[k - 1].scenario.name)
        started = True
        player.slowness = slowness.factor
        player.play()
    except Exception as exc:  # a failed step or launch is the item's outcome, not a crash of the session
        step_error, broken = failed(c, exc, started)
    finally:
        if player is not None:
            player.finish_up()
        if k < n - 1:
            if c.host is not None:
                c.host.between(items[k + 1].scenario if not step_error else None)
            snaps["after"] = snap(c, "after")
        else:
            outcome = c.close(before_cleanup=lambda cl: snaps.__setitem__("after", snap(cl, "after")))
    if n > 1:
        c.rec.emit("chain_item_ended", index=k, scenario=scn.name, run=c.run_id)
    return {"began": began, "ended": len(c.rec.events()), "snaps": snaps, "step_error": step_error,
            "broken": broken, "seconds": time.monotonic() - t0, "armed": bool(player is not None and player.armed),
            "outcome": outcome}


def _results(c: Cluster, items: Sequence[MatrixItem], per: list[dict[str, Any]], chosen: str) -> list[RunResult]:
    """Each item judged on its window of the run's history (all of it for a chain of one)."""
    from harness.targets import absent_of

    events, n = c.rec.events(), len(items)
    bounds_scale = run_scale(c)
    last = per[-1]["outcome"]
    handed_in = [next((e for e in events[p["began"]:p["ended"]] if e.kind == "engine_handed"), None) for p in per]
    cut_at = events.index(c.rec.cut) if c.rec.cut is not None else len(events)
    results = []
    for k, (item, p) in enumerate(zip(items, per, strict=True)):
        evs = window(events, p["began"], p["ended"], handed_in[k])
        if p["began"] > cut_at:  # an item after the cut of the history: its window holds nothing of its own
            evs.append(events[cut_at])
        # the launches whose trees this item ended: those of its window (the one it was handed included), less
        # the one it handed on (its receiver's steps ended that tree)
        handed_on = handed_in[k + 1] if k + 1 < n else None
        launches = {e.data["launch"] for e in evs if e.kind == "engine_launched"} - (
            {handed_on.data["launch"]} if handed_on is not None else set())
        step_error, broken = with_bad_events(c, p["step_error"], p["broken"])
        record = RunRecord(tuple(evs), p["snaps"], bounds_scale, absent=absent_of(chosen))
        verdicts = judge_expect(item.scenario, record, armed=p["armed"])
        outcome = last if n == 1 else _outcome(evs, last, launches, str(c.root), k, n, c.run_id)
        if p["ended"] > cut_at:  # the history was cut during this item, or before it
            step_error = budget_end(c, outcome, step_error)
        results.append(RunResult(item, chosen, c.run_id if n == 1 else f"{c.run_id}-{k + 1}", verdicts, outcome,
                                 evs, p["snaps"], step_error, p["seconds"], broken=broken, scale=bounds_scale,
                                 extra={"chain": [i.scenario.name for i in items], "chain_index": k} if n > 1
                                 else {}))
    return results


def window(events: Sequence[Event], began: int, ended: int, handed: Event | None) -> list[Event]:
    """An item's events: ``events[began:ended]``, after the launch events of the engine it was handed (its
    ``engine_launched`` and ``engine_ready``)."""
    own = list(events[began:ended])
    if handed is None:
        return own
    launch, pid = handed.data.get("launch"), handed.data.get("pid")
    before = [e for e in events[:began]
              if (e.kind == "engine_launched" and e.data.get("launch") == launch)
              or (e.kind == "engine_ready" and e.data.get("pid") == pid)]
    return before + own


def _outcome(events: list[Event], last: RunOutcome | None, launches: set[int], root: str, k: int, n: int,
             run_id: str) -> RunOutcome:
    """A chained item's outcome from its window: hung when its window holds a hung start or the watchdog; its
    stacks; the chain's leftovers under the run directories of the launches it made (``<root>/e<n>``)."""
    hung = any(e.kind == "watchdog_fired" or (e.kind == "engine_start_failed" and e.data.get("hung")) for e in events)
    out = RunOutcome(status="hung" if hung else "ok", detail=f"item {k + 1} of {n} of chained run {run_id}")
    out.stacks = {str(e.data.get("label")): str(e.data.get("text")) for e in events if e.kind == "stacks"}
    fired = next((e for e in events if e.kind == "watchdog_fired"), None)
    if fired is not None:  # the chained run's one bound: the sum of its scenarios' deadlines
        out.watchdog = {**fired.data, "scenarios": n}
    if last is not None:
        mine = tuple(f"{root}/e{x}" for x in launches)
        out.leftovers = [p for p in last.leftovers if any(p == m or p.startswith(m + "/") for m in mine)]
        if k == n - 1:
            out.exits, out.strays = dict(last.exits), list(last.strays)
            out.detail = (out.detail + " " + last.detail).strip()
    return out


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
    return judge_all(record, expect)


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
    StepError, a HarnessError, the system under test's TargetError nor an OSError of talking to it, e.g. a
    KeyError; or a ConfigError), are broken; a failed step of a started run is not."""
    if not started:
        return f"it did not start ({step_error})"
    if not isinstance(exc, (StepError, HarnessError, TargetError, OSError)) or isinstance(exc, ConfigError):
        return f"the harness crashed ({step_error})"
    return ""

