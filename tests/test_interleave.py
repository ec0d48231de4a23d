"""harness.bench.interleave: window order, statistics, and the timing loop (no timed flakes)."""

from __future__ import annotations

import time

import pytest

from harness.bench.interleave import (
    Arm,
    Step,
    format_result,
    format_rows,
    median_of_medians,
    ratio,
    round_order,
    run_interleaved,
    schedule,
    summarize,
    time_window,
    window_median,
    window_order,
)


# ------------------------------------------------------------------ order
def test_window_order_two_arms_is_abba() -> None:
    assert "".join(window_order(["A", "B"], 4)) == "ABBAABBA"


def test_window_order_three_arms_alternates_forward_and_reversed() -> None:
    assert "".join(window_order(["A", "B", "C"], 4)) == "ABCCBAABCCBA"


def test_each_arm_gets_each_position_equally_over_an_even_number_of_rounds() -> None:
    order = window_order(["A", "B", "C"], 6)
    rounds = [order[i:i + 3] for i in range(0, len(order), 3)]
    for arm in "ABC":
        positions = sorted(r.index(arm) for r in rounds)
        assert sum(positions) == 6  # 3 rounds forward, 3 reversed: each arm's mean position is the middle


def test_round_order_before_the_first_measured_round_continues_the_pattern() -> None:
    assert round_order(["A", "B"], -1) == ["B", "A"]
    assert round_order(["A", "B"], 0) == ["A", "B"]


def test_schedule_warmup_rounds_come_first_and_measured_rounds_start_forward() -> None:
    plan = schedule(["A", "B"], ["x", "y"], windows=2, warmup=1)
    assert [w.index for w in plan] == list(range(12))
    assert [w.warmup for w in plan] == [True] * 4 + [False] * 8
    assert [(w.op, w.arm) for w in plan] == [
        ("x", "B"), ("x", "A"), ("y", "B"), ("y", "A"),  # warm-up: tail of the ABBA pattern
        ("x", "A"), ("x", "B"), ("y", "A"), ("y", "B"),
        ("x", "B"), ("x", "A"), ("y", "B"), ("y", "A"),
    ]
    measured = [w.arm for w in plan if not w.warmup and w.op == "x"]
    assert "".join(measured) == "ABBA"


def test_schedule_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        schedule(["A", "A"], ["x"], 1)
    with pytest.raises(ValueError):
        schedule(["A"], [], 1)
    with pytest.raises(ValueError):
        schedule(["A"], ["x"], 0)
    with pytest.raises(ValueError):
        schedule(["A"], ["x"], 1, warmup=-1)


# ------------------------------------------------------------- statistics
def test_window_median_and_median_of_medians() -> None:
    assert window_median([5, 1, 3]) == 3.0
    assert window_median([4, 1, 3, 2]) == 2.5
    windows = [[1, 2, 100], [10, 11, 12], [5, 6, 7000]]  # medians 2, 11, 6
    assert median_of_medians(windows) == 6.0
    with pytest.raises(ValueError):
        window_median([])
    with pytest.raises(ValueError):
        median_of_medians([])


def test_median_of_medians_ignores_outliers_inside_windows() -> None:
    windows = [[100, 101, 102, 99, 10**9] for _ in range(5)]
    assert median_of_medians(windows) == 101.0


def test_ratio() -> None:
    assert ratio(110.0, 100.0) == pytest.approx(1.1)
    with pytest.raises(ValueError):
        ratio(1.0, 0.0)


def test_summarize_excludes_warmup_windows_and_computes_ratios() -> None:
    plan = schedule(["base", "new"], ["op"], windows=3, warmup=2)
    medians = [1e9 if w.warmup else (100.0 if w.arm == "base" else 125.0) + w.round for w in plan]
    res = summarize(plan, medians, baseline="base", requests=7)
    st = res.per_op["op"]
    assert res.windows == 3 and res.warmup == 2 and res.requests == 7
    assert st.arms["base"].window_medians_ns == [102.0, 103.0, 104.0]
    assert st.arms["new"].window_medians_ns == [127.0, 128.0, 129.0]
    assert st.arms["base"].warmup_medians_ns == [1e9, 1e9]
    assert res.median_ns("op", "base") == 103.0
    assert res.ratio("op", "new") == pytest.approx(128.0 / 103.0)
    assert st.ratios["base"] == 1.0
    assert st.window_ratios("new") == pytest.approx([127 / 102, 128 / 103, 129 / 104])


