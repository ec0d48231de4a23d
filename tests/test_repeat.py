"""--repeat N reports a scenario that passes sometimes and fails sometimes as flaky, never as passed."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

FLAKY_TARGET = '''
import os
from harness.reference import wire
from harness.reference.listener import WorkerListener
from harness.reference.variants import Variant


class EveryOtherRunFails(WorkerListener):
    """Fails the first request of every other run: a counter file shared by the runs decides."""

    def _call_backend(self, req):
        path = os.environ["LASTCALL_FLAKY_COUNTER"]
        with open(path, "a+") as f:
            f.seek(0)
            n = len(f.read())
            f.write("x")
        if n % 2 == 0:
            return wire.Reply(status="error", error_type="operation_failed", message="flaky on purpose")
        return super()._call_backend(req)


FLAKY = Variant("flaky", "fails every other run", listener=EveryOtherRunFails)
'''

SCENARIO = '''
name: flaky-demo
about: Deliberately flaky, to test --repeat. Catches the planted bug it names like any scenario.
target: flakymod:FLAKY
catches: [no_conn_tracking]
steps:
  - start: cluster
  - send: {to: {rank: 0}, cmd: kv_tensors_created, as: q1}
expect:
  - requests_served
'''


def test_repeat_flags_a_flaky_scenario_and_passes_a_steady_one(pytester: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(flakymod=FLAKY_TARGET)
    pytester.makefile(".yaml", **{"flaky-demo": SCENARIO})
    pytester.makefile(".yaml", **{"steady": SCENARIO.replace("flakymod:FLAKY", "reference")
                                  .replace("flaky-demo", "steady")})
    monkeypatch.setenv("LASTCALL_FLAKY_COUNTER", str(pytester.path / "counter"))
    result = pytester.runpytest_subprocess("flaky-demo.yaml", "steady.yaml", "--repeat", "2", "-k", "not catches",
                                           "-p", "no:cacheprovider", "--lastcall-reports=")
    result.stdout.fnmatch_lines(["*FLAKY flaky-demo.yaml::flaky-demo[[]tp1-pp1-cpu[]]: passed 1, failed 1 of 2*"])
    assert "FLAKY steady" not in result.stdout.str()
    result.assert_outcomes(passed=3, failed=1)
    assert result.ret == 1
