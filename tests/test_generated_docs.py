"""The reference pages made from the code are current, and what they are made from holds: each committed page
equals its generator's output (regenerate with the command the failure prints), every step's and fault's example
loads through the loader, and the exit-code table holds every code the command line returns."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
import yaml
from lc_helpers import ROOT

from harness import cli, clidocs
from harness.scenario import stepdocs
from harness.scenario.client_spec import FAULT_EXAMPLES, SEND_FAULTS
from harness.scenario.errors import ScenarioError
from harness.scenario.loader import loads
from harness.scenario.steps import STEP_TYPES

# every page generated from the code: (its generator module, the page)
GENERATED = [("harness.events", "docs/events.md"), ("harness.checkers.docs", "docs/checkers.md"),
             ("harness.scenario.stepdocs", "docs/steps.md"), ("harness.clidocs", "docs/cli.md"),
             ("harness.envvars", "docs/environment.md")]
# what the code says that is no page, committed so that a change to it is seen in review: the scenario JSON Schema
SNAPSHOTS = [(["schema"], "fixtures/schema.json")]


def _generated(module: str) -> str:
    out = subprocess.run([sys.executable, "-m", module], capture_output=True, text=True, check=True, cwd=ROOT)
    return out.stdout


def stale(doc: str, module: str, generated: str) -> str | None:
    """Why the committed ``doc`` is not ``generated`` (with the command that regenerates it), or None."""
    if (ROOT / doc).read_text() == generated:
        return None
    return f"{doc} is stale: regenerate it with: .venv/bin/python -m {module} > {doc}"


@pytest.mark.parametrize(("module", "doc"), GENERATED, ids=[doc for _, doc in GENERATED])
def test_committed_reference_pages_are_generated(module: str, doc: str) -> None:
    why = stale(doc, module, _generated(module))
    assert why is None, why


def test_a_changed_help_string_makes_the_cli_page_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    build = cli.build_parser

    def planted() -> argparse.ArgumentParser:
        parser = build()
        run = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
        next(a for a in run._actions if a.dest == "exitfirst").help = "a help string changed in the code"
        return parser

    monkeypatch.setattr(cli, "build_parser", planted)
    why = stale("docs/cli.md", "harness.clidocs", clidocs.render_markdown())
    assert why == "docs/cli.md is stale: regenerate it with: .venv/bin/python -m harness.clidocs > docs/cli.md"


@pytest.mark.parametrize("kind", sorted(STEP_TYPES))
def test_each_step_example_loads(kind: str) -> None:
    example = STEP_TYPES[kind].example
    sc = loads(stepdocs.example_scenario(example, kind), f"<example of {kind}>")
    assert kind in {step.kind for step in sc.steps}, f"the example of {kind} has no {kind} step"


@pytest.mark.parametrize("fault", SEND_FAULTS)
def test_each_client_fault_example_loads(fault: str) -> None:
    sc = loads(stepdocs.example_scenario(FAULT_EXAMPLES[fault], fault), f"<example of {fault}>")
    assert fault in {step.spec.fault for step in sc.steps if step.kind == "send"}


def test_every_fault_has_one_example() -> None:
    assert list(FAULT_EXAMPLES) == list(SEND_FAULTS)


def test_an_example_that_does_not_load_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(STEP_TYPES["finish"], "example", "- start: cluster\n- finish: r1")  # no send named r1
    with pytest.raises(ScenarioError, match="r1"):
        test_each_step_example_loads("finish")


def test_the_steps_page_has_every_step_and_fault_with_its_example() -> None:
    page = (ROOT / "docs" / "steps.md").read_text()
    for kind, cls in STEP_TYPES.items():
        section = page.split(f"### `{kind}`\n", 1)[1].split("\n### ", 1)[0]
        block = section.split("```yaml\nsteps:\n", 1)[1].split("```", 1)[0]
        assert yaml.safe_load(block) == yaml.safe_load(cls.example), kind
    for fault in SEND_FAULTS:
        assert f"### `fault: {fault}`\n" in page


def test_the_exit_code_table_holds_every_code_the_cli_returns() -> None:
    codes = dict(clidocs.exit_codes())
    returned = {getattr(cli, n) for n in cli.__all__ if n.startswith("EXIT_")}
    missing = returned - set(codes)
    assert not missing, f"codes harness.cli returns that its docstring does not list: {missing}"
    assert list(codes) == sorted(codes)
    page = (ROOT / "docs" / "cli.md").read_text()
    assert all(f"\n| {code} | " in page for code in codes)


@pytest.mark.parametrize(("args", "path"), SNAPSHOTS, ids=[path for _, path in SNAPSHOTS])
def test_the_committed_cli_output_is_current(args: list[str], path: str) -> None:
    """``lastcall schema`` equals the committed copy: an editor's schema changes only where the change is seen."""
    out = subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout
    assert (ROOT / path).read_text() == out, (
        f"{path} is stale: regenerate it with: .venv/bin/python -m harness.cli {' '.join(args)} > {path}")
