"""A chained engine run: several engine scenarios played on one run, each judged on its own window of its history.

A real engine's launch is most of an engine scenario's cost (vLLM 0.32 on 2 cores: about 12 s to ready, of
which about 10 s are its spawned EngineCore's and worker's imports).  A scenario that ends by restarting the
engine (``engine_restart`` as its last step: it judges that the restart binds and becomes ready) leaves a
ready engine that nothing judges afterwards; a plain run ends it.  A chained run hands that engine to the next
scenario as its start instead of launching another one:

* **One run.** One cluster, one engine host (harness.engine.host), one history, one run directory, one
  watchdog whose deadline is the sum of every scenario's own (with each one's launches), one engine lock.
* **Each scenario judged on its own window.**  ``chain_item_began`` / ``chain_item_ended`` bound a scenario's
  events; its checkers, its report and ``lastcall report``'s re-judging see that window alone, plus the launch
  events (``engine_launched``, ``engine_ready``) of the engine it was handed, named by ``engine_handed``
  (launch, pid, ready time, the scenario that restarted it).  Every engine checker judges the steps of its
  own window (harness.checkers.engine), so a verdict cannot come from another scenario's steps.
* **What is handed.** Only a launch that is untouched (:meth:`EngineHost.untouched`): ready, every process
  alive, and no signal, request or start sent to it since its ready line; and only to a scenario whose own
  launch would take the same flags (TP, ``--shutdown-timeout``, KV connector and side channel).  So the next
  scenario starts on what a fresh launch of its own would be once ready, launched on the same port by the
  same launcher; otherwise it launches its own.  Between two scenarios every other tree of the run is ended as
  a plain run's close ends it (SIGTERM, a grace, SIGKILL, its outliving segments removed: ``engine_closed``,
  in the earlier scenario's window).

:func:`plan` groups a list of items into chains (givers, those ending with ``engine_restart``, first; then
one scenario that receives the last giver's engine); :func:`run_chain` runs one chain and returns one
RunResult per scenario (run id ``<run id>-<k>``).  ``./dev vllm-engine-test`` runs the engine library this
way (docs/findings/vllm-0.32-cpu/README.md), and so does ``lastcall run --chain`` (harness.scenario.chain_items);
a plain ``lastcall run`` runs each scenario alone, a launch of its own, as every finding is reproduced.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from harness.checkers import RunRecord
from harness.errors import ConfigError
from harness.history import Event
from harness.launch.cluster import Cluster, RunOutcome
from harness.launch.parts import cast_named
from harness.launch.snapshots import for_cluster
from harness.probes.model import Snapshot
from harness.scenario.loader import MatrixItem
from harness.scenario.player import Player, StepError, cast_for, engine_launches
from harness.scenario.result import RunResult
from harness.scenario.runner import (
    budget_end,
    failed,
    judge_expect,
    ready_target,
    run_item,
    run_scale,
    with_bad_events,
)
from harness.targets import absent_of

__all__ = ["plan", "run_chain", "launch_key", "gives", "window"]


def _cfg_key(item: MatrixItem) -> tuple[Any, ...]:
    cfg = item.scenario.config
    return (item.params.get("tp"), item.params.get("pp"), item.params.get("device"),
            getattr(cfg, "shutdown_timeout", None), getattr(cfg, "kv_connector", None),
            getattr(cfg, "side_channel_port", None))


def launch_key(item: MatrixItem) -> tuple[Any, ...] | None:
    """What an item's own launch is made of (its topology and the config's engine flags), or None when the item
    cannot take part in a chain: not an engine run, or steps before its start (a hold_port the launch needs)."""
    steps = item.scenario.steps
    if cast_for(steps) != "engine" or not steps or steps[0].kind != "start":
        return None
    return _cfg_key(item)


def gives(item: MatrixItem) -> bool:
    """Whether an item ends by restarting its engine (its last step is ``engine_restart``): a ready engine that
    nothing of it judges afterwards, which the next item of the same launch key may start on."""
    steps = item.scenario.steps
    return launch_key(item) is not None and steps[-1].kind == "engine_restart"


def plan(items: Sequence[MatrixItem]) -> list[list[MatrixItem]]:
    """The chains to run ``items`` in, every item once: per launch key, its givers (by name), then the first of
    its other items; every item left alone is a chain of one.  Deterministic: the same items, the same plan."""
    chains: list[list[MatrixItem]] = []
    groups: dict[tuple[Any, ...], list[MatrixItem]] = {}
    for item in items:
        key = launch_key(item)
        if key is None:
            chains.append([item])
        else:
            groups.setdefault(key, []).append(item)
    for members in groups.values():
        ordered = sorted(members, key=lambda i: (i.scenario.name, i.id))
        givers = [i for i in ordered if gives(i)]
        rest = [i for i in ordered if not gives(i)]
        if givers:
            chains.append(givers + rest[:1])
            rest = rest[1:]
        chains.extend([i] for i in rest)
    order = {id(i): n for n, i in enumerate(items)}
    chains.sort(key=lambda ch: order[id(ch[0])])
    return chains


def window(events: Sequence[Event], began: int, ended: int, handed: Event | None) -> list[Event]:
    """A chained item's events: ``events[began:ended]``, after the launch events of the engine it was handed
    (its ``engine_launched`` and ``engine_ready``)."""
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
    """An item's outcome from its window: hung when its window holds a hung start or the watchdog; its stacks;
    the chain's leftovers under the run directories of the launches it made (``<root>/e<n>``)."""
    hung = any(e.kind == "watchdog_fired" or (e.kind == "engine_start_failed" and e.data.get("hung")) for e in events)
    out = RunOutcome(status="hung" if hung else "ok", detail=f"item {k + 1} of {n} of chained run {run_id}")
    out.stacks = {str(e.data.get("label")): str(e.data.get("text")) for e in events if e.kind == "stacks"}
    if last is not None:
        mine = tuple(f"{root}/e{x}" for x in launches)
        out.leftovers = [p for p in last.leftovers if any(p == m or p.startswith(m + "/") for m in mine)]
        if k == n - 1:
            out.exits, out.strays = dict(last.exits), list(last.strays)
            out.detail = (out.detail + " " + last.detail).strip()
    return out


