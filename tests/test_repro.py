"""lastcall repro: each committed reproducer proven twice on the engine stand-in (0 on the well-behaved one, 1 on
its finding's planted bug), and hostile run dirs refused with exit 2, never written into code."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lc_helpers import ROOT

from harness import repro
from harness.scenario.engine_steps import STALLED_RCVBUF

FINDINGS = ROOT / "docs/findings/vllm-0.32-cpu"
REPRO = FINDINGS / "repro"
RELEASES = (FINDINGS, ROOT / "docs/findings/vllm-0.31-cpu")  # the releases with committed reproducers
# each committed reproducer (under docs/findings/) -> the stand-in's planted bug of its finding
PLANTED = {"vllm-0.32-cpu/repro/engine-shutdown-timeout-0.py": "hangs_stream",
           "vllm-0.32-cpu/repro/engine-sigint-during-stream.py": "hangs_stream",
           "vllm-0.32-cpu/repro/engine-sigkill-engine-core.py": "exits_zero_after_engine_died",
           "vllm-0.32-cpu/repro/engine-tp2-sigkill-api-server.py": "keeps_child",
           "vllm-0.32-cpu/repro/engine-sigterm-idle.py": "leaves_socket_file",
           "vllm-0.32-cpu/repro/engine-nixl-held-port.py": "hangs_on_held_side_channel",
           "vllm-0.32-cpu/repro/engine-sigkill-worker.py": "exits_zero_after_engine_died",
           "vllm-0.32-cpu/repro/engine-sigint-worker.py": "exits_zero_after_engine_died",
           "vllm-0.32-cpu/repro/engine-sigkill-api-server.py": "keeps_port",
           "vllm-0.32-cpu/repro/engine-client-disconnects-mid-stream.py": "hangs_stream",
           "vllm-0.32-cpu/repro/engine-stream-reader-stalls.py": "hangs_stream",
           "vllm-0.31-cpu/repro/engine-sigterm-idle.py": "leaves_socket_file",
           "vllm-0.31-cpu/repro/engine-nixl-held-port.py": "hangs_on_held_side_channel",
           "vllm-0.31-cpu/repro/engine-sigkill-worker.py": "exits_zero_after_engine_died",
           "vllm-0.31-cpu/repro/engine-sigint-worker.py": "exits_zero_after_engine_died",
           "vllm-0.31-cpu/repro/engine-sigkill-api-server.py": "keeps_port",
           "vllm-0.31-cpu/repro/engine-client-disconnects-mid-stream.py": "hangs_stream",
           "vllm-0.31-cpu/repro/engine-stream-reader-stalls.py": "hangs_stream",
           "vllm-0.31-cpu/repro/engine-sigkill-engine-core.py": "exits_zero_after_engine_died",
           "vllm-0.31-cpu/repro/engine-tp2-sigkill-api-server.py": "keeps_child",
           "vllm-0.31-cpu/repro/engine-shutdown-timeout-0.py": "hangs_stream",
           "vllm-0.31-cpu/repro/engine-sigint-during-stream.py": "hangs_stream"}
# the stored run each is written from, where it is not reports/SCENARIO: the stored engine-sigterm-idle and
# engine-sigkill-api-server of 0.32's reports/ predate engine_launched's argv, the chained runs have it; 0.31's
# chained set holds the only run of three scenarios
SOURCE = {"vllm-0.32-cpu/repro/engine-sigterm-idle.py": "vllm-0.32-cpu/reports-chained/engine-sigterm-idle",
          "vllm-0.32-cpu/repro/engine-sigkill-api-server.py": "vllm-0.32-cpu/reports-chained/engine-sigkill-api-server",
          "vllm-0.31-cpu/repro/engine-sigterm-idle.py": "vllm-0.31-cpu/reports-chained/engine-sigterm-idle",
          "vllm-0.31-cpu/repro/engine-sigkill-api-server.py": "vllm-0.31-cpu/reports-chained/engine-sigkill-api-server",
          "vllm-0.31-cpu/repro/engine-client-disconnects-mid-stream.py":
              "vllm-0.31-cpu/reports-chained/engine-client-disconnects-mid-stream"}
# the stand-in's tree is gone in under 0.1 s of a stop (harness.targets.vllm_engine): a tenth of vLLM's waits
# keeps a margin of five and a planted hang's test short
STANDIN_SCALE = "0.1"


def _script(script: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A reproducer run as a user runs it: its own interpreter, a bare environment (plus ``env``)."""
    return subprocess.run([sys.executable, str(script), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **(env or {})})


