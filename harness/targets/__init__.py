"""Targets: what a scenario runs against, behind one plug-in contract.

A *target* is any object that satisfies :class:`Target`: it says what it can
do (``capabilities``; a scenario whose steps need one it lacks is skipped with
the reason), how a worker process starts, stops and shuts down its listener
(``worker_side``), how an engine process drives the workers (``engine_side``),
how to speak its wire (``codec``: client-side faults frame their requests with
it, so a header can be sent and the body withheld in the target's own framing),
and, for the handshake side channel, how an engine process owns a handshake
listener (``handshake_listener``).  A part a target lacks is ``None`` and the
capabilities say so.

Choosing one: by name (``reference``, each planted-bug variant, each handshake
variant, ``kvcached``, ``vllm_nixl``) or by an importable ``module:attribute``,
given to ``lastcall run --target`` (pytest: ``--lastcall-target``), the scenario's
``target:`` key or ``LASTCALL_TARGET``; :func:`check_target` checks such a name without
importing anything (harness.targets.names), :func:`load_target` imports it.
The name travels to the worker and engine processes, which load it again after
the fork, so a ``module:attribute`` target is imported there too.

``reference@module:attribute`` is the reference target with its listener class
replaced by the importable factory (a subclass of, or drop-in for,
:class:`~harness.reference.listener.WorkerListener`): run every scenario
against a modified listener without touching lastcall's code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from harness.errors import ConfigError
from harness.reference import wire
from harness.targets import names
from harness.targets.names import check_target

__all__ = ["Target", "WorkerSide", "EngineSide", "Codec", "REFERENCE_CODEC", "load_target", "target_names",
           "capabilities_of", "missing_for", "codec_of", "unavailable", "check_target", "describe"]

@runtime_checkable
class Codec(Protocol):
    """A target's framing, as the harness's client-side faults need it."""

    header_size: int  # bytes of the length prefix: stall_after_header sends exactly these

    def encode_request(self, req: wire.Request) -> bytes:
        """One whole request frame (prefix and body) in the target's framing."""

    def decode_reply(self, frame: bytes) -> wire.Reply:
        """A reply frame's body as the reference's Reply; WireError when it is not one."""


class _ReferenceCodec:
    header_size = wire.HEADER.size

    def encode_request(self, req: wire.Request) -> bytes:
        return wire.encode_request(req)

    def decode_reply(self, frame: bytes) -> wire.Reply:
        return wire.decode_reply(frame)


REFERENCE_CODEC: Codec = _ReferenceCodec()


@runtime_checkable
class WorkerSide(Protocol):
    """One worker process's listener(s) and backend, as a target runs them."""

    path: str  # the socket the worker serves on (rank, pp)

    def start(self) -> str:
        """Start (or restart) the listener for this rank; its label. Raises when the target refuses."""

    def stop(self, timeout: float | None = None) -> bool:
        """Stop every listener of this process (the registry's stop-all); True when all stopped."""

    def shutdown(self) -> bool:
        """The integration-level shutdown: stop, then tear the backend down only if stopped."""

    def mapped(self, group_id: int = 0) -> list[int] | None:
        """Offsets mapped in the backend now (None once torn down)."""

    def torn_down(self) -> bool:
        """Whether the backend has been torn down."""


@runtime_checkable
class EngineSide(Protocol):
    """The engine's client of every worker (rank x pp)."""

    path: str  # what the engine owns on the machine ("" if nothing)

    def map(self, offsets: list[int], group_id: int = 0) -> list[int]: ...

    def unmap(self, offsets: list[int], group_id: int = 0) -> None: ...

    def kv_tensors_created(self, group_id: int = 0) -> bool: ...

    def close(self) -> None: ...


@runtime_checkable
class Target(Protocol):
    """The plug-in contract (see the module docstring and the README's Targets section).

    ``worker_side(spec, recorder)``: called in a worker process after the fork;
    ``spec`` holds ipc, rank, pp, root (the run's socket root), tp, pp_size,
    drain_timeout, exit_budget, capacity, device.  ``engine_side(spec,
    recorder)``: the same in the engine process.  ``handshake_listener(metadata,
    *, host, port, recorder, start_timeout, join_timeout)``: an object with
    ``start() -> port``, ``shutdown() -> bool``, ``port`` and ``thread``.
    Each part is None where the target has none.  ``unavailable()`` says why
    the target cannot run on this machine (None when it can).
    """

    name: str
    about: str
    capabilities: frozenset[str]
    codec: Codec | None
    worker_side: Callable[[dict[str, Any], Any], WorkerSide] | None
    engine_side: Callable[[dict[str, Any], Any], EngineSide] | None
    handshake_listener: Callable[..., Any] | None


def codec_of(target: Any) -> Codec:
    """The target's codec (the reference framing when it names none)."""
    return getattr(target, "codec", None) or REFERENCE_CODEC


def capabilities_of(target: Any) -> frozenset[str]:
    return frozenset(getattr(target, "capabilities", frozenset()))


def missing_for(target: Any, step_kinds: set[str]) -> list[str]:
    """What of ``step_kinds`` the target cannot do, as 'step (needs capability)' strings."""
    from harness.reference.variants import missing_capabilities

    return missing_capabilities(target, step_kinds)


def unavailable(target: Any) -> str | None:
    """Why ``target`` cannot run here (a missing package, a missing source tree), or None."""
    check = getattr(target, "unavailable", None)
    return check() if callable(check) else None


def target_names() -> list[str]:
    """Every name ``load_target`` accepts without a module path (static: imports no target)."""
    return names.target_names()


def _import(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load target {spec!r}: {exc}; give module:attribute naming a target "
                          f"(see harness.targets.Target) or a harness.reference.variants.Variant") from None
    return obj


def load_target(spec: str) -> Any:
    """The target named ``spec`` (see the module docstring); ConfigError, with the known names, otherwise."""
    from harness.reference.variants import VARIANTS, Variant

    name, at, listener = spec.partition("@")
    if at:
        if name not in VARIANTS:
            raise ConfigError(f"target {spec!r}: a listener factory (@module:attribute) applies to the "
                              f"reference or one of its variants, not {name!r}")
        if ":" not in listener:
            raise ConfigError(f"target {spec!r}: after @ give the listener factory as module:attribute")
        base = VARIANTS[name]
        factory = _import(listener)
        if not callable(factory):
            raise ConfigError(f"target {spec!r}: {listener} is a {type(factory).__name__}, not a listener factory")
        from dataclasses import replace

        return replace(base, name=spec, listener=factory)
    if name in VARIANTS:
        return VARIANTS[name]
    if name in names.NAMED:
        return _import(names.NAMED[name])
    kind, pinned, version = name.partition("==")
    if pinned and kind == "kvcached":
        from harness.targets.kvcached import KvcachedTarget

        return KvcachedTarget(version)
    from harness.reference.handshake_variants import handshake_target

    hs = handshake_target(name)
    if hs is not None:
        return hs
    if ":" in name:
        obj = _import(name)
        if isinstance(obj, (Variant, Target)):
            return obj
        raise ConfigError(f"{name!r} is a {type(obj).__name__}, not a target (harness.targets.Target) "
                          f"or a harness.reference.variants.Variant")
    raise ConfigError(names.unknown_target(name))


def describe(targets: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(name, capabilities, about) rows, one per target of ``targets`` (name -> target), for a table."""
    return [(n, ", ".join(sorted(capabilities_of(t))), getattr(t, "about", getattr(t, "bug", "")))
            for n, t in targets.items()]
