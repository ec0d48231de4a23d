"""The parameters of the steps by which the harness is a client of a worker's socket (played by
harness.scenario.worker_steps and edge_steps): one request, a pipeline of them, idle and flooding
connections, and the instances a step starts or leaves beside the run's own.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from harness.reference.wire import Command, ErrorType
from harness.scenario.fields import (
    AS_DESCRIPTION,
    MAX_NAME,
    WORKER_0,
    Duration,
    IpcName,
    Size,
    StepName,
    Strict,
    Worker,
)

__all__ = [
    "Send", "Pipelined", "Pipeline", "StaleSocket", "StartListener", "Connections", "SEND_FAULTS",
    "WITHHOLDING_FAULTS", "FRAMELESS_FAULTS", "NO_REPLY_WAIT", "READER_FAULTS", "MAX_REPLY", "AS_FIELD",
    "OFFSETS_FIELD", "GROUP_FIELD", "FAULT_EXAMPLES",
]

SendFault = Literal["none", "stall_after_header", "stall_mid_body", "partial_header", "zero_length",
                    "oversize_length", "garbage_body", "reset_mid_frame", "one_byte_at_a_time",
                    "stall_byte_by_byte", "never_read", "slow_reader"]
SEND_FAULTS: tuple[str, ...] = SendFault.__args__  # type: ignore[attr-defined]
WITHHOLDING_FAULTS = (  # faults that leave bytes to finish
    "stall_after_header", "stall_mid_body", "partial_header", "stall_byte_by_byte")
FRAMELESS_FAULTS = ("zero_length", "oversize_length", "garbage_body")  # faults that send no request of their own
# faults whose step waits for no reply (a stall leaves its request unfinished, never_read never reads the reply,
# reset_mid_frame resets the connection): a send timeout does not apply to them
NO_REPLY_WAIT = (*WITHHOLDING_FAULTS, "never_read", "reset_mid_frame")
READER_FAULTS = ("never_read", "slow_reader")  # a whole request sent; its reply never read, or read a byte at a time
MAX_REPLY = 1_000_000  # the largest reply_size: the request carrying its padding must fit max_frame (1 MiB)
# Each fault in a short list of steps, declared once here: docs/steps.md shows it and a test loads it
FAULT_EXAMPLES: dict[str, str] = {
    "none": (
        "- start: cluster\n- send: {cmd: map_to_kv_tensors, offsets: [0, 2MiB], as: r1}"
    ),
    "stall_after_header": (
        "- start: cluster\n"
        "- send: {cmd: map_to_kv_tensors, offsets: [0], fault: stall_after_header, as: r1}\n"
        "- stop: {as: s1}\n- wait: {returned: s1}\n- finish: r1"
    ),
    "stall_mid_body": (
        "- start: cluster\n"
        "- send: {cmd: map_to_kv_tensors, offsets: [0], fault: stall_mid_body, as: r1}\n"
        "- stop: {as: s1}\n- wait: {returned: s1}\n- wait: {closed: r1}"
    ),
    "partial_header": (
        "- start: cluster\n- send: {cmd: kv_tensors_created, fault: partial_header, as: r1}\n"
        "- stop: {as: s1}\n- wait: {returned: s1}\n- wait: {closed: r1}"
    ),
    "zero_length": (
        "- start: cluster\n- send: {fault: zero_length, as: z}\n- wait: {closed: z}"
    ),
    "oversize_length": (
        "- start: cluster\n- send: {fault: oversize_length, hang_up: true}"
    ),
    "garbage_body": (
        "- start: cluster\n- send: {fault: garbage_body, as: g}\n- wait: {closed: g}"
    ),
    "reset_mid_frame": (
        "- start: cluster\n- send: {cmd: map_to_kv_tensors, offsets: [0], fault: reset_mid_frame}"
    ),
    "one_byte_at_a_time": (
        "- start: cluster\n"
        "- send: {cmd: kv_tensors_created, fault: one_byte_at_a_time, timeout: 2s}"
    ),
    "stall_byte_by_byte": (
        "- start: cluster\n"
        "- send: {cmd: map_to_kv_tensors, offsets: [0], fault: stall_byte_by_byte, as: r1}\n"
        "- stop: {as: s1}\n- wait: {returned: s1}\n- finish: r1"
    ),
    "never_read": (
        "- start: cluster\n"
        "- send: {cmd: map_to_kv_tensors, offsets: [0], fault: never_read, reply_size: 512KiB, as: r1}\n"
        "- stop: {as: s1}\n- wait: {returned: s1}\n- wait: {closed: r1}"
    ),
    "slow_reader": (
        "- start: cluster\n"
        "- send: {cmd: map_to_kv_tensors, offsets: [0], fault: slow_reader, reply_size: 512KiB, as: r1}\n"
        "- wait: {returned: r1}"
    ),
}
AS_FIELD: Any = Field(None, alias="as", description=AS_DESCRIPTION)
TO_FIELD: Any = Field(WORKER_0, description="the worker whose socket it connects to (default rank 0, pp 0)")
OFFSETS_FIELD: Any = Field(default_factory=list, max_length=1024,
                           description="byte offsets into the KV space; sizes such as 2MiB")
GROUP_FIELD: Any = Field(0, ge=0, le=1023, description="KV group")


class Send(Strict):
    """The harness as a client: one request to a worker's socket, optionally with a client-side fault."""

    to: Worker = TO_FIELD
    cmd: Command | None = Field(None, description="the wire command; required unless the fault sends no request")
    offsets: list[Size] = OFFSETS_FIELD
    group_id: int = GROUP_FIELD
    transaction_id: str | None = Field(None, max_length=MAX_NAME, description="two-phase unmap transaction id")
    commit: bool = Field(False, description="prepare and commit in one step (prepare_unmap only)")
    fault: SendFault = Field("none", description="what goes wrong on the wire; see harness.faults.client")
    reply_size: Size | None = Field(None, ge=64, le=MAX_REPLY, description=(
        "pad the request's id so that its reply (which echoes the id) is about this many bytes, e.g. 512KiB: "
        "more than the listener's socket buffer takes at once"))
    keep_open: bool = Field(False, description="keep the connection open after the reply: a kept-alive client "
                            "gone idle (wait: {closed: NAME} waits for the listener to close it)")
    timeout: Duration | None = Field(None, gt=0, description=(
        "how long the client waits for its reply before the step fails (TimeoutError), e.g. 2s for a request "
        "the listener must answer at once; default config.ipc_timeout"))
    refused: ErrorType | None = Field(None, description=(
        "a request the backend must refuse (an offset that is no page's, say): the step is ok only when the reply "
        "is an error of this type, e.g. bad_request; a reply served, an error of another type or no reply fails "
        "it. Only a plain request (fault none)"))
    hang_up: bool = Field(False, description=(
        "with zero_length, oversize_length or garbage_body: close the connection as soon as the malformed frame "
        "is sent, reading nothing: the client is gone before the listener answers, so its reply cannot be "
        "written. With never_read: close it once the reply has begun to arrive, all of it unread: the client is "
        "gone while the listener is writing (a reply_size larger than the socket buffer leaves the rest "
        "pending), so its next write fails"))
    as_: StepName | None = AS_FIELD

    @model_validator(mode="after")
    def _needs_cmd(self) -> Send:
        if self.hang_up and self.fault not in (*FRAMELESS_FAULTS, "never_read"):
            raise ValueError(f"hang_up: only a malformed frame (fault {', '.join(FRAMELESS_FAULTS)}) is sent and "
                             f"left at once, or an unread reply (never_read) left mid-write, not {self.fault!r}")
        if self.hang_up and self.timeout is not None:
            raise ValueError("timeout: a send that hangs up waits for no reply; remove it")
        if self.refused is not None and self.fault != "none":
            raise ValueError(f"refused: only a plain request (fault none) is refused by the backend, not "
                             f"{self.fault!r}")
        if self.keep_open and self.fault != "none":
            raise ValueError(f"keep_open: only a plain request (fault none) is answered and kept, not {self.fault!r}")
        if self.cmd is None and self.fault not in FRAMELESS_FAULTS:
            raise ValueError(f"missing required key 'cmd': fault {self.fault!r} sends a request "
                             f"(e.g. cmd: map_to_kv_tensors)")
        if self.reply_size is not None and self.fault in FRAMELESS_FAULTS:
            raise ValueError(f"reply_size: fault {self.fault!r} sends no request whose reply could be padded")
        if self.timeout is not None and self.fault in NO_REPLY_WAIT:
            raise ValueError(f"timeout: fault {self.fault!r} does not wait for a reply; remove it (wait: {{closed: "
                             f"NAME, timeout: ...}} bounds what the listener does with it)")
        return self


