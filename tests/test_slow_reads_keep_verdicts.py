"""A busy machine slows a listener's reads; the library's verdicts must not move with it.

`reply-larger-than-the-socket-buffer` once stopped the listener after the first `dispatch_finished`, while the
second request's 256 KiB frame could still be arriving: on a loaded machine the stop rightly cancelled that
read and the reference failed (`reads_cancelled n=1`, then "no reply"). With each frame read delayed by 20 ms
(a failpoint, as a loaded machine delays it) the old scenario failed so in 1 of 5 runs.  It now stops only once
both requests are inside the backend, so no read can be in progress when the stop begins: what this test holds,
with the reads slowed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.scenario.loader import expand, loads
from harness.scenario.runner import run_item

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "reply-larger-than-the-socket-buffer.yaml"
SLOW_READS = "  - arm: {site: listener.frame_read, on: {rank: 0}, action: delay, delay: 20ms, as: slow_reads}\n"


@pytest.mark.slow  # two runs of a slow scenario, seconds each
def test_reply_larger_than_the_socket_buffer_holds_when_every_frame_read_is_slow() -> None:
    text = SCENARIO.read_text()
    assert "  - start: cluster\n" in text
    slowed = text.replace("  - start: cluster\n", "  - start: cluster\n" + SLOW_READS, 1)
    result = run_item(expand(loads(slowed, "<slowed>"))[0])
    assert result.passed, [str(v) for v in result.violated] + [result.step_error]
    cancelled = [e for e in result.events if e.kind == "reads_cancelled" and e.data.get("n")]
    assert not cancelled, cancelled  # no request's read was in progress when the stop began
