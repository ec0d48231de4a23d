"""The scenario schema and loader: every mistake located and explained, exact texts asserted.

Each file in fixtures/bad-scenarios/ is one kind of mistake; its sibling NAME.expected
holds the exact message (paths relative to the repo root: tests run from there).
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

import harness.faults.client
from harness import failpoints
from harness.checkers.params import CHECKER_PARAMS, FaultFired, StopLatency
from harness.cli import EXIT_OK, EXIT_USAGE, main
from harness.reference import wire
from harness.scenario import ScenarioError, expand, load, load_many, loads
from harness.scenario.steps import EVENT_KINDS, FAILPOINT_ACTIONS, SEND_FAULTS, STEP_TYPES

BAD = Path("fixtures/bad-scenarios")
GOOD = Path("fixtures/good-scenario.yaml")
BAD_FILES = sorted(BAD.glob("*.yaml"))
REQUIRED_KINDS = {  # the mistakes the issue names, each with its fixture
    "syntax-error", "duplicate-key", "unknown-top-level-key", "unknown-step", "misspelt-checker", "wrong-type",
    "bad-duration", "undefined-reference", "wait-never-armed", "sleep-step", "bad-fault", "bad-variant",
    "missing-required", "empty-steps",
}
HEAD = """\
name: small
about: A small scenario for the loader's tests.
catches: [no_conn_tracking]
"""


def _expected(path: Path) -> str:
    return path.with_suffix(".expected").read_text().rstrip("\n")


def _error(text: str) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        loads(textwrap.dedent(text), "t.yaml")
    return info.value


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# ------------------------------------------------------------------ bad fixtures
def test_every_mistake_kind_has_a_fixture_and_an_expected_message() -> None:
    names = {p.stem for p in BAD_FILES}
    assert names >= REQUIRED_KINDS
    assert {p.stem for p in BAD.glob("*.expected")} == names


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_bad_fixture_gives_exactly_its_message(path: Path) -> None:
    with pytest.raises(ScenarioError) as info:
        load(path)
    assert str(info.value) == _expected(path)
    assert info.value.also == ()  # one mistake per fixture
    assert str(info.value).startswith(f"{path}:")


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_validate_bad_fixture_exits_2_with_the_message(capsys: pytest.CaptureFixture[str], path: Path) -> None:
    rc, out, err = _run(capsys, "validate", str(path))
    assert (rc, out) == (EXIT_USAGE, "")
    assert err == f"{_expected(path)}\nlastcall validate: 1 of 1 file invalid\n"
    assert "Traceback" not in err


def test_unknown_step_message_has_the_documented_shape() -> None:
    assert _expected(BAD / "unknown-step.yaml").startswith(
        "fixtures/bad-scenarios/unknown-step.yaml:7:5: steps[2]: unknown step 'relase'; expected one of: arm, call, ")
    assert _expected(BAD / "unknown-step.yaml").endswith("(did you mean 'release'?)")


# ------------------------------------------------------------------ good scenarios
def test_good_fixture_loads_with_units_and_checker_params() -> None:
    sc = load(GOOD)
    assert sc.name == "stalled-read-is-cancelled"
    assert (sc.config.drain_timeout, sc.config.capacity, sc.config.deadline) == (0.5, 64 << 20, 30.0)
    send = next(s for s in sc.steps if s.kind == "send").spec
    assert (send.offsets, send.fault, send.to.rank) == ([4 << 20], "stall_after_header", 0)
    arm = sc.steps[1].spec
    assert (arm.on.rank, arm.action, arm.count, sc.steps[1].name) == (0, "pause", 1, "f1")
    by_name = {e.checker: e.params for e in sc.expect}
    assert by_name["stop_latency"] == StopLatency(step="s1", within=2.0)
    assert type(by_name["fault_fired"]) is FaultFired and by_name["fault_fired"].faults == ["f1"]
    assert [i.id for i in expand(sc)] == ["tp1-pp1-cpu", "tp2-pp1-cpu"]
    assert sc.source == str(GOOD) and sc.where("steps", 1) == f"{GOOD}:16:5"


def test_matrix_expands_tp_by_device(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(HEAD + "topology: {tp: [1, 2], pp: 1, device: [cpu, cuda]}\n"
                    "steps: [start: cluster]\nexpect: [no_leftover_paths]\n")
    items = expand(load(path))
    assert [i.id for i in items] == ["tp1-pp1-cpu", "tp1-pp1-cuda", "tp2-pp1-cpu", "tp2-pp1-cuda"]
    assert items[3].params == {"tp": 2, "pp": 1, "device": "cuda"}


def test_yaml_1_1_booleans_stay_words() -> None:
    sc = loads(HEAD + textwrap.dedent("""\
        steps:
          - start: cluster
          - arm: {site: listener.frame_read, on: engine, action: pass, as: f1}
          - wait: {reached: f1}
        expect: [no_late_dispatch: null]
        """))
    assert sc.steps[1].spec.on == "engine"
    assert sc.expect[0].checker == "no_late_dispatch"


# ------------------------------------------------------------------ more messages
@pytest.mark.parametrize(("body", "message"), [
    ("steps: [start: cluster, {arm: {site: a.b, action: pause, delay: 1s}}]\nexpect: [no_late_dispatch]\n",
     "t.yaml:4:31: steps[1].arm: delay: is only used by action 'delay', not 'pause'; remove it"),
    ("steps: [start: cluster, wait: {event: stop_started, returned: s1}]\nexpect: [no_late_dispatch]\n",
     "t.yaml:4:31: steps[1].wait: expected exactly one of: reached, event, returned, closed; "
     "found event and returned"),
    ("steps: [start: cluster, wait: {event: stop_begun}]\nexpect: [no_late_dispatch]\n",
     "t.yaml:4:39: steps[1].wait.event: unknown event kind 'stop_begun'; expected one of: "),
    ("steps: [start: cluster, send: {cmd: map_to_kv_tensors, as: r1}, finish: r1]\nexpect: [no_late_dispatch]\n",
     "t.yaml:4:73: steps[2].finish: 'r1' withholds nothing (fault 'none'); expected a send with fault "
     "stall_after_header, stall_mid_body, partial_header or stall_byte_by_byte"),
    ("steps: [start: cluster]\nexpect: [stop_latency: {withn: 1s}]\n",
     "t.yaml:5:25: expect[0].stop_latency: unknown key 'withn'; expected one of: step, within, phase "
     "(did you mean 'within'?)"),
    ("steps: [start: cluster]\nexpect: [stop_latency: {within: 0}]\n",
     "t.yaml:5:33: expect[0].stop_latency.within: expected a value more than 0, found 0"),
    ("steps: [start: cluster]\nexpect: [stop_result: {step: s9}]\n",
     "t.yaml:5:30: expect[0].stop_result.step: undefined step name 's9'; expected the as: name of a stop, "
     "shutdown, restart or start_listener step; there is no stop, shutdown, restart or start_listener step"),
    ("steps: [start: cluster, send: {fault: partial_header}]\nexpect: [no_late_dispatch]\n",
     "t.yaml:4:31: steps[1].send: missing required key 'cmd': fault 'partial_header' sends a request "
     "(e.g. cmd: map_to_kv_tensors)"),
    ("steps: [start: cluster, stop: {on: {rank: x}}]\nexpect: [no_late_dispatch]\n",
     "t.yaml:4:43: steps[1].stop.on.rank: expected an integer >= 0, found 'x'"),
    ("steps: [start: cluster, stop: {on: every}]\nexpect: [no_late_dispatch]\n",
     "t.yaml:4:36: steps[1].stop.on: expected a mapping {rank, pp} or 'all', found 'every'"),
    ("steps: 4\nexpect: [no_late_dispatch]\n", "t.yaml:4:8: steps: expected a list of one-key mappings, found 4"),
    ("steps: [start, stop: {}]\nexpect: [no_late_dispatch]\n",
     "t.yaml:4:9: steps[0]: expected a step, a one-key mapping such as '- start: cluster'; found 'start'\n"
     "  hint: write '- start: ...'"),
])
def test_message(body: str, message: str) -> None:
    assert str(_error(HEAD + body)).startswith(message)


def test_top_level_values() -> None:
    err = _error("name: Bad Name\nabout: ''\ncatches: [reference]\nsteps: [start: cluster]\n"
                 "expect: [no_late_dispatch]\n")
    assert [str(e) for e in err.errors] == [
        "t.yaml:1:7: name: expected lower-case letters, digits and single dashes (e.g. 'stalled-read-is-cancelled'), "
        "found 'Bad Name'",
        "t.yaml:2:8: about: expected non-empty text, found ''",
    ]
    err = _error(HEAD.replace("no_conn_tracking", "reference") + "steps: [start: cluster]\nexpect: [no_late_dispatch]")
    assert str(err).startswith("t.yaml:3:11: catches[0]: 'reference' is the correct implementation, not a planted "
                               "bug; expected one of: timed_join_teardown, no_conn_tracking, ")


def test_a_misspelt_required_key_is_one_error() -> None:
    err = _error(HEAD + "stpes: [start: cluster]\nexpect: [no_late_dispatch]\n")
    assert [str(e) for e in err.errors] == [
        "t.yaml:4:1: unknown key 'stpes'; expected one of: name, about, marks, target, catches, topology, config, "
        "seed, steps, expect (did you mean 'steps'?)"]


def test_every_error_in_a_file_is_reported_in_file_order() -> None:
    err = _error(HEAD + "topology: {tp: 0, pp: two}\nsteps: [start: cluster]\nexpect: [no_late_dispatch]\n")
    assert [str(e) for e in err.errors] == [
        "t.yaml:4:16: topology.tp: expected a value at least 1, found 0",
        "t.yaml:4:23: topology.pp: expected an integer from 1 to 64 or a list of integers from 1 to 64, found 'two'",
    ]


@pytest.mark.parametrize(("text", "message"), [
    ("", "t.yaml:1:1: expected a mapping with keys name, about, catches, steps, expect, found an empty file"),
    ("- a\n", "t.yaml:1:1: expected a mapping with keys name, about, catches, steps, expect, found a list"),
    ("a:\n\t- b\n", "t.yaml:2:1: invalid YAML: found character '\\t' that cannot start any token\n"
                    "  hint: indent with spaces; YAML does not allow tabs"),
    ("a: [1, 2\n", "t.yaml:2:1: invalid YAML: expected ',' or ']', but got '<stream end>' (while parsing a flow "
                   "sequence at line 1)"),
])
def test_whole_file_mistakes(text: str, message: str) -> None:
    assert str(_error(text)) == message


def test_unreadable_and_empty_paths(tmp_path: Path) -> None:
    scenarios, errors = load_many([tmp_path / "missing.yaml", tmp_path])
    assert scenarios == []
    assert [str(e) for e in errors] == [f"{tmp_path}/missing.yaml: cannot read: No such file or directory",
                                        f"{tmp_path}: no scenario files (*.yaml, *.yml) here"]


# ------------------------------------------------------------------ the CLI
def test_validate_directory_reports_only_the_bad_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text(GOOD.read_text())
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "bad.yml").write_text((BAD / "sleep-step.yaml").read_text())
    (tmp_path / "notes.txt").write_text("not a scenario")
    rc, out, err = _run(capsys, "validate", str(tmp_path))
    assert rc == EXIT_USAGE
    assert out == f"{tmp_path}/good.yaml: ok, 2 runs: tp1-pp1-cpu, tp2-pp1-cpu\n"
    assert err.startswith(f"{tmp_path}/sub/bad.yml:7:5: steps[2]: sleep is not a step")
    assert err.endswith("lastcall validate: 1 of 2 files invalid\n")
    assert "good.yaml" not in err


def test_validate_good_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(capsys, "validate", str(GOOD)) == (EXIT_OK, f"{GOOD}: ok, 2 runs: tp1-pp1-cpu, tp2-pp1-cpu\n", "")


def test_schema_prints_the_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "schema")
    assert (rc, err) == (EXIT_OK, "")
    schema = json.loads(out)
    assert {"$defs", "properties", "required"} <= set(schema)
    assert set(schema["required"]) == {"name", "about", "catches", "steps", "expect"}
    short, mapping = schema["properties"]["catches"]["oneOf"]  # a list of bugs, or bug -> checkers
    assert "no_conn_tracking" in short["items"]["anyOf"][0]["enum"]
    assert "no_conn_tracking" in mapping["propertyNames"]["anyOf"][0]["enum"]
    (checkers,) = mapping["patternProperties"].values()
    assert "reads_cancelled" in checkers["items"]["enum"] and "fault_fired" not in checkers["items"]["enum"]
    steps = schema["properties"]["steps"]["items"]["oneOf"]
    assert len(steps) == len(STEP_TYPES)
    assert schema["$defs"]["Send"]["properties"]["fault"]["enum"] == list(SEND_FAULTS)
    assert schema["$defs"]["Config"]["properties"]["drain_timeout"]["title"] == "duration"
    theirs = {m.__name__ for m in CHECKER_PARAMS.values()}  # parameter models owned by the checkers
    for name, model in schema["$defs"].items():
        for key, prop in model.get("properties", {}).items():
            ref = schema["$defs"].get(prop.get("$ref", "").rsplit("/", 1)[-1], {})
            assert prop.get("description") or ref.get("description") or name in theirs, (name, key)


# ------------------------------------------------------------------ in step with the rest
def test_names_match_the_harness() -> None:
    # "call" runs a Python callable at the site: a harness-side action, not one a YAML file can name;
    # "stop_listener" is the YAML face of it that the runner provides (stop from a handler)
    assert (*(a for a in failpoints.ACTIONS if a != "call"), "stop_listener") == FAILPOINT_ACTIONS
    assert set(SEND_FAULTS) - {"none"} <= set(harness.faults.client.__all__)
    send = STEP_TYPES["send"].model_fields["send"].annotation
    assert send is not None
    assert send.model_fields["cmd"].annotation == wire.Command | None


def test_event_kinds_cover_every_emitted_kind() -> None:
    emitted = set()
    for path in Path("harness").rglob("*.py"):
        emitted |= set(re.findall(r"(?:emit|_notify)\(\s*\"([a-z_]+)\"", path.read_text()))
    missing = emitted - set(EVENT_KINDS)
    assert not missing, f"add {sorted(missing)} to harness.scenario.steps.EVENT_KINDS so scenarios can wait on them"


# ------------------------------------------------------------------ catches: the two forms
CATCH_TAIL = """\
steps:
  - start: cluster
  - arm: {site: listener.frame_read, action: pause, as: f1}
  - stop: {as: s1}
