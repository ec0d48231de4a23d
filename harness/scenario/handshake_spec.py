"""The parameters of the handshake steps (played by harness.scenario.handshake_steps), bounded for the loader.

A handshake listener (vLLM's NIXL side channel, or the reference's) owned by an engine process, and a peer
engine that fetches its metadata: starts on a free, held or earlier port, well-formed and malformed
handshakes, continuous traffic, shutdown, and start/shutdown cycles in one process.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from harness.scenario.fields import AS_DESCRIPTION, MAX_RANKS, Duration, StepName, Strict

__all__ = ["HandshakeStart", "Handshake", "Hammer", "MalformedHandshake", "HandshakeShutdown", "Cycle",
           "PortOrHeld", "word_or_number"]

_AS: Any = Field(None, alias="as", description=AS_DESCRIPTION)


def word_or_number(value: object) -> str:
    return "Name" if isinstance(value, str) else "Number"


# ------------------------------------------------------ handshake side channel
# A port: a number (0 = any free one), or the as: name of an earlier hold_port step (the port it holds) or
# handshake_start step (the port its listener bound: start again on the same port).
PortOrHeld = Annotated[
    Annotated[int, Tag("Number"), Field(ge=0, le=65535)] | Annotated[StepName, Tag("Name")],
    Discriminator(word_or_number),
]
HandshakeFault = Literal["garbage", "wrong_tag", "unknown_rank", "extra_frame", "oversized"]
_WITHIN: Any = Field(2.0, gt=0, description="a safety net: how long the peer waits for the reply")


class HandshakeStart(Strict):
    """The engine starts its handshake listener: ok with the bound port, or the typed error (PortInUse)."""

    port: PortOrHeld = Field(0, description="0 (any free port), a port number, or the name of a hold_port step "
                                            "(its port) or of a handshake_start step (the port it bound)")
    start_timeout: Duration = Field(1.0, gt=0, description="how long start may wait for the thread to bind")
    join_timeout: Duration = Field(5.0, gt=0, description="how long shutdown waits for the thread to exit")
    reuse: bool = Field(False, description="start the listener the engine made last (one a handshake_shutdown "
                                           "with unstarted: true shut down must refuse) instead of a new one")
    as_: StepName | None = _AS


class Handshake(Strict):
    """The peer engine fetches one agent's metadata from the listener last started (a well-formed request)."""

    pp: int = Field(0, ge=0, lt=MAX_RANKS, description="pipeline rank asked for, 0 <= pp < topology.pp")
    tp: int = Field(0, ge=0, lt=MAX_RANKS, description="tensor-parallel rank asked for, 0 <= tp < topology.tp")
    within: Duration = _WITHIN
    background: bool = Field(False, description="do not wait for the reply; wait: {returned: NAME} joins it")
    as_: StepName | None = _AS


class Hammer(Strict):
    """The peer handshakes back to back (continuous traffic) until a stop_hammer step names this one."""

    as_: StepName | None = _AS


class MalformedHandshake(Strict):
    """The peer sends one malformed handshake: undecodable (garbage), a wrong tag, a rank nobody serves, a
    well-formed request followed by one frame more (extra_frame), or a frame over the listener's 64 KiB
    limit (oversized: the listener's ZeroMQ drops the peer unread, so no reply comes)."""

    kind: HandshakeFault = Field("garbage", description="garbage, wrong_tag, unknown_rank, extra_frame or "
                                                        "oversized")
    says: str | None = Field(None, min_length=1, max_length=200,
                             description="text the error reply must contain (case-insensitive), e.g. undecodable: "
                                         "the listener says what was wrong (checker bad_handshake_refused)")
    within: Duration = _WITHIN
    as_: StepName | None = _AS


class HandshakeShutdown(Strict):
    """The engine shuts its handshake listener down (async): ``wait: {returned: NAME}`` joins it."""

    unstarted: bool = Field(False, description="make a new listener and shut it down without starting it "
                                               "(shutdown before start: True, and the listener stays shut)")
    as_: StepName | None = _AS


class Cycle(Strict):
    """Start and shut down ``n`` handshake listeners in turn in the engine process, on one port."""

    n: int = Field(10, ge=1, le=1000, description="how many start/shutdown rounds")
    port: int = Field(0, ge=0, le=65535, description="the port of every round; 0 = the one the first round got")
    as_: StepName | None = _AS