def test_summarize_rejects_mismatched_input() -> None:
    plan = schedule(["A", "B"], ["op"], windows=1, warmup=0)
    with pytest.raises(ValueError):
        summarize(plan, [1.0], baseline="A", requests=1)
    with pytest.raises(ValueError):
        summarize(plan, [1.0, 2.0], baseline="C", requests=1)
    only_warm = schedule(["A", "B"], ["op"], windows=1, warmup=1)[:2]
    with pytest.raises(ValueError):
        summarize(only_warm, [1.0, 2.0], baseline="A", requests=1)


# ------------------------------------------------------------ timing loop
class FakeClock:
    """A clock that only moves when a request says so: the loop is checked exactly."""

    def __init__(self) -> None:
        self.now = 0
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


def test_time_window_times_only_the_timed_part() -> None:
    clock = FakeClock()
    calls: list[str] = []

    def before() -> None:
        calls.append("before")
        clock.advance(1000)

    def timed() -> None:
        calls.append("timed")
        clock.advance(7)

    def after() -> None:
        calls.append("after")
        clock.advance(5000)

    assert time_window(Step(timed, before=before, after=after), 3, clock) == [7, 7, 7]
    assert calls == ["before", "timed", "after"] * 3
    assert time_window(lambda: clock.advance(3), 2, clock) == [3, 3]


def test_run_interleaved_with_a_fake_clock_is_exact() -> None:
    clock = FakeClock()
    order: list[str] = []

    def req(arm: str, ns: int) -> Step:
        return Step(lambda: clock.advance(ns), before=lambda: order.append(arm))

    arms = [Arm("A", {"x": req("A", 10), "y": req("A", 40)}), Arm("B", {"x": req("B", 30), "y": req("B", 20)})]
    seen: list[tuple[str, str, float]] = []
    res = run_interleaved(arms, windows=4, requests=2, warmup=1, clock=clock,
                          progress=lambda w, m: seen.append((w.op, w.arm, m)))
    assert res.arms == ["A", "B"] and res.ops == ["x", "y"] and res.baseline == "A"
    assert res.per_op["x"].arms["A"].window_medians_ns == [10.0] * 4
    assert res.ratio("x", "B") == pytest.approx(3.0)
    assert res.ratio("y", "B") == pytest.approx(0.5)
    assert len(seen) == (1 + 4) * 2 * 2
    assert "".join(order[::2]) == "BABA" + "ABAB" + "BABA" + "ABAB" + "BABA"  # per round: x then y
    text = format_result(res, targets={"x": "<= 1.10"}, title="fake")
    assert text.splitlines()[0] == "fake"
    assert "B/A" in text and "3.000" in text and "<= 1.10" in text and "3.00..3.00" in text


def test_run_interleaved_checks_its_arms() -> None:
    with pytest.raises(ValueError):
        run_interleaved([])
    with pytest.raises(ValueError):
        run_interleaved([Arm("A", {"x": lambda: None}), Arm("B", {"y": lambda: None})])
    with pytest.raises(ValueError):
        run_interleaved([Arm("A", {"x": lambda: None})], requests=0)
    with pytest.raises(ValueError):
        run_interleaved([Arm("A", {"x": lambda: None})], baseline="Z")
    with pytest.raises(ValueError):
        Arm("A", {})


def busy_wait(ns: int) -> None:
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


def test_run_interleaved_on_the_real_clock_orders_a_busy_arm_after_a_noop() -> None:
    arms = [Arm("noop", {"op": lambda: None}), Arm("busy", {"op": lambda: busy_wait(200_000)})]
    res = run_interleaved(arms, windows=3, requests=5, warmup=1)
    assert res.median_ns("op", "busy") >= 200_000  # a busy wait never ends early
    assert res.ratio("op", "busy") > 2.0  # a no-op call costs far less than 100 us


def test_format_rows_aligns_columns() -> None:
    text = format_rows(["name", "value"], [["a", "1.0"], ["longer", "22.5"]])
    lines = text.splitlines()
    assert len({len(line) for line in lines}) == 1
    assert lines[2].startswith("a     ") and lines[2].endswith("  1.0")
