"""Target names, known without importing any target: what loading and ``lastcall validate`` check against.

The planted-bug variants live in harness.reference.variants and .handshake_variants, which import
the reference (and torch, about 4 s): a scenario file's ``catches:`` and ``target:`` are checked
against the static lists here instead, and tests/test_target_names.py holds the lists equal to
the registries.  :func:`check_target` checks a name the way :func:`harness.targets.load_target`
reads it, without importing anything: a registered name, a ``lastcall.targets`` entry point's name
(from the installed metadata, harness.entrypoints), ``kvcached==VERSION``, or
``module:attribute`` whose syntax is right and whose top-level module can be found.
"""

from __future__ import annotations

import difflib
import importlib.machinery
import importlib.util
import os
import re

from packaging.version import InvalidVersion, Version

from harness import entrypoints

__all__ = ["WORKER_VARIANTS", "HANDSHAKE_VARIANTS", "ENGINE_VARIANTS", "NAMED", "target_names", "unknown_target",
           "check_target", "trusted_by_name", "is_version"]

# harness.reference.variants.VARIANTS, in its order (the worker listener's reference and planted bugs)
WORKER_VARIANTS: tuple[str, ...] = (
    "reference", "timed_join_teardown", "no_conn_tracking", "dispatch_after_stop", "teardown_while_alive",
    "cuts_drained_reply", "drop_registration_on_error", "concurrent_stop_true", "stop_from_handler_deadlocks",
    "stop_from_handler_says_true", "wake_by_connect", "unlink_by_path", "rmtree_dir", "dies_on_bad_frame",
    "teardown_then_false", "lost_unmap", "leaks_usage_segment", "leaks_a_child", "head_of_line_blocking",
    "restart_drops_old", "unbounded_exit_hook", "teardown_ignores_stop", "unlocked_dispatch_decision",
    "unlocked_frame_completion", "unlocked_accept", "unlocked_concurrent_stops", "blocking_write",
    "short_write_lost", "partial_flush_abandoned", "dead_reader_spins",
    "reply_leaves_writing", "failed_start_leaks", "takes_over_live_socket", "refuses_stale_socket", "no_owner_record",
    "stop_unstarted_unlinks", "no_keep_alive", "hook_per_start", "exit_hook_waits_a_second", "exit_hook_says_ok",
    "cancel_left_to_thread", "starts_twice", "leaves_umask", "socket_mode_open", "busy_polls_after_reply",
    "dies_on_accept_failure", "spins_on_accept_failure", "unrecorded_dispatch", "misreports_close",
    "queues_partial_reads", "failed_start_not_undone", "accepts_after_stop", "answered_not_cancelled",
    "reply_without_deadline",
)
# harness.reference.handshake_variants.HANDSHAKE_VARIANTS, in its order (the handshake listener's)
HANDSHAKE_VARIANTS: tuple[str, ...] = (
    "reference", "never_stopped", "join_timeout_zero", "poll_timeout_1s", "ready_wait_no_timeout",
    "dies_on_bad_message", "bind_failure_leaks_pipe", "start_timeout_keeps_thread", "unchecked_request",
    "unstarted_shutdown_fails", "unbounded_request", "serves_after_stop",
)
# harness.targets.vllm_engine.ENGINE_TARGETS' stand-in engine and its planted bugs (the well-behaved one first)
ENGINE_VARIANTS: tuple[str, ...] = (
    "engine_standin", "engine_ignores_sigterm", "engine_leaves_socket_file", "engine_keeps_child",
    "engine_exits_zero_after_engine_died", "engine_hangs_stream", "engine_loses_signal_during_start",
    "engine_keeps_port", "engine_late_generation", "engine_hangs_on_held_side_channel",
    "engine_waits_on_paused_child", "engine_aborts_within_drain", "engine_skips_reap_during_start",
)
NAMED: dict[str, str] = {  # lazily imported targets beside the reference's variants
    "kvcached": "harness.targets.kvcached:TARGET",
    "vllm_nixl": "harness.targets.vllm_nixl:TARGET",
    # engine targets (cast engine): real vllm serve, the stand-in engine and its planted-bug variants
    "vllm_engine": "harness.targets.vllm_engine:TARGET",
    ENGINE_VARIANTS[0]: "harness.targets.vllm_engine:STANDIN",
    **{v: f"harness.targets.vllm_engine:{v.upper()}" for v in ENGINE_VARIANTS[1:]},
}
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")  # a module path or an attribute path


