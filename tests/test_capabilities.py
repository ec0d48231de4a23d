"""A scenario that needs a capability its target lacks by design is skipped with that reason."""

from __future__ import annotations

import dataclasses

import pytest

from harness.reference.capabilities import missing_capabilities
from harness.reference.variants import VARIANTS
from harness.scenario.needs import kind_needs
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
    assert missing_capabilities(ref, kind_needs({"start", "send", "arm"})) == []
    assert missing_capabilities(ref, kind_needs({"hold_port"})) == []  # the reference has both listeners
    worker_only = VARIANTS["no_conn_tracking"]
    assert missing_capabilities(worker_only, kind_needs({"hold_port"})) == ["hold_port (needs handshake_listener)"]
    handshake_only = load_target("never_stopped")
    assert missing_capabilities(handshake_only, kind_needs({"start", "send", "stop"})) == [
        "send (needs wire)", "stop (needs worker_listener)"]
    no_failpoints = dataclasses.replace(ref, capabilities=ref.capabilities - {"failpoints"})
    assert missing_capabilities(no_failpoints, kind_needs({"arm", "send"})) == ["arm (needs failpoints)"]


def test_scenario_needing_a_missing_capability_is_skipped_with_the_reason(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", **{"needs-handshake": NEEDS_HANDSHAKE})
    result = pytester.runpytest("needs-handshake.yaml", "-rs", "-p", "no:cacheprovider", "--lastcall-reports=")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*target no_conn_tracking lacks by design: hold_port (needs handshake_listener)*"])


# ------------------------------------------------------------------ catches under a target that declares variants
MINE = '''
from dataclasses import dataclass, field, fields

from harness.reference.variants import VARIANTS, Variant


@dataclass(frozen=True)
class WithVariants(Variant):
    variants: dict[str, str] = field(default_factory=dict)


TARGET = WithVariants(**{**{f.name: getattr(VARIANTS["reference"], f.name) for f in fields(Variant)},
                         "name": "lc_mine_target:TARGET", "variants": {"my_untracked": "no_conn_tracking"}})
'''
OWN_BUGS = """
name: own-bugs
about: A target's own planted bug, named in catches, runs as the target's variant of that name.
target: lc_mine_target:TARGET
catches: {my_untracked: [reads_cancelled], lost_unmap: [reads_cancelled]}
steps:
  - start: cluster
  - send: {to: {rank: 0}, cmd: map_to_kv_tensors, offsets: [4MiB], fault: stall_after_header, as: r1}
  - wait: {event: frame_started, on: {rank: 0}}
  - arm: {site: backend.map_to_kv_tensors, on: {rank: 0}, action: pause, count: 1, as: f1}
  - call: {op: map, offsets: [0, 2MiB], as: m1}
  - wait: {reached: f1}
  - stop: {on: all, as: s1}
  - wait: {event: stop_started, on: {rank: 0}}
  - wait: {closed: r1, timeout: 1s}
  - finish: r1
  - release: f1
  - wait: {returned: s1}
  - wait: {returned: m1}
expect:
  - stop_result: {step: s1, returns: true}
  - reads_cancelled: {within: 500ms}
  - fault_fired: {faults: [f1]}
"""


def test_catches_resolve_to_the_targets_own_variants(pytester: pytest.Pytester) -> None:
    """my_untracked runs as the target's variant of that name (no_conn_tracking) and is caught by
    reads_cancelled; lost_unmap, which the target does not declare, is skipped with the reason."""
    pytester.makepyfile(lc_mine_target=MINE)
    pytester.syspathinsert()
    pytester.makefile(".yaml", **{"own-bugs": OWN_BUGS})
    result = pytester.runpytest("own-bugs.yaml", "-k", "catches", "-rs", "-v", "-p", "no:cacheprovider",
                                "--lastcall-reports=")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*own-bugs?tp1-pp1-cpu-catches-my_untracked? PASSED*",
                                 "*target lc_mine_target:TARGET declares no variant 'lost_unmap' (its variants: "
                                 "my_untracked)*"])


def test_an_override_that_declares_variants_runs_the_catches_as_its_own(pytester: pytest.Pytester) -> None:
    """Under --lastcall-target naming a target with variants, a reference scenario's catches run as that
    target's variants of those names (an override without variants runs no catches items, as before)."""
    pytester.makepyfile(lc_mine_target=MINE.replace('{"my_untracked": "no_conn_tracking"}',
                                                     '{"no_conn_tracking": "no_conn_tracking"}'))
    pytester.syspathinsert()
    text = OWN_BUGS.replace("target: lc_mine_target:TARGET\n", "").replace("my_untracked", "no_conn_tracking")
    pytester.makefile(".yaml", **{"own-bugs": text})
    args = ("own-bugs.yaml", "-k", "catches", "-rs", "-v", "-p", "no:cacheprovider", "--lastcall-reports=")
    result = pytester.runpytest(*args, "--lastcall-target", "lc_mine_target:TARGET")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*own-bugs?tp1-pp1-cpu-catches-no_conn_tracking? PASSED*",
                                 "*declares no variant 'lost_unmap'*"])
    plain = pytester.runpytest("own-bugs.yaml", "--co", "-q", "-p", "no:cacheprovider", "--lastcall-target",
                               "reference")
    assert "catches" not in plain.stdout.str()


BUG_SPEC = '''
from lc_mine_target import TARGET
import dataclasses
from harness.reference.variants import VARIANTS
UNTRACKED = dataclasses.replace(TARGET, name="lc_mine_bugs:UNTRACKED", listener=VARIANTS["no_conn_tracking"].listener,
                                variants={})
'''


@pytest.mark.parametrize("override", [None, "lc_mine_target:TARGET", "reference"])
def test_a_catches_entry_naming_a_target_spec_runs_as_that_spec_under_any_target(
        override: str | None, pytester: pytest.Pytester) -> None:
    """``catches: [mypkg:BUG]`` names the planted bug's own target: it runs as that spec under the scenario's
    target, under an override that declares variants (which do not name it) and under one that declares none,
    and is caught; a plain name the target does not declare is still skipped with the reason."""
    pytester.makepyfile(lc_mine_target=MINE, lc_mine_bugs=BUG_SPEC)
    pytester.syspathinsert()
    text = OWN_BUGS.replace("my_untracked", "lc_mine_bugs:UNTRACKED")
    pytester.makefile(".yaml", **{"own-bugs": text})
    args = ["own-bugs.yaml", "-k", "catches", "-rs", "-v", "-p", "no:cacheprovider", "--lastcall-reports="]
    result = pytester.runpytest(*args, *([f"--lastcall-target={override}"] if override else []))
    result.stdout.fnmatch_lines(["*own-bugs?tp1-pp1-cpu-catches-lc_mine_bugs:UNTRACKED? PASSED*"])
    if override == "reference":  # an override without variants runs only the catches that name their own target
        result.assert_outcomes(passed=1)
    else:
        result.assert_outcomes(passed=1, skipped=1)
        result.stdout.fnmatch_lines(["*declares no variant 'lost_unmap'*"])
