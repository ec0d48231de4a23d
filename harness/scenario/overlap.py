"""``lastcall_overlap = N`` (ini) or ``--lastcall-overlap N``: catches items that wait, played N at a time.

A catches item runs a planted bug and mostly waits: for the bound the bug misses, a drain, an exit budget.
With N > 1, when a catches item starts its run, the next N-1 catches items this process is going to run
start theirs beside it, each on a thread of its own; the item waits for all of them before it ends, and each
of them, when pytest reaches it, takes the result its run left (its own run id, history, report and verdicts,
judged exactly as alone).  Nothing of an overlapped run outlives the item that played it, so the leak guard
of that item sees every run of the batch begin and end.

Which items overlap: scenario items of ``catches`` on the CPU, not chained (``--lastcall-chain``), not
repeats (``--repeat``: a flaky hunt wants each repeat on its own), with no skip or xfail mark (a skipif whose
condition is plainly False is none: the item runs), and whose run
is none of these: an engine of an ``exclusive`` target (real vLLM: one at a time on the machine, under its
engine lock), a ``stress`` step (its races are what it judges, and a busier machine changes them).  An engine
run of any other target (the stand-in and its planted bugs) overlaps: its trees claim their sessions as the
forked runs claim their groups, and each launches on a port no other live run of the process holds.  The reference
items of the scenarios (the ones that must pass) always run alone.  "Going to run": under pytest-xdist the
worker's queue of pending items; without it, the session's items after this one.  Of those, the longest by the
committed durations are played first (:func:`longest_first`), and under xdist they are moved to the front of
the worker's queue (:func:`bring_forward`), so they take their results next (an item the controller steals
before that is run again where it lands, and this result is dropped).  A test function takes part too when it
declares its run with ``@pytest.mark.lastcall_catches_run(SCENARIO, target=T)`` and takes the result from the
``lastcall_catches_run`` fixture: by the mark it asserts only what the run catches (see :func:`declared`).

Why a verdict does not change: the runs share nothing but the fork server and this process.  Each run's
names derive from its own run id; its processes are forked into a process group of their own (an engine
run's trees: a session of their own, and a port claimed for the run, harness.engine.host.free_port), and the
snapshot of one run leaves out every other live run's groups, sessions and what is below them
(harness.probes.snapshot.for_cluster), so no_orphan_processes, the fd and socket probes and the leftovers see
one run each.  What can differ is timing: the catches this applies to wait out a bound their bug misses,
which a busier machine misses by more, never by less.  ``benchmarks/overlap_ab.py`` compares every item's
verdicts with and without it.  On ^C (or SIGTERM) the item interrupts every run beside it (harness.launch.cluster.
Cluster.interrupt) and waits for their close before the interrupt goes on.  Off by default (N = 1): lastcall's
own suite sets it in pyproject.toml.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import pytest

__all__ = ["INI", "OPTION", "MARK", "addoption", "width", "eligible", "declared", "upcoming", "longest_first",
           "bring_forward", "result_for"]

INI = "lastcall_overlap"
OPTION = "--lastcall-overlap"
MAX = 32  # more runs at once than this is a typo, not a speed-up
JOIN_S = 600.0  # a safety net: each run is bounded by its own watchdog, far below this
_PENDING = pytest.StashKey[dict[int, "_Run"]]()


def addoption(parser: pytest.Parser) -> None:
    parser.addini(INI, type="string", default="1",
                  help="catches items played at once (harness.scenario.overlap): 1 plays each alone (the default)")
    parser.getgroup("lastcall").addoption(
        OPTION, type=int, default=None, metavar="N",
        help=f"play up to N catches items at once, each judged as alone (default: ini {INI}, 1)")


def width(config: pytest.Config) -> int:
    """N, from the option or the ini; a bad value is a located usage error."""
    opt = config.getoption("lastcall_overlap", default=None)
    raw: Any = opt if opt is not None else config.getini(INI)
    try:
        n = int(str(raw).strip())
    except ValueError:
        n = -1
    if not 1 <= n <= MAX:
        where = OPTION if opt is not None else f"{config.inipath or 'the ini file'}: {INI}"
        raise pytest.UsageError(f"{where} = {raw!r}: expected a whole number from 1 to {MAX}")
    return n


MARK = "lastcall_catches_run"
_DECLARED = pytest.StashKey[Any]()


def declared(item: Any) -> tuple[Any, str] | None:
    """The run a test function declares with ``@pytest.mark.lastcall_catches_run(SCENARIO, target=T)``: the
    first matrix point of the scenario file SCENARIO (relative to the rootdir) against target T, whose result
    the test takes from the ``lastcall_catches_run`` fixture.  None for any other item.  The mark's contract:
    the test asserts only that the run catches its target's bug (checkers violated, a step that fails), so a
    busier machine can only make it more caught, as with a catches item.  A bad mark is the test's own error
    (raised by the fixture)."""
    mark = item.get_closest_marker(MARK) if hasattr(item, "get_closest_marker") else None
    if mark is None or getattr(item, "matrix", None) is not None:
        return None
    stash = getattr(item, "stash", None)
    if stash is not None and _DECLARED in stash:
        return stash[_DECLARED]  # type: ignore[no-any-return]
    from harness.scenario.loader import expand, load

    (path,) = mark.args
    target = mark.kwargs["target"]
    found = (expand(load(str(item.config.rootpath / path)))[0], str(target))
    if stash is not None:
        stash[_DECLARED] = found
    return found


def _run_of(item: Any) -> tuple[Any, str | None]:
    """(matrix item, variant) of a scenario item, or of a test function's declared run."""
    if getattr(item, "matrix", None) is not None:
        return item.matrix, item.variant
    found = declared(item)
    if found is None:
        raise pytest.UsageError(f"{item.nodeid}: the {MARK} fixture needs @pytest.mark.{MARK}(SCENARIO, target=T)")
    return found


