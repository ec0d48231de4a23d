"""A scenario that needs a capability its target lacks by design is skipped with that reason."""

from __future__ import annotations

import dataclasses

import pytest

from harness.reference.variants import VARIANTS, missing_capabilities
from harness.targets import load_target

pytest_plugins = ["pytester"]

NEEDS_HANDSHAKE = """
name: needs-handshake
about: Holds a port before start; a worker-listener target cannot, by design. Catches no_conn_tracking.
target: no_conn_tracking
catches: [no_conn_tracking]
steps:
  - hold_port: {port: 0, as: p1}
  - start: cluster
expect:
  - no_leftover_paths
"""


def test_missing_capabilities() -> None:
    ref = VARIANTS["reference"]
    assert missing_capabilities(ref, {"start", "send", "arm"}) == []
    assert missing_capabilities(ref, {"hold_port"}) == []  # the reference has both listeners
    worker_only = VARIANTS["no_conn_tracking"]
    assert missing_capabilities(worker_only, {"hold_port"}) == ["hold_port (needs handshake_listener)"]
    handshake_only = load_target("never_stopped")
    assert missing_capabilities(handshake_only, {"start", "send", "stop"}) == [
        "send (needs wire)", "stop (needs worker_listener)"]
    no_failpoints = dataclasses.replace(ref, capabilities=ref.capabilities - {"failpoints"})
    assert missing_capabilities(no_failpoints, {"arm", "send"}) == ["arm (needs failpoints)"]


def test_scenario_needing_a_missing_capability_is_skipped_with_the_reason(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", **{"needs-handshake": NEEDS_HANDSHAKE})
    result = pytester.runpytest("needs-handshake.yaml", "-rs", "-p", "no:cacheprovider", "--lastcall-reports=")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*target no_conn_tracking lacks by design: hold_port (needs handshake_listener)*"])
