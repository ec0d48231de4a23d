"""``lastcall bench``: its honesty on real worker processes, and the parts that need none.

Tests marked ``bench`` start real worker processes and time them: they run only
when selected, serially (``pytest -m bench -n 0``), and are skipped otherwise.
The unmarked tests (the command line's refusals, the random order, the leak
check on this process, the table and the plot of a synthetic result) are in
the default suite.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.bench.command import (
    SETTLE_S,
    BenchResult,
    LeakFound,
    _LeakCheck,
    format_bench,
    pin_plan,
    render_svg,
    run_bench,
)
from harness.bench.interleave import Window, schedule, summarize
from harness.bench.stats import Comparison, compare
from harness.cli import main

PLANTED = "harness.bench.arms:PLANTED_DELAY_2US"
BUDGET_S = 30.0  # the planted delay must be found within this much measurement

BENCH = [
    pytest.mark.bench,
    pytest.mark.skipif("'bench' not in (config.getoption('markexpr') or '')",
                       reason="a real-process benchmark: run with pytest -m bench -n 0"),
    pytest.mark.skipif(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") != "1",
                       reason="benchmarks run serially: pytest -m bench -n 0"),
]


# ------------------------------------------------------------ no processes
@pytest.mark.parametrize("argv,message", [
    (["--op", "mapp16"], "lastcall: error: unknown op 'mapp16'; did you mean 'map16'?"),
    (["--arm", "referense"], "lastcall: error: unknown target 'referense' (did you mean 'reference'?); known: "),
    (["--arm", "never_stopped"], "lastcall: error: arm 'never_stopped' is not a worker target (HandshakeTarget: "
                                 "no worker listener and codec); a bench arm is the reference, one of its variants"),
    (["--arm", "reference", "--arm", "reference"], "lastcall: error: give distinct arms"),
    (["--arm", "reference", "--no-aa"], "lastcall: error: one arm and no A/A control leaves nothing to compare"),
    (["--windows", "2"], "argument --windows: 2 must be >= 3"),
    (["--alpha", "5"], "lastcall: error: alpha and confidence must be between 0 and 1, got 5.0 and 0.95"),
])
def test_bad_arguments_exit_2_before_anything_starts(argv: list[str], message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


def test_random_order_shuffles_each_round_and_is_reproducible() -> None:
    plan = schedule(["A", "B", "C"], ["x", "y"], windows=30, warmup=0, order="random", seed=4)
    assert plan == schedule(["A", "B", "C"], ["x", "y"], windows=30, warmup=0, order="random", seed=4)
    groups = ["".join(w.arm for w in plan[i:i + 3]) for i in range(0, len(plan), 3)]
    assert all(sorted(g) == ["A", "B", "C"] for g in groups)
    assert len(set(groups)) > 2  # not the ABBA alternation of two orders
    with pytest.raises(ValueError, match="order must be one of"):
        schedule(["A"], ["x"], windows=3, order="zigzag")


def _window(arm: str, warmup: bool = False) -> Window:
    return Window(index=0, round=0, op="kv_tensors_created", arm=arm, warmup=warmup)


def test_the_leak_check_passes_a_steady_process_and_stops_on_fds_that_stay() -> None:
    check = _LeakCheck({"me": os.getpid()})
    check.baseline("me")
    check(_window("me"))
    r, w = os.pipe()
    try:
        with pytest.raises(LeakFound, match=rf"leak: the worker of arm me \(pid {os.getpid()}\) went from "
                                            rf"\d+ fds .* stayed there for {SETTLE_S}s; new fds: .*pipe:"):
            check(_window("me"))
    finally:
        os.close(r)
        os.close(w)
    assert check.checks == 2


def test_growth_in_a_warmup_window_becomes_the_new_baseline() -> None:
    check = _LeakCheck({"me": os.getpid()})
    check.baseline("me")
    r, w = os.pipe()
    try:
        check(_window("me", warmup=True))
        check(_window("me"))
    finally:
        os.close(r)
        os.close(w)
    assert check.checks == 1


def _synthetic() -> BenchResult:
    plan = schedule(["ref", "b", "ref (A/A)"], ["kv_tensors_created"], windows=8, warmup=1)
    medians = [70_000.0 + (3_000 if w.arm == "b" else 0) + 100 * (w.index % 5) for w in plan]
    res = summarize(plan, medians, baseline="ref", requests=10)
    st = res.per_op["kv_tensors_created"]

    def vs(arm: str) -> Comparison:
        return compare(st.arms["ref"].window_medians_ns, st.arms[arm].window_medians_ns, alpha=0.01, paired=True)

    settings = {"arms": ["ref", "b"], "ops": ["kv_tensors_created"], "windows": 8, "requests": 10, "warmup": 1,
                "order": "abba", "keep_alive": False, "aa": True, "alpha": 0.01, "confidence": 0.95, "seed": 1,
                "backend": "noop", "record": False}
    return BenchResult(settings, [], "ref (A/A)", res, {"kv_tensors_created": {"b": vs("b")}},
                       {"kv_tensors_created": vs("ref (A/A)")}, leak_checks=24, seconds=1.0)


def test_the_table_shows_medians_ratio_interval_p_verdict_and_the_aa_floor() -> None:
    text = format_bench(_synthetic())
    header, _rule, row = text.splitlines()[1:4]
    assert header.split() == ["op", "arm", "ref", "(us)", "arm", "(us)", "ratio", "95%", "CI", "p", "verdict",
                              "(alpha", "0.01)", "A/A", "floor", "[95%", "CI],", "p"]
    assert row.split()[:5] == ["kv_tensors_created", "b", "70.2", "73.2", "1.043"]
    assert row.split()[-6:] == ["slower", "1.000", "[0.996,", "1.004],", "p", "1"]


def test_the_plot_is_svg_with_one_line_per_arm() -> None:
    root = ET.fromstring(render_svg(_synthetic()))
    lines = [e for e in root.iter("{http://www.w3.org/2000/svg}polyline") if e.get("stroke") != "#888"]
    assert len(lines) == 3
    assert all(len(e.get("points", "").split()) == 8 for e in lines)


# ------------------------------------------------------------- real processes
class TestOnRealProcesses:
    pytestmark = BENCH

    @pytest.mark.parametrize("keep_alive", [False, True], ids=["fresh", "keep-alive"])
    def test_a_small_run_has_every_figure(self, keep_alive: bool, tmp_path: Path) -> None:
        ops = ["kv_tensors_created", "map4", "unmap_pair"]
        r = run_bench(["reference", "harness.bench.arms:TRACKING_NOOP"], ops, windows=3, requests=5, warmup=1,
                      keep_alive=keep_alive, json_path=str(tmp_path / "b.json"), svg_path=str(tmp_path / "b.svg"),
                      progress=False, seed=3, command="lastcall bench --windows 3")
        assert r.result.arms == ["reference", "TRACKING_NOOP", "reference (A/A)"]
        assert r.leak_checks == 3 * 3 * 3
        data = json.loads((tmp_path / "b.json").read_text())
        for op in ops:
            assert set(data["ops"][op]["arms"]) == set(r.result.arms)
            assert len(data["ops"][op]["arms"]["reference"]["window_medians_us"]) == 3
            assert set(data["ops"][op]["vs_baseline"]["TRACKING_NOOP"]) >= {"ratio", "ci", "p", "verdict"}
            assert data["ops"][op]["aa_floor"]["verdict"] in ("no difference", "slower", "faster")
        ET.fromstring((tmp_path / "b.svg").read_text())
        assert {k for k in ("date", "commit", "machine", "python", "command") if data.get(k)} == {
            "date", "commit", "machine", "python", "command"}  # its provenance, for the table under it
        assert data["settings"]["placement"] == pin_plan(True)  # pinned by default where there are two CPUs
        assert ("requests sent from CPU" if pin_plan(True) else "unpinned") in format_bench(r)

    def test_a_planted_2us_delay_is_found_slower_within_the_budget(self) -> None:
        r = run_bench(["reference", PLANTED], ["kv_tensors_created"], windows=300, requests=100, warmup=2,
                      aa=False, progress=False, seed=11)
        c = r.comparisons["kv_tensors_created"]["PLANTED_DELAY_2US"]
        planted = r.arms[1]
        print(format_bench(r))
        assert planted.planted_delay_ns is not None and 1500 <= planted.planted_delay_ns <= 2500
        assert r.seconds < BUDGET_S
        assert c.verdict == "slower", format_bench(r)
        assert c.ci[0] > 1.0, format_bench(r)

    def test_a_leaking_arm_stops_the_bench(self) -> None:
        with pytest.raises(LeakFound, match=r"leak: the worker of arm LEAKS_AN_FD \(pid \d+\) went from"):
            run_bench(["reference", "harness.bench.arms:LEAKS_AN_FD"], ["kv_tensors_created"], windows=3,
                      requests=5, warmup=1, aa=False, progress=False)

    def test_the_cli_prints_the_table_and_exits_1_on_a_leak(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["bench", "--arm", "reference", "--arm", "harness.bench.arms:LEAKS_AN_FD", "--no-aa",
                     "--windows", "3", "--requests", "5", "--op", "kv_tensors_created"]) == 1
        assert "lastcall bench: leak: the worker of arm LEAKS_AN_FD" in capsys.readouterr().err
        assert main(["bench", "--windows", "3", "--requests", "5", "--op", "kv_tensors_created"]) == 0
        out = capsys.readouterr().out
        assert "kv_tensors_created  TRACKING_NOOP" in out and "A/A floor" in out
