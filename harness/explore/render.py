"""An explorer example's trace, and the replayable scenario YAML it renders into.

Every rule of the machine appends a :class:`TraceStep`; :func:`render_scenario`
writes the trace as a scenario that loads with :mod:`harness.scenario.loader` and
replays the interleaving on real processes; :class:`ExplorationFailure` carries it
between :data:`SCENARIO_BEGIN` and :data:`SCENARIO_END` (:func:`scenario_in` cuts it out).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.contract.catalogue import LINE_SUSPECTS
from harness.contract.rig import ContractViolation
from harness.reference import wire
from harness.reference.variants import VARIANTS
from harness.timeouts import AT_ONCE_S, scaled

__all__ = ["ExplorationFailure", "TraceStep", "render_scenario", "scenario_in", "SCENARIO_BEGIN", "SCENARIO_END"]

MiB = 1 << 20
MAP: wire.Command = "map_to_kv_tensors"
# The listener's drain_timeout (scaled): what a stop with nothing parked never needs (the thread exits in about a
# millisecond), the figure the contract's checks give an in-process drain that must finish (SHORT_DRAIN_S of
# harness.contract.lines, unscaled there). A restart or shutdown while a handler is parked waits all of it out
# (the registry stops the old listener with it, then refuses): at 0.3 s those waits were 6 of the 8.5 s of
# tests/test_stateful.py's TestReference.
DRAIN_S = 0.1
# A line-11 replay's probe request: the reference serves it in milliseconds while the other clients idle or stall;
# a head-of-line block leaves it unanswered until the request times out (the player scales it; the default, the
# run's ipc_timeout of 10 s, was most of that replay's run)
PROBE_TIMEOUT_S = 4 * AT_ONCE_S
SCENARIO_BEGIN = "----- replayable scenario (harness.explore) -----"
SCENARIO_END = "----- end of scenario -----"


# ------------------------------------------------------------------- failures
class ExplorationFailure(ContractViolation):
    """An example broke the contract (or a step could not complete); the message has the replayable scenario."""

    def __init__(self, message: str, scenario: str, line: int | None, *, checkers: tuple[str, ...] = ()) -> None:
        super().__init__(f"{message}\n\n{SCENARIO_BEGIN}\n{scenario}{SCENARIO_END}")
        self.scenario = scenario
        self.line = line
        self.checkers = checkers  # the registered checkers violated over the history when it failed


def scenario_in(text: str) -> str | None:
    """The scenario YAML inside a failure's text (an :class:`ExplorationFailure` message), or None."""
    start = text.find(SCENARIO_BEGIN)
    end = text.find(SCENARIO_END, start)
    if start < 0 or end < 0:
        return None
    return text[start + len(SCENARIO_BEGIN):end].lstrip("\n")


# ---------------------------------------------------------------------- trace
@dataclass
class TraceStep:
    """One rule as it ran: its kind, its arguments, and the listener events it saw (filled as the run goes)."""

    kind: str
    args: dict[str, Any] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)


def _offsets(offsets: Sequence[int]) -> str:
    return "[" + ", ".join(f"{o // MiB}MiB" if o else "0" for o in offsets) + "]"


def _seconds(s: float) -> str:
    return f"{round(s * 1000)}ms" if s < 1 else f"{s:g}s"


_R0 = "{rank: 0}"


def _steps_of(step: TraceStep) -> list[str]:
    """The scenario steps (YAML lines, without the list indent) that replay one explorer step.

    A step that began a stop is followed by a ``wait: closed`` for each connection the
    explorer then checked for EOF, bounded as the explorer's check was: in the replay a
    read that is not cancelled at once shows as a late close (reads_cancelled judges it).
    """
    closes = [f"- wait: {{closed: {n}, timeout: {_seconds(2 * AT_ONCE_S)}}}" for n in step.args.get("closes", [])]
    return _lines_of(step) + closes


