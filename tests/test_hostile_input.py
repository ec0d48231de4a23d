"""Hostile input: each kind is refused with its exact one-line message and exit 2, never a traceback.

The cases (tests/hostile_cases.py, messages in fixtures/hostile/NAME.expected) run in
one child process through ``harness.cli.main``, under RLIMIT_AS 2 GiB and a 60 s
timeout: safety nets only, so that a regression (an alias bomb expanding again)
fails this test fast instead of taking the machine down.  The limits are also shown
to sit where the README says: a file at each limit loads, one past it is refused.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hostile_cases import CASES, GOOD, HEAD, HOSTILE, TAIL

from harness import envvars
from harness.bench.command import load_workload
from harness.errors import ConfigError
from harness.scenario import ScenarioError, expand, loads
from harness.scenario.yamlnodes import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_EXPANDED,
    MAX_NODES,
    ReadProblem,
    YamlProblem,
    parse,
    read_text,
)

AS_LIMIT = 2 << 30  # bytes of address space the child may map: far above what any case needs (the benchmark)
KILL_S = 60


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def _child(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=KILL_S,
                          preexec_fn=_limit_memory)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case's (rc, stdout, stderr, input path), from one child process."""
    proc = _child(["tests/hostile_cases.py", str(tmp_path_factory.mktemp("hostile"))])
    assert proc.returncode == 0, f"the child died (rc {proc.returncode}): {proc.stderr[-2000:]}"
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def test_every_case_has_its_expected_message_and_every_fixture_a_case() -> None:
    names = {c.name for c in CASES}
    assert {p.stem for p in HOSTILE.glob("*.expected")} == names
    assert {p.stem for p in HOSTILE.glob("*.yaml")} <= names


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_hostile_input_is_refused_with_its_message_and_exit_2(results: dict[str, Any], name: str) -> None:
    rc, out, err, path = results[name]
    case = next(c for c in CASES if c.name == name)
    assert (rc, out) == (2, "")
    assert err == case.expected(path)
    assert len(err.splitlines()) <= 2  # the located error, and validate's count line
    assert "Traceback" not in err


def test_the_command_line_refuses_several_hostile_files_at_once(tmp_path: Path) -> None:
    """Through the real entry point: each file is its own error; the good one still validates."""
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    bomb = str(HOSTILE / "aliases-bomb.yaml")
    proc = _child(["-m", "harness.cli", "validate", bomb, str(fifo), GOOD])
    assert proc.returncode == 2
    assert proc.stdout == f"{GOOD}: ok, 2 runs: tp1-pp1-cpu, tp2-pp1-cpu\n"
    expected = (HOSTILE / "aliases-bomb.expected").read_text().replace("{path}", bomb).splitlines()[0]
    fifo_line = (HOSTILE / "fifo.expected").read_text().replace("{path}", str(fifo)).splitlines()[0]
    assert proc.stderr == f"{expected}\n{fifo_line}\nlastcall validate: 2 of 3 files invalid\n"


