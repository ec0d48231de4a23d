"""The parameters of the engine steps (played by harness.scenario.engine_steps), bounded for the loader.

A real engine's tree (``vllm serve``, or the stand-in engine) driven from outside: requests and their client
faults, signals to each of its processes, pauses of one of them (SIGSTOP, resumed by SIGCONT), the wait for its
end, and starts again on the same port.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from harness.launch.pauses import DEFAULT_BOUND_S, MAX_BOUND_S
from harness.scenario.fields import AS_DESCRIPTION, MAX_COUNT, MAX_RANKS, Duration, StepName, Strict, Worker

__all__ = ["EngineRequest", "EngineSignal", "WaitGone", "EngineRestart", "EngineStart", "Pause", "PROCESS"]

_AS: Any = Field(None, alias="as", description=AS_DESCRIPTION)


class EngineRequest(Strict):
    """The harness as an HTTP client of the engine: one completion (streamed or not), maybe in the background."""

    stream: bool = Field(False, description='"stream": true: server-sent events, ending data: [DONE]')
    max_tokens: int = Field(16, ge=1, le=1_000_000, description="tokens asked for")
    background: bool = Field(False, description="do not wait for the answer; wait: {returned: NAME} joins it")
    timeout: Duration = Field(30.0, gt=0, description="a safety net: how long the answer may take")
    stop_reading_after: int | None = Field(None, ge=1, le=MAX_COUNT, description=(
        "stream only: read this many events, then stop reading (the connection kept open, a small receive "
        "buffer) until the engine's tree is gone (a wait_gone step returned) or the timeout; then read the rest"))
    disconnect_after: int | None = Field(None, ge=1, le=MAX_COUNT, description=(
        "stream only: read this many events, then close the connection (a client that goes away mid-stream)"))
    after_shutdown_began: bool = Field(False, description=(
        "send it only once the engine said its shutdown began (its own log line, after an engine_signal): a "
        "late request, which must be refused, never generated"))
    as_: StepName | None = _AS

    @model_validator(mode="after")
    def _stream_faults(self) -> EngineRequest:
        if not self.stream and (self.stop_reading_after or self.disconnect_after):
            raise ValueError("stop_reading_after and disconnect_after need stream: true")
        if self.stop_reading_after and self.disconnect_after:
            raise ValueError("a request either stops reading (stop_reading_after) or disconnects "
                             "(disconnect_after), not both")
        return self


PROCESS = Literal["api_server", "engine_core", "worker"]  # the processes of an engine's tree a step names


class _OneProcess(Strict):
    to: PROCESS = Field("api_server", description="which process")
    index: int = Field(0, ge=0, le=MAX_RANKS - 1, description="to: worker: which worker (its tensor-parallel rank)")

    @model_validator(mode="after")
    def _index_of_a_worker(self) -> _OneProcess:
        if self.index and self.to != "worker":
            raise ValueError(f"index names a worker; the {self.to} is one process")
        return self


class EngineSignal(_OneProcess):
    """Send a signal to one process of the engine's tree: the API server, the engine core or a worker."""

    sig: Literal["SIGTERM", "SIGINT", "SIGKILL"] = Field("SIGTERM", description="the signal")
    as_: StepName | None = _AS


class Pause(_OneProcess):
    """Pause one process (SIGSTOP: it stops running without dying, as under a debugger, a stalled disk or an
    overloaded host): that process alone, not its process group. In an engine run a process of the engine's tree
    (to, index); in a worker run a worker of the reference cluster (of: {rank, pp}). It is resumed (SIGCONT) by a
    resume step naming this one, at resume_after, before any signal or kill the harness sends it, or when the
    run's steps end, whichever comes first."""

    of: Worker | None = Field(None, description=(
        "a worker run: the worker process {rank, pp} to pause (to and index name a process of an engine's tree)"))
    resume_after: Duration = Field(DEFAULT_BOUND_S, gt=0, le=MAX_BOUND_S, description=(
        f"the bound: the harness resumes the process this long after the pause at the latest (at most "
        f"{MAX_BOUND_S:g}s, well below the launch bound: nothing stays stopped; scaled by the target's "
        f"bound_scale as the scenario's other bounds)"))
    as_: StepName | None = _AS

    @model_validator(mode="after")
    def _one_address(self) -> Pause:
        if self.of is not None and {"to", "index"} & self.model_fields_set:
            raise ValueError("of names a worker of a worker run, to and index a process of an engine's tree; "
                             "give one or the other")
        return self


class WaitGone(Strict):
    """Wait until no process of the engine's tree is left; its value says how long that took and who survived."""

    timeout: Duration = Field(30.0, gt=0, description="how long to wait before the survivors are recorded")
    as_: StepName | None = _AS


class EngineRestart(Strict):
    """Launch the engine again on the same port (after a stop or a kill): ok once it is ready."""

    as_: StepName | None = _AS


class EngineStart(Strict):
    """Launch the engine again on the same port without waiting for it to be ready: the step returns once it
    is starting (the stand-in: its engine core loading behind the harness's start gate, released by the next
    engine_signal or wait_gone; another engine: its process launched), and its start ends in the background
    (ready, or failed)."""

    timeout: Duration = Field(30.0, gt=0, description="a safety net: how long the launch may take to be starting")
    as_: StepName | None = _AS
