"""The steps of a scenario: each is a one-key mapping, ``- send: {...}``, run in order.

A step's key is its kind; its value is the step's parameters (a mapping, or a name
for ``start``, ``release``, ``finish`` and ``stop_hammer``).  ``as:`` names a step so
that a later step or an ``expect`` entry can refer to it.  There is no ``sleep``:
steps synchronise with ``wait`` on a failpoint, an event, a return or a close.

A scenario with any of :data:`HANDSHAKE_STEPS` drives a handshake listener (an
engine owning it and a peer engine) instead of the worker listener::

    - hold_port: {as: held}
    - start: cluster
    - handshake_start: {port: held, as: l1}     # PortInUse at once, not a hang
    - handshake_start: {as: l2}                 # any free port
    - handshake: {pp: 0, tp: 0, as: h1}         # the peer fetches metadata
    - hammer: {as: traffic}                     # ... and then back to back
    - handshake_shutdown: {as: s1}
    - wait: {returned: s1}
    - stop_hammer: traffic
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from harness.events import kind_names
from harness.scenario.client_spec import (
    AS_FIELD,
    GROUP_FIELD,
    OFFSETS_FIELD,
    READER_FAULTS,
    SEND_FAULTS,
    WITHHOLDING_FAULTS,
    Connections,
    Pipeline,
    Pipelined,
    Send,
    StaleSocket,
    StartListener,
)
from harness.scenario.engine_spec import EngineRequest, EngineRestart, EngineSignal, EngineStart, Pause, WaitGone
from harness.scenario.fields import (
    MAX_COUNT,
    WORKER_0,
    Duration,
    SiteName,
    Size,
    StepName,
    Strict,
    Worker,
    WorkerOrAll,
    WorkerOrEngine,
)
from harness.scenario.handshake_spec import (
    Cycle,
    Hammer,
    Handshake,
    HandshakeShutdown,
    HandshakeStart,
    MalformedHandshake,
    word_or_number,
)
from harness.scenario.machine_spec import FdLimit, MeasureIdle
from harness.scenario.stress_spec import Stress

__all__ = [
    "Step", "StepBase", "STEP_TYPES", "SEND_FAULTS", "WITHHOLDING_FAULTS", "FAILPOINT_ACTIONS", "EVENT_KINDS",
    "Send", "Connections", "Arm", "Call", "Wait", "Stop", "Shutdown", "Restart", "Kill", "PathFault",
    "HoldPort", "Workload", "HandshakeStart", "Handshake", "Hammer", "MalformedHandshake", "HandshakeShutdown",
    "Cycle", "EngineRequest", "EngineSignal", "Pause", "WaitGone", "EngineRestart", "EngineStart", "ENGINE_STEPS",
    "HANDSHAKE_STEPS", "WORKER_STEPS", "is_handshake", "Pipeline", "Pipelined", "StaleSocket", "StartListener",
    "READER_FAULTS",
]

Action = Literal["pause", "raise", "delay", "crash", "pass", "stop_listener"]  # failpoints.ACTIONS but call,
# plus stop_listener: the handler that hits the site calls stop on its own listener (stop from a handler)
FAILPOINT_ACTIONS: tuple[str, ...] = Action.__args__  # type: ignore[attr-defined]
EVENT_KINDS: tuple[str, ...] = kind_names()  # the built-in vocabulary (harness.events); a target declares its own


def _event_enum(schema: dict[str, Any]) -> None:
    """The JSON Schema of ``wait: {event: ...}``: a string from harness.events (or null)."""
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") == "string":
            branch["enum"] = list(EVENT_KINDS)


# ------------------------------------------------------------------ parameters
class Arm(Strict):
    """Arm a failpoint site in a target process over the control channel."""

    site: SiteName = Field(description="where, e.g. backend.map_to_kv_tensors or listener.frame_read")
    on: WorkerOrEngine = Field(WORKER_0, description="the process: a worker {rank, pp} or engine")
    action: Action = Field("pause", description="pause (until released), raise, delay, crash or pass")
    count: int | None = Field(None, ge=1, le=MAX_COUNT,
                              description="only the next N hits take the action; default every hit")
    delay: Duration = Field(0.0, description="for action delay: how long each hit is held")
    as_: StepName | None = AS_FIELD

    @model_validator(mode="after")
    def _delay_matches_action(self) -> Arm:
        if self.action == "delay" and self.delay <= 0:
            raise ValueError("action 'delay' needs delay: greater than 0, e.g. delay: 100ms")
        if self.action != "delay" and self.delay > 0:
            raise ValueError(f"delay: is only used by action 'delay', not {self.action!r}; remove it")
        return self


class Call(Strict):
    """An engine-side client call, started without waiting; ``wait: {returned: NAME}`` joins it."""

    op: Literal["map", "unmap", "kv_tensors_created"] = Field(description="the engine client's operation")
    offsets: list[Size] = OFFSETS_FIELD
    group_id: int = GROUP_FIELD
    as_: StepName | None = AS_FIELD


class Wait(Strict):
    """Block until one thing happens; exactly one of reached, event, returned, closed."""

    reached: StepName | None = Field(None, description="an arm step's name: wait until its site is hit")
    hits: int = Field(1, ge=1, le=MAX_COUNT, description="with reached: wait for this many hits in all")
    event: str | None = Field(None, description="an event kind, e.g. stop_started (see docs/events.md)",
                              json_schema_extra=_event_enum)
    on: WorkerOrEngine | None = Field(None, description="with event: only events from this process")
    returned: StepName | None = Field(None, description="a call, stop, shutdown or restart step's name")
    closed: StepName | None = Field(None, description="a send, idle or flood step's name: the listener closed it")
    timeout: Duration | None = Field(None, description="a safety net, not a timer; default config.ipc_timeout")

    @property
    def what(self) -> str:
        """Which of reached, event, returned, closed is set."""
        return next(k for k in ("reached", "event", "returned", "closed") if getattr(self, k) is not None)

    @model_validator(mode="after")
    def _exactly_one(self) -> Wait:
        given = [k for k in ("reached", "event", "returned", "closed") if getattr(self, k) is not None]
        if len(given) != 1:
            found = " and ".join(given) if given else "none"
            raise ValueError(f"expected exactly one of: reached, event, returned, closed; found {found}")
        if self.on is not None and self.event is None:
            raise ValueError("on: only applies to event waits; remove it")
        if self.hits != 1 and self.reached is None:
            raise ValueError("hits: only applies to reached waits; remove it")
        return self


class Stop(Strict):
    """Stop listeners (async): ``wait: {returned: NAME}`` joins it, stop_result/stop_latency judge it."""

    on: WorkerOrAll = Field("all", description="all workers, or one {rank, pp}")
    timeout: Duration | None = Field(None, description="the drain timeout passed to stop; default the config's")
    as_: StepName | None = AS_FIELD


class Shutdown(Strict):
    """The integration's shutdown (stop, then allocator teardown if drained), async."""

    on: WorkerOrAll = Field("all", description="all workers, or one {rank, pp}")
    as_: StepName | None = AS_FIELD


