"""Checks across a scenario's parts, after each part has validated on its own.

Every ``as:`` name is unique; every reference to one (wait, release, finish, and the
``step``/``faults`` parameters of expect entries) names an earlier step of the right
kind; ``start`` comes once, before anything that needs the cluster; a wait on a
failpoint waits on one that was armed; ranks exist in every run of the matrix; the
planted bugs in ``catches`` exist (or are module:attribute, or any name under a module:attribute target,
which may declare variants of its own: harness.scenario.catches), and the checkers its mapping form names
are expect checkers other than fault_fired; ``target`` names a target (checked by name, nothing
imported).  A handshake scenario (one with a handshake step) drives only the handshake
listener: no worker-listener step, no worker address, and its ``catches`` name
handshake variants.  Each check returns problems; none raises.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass

from harness.events import kind_names
from harness.scenario.errors import KeyPath, Problem, format_path
from harness.scenario.explain import did_you_mean, one_of
from harness.scenario.fields import Worker
from harness.scenario.schema import EXPECT_TYPES, Scenario
from harness.scenario.steps import (
    EVENT_KINDS,
    HANDSHAKE_STEPS,
    WITHHOLDING_FAULTS,
    WORKER_STEPS,
    StepBase,
    drives_engine,
)

__all__ = ["check"]

BEFORE_START = ("hold_port",)  # steps that make sense before the cluster exists
# async steps: wait returned joins them
RETURNS = ("call", "stop", "shutdown", "restart", "exit", "engine_request", "engine_start")
WAITABLE = (*RETURNS, "pipeline", "send", "start_listener")  # what wait returned joins (send: a slow reader's)
CONNECTS = ("send", "idle", "flood")  # steps that open connections: wait closed watches them
STOPS = ("stop", "shutdown", "restart", "start_listener")  # steps stop_result / stop_latency judge
# the same in a handshake scenario: every step that records its return, and the starts and stops of the listener
HS_RETURNS = ("handshake_shutdown", "handshake", "handshake_start", "malformed_handshake", "cycle")
HS_STOPS = ("handshake_start", "handshake_shutdown", "cycle")
ARM_EXAMPLE = "- arm: {site: listener.frame_read, action: pause, as: f1}, then - wait: {reached: f1}"


def _sub_stop(step: str, named: dict[str, _Named]) -> bool:
    """Whether ``step`` is NAME.stopN of a start_listener step NAME with at least N stops, or NAME.again (and its
    NAME.again.stop1) of one with ``again``."""
    for tail in (".again", ".again.stop1"):
        got = named.get(step[:-len(tail)]) if step.endswith(tail) else None
        if got is not None:
            return got.step.kind == "start_listener" and bool(got.step.spec.again)
    base, dot, n = step.rpartition(".stop")
    got = named.get(base) if dot and n.isdigit() else None
    return got is not None and got.step.kind == "start_listener" and 1 <= int(n) <= got.step.spec.stops


@dataclass(frozen=True)
class _Named:
    index: int
    step: StepBase


def _kinds(kinds: Collection[str]) -> str:
    words = [f"{k}" for k in kinds]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


class _Refs:
    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.named: dict[str, _Named] = {}
        self.problems: list[Problem] = []
        # a handshake scenario: the index of its first handshake step
        self.handshake = next((i for i, s in enumerate(sc.steps) if s.kind in HANDSHAKE_STEPS), None)
        self.engine = drives_engine(sc.steps)

    def add(self, path: KeyPath, message: str, hint: str | None = None, *, at_key: bool = False) -> None:
        """One problem at ``path``'s value, or (``at_key``) at its key."""
        self.problems.append(Problem(path, message, hint=hint, at=path if at_key else None))

    def ref(self, path: KeyPath, name: str, kinds: Collection[str], before: int | None) -> _Named | None:
        """The step ``name`` refers to, if it is of one of ``kinds`` (and before step ``before``)."""
        fits = [n for n, s in self.named.items()
                if s.step.kind in kinds and (before is None or s.index < before)]
        target = self.named.get(name)
        article = "an" if before is not None or _kinds(kinds)[0] in "aeiou" else "a"
        wanted = f"the as: name of {article}{' earlier' if before is not None else ''} {_kinds(kinds)} step"
        if target is None or (before is not None and target.index >= before):
            known = f" ({', '.join(fits)})" if fits else f"; there is no {_kinds(kinds)} step"
            where = "" if target is None else f" (steps[{target.index}] comes later)"
            self.add(path, f"undefined step name {name!r}{where}; expected {wanted}{known}"
                           f"{did_you_mean(name, fits)}")
            return None
        if target.step.kind not in kinds:
            self.add(path, f"{name!r} is a {target.step.kind} step (steps[{target.index}]); expected {wanted}"
                           f"{did_you_mean(name, fits)}")
            return None
        return target

    # ------------------------------------------------------------------ steps
    def steps(self) -> None:
        started = early = False
        for i, step in enumerate(self.sc.steps):
            at: KeyPath = ("steps", i)
            if step.kind == "start":
                if started and not early:
                    self.add(at, "a second start step; the cluster is started once",
                             hint="restart one worker with - restart: {on: {rank: 0}}")
                started = True
            elif not started and step.kind not in BEFORE_START:
                self.add(at, f"{step.kind} before start; only {_kinds(BEFORE_START)} may come before "
                             f"'- start: cluster'", hint="move '- start: cluster' before this step")
                started = early = True  # one problem is enough
            self.refs_of(i, step)
            self.listener_of(i, step)
            self.pause_of(i, step)
            if step.name is not None:
                first = self.named.get(step.name)
                if first is not None:
                    self.add((*at, step.kind, "as"), f"duplicate step name {step.name!r} "
                             f"(first at {format_path(('steps', first.index))}); names must be unique")
                else:
                    self.named[step.name] = _Named(i, step)
            self.workers_of(at, step)
        if not started:
            self.add(("steps",), "no start step; expected '- start: cluster' before the steps that use it",
                     hint="add '- start: cluster' as the first step")

    def refs_of(self, i: int, step: StepBase) -> None:
        at: KeyPath = ("steps", i, step.kind)
        if step.kind == "release":
            self.ref(at, step.spec, ("arm",), i)
        elif step.kind == "resume":
            self.ref(at, step.spec, ("pause",), i)
        elif step.kind == "finish":
            target = self.ref(at, step.spec, ("send",), i)
            if target is not None and target.step.spec.fault not in WITHHOLDING_FAULTS:
                self.add(at, f"{step.spec!r} withholds nothing (fault {target.step.spec.fault!r}); expected "
                             f"a send with fault {_kinds(WITHHOLDING_FAULTS)}")
        elif step.kind == "wait":
            self.wait(i, step)
        elif step.kind == "pipeline" and step.spec.each_after is not None:
            self.ref((*at, "each_after"), step.spec.each_after, ("arm",), i)
        elif step.kind == "stop_hammer":
            self.ref(at, step.spec, ("hammer",), i)
        elif step.kind == "handshake_start" and isinstance(step.spec.port, str):
            self.ref((*at, "port"), step.spec.port, ("hold_port", "handshake_start"), i)

    def side_channel(self) -> None:
        """config.side_channel_port given as a name: a hold_port step before the start (the engine is launched
        by the start, on the port that step holds)."""
        port = self.sc.config.side_channel_port
        if isinstance(port, str):
            start = next((i for i, s in enumerate(self.sc.steps) if s.kind == "start"), len(self.sc.steps))
            self.ref(("config", "side_channel_port"), port, ("hold_port",), start)

    def listener_of(self, i: int, step: StepBase) -> None:
        """A handshake scenario has an engine and a peer, no workers: no worker-listener step in it."""
        if self.handshake is None or step.kind not in WORKER_STEPS:
            return
        first = self.sc.steps[self.handshake].kind
        self.add(("steps", i, step.kind), f"{step.kind} drives the worker listener, but this is a handshake "
                 f"scenario ({first} at steps[{self.handshake}]); one scenario drives one listener",
                 hint="use handshake_start, handshake, hammer, malformed_handshake, handshake_shutdown or cycle "
                      "here, or put this step in a scenario of its own")

    def pause_of(self, i: int, step: StepBase) -> None:
        """A pause names the process its run has: to (and index) in an engine run, of in a worker run."""
        if step.kind != "pause":
            return
        at: KeyPath = ("steps", i, "pause")
        if self.handshake is not None:
            if step.spec.of is None:  # (an of: is reported as a worker a handshake scenario lacks)
                self.add(at, "a handshake run has no process a pause can name: a pause names a worker of a worker "
                         "run (of) or a process of an engine's tree (to)")
        elif self.engine and step.spec.of is not None:
            self.add((*at, "of"), "an engine run has no reference workers; expected to: api_server, engine_core or "
                     "worker (and index) naming a process of the engine's tree")
        elif not self.engine and step.spec.of is None:
            self.add(at, "a worker run pauses one of its workers; expected of: {rank, pp} (to and index name a "
                     "process of an engine's tree, after start: engine)",
                     hint="- pause: {of: {rank: 0}, resume_after: 2s, as: p1}")

    def wait(self, i: int, step: StepBase) -> None:
        wait, at = step.spec, ("steps", i, "wait")
        if wait.reached is not None:
            armed = [n for n, s in self.named.items() if s.step.kind == "arm"]
            target = self.named.get(wait.reached)
            if target is None or target.step.kind != "arm":
                what = "no earlier step has that name" if target is None else f"it names a {target.step.kind} step"
                later = next((j for j, s in enumerate(self.sc.steps) if j > i and s.kind == "arm"
                              and s.name == wait.reached), None)
                if later is not None:
                    what = f"it is armed only later, at steps[{later}]"
                self.add((*at, "reached"), f"{wait.reached!r} is never armed before this wait: {what}; "
                         f"expected the as: name of an earlier arm step"
                         f"{' (' + ', '.join(armed) + ')' if armed else ''}{did_you_mean(wait.reached, armed)}",
                         hint="move the arm step before the wait" if later is not None else
                         f"arm a failpoint and wait for it: {ARM_EXAMPLE}")
        elif wait.returned is not None:
            self.ref((*at, "returned"), wait.returned, WAITABLE if self.handshake is None else HS_RETURNS, i)
        elif wait.closed is not None:
            self.ref((*at, "closed"), wait.closed, CONNECTS, i)
        if wait.since is not None and wait.since not in self.named:
            later = next((j for j, s in enumerate(self.sc.steps) if j > i and s.name == wait.since), None)
            where = "" if later is None else f" (steps[{later}] comes later)"
            self.add((*at, "since"), f"undefined step name {wait.since!r}{where}; expected the as: name of an "
                     f"earlier step{did_you_mean(wait.since, list(self.named))}")
        if wait.event is not None and wait.event not in kind_names() and ":" not in self.sc.target:
            # (a module:attribute target may declare kinds of its own: known once it is loaded, at run time)
            self.add((*at, "event"), f"unknown event kind {wait.event!r}; expected {one_of(EVENT_KINDS)}"
                     f"{did_you_mean(wait.event, EVENT_KINDS)}",
                     hint="a target that emits a kind of its own declares it in its events (docs/events.md)")

    # ---------------------------------------------------------------- workers
    def workers_of(self, at: KeyPath, step: StepBase) -> None:
        if self.handshake is not None:
            if step.kind not in WORKER_STEPS:  # (those are reported once, as the wrong listener)
                for key, _worker in _workers(step.spec):
                    self.add((*at, step.kind, key), f"a handshake scenario has no workers, only the engine "
                             f"(which owns the listener) and its peer; expected {key}: engine")
            if step.kind == "handshake":
                self.check_ranks((*at, step.kind), step.spec)
            return
        for key, worker in _workers(step.spec):
            self.check_worker((*at, step.kind, key), worker)

    def check_ranks(self, path: KeyPath, spec: object) -> None:
        """A handshake asks for (pp, tp): the engine serves one agent per rank of the topology."""
        axes = self.sc.topology.axes()
        for field in ("pp", "tp"):
            value, size = getattr(spec, field), min(axes[field])
            if value >= size:
                self.add((*path, field), f"{field} {value} does not exist when {field} is {size}; expected "
                         f"{field} < {size} (topology.{field}: {getattr(self.sc.topology, field)})")

    def check_worker(self, path: KeyPath, worker: Worker) -> None:
        axes = self.sc.topology.axes()
        for field, size in (("rank", min(axes["tp"])), ("pp", min(axes["pp"]))):
            value = getattr(worker, field)
            if value >= size:
                axis = "tp" if field == "rank" else "pp"
                self.add((*path, field), f"{field} {value} does not exist when {axis} is {size}; "
                         f"expected {field} < {size} (topology.{axis}: {getattr(self.sc.topology, axis)})")

    # ----------------------------------------------------------------- expect
    def expect(self) -> None:
        for j, entry in enumerate(self.sc.expect):
            at: KeyPath = ("expect", j, entry.checker)
            step = getattr(entry.params, "step", None)
            if isinstance(step, str) and not _sub_stop(step, self.named):  # NAME.stopN: a stop of start_listener NAME
                self.ref((*at, "step"), step, STOPS if self.handshake is None else HS_STOPS, None)
            request = getattr(entry.params, "request", None)
            if isinstance(request, str):
                self.ref((*at, "request"), request, ("handshake",), None)
            faults = getattr(entry.params, "faults", None)
            for k, name in enumerate(faults or []):
                self.ref((*at, "faults", k), name, ("arm",), None)
            for k, name in enumerate(getattr(entry.params, "calls", None) or []):
                self.ref((*at, "calls", k), name, ("call",), None)
            for key in ("found", "deleted"):
                name = getattr(entry.params, key, None)
                if isinstance(name, str):
                    self.ref((*at, key), name, ("ctl",), None)

    def target(self) -> None:
        """The target: key names a target (checked without importing it: harness.targets.names)."""
        from harness.targets.names import check_target

        why = check_target(self.sc.target)
        if why is not None:
            self.add(("target",), why)

    def catches(self, variants: Collection[str]) -> None:
        """Each planted bug: a variant of the listener this scenario drives, or module:attribute; under a
        module:attribute target (which may declare variants of its own) any name, resolved at collection."""
        # static names: the registry imports zmq and the listener
        from harness.targets.names import ENGINE_VARIANTS, HANDSHAKE_VARIANTS, check_target

        worker_bugs = [v for v in variants if v != "reference"]
        handshake_bugs = [v for v in HANDSHAKE_VARIANTS if v != "reference"]
        bugs, other = (handshake_bugs, worker_bugs) if self.handshake is not None else (worker_bugs, handshake_bugs)
        if drives_engine(self.sc.steps):  # an engine run: the stand-in engine's variants
            bugs, other = list(ENGINE_VARIANTS[1:]), [*worker_bugs, *handshake_bugs]
        listeners = ("the worker listener", "a handshake listener")
        this, that = listeners[::-1] if self.handshake is not None else listeners
        own = ":" in self.sc.target  # a module:attribute target may declare variants of its own
        mapping = isinstance(self.sc.catches, dict)
        for k, name in enumerate(self.sc.catch_names()):
            at: KeyPath = ("catches", name if mapping else k)
            if ":" in name:
                why = check_target(name)
                if why is not None:
                    self.add(at, why.replace("target ", "planted bug ", 1), at_key=mapping)
            elif name == "reference":
                self.add(at, "'reference' is the correct implementation, not a planted bug; "
                         f"expected {one_of(bugs)}", at_key=mapping)
            elif own:
                pass
            elif name in other and name not in bugs:
                self.add(at, f"{name!r} is a planted bug of {that}, but this scenario drives {this}; "
                         f"expected {one_of(bugs)}{did_you_mean(name, bugs)}", at_key=mapping)
            elif name not in bugs:
                self.add(at, f"unknown planted bug {name!r}; expected {one_of(bugs)}{did_you_mean(name, bugs)}",
                         hint="or give module:attribute naming a target, or a variant your target declares",
                         at_key=mapping)

    def catch_checkers(self) -> None:
        """The mapping form's checkers: each one of the scenario's expect checkers, and not fault_fired."""
        if not isinstance(self.sc.catches, dict):
            return
        expected = list(dict.fromkeys(e.checker for e in self.sc.expect if e.checker != "fault_fired"))
        for name, checkers in self.sc.catches.items():
            for k, chk in enumerate(checkers):
                at: KeyPath = ("catches", name, k)
                if chk == "fault_fired":
                    self.add(at, "fault_fired cannot catch a bug: it fires when an armed fault never fired, "
                             f"which makes the run vacuous; expected {one_of(expected)}")
                elif chk not in expected:
                    known = chk in EXPECT_TYPES
                    what = f"{chk!r} is not in this scenario's expect" if known else f"unknown checker {chk!r}"
                    self.add(at, f"{what}: a bug is caught by a checker that judges the run; expected "
                             f"{one_of(expected)}{did_you_mean(chk, expected)}",
                             hint=f"add '- {chk}' to expect" if known else None)


def _workers(spec: object) -> Iterator[tuple[str, Worker]]:
    for key in ("to", "on", "of", "target"):
        value = getattr(spec, key, None)
        if isinstance(value, Worker):
            yield key, value


def check(sc: Scenario, variants: Collection[str] | None = None) -> list[Problem]:
    """Every cross-reference problem in ``sc``; ``variants`` (known planted bugs) None skips the name checks
    (catches and target)."""
    refs = _Refs(sc)
    refs.steps()
    refs.side_channel()
    refs.expect()
    if variants is not None:
        refs.target()
        refs.catches(variants)
    refs.catch_checkers()
    return refs.problems
