"""``./dev mutate --engine``: the engine stand-in's stop path (mutation/engine-stop-path.txt) against the engine
scenarios.  What it plans (only the listed functions of the stand-in, the closures among them under their own
names; only the engine scenarios, on engine_standin), where a sample is recorded (its own record and table), and,
through real processes (slow), that a mutant reaches the exec'd stand-in: the SIGTERM handler removed is killed,
and a removed warning of a reap that never times out in the scenario run survives."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from lc_helpers import ROOT

from harness.mutate.mutator import Mutant, functions_of
from harness.mutate.plan import read_stop_path
from harness.mutate.scopes import ENGINE, REFERENCE, groups_of

STANDIN = "harness/engine/standin.py"
STANDIN_HTTP = "harness/engine/standin_http.py"  # its API server's HTTP side
KILLED = f"{STANDIN}::_signal_pipe::remove:a058f2"  # `signal.signal(s, lambda *_: None)` removed
SURVIVES = f"{STANDIN}::_reap::remove:2a50df"  # the WARNING print before a reap's SIGKILL removed


def _listed(module: str) -> set[str]:
    return {q for spec, _ in read_stop_path(ENGINE.stop_path) for m, _, q in [spec.partition(":")] if m == module}


def _outside(mutants: list[Mutant], listed: set[str], source: str) -> list[str]:
    """The mutants whose edit is not inside the body of a listed function, or inside a function that one
    defines (a closure is mutated under its own name only)."""
    funcs = functions_of(ast.parse(source))
    bad = []
    for m in mutants:
        fn = funcs.get(m.qualname)
        inner = [f for q, f in funcs.items() if q.startswith(f"{m.qualname}.<locals>.")]
        inside = fn is not None and fn.lineno <= m.line and m.end_line <= (fn.end_lineno or 0)
        nested = any(f.lineno <= m.line <= (f.end_lineno or 0) for f in inner)
        if m.qualname not in listed or not inside or nested:
            bad.append(m.id)
    return bad


def test_engine_plans_mutants_only_in_the_stand_in_s_listed_functions() -> None:
    groups = groups_of(ENGINE)
    assert [g for g, _, _ in groups] == ["engine"]
    (_, subjects, scenarios), = groups
    assert [s.rel for s in subjects] == [STANDIN, STANDIN_HTTP]
    listed = {s.rel: _listed(s.rel.removesuffix(".py").replace("/", ".")) for s in subjects}
    for must in ("_signal_pipe", "serve", "_stop_core", "_reap", "_engine_core.<locals>.run", "_worker.<locals>.run"):
        assert must in listed[STANDIN]
    for must in ("_drain", "_State.drained", "_Handler.do_GET", "_Handler.do_POST"):
        assert must in listed[STANDIN_HTTP]
    for subject in subjects:
        mutants = subject.mutants()
        mine = listed[subject.rel]
        assert {m.qualname for m in mutants} == mine  # each listed function has mutants, and no other has
        source = (ROOT / subject.rel).read_text()
        assert not _outside(mutants, mine, source)
        assert not {m.qualname for m in mutants} & {"main", "_rename", "_Handler._complete", "_engine_core", "_worker"}
    # the check fires: a mutant of an unlisted function, and one of a closure claimed by its outer function
    mutants = subjects[0].mutants()
    everything = {m.qualname: m for m in reversed(mutants)}  # the first mutant of each function
    planted = [dataclasses.replace(everything["_reap"], qualname="main"),
               dataclasses.replace(everything["_worker.<locals>.run"], qualname="_worker")]
    assert len(_outside(planted, listed[STANDIN] | {"_worker"}, (ROOT / STANDIN).read_text())) == 2
    # the engine scenarios, each on the stand-in; no reference scope mutates the stand-in
    engine = {str(p) for p in (ROOT / "scenarios").glob("*.yaml") if "\ntarget: engine_standin" in p.read_text()}
    assert scenarios and set(scenarios) == engine
    assert not any(s.rel in (STANDIN, STANDIN_HTTP) for _, subs, _ in groups_of(REFERENCE) for s in subs)


def test_engine_rejects_an_unknown_mutant_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from harness.mutate.command import dev_main

    assert dev_main(["--engine", "--only", f"{STANDIN_HTTP}::_drain::remove:000000"]) == 2
    out, err = capsys.readouterr()
    assert "unmutated" not in out
    assert err.startswith(f"./dev mutate: --only {STANDIN_HTTP}::_drain::remove:000000: no such mutant; did you "
                          f"mean {STANDIN_HTTP}::_drain::") and err.count("\n") == 1, err


def test_an_engine_sample_is_recorded_in_its_own_record_and_table(tmp_path: Path) -> None:
    from harness.mutate.analysis import Analysis
    from harness.mutate.command import _record
    from harness.mutate.run import KILLED as K
    from harness.mutate.run import Outcome

    page = tmp_path / "mutation.md"
    begin, end = ENGINE.markers
    reference = REFERENCE.markers
    page.write_text(f"{reference[0]}\nreference's\n{reference[1]}\n{begin}\nold\n{end}\n")
    scope = dataclasses.replace(ENGINE, record=tmp_path / "samples.json", page=page)
    m = groups_of(ENGINE)[0][1][0].mutants()[0]
    a = Analysis([Outcome(m, K, 1.0)], {}, {}, {}, 260, planned=1, commit="abc1234")
    args = argparse.Namespace(sample=1, seed=5, only=[])
    _record(a, args, "./dev mutate --engine --sample 1 --seed 5 --record", scope, drawn=False)
    (line,) = json.loads(scope.record.read_text())["samples"]
    assert (line["commit"], line["seed"], line["n"], line["raw"]) == ("abc1234", 5, 1, {"killed": 1, "all": 1})
    text = page.read_text()
    assert "reference's" in text and "\nold\n" not in text
    assert "| abc1234 | " in text and " | 5 | no | 1 | 1 of 1 |" in text  # (the machine's column between)
    assert (tmp_path / "samples" / "5.json").is_file()  # the sample's outcomes, beside its record


@pytest.mark.slow
def test_a_stand_in_mutant_is_killed_in_its_exec_d_processes_and_an_unreached_one_survives(tmp_path: Path) -> None:
    """About 15-25 s: the unmutated engine scenarios (-k: engine-sigterm-idle), then each mutant on them (the kill
    confirmed once).  It fails when the stand-in the run launches does not import the mutated copy."""
    out_json = tmp_path / "run.json"
    before = (ROOT / STANDIN).read_bytes()
    r = subprocess.run([sys.executable, "-m", "harness.mutate", "--engine", "--only", KILLED, "--only", SURVIVES,
                        "-k", "engine-sigterm-idle", "--json", str(out_json)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 1, (r.stdout, r.stderr)  # a survivor
    assert f"{KILLED} _signal_pipe: `signal.signal(s, lambda *_: None)` removed: killed by " \
           "engine-sigterm-idle.yaml::engine-sigterm-idle[tp1-pp1-cpu]" in r.stdout, r.stdout
    assert f"survivor {SURVIVES}  {STANDIN}:" in r.stdout
    data = json.loads(out_json.read_text())
    assert [(m["id"], m["status"]) for m in data["mutants"]] == [(KILLED, "killed"), (SURVIVES, "survived")]
    assert list(data["unmutated_seconds"]) == ["engine"]
    assert (ROOT / STANDIN).read_bytes() == before  # never the working tree's file
