"""``send: {refused: ERROR_TYPE}``: a request the backend must refuse is answered with that error, and the
listener serves on (the mutation survivor harness/reference/serving.py::ServingLoop._call_backend::remove:5a073d,
which no scenario
noticed: no request of the library made the backend refuse it).  Proven on the reference (quiet), on requests
the step must fail (served, another error), at load time, and on a planted bug modelled on the mutant
(tests/lc_refusal_target.py) through the library's scenario that uses it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.checkers.base import VIOLATED
from harness.scenario import runner
from harness.scenario.errors import ScenarioError
from harness.scenario.loader import expand, load, loads

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
PLANTED = "reference@tests.lc_refusal_target:RefusalUnanswered"

RUN = """
name: refusals
about: three requests the step says the backend must refuse, one of them served
catches: [no_conn_tracking]
topology: {tp: 1, pp: 1}
config: {ipc_timeout: 2s}
steps:
  - start: cluster
  - send: {cmd: map_to_kv_tensors, offsets: [1], refused: bad_request, as: bad_offset}
  - send: {cmd: map_to_kv_tensors, offsets: [0], refused: bad_request, as: served}
  - send: {cmd: map_to_kv_tensors, offsets: [3], refused: map_quarantined, as: other_error}
  - send: {cmd: kv_tensors_created, as: after}
  - stop: {on: all, as: s1}
  - wait: {returned: s1}
expect:
  - stop_result: {step: s1, returns: true}
"""


def _returned(result: runner.RunResult) -> dict[str, dict[str, object]]:
    return {e.data["step"]: e.data for e in result.events if e.kind == "step_returned" and e.data.get("kind") == "send"}


def test_a_refused_step_is_ok_only_on_the_error_it_names() -> None:
    result = runner.run_item(expand(loads(RUN, "<refusals>"))[0])
    assert result.step_error == "", result.step_error
    sends = _returned(result)
    assert sends["bad_offset"]["ok"] is True, sends["bad_offset"]
    assert sends["bad_offset"]["value"] == {"status": "error", "error_type": "bad_request"}
    assert sends["served"]["ok"] is False and "served, not refused" in str(sends["served"]["error"]), sends["served"]
    assert sends["other_error"]["ok"] is False and "bad_request" in str(sends["other_error"]["error"]), \
        sends["other_error"]
    assert sends["after"]["ok"] is True  # the reference serves on after each refusal


@pytest.mark.parametrize(("line", "says"), [
    ("{cmd: map_to_kv_tensors, offsets: [1], refused: bad_request, fault: garbage_body}", "only a plain request"),
    ("{cmd: map_to_kv_tensors, offsets: [1], refused: no_such_error}", "refused"),
])
def test_refused_is_checked_at_load_time(line: str, says: str) -> None:
    text = RUN.replace("{cmd: map_to_kv_tensors, offsets: [1], refused: bad_request, as: bad_offset}", line)
    with pytest.raises(ScenarioError, match=says):
        loads(text, "<bad>")


def test_the_library_catches_a_listener_that_leaves_a_refusal_unanswered() -> None:
    """The mutant's bug, planted: malformed-frames-of-every-kind's refused request gets no reply, the serving
    thread dies, and the requests after it go unanswered (survives_bad_input and requests_served).  Its
    reference run is the library's own item."""
    result: Any = runner.run_item(expand(load(str(SCENARIOS / "malformed-frames-of-every-kind.yaml")))[0],
                                  variant=PLANTED)
    assert _returned(result)["r1"]["ok"] is False
    verdicts = {v.checker: v.status for v in result.verdicts}
    assert verdicts["survives_bad_input"] == VIOLATED and verdicts["requests_served"] == VIOLATED, result.verdicts