def _run(script: Path, variant: str, scale: str = STANDIN_SCALE) -> subprocess.CompletedProcess[str]:
    return _script(script, "--engine-cmd", f"{sys.executable} -m harness.engine.standin", "--model", "standin",
                   "--engine-arg=--variant", f"--engine-arg={variant}", "--time-scale", scale, "--launch-s", "10")


def test_every_committed_reproducer_is_proven() -> None:
    committed = [str(p.relative_to(ROOT / "docs/findings")) for r in RELEASES for p in (r / "repro").glob("*.py")]
    assert sorted(committed) == sorted(PLANTED)


# what a script with a stream's client fault prints on the well-behaved stand-in: the fault was played (the
# client went away after its events; the reader stalled, then read on to the stream's abort)
SAYS = {"engine-client-disconnects-mid-stream.py": ["stream whose client goes away: disconnected after 2 events",
                                                    "stream 1 in the background: ended (finish_reason abort)"],
        "engine-stream-reader-stalls.py": ["stream stalled: True",
                                           "stream 1 in the background: ended (finish_reason abort)"]}


def _distinct(planted: dict[str, str]) -> list[str]:
    """One script of each text and planted bug: a release whose run used the same flags gets the same script
    (test_committed_reproducer_is_what_repro_writes holds each file to what its run writes), and the same text
    run on the same stand-in proves nothing more."""
    seen: dict[tuple[str, str], str] = {}
    for name in sorted(planted, reverse=True):  # the newest release's name where they share one
        seen.setdefault(((ROOT / "docs/findings" / name).read_text(), planted[name]), name)
    return sorted(seen.values())


PROVEN = _distinct(PLANTED)


def test_the_proofs_cover_every_script_text() -> None:
    texts = {(ROOT / "docs/findings" / n).read_text() for n in PLANTED}
    assert {(ROOT / "docs/findings" / n).read_text() for n in PROVEN} == texts
    assert len(PROVEN) < len(PLANTED)  # the releases share scripts


@pytest.mark.parametrize("name", PROVEN)
def test_reproducer_quiet_on_the_standin(name: str) -> None:
    r = _run(ROOT / "docs/findings" / name, "standin")
    assert r.returncode == 0, r.stdout + r.stderr
    for line in SAYS.get(name.rsplit("/", 1)[-1], []):
        assert line in r.stdout


@pytest.mark.parametrize("name", PROVEN)
def test_reproducer_fires_on_the_planted_bug(name: str) -> None:
    r = _run(ROOT / "docs/findings" / name, PLANTED[name])
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DEFECT" in r.stdout


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_committed_reproducer_is_what_repro_writes(name: str, tmp_path: Path) -> None:
    release, _, script = name.split("/")
    run = ROOT / "docs/findings" / SOURCE.get(name, f"{release}/reports/{script[:-3]}")
    out = tmp_path / script
    assert repro.main(str(run), str(out), None) == 0
    assert out.read_text() == (ROOT / "docs/findings" / name).read_text()
    assert "import harness" not in out.read_text() and "lastcall import" not in out.read_text()


def test_an_exit_status_not_yet_known_is_not_reported_absent() -> None:
    """The exit-0 check reads the API server's exit status: a server still running when the wait for the tree
    ends (a wait scaled to nothing here) has none, and the script exits 2, not 0 ("absent")."""
    r = _run(REPRO / "engine-sigkill-worker.py", "standin", scale="0.0001")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "has not exited: its exit status cannot be judged" in r.stdout


def _copy(tmp_path: Path, name: str = "engine-sigkill-engine-core") -> Path:
    run = tmp_path / "run"
    shutil.copytree(FINDINGS / "reports" / name, run)
    return run


def _literals_only(text: str) -> None:
    tree = ast.parse(text)
    first = tree.body[0]
    assert isinstance(first, ast.Assign)
    assert all(isinstance(n, (ast.Dict, ast.List, ast.Constant, ast.Load)) for n in ast.walk(first.value))


def _refused(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], needle: str) -> str:
    out = tmp_path / "out.py"
    assert repro.main(str(run), str(out), None) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lastcall repro: ") and needle in err
    return err


