"""What a run of a scenario may cost, checked before anything starts: the totals no one step shows.

Each step's numbers have their maxima in the schema (harness.scenario.fields, steps); a
scenario of many steps inside them could still make a run hold gigabytes, so a run's
totals are bounded too, counted in file order over its steps (docs/limits.md):

* :data:`MAX_HELD_BYTES`: the bytes of every request the harness's clients build and of
  every reply they are sent (a reply padded to ``reply_size`` and its request, which
  carries the padding, count ``2 * reply_size``; an engine's answer read whole
  :data:`TOKEN_BYTES` a token): what the harness and the listener may hold;
* :data:`MAX_IN_FLIGHT`: pipelines, slow readers and background engine requests playing
  at once (in the background until a ``wait: {returned: NAME}`` joins them);
* :data:`MAX_CONNECTIONS`: the connections the steps open (send, pipeline, idle, flood);
* :data:`MAX_PLAYED`: the steps a run plays, counting the rounds one step expands to.

What only the run can know (a hammer's handshakes, a stress step's replies, a workload's
events) is held to the history's byte budget while it runs (harness.history.Recorder).
Each limit is one problem, at the step where the total first passes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.scenario.errors import KeyPath, Problem
from harness.scenario.schema import Scenario
from harness.scenario.steps import StepBase

__all__ = ["check", "held_bytes", "MAX_HELD_BYTES", "MAX_IN_FLIGHT", "MAX_CONNECTIONS", "MAX_PLAYED"]

MIB = 1 << 20
# requests and replies of one run's clients: 16 replies padded to 1 MB fit; the library's most is 2.3 MiB
MAX_HELD_BYTES = 32 * MIB
MAX_IN_FLIGHT = 16  # pipelines, slow readers, engine requests in the background at once; the library's most: 1
MAX_CONNECTIONS = 1024  # connections one run's steps open, one idle or flood step's maximum; the library's most: 65
MAX_PLAYED = 10_000  # steps one run plays, with the waves, cycles and rounds they expand to; the library's most: 17
FRAME_BYTES = 64  # a request or reply frame without its offsets and texts: header, command, status, keys
OFFSET_BYTES = 9  # one offset in a frame: a msgpack uint64 at most
TOKEN_BYTES = 16  # one token of an engine's answer read whole: its text and its share of the JSON around it
BACKGROUND = ("pipeline",)  # steps that play in the background until a wait joins them (and slow readers)


def _request_bytes(spec: Any, offsets: int) -> int:
    """The bytes of one request and its reply as the harness and the listener hold them."""
    if getattr(spec, "reply_size", None) is not None:
        return 2 * int(spec.reply_size)  # the request carries the padding its reply echoes
    text = len(getattr(spec, "transaction_id", None) or "")
    return 2 * (FRAME_BYTES + OFFSET_BYTES * offsets) + text


def held_bytes(step: StepBase) -> int:
    """The bytes of requests and replies ``step`` makes the harness's clients send and be sent."""
    spec = step.spec
    if step.kind == "send":
        return _request_bytes(spec, len(spec.offsets))
    if step.kind == "pipeline":
        return sum(_request_bytes(spec, len(r.offsets)) for r in spec.requests)
    if step.kind == "engine_request" and not spec.stream:  # its answer is read whole (a stream, line by line)
        return TOKEN_BYTES * int(spec.max_tokens)
    return 0


def _connections(step: StepBase) -> int:
    if step.kind in ("idle", "flood"):
        return int(step.spec.count)
    return 1 if step.kind in ("send", "pipeline") else 0


def _played(step: StepBase) -> tuple[int, str | None]:
    """How many steps ``step`` plays (itself and the rounds it expands to), and the key that says how many."""
    spec = step.spec
    if step.kind == "workload":
        return 1 + 2 * int(spec.waves), "waves"  # a map and an unmap a wave
    if step.kind == "cycle":
        return 1 + int(spec.n), "n"
    if step.kind == "stress":
        return 1 + 3 * int(spec.stops), "stops"  # a restart, a stop and its wait a round
    if step.kind == "start_listener":
        return 1 + int(spec.stops) + 2 * bool(spec.again), "stops"
    return 1, None


def _background(step: StepBase) -> bool:
    spec = step.spec
    return step.kind in BACKGROUND or (step.kind == "send" and spec.fault == "slow_reader") or (
        step.kind == "engine_request" and spec.background)


@dataclass
class _Totals:
    """The running totals of the steps so far, and the problems found (one per limit)."""

    held: int = 0
    connections: int = 0
    played: int = 0
    in_flight: dict[str, int] = field(default_factory=dict)  # step name -> its index
    problems: dict[str, Problem] = field(default_factory=dict)

    def over(self, limit: str, path: KeyPath, message: str) -> None:
        if limit not in self.problems:
            self.problems[limit] = Problem(path, message)


def _mib(n: int) -> str:
    return f"{n // MIB} MiB" if n % MIB == 0 else f"{n / MIB:.1f} MiB"


def _step(t: _Totals, i: int, step: StepBase) -> None:
    at: KeyPath = ("steps", i, step.kind)
    held = held_bytes(step)
    t.held += held
    if held and t.held > MAX_HELD_BYTES:
        key = "reply_size" if getattr(step.spec, "reply_size", None) is not None else {
            "pipeline": "requests", "engine_request": "max_tokens"}.get(step.kind, "offsets")
        t.over("held", (*at, key), f"the requests and replies of the steps up to here come to {_mib(t.held)}, "
               f"over lastcall's limit of {_mib(MAX_HELD_BYTES)} in one run (docs/limits.md), which the harness "
               "and the listener would hold; pad fewer or smaller replies, or split the scenario")
    opened = _connections(step)
    t.connections += opened
    if opened and t.connections > MAX_CONNECTIONS:
        t.over("connections", (*at, "count") if step.kind in ("idle", "flood") else at,
               f"the steps up to here open {t.connections} connections, over lastcall's limit of "
               f"{MAX_CONNECTIONS} in one run (docs/limits.md); open fewer, or split the scenario")
    played, count = _played(step)
    t.played += played
    if t.played > MAX_PLAYED:
        t.over("played", (*at, count) if count else at, f"the steps up to here play {t.played} steps and rounds "
               f"(workload waves, cycles, stress rounds, listener stops), over lastcall's limit of {MAX_PLAYED} "
               "in one run (docs/limits.md); split the scenario")
    _in_flight(t, i, step, at)


def _in_flight(t: _Totals, i: int, step: StepBase, at: KeyPath) -> None:
    if step.kind == "wait" and step.spec.returned is not None:
        t.in_flight.pop(step.spec.returned, None)
    elif _background(step):
        t.in_flight[step.name or f"steps[{i}]"] = i
        if len(t.in_flight) > MAX_IN_FLIGHT:
            t.over("in_flight", at, f"{len(t.in_flight)} background steps (pipelines, slow readers, engine "
                   f"requests) would be in flight here, over lastcall's limit of {MAX_IN_FLIGHT} at once "
                   "(docs/limits.md); join one first with - wait: {returned: NAME}")


def check(sc: Scenario) -> list[Problem]:
    """A problem for each of a run's totals that passes its limit, located at the step where it does."""
    totals = _Totals()
    for i, step in enumerate(sc.steps):
        _step(totals, i, step)
    return list(totals.problems.values())