def is_version(text: str) -> bool:
    """Whether ``text`` is a PEP 440 version in its normal form (``0.1.6``, ``1.0rc1``): it names a cache folder,
    so nothing else (a path, a space, ``..``) may pass."""
    try:
        return str(Version(text)) == text
    except InvalidVersion:
        return False


def trusted_by_name(spec: str) -> bool:
    """Whether ``spec`` names a target without naming code: a built-in name, an installed ``lastcall.targets``
    entry point or ``kvcached==VERSION``. A ``module:attribute`` or ``reference@module:attribute`` read from a
    file imports what the file names: only the user's own command line may give one (docs/trust.md)."""
    kind, pinned, version = spec.partition("==")
    if pinned:
        return kind == "kvcached" and is_version(version)
    return spec in target_names() or spec in entrypoints.names(entrypoints.TARGETS)


def target_names() -> list[str]:
    """Every name ``load_target`` accepts without a module path."""
    return [*WORKER_VARIANTS, *(n for n in HANDSHAKE_VARIANTS if n not in WORKER_VARIANTS), *NAMED]


def unknown_target(name: str) -> str:
    """The one-line message for a name that is no target, with the nearest known name."""
    builtin = target_names()  # each is an entry point of lastcall's own distribution too: listed once
    known = [*builtin, *(n for n in entrypoints.names(entrypoints.TARGETS) if n not in builtin)]
    near = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return f"unknown target {name!r}{hint}; known: {', '.join(known)}; or give module:attribute"


def _check_import_path(spec: str, what: str) -> str | None:
    module, colon, attr = spec.partition(":")
    if not colon or not _DOTTED.fullmatch(module) or not _DOTTED.fullmatch(attr):
        return f"{what} {spec!r} is not module:attribute (e.g. mypkg.targets:MINE)"
    top = module.split(".")[0]
    # a top-level name: finding it imports nothing (every finder, editable installs' too); then where
    # `python -m` and pytest's rootdir would look as well, the working directory
    if importlib.util.find_spec(top) is None and importlib.machinery.PathFinder.find_spec(top, [os.getcwd()]) is None:
        return f"{what} {spec!r}: no module named {top!r} (not installed, and not under {os.getcwd()})"
    return None


def check_target(spec: str) -> str | None:
    """Why ``spec`` names no target (one line), or None; imports nothing (see the module docstring)."""
    name, at, listener = spec.partition("@")
    if at:
        if name not in WORKER_VARIANTS:
            return (f"target {spec!r}: a listener factory (@module:attribute) applies to the reference or one "
                    f"of its variants, not {name!r}")
        if ":" not in listener:
            return f"target {spec!r}: after @ give the listener factory as module:attribute"
        return _check_import_path(listener, f"target {spec!r}: the listener factory")
    if name in target_names() or name in entrypoints.names(entrypoints.TARGETS):
        return None  # an entry point's name is listed from the metadata: nothing is imported
    kind, pinned, version = name.partition("==")
    if pinned:
        if kind != "kvcached":
            return f"target {name!r}: only kvcached takes a pinned version, as kvcached==0.1.6"
        return None if is_version(version) else (f"target {name!r}: {version!r} is not a PEP 440 version in its "
                                                 "normal form, as kvcached==0.1.6")
    if ":" in name:
        return _check_import_path(name, "target")
    return unknown_target(name)