def _edit_history(run: Path, edit: dict[str, object]) -> None:
    hist = run / "history.jsonl"
    lines = hist.read_text().splitlines()
    first = json.loads(lines[0])
    first["data"].update(edit)
    hist.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")


def _edit_event(run: Path, kind: str, edit: dict[str, object], step: str | None = None) -> None:
    """Update the data of the first event of ``kind`` (of a step of that kind, given ``step``)."""
    hist = run / "history.jsonl"
    docs = [json.loads(line) for line in hist.read_text().splitlines()]
    doc = next(d for d in docs if d["kind"] == kind and (step is None or d["data"].get("kind") == step))
    doc["data"].update(edit)
    hist.write_text("".join(json.dumps(d) + "\n" for d in docs))


NIXL = "engine-nixl-held-port"
# hostile or malformed fields of the held-port run -> the event edited and what its located refusal names
BAD_NIXL = {
    "env-variable": (("engine_launched", None), {"env": {"LD_PRELOAD": "/tmp/x.so"}},
                     ": env: 'LD_PRELOAD' is not one of"),
    "env-host": (("engine_launched", None), {"env": {"VLLM_NIXL_SIDE_CHANNEL_HOST": "0.0.0.0"}},
                 "env VLLM_NIXL_SIDE_CHANNEL_HOST: '0.0.0.0' is not one of ['127.0.0.1']"),
    "env-port-code": (("engine_launched", None), {"env": {"VLLM_NIXL_SIDE_CHANNEL_PORT": "1'+__import__('os')+'"}},
                      "env VLLM_NIXL_SIDE_CHANNEL_PORT: \"1'+__import__('os')+'\" is not a port number"),
    "env-port-range": (("engine_launched", None), {"env": {"VLLM_NIXL_SIDE_CHANNEL_PORT": "70000"}},
                       "is not a port number (1 to 65535)"),
    "env-not-object": (("engine_launched", None), {"env": ["VLLM_NIXL_SIDE_CHANNEL_PORT"]},
                       "engine_launched: key 'env' is list"),  # the event schema's own refusal
    "kv-config-json": (("engine_launched", None), {"argv": ["serve", "m", "--kv-transfer-config", "{nope"]},
                       "argv[3]: '{nope' is no JSON object"),
    "kv-config-key": (("engine_launched", None),
                      {"argv": ["serve", "m", "--kv-transfer-config", '{"kv_connector": "NixlConnector", '
                                '"kv_connector_module_path": "evil"}']},
                      "argv[3]: --kv-transfer-config key: 'kv_connector_module_path' is not one of"),
    "kv-config-connector": (("engine_launched", None),
                            {"argv": ["serve", "m", "--kv-transfer-config", '{"kv_connector": "LMCacheConnectorV1"}']},
                            "--kv-transfer-config kv_connector: 'LMCacheConnectorV1' is not one of ['NixlConnector']"),
    "kv-config-missing": (("engine_launched", None), {"argv": ["serve", "m", "--kv-transfer-config"]},
                          "argv[3]: '' is no JSON object"),
    "held-port": (("step_returned", "hold_port"), {"value": "53725; rm -rf /"}, "the held port: '53725; rm -rf /'"),
    "hold-port-port": (("step_started", "hold_port"), {"port": -1}, "port: '-1' is not a number in [0, 65535]"),
    "not-held": (("engine_launched", None), {"env": {"VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"}},
                 "does not give the engine the held port"),
}


