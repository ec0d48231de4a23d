"""The parameters of the steps every run may play (arm, wait, kill, hold_port) and of the worker listener's
own (call, stop, shutdown, restart, exit, ctl, remove, replace, workload); harness.scenario.steps wraps each
in its step.  The client's (send, pipeline, idle, flood ...) are in harness.scenario.client_spec.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from harness.events import kind_names
from harness.scenario.client_spec import AS_FIELD, GROUP_FIELD, OFFSETS_FIELD
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
from harness.scenario.handshake_spec import word_or_number

__all__ = ["Arm", "Call", "Wait", "Stop", "Shutdown", "Restart", "Exit", "Ctl", "Kill", "PathFault", "HoldPort",
           "Workload", "FAILPOINT_ACTIONS", "EVENT_KINDS"]

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
    event: str | None = Field(None, description="an event kind, e.g. stop_started (see docs/events.md): one "
                              "recorded since the last step before this wait other than start and wait began "
                              "(the mark), or since: STEP's start", json_schema_extra=_event_enum)
    on: WorkerOrEngine | None = Field(None, description="with event: only events from this process")
    since: StepName | None = Field(None, description="with event: count events from the start of this earlier "
                                   "step, not from the mark (one recorded before a later arm, send or release "
                                   "still counts)")
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
        if self.since is not None and self.event is None:
            raise ValueError("since: only applies to event waits; remove it")
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
