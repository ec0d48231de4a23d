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

The contract itself (the Protocols with their lifecycle rules, the worker spec, the
capability names, :func:`check_target_object`) is :mod:`harness.targets.api`; a
near-miss target loaded here is refused with the list of what it misses.

Choosing one: by name (``reference``, each planted-bug variant, each handshake
variant, ``kvcached``, ``vllm_nixl``, a ``lastcall.targets`` entry point of an
installed distribution: harness.entrypoints) or by an importable ``module:attribute``,
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
from collections.abc import Mapping
from typing import Any

from harness import entrypoints
from harness.errors import ConfigError
from harness.reference import wire
from harness.targets import names
from harness.targets.api import Codec, EngineSide, Target, WorkerSide, check_target_object
from harness.targets.names import check_target

__all__ = ["Target", "WorkerSide", "EngineSide", "Codec", "REFERENCE_CODEC", "load_target", "target_names",
           "uses_torch", "capabilities_of", "absent_of", "missing_for", "codec_of", "unavailable", "check_target",
           "check_target_object", "describe", "catalogue", "describe_one"]


class _ReferenceCodec:
    header_size = wire.HEADER.size

    def encode_request(self, req: wire.Request) -> bytes:
        return wire.encode_request(req)

    def decode_reply(self, frame: bytes) -> wire.Reply:
        return wire.decode_reply(frame)


REFERENCE_CODEC: Codec = _ReferenceCodec()


def codec_of(target: Any) -> Codec:
    """The target's codec (the reference framing when it names none)."""
    return getattr(target, "codec", None) or REFERENCE_CODEC


def capabilities_of(target: Any) -> frozenset[str]:
    return frozenset(getattr(target, "capabilities", frozenset()))


def absent_of(spec: object) -> frozenset[str]:
    """The parties the target named ``spec`` declares absent (harness.events: checkers of their events are not
    judged); none when ``spec`` names no target that loads here (a run that could not launch says why itself;
    a stored run may name one this machine lacks)."""
    if not isinstance(spec, str) or not spec:
        return frozenset()
    from harness.events import absent_parties

    try:
        return absent_parties(capabilities_of(load_target(spec)))
    except ConfigError:
        return frozenset()


def missing_for(target: Any, needs: Mapping[str, str]) -> list[str]:
    """What of ``needs`` ({need-key: capability}, harness.scenario.needs.step_needs) the target cannot do, as
    'step (needs capability)' strings."""
    from harness.reference.capabilities import missing_capabilities

    return missing_capabilities(target, needs)


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
                          f"(see harness.targets.api.Target) or a harness.reference.variants.Variant") from None
    return obj


def uses_torch(spec: str, device: str = "cpu") -> bool:
    """Whether the processes of target ``spec`` use torch on ``device``: always off the CPU (a CUDA run's KV
    pages are torch tensors, the reference's and kvcached's alike), else the target's optional ``uses_torch``
    (harness.targets.api.Target; absent: True). Runs of a target that says False fork from a fork server that
    did not preload torch (harness.launch.spawn.ForkServer). True for a target that cannot be loaded here: its
    processes say why."""
    if device != "cpu":
        return True
    try:
        target = load_target(spec)
    except Exception:  # the run's own load reports it, located
        return True
    return getattr(target, "uses_torch", True) is not False


def load_target(spec: str) -> Any:
    """The target named ``spec`` (see the module docstring); ConfigError, with the known names, otherwise."""
    from harness.reference.variants import VARIANTS

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
        problems = listener_problems(factory)
        if problems:
            raise ConfigError(f"target {spec!r}: {listener} is not a listener factory the reference can use: "
                              + "; ".join(problems))
        from dataclasses import replace

        return replace(base, name=spec, listener=factory)
    if name in VARIANTS:
        return VARIANTS[name]
    if name in names.NAMED:
        return _import(names.NAMED[name])
    kind, pinned, version = name.partition("==")
    if pinned and kind == "kvcached":
        if not names.is_version(version):
            raise ConfigError(f"target {name!r}: {version!r} is not a PEP 440 version in its normal form, as "
                              "kvcached==0.1.6")
        from harness.targets.kvcached import KvcachedTarget

        return KvcachedTarget(version)
    from harness.reference.handshake_variants import handshake_target

    hs = handshake_target(name)
    if hs is not None:
        return hs
    if ":" in name:
        return _checked(name, _import(name))
    if name in entrypoints.names(entrypoints.TARGETS):
        return _checked(f"{name} (entry point {entrypoints.value_of(entrypoints.TARGETS, name)})",
                        entrypoints.load(entrypoints.TARGETS, name))
    raise ConfigError(names.unknown_target(name))


