"""Which runs may skip their processes' module teardown: the fast exit, only where nothing judged can tell.

A forked child with torch loaded spends about 0.25 s of CPU in the interpreter's module teardown at exit (the
pages of every module object it touches are copied from the fork server's); a run of three processes pays
it three times, the default suite about 70 s of CPU in all.  The fast exit (``fast_exit`` in a child's spec,
harness.launch.forkserver) does everything a normal exit does up to that teardown: the role's main returns,
non-daemon threads are joined (``threading._shutdown``), the atexit hooks run (the exit hook of a target,
weakref finalizers, multiprocessing's), the standard streams are flushed; then ``os._exit`` with the same
status.  What it skips: module teardown (``__del__`` of objects module globals hold, the final collection)
and C-level exit handlers (C++ static destructors).

:func:`fast_exit_for` allows it for a scenario item only when every verdict is the same either way:

* every checker expected is one of :data:`BEFORE_EXIT` (judged from events a process records before its
  main returns, or from the harness's own steps), or one of :data:`AFTER_EXIT` (judged from the "after"
  snapshot: files, segments, processes, ports) while the target's processes run only the harness's own
  code (the reference and its planted-bug variants: none of their objects removes a file, segment or
  process from ``__del__``, and the kernel releases descriptors and ports at any exit, so the snapshot is
  the same); a third-party target's teardown may clean up, so there those checkers keep the faithful exit;
* or one of :data:`OWN_EVENTS` (judged from events the listener's stop, teardown and exit hook record) while the
  target runs only the harness's own code: its exit hook runs under atexit in either exit, and none of its
  objects has a ``__del__`` or a weakref finalizer that could record one during module teardown; a
  third-party target's might, so there those keep the faithful exit;
* no step observes an exit (``exit`` and ``kill`` record exit codes and timing, ``wait_gone`` and a
  ``wait`` for an exit event wait on it);
* so any run that judges exit (``exit_without_stall``, which times every exit and exit hook; any checker
  not named here, e.g. a plug-in's) keeps the faithful exit, as do runs outside scenarios (the
  ``lastcall_cluster`` fixture, whose checkers are named after the run).

The environment cannot widen this: ``LASTCALL_FAST_EXIT=1`` forces nothing (it once forced the fast exit on
every run, those that judge exit included), and ``LASTCALL_FAST_EXIT=0`` makes every exit faithful
(harness.launch.cluster.exit_mode).
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.scenario.loader import MatrixItem

__all__ = ["BEFORE_EXIT", "AFTER_EXIT", "OWN_EVENTS", "EXIT_STEPS", "EXIT_EVENTS", "fast_exit_for"]

# Judged from events recorded before a process's main returns (its after_shutdown resources included) or from
# the harness's own steps: module teardown comes after all of them.
BEFORE_EXIT = frozenset({
    "stop_result", "stop_latency", "fault_fired", "served_while_stalled", "calls_answered", "requests_served",
    "survives_bad_input", "kv_state_consistent", "no_late_dispatch", "no_dispatch_after_teardown",
    "reads_cancelled", "handler_drained", "retained_for_retry", "teardown_deferred", "no_leaked_threads",
    "no_leaked_fds", "ctl_cleans", "ctl_sees_live_owners", "stop_snapshot_exact",
    # from the harness's own step returns alone (measure_idle's window, start_listener's modes, the replies to
    # malformed_handshake steps, a refused restart): recorded in the harness's process while the run's
    # processes still run
    "idle_cost", "private_paths", "bad_handshake_refused", "restart_refused",
})
# Judged from the after snapshot (every process reaped): the same after either exit for the harness's own code.
AFTER_EXIT = frozenset({"no_leftover_paths", "no_leftover_shm", "no_orphan_processes", "port_released",
                        "unlinks_only_own_socket"})
# Judged from the listener's own events (teardown steps, registrations, stop results), which the harness's own
# code records in stop(), its teardown and its atexit exit hook: the same after either exit for that code.
OWN_EVENTS = frozenset({"teardown_once", "registration_kept"})
EXIT_STEPS = frozenset({"exit", "kill", "wait_gone"})
EXIT_EVENTS = frozenset({"process_exited", "exit_requested", "exit_hook_started", "exit_hook_finished",
                         "main_returned", "engine_died"})


def _own_code(target: str) -> bool:
    """The target's processes run only the harness's code: the reference or one of its planted bugs."""
    from harness.targets.names import HANDSHAKE_VARIANTS, WORKER_VARIANTS

    return target in WORKER_VARIANTS or target in HANDSHAKE_VARIANTS


def _observes_exit(steps: Iterable[object]) -> bool:
    for step in steps:
        kind = getattr(step, "kind", "")
        if kind in EXIT_STEPS:
            return True
        if kind == "wait" and getattr(getattr(step, "wait", None), "event", None) in EXIT_EVENTS:
            return True
    return False


def fast_exit_for(item: MatrixItem, target: str, checkers: Iterable[str]) -> tuple[bool, str]:
    """(may this run's processes skip module teardown, why) for ``item`` against ``target``."""
    names = set(checkers)
    judging = sorted(names - BEFORE_EXIT - AFTER_EXIT - OWN_EVENTS)
    if judging:
        return False, f"it judges {', '.join(judging)}"
    if _observes_exit(item.scenario.steps):
        return False, "a step observes an exit"
    if names & (AFTER_EXIT | OWN_EVENTS) and not _own_code(target):
        after = ", ".join(sorted(names & (AFTER_EXIT | OWN_EVENTS)))
        return False, f"{target} is not the harness's own code and the run judges {after}"
    return True, "nothing judged happens at or after module teardown"
