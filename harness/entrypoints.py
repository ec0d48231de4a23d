"""lastcall's plug-in groups, read with importlib.metadata as pytest reads ``pytest11``.

A distribution adds targets and checkers without an edit to lastcall::

    [project.entry-points."lastcall.targets"]
    mylistener = "mypkg.lastcall_target:TARGET"      # a harness.targets.api.Target

    [project.entry-points."lastcall.checkers"]
    mine = "mypkg.lastcall_checkers"                  # a module whose @checker calls register its checkers

:func:`names` lists a group's names from the installed metadata without importing anything (``lastcall
validate`` accepts a target by name this way, torch-free); :func:`load` imports one entry point, by name,
when it is used.  A broken entry point is a :class:`~harness.errors.ConfigError` of one line naming it.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from harness.errors import ConfigError

__all__ = ["TARGETS", "CHECKERS", "GROUPS", "names", "value_of", "load"]

TARGETS = "lastcall.targets"
CHECKERS = "lastcall.checkers"
GROUPS = (TARGETS, CHECKERS)


def _points(group: str) -> dict[str, importlib.metadata.EntryPoint]:
    out: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=group):
        out.setdefault(ep.name, ep)  # the first on sys.path wins, as with a module
    return out


def names(group: str) -> list[str]:
    """The names installed in ``group``, sorted; nothing is imported."""
    return sorted(_points(group))


def value_of(group: str, name: str) -> str | None:
    """What the entry point ``name`` of ``group`` points at (``module:attribute``), or None; imports nothing."""
    ep = _points(group).get(name)
    return None if ep is None else ep.value


def load(group: str, name: str) -> Any:
    """The object the entry point ``name`` of ``group`` names, imported now; ConfigError (one line) otherwise."""
    ep = _points(group).get(name)
    if ep is None:
        raise ConfigError(f"no entry point {name!r} in group {group!r}")
    try:
        return ep.load()
    except Exception as exc:  # an import error of a plug-in is the user's input, said in one line
        dist = getattr(ep, "dist", None)
        by = f" (from {dist.name})" if dist is not None else ""
        raise ConfigError(f"entry point {group}:{name} = {ep.value!r}{by} cannot be loaded: "
                          f"{type(exc).__name__}: {exc}") from None