def run_chain(items: Sequence[MatrixItem], *, variant: str | None = None, run_id: str | None = None) -> list[RunResult]:
    """Run ``items`` (one chain of :func:`plan`) as one engine run; one RunResult per item, in order.

    A chain of one is :func:`~harness.scenario.runner.run_item`.  A failed step or start of one item is that
    item's outcome (``step_failed`` in its window); the next item then launches its own engine.  Never raises
    for a failing system under test.
    """
    if len(items) == 1:
        return [run_item(items[0], variant=variant, run_id=run_id)]
    keys = {launch_key(i) for i in items}
    if None in keys or len(keys) != 1:
        raise ConfigError("a chained run takes engine scenarios of one launch key, each starting with its start "
                          f"step: {', '.join(i.scenario.name for i in items)}")
    first = items[0]
    chosen = variant or first.scenario.target
    cfg = first.scenario.config
    c = Cluster(tp=first.params["tp"], pp=first.params["pp"], device=first.params["device"], variant=chosen,
                deadline=sum(i.scenario.config.deadline for i in items), run_id=run_id,
                cast=cast_named(cast_for(first.scenario.steps)), ipc_timeout=cfg.ipc_timeout)
    c.scenario = first.scenario
    c.launches = sum(engine_launches(i.scenario) for i in items)  # the engine host allows each one's launches

    def snap(cl: Cluster, label: str) -> Snapshot:
        return for_cluster(cl, label, ports=(cl.host.port,) if cl.host is not None else ())

    per: list[dict[str, Any]] = []
    last_outcome: RunOutcome | None = None
    n = len(items)
    for k, item in enumerate(items):
        t0 = time.monotonic()
        scn = item.scenario
        snaps: dict[str, Snapshot] = {}
        began = len(c.rec.events())
        c.rec.emit("chain_item_began", index=k, scenario=scn.name, of=n, run=c.run_id)
        snaps["before"] = snap(c, "before")
        step_error = broken = ""
        started = False
        player: Player | None = None
        try:
            ready_target(chosen, c.cast)
            if c.rec.events("watchdog_fired"):  # its thread has ended: nothing more starts without a safety net
                raise StepError("not run: the chained run's watchdog fired in an earlier scenario")
            player = Player(item, c, snaps, snap)
            c.scenario = scn
            if c.host is None:
                if k:
                    raise StepError("not run: the chained run's first start failed before its engine host")
                c.start()
            else:  # the engine the scenario before handed on, or a launch of its own
                c.host.take_over(scn, items[k - 1].scenario.name)
            started = True
            player.play()
        except Exception as exc:  # as run_item: the item's outcome, not a crash of the session
            step_error, broken = failed(c, exc, started)
        finally:
            if player is not None:
                player.finish_up()
            if k < n - 1:
                if c.host is not None:
                    c.host.between(items[k + 1].scenario if not step_error else None)
                snaps["after"] = snap(c, "after")
            else:
                def after(cl: Cluster, into: dict[str, Snapshot] = snaps) -> None:
                    into["after"] = snap(cl, "after")

                last_outcome = c.close(before_cleanup=after)
        c.rec.emit("chain_item_ended", index=k, scenario=scn.name, run=c.run_id)
        per.append({"item": item, "began": began, "ended": len(c.rec.events()), "snaps": snaps,
                    "step_error": step_error, "broken": broken, "seconds": time.monotonic() - t0,
                    "armed": bool(player is not None and player.armed)})
    events = c.rec.events()
    bounds_scale = run_scale(c)
    handed_in = [next((e for e in events[p["began"]:p["ended"]] if e.kind == "engine_handed"), None) for p in per]
    results = []
    cut_at = events.index(c.rec.cut) if c.rec.cut is not None else len(events)
    for k, p in enumerate(per):
        evs = window(events, p["began"], p["ended"], handed_in[k])
        if p["began"] > cut_at:  # an item after the cut of the history: its window holds nothing of its own
            evs.append(events[cut_at])
        # the launches whose trees this item ended: those of its window (the one it was handed included), less
        # the one it handed on (its receiver's steps ended that tree)
        handed_on = handed_in[k + 1] if k + 1 < n else None
        launches = {e.data["launch"] for e in evs if e.kind == "engine_launched"} - (
            {handed_on.data["launch"]} if handed_on is not None else set())
        item = p["item"]
        step_error, broken = with_bad_events(c, p["step_error"], p["broken"])
        record = RunRecord(tuple(evs), p["snaps"], bounds_scale, absent=absent_of(chosen))
        verdicts = judge_expect(item.scenario, record, armed=p["armed"])
        outcome = _outcome(evs, last_outcome, launches, str(c.root), k, n, c.run_id)
        if p["ended"] > cut_at:  # the history was cut during this item, or before it
            step_error = budget_end(c, outcome, step_error)
        results.append(RunResult(item, chosen, f"{c.run_id}-{k + 1}", verdicts, outcome, evs, p["snaps"],
                                 step_error, p["seconds"], broken=broken, scale=bounds_scale,
                                 extra={"chain": [i.scenario.name for i in items], "chain_index": k}))
    return results
