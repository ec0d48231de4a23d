"""A model-based explorer of the reference listener's lifecycle, and the replayable scenario of a failure.

:func:`machine_for` builds a Hypothesis ``RuleBasedStateMachine`` over one real
worker (rank 0, real Unix socket, real serving thread) of a planted-bug
:class:`~harness.reference.variants.Variant`, started in a private registry by
:class:`~harness.contract.rig.Rig`.  Its rules are what a client and an operator
do: connect, send a header and withhold the body, send the body, park a handler
inside the backend (a failpoint), release it, stop, stop concurrently, stop with
a failing cleanup, integration shutdown, restart, remove or replace the socket
file.  After every step the stop contract (docs/stop-contract.md) is checked: the
registered checkers of :data:`HISTORY_CHECKERS` judge the recorded history (a
violation breaks the line the contract table gives the checker,
:func:`harness.contract.line_of`, or for a step checker the line that says what the
step must return, :data:`STEP_LINES`), and the explorer's own invariants judge what no
checker sees (the socket path, the registry, what a client reads); a failure lists
every checker its history violates, and :data:`CATCHES` says which fire on each
reachable planted bug.  The package: ``machine`` (the state machine), ``drive``
(a class per variant, a trace replayed), ``model`` (its state), ``render`` (trace
and scenario); what it reaches is harness.contract.catalogue, beside the contract lines it names.

Real threads make plain Hypothesis flaky, so every rule is taken only when it
can complete deterministically (its precondition says when) and returns only
once the listener has shown, by its own history event or a failpoint, that the
step took effect.  Waits have safety timeouts and a few generous "at once"
bounds (the contract's own words); nothing sleeps.

Every rule appends a :class:`TraceStep` to the example's trace as it runs, with
the listener events that happened until the next step: the real interleaving.  A
failure raises :class:`ExplorationFailure`, whose message carries that trace
rendered as a scenario YAML (:func:`render_scenario`) between
:data:`SCENARIO_BEGIN` and :data:`SCENARIO_END` (:func:`scenario_in` cuts it
out): it loads with :mod:`harness.scenario.loader` and replays the interleaving
on real processes with ``lastcall run``, without relying on shrinking (where
steps cannot say what the explorer did, :data:`REPLAY_GAPS`, a comment says so).
:func:`run_steps` replays an explorer trace in-process, without Hypothesis.

::

    TestReference = machine_for(VARIANTS["reference"]).TestCase   # a pytest test
    run_state_machine_as_test(machine_for(VARIANTS["no_conn_tracking"]))  # raises ExplorationFailure
"""


from __future__ import annotations

from harness.contract.catalogue import (
    CATCHES,
    HISTORY_CHECKERS,
    LINE_SUSPECTS,
    NOT_JUDGED_HERE,
    OWN_INVARIANT_ONLY,
    REACHABLE,
    REFERENCE_GAPS,
    REPLAY_GAPS,
    STEP_CHECKERS,
    STEP_LINES,
    UNREACHABLE,
)
from harness.explore.drive import machine_for, run_steps
from harness.explore.machine import ListenerMachine, Violation
from harness.explore.render import (
    SCENARIO_BEGIN,
    SCENARIO_END,
    ExplorationFailure,
    TraceStep,
    render_scenario,
    scenario_in,
)

__all__ = [
    "ExplorationFailure", "ListenerMachine", "TraceStep", "Violation", "machine_for", "render_scenario", "run_steps",
    "scenario_in", "SCENARIO_BEGIN", "SCENARIO_END", "REACHABLE", "UNREACHABLE", "REFERENCE_GAPS", "REPLAY_GAPS",
    "LINE_SUSPECTS", "HISTORY_CHECKERS", "NOT_JUDGED_HERE", "CATCHES", "STEP_CHECKERS", "STEP_LINES",
    "OWN_INVARIANT_ONLY",
]