@pytest.mark.parametrize("case", sorted(BAD_NIXL))
def test_malformed_held_port_run_refused(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (kind, step), edit, needle = BAD_NIXL[case]
    run = _copy(tmp_path, NIXL)
    _edit_event(run, kind, edit, step)
    _refused(run, tmp_path, capsys, needle)


def test_hold_port_after_the_launch_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(tmp_path, NIXL)
    hist = run / "history.jsonl"
    docs = [json.loads(line) for line in hist.read_text().splitlines()]
    hold = next(d for d in docs if d["kind"] == "step_started")
    docs.append(hold)
    hist.write_text("".join(json.dumps(d) + "\n" for d in docs))
    _refused(run, tmp_path, capsys, f"history.jsonl:{len(docs)}: a hold_port step after another step or the launch")


def test_kv_config_is_written_anew(tmp_path: Path) -> None:
    """An allowed --kv-transfer-config reaches the script as lastcall writes it, never as the run's text."""
    run = _copy(tmp_path, NIXL)
    _edit_event(run, "engine_launched", {"argv": ["serve", "m", "--kv-transfer-config",
                                                  '{ "kv_role":"kv_both",\n"kv_connector":"NixlConnector"}']})
    params = repro.params_of(run)
    assert params["argv"][-1] == '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'
    assert params["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "{held}"


STALLS, LEAVES = "engine-stream-reader-stalls", "engine-client-disconnects-mid-stream"
# malformed client faults of a stream (scenario, the step_started of the engine_request edited: its index among
# them, the edit) -> what the located refusal names
BAD_FAULTS = {
    "fault-of-no-stream": ((LEAVES, 1, {"disconnect_after": 2}), "disconnect_after: a client fault of a stream"),
    "both-faults": ((STALLS, 0, {"disconnect_after": 2}), "stop_reading_after and disconnect_after: a client fault "
                                                          "of a stream, one at most"),
    "fault-code": ((STALLS, 0, {"stop_reading_after": "2; import os"}),
                   "stop_reading_after: '2; import os' is not a whole number in [1, 10000]"),
    "fault-fraction": ((LEAVES, 0, {"disconnect_after": 2.5}), "disconnect_after: '2.5' is not a whole number"),
    "fault-bool": ((STALLS, 0, {"stop_reading_after": True}), "stop_reading_after: 'True' is not a whole number"),
    "fault-range": ((STALLS, 0, {"stop_reading_after": 10_001}), "'10001' is not a whole number in [1, 10000]"),
    "nothing-in-flight": ((STALLS, 0, {"stop_reading_after": None, "disconnect_after": 2}),
                          "engine-stream-reader-stalls has no stream that stays in flight"),
}


@pytest.mark.parametrize("case", sorted(BAD_FAULTS))
def test_malformed_client_fault_refused(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (scenario, index, edit), needle = BAD_FAULTS[case]
    run = _copy(tmp_path, scenario)
    hist = run / "history.jsonl"
    docs = [json.loads(line) for line in hist.read_text().splitlines()]
    requests = [d for d in docs if d["kind"] == "step_started" and d["data"]["kind"] == "engine_request"]
    requests[index]["data"].update(edit)
    hist.write_text("".join(json.dumps(d) + "\n" for d in docs))
    _refused(run, tmp_path, capsys, needle)


def test_client_faults_reach_the_script_as_numbers() -> None:
    """Only the fault's count (and the run's receive window of a stalled reader) reach a stream's step."""
    stalls = repro.params_of(FINDINGS / "reports" / STALLS)["steps"][0]
    assert stalls == {"kind": "engine_request", "max_tokens": 2000, "stream": True, "stop_reading_after": 2,
                      "rcvbuf": STALLED_RCVBUF}
    leaves = repro.params_of(FINDINGS / "reports" / LEAVES)["steps"]
    assert [s.get("disconnect_after") for s in leaves if s["kind"] == "engine_request"] == [2, None, None]


def test_hostile_scenario_name_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(tmp_path)
    meta = json.loads((run / "verdicts.json").read_text())
    meta["scenario"] = 'x"\nimport os; os.system("echo pwned")\n#'
    (run / "verdicts.json").write_text(json.dumps(meta))
    _refused(run, tmp_path, capsys, "scenario")


def test_field_outside_the_allow_list_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(tmp_path)
    _edit_history(run, {"argv": ["serve", "m", "--trust-remote-code"]})
    _refused(run, tmp_path, capsys, "history.jsonl:1: argv[2]")


def test_flag_value_with_code_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(tmp_path)
    _edit_history(run, {"argv": ["serve", "m", "--dtype", "'+__import__('os').system('id')+'"]})
    _refused(run, tmp_path, capsys, "no plain value of --dtype")


def test_huge_history_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(tmp_path)
    with (run / "history.jsonl").open("a") as f:
        f.truncate(repro.MAX_HISTORY_BYTES + 1)
    _refused(run, tmp_path, capsys, "over lastcall's limit of 32 MiB for a history.jsonl")


def test_symlinked_history_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(tmp_path)
    (run / "history.jsonl").unlink()
    (run / "history.jsonl").symlink_to(FINDINGS / "reports/engine-sigkill-engine-core/history.jsonl")
    _refused(run, tmp_path, capsys, "history.jsonl: a symbolic link, not a regular file")


def test_quoting_survives_in_an_allowed_model_path(tmp_path: Path) -> None:
    """--model is the user's own, but still only ever a literal of the script."""
    out = tmp_path / "out.py"
    assert repro.main(str(FINDINGS / "reports/engine-sigkill-engine-core"), str(out), 'm"\nraise SystemExit') == 0
    _literals_only(out.read_text())
    compile(out.read_text(), str(out), "exec")


def test_the_literal_check_fires_on_code(tmp_path: Path) -> None:
    with pytest.raises(AssertionError):
        _literals_only("PARAMS = {'a': __import__('os')}\n")


@pytest.mark.parametrize("release", RELEASES, ids=[r.name for r in RELEASES])
def test_check_dry_run_lists_every_reproducer(release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.repro import check

    assert check.main(["--dry-run", "--dir", str(release / "repro")]) == 0
    out = capsys.readouterr().out.splitlines()
    want = sorted(n.rsplit("/", 1)[-1] for n in PLANTED if n.startswith(f"{release.name}/"))
    assert [line.split()[1].rsplit("/", 1)[-1] for line in out] == want


def test_check_fails_on_a_lost_finding(capsys: pytest.CaptureFixture[str]) -> None:
    """The well-behaved stand-in shows neither defect: against expected.yaml that is two lost findings."""
    from harness.repro import check

    cmd = f"{sys.executable} -m harness.engine.standin"
    assert check.main(["--engine-cmd", cmd, "--dir", str(REPRO)]) == 1
    out = capsys.readouterr().out
    assert "engine-sigkill-engine-core: run 1: engine_exit_status: expected violated, got ok" in out


def test_check_only_runs_the_named_reproducers_and_refuses_an_unknown_name(
        capsys: pytest.CaptureFixture[str]) -> None:
    from harness.repro import check

    assert check.main(["--dry-run", "--dir", str(REPRO), "--only", "engine-sigterm-idle",
                       "--only", "engine-sigkill-worker"]) == 0
    assert [line.split()[1].rsplit("/", 1)[-1] for line in capsys.readouterr().out.splitlines()] == \
        ["engine-sigkill-worker.py", "engine-sigterm-idle.py"]
    with pytest.raises(SystemExit) as exc:
        check.main(["--dry-run", "--dir", str(REPRO), "--only", "engine-sigterm-idel"])
    assert exc.value.code == 2
    assert "--only: no reproducer 'engine-sigterm-idel' in" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        check.main(["--dry-run", "--dir", str(REPRO), "--runs", "0"])
    assert "--runs: expected a whole number of at least 1, found 0" in capsys.readouterr().err


def test_dev_has_the_repro_flag() -> None:
    assert subprocess.run(["bash", "-n", str(ROOT / "dev")]).returncode == 0
    assert "-m harness.repro.check" in (ROOT / "dev").read_text()


def test_cli_refuses_with_one_located_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main

    run = _copy(tmp_path)
    (run / "verdicts.json").write_text('{"format": 1, "scenario": "engine-sigterm-worker-tp2"}')
    assert main(["repro", str(run)]) == 2
    err = capsys.readouterr().err
    assert err == (f"lastcall repro: {run}/verdicts.json: scenario: 'engine-sigterm-worker-tp2' is not one of "
                   f"{sorted(repro.FINDINGS)}\n")


def test_build_refuses_parameters_that_are_not_one_literal() -> None:
    class Code:
        def __repr__(self) -> str:
            return "__import__('os').getpid()"

    with pytest.raises(repro.RefusedError, match="not one literal"):
        repro.build({"scenario": "s", "x": Code()})


def test_check_record_appends_each_run_and_writes_its_table(tmp_path: Path) -> None:
    """A recorded run of the well-behaved stand-in: engine-sigterm-idle exits 0 where expected.yaml says the
    files are left, so the entry says not as expected; a second run appends, the table counts both."""
    from harness.repro import check, runs

    folder = tmp_path / "release" / "repro"
    folder.mkdir(parents=True)
    shutil.copy(FINDINGS / "expected.yaml", folder.parent / "expected.yaml")
    shutil.copy(REPRO / "engine-sigterm-idle.py", folder)
    (folder / "README.md").write_text(f"# runs\n\n{runs.BEGIN}\n{runs.END}\n")
    cmd = f"{sys.executable} -m harness.engine.standin"
    for _ in range(2):
        assert check.main(["--engine-cmd", cmd, "--dir", str(folder), "--record"]) == 1
    entries = runs.load(folder)
    assert [(e["scenario"], e["checker"], e["exits"], e["as_expected"]) for e in entries] == \
        [("engine-sigterm-idle", "engine_nothing_left", [0], False)] * 2
    assert all(e["date"] and e["command"].startswith("python -m harness.repro.check") for e in entries)
    page = (folder / "README.md").read_text()
    assert "| [engine-sigterm-idle.py](engine-sigterm-idle.py) | `engine_nothing_left` | 0 (absent) | **no** |" in page
    assert page.count("| 0 of 2 |") == 1 and "Measured: date " in page


@pytest.mark.parametrize(("text", "message"), [
    ('{"a": 1}', "expected a list of runs, found dict"),
    ('[3]', "runs.json[0]: expected an object, found int"),
    ('[{"scenario": "s", "checker": "c", "date": "d", "as_expected": "yes", "exits": [0]}]',
     "runs.json[0].as_expected: expected a bool"),
    ('[{"scenario": "s", "checker": "c", "date": "d", "as_expected": true, "exits": [true]}]',
     "runs.json[0].exits: expected a list of 1 to 1000 exit statuses"),
    ('[{"scenario": "s", "checker": "c", "date": "d", "as_expected": true, "exits": []}]',
     "runs.json[0].exits: expected a list of 1 to 1000 exit statuses"),
])
def test_a_malformed_runs_file_is_refused_before_any_launch(tmp_path: Path, text: str, message: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from harness.repro import check, runs

    folder = tmp_path / "release" / "repro"
    folder.mkdir(parents=True)
    shutil.copy(FINDINGS / "expected.yaml", folder.parent / "expected.yaml")
    shutil.copy(REPRO / "engine-sigterm-idle.py", folder)
    (folder / "README.md").write_text(f"{runs.BEGIN}\n{runs.END}\n")
    (folder / runs.RUNS).write_text(text)
    assert check.main(["--engine-cmd", "/nonexistent/vllm", "--dir", str(folder), "--record"]) == 2
    assert message in capsys.readouterr().err


def test_a_page_without_the_tables_markers_is_refused_before_any_launch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.repro import check

    folder = tmp_path / "release" / "repro"
    folder.mkdir(parents=True)
    shutil.copy(FINDINGS / "expected.yaml", folder.parent / "expected.yaml")
    shutil.copy(REPRO / "engine-sigterm-idle.py", folder)
    (folder / "README.md").write_text("# no table here\n")
    assert check.main(["--engine-cmd", "/nonexistent/vllm", "--dir", str(folder), "--record"]) == 2
    assert "has no <!-- repro-runs-table:begin --> ... <!-- repro-runs-table:end --> markers" in \
        capsys.readouterr().err


def test_a_tensor_parallel_launch_gets_the_launchers_binding_and_kv_cache_as_the_run_did(tmp_path: Path) -> None:
    """vLLM's CPU workers refuse to start at TP=2 on a machine of one NUMA node unless their OpenMP threads are
    bound (the harness's launcher binds one core each), and each takes most of the memory for its KV cache
    unless told (the launcher gives 1 GiB); a user's own settings are kept."""
    seen = tmp_path / "bind"
    engine = f"sh -c 'printf %s \"$VLLM_CPU_OMP_THREADS_BIND $VLLM_CPU_KVCACHE_SPACE\" > {seen}' sh"
    script = REPRO / "engine-tp2-sigkill-api-server.py"
    for env, want in (({}, "|".join(str(i % (os.cpu_count() or 1)) for i in range(2)) + " 1"),
                      ({"VLLM_CPU_OMP_THREADS_BIND": "0-1|0-1", "VLLM_CPU_KVCACHE_SPACE": "2"}, "0-1|0-1 2")):
        r = _script(script, "--engine-cmd", engine, "--launch-s", "5", env=env)
        assert r.returncode == 2, r.stdout + r.stderr  # the engine never became ready
        assert seen.read_text() == want