def eligible(item: Any) -> bool:
    """Whether ``item`` may be played beside others (the module docstring says which)."""
    from harness.scenario.player import cast_for
    from harness.scenario.repeat import base_id

    try:
        own = declared(item)
    except Exception:  # a bad mark: the test's own fixture raises it, alone
        return False
    if own is None and (getattr(item, "matrix", None) is None or getattr(item, "catch", None) is None
                        or getattr(item, "chain", None) is not None):  # a scenario item of catches, or a declared run
        return False
    matrix, variant = _run_of(item)
    if base_id(item.nodeid) != item.nodeid or matrix.params.get("device") != "cpu":
        return False
    if any(item.get_closest_marker(name) is not None for name in ("skip", "xfail")) or not _skipif_false(item):
        return False
    steps = matrix.scenario.steps
    if any(getattr(s, "kind", "") == "stress" for s in steps):
        return False
    from harness.launch.parts import cast_named

    if cast_named(cast_for(steps)).host is None:
        return True
    from harness.targets import load_target  # an engine run: one whose engine may share the machine

    try:
        return not getattr(load_target(variant or matrix.scenario.target), "exclusive", False)
    except Exception:  # a target that does not load fails in its own run, alone
        return False


def _worker(item: pytest.Item) -> Any:
    """xdist's WorkerInteractor of ``item``'s session (it holds the next index, then its queue), or None."""
    for plugin in item.config.pluginmanager.get_plugins():
        torun = getattr(plugin, "torun", None)
        if torun is not None and hasattr(torun, "lock") and getattr(plugin, "session", None) is item.session:
            return plugin
    return None


def _skipif_false(item: Any) -> bool:
    """Whether every skipif mark of ``item`` has a condition that is plainly False (a bool, as
    ``skipif(source is None, reason=...)`` gives: the item runs), so it may be played like an item without
    one; a condition given as a string, or true, keeps it alone."""
    marks = list(item.iter_markers("skipif")) if hasattr(item, "iter_markers") else []
    for mark in marks:
        conditions = mark.args or ((mark.kwargs["condition"],) if "condition" in mark.kwargs else ())
        if not conditions or any(not isinstance(c, bool) or c for c in conditions):
            return False
    return True


def upcoming(item: pytest.Item) -> list[pytest.Item]:
    """The items this process is going to run after ``item``, in order (see the module docstring)."""
    session = item.session
    worker = _worker(item)
    if worker is not None:
        nxt = getattr(worker, "nextitem_index", None)
        with worker.torun.lock() as queue:
            pending = list(queue)
        indices = ([nxt] if isinstance(nxt, int) else []) + [i for i in pending if isinstance(i, int)]
        return [session.items[i] for i in indices if 0 <= i < len(session.items)]
    try:
        here = session.items.index(item)
    except ValueError:
        return []
    return list(session.items[here + 1:])


