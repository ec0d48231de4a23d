"""The casts of a run: which processes it starts, named by the parts a target provides.

A :class:`Part` is one kind of process: the role main it runs in the child (harness.launch.roles.ROLE_MAINS),
whether there is one per (pp, rank) of the topology, how steps address it, and which attribute of the target
it runs (``worker_side``, ``engine_side``, ``handshake_listener``).  A :class:`Cast` is the parts of one kind
of run, the group leader (addressed as ``engine``) first:

* ``worker``: an engine (the target's client) and tp x pp workers, each serving the target's worker listener;
* ``handshake``: an engine owning the target's handshake listener, and a peer engine handshaking with it;
* ``engine``: a real engine's process tree, hosted: launched by the harness itself (harness.engine.host;
  registered with its step kinds, harness.scenario.engine_steps).

The cast of a scenario's run follows from its steps (each step kind names the cast whose listener it drives,
harness.scenario.player); the target must provide what the cast's parts need (:func:`missing_parts`).  The
next kind of run (a real engine, ``vllm serve`` with its workers inside it) is one more cast here, its role
mains in harness.launch.roles and its step kinds in the player's registry: no second cluster or runner.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Part", "Cast", "CASTS", "WORKER", "HANDSHAKE", "register_cast", "cast_named", "missing_parts"]


@dataclass(frozen=True)
class Part:
    """One kind of process a run starts."""

    name: str  # how the cluster exposes it: "engine" (the first part), "workers", "peer"
    role: str  # the role main its processes run (harness.launch.roles.ROLE_MAINS)
    per_rank: bool = False  # one process per (pp, rank), labelled pp{pp}/rank{rank}; else one, labelled by role
    needs: str | None = None  # the target attribute the process runs; None: the harness's own (a peer)


@dataclass(frozen=True)
class Cast:
    """The parts of one kind of run; the first is the process group's leader, addressed as ``engine``."""

    name: str
    parts: tuple[Part, ...]
    about: str = ""
    # a hosted cast's processes are no forked roles: ``host(cluster)`` makes the object that starts them from
    # the harness process (``start()``), kills them for the watchdog (``kill()``) and reaps them (``close()``);
    # the cluster keeps it as ``cluster.host`` (the engine cast: a real engine's tree, harness.engine.host)
    host: Callable[[Any], Any] | None = None

    def part(self, name: str) -> Part | None:
        return next((p for p in self.parts if p.name == name), None)


WORKER = Cast("worker", (Part("engine", "engine", needs="engine_side"),
                         Part("workers", "worker", per_rank=True, needs="worker_side")),
              "an engine (the target's client) and tp x pp workers serving the target's worker listener")
HANDSHAKE = Cast("handshake", (Part("engine", "hs_engine", needs="handshake_listener"), Part("peer", "hs_peer")),
                 "an engine owning the target's handshake listener, and a peer engine")

CASTS: dict[str, Cast] = {}


def register_cast(cast: Cast) -> Cast:
    """Make ``cast`` known by its name (a step kind names the cast it drives); returns it."""
    if not cast.parts or cast.parts[0].name != "engine":
        raise ValueError(f"cast {cast.name!r}: its first part is the group leader and must be named 'engine'")
    CASTS[cast.name] = cast
    return cast


register_cast(WORKER)
register_cast(HANDSHAKE)


def cast_named(name: str) -> Cast:
    try:
        return CASTS[name]
    except KeyError:
        raise KeyError(f"no cast {name!r}; known: {', '.join(sorted(CASTS))}") from None


def missing_parts(cast: Cast, target: Any) -> list[str]:
    """The target attributes ``cast`` needs that ``target`` lacks (None or absent)."""
    return [p.needs for p in cast.parts if p.needs is not None and getattr(target, p.needs, None) is None]
