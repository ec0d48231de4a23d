"""harness.scenario.table: the Markdown table, --from reading the cells the slow test left, and the rule by which
a run of a planted bug counts as caught (harness.scenario.catches), shared by catches items and the table's cells."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.checkers.base import ok, violated
from harness.history import Event
from harness.launch.cluster import RunOutcome
from harness.scenario import expand, load, loads
from harness.scenario.catches import judge_catch, resolve, waited_for
from harness.scenario.player import StepError, wait
from harness.scenario.result import RunResult
from harness.scenario.table import Cell, judge_cell, load_cells, main, markdown


def cells() -> list[Cell]:
    return [Cell("s1", "reference", False, False, ()), Cell("s1", "no_conn_tracking", True, True, ("reads_cancelled",)),
            Cell("s1", "lost_unmap", True, False, ("allocator_consistent",)),
            Cell("s2", "reference", True, False, (), "step error: StepError: boom"),
            Cell("s2", "no_conn_tracking", False, True, ())]


def test_markdown_marks_caught_named_missing_and_lacking() -> None:
    text = markdown(cells(), ["reference", "no_conn_tracking", "lost_unmap"])
    assert text.splitlines() == [
        "| scenario | reference | no conn tracking | lost unmap |",
        "|---|---|---|---|",
        "| s1 | pass | **x** | x |",
        "| s2 | FAIL |  | - |",  # a named variant not caught: an empty cell (the slow test fails on it)
    ]


def test_from_reads_the_slow_tests_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("s1", "s2"):
        (tmp_path / f"{name}.json").write_text(json.dumps([c.__dict__ for c in cells() if c.scenario == name]))
    assert [c for c in load_cells(str(tmp_path))] == cells()
    assert main(["--from", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| s1 | pass | " in out and "**x**" in out


def test_from_an_empty_directory_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"no \*\.json under .*: run `pytest -m slow tests/test_scenario_table.py`"):
        load_cells(str(tmp_path))


# ------------------------------------------------------------------ the rule of a catch (harness.scenario.catches)

SCENARIO = """\
name: rule
about: the rule of a catch
catches: {no_conn_tracking: [reads_cancelled]}
steps:
  - start: cluster
  - arm: {site: listener.frame_read, action: pause, as: f1}
  - send: {to: {rank: 0}, cmd: map_to_kv_tensors, offsets: [0], fault: stall_after_header, as: r1}
  - wait: {reached: f1}
  - wait: {event: stop_started}
  - stop: {as: s1}
  - wait: {returned: s1}
  - wait: {closed: r1}
expect:
  - stop_result: {step: s1, returns: true}
  - reads_cancelled
  - fault_fired: {faults: [f1]}
"""


def _event(kind: str, t: int, **data: Any) -> Event:
    return Event(t, 7, "worker", "pp0/rank0", "main", kind, data)


ARMED = _event("armed", 1, step="f1", site="listener.frame_read", pid=7, action="pause", since_ns=1)
REACHED = _event("fault_reached", 2, site="listener.frame_read")


def _run(*fired: str, step_error: str = "", events: tuple[Event, ...] = (ARMED, REACHED), status: str = "ok",
         broken: str = "", waited: str | None = None) -> RunResult:
    """A run whose checkers ``fired``; a ``step_error`` is recorded as its step_failed event (with ``waited``, the
    kind a timed-out wait waited for), as the runner records it."""
    scn = loads(SCENARIO, "rule.yaml")
    if step_error:
        events = (*events, _event("step_failed", 9, error=step_error, **({"waited_for": waited} if waited else {})))
    verdicts = [violated(n, f"{n} saw the bug") if n in fired else ok(n) for n in ("stop_result", "reads_cancelled")]
    return RunResult(expand(scn)[0], "no_conn_tracking", "r", verdicts, RunOutcome(status=status), list(events), {},
                     step_error, broken=broken)


def test_a_named_checker_firing_is_a_catch() -> None:
    c = judge_catch(_run("reads_cancelled"), ("reads_cancelled",))
    assert (c.counted, c.by, c.why) == (True, ("reads_cancelled",), "caught by reads_cancelled")


def test_another_checker_firing_is_not_the_named_catch() -> None:
    c = judge_catch(_run("stop_result"), ("reads_cancelled",))
    assert (c.counted, c.why) == (False, "none of reads_cancelled reported a violation (violated instead: "
                                         "stop_result)")


def test_fault_fired_alone_never_catches() -> None:
    """The vacuity verdict is no catch, in a catches item and in the table's cells a scenario does not name."""
    r = _run(events=(ARMED,))
    r.verdicts.append(violated("fault_fired", "vacuous: armed fault(s) ['f1'] never fired"))
    assert not judge_catch(r, ("stop_result", "reads_cancelled")).counted
    scn = r.item.scenario
    cell = judge_cell(scn, "lost_unmap", r)  # not named: any expect checker but fault_fired
    assert (cell.caught, cell.named, cell.checkers) == (False, False, ())


