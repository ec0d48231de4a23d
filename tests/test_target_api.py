"""Open registries and the target API: @checker registers a checker with its parameter model, the
``lastcall.targets`` / ``lastcall.checkers`` entry points (a real installed distribution's metadata, on a
PYTHONPATH of a subprocess), ``lastcall targets``, harness.targets.api's capability names and
check_target_object."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from lc_helpers import ROOT

from harness.checkers import CHECKER_PARAMS, CHECKERS, Params, RunRecord, Verdict, checker, judge
from harness.checkers.params import StopLatency, Within
from harness.errors import ConfigError
from harness.events import PARTY_CAPABILITIES
from harness.targets import load_target
from harness.targets.api import CAPABILITIES, EVENT_CAPABILITIES, check_target_object

PY = sys.executable


class Ceiling(Params):
    """test: at most this many events."""

    most: int = 10


@pytest.fixture
def registry() -> Iterator[None]:
    """The checker registries as they were, put back after the test: a checker a test registers must not stay
    registered for the tests after it (the docs' checker table is judged against the registry)."""
    saved = dict(CHECKERS), dict(CHECKER_PARAMS)
    yield
    for live, was in zip((CHECKERS, CHECKER_PARAMS), saved, strict=True):
        live.clear()
        live.update(was)  # type: ignore[arg-type]


def test_checker_registers_both_halves(registry: None) -> None:

    def at_most(run: RunRecord, p: Ceiling) -> Verdict:
        n = len(run.events)
        return Verdict("at_most", "ok" if n <= p.most else "violated", f"{n} events")

    checker("at_most", "at most `most` events", params=Ceiling)(at_most)
    assert CHECKERS["at_most"].params is Ceiling and CHECKER_PARAMS["at_most"] is Ceiling
    assert judge("at_most", RunRecord(()), {"most": 0}).status == "ok"
    assert "bad parameters" in judge("at_most", RunRecord(()), {"least": 0}).message  # the model judges params


def test_the_parameter_model_is_the_annotation_when_not_given(registry: None) -> None:

    def annotated(run: RunRecord, p: Within) -> Verdict:
        return Verdict("annotated", "ok")

    def bare(run, p):  # type: ignore[no-untyped-def]
        return Verdict("bare", "ok")

    checker("annotated", "x")(annotated)
    checker("bare", "x")(bare)
    assert CHECKER_PARAMS["annotated"] is Within and CHECKER_PARAMS["bare"] is Params
    assert CHECKERS["stop_latency"].params is StopLatency  # the built-ins, by their annotations


def test_a_bad_registration_is_refused(registry: None) -> None:

    def once(run: RunRecord, p: Params) -> Verdict:
        return Verdict("twice", "ok")

    def again(run: RunRecord, p: Params) -> Verdict:
        return Verdict("twice", "ok")

    checker("twice", "x")(once)
    with pytest.raises(ConfigError, match="registered twice"):
        checker("twice", "x")(again)
    with pytest.raises(ConfigError, match=r"must be a harness\.checkers\.params\.Params model"):
        checker("not_a_model", "x", params=dict)(once)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="lower_snake_case"):
        checker("Bad Name", "x")
    with pytest.raises(ConfigError, match="names event kind"):
        checker("strange", "x", judges=("no_such_kind",))
    assert "not_a_model" not in CHECKERS and "not_a_model" not in CHECKER_PARAMS


# ---------------------------------------------------------------- entry points
PLUGIN = '''
from harness.checkers import Params, RunRecord, Verdict, checker
from harness.targets.api import CAPABILITIES


class Most(Params):
    most: int = 100


@checker("few_events", "a plug-in checker: at most `most` events", params=Most)
def few_events(run: RunRecord, p: Most) -> Verdict:
    n = len(run.events)
    return Verdict("few_events", "ok" if n <= p.most else "violated", f"{n} events")


class Tiny:
    """A plug-in target with a worker side only (never run here)."""

    name = "tiny"
    about = "a plug-in target"
    capabilities = frozenset({"worker_listener", "listener_events"})
    codec = None
    engine_side = None
    handshake_listener = None

    def worker_side(self, spec, recorder):
        raise NotImplementedError


TINY = Tiny()
'''
SCENARIO = '''
name: uses-a-plugin-checker
about: a scenario whose expect names a checker from a lastcall.checkers entry point
catches: [no_conn_tracking]
steps:
  - start: cluster
  - stop: {as: s1}
expect:
  - few_events: {most: 5}
'''


