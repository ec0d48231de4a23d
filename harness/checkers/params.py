"""The parameters each checker takes, as pydantic models: the scenario schema and the checkers share them.

``CHECKER_PARAMS`` maps every registered checker's name to its parameter model (``@checker(name, about,
params=Model)`` fills it; nothing else does); a scenario's ``expect`` entries are validated against it at
load time.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CHECKER_PARAMS", "Params", "StopResult", "StopLatency", "Within", "FaultFired", "PortReleased",
           "CallsAnswered", "CallsBounded", "CtlCleans", "RestartRefused", "RequestStep"]


class Params(BaseModel):
    """Base: unknown keys are errors, so a misspelt parameter is caught at load time."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class StopResult(Params):
    """stop_result: what the stop named ``step`` returned."""

    step: str | None = Field(None, description="the `as:` name of a stop/shutdown step; None = every stop")
    returns: bool = True


class StopLatency(Params):
    """stop_latency: a stop (or one phase of it) took at most ``within`` seconds."""

    step: str | None = None
    within: float = Field(2.0, gt=0, description="seconds (write 500ms, 2s)")
    phase: Literal["total", "stop_accepting", "cancel_reads", "drain", "teardown"] = "total"


class RestartRefused(Params):
    """restart_refused: the restart named ``step`` (None: every restart) was refused, with ``error_class``."""

    step: str | None = Field(None, description="the `as:` name of a restart step; None = every restart")
    error_class: str | None = Field(None, description="the exception class the refusal raised (ListenerBusy); "
                                    "None = any")


class RequestStep(Params):
    """A request step, by its `as:` name."""

    request: str = Field(description="the `as:` name of a handshake step")


class Within(Params):
    """A bound in seconds (``within: 500ms``)."""

    within: float = Field(2.0, gt=0)


class FaultFired(Params):
    """fault_fired: each named armed fault (its `as:` name) reached its site; None = every armed fault."""

    faults: list[str] | None = None


class CallsAnswered(Params):
    """calls_answered: the named engine calls (their `as:` names; None = every call) got a non-error answer."""

    calls: list[str] | None = None


class CallsBounded(Params):
    """calls_bounded: the named engine calls (None = every call) each ended within ``within`` of its start."""

    calls: list[str] | None = None
    within: float = Field(2.0, gt=0, description="seconds (write 500ms, 2s)")


class CtlCleans(Params):
    """ctl_cleans: the ctl list step ``found`` saw leftovers of a dead owner; the delete step removed them."""

    found: str = Field(description="the `as:` name of a ctl step with action list")
    deleted: str = Field(description="the `as:` name of a ctl step with action delete")


class PortReleased(Params):
    """port_released: nothing of the run LISTENs on the ports and a trial bind succeeds."""

    ports: list[Annotated[int, Field(ge=0, le=65535)]] | None = Field(None, max_length=64)


# The parameter half of the checker registry: filled by @checker (harness.checkers.base), which registers a
# checker and its model together; read it, never write it (importing harness.checkers fills it).
CHECKER_PARAMS: dict[str, type[Params]] = {}