def test_a_broken_run_never_catches() -> None:
    c = judge_catch(_run("reads_cancelled", broken="the harness crashed (KeyError: 'x')"), ("reads_cancelled",))
    assert (c.counted, c.why) == (False, "the run is broken, so nothing it shows counts: the harness crashed "
                                         "(KeyError: 'x')")


def test_a_run_cut_short_before_its_fault_fired_does_not_catch() -> None:
    for r in (_run("reads_cancelled", step_error="StepError: no worker pp0/rank3", events=(ARMED,)),
              _run("reads_cancelled", status="hung", events=(ARMED,))):
        c = judge_catch(r, ("reads_cancelled",))
        assert not c.counted and c.why.startswith("the run stopped before every armed fault fired (")
        assert "['f1'] never fired" in c.why
    hung = _run("reads_cancelled", status="hung", events=(ARMED,))
    hung.outcome.watchdog, hung.outcome.detail = {"deadline_s": 2.5}, "no progress"
    assert judge_catch(hung, ("reads_cancelled",)).why.startswith(
        "the run stopped before every armed fault fired (the run hung: watchdog after 2.5 s (no progress); ")
    # the same step error once every armed fault had fired: the catch counts
    assert judge_catch(_run("reads_cancelled", step_error="StepError: no worker pp0/rank3"),
                       ("reads_cancelled",)).counted


def test_a_wait_that_timed_out_on_what_the_bug_prevents_still_catches() -> None:
    # reads_cancelled judges peer_closed: the bug is the listener never closing r1
    r = _run("reads_cancelled", step_error="StepError: wait: the listener did not close r1 in 1.0s", events=(ARMED,),
             waited="peer_closed")
    c = judge_catch(r, ("reads_cancelled",))
    assert (c.counted, c.why) == (True, "caught by reads_cancelled (the wait timed out on peer_closed, which the "
                                        "bug prevents)")
    # a wait for the fault itself: fault_reached is judged by no catching checker, so the run is cut short
    r = _run("reads_cancelled", step_error="StepError: wait: f1 (listener.frame_read on pp0/rank0) was not "
             "reached 1x in 1.0s", events=(ARMED,), waited="fault_reached")
    assert not judge_catch(r, ("reads_cancelled",)).counted
    # the words alone carry nothing: a wait's error without the recorded kind is a run cut short
    r = _run("reads_cancelled", step_error="StepError: wait: the listener did not close r1 in 1.0s", events=(ARMED,))
    assert not judge_catch(r, ("reads_cancelled",)).counted


class _Rec:
    def wait_for(self, *_a: Any, **_k: Any) -> None:
        return None  # nothing ever comes: every wait times out

    def wait_until(self, *_a: Any, **_k: Any) -> None:
        return None


class _Peer:
    def closed_by_listener(self, _limit: float) -> bool:
        return False