class Restart(Strict):
    """start() again on a worker whose listener is registered (async)."""

    on: Worker = Field(WORKER_0, description="the worker {rank, pp}")
    as_: StepName | None = AS_FIELD


class Exit(Strict):
    """Ask worker processes to end (async); ``shutdown: false`` leaves their listeners to the exit hook."""

    on: WorkerOrAll = Field("all", description="all workers, or one {rank, pp}")
    shutdown: bool = Field(False, description="run the integration shutdown first (false: the exit hook must)")
    as_: StepName | None = AS_FIELD


class Ctl(Strict):
    """``lastcall ctl`` on this run's root: list what its instance left (value: instances with their
    artifacts and owner states) or delete it (value: the paths removed); as a user would after a crash."""

    action: Literal["list", "delete"] = Field(description="list the run's instance, or delete it")
    force: bool = Field(False, description="delete even while an owner is alive (ctl delete --force)")
    as_: StepName | None = AS_FIELD


class Kill(Strict):
    """Send a signal to the engine or a worker process."""

    target: WorkerOrEngine = Field(description="engine, or a worker {rank, pp}")
    signal: Literal["SIGKILL", "SIGTERM", "SIGINT"] = Field("SIGKILL", description="the signal")


class PathFault(Strict):
    """Remove (``remove``) or replace (``replace``) a worker's socket file or its directory while live."""

    what: Literal["socket", "dir"] = Field("socket", description="the socket file, or its directory")
    of: Worker = Field(WORKER_0, description="whose: a worker {rank, pp}")


