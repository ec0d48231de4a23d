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
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, Union

from pydantic import Discriminator, Field, Tag

from harness.categories import check_categories
from harness.scenario.client_spec import (
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
from harness.scenario.common_spec import (
    EVENT_KINDS,
    FAILPOINT_ACTIONS,
    Arm,
    Call,
    Ctl,
    Exit,
    HoldPort,
    Kill,
    PathFault,
    Restart,
    Shutdown,
    Stop,
    Wait,
    Workload,
)
from harness.scenario.engine_spec import EngineRequest, EngineRestart, EngineSignal, EngineStart, Pause, WaitGone
from harness.scenario.fields import StepName
from harness.scenario.handshake_spec import (
    Cycle,
    Hammer,
    Handshake,
    HandshakeShutdown,
    HandshakeStart,
    MalformedHandshake,
)
from harness.scenario.machine_spec import FdLimit, MeasureIdle
from harness.scenario.step_base import OnEngine, OnHandshake, OnWorker, StepBase
from harness.scenario.stress_spec import Stress

__all__ = [
    "Step", "StepBase", "STEP_TYPES", "SEND_FAULTS", "WITHHOLDING_FAULTS", "FAILPOINT_ACTIONS", "EVENT_KINDS",
    "Send", "Connections", "Arm", "Call", "Wait", "Stop", "Shutdown", "Restart", "Kill", "PathFault",
    "HoldPort", "Workload", "HandshakeStart", "Handshake", "Hammer", "MalformedHandshake", "HandshakeShutdown",
    "Cycle", "EngineRequest", "EngineSignal", "Pause", "WaitGone", "EngineRestart", "EngineStart", "ENGINE_STEPS",
    "HANDSHAKE_STEPS", "WORKER_STEPS", "EXIT_STEPS", "is_handshake", "drives_engine", "Pipeline", "Pipelined",
    "StaleSocket", "StartListener", "READER_FAULTS", "check_categories",
]


# -------------------------------------------------------------------- the steps
class StartStep(StepBase):
    kind: ClassVar[str] = "start"
    category: ClassVar[str] = "launch"
    marks: ClassVar[bool] = False
    example: ClassVar[str] = "- start: cluster"
    start: Literal["cluster", "engine"] = Field(
        description="start the run's processes (cluster: the engine and its tp x pp workers; engine: the "
                    "target's engine tree, launched by the harness); first, once")


class SendStep(OnWorker):
    kind: ClassVar[str] = "send"
    category: ClassVar[str] = "request"
    needs: ClassVar[str | None] = "wire"  # it speaks the target's framing (its codec) on the socket
    example: ClassVar[str] = (
        "- start: cluster\n- send: {cmd: map_to_kv_tensors, offsets: [0, 2MiB], timeout: 2s, as: r1}"
    )
    send: Send = Field(description=Send.__doc__)


class IdleStep(OnWorker):
    kind: ClassVar[str] = "idle"
    category: ClassVar[str] = "traffic"
    example: ClassVar[str] = (
        "- start: cluster\n- idle: {count: 8, as: quiet}\n- stop: {as: s1}\n- wait: {closed: quiet}"
    )
    idle: Connections = Field(description="open connections that send nothing")


class FloodStep(OnWorker):
    kind: ClassVar[str] = "flood"
    category: ClassVar[str] = "traffic"
    example: ClassVar[str] = "- start: cluster\n- stop: {as: s1}\n- flood: {count: 64}\n- wait: {returned: s1}"
    flood: Connections = Field(description="open connections as fast as possible (e.g. during stop)")


class ArmStep(StepBase):
    kind: ClassVar[str] = "arm"
    category: ClassVar[str] = "fault"
    needs: ClassVar[str | None] = "failpoints"  # a site inside the listener needs more (harness.scenario.needs)
    example: ClassVar[str] = (
        "- start: cluster\n- arm: {site: backend.map_to_kv_tensors, action: pause, count: 1, as: f1}\n"
        "- call: {op: map, offsets: [0], as: c1}\n- wait: {reached: f1}\n- release: f1"
    )
    arm: Arm = Field(description=Arm.__doc__)


class CallStep(OnWorker):
    kind: ClassVar[str] = "call"
    category: ClassVar[str] = "call"
    example: ClassVar[str] = "- start: cluster\n- call: {op: kv_tensors_created, as: c1}\n- wait: {returned: c1}"
    call: Call = Field(description=Call.__doc__)


class WaitStep(StepBase):
    kind: ClassVar[str] = "wait"
    category: ClassVar[str] = "sync"
    marks: ClassVar[bool] = False
    example: ClassVar[str] = (
        "- start: cluster\n- stop: {as: s1}\n- wait: {event: stop_started}\n- wait: {returned: s1, timeout: 5s}"
    )
    wait: Wait = Field(description=Wait.__doc__)


class ReleaseStep(StepBase):
    kind: ClassVar[str] = "release"
    category: ClassVar[str] = "fault"
    example: ClassVar[str] = (
        "- start: cluster\n- arm: {site: listener.frame_read, as: f1}\n"
        "- send: {cmd: kv_tensors_created, fault: stall_after_header, as: r1}\n- wait: {reached: f1}\n"
        "- release: f1"
    )
    release: StepName = Field(description="an arm step's name: let its parked threads go on (a delay ends early)")


class StopStep(OnWorker):
    kind: ClassVar[str] = "stop"
    category: ClassVar[str] = "stop"
    example: ClassVar[str] = (
        "- start: cluster\n- stop: {on: {rank: 0}, timeout: 500ms, as: s1}\n- wait: {returned: s1}"
    )
    stop: Stop = Field(description=Stop.__doc__)


class ShutdownStep(OnWorker):
    kind: ClassVar[str] = "shutdown"
    category: ClassVar[str] = "stop"
    needs: ClassVar[str | None] = "integration_shutdown"
    example: ClassVar[str] = "- start: cluster\n- shutdown: {as: sd}\n- wait: {returned: sd}"
    shutdown: Shutdown = Field(description=Shutdown.__doc__)


class RestartStep(OnWorker):
    kind: ClassVar[str] = "restart"
    category: ClassVar[str] = "start"
    example: ClassVar[str] = (
        "- start: cluster\n- stop: {as: s1}\n- wait: {returned: s1}\n- restart: {on: {rank: 0}, as: again}\n"
        "- wait: {returned: again}"
    )
    restart: Restart = Field(description=Restart.__doc__)


class ExitStep(OnWorker):
    kind: ClassVar[str] = "exit"
    category: ClassVar[str] = "exit"
    observes_exit: ClassVar[bool] = True
    example: ClassVar[str] = "- start: cluster\n- exit: {shutdown: false, as: bye}\n- wait: {returned: bye}"
    exit: Exit = Field(description=Exit.__doc__)


class KillStep(StepBase):
    kind: ClassVar[str] = "kill"
    category: ClassVar[str] = "signal"
    observes_exit: ClassVar[bool] = True
    example: ClassVar[str] = "- start: cluster\n- kill: {target: {rank: 0}, signal: SIGKILL}"
    kill: Kill = Field(description=Kill.__doc__)


class RemoveStep(OnWorker):
    kind: ClassVar[str] = "remove"
    category: ClassVar[str] = "environment"
    example: ClassVar[str] = "- start: cluster\n- remove: {what: dir, of: {rank: 0}}"
    remove: PathFault = Field(description="delete a worker's socket file or directory while it is live")


class ReplaceStep(OnWorker):
    kind: ClassVar[str] = "replace"
    category: ClassVar[str] = "environment"
    example: ClassVar[str] = "- start: cluster\n- replace: {what: socket}"
    replace: PathFault = Field(description="put a different file at a worker's socket path while it is live")


class HoldPortStep(StepBase):
    kind: ClassVar[str] = "hold_port"
    category: ClassVar[str] = "environment"
    needs: ClassVar[str | None] = "handshake_listener"  # but nothing in an engine run (harness.scenario.needs)
    example: ClassVar[str] = "- hold_port: {as: held}\n- start: cluster\n- handshake_start: {port: held, as: l1}"
    hold_port: HoldPort = Field(description=HoldPort.__doc__)


class PipelineStep(OnWorker):
    kind: ClassVar[str] = "pipeline"
    category: ClassVar[str] = "request"
    needs: ClassVar[str | None] = "wire"  # as send
    example: ClassVar[str] = (
        "- start: cluster\n"
        "- pipeline: {requests: [{cmd: kv_tensors_created}, {cmd: map_to_kv_tensors, offsets: [0]}],\n"
        "             read_each: true, as: p1}\n"
        "- wait: {returned: p1}"
    )
    pipeline: Pipeline = Field(description=Pipeline.__doc__)


class StaleSocketStep(OnWorker):
    kind: ClassVar[str] = "stale_socket"
    category: ClassVar[str] = "environment"
    needs: ClassVar[str | None] = "owner_records"  # a predecessor's record, as the reference writes it
    example: ClassVar[str] = (
        "- start: cluster\n- stale_socket: {ipc: predecessor}\n- start_listener: {ipc: predecessor, as: l1}"
    )
    stale_socket: StaleSocket = Field(description=StaleSocket.__doc__)


class StartListenerStep(OnWorker):
    kind: ClassVar[str] = "start_listener"
    category: ClassVar[str] = "start"
    needs: ClassVar[str | None] = "owner_records"  # a throw-away listener of the reference's own kind (probe)
    example: ClassVar[str] = "- start: cluster\n- start_listener: {stops: 2, again: true, as: l1}"
    start_listener: StartListener = Field(description=StartListener.__doc__)


class FinishStep(OnWorker):
    kind: ClassVar[str] = "finish"
    category: ClassVar[str] = "traffic"
    needs: ClassVar[str | None] = None  # the send step it finishes already needs wire
    example: ClassVar[str] = (
        "- start: cluster\n- send: {cmd: map_to_kv_tensors, offsets: [0], fault: stall_after_header, as: r1}\n"
        "- stop: {as: s1}\n- wait: {returned: s1}\n- finish: r1"
    )
    finish: StepName = Field(description="a send step's name: send the rest of its withheld frame")


class StressStep(OnWorker):
    kind: ClassVar[str] = "stress"
    category: ClassVar[str] = "workload"
    needs: ClassVar[str | None] = "listener_failpoints"  # it arms sites inside the listener (harness.scenario.stress)
    example: ClassVar[str] = "- start: cluster\n- stress: {clients: 4, requests: 60, stops: 3, as: storm}"
    stress: Stress = Field(description=Stress.__doc__)


class MeasureIdleStep(OnWorker):
    kind: ClassVar[str] = "measure_idle"
    category: ClassVar[str] = "measure"
    needs: ClassVar[str | None] = None  # it reads the worker process from outside (/proc), not through its listener
    example: ClassVar[str] = "- start: cluster\n- idle: {count: 4}\n- measure_idle: {window: 300ms, as: m1}"
    measure_idle: MeasureIdle = Field(description=MeasureIdle.__doc__)


class FdLimitStep(OnWorker):
    kind: ClassVar[str] = "fd_limit"
    category: ClassVar[str] = "environment"
    needs: ClassVar[str | None] = None  # it sets the worker's limit from outside (prlimit), not through its listener
    example: ClassVar[str] = "- start: cluster\n- fd_limit: {}\n- idle: {count: 1}\n- fd_limit: {restore: true}"
    fd_limit: FdLimit = Field(description=FdLimit.__doc__)


class WorkloadStep(OnWorker):
    kind: ClassVar[str] = "workload"
    category: ClassVar[str] = "workload"
    example: ClassVar[str] = "- start: cluster\n- workload: {waves: 5, pages: 8, stop_at: 2}"
    workload: Workload = Field(description=Workload.__doc__)


class CtlStep(OnWorker):
    kind: ClassVar[str] = "ctl"
    category: ClassVar[str] = "control"
    needs: ClassVar[str | None] = "owner_records"  # lastcall ctl reads the reference's owner records beside its sockets
    example: ClassVar[str] = "- start: cluster\n- kill: {target: {rank: 0}}\n- ctl: {action: delete, as: cleaned}"
    ctl: Ctl = Field(description=Ctl.__doc__)


class HandshakeStartStep(OnHandshake):
    kind: ClassVar[str] = "handshake_start"
    category: ClassVar[str] = "start"
    example: ClassVar[str] = "- start: cluster\n- handshake_start: {start_timeout: 1s, join_timeout: 5s, as: l1}"
    handshake_start: HandshakeStart = Field(description=HandshakeStart.__doc__)


class HandshakeStep(OnHandshake):
    kind: ClassVar[str] = "handshake"
    category: ClassVar[str] = "request"
    example: ClassVar[str] = "- start: cluster\n- handshake_start: {as: l1}\n- handshake: {pp: 0, tp: 0, as: h1}"
    handshake: Handshake = Field(description=Handshake.__doc__)


class HammerStep(OnHandshake):
    kind: ClassVar[str] = "hammer"
    category: ClassVar[str] = "traffic"
    example: ClassVar[str] = (
        "- start: cluster\n- handshake_start: {as: l1}\n- hammer: {as: traffic}\n- handshake_shutdown: {as: s1}\n"
        "- wait: {returned: s1}\n- stop_hammer: traffic"
    )
    hammer: Hammer = Field(description=Hammer.__doc__)


class StopHammerStep(OnHandshake):
    kind: ClassVar[str] = "stop_hammer"
    category: ClassVar[str] = "traffic"
    example: ClassVar[str] = (
        "- start: cluster\n- handshake_start: {as: l1}\n- hammer: {as: traffic}\n"
        "- wait: {event: handshake_served}\n- stop_hammer: traffic"
    )
    stop_hammer: StepName = Field(description="a hammer step's name: the peer stops after its handshake in flight")


class MalformedHandshakeStep(OnHandshake):
    kind: ClassVar[str] = "malformed_handshake"
    category: ClassVar[str] = "request"
    example: ClassVar[str] = (
        "- start: cluster\n- handshake_start: {as: l1}\n- malformed_handshake: {kind: wrong_tag, as: bad}"
    )
    malformed_handshake: MalformedHandshake = Field(description=MalformedHandshake.__doc__)


class HandshakeShutdownStep(OnHandshake):
    kind: ClassVar[str] = "handshake_shutdown"
    category: ClassVar[str] = "stop"
    example: ClassVar[str] = (
        "- start: cluster\n- handshake_start: {as: l1}\n- handshake_shutdown: {as: s1}\n- wait: {returned: s1}"
    )
    handshake_shutdown: HandshakeShutdown = Field(description=HandshakeShutdown.__doc__)


class CycleStep(OnHandshake):
    kind: ClassVar[str] = "cycle"
    category: ClassVar[str] = "cycle"
    example: ClassVar[str] = "- start: cluster\n- cycle: {n: 5, as: rounds}"
    cycle: Cycle = Field(description=Cycle.__doc__)


class EngineRequestStep(OnEngine):
    kind: ClassVar[str] = "engine_request"
    category: ClassVar[str] = "request"
    example: ClassVar[str] = "- start: engine\n- engine_request: {stream: true, max_tokens: 8, as: r1}"
    engine_request: EngineRequest = Field(description=EngineRequest.__doc__)


class EngineSignalStep(OnEngine):
    kind: ClassVar[str] = "engine_signal"
    category: ClassVar[str] = "signal"
    example: ClassVar[str] = (
        "- start: engine\n- engine_signal: {to: api_server, sig: SIGTERM, as: term}\n- wait_gone: {timeout: 10s}"
    )
    engine_signal: EngineSignal = Field(description=EngineSignal.__doc__)


class PauseStep(StepBase):  # any run: a process of an engine's tree (to), or a worker of a cluster (of)
    kind: ClassVar[str] = "pause"
    category: ClassVar[str] = "fault"
    example: ClassVar[str] = "- start: engine\n- pause: {to: worker, index: 0, resume_after: 2s, as: p1}"
    pause: Pause = Field(description=Pause.__doc__)


class ResumeStep(StepBase):
    kind: ClassVar[str] = "resume"
    category: ClassVar[str] = "fault"
    example: ClassVar[str] = "- start: cluster\n- pause: {of: {rank: 0}, resume_after: 2s, as: p1}\n- resume: p1"
    resume: StepName = Field(description="a pause step's name: resume (SIGCONT) the process it paused, now")


class WaitGoneStep(OnEngine):
    kind: ClassVar[str] = "wait_gone"
    category: ClassVar[str] = "sync"
    observes_exit: ClassVar[bool] = True
    example: ClassVar[str] = (
        "- start: engine\n- engine_signal: {to: worker, index: 0, sig: SIGKILL}\n"
        "- wait_gone: {timeout: 5s, as: gone}"
    )
    wait_gone: WaitGone = Field(description=WaitGone.__doc__)


class EngineRestartStep(OnEngine):
    kind: ClassVar[str] = "engine_restart"
    category: ClassVar[str] = "start"
    example: ClassVar[str] = "- start: engine\n- engine_signal: {sig: SIGKILL}\n- engine_restart: {as: again}"
    engine_restart: EngineRestart = Field(description=EngineRestart.__doc__)


class EngineStartStep(OnEngine):
    kind: ClassVar[str] = "engine_start"
    category: ClassVar[str] = "start"
    example: ClassVar[str] = (
        "- start: engine\n- engine_signal: {sig: SIGTERM}\n- wait_gone: {}\n- engine_start: {as: second}"
    )
    engine_start: EngineStart = Field(description=EngineStart.__doc__)


_STEPS: tuple[type[StepBase], ...] = tuple(  # every class that declares a kind
    c for c in list(globals().values()) if isinstance(c, type) and issubclass(c, StepBase) and "kind" in vars(c))


check_categories(_STEPS)
STEP_TYPES: dict[str, type[StepBase]] = {c.kind: c for c in sorted(_STEPS, key=lambda c: c.kind)}  # alphabetical
# Steps that drive a handshake listener: a scenario with any of them is a handshake scenario (an engine owning
# the listener and a peer engine; harness.scenario.handshake_steps).  hold_port, arm, release, wait and kill (of the
# engine) work in both kinds of scenario; the worker-listener steps work only without these.
HANDSHAKE_STEPS = tuple(k for k, c in STEP_TYPES.items() if c.cast == "handshake")
ENGINE_STEPS = tuple(k for k, c in STEP_TYPES.items() if c.cast == "engine")  # harness.scenario.engine_steps
WORKER_STEPS = tuple(k for k, c in STEP_TYPES.items() if c.cast == "worker")
EXIT_STEPS = frozenset(k for k, c in STEP_TYPES.items() if c.observes_exit)


def drives_engine(steps: Iterable[StepBase]) -> bool:
    """Whether these steps drive a real engine's tree: ``start: engine``, or any engine step (a step any run
    plays, pause say, follows the run: after ``start: engine`` it acts on the engine's tree)."""
    return any(step.kind in ENGINE_STEPS or (step.kind == "start" and step.spec == "engine") for step in steps)


def is_handshake(steps: Iterable[StepBase]) -> bool:
    """Whether these steps drive a handshake listener (rather than the worker listener)."""
    return any(step.kind in HANDSHAKE_STEPS for step in steps)


def _step_kind(value: object) -> str | None:
    if isinstance(value, StepBase):
        return value.kind
    if isinstance(value, dict) and len(value) == 1:
        return str(next(iter(value)))
    return None


if TYPE_CHECKING:
    Step = StepBase
else:  # one tagged member per declared kind, alphabetical
    Step = Annotated[
        Union[tuple(Annotated[c, Tag(k)] for k, c in STEP_TYPES.items())],  # noqa: UP007 - built from a tuple
        Discriminator(_step_kind, custom_error_type="unknown_step",
                      custom_error_message="a step is a mapping with one key, its kind (e.g. - start: cluster)"),
    ]
