"""The target API: what a listener lastcall did not write implements to be tested by it.

A *target* is one object (:class:`Target`) naming up to four parts, each built in the process that uses
it, after the fork: the worker side (:class:`WorkerSide`, in each worker process: the listener and its
backend), the engine side (:class:`EngineSide`, in the engine process: the client of every worker), the
wire codec (:class:`Codec`, in the harness: client-side faults frame requests with it) and a handshake
listener (:class:`HandshakeListener`, in an engine process).  A part the target lacks is ``None``, and
its :data:`CAPABILITIES` say what scenarios may ask of it; a scenario needing one it lacks is skipped
with the reason.  What the parts report goes into the run's history through the *recorder* each part is
given (:class:`Recorder`), as the event kinds of :mod:`harness.events`; a checker that needs a party's
events is unknown when the party emitted none of its proving kinds, and "not judged" when the target's
capabilities declare the party absent (no ``listener_events``, ``worker_events``, ``engine_events``).

A target adapter should import only this module and :mod:`harness.events` from lastcall
(tests/thirdparty/ is a worked example, docs/targets.md the walk-through).  :func:`check_target_object`
names every missing or mistyped attribute of a would-be target; ``harness.targets.load_target`` runs it.

This module imports nothing heavy (no torch, no reference listener): every layer may use it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, runtime_checkable

from harness import failpoints
from harness.timeouts import is_bound_scale

if TYPE_CHECKING:
    from harness.reference import wire

__all__ = ["Recorder", "WorkerSpec", "Codec", "WorkerSide", "EngineSide", "HandshakeListener", "Target",
           "CAPABILITIES", "PART_CAPABILITIES", "EVENT_CAPABILITIES", "site", "check_target_object"]

# ------------------------------------------------------------------ capabilities
CAPABILITIES: dict[str, str] = {
    "worker_listener": "has a worker side (worker_side): start, stop, call, restart, remove, replace, idle, flood "
                       "and exit steps",
    "handshake_listener": "has a handshake listener (handshake_listener): the handshake_* steps, hold_port, cycle",
    "wire": "speaks a framing the harness can write (codec, or the reference's): send steps and client faults",
    "failpoints": "its backend passes the failpoint sites backend.<cmd> (site()): arm steps on backend.* and "
                  "process.* sites",
    "listener_failpoints": "its listener passes the reference's internal sites (listener.*, cleanup.*): arm "
                           "steps on them",
    "integration_shutdown": "its worker side has the integration-level shutdown (stop, then tear down only if "
                            "stopped): shutdown steps",
    "owner_records": "writes the reference's owner records beside its sockets: lastcall ctl steps",
    "listener_events": "its listener emits the listener party's events (harness.events)",
    "worker_events": "its worker side emits the worker party's events (registry, exit hook, allocator)",
    "engine_events": "its engine side emits the engine party's events",
    "engine_tree": "is a real engine's process tree the harness launches (engine_command): the engine_* steps, "
                   "wait_gone (harness.scenario.engine_steps)",
}
PART_CAPABILITIES: dict[str, str] = {"worker_listener": "worker_side", "handshake_listener": "handshake_listener"}
EVENT_CAPABILITIES: tuple[str, ...] = ("listener_events", "worker_events", "engine_events")  # harness.events


def site(name: str) -> None:
    """Pass the failpoint site ``name`` (``backend.map_to_kv_tensors``): where a scenario may pause, fail or
    crash this thread.  One dict lookup when nothing is armed.  An armed ``raise`` raises an exception here,
    which the backend answers as any failed operation."""
    failpoints.hit(name)


# ------------------------------------------------------------------ the parts
@runtime_checkable
class Recorder(Protocol):
    """Where a part's events go: the history of the run.  Thread-safe; never blocks for long; never raises
    on a well-formed event.  ``kind`` is one of harness.events (or the target's own ``events``) with its
    keys; with LASTCALL_STRICT_EVENTS=1 a bad one makes the run broken, naming it."""

    def emit(self, kind: str, **data: Any) -> None: ...


class WorkerSpec(TypedDict, total=False):
    """What ``worker_side`` and ``engine_side`` are given: one worker (or the engine) of one run."""

    ipc: str  # the run's IPC name: unique per run, part of every path the target makes
    root: str  # the run's socket root: the target makes its sockets under it (the probes look there)
    rank: int  # this worker's tensor-parallel rank (worker side)
    pp: int  # this worker's pipeline stage (worker side)
    tp: int  # tensor-parallel size of the run
    pp_size: int  # pipeline stages of the run
    drain_timeout: float  # seconds stop waits for handlers inside the backend
    exit_budget: float | None  # seconds the exit hook may drain; None: the target's default
    capacity: int  # bytes of KV address space of group 0
    device: str  # "cpu" or "cuda"
    ipc_timeout: float  # the engine's request timeout, seconds (engine side)
    variant: str  # the target's name as the run was given it
    shm_dir: str  # where the engine's shared-memory records go (engine side)


@runtime_checkable
class Codec(Protocol):
    """A target's framing, as the harness's client-side faults need it (None: the reference's framing, a
    4-byte big-endian length and a msgpack map).  Stateless; called from any thread."""

    header_size: int  # bytes of the length prefix: stall_after_header sends exactly these

    def encode_request(self, req: wire.Request) -> bytes:
        """One whole request frame (prefix and body) in the target's framing."""

    def decode_reply(self, frame: bytes) -> wire.Reply:
        """A reply frame's body as the reference's Reply; raises WireError when it is not one."""


@runtime_checkable
class WorkerSide(Protocol):
    """One worker process's listener and backend.  Built by ``Target.worker_side(spec, recorder)`` in the
    worker process; its methods are called from the harness's control thread, while the listener's own
    threads serve, so each must be safe against the serving threads (and ``stop`` against a concurrent
    ``stop`` or ``shutdown``)."""

    path: str  # the socket this rank serves on, under spec["root"]

    def start(self) -> str:
        """Start serving (or, after a stop that returned True, serve again); returns the listener's label
        (harness.events.label(pp, rank)).  Emits listener_started once it accepts connections.  Raises when
        it refuses, as while a previous stop is still draining."""

    def stop(self, timeout: float | None = None) -> bool:
        """Stop every listener of this process, waiting for handlers inside the backend at most ``timeout``
        (None: the spec's drain_timeout).  Idempotent: a second call after True returns True at once.
        True: nothing serves, every connection is closed, the socket is gone.  False: a handler could not be
        drained; the listener and everything it holds stay (nothing torn down) so a later stop may retry.
        Emits stop_started, then stop_returned with ``ok``."""

    def shutdown(self) -> bool:
        """The integration-level shutdown: stop, then tear the backend down only if stop returned True.
        False leaves the backend and its mappings intact (teardown_deferred).  Safe to call again."""

    def mapped(self, group_id: int = 0) -> list[int] | None:
        """The offsets the backend holds mapped now, sorted; None once it is torn down."""

    def torn_down(self) -> bool:
        """Whether the backend has been torn down."""


@runtime_checkable
class EngineSide(Protocol):
    """The engine's client of every worker (tp x pp), built by ``Target.engine_side(spec, recorder)`` in the
    engine process.  Called from one harness thread at a time; a call to a stopped worker raises or returns
    the target's error; it never hangs past spec["ipc_timeout"]."""

    path: str  # what the engine owns on the machine ("" if nothing)

    def map(self, offsets: list[int], group_id: int = 0) -> list[int]:
        """Map ``offsets`` on every worker; the offsets newly mapped."""

    def unmap(self, offsets: list[int], group_id: int = 0) -> None:
        """Unmap ``offsets`` on every worker."""

    def kv_tensors_created(self, group_id: int = 0) -> bool:
        """Whether every worker has its KV tensors."""

    def close(self) -> None:
        """Close every connection and remove what the engine owns.  Idempotent."""


@runtime_checkable
class HandshakeListener(Protocol):
    """A handshake listener in an engine process, built by ``Target.handshake_listener(metadata, *, host,
    port, recorder, start_timeout, join_timeout)``.  ``start`` and ``shutdown`` come from one thread."""

    port: int

    def start(self) -> int:
        """Bind and serve; the port bound.  Raises a typed error when the port is held (bind_failed)."""

    def shutdown(self) -> bool:
        """Stop serving and release the port; True when the serving thread has ended.  Idempotent.  False
        leaves the thread running (and the port bound)."""


@runtime_checkable
class Target(Protocol):
    """The plug-in contract: a name, what it can do, and its parts (None where it has none).

    Optional attributes: ``unavailable() -> str | None`` (why it cannot run on this machine: one line),
    ``events`` (its own harness.events.EventKind records), ``variants`` (planted-bug name -> target spec
    ``module:attribute``: a scenario's ``catches`` names resolve to them), ``bound_scale`` (an engine target's
    clock: every bound and timeout of its scenarios, and the drain they ask of it, times this number in
    (0, 100]; default 1, the stand-in engine's 0.2; harness.timeouts.run_scale), ``uses_torch`` (a bool,
    default True: whether its processes use torch; a target whose processes never do says False, and its
    runs fork from a fork server that did not preload torch, so its processes carry only what its own would,
    and a faithful exit does not pay torch's module teardown; harness.launch.spawn.ForkServer).
    """

    name: str
    about: str
    capabilities: frozenset[str]
    codec: Codec | None
    worker_side: Callable[[WorkerSpec, Recorder], WorkerSide] | None
    engine_side: Callable[[WorkerSpec, Recorder], EngineSide] | None
    handshake_listener: Callable[..., HandshakeListener] | None


_PARTS = ("worker_side", "engine_side", "handshake_listener")


def _arity_problem(attr: str, fn: Any, n: int) -> str | None:
    try:
        inspect.signature(fn).bind(*([None] * n))
    except TypeError as exc:
        return f"{attr} cannot be called with {n} arguments ({exc})"
    except ValueError:
        return None  # a builtin without a signature: trust it
    return None


def check_target_object(obj: Any) -> list[str]:
    """Every way ``obj`` misses the :class:`Target` contract, one line each; [] for a target."""
    out: list[str] = []
    for attr in ("name", "about"):
        value = getattr(obj, attr, None)
        if not isinstance(value, str) or not value:
            out.append(f"{attr} is missing" if not hasattr(obj, attr)
                       else f"{attr} is a {type(value).__name__}, not a non-empty str")
    caps = getattr(obj, "capabilities", None)
    if caps is None:
        out.append("capabilities is missing (a frozenset of harness.targets.api.CAPABILITIES names)")
    elif not isinstance(caps, (frozenset, set)) or not all(isinstance(c, str) for c in caps):
        out.append(f"capabilities is a {type(caps).__name__}, not a frozenset of str")
    else:
        strange = sorted(set(caps) - set(CAPABILITIES))
        if strange:
            out.append(f"capabilities {strange} are not known (known: {', '.join(CAPABILITIES)})")
        for cap, part in PART_CAPABILITIES.items():
            if cap in caps and getattr(obj, part, None) is None:
                out.append(f"capability {cap} is declared but {part} is None")
    for part in _PARTS:
        if not hasattr(obj, part):
            out.append(f"{part} is missing (None when the target has none)")
            continue
        fn = getattr(obj, part)
        if fn is not None and not callable(fn):
            out.append(f"{part} is a {type(fn).__name__}, not callable or None")
        elif fn is not None and part != "handshake_listener":
            problem = _arity_problem(part, fn, 2)  # (spec, recorder)
            if problem:
                out.append(problem)
    if hasattr(obj, "bound_scale") and not is_bound_scale(obj.bound_scale):
        out.append(f"bound_scale is {obj.bound_scale!r}, not a number in (0, 100]")
    if hasattr(obj, "uses_torch") and not isinstance(obj.uses_torch, bool):
        out.append(f"uses_torch is {obj.uses_torch!r}, not True or False")
    if not hasattr(obj, "codec"):
        out.append("codec is missing (None: the reference framing)")
    elif obj.codec is not None:
        codec = obj.codec
        if not isinstance(getattr(codec, "header_size", None), int):
            out.append("codec.header_size is missing or not an int")
        for meth in ("encode_request", "decode_reply"):
            if not callable(getattr(codec, meth, None)):
                out.append(f"codec.{meth} is missing or not callable")
    engine_tree = callable(getattr(obj, "engine_command", None))  # an engine target (harness.targets.vllm_engine)
    if all(getattr(obj, p, None) is None for p in _PARTS) and not engine_tree and not out:
        out.append("worker_side, engine_side and handshake_listener are all None: nothing to run")
    unavailable = getattr(obj, "unavailable", None)
    if unavailable is not None and not callable(unavailable):
        out.append(f"unavailable is a {type(unavailable).__name__}, not a method returning str or None")
    variants = getattr(obj, "variants", None)
    if variants is not None and not (isinstance(variants, Mapping)
                                     and all(isinstance(k, str) and isinstance(v, str) for k, v in variants.items())):
        out.append("variants is not a mapping of bug name -> target spec (str -> str)")
    return out