class HoldPort(Strict):
    """Hold a TCP port before start (handshake scenarios); 0 picks a free one."""

    port: int = Field(0, ge=0, le=65535, description="the port; 0 = any free port")
    as_: StepName | None = AS_FIELD


class Workload(Strict):
    """Generated map/unmap waves from the scenario's seed."""

    waves: int = Field(5, ge=1, le=1000, description="how many waves")
    pages: int = Field(8, ge=1, le=1024, description="pages mapped per wave")
    stop_at: Annotated[
        Annotated[Literal["random", "never"], Tag("Name")] | Annotated[int, Tag("Number"), Field(ge=0, le=1000)],
        Discriminator(word_or_number),
    ] = Field("random", description="the wave during which stop begins: random (seeded), never, or its index")
    as_: StepName | None = AS_FIELD


# -------------------------------------------------------------------- the steps
class StepBase(Strict):
    """One step: a mapping with exactly one key, its ``kind``."""

    kind: ClassVar[str]

    @property
    def spec(self) -> Any:
        """The step's value: its parameter model, or the name it was given."""
        return getattr(self, self.kind)

    @property
    def name(self) -> str | None:
        """The step's ``as:`` name, if any."""
        return getattr(self.spec, "as_", None)


class StartStep(StepBase):
    kind: ClassVar[str] = "start"
    start: Literal["cluster", "engine"] = Field(
        description="start the run's processes (cluster: the engine and its tp x pp workers; engine: the "
                    "target's engine tree, launched by the harness); first, once")


class SendStep(StepBase):
    kind: ClassVar[str] = "send"
    send: Send = Field(description=Send.__doc__)


class IdleStep(StepBase):
    kind: ClassVar[str] = "idle"
    idle: Connections = Field(description="open connections that send nothing")


class FloodStep(StepBase):
    kind: ClassVar[str] = "flood"
    flood: Connections = Field(description="open connections as fast as possible (e.g. during stop)")


class ArmStep(StepBase):
    kind: ClassVar[str] = "arm"
    arm: Arm = Field(description=Arm.__doc__)


class CallStep(StepBase):
    kind: ClassVar[str] = "call"
    call: Call = Field(description=Call.__doc__)


class WaitStep(StepBase):
    kind: ClassVar[str] = "wait"
    wait: Wait = Field(description=Wait.__doc__)


class ReleaseStep(StepBase):
    kind: ClassVar[str] = "release"
    release: StepName = Field(description="an arm step's name: let its parked threads go on (a delay ends early)")


class StopStep(StepBase):
    kind: ClassVar[str] = "stop"
    stop: Stop = Field(description=Stop.__doc__)


class ShutdownStep(StepBase):
    kind: ClassVar[str] = "shutdown"
    shutdown: Shutdown = Field(description=Shutdown.__doc__)


class RestartStep(StepBase):
    kind: ClassVar[str] = "restart"
    restart: Restart = Field(description=Restart.__doc__)


class ExitStep(StepBase):
    kind: ClassVar[str] = "exit"
    exit: Exit = Field(description=Exit.__doc__)


class KillStep(StepBase):
    kind: ClassVar[str] = "kill"
    kill: Kill = Field(description=Kill.__doc__)


class RemoveStep(StepBase):
    kind: ClassVar[str] = "remove"
    remove: PathFault = Field(description="delete a worker's socket file or directory while it is live")


class ReplaceStep(StepBase):
    kind: ClassVar[str] = "replace"
    replace: PathFault = Field(description="put a different file at a worker's socket path while it is live")


class HoldPortStep(StepBase):
    kind: ClassVar[str] = "hold_port"
    hold_port: HoldPort = Field(description=HoldPort.__doc__)


class PipelineStep(StepBase):
    kind: ClassVar[str] = "pipeline"
    pipeline: Pipeline = Field(description=Pipeline.__doc__)


