"""lastcall's own targets are entry points of its distribution, as a plug-in's are.

pyproject.toml registers them (``lastcall.targets``); the installed metadata must agree with
harness/targets/names.py (the static names ``lastcall validate`` checks without importing a target), and each
entry point must load what :func:`load_target` loads.
"""

from __future__ import annotations

import importlib.metadata

import pytest
import tomllib
from lc_helpers import ROOT

from harness import entrypoints
from harness.checkers import CHECKERS
from harness.targets import builtin, catalogue, load_target, names


def _own(group: str) -> dict[str, str]:
    """The entry points of lastcall's installed distribution in ``group``: name -> value."""
    return {ep.name: ep.value for ep in importlib.metadata.distribution("lastcall").entry_points
            if ep.group == group}


def _declared(group: str) -> dict[str, str]:
    """What pyproject.toml declares in ``group``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return dict(project["entry-points"][group])


def test_pyproject_registers_every_builtin_target_by_its_static_name() -> None:
    declared = _declared(entrypoints.TARGETS)
    assert declared == builtin.entry_point_values(), "regenerate them: python -m harness.targets.builtin"
    assert list(declared) == list(dict.fromkeys(names.target_names()))
    text = (ROOT / "pyproject.toml").read_text()
    assert builtin.with_entry_points(text) == text  # the writer leaves a current file as it is


def test_the_installed_metadata_is_what_pyproject_declares() -> None:
    """Fails on an install older than pyproject.toml: refresh it with pip install --no-deps -e ."""
    assert _own(entrypoints.TARGETS) == _declared(entrypoints.TARGETS), "run pip install --no-deps -e ."
    assert set(names.target_names()) <= set(entrypoints.names(entrypoints.TARGETS))


@pytest.mark.parametrize("name", list(builtin.entry_point_values()))
def test_each_target_entry_point_loads_what_load_target_loads(name: str) -> None:
    assert names.check_target(name) is None  # validate's check: the name alone, nothing imported
    loaded = entrypoints.load(entrypoints.TARGETS, name)
    direct = load_target(name)
    assert type(loaded) is type(direct)
    assert loaded == direct or loaded is direct
    assert getattr(loaded, "name", name) == getattr(direct, "name", name)


def test_an_attribute_of_builtin_that_names_no_target_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no target 'nonesuch'"):
        builtin.nonesuch  # noqa: B018


def test_lastcall_registers_no_checker_entry_points() -> None:
    """Its checkers are registered by importing harness.checkers (before the plug-ins): a second list of them
    would have to be kept in step with every new checker module."""
    assert not _own(entrypoints.CHECKERS) and entrypoints.CHECKERS not in tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert {c.fn.__module__ for c in CHECKERS.values()} >= {"harness.checkers.lifecycle", "harness.checkers.outcome"}


def test_lastcall_targets_lists_the_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every entry point is a row (built-in names first, in their order); a built-in name the installed metadata
    lacks is listed all the same, saying how to refresh the install."""
    real = entrypoints.names
    monkeypatch.setattr(entrypoints, "names",
                        lambda group: [n for n in real(group) if n != "no_conn_tracking"] + ["thirdparty_x"]
                        if group == entrypoints.TARGETS else real(group))
    monkeypatch.setattr(entrypoints, "value_of", lambda group, name: "tests.nowhere:X")
    rows = {name: state for name, state, _caps, _about in catalogue()}
    assert list(rows)[:3] == ["reference", "timed_join_teardown", "no_conn_tracking"]
    assert rows["no_conn_tracking"].endswith("(no lastcall.targets entry point: refresh the install, pip install "
                                             "--no-deps -e .)")
    assert rows["reference"] == "available"
    assert "thirdparty_x" in rows and rows["thirdparty_x"].startswith("unavailable: ")
