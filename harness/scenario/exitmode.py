"""Which runs may skip their processes' module teardown: the fast exit, only where nothing judged can tell.

A forked child with torch loaded spends about 0.25 s of CPU in the interpreter's module teardown at exit (the
pages of every module object it touches are copied from the fork server's); a run of three processes pays
it three times.  The fast exit (``fast_exit`` in a child's spec, harness.launch.forkserver) does everything a
normal exit does up to that teardown: the role's main returns, non-daemon threads are joined, the atexit hooks
run (the exit hook of a target, weakref finalizers, multiprocessing's), the standard streams are flushed; then
``os._exit`` with the same status.  What it skips: module teardown (``__del__`` of objects module globals hold,
the final collection) and C-level exit handlers (C++ static destructors).

:func:`fast_exit_for` allows it for a scenario item only when every verdict is the same either way, by one
rule:

* the target is the built-in reference or one of its planted bugs (their code is the harness's: none of its
  objects removes a file, segment or process or records an event from ``__del__``, and the kernel releases
  descriptors and ports at any exit).  Any other target, whatever it is judged on, exits faithfully: its
  teardown may clean up or record;
* every checker expected declares ``observes_exit=False`` (harness.checkers.base.checker: its verdict reads
  nothing recorded after the atexit hooks); a checker that declares nothing (a plug-in's) observes it;
* no step observes an exit (``exit`` and ``kill`` record exit codes and timing, ``wait_gone`` and a ``wait``
  for an exit event wait on it).

Runs outside scenarios (the ``lastcall_cluster`` fixture, whose checkers are named after the run) exit
faithfully.  ``LASTCALL_FAST_EXIT=0`` makes every exit faithful (harness.launch.cluster.exit_mode); the
environment cannot widen the rule.
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.scenario.loader import MatrixItem
from harness.scenario.steps import EXIT_STEPS

__all__ = ["EXIT_STEPS", "EXIT_EVENTS", "fast_exit_for", "observes_exit"]

EXIT_EVENTS = frozenset({"process_exited", "exit_requested", "exit_hook_started", "exit_hook_finished",
                         "main_returned", "engine_died"})


def observes_exit(checker: str) -> bool:
    """Whether the checker's verdict can depend on how the run's processes exit: its declaration, and True for
    one that declares nothing or is not registered."""
    from harness.checkers.base import CHECKERS

    chk = CHECKERS.get(checker)
    return chk is None or chk.observes_exit is not False


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
    if not _own_code(target):
        return False, f"{target} is not the built-in reference or one of its planted bugs"
    judging = sorted(name for name in set(checkers) if observes_exit(name))
    if judging:
        return False, f"it judges {', '.join(judging)}, which observe(s) the exit"
    if _observes_exit(item.scenario.steps):
        return False, "a step observes an exit"
    return True, "nothing judged happens at or after module teardown"