class StaleSocketStep(StepBase):
    kind: ClassVar[str] = "stale_socket"
    stale_socket: StaleSocket = Field(description=StaleSocket.__doc__)


class StartListenerStep(StepBase):
    kind: ClassVar[str] = "start_listener"
    start_listener: StartListener = Field(description=StartListener.__doc__)


class FinishStep(StepBase):
    kind: ClassVar[str] = "finish"
    finish: StepName = Field(description="a send step's name: send the rest of its withheld frame")


class StressStep(StepBase):
    kind: ClassVar[str] = "stress"
    stress: Stress = Field(description=Stress.__doc__)


class MeasureIdleStep(StepBase):
    kind: ClassVar[str] = "measure_idle"
    measure_idle: MeasureIdle = Field(description=MeasureIdle.__doc__)


class FdLimitStep(StepBase):
    kind: ClassVar[str] = "fd_limit"
    fd_limit: FdLimit = Field(description=FdLimit.__doc__)


class WorkloadStep(StepBase):
    kind: ClassVar[str] = "workload"
    workload: Workload = Field(description=Workload.__doc__)


class CtlStep(StepBase):
    kind: ClassVar[str] = "ctl"
    ctl: Ctl = Field(description=Ctl.__doc__)


class HandshakeStartStep(StepBase):
    kind: ClassVar[str] = "handshake_start"
    handshake_start: HandshakeStart = Field(description=HandshakeStart.__doc__)


class HandshakeStep(StepBase):
    kind: ClassVar[str] = "handshake"
    handshake: Handshake = Field(description=Handshake.__doc__)


class HammerStep(StepBase):
    kind: ClassVar[str] = "hammer"
    hammer: Hammer = Field(description=Hammer.__doc__)


class StopHammerStep(StepBase):
    kind: ClassVar[str] = "stop_hammer"
    stop_hammer: StepName = Field(description="a hammer step's name: the peer stops after its handshake in flight")


class MalformedHandshakeStep(StepBase):
    kind: ClassVar[str] = "malformed_handshake"
    malformed_handshake: MalformedHandshake = Field(description=MalformedHandshake.__doc__)


class HandshakeShutdownStep(StepBase):
    kind: ClassVar[str] = "handshake_shutdown"
    handshake_shutdown: HandshakeShutdown = Field(description=HandshakeShutdown.__doc__)


class CycleStep(StepBase):
    kind: ClassVar[str] = "cycle"
    cycle: Cycle = Field(description=Cycle.__doc__)


class EngineRequestStep(StepBase):
    kind: ClassVar[str] = "engine_request"
    engine_request: EngineRequest = Field(description=EngineRequest.__doc__)


class EngineSignalStep(StepBase):
    kind: ClassVar[str] = "engine_signal"
    engine_signal: EngineSignal = Field(description=EngineSignal.__doc__)


class PauseStep(StepBase):
    kind: ClassVar[str] = "pause"
    pause: Pause = Field(description=Pause.__doc__)


class ResumeStep(StepBase):
    kind: ClassVar[str] = "resume"
    resume: StepName = Field(description="a pause step's name: resume (SIGCONT) the process it paused, now")


class WaitGoneStep(StepBase):
    kind: ClassVar[str] = "wait_gone"
    wait_gone: WaitGone = Field(description=WaitGone.__doc__)


class EngineRestartStep(StepBase):
    kind: ClassVar[str] = "engine_restart"
    engine_restart: EngineRestart = Field(description=EngineRestart.__doc__)


class EngineStartStep(StepBase):
    kind: ClassVar[str] = "engine_start"
    engine_start: EngineStart = Field(description=EngineStart.__doc__)