expect:
  - stop_result: {step: s1, returns: true}
  - reads_cancelled
  - stop_result: {step: s1, returns: true}
  - fault_fired: {faults: [f1]}
"""


def _catching(catches: str, target: str = "") -> str:
    return f"name: small\nabout: catches forms\n{target}catches: {catches}\n{CATCH_TAIL}"


def test_the_list_form_means_every_expect_checker_but_fault_fired() -> None:
    sc = loads(_catching("[no_conn_tracking, lost_unmap]"), "t.yaml")
    assert sc.catch_names() == ["no_conn_tracking", "lost_unmap"]
    assert sc.catch_checkers("lost_unmap") == ("stop_result", "reads_cancelled")  # once each, in expect order


def test_the_mapping_form_names_each_bugs_checkers() -> None:
    sc = loads(_catching("{no_conn_tracking: [reads_cancelled], lost_unmap: [stop_result, reads_cancelled]}"))
    assert sc.catch_names() == ["no_conn_tracking", "lost_unmap"]
    assert sc.catch_checkers("no_conn_tracking") == ("reads_cancelled",)
    assert sc.catch_checkers("lost_unmap") == ("stop_result", "reads_cancelled")
    assert sc.catch_checkers("rmtree_dir") == ("stop_result", "reads_cancelled")  # a bug it does not name
    assert "no_conn_tracking" in sc.catches  # membership and iteration read the names in either form


def test_catches_may_name_a_module_attribute_target() -> None:
    sc = loads(_catching("{tests.lc_events_target:CHATTY: [reads_cancelled]}"), "t.yaml")
    assert sc.catch_names() == ["tests.lc_events_target:CHATTY"]
    err = _error(_catching("[no_such_package.bugs:NO_TRACKING]"))
    assert str(err).startswith("t.yaml:3:11: catches[0]: planted bug 'no_such_package.bugs:NO_TRACKING': no module "
                               "named 'no_such_package' (not installed, and not under ")


def test_under_a_module_attribute_target_any_variant_name_loads() -> None:
    """Such a target may declare variants of its own: their names are resolved when the items are made."""
    sc = loads(_catching("{my_own_bug: [reads_cancelled]}", "target: tests.lc_events_target:CHATTY\n"), "t.yaml")
    assert sc.catch_names() == ["my_own_bug"]
    with pytest.raises(ScenarioError, match=r"catches.my_own_bug: unknown planted bug 'my_own_bug'"):
        loads(_catching("{my_own_bug: [reads_cancelled]}"), "t.yaml")


@pytest.mark.parametrize(("catches", "message"), [
    ("3", "t.yaml:3:10: catches: expected a list of text or a mapping, found 3"),
    ("{}", "t.yaml:3:10: catches: expected at least 1 item, found an empty mapping"),
    ("{no_conn_tracking: []}", "t.yaml:3:29: catches.no_conn_tracking: expected at least 1 item, found an empty list"),
    ("{no_conn_tracking: 3}", "t.yaml:3:29: catches.no_conn_tracking: expected a list of the checkers that must "
                              "fire for this bug, e.g. [reads_cancelled], found 3"),
    ("{no_conn_tracking: [no_leftover_shm]}", "t.yaml:3:30: catches.no_conn_tracking[0]: 'no_leftover_shm' is not in "
     "this scenario's expect: a bug is caught by a checker that judges the run; expected one of: stop_result, "
     "reads_cancelled\n  hint: add '- no_leftover_shm' to expect"),
    ("{reference: [stop_result]}", "t.yaml:3:11: catches.reference: 'reference' is the correct implementation"),
    ("{never_stopped: [stop_result]}", "t.yaml:3:11: catches.never_stopped: 'never_stopped' is a planted bug of a "
     "handshake listener, but this scenario drives the worker listener"),
])
def test_a_bad_catches_entry_is_located(catches: str, message: str) -> None:
    assert str(_error(_catching(catches))).startswith(message)
