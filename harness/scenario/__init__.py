"""Scenarios: YAML files that say what to run, which faults to inject and what must hold afterwards.

``load`` (or ``load_many``) validates a file completely before anything starts:
a mistake is a :class:`ScenarioError` at FILE:LINE:COL with the key path and the
fix.  ``expand`` turns a scenario into its matrix of runs.  ``json_schema`` is what
``lastcall schema`` prints for editors.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from harness.scenario.errors import ScenarioError

if TYPE_CHECKING:
    from harness.scenario.loader import MatrixItem, expand, load, load_many, loads
    from harness.scenario.schema import Config, Scenario, Topology, json_schema
    from harness.scenario.steps import STEP_TYPES, Step, StepBase

__all__ = [
    "Scenario", "Topology", "Config", "Step", "StepBase", "STEP_TYPES", "MatrixItem", "ScenarioError",
    "load", "loads", "load_many", "expand", "json_schema",
]

# Each name's module, imported on first use (PEP 562): the pytest plugin imports harness.scenario's option
# modules in every pytest session of an environment that has lastcall installed, and the loader (its pydantic
# models of every step and checker) costs a quarter of a second that a session collecting no scenario file
# need not pay.
_WHERE = {**dict.fromkeys(("MatrixItem", "expand", "load", "load_many", "loads"), "harness.scenario.loader"),
          **dict.fromkeys(("Config", "Scenario", "Topology", "json_schema"), "harness.scenario.schema"),
          **dict.fromkeys(("STEP_TYPES", "Step", "StepBase"), "harness.scenario.steps")}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'harness.scenario' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value
