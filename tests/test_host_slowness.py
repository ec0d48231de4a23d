"""A run measures how slow the machine is for it (harness.timeouts.Slowness, over the launch it does anyway),
records it in its history (``host_measured``) and stretches its steps' safety nets by it, never a bound a checker
judges."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import timeouts
from harness.scenario import runner
from harness.scenario.loader import expand, loads
from harness.timeouts import MAX_SLOWNESS, MIN_MEASURED_NS, Slowness, thread_cpu

SCENARIO = """
name: slowness
about: a run that only starts and stops
catches: [no_conn_tracking]
topology: {tp: 1, pp: 1}
config: {ipc_timeout: 2s}
steps:
  - start: cluster
  - stop: {on: all, as: s1}
  - wait: {returned: s1}
expect:
  - stop_result: {step: s1, returns: true}
"""


def _work(seconds: float) -> None:
    """CPU work on this thread, as a launch's snapshot and forks are."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.fixture
def contended() -> Iterator[int]:
    """Twice as many busy processes as CPUs, each ready before the test goes on."""
    import os

    n = 2 * (os.cpu_count() or 1)
    procs = [subprocess.Popen([sys.executable, "-c", "print('ready', flush=True)\nwhile True: pass"],
                              stdout=subprocess.PIPE, text=True) for _ in range(n)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    yield n
    for p in procs:
        p.kill()
        p.wait()


def test_an_idle_thread_measures_no_slowness_and_too_little_work_says_nothing() -> None:
    s = Slowness()
    s.r0, s.w0 = 10_000_000, 0
    timeouts_thread = timeouts.thread_cpu
    try:  # under MIN_MEASURED_NS of work, however long it waited: nothing measured (two reads of /proc on a busy
        # machine are not "no work": the rule is tested on the figures, the measurement below)
        timeouts.thread_cpu = lambda: (10_000_000 + MIN_MEASURED_NS - 1, 5_000_000_000)  # type: ignore[assignment]
        assert s.measure().factor == 1.0 and s.share == 1.0
    finally:
        timeouts.thread_cpu = timeouts_thread  # type: ignore[assignment]
    s = Slowness()
    _work(0.03)
    ran, _ = thread_cpu()
    assert ran > 0 and 1.0 <= s.measure().factor <= MAX_SLOWNESS


def test_a_contended_machine_stretches_the_factor(contended: int) -> None:
    s = Slowness()
    _work(0.2)
    s.measure()
    assert s.share < 0.9 and s.factor > 1.1, (contended, s.share, s.factor)


def test_the_factor_is_bounded() -> None:
    s = Slowness()
    s.r0, s.w0 = 0, 0
    timeouts_thread = timeouts.thread_cpu
    try:
        timeouts.thread_cpu = lambda: (3_000_000, 3_000_000_000)  # type: ignore[assignment]
        assert s.measure().factor == MAX_SLOWNESS
    finally:
        timeouts.thread_cpu = timeouts_thread  # type: ignore[assignment]


def test_a_run_records_its_slowness_and_its_player_stretches_only_safety_nets(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    seen: list[float] = []
    real = runner.Player.play

    def play(self: runner.Player) -> None:
        seen.extend([self.slowness, self.deadline(), self.timeout(), self.timeout(1.0)])
        real(self)

    monkeypatch.setattr(runner.Player, "play", play)
    result = runner.run_item(expand(loads(SCENARIO, "<slowness>"))[0])
    assert result.passed, result.verdicts
    (measured,) = [e for e in result.events if e.kind == "host_measured"]
    assert 0 < measured.data["cpu_share"] <= 1 and measured.data["slowness"] == round(seen[0], 3)
    deadline = expand(loads(SCENARIO, "<slowness>"))[0].scenario.config.deadline
    assert seen[1] == pytest.approx(deadline * timeouts.scale() * seen[0])  # the join's safety net, stretched
    assert seen[2] == pytest.approx(2.0 * timeouts.scale())  # ipc_timeout: a scenario may judge by it
    assert seen[3] == pytest.approx(timeouts.scale())  # a step's own timeout: the author's
    assert result.scale == timeouts.scale()  # a checker's bounds are not stretched by it