LISTENER_CALL = "(path, backend, *, rank, pp, ipc, config, recorder)"  # how ReferenceWorker builds a listener
LISTENER_METHODS = {"start": 0, "stop": 1, "_begin_stop": 0}  # what the worker and registry call, and with how many


def listener_problems(factory: Any) -> list[str]:
    """Every way ``factory`` misses what the reference's worker and registry use of a listener, one line each.

    A listener is built as ``factory(path, backend, rank=, pp=, ipc=, config=, recorder=)`` (LISTENER_CALL);
    a class must have ``start()``, ``stop(timeout)`` and ``_begin_stop()`` (the exit hook's), and its instances
    ``label``, ``ipc``, ``rank`` and ``pp`` (set by the constructor: not checked here)."""
    import inspect

    out = []
    try:
        inspect.signature(factory).bind("path", None, rank=0, pp=0, ipc="", config=None, recorder=None)
    except TypeError as exc:
        out.append(f"it cannot be called as {LISTENER_CALL} ({exc})")
    except ValueError:
        pass  # a builtin without a signature: trust it
    if isinstance(factory, type):
        for name, n in LISTENER_METHODS.items():
            meth = getattr(factory, name, None)
            if not callable(meth):
                out.append(f"it has no method {name}()")
                continue
            try:
                inspect.signature(meth).bind(None, *([None] * n))  # self, then its arguments
            except TypeError as exc:
                out.append(f"its {name}() cannot be called with {n} argument(s) ({exc})")
            except ValueError:
                pass
    return out


def _checked(spec: str, obj: Any) -> Any:
    """``obj`` when it is a target; ConfigError listing every attribute it misses otherwise."""
    from harness.reference.variants import Variant

    if isinstance(obj, Variant):
        return obj
    problems = check_target_object(obj)
    if problems:
        raise ConfigError(f"{spec} is a {type(obj).__name__} that is not a target (harness.targets.api.Target): "
                          + "; ".join(problems))
    return obj


def catalogue() -> list[tuple[str, str, str, str]]:
    """(name, availability, capabilities, about) for every ``lastcall.targets`` entry point.

    lastcall's own targets are entry points of its distribution too (pyproject.toml, harness.targets.builtin):
    they come first, in harness.targets.names' order, then those of other distributions.  A built-in name
    the installed metadata lacks (an install older than pyproject.toml) is listed all the same, saying so.
    Loads each; a target that cannot be loaded, or whose
    ``unavailable()`` says why it cannot run here, is listed as unavailable with the reason in one line.
    """
    registered = entrypoints.names(entrypoints.TARGETS)
    known = names.target_names()
    rows = []
    for name in [*known, *(n for n in registered if n not in known)]:
        try:
            row = describe_one(name)
        except Exception as exc:  # a missing dependency of one target is a line of the table, not a traceback
            row = (name, f"unavailable: {_first_line(exc)}", "", "")
        if name not in registered:
            row = (row[0], f"{row[1]} ({UNREGISTERED})", *row[2:])
        rows.append(row)
    return rows


UNREGISTERED = "no lastcall.targets entry point: refresh the install, pip install --no-deps -e ."


def describe_one(spec: str) -> tuple[str, str, str, str]:
    """(name, availability, capabilities, about) of the target ``spec``; ConfigError when it names none."""
    problem = check_target(spec)
    if problem:
        raise ConfigError(problem)
    target = load_target(spec)
    why = unavailable(target)
    return (spec, "available" if why is None else f"unavailable: {_first_line(why)}",
            ", ".join(sorted(capabilities_of(target))), _first_line(getattr(target, "about", "")))


def _first_line(what: object) -> str:
    text = what if isinstance(what, str) else str(what) if isinstance(what, ConfigError) else \
        f"{type(what).__name__}: {what}"
    return text.strip().splitlines()[0] if text.strip() else ""


def describe(targets: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(name, capabilities, about) rows, one per target of ``targets`` (name -> target), for a table."""
    return [(n, ", ".join(sorted(capabilities_of(t))), getattr(t, "about", getattr(t, "bug", "")))
            for n, t in targets.items()]