def _lines_of(step: TraceStep) -> list[str]:
    a = step.args
    k = step.kind
    if k == "connect":
        return [f"- idle: {{to: {_R0}, count: 1, as: {a['name']}}}", f"- wait: {{event: accepted, on: {_R0}}}"]
    if k == "send_header":
        return [f"- send: {{to: {_R0}, cmd: {MAP}, offsets: {_offsets(a['offsets'])}, fault: stall_after_header, "
                f"as: {a['name']}}}", f"- wait: {{event: frame_started, on: {_R0}}}"]
    if k == "send_body":
        return [f"- finish: {a['name']}"]
    if k == "park":
        out = [f"- arm: {{site: backend.{MAP}, on: {_R0}, action: pause, count: 1, as: {a['fault']}}}"]
        if a.get("queued"):
            out.append(f"# explorer: a second map, offsets {_offsets(a['queued'])}, was pipelined behind this one "
                       f"on its connection; steps cannot pipeline a request, so the replay leaves it out (and "
                       f"cannot show what happens to it)")
        return [*out, f"- call: {{op: map, offsets: {_offsets(a['offsets'])}, as: {a['call']}}}",
                f"- wait: {{reached: {a['fault']}}}"]
    if k == "release":
        return [f"- release: {a['fault']}", f"- wait: {{returned: {a['call']}}}",
                *[f"- wait: {{returned: {s}}}" for s in a.get("stops", [])]]
    if k == "stop":
        timeout = "" if a.get("timeout") is None else f", timeout: {_seconds(a['timeout'])}"
        return [f"- stop: {{on: {_R0}{timeout}, as: {a['name']}}}", f"- wait: {{returned: {a['name']}}}"]
    if k == "stop_cleanup_fails":
        return [f"- arm: {{site: cleanup.unlink, on: {_R0}, action: raise, count: 1, as: {a['fault']}}}",
                f"- stop: {{on: {_R0}, as: {a['name']}}}", f"- wait: {{returned: {a['name']}}}"]
    if k == "concurrent_stop":
        return [f"- stop: {{on: {_R0}, timeout: {_seconds(a['timeout_first'])}, as: {a['first']}}}",
                f"- wait: {{event: drain_started, on: {_R0}}}",
                f"- stop: {{on: {_R0}, timeout: {_seconds(a['timeout'])}, as: {a['second']}}}",
                f"- wait: {{returned: {a['second']}}}"]
    if k == "shutdown":
        return [f"- shutdown: {{on: {_R0}, as: {a['name']}}}", f"- wait: {{returned: {a['name']}}}"]
    if k == "restart":
        return [f"- restart: {{on: {_R0}, as: {a['name']}}}", f"- wait: {{returned: {a['name']}}}"]
    if k == "remove_path":
        return [f"- remove: {{what: socket, of: {_R0}}}"]
    if k == "replace_path":
        return [f"- replace: {{what: socket, of: {_R0}}}"]
    raise ValueError(f"unknown explorer step {k!r}")


