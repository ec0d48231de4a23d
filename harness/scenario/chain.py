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
one scenario that receives the last giver's engine); :func:`harness.scenario.runner.run_chain`, the one run
driver, runs one chain and returns one RunResult per scenario (run id ``<run id>-<k>``).  ``./dev
vllm-engine-test`` runs the engine library this way (docs/findings/vllm-0.32-cpu/README.md), and so does
``lastcall run --chain`` (harness.scenario.chain_items); a plain ``lastcall run`` runs each scenario alone, a
launch of its own, as every finding is reproduced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.scenario.loader import MatrixItem
from harness.scenario.player import cast_for

__all__ = ["plan", "launch_key", "gives"]


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