class Pipelined(Strict):
    """One request of a pipeline."""

    cmd: Command = Field(description="the wire command")
    offsets: list[Size] = OFFSETS_FIELD
    group_id: int = GROUP_FIELD


class Pipeline(Strict):
    """Several requests on one kept-alive connection, in the background (``wait: {returned: NAME}`` joins it):
    written back to back in one write, or (``read_each``) each once the reply before it was read; the replies
    are read in order.  Ok when every request got its reply, in order, none an error but shutting_down (once a stop
    has begun the listener may close the connection instead: the requests it had not read go unanswered, never
    one it dispatched or refused; a reply cut mid-frame always fails)."""

    to: Worker = TO_FIELD
    requests: list[Pipelined] = Field(min_length=1, max_length=64, description="the requests, in order")
    read_each: bool = Field(False, description="reuse the connection: send each request after the reply before")
    each_after: StepName | None = Field(None, description=(
        "with read_each: an arm step's name; request N (from the second, N = 1) is sent only once its site has "
        "been hit N times in all, e.g. after the listener's pass over the connection that answered the one before "
        "(listener.answered)"))
    reply_size: Size | None = Field(None, ge=64, le=MAX_REPLY, description="pad each request's id so its reply "
                                    "is about this many bytes (see send)")
    timeout: Duration | None = Field(None, gt=0, description=(
        "how long the client waits for each reply before the step fails (TimeoutError), as send's; default "
        "config.ipc_timeout"))
    as_: StepName | None = AS_FIELD

    @model_validator(mode="after")
    def _gated_each(self) -> Pipeline:
        if self.each_after is not None and not self.read_each:
            raise ValueError("each_after: requests written back to back in one write wait for nothing; add "
                             "read_each: true")
        return self