def _expect(trace: Sequence[TraceStep], probe: bool = False) -> list[str]:
    """What the contract says the replay must show, from the steps taken (``probe``: the last is a plain request)."""
    out: list[str] = ["- requests_served"] if probe else []
    if probe and any(s.kind in ("connect", "send_header") for s in trace[:-1]):
        out.append("- served_while_stalled")
    stops = parks = shutdowns = 0
    conn_open = cancel_judged = drain_false = cleanup_fault = replaced = False
    for s in trace:
        a = s.args
        if s.kind in ("stop", "stop_cleanup_fails", "shutdown", "restart"):
            out.append(f"- stop_result: {{step: {a['name']}, returns: {str(a['returns']).lower()}}}")
        elif s.kind == "concurrent_stop":
            out.append(f"- stop_result: {{step: {a['first']}, returns: true}}")
            out.append(f"- stop_result: {{step: {a['second']}, returns: false}}")
        is_stop = s.kind in ("stop", "stop_cleanup_fails", "concurrent_stop", "shutdown", "restart")
        stops += is_stop
        cancel_judged = cancel_judged or (is_stop and conn_open)
        conn_open = conn_open or s.kind in ("connect", "send_header")
        shutdowns += s.kind == "shutdown"
        parks += s.kind == "park"
        drain_false = drain_false or (s.kind in ("stop", "shutdown", "restart") and not a["returns"])
        cleanup_fault = cleanup_fault or s.kind == "stop_cleanup_fails"
        replaced = replaced or s.kind == "replace_path"
    if stops:
        out.append("- no_late_dispatch")
        if parks:
            out.append("- handler_drained")
        if cancel_judged:
            out.append(f"- reads_cancelled: {{within: {_seconds(AT_ONCE_S)}}}")  # the checker scales it
        if drain_false and not cleanup_fault:  # a failed cleanup has torn down part of the listener on purpose
            out.append("- retained_for_retry")
    if shutdowns:
        out.append("- teardown_deferred")
    if not replaced:  # the file that replaced the socket is the harness's own, left at the path on purpose
        out.append("- no_leftover_paths")
    elif stops:  # ... and teardown must leave it there (the paths snapshot after each stop that returned True)
        out.append("- unlinks_only_own_socket")
    return out


def _block(text: str, indent: str = "  ", limit: int = 1500) -> list[str]:
    text = text if len(text) <= limit else text[:limit] + " ..."
    return [indent + line.rstrip() if line.strip() else "" for line in text.splitlines()] or [indent + "-"]


def render_scenario(trace: Sequence[TraceStep], *, variant: str, failure: str = "", line: int | None = None,
                    drain_timeout: float | None = None) -> str:
    """The scenario YAML that replays ``trace`` (the steps an explorer example ran, in order).

    ``variant`` is the planted bug it ran against (``catches``); on ``reference``
    the suspect of the broken contract ``line`` is named instead, and ``about``
    says the reference itself failed.  Each step carries, as comments, the
    listener events that happened until the next one: the real interleaving.
    """
    steps = ["- start: cluster"]
    probe = line == 11 and bool(trace) and trace[-1].kind in ("connect", "send_header", "park")
    for i, s in enumerate(trace):
        shown = ", ".join(f"{k}={v}" for k, v in s.args.items() if v not in (None, False, []))
        steps.append(f"# [{i + 1}] explorer: {s.kind}" + (f" ({shown})" if shown else ""))
        if probe and i == len(trace) - 1:  # the step that was not served: a plain request replays it
            steps.append("# explorer: this client was not served at once; the replay sends a plain request instead, "
                         "which must be served while the others idle or stall")
            steps.append(f"- send: {{to: {_R0}, cmd: kv_tensors_created, timeout: {_seconds(PROBE_TIMEOUT_S)}, "
                         "as: probe}")
        else:
            steps += _steps_of(s)
        for j in range(0, len(s.events), 6):
            steps.append("#     listener: " + ", ".join(s.events[j:j + 6]))
    catches = variant if variant in VARIANTS and variant != "reference" else LINE_SUSPECTS.get(line or 0,
                                                                                              "no_conn_tracking")
    digest = hashlib.blake2s("\n".join(steps).encode(), digest_size=3).hexdigest()
    name = f"explored-{variant.replace('_', '-')}-{digest}"
    on = "the reference itself (catches names the nearest planted bug)" if variant == "reference" else variant
    about = (f"Recorded by harness.explore, the lifecycle explorer, on {on}: the steps below are the interleaving "
             f"the example ran, in order, with the listener's events as comments."
             + (f"\nIt failed with: {failure}" if failure else ""))
    drain = scaled(DRAIN_S) if drain_timeout is None else drain_timeout
    lines = [f"name: {name}", "about: |-", *_block(about), f"catches: [{catches}]", "topology: {tp: 1, pp: 1}",
             f"config: {{drain_timeout: {_seconds(drain)}}}", "steps:", *("  " + s for s in steps),
             "expect:", *("  " + e for e in _expect(trace, probe))]
    return "\n".join(lines) + "\n"