def _installed(tmp_path: Path) -> dict[str, str]:
    """A distribution 'lcplug' on a PYTHONPATH: its module and its entry points (metadata only, no pip)."""
    site = tmp_path / "site"
    (site / "lcplug-0.1.dist-info").mkdir(parents=True)
    (site / "lcplug.py").write_text(PLUGIN)
    (site / "lcbroken.py").write_text("import no_such_dependency_xyz\nTARGET = None\n")
    (site / "lcplug-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: lcplug\nVersion: 0.1\n")
    (site / "lcplug-0.1.dist-info" / "entry_points.txt").write_text(
        "[lastcall.checkers]\nlcplug = lcplug\nlcbroken = lcbroken\n\n"
        "[lastcall.targets]\ntiny = lcplug:TINY\nbroken = lcbroken:TARGET\nnot_one = lcplug:Most\n")
    (tmp_path / "uses.yaml").write_text(SCENARIO)
    return {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}


def _py(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def test_a_plugin_checker_is_registered_by_its_entry_point(tmp_path: Path) -> None:
    env = _installed(tmp_path)
    out = _py(f"""
        from harness.checkers import CHECKER_PARAMS, RunRecord, judge
        from harness.scenario.loader import load
        sc = load({str(tmp_path / 'uses.yaml')!r})
        entry = sc.expect[0]
        print(entry.checker, entry.params, CHECKER_PARAMS['few_events'].__name__)
        print(judge('few_events', RunRecord(()), {{'most': -1}}).status, judge('few_events', RunRecord(())).status)
        print(judge('broken_one', RunRecord(())).message)
    """, env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["few_events most=5 Most", "violated ok"]
    assert out.stdout.split("\n")[2] == (  # a plug-in that fails to load is named, not a crash of every import
        "no checker named 'broken_one' (entry point lastcall.checkers:lcbroken = 'lcbroken' (from lcplug) cannot be "
        "loaded: ModuleNotFoundError: No module named 'no_such_dependency_xyz')")
    bad = tmp_path / "bad.yaml"
    bad.write_text(SCENARIO.replace("most: 5", "least: 5"))
    val = subprocess.run([PY, "-m", "harness.cli", "validate", str(bad)], env=env, capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert val.returncode == 2 and "least" in val.stderr and "Traceback" not in val.stderr


def test_without_the_distribution_the_checker_is_unknown(tmp_path: Path) -> None:
    (tmp_path / "uses.yaml").write_text(SCENARIO)
    val = subprocess.run([PY, "-m", "harness.cli", "validate", str(tmp_path / "uses.yaml")], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert val.returncode == 2 and "unknown checker 'few_events'" in val.stderr


def test_plugin_targets_are_named_without_importing_and_loaded_by_name(tmp_path: Path) -> None:
    env = _installed(tmp_path)
    out = _py("""
        import sys
        from harness.targets.names import check_target
        print(check_target('tiny'), check_target('broken'), 'lcplug' in sys.modules, 'torch' in sys.modules)
        from harness.targets import load_target
        t = load_target('tiny')
        print(type(t).__name__, sorted(t.capabilities))
        for name in ('broken', 'not_one'):
            try:
                load_target(name)
            except Exception as exc:
                print(type(exc).__name__, exc)
    """, env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "None None False False"  # listed from the metadata: nothing imported, no torch
    assert lines[1] == "Tiny ['listener_events', 'worker_listener']"
    assert lines[2].startswith("ConfigError entry point lastcall.targets:broken = 'lcbroken:TARGET' (from lcplug) "
                               "cannot be loaded: ModuleNotFoundError: No module named 'no_such_dependency_xyz'")
    assert lines[3].startswith("ConfigError not_one (entry point lcplug:Most) is a ModelMetaclass that is not a "
                               "target (harness.targets.api.Target): name is missing; about is missing")


def test_lastcall_targets_lists_availability_in_one_line_each(tmp_path: Path) -> None:
    env = _installed(tmp_path)
    out = subprocess.run([PY, "-m", "harness.cli", "targets"], env=env, capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line for line in out.stdout.splitlines()[1:]}
    assert "Traceback" not in out.stdout + out.stderr
    assert "available: none: keeps every line of the stop contract" in rows["reference"]
    assert "worker_listener" in rows["reference"] and "handshake_listener" in rows["never_stopped"]
    assert "listener_events, worker_listener" in rows["tiny"] and "available: a plug-in target" in rows["tiny"]
    assert "unavailable: entry point lastcall.targets:broken" in rows["broken"]
    assert "No module named 'no_such_dependency_xyz'" in rows["broken"]
    assert all(" available" in r or " unavailable: " in r for r in rows.values())  # one line each, a status each
    one = subprocess.run([PY, "-m", "harness.cli", "targets", "tiny", "nope"], env=env, capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert one.returncode == 2 and one.stderr.startswith("lastcall: error: unknown target 'nope'")
    assert len(one.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- the API
def test_capability_names_are_the_ones_in_use() -> None:
    from harness.reference.handshake_variants import handshake_target
    from harness.reference.variants import VARIANTS
    from harness.scenario.needs import STEP_NEEDS

    used = set(STEP_NEEDS.values()) | set(PARTY_CAPABILITIES.values()) | set(VARIANTS["reference"].capabilities)
    hs = handshake_target("never_stopped")
    assert hs is not None
    used |= hs.capabilities | load_target("kvcached").capabilities
    assert used <= set(CAPABILITIES), used - set(CAPABILITIES)
    assert set(EVENT_CAPABILITIES) == set(PARTY_CAPABILITIES.values())


class NearMiss:
    name = "near"
    about = ""
    capabilities: ClassVar[list[str]] = ["worker_listener", "telepathy"]
    codec = object()
    worker_side = "not callable"
    handshake_listener = None
    variants: ClassVar[dict[str, int]] = {"bug": 3}


def test_check_target_object_names_every_missing_or_mistyped_attribute() -> None:
    assert check_target_object(NearMiss()) == [
        "about is a str, not a non-empty str",
        "capabilities is a list, not a frozenset of str",
        "worker_side is a str, not callable or None",
        "engine_side is missing (None when the target has none)",
        "codec.header_size is missing or not an int",
        "codec.encode_request is missing or not callable",
        "codec.decode_reply is missing or not callable",
        "variants is not a mapping of bug name -> target spec (str -> str)",
    ]

    class Unknown:
        name, about, codec = "u", "u", None
        capabilities = frozenset({"handshake_listener", "telepathy"})
        handshake_listener = None

        def worker_side(self, spec: Any) -> None: ...

        def engine_side(self, spec: Any, recorder: Any) -> None: ...

    problems = check_target_object(Unknown())
    assert problems[0].startswith("capabilities ['telepathy'] are not known")
    assert problems[1] == "capability handshake_listener is declared but handshake_listener is None"
    assert problems[2].startswith("worker_side cannot be called with 2 arguments")
    assert len(problems) == 3
    for name in ("reference", "no_conn_tracking", "never_stopped", "kvcached"):
        assert check_target_object(load_target(name)) == [], name


# ---------------------------------------------------------------- docs/targets.md
DOC = ROOT / "docs" / "targets.md"


def test_the_capability_table_is_the_apis() -> None:
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| `")]
    assert rows == [f"| `{name}` | {about} |" for name, about in CAPABILITIES.items()]


def test_the_worked_examples_excerpts_are_its_code() -> None:
    import re

    source = (ROOT / "tests" / "thirdparty" / "target.py").read_text()
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    excerpts = [b for b in blocks if "ThirdPartyTarget(" in b or "class Worker:" in b]
    assert len(excerpts) == 2
    for block in excerpts:
        assert block in source, block