_SECONDS = pytest.StashKey[dict[str, float]]()


def longest_first(item: pytest.Item, candidates: Iterable[Any], n: int) -> list[Any]:
    """The ``n`` of ``candidates`` to play beside ``item``: the longest first by pytest-split's committed
    durations (``.test_durations`` at the rootdir; an item it does not name first of all, as it may be the
    longest: a test function's declared run, a new scenario), the queue's order among equals, and the queue's
    order alone where there is no such file.  A batch lasts as long as its longest run, so the long waits
    share a batch and the later batches are short."""
    from harness.scenario.durations import durations

    seconds = item.config.stash.get(_SECONDS, None)
    if seconds is None:
        seconds = item.config.stash[_SECONDS] = durations(item.config.rootpath)
    if not seconds:
        return list(islice(candidates, n))  # the next n: the rest of the queue is never looked at
    return sorted(candidates, key=lambda c: -seconds.get(c.nodeid, float("inf")))[:n]


def bring_forward(item: pytest.Item, played: list[Any]) -> None:
    """Under xdist, move the items whose runs ``item`` played to the front of the worker's queue, in their
    order: they run next, and take their results at once.  Left where they were, xdist's work stealing (it
    takes the end of a worker's queue, where lastcall's scenario items are) gave some of them to the other
    worker, which ran them again while their results were dropped here (16 of a quick loop's runs)."""
    worker = _worker(item)
    if worker is None or not played:
        return
    played_ids = {id(p) for p in played}
    wanted = {i for i, it in enumerate(item.session.items) if id(it) in played_ids}
    with worker.torun.lock() as queue:
        first = [i for i in queue if i in wanted]
        rest = [i for i in queue if i not in wanted]
        queue.clear()
        queue.extend(first + rest)


@dataclass
class _Run:
    """One overlapped run: its thread, then its result or the exception it raised."""

    item: Any
    leader: str  # the node id of the item that played it
    thread: threading.Thread | None = None
    result: Any = None
    error: BaseException | None = None
    clusters: list[Any] = field(default_factory=list)


def _play(run: _Run) -> None:
    from harness.scenario.runner import run_item

    try:
        matrix, variant = _run_of(run.item)
        run.result = run_item(matrix, variant=variant, on_cluster=run.clusters.append)
    except BaseException as exc:  # kept for its own item, which raises it where pytest reports it
        run.error = exc


def result_for(item: Any) -> Any:
    """The result of ``item``'s run: the one an overlapped run left, else its own run, played beside the
    next catches items when overlap is on and it is one of them."""
    from harness.scenario.runner import run_item

    pending = item.config.stash.setdefault(_PENDING, {})
    done = pending.pop(id(item), None)
    if done is not None:
        item.user_properties.append(("lastcall_overlapped_with", done.leader))  # JUnit: where its time went
        if done.error is not None:
            raise done.error
        return done.result
    matrix, variant = _run_of(item)
    n = width(item.config)
    if n <= 1 or not eligible(item):
        return run_item(matrix, variant=variant, run_id=None)
    candidates = (other for other in upcoming(item)
                  if other is not item and id(other) not in pending and eligible(other))
    beside = [_Run(other, item.nodeid) for other in longest_first(item, candidates, n - 1)]
    bring_forward(item, [run.item for run in beside])
    for run in beside:
        pending[id(run.item)] = run
        run.thread = threading.Thread(target=_play, args=(run,), name=f"lastcall-overlap-{run.item.name}",
                                      daemon=True)
        run.thread.start()
    try:
        own = run_item(matrix, variant=variant, run_id=None)
        _join(beside, item.nodeid)
        return own
    except (KeyboardInterrupt, SystemExit):  # ^C or SIGTERM: the runs beside it end with it, then it goes on
        for run in beside:
            for cluster in list(run.clusters):
                cluster.interrupt()
        _join(beside, item.nodeid)
        raise
    except BaseException:
        _join(beside, item.nodeid)
        raise


def _join(runs: list[_Run], nodeid: str) -> None:
    for run in runs:
        assert run.thread is not None
        run.thread.join(JOIN_S)
        if run.thread.is_alive():
            run.error = RuntimeError(f"its run, overlapped with {nodeid}, did not end in {JOIN_S:.0f} s")