_STEPS: tuple[type[StepBase], ...] = (
    EngineRequestStep, EngineSignalStep, WaitGoneStep, EngineRestartStep, EngineStartStep, PauseStep, ResumeStep,
    StartStep, SendStep, IdleStep, FloodStep, ArmStep, CallStep, WaitStep, ReleaseStep, StopStep, ShutdownStep,
    RestartStep, KillStep, RemoveStep, ReplaceStep, HoldPortStep, FinishStep, WorkloadStep, StressStep, ExitStep,
    HandshakeStartStep, HandshakeStep, HammerStep, StopHammerStep, MalformedHandshakeStep, HandshakeShutdownStep,
    CycleStep, CtlStep, PipelineStep, StaleSocketStep, StartListenerStep, MeasureIdleStep, FdLimitStep,
)
STEP_TYPES: dict[str, type[StepBase]] = {c.kind: c for c in sorted(_STEPS, key=lambda c: c.kind)}  # alphabetical
# Steps that drive a handshake listener: a scenario with any of them is a handshake scenario (an engine owning
# the listener and a peer engine; harness.scenario.handshake_steps).  hold_port, arm, release, wait and kill (of the
# engine) work in both kinds of scenario; the worker-listener steps below work only without these.
HANDSHAKE_STEPS = ("handshake_start", "handshake", "hammer", "stop_hammer", "malformed_handshake",
                   "handshake_shutdown", "cycle")
# harness.scenario.engine_steps (their parameters: harness.scenario.engine_spec)
ENGINE_STEPS = ("engine_request", "engine_signal", "wait_gone", "engine_restart", "engine_start", "pause", "resume")
WORKER_STEPS = ("send", "idle", "flood", "call", "stop", "shutdown", "restart", "exit", "finish", "remove", "replace",
                "workload", "ctl", "pipeline", "stale_socket", "start_listener", "stress", "measure_idle", "fd_limit")


def is_handshake(steps: Iterable[StepBase]) -> bool:
    """Whether these steps drive a handshake listener (rather than the worker listener)."""
    return any(step.kind in HANDSHAKE_STEPS for step in steps)


def _step_kind(value: object) -> str | None:
    if isinstance(value, StepBase):
        return value.kind
    if isinstance(value, dict) and len(value) == 1:
        return str(next(iter(value)))
    return None


Step = Annotated[
    Annotated[ArmStep, Tag("arm")] | Annotated[CallStep, Tag("call")] | Annotated[CtlStep, Tag("ctl")]
    | Annotated[CycleStep, Tag("cycle")] | Annotated[EngineRequestStep, Tag("engine_request")]
    | Annotated[EngineRestartStep, Tag("engine_restart")] | Annotated[EngineSignalStep, Tag("engine_signal")]
    | Annotated[EngineStartStep, Tag("engine_start")] | Annotated[PauseStep, Tag("pause")]
    | Annotated[ResumeStep, Tag("resume")]
    | Annotated[WaitGoneStep, Tag("wait_gone")]
    | Annotated[ExitStep, Tag("exit")] | Annotated[FinishStep, Tag("finish")] | Annotated[FloodStep, Tag("flood")]
    | Annotated[HammerStep, Tag("hammer")] | Annotated[HandshakeStep, Tag("handshake")]
    | Annotated[HandshakeShutdownStep, Tag("handshake_shutdown")]
    | Annotated[HandshakeStartStep, Tag("handshake_start")] | Annotated[HoldPortStep, Tag("hold_port")]
    | Annotated[IdleStep, Tag("idle")] | Annotated[KillStep, Tag("kill")]
    | Annotated[MalformedHandshakeStep, Tag("malformed_handshake")] | Annotated[ReleaseStep, Tag("release")]
    | Annotated[PipelineStep, Tag("pipeline")] | Annotated[StaleSocketStep, Tag("stale_socket")]
    | Annotated[StartListenerStep, Tag("start_listener")]
    | Annotated[RemoveStep, Tag("remove")] | Annotated[ReplaceStep, Tag("replace")]
    | Annotated[RestartStep, Tag("restart")] | Annotated[SendStep, Tag("send")]
    | Annotated[ShutdownStep, Tag("shutdown")] | Annotated[StartStep, Tag("start")]
    | Annotated[StopStep, Tag("stop")] | Annotated[StopHammerStep, Tag("stop_hammer")]
    | Annotated[WaitStep, Tag("wait")] | Annotated[WorkloadStep, Tag("workload")]
    | Annotated[StressStep, Tag("stress")] | Annotated[MeasureIdleStep, Tag("measure_idle")]
    | Annotated[FdLimitStep, Tag("fd_limit")],
    Discriminator(_step_kind, custom_error_type="unknown_step",
                  custom_error_message="a step is a mapping with one key, its kind (e.g. - start: cluster)"),
]
