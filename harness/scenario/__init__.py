"""Scenarios: YAML files that say what to run, which faults to inject and what must hold afterwards.

``load`` (or ``load_many``) validates a file completely before anything starts:
a mistake is a :class:`ScenarioError` at FILE:LINE:COL with the key path and the
fix.  ``expand`` turns a scenario into its matrix of runs.  ``json_schema`` is what
``lastcall schema`` prints for editors.
"""

from __future__ import annotations

from harness.scenario.errors import ScenarioError
from harness.scenario.loader import MatrixItem, expand, load, load_many, loads
from harness.scenario.schema import Config, Scenario, Topology, json_schema
from harness.scenario.steps import STEP_TYPES, Step, StepBase

__all__ = [
    "Scenario", "Topology", "Config", "Step", "StepBase", "STEP_TYPES", "MatrixItem", "ScenarioError",
    "load", "loads", "load_many", "expand", "json_schema",
]