def test_each_wait_that_times_out_carries_the_kind_it_waited_for() -> None:
    """Each form of wait, timed out by the Player's own wait step, names the kind it waited for as a field of its
    StepError; the run's step_failed event records it, which a catch is judged on."""
    scn = loads(SCENARIO, "rule.yaml")
    proc = SimpleNamespace(pid=7, label="pp0/rank0")
    pl = SimpleNamespace(timeout=lambda _t=None: 0.01, c=SimpleNamespace(rec=_Rec()), mark=None,
                         armed={"f1": (proc, "listener.frame_read", 0)}, peers={"r1": [_Peer()]},
                         proc=lambda _who: proc)
    waits = [s for s in scn.steps if s.kind == "wait"]
    kinds = []
    for step in waits:
        with pytest.raises(StepError) as info:
            wait(pl, step.spec, "w")  # type: ignore[arg-type]
        kinds.append(info.value.waited_for)
    assert kinds == ["fault_reached", "stop_started", "step_returned", "peer_closed"]
    failed = Event(1, 1, "harness", "", "", "step_failed", {"error": "StepError: ...", "waited_for": "peer_closed"})
    assert waited_for(SimpleNamespace(events=[failed])) == "peer_closed"  # type: ignore[arg-type]
    other = Event(1, 1, "harness", "", "", "step_failed", {"error": "StepError: no worker pp0/rank3"})
    assert waited_for(SimpleNamespace(events=[other])) is None and waited_for(SimpleNamespace(events=[])) is None  # type: ignore[arg-type]


def test_a_catches_name_resolves_to_the_targets_variant() -> None:
    mine = SimpleNamespace(name="mine", variants={"no_conn_tracking": "mypkg.bugs:NO_TRACKING"})
    assert resolve(mine, "no_conn_tracking") == ("mypkg.bugs:NO_TRACKING", "")
    assert resolve(mine, "lost_unmap") == (None, "target mine declares no variant 'lost_unmap' (its variants: "
                                                 "no_conn_tracking)")
    assert resolve(SimpleNamespace(name="plain"), "lost_unmap") == ("lost_unmap", "")  # no variants: the name
    odd = SimpleNamespace(name="odd", variants={"lost_unmap": 3})
    assert resolve(odd, "lost_unmap")[0] is None


def test_a_run_that_never_started_or_crashed_the_harness_is_broken() -> None:
    from harness.scenario.runner import _broken, run_item

    assert _broken(KeyError("x"), True, "KeyError: 'x'") == "the harness crashed (KeyError: 'x')"
    assert _broken(StepError("wait: ..."), True, "StepError: wait: ...") == ""  # a failed step: judged by the rule
    assert _broken(ConnectionResetError(), True, "ConnectionResetError: ") == ""  # the system under test hung up
    # a worker-listener variant cannot run a handshake scenario: the run never starts, and catches nothing
    item = expand(load("scenarios/handshake-idle-shutdown-releases-the-port.yaml"))[0]
    r = run_item(item, variant="no_conn_tracking")
    assert r.broken.startswith("it did not start (StepError: target 'no_conn_tracking' has no ")
    assert not judge_catch(r, ("port_released",)).counted


def test_the_table_runs_planted_bugs_not_real_targets() -> None:
    from harness.scenario.table import table_variants

    columns = table_variants()
    assert "reference" in columns and "engine_standin" in columns and "engine_keeps_child" in columns
    assert not {"kvcached", "vllm_nixl", "vllm_engine"} & set(columns)  # a real vLLM launch per cell, else


@pytest.mark.parametrize(("argv", "says"), [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--update"], "argument --update: expected at least one argument"),
    (["--from", "x", "scenarios"], "PATH goes alone"),
])
def test_a_bad_command_line_is_a_usage_error(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and says in capsys.readouterr().err


def test_bad_input_is_one_located_line_and_exit_2_before_anything_runs(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nabout: x\ncatches: [no_conn_tracking]\n"
                   "steps:\n  - stat: cluster\nexpect: [stop_result]\n")
    assert main([str(bad)]) == 2  # a typo of a step kind
    err = capsys.readouterr().err
    assert err.startswith(f"python -m harness.scenario.table: {bad}:5:") and "stat" in err, err
    assert "Traceback" not in err and err.count("\n") <= 3, err
    assert main(["--write", "--update", str(tmp_path / "gone.yaml")]) == 2
    assert "gone.yaml: cannot read" in capsys.readouterr().err
    assert main(["--from", str(tmp_path)]) == 2  # no cells there
    assert "no *.json under" in capsys.readouterr().err
    (tmp_path / "s.json").write_text('{"not": "a list of cells"}')
    assert main(["--from", str(tmp_path)]) == 2
    assert "s.json: not a file of cells the slow test writes" in capsys.readouterr().err