class StaleSocket(Strict):
    """Leave what a SIGKILLed predecessor leaves at a socket path of instance ``ipc`` (under the run's root): the
    socket file and its owner record, naming a process that is gone; ``start_listener`` with the same ``ipc``
    then starts over it."""

    of: Worker = Field(WORKER_0, description="whose path: a worker {rank, pp}")
    ipc: IpcName = Field("predecessor", description="the instance's name, under the run's root (not the run's own: "
                         "its workers live)")


class StartListener(Strict):
    """In a worker's process, a fresh listener of the target's (not registered) at a worker's path: started
    (or not), then stopped ``stops`` times.  Its value: whether it started (False when start raised: the
    error is recorded); each stop is recorded as NAME.stop1, NAME.stop2 ... (value: what stop returned)."""

    on: Worker = Field(WORKER_0, description="the process it runs in: a worker {rank, pp}")
    at: Worker | None = Field(None, description="whose socket path: a worker {rank, pp} (default on)")
    ipc: IpcName | None = Field(None, description="another instance's name under the run's root; default the run's "
                                "own")
    start: bool = Field(True, description="false: never started, only stopped")
    stops: int = Field(1, ge=0, le=3, description="how many times it is stopped afterwards")
    again: bool = Field(False, description="then start the same listener once more (NAME.again: a listener is "
                        "started once, so False, the start refused) and stop it once more (NAME.again.stop1)")
    keep: bool = Field(False, description="start it through the worker's registry and keep it serving, registered "
                       "beside the worker's own listener: the worker's integration shutdown or its exit hook stops "
                       "it with the rest (no stops, no again; give it an ipc of its own)")
    as_: StepName | None = AS_FIELD

    @model_validator(mode="after")
    def _kept(self) -> StartListener:
        if self.keep and (not self.start or self.stops or self.again):
            raise ValueError("keep: a kept listener is started and left to the worker to stop: use start: true, "
                             "stops: 0 and no again")
        if self.keep and self.ipc is None:
            raise ValueError("keep: give it an ipc of its own (e.g. ipc: kept): on the run's own instance it would "
                             "replace the worker's listener in the registry")
        return self


class Connections(Strict):
    """Connections that send nothing (``idle``) or that arrive as fast as they can (``flood``)."""

    to: Worker = TO_FIELD
    count: int = Field(16, ge=1, le=1024, description="how many connections")
    as_: StepName | None = AS_FIELD