# ------------------------------------------------------------ the limits sit where they are said to
def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_nesting_up_to_the_limit_parses_and_one_more_level_is_refused() -> None:
    assert parse(_nested(MAX_DEPTH)).data is not None
    with pytest.raises(YamlProblem, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse(_nested(MAX_DEPTH + 1))


def test_aliases_may_expand_to_the_budget_and_no_further() -> None:
    # a: 99 items (100 values with the list); b: n aliases of a (1 + 100 n); the root and two keys: 3 more
    def text(n: int) -> str:
        return "a: &a [" + ", ".join(["x"] * 99) + "]\nb: [" + ", ".join(["*a"] * n) + "]\n"

    fits = (MAX_EXPANDED - 104) // 100
    assert 104 + 100 * fits <= MAX_EXPANDED < 104 + 100 * (fits + 1)
    assert len(parse(text(fits)).data["b"]) == fits  # type: ignore[index]
    with pytest.raises(YamlProblem, match=f"more than {MAX_EXPANDED} values"):
        parse(text(fits + 1))


def test_an_alias_bomb_expanding_deeper_than_the_depth_limit_is_refused() -> None:
    """Aliases can nest a value deeper than it is written: the expanded depth is checked too."""
    lines = ["l0: &l0 " + _nested(30)] + [f"l{i}: &l{i} [[[[[[[[[[*l{i - 1}]]]]]]]]]]" for i in range(1, 5)]
    with pytest.raises(YamlProblem, match="nested deeper than"):
        parse("\n".join(lines) + "\n")


def test_values_as_written_are_counted_before_composing() -> None:
    assert len(parse("[" + ", ".join(["1"] * (MAX_NODES - 2)) + "]").data) == MAX_NODES - 2  # type: ignore[arg-type]
    with pytest.raises(YamlProblem, match=f"more than {MAX_NODES} values"):
        parse("[" + ", ".join(["1"] * MAX_NODES) + "]")


def test_a_text_parsed_again_is_a_fresh_copy_and_is_held_to_the_limits_of_the_moment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """parse keeps what it gave each text (harness.scenario.yamlnodes.parse): the next parse of it is equal,
    never the same objects (a caller that changes its copy changes no one else's), and a limit lowered since
    is applied to a text parsed before it was."""
    from harness.scenario import yamlnodes

    text = "a: [1, 2, {b: c}]\nd: &x {e: 1}\nf: *x\n"
    first = parse(text)
    first.data["a"].append("changed")  # type: ignore[index]
    again = parse(text)
    assert again.data == {"a": [1, 2, {"b": "c"}], "d": {"e": 1}, "f": {"e": 1}}
    assert again.data is not first.data and again.marks == first.marks and again.marks is not first.marks
    assert again.marks.values[("d",)] == (2, 4) and again.marks.keys[("f",)] == (3, 1)
    monkeypatch.setattr(yamlnodes, "MAX_NODES", 4)
    with pytest.raises(YamlProblem, match="more than 4 values"):
        parse(text)


def test_a_file_of_exactly_the_size_limit_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "at-limit.yaml"
    f.write_bytes(b"#" * (MAX_BYTES - 1) + b"\n")
    assert len(read_text(str(f))) == MAX_BYTES
    f.write_bytes(b"#" * MAX_BYTES + b"\n")
    with pytest.raises(ReadProblem, match="1048577 bytes, over lastcall's limit of 1 MiB"):
        read_text(str(f))


def test_the_bounds_admit_tp_8_by_pp_8_and_a_matrix_of_32() -> None:
    eight = loads(HEAD + "topology: {tp: 8, pp: 8}\n" + TAIL, "t.yaml")
    assert [i.id for i in expand(eight)] == ["tp8-pp8-cpu"]
    matrix = loads(HEAD + "topology: {tp: [1, 2, 4, 8], pp: [1, 2, 4, 8], device: [cpu, cuda]}\n" + TAIL, "t.yaml")
    assert len(expand(matrix)) == 32
    hour = loads(HEAD + "config: {deadline: 1h, capacity: 1GiB}\n" + TAIL, "t.yaml")
    assert (hour.config.deadline, hour.config.capacity) == (3600.0, 1 << 30)
    with pytest.raises(ScenarioError, match="size '1025MiB' is over lastcall's limit of 1GiB"):
        loads(HEAD + "config: {capacity: 1025MiB}\n" + TAIL, "t.yaml")


def test_the_json_schema_carries_the_maxima() -> None:
    from harness.scenario import json_schema

    defs = json_schema()["$defs"]
    tp = defs["Topology"]["properties"]["tp"]["oneOf"]
    assert tp[0]["maximum"] == 64 and tp[1]["maxItems"] == 32 and tp[1]["items"]["maximum"] == 64
    deadline = defs["Config"]["properties"]["deadline"]["anyOf"]
    assert deadline[0]["maximum"] == 3600 and "at most 1h" in deadline[1]["description"]
    assert defs["Config"]["properties"]["capacity"]["anyOf"][0]["maximum"] == 1 << 30


def test_a_workload_at_its_bounds_loads(tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text("ops: [map16]\nwindows: 1000\nrequests: 100000\nwarmup: 100\n")
    assert load_workload(str(f))["windows"] == 1000
    f.write_text("ops: [map16]\nrequests: 100001\n")
    with pytest.raises(ConfigError, match="requests: 100001 is over lastcall's limit of 100000"):
        load_workload(str(f))


@pytest.mark.parametrize(("value", "ok"), [("2", True), ("100", True), ("0.5", True), ("101", False),
                                           ("0", False), ("soon", False), ("-inf", False)])
def test_the_timeout_scale_takes_a_finite_bounded_number(monkeypatch: pytest.MonkeyPatch, value: str,
                                                        ok: bool) -> None:
    monkeypatch.setenv("LASTCALL_TIMEOUT_SCALE", value)
    if ok:
        assert envvars.number("LASTCALL_TIMEOUT_SCALE") == float(value)
        envvars.check()
    else:
        with pytest.raises(ConfigError, match=f"^LASTCALL_TIMEOUT_SCALE='{value}': expected a finite number"):
            envvars.check()


@pytest.mark.parametrize(("steps", "expect", "message"), [
    ("  - flood: {count: 5000}\n", "[no_late_dispatch]",
     "steps[1].flood.count: expected a value at most 1024 (lastcall's limit), found 5000"),
    ("  - arm: {site: backend.map_to_kv_tensors, count: 20000, as: f1}\n", "[no_late_dispatch]",
     "steps[1].arm.count: expected a value at most 10000 (lastcall's limit), found 20000"),
    ("  - send: {cmd: map_to_kv_tensors, offsets: [2GiB]}\n", "[no_late_dispatch]",
     "steps[1].send.offsets[0]: size '2GiB' is over lastcall's limit of 1GiB"),
    ("", "[{stop_latency: {within: 2h}}]",
     "expect[0].stop_latency.within: duration '2h' is over lastcall's limit of 1h"),
    ("", "[{port_released: {ports: [70000]}}]",
     "expect[0].port_released.ports[0]: expected a value at most 65535 (lastcall's limit), found 70000"),
])
def test_every_kind_of_number_has_a_maximum(steps: str, expect: str, message: str) -> None:
    text = HEAD + TAIL.replace("  - start: cluster\n", "  - start: cluster\n" + steps).replace(
        "expect: [no_late_dispatch]", f"expect: {expect}")
    with pytest.raises(ScenarioError) as info:
        loads(text, "t.yaml")
    assert message in str(info.value)
    assert str(info.value).startswith("t.yaml:")
