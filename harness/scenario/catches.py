"""What a ``catches:`` entry means: which run of which variant, and when it counts as caught.

Two forms (docs/catches.md)::

    catches: [no_conn_tracking, lost_unmap]        # any expect checker but fault_fired must fire
    catches: {no_conn_tracking: [reads_cancelled]}  # one of these checkers must fire for that bug

A name is a planted bug of the listener the scenario drives (harness.targets.names), or a
``module:attribute`` naming a target.  When the target under test (the scenario's ``target:`` or the
session's override) declares ``variants`` (a mapping of a bug's name to a target spec that
:func:`harness.targets.load_target` accepts, e.g. ``{"no_conn_tracking": "mypkg.bugs:NO_TRACKING"}``), a
name resolves to the target's variant of that name (:func:`resolve`); a name it lacks is skipped with the
reason.

The rule (:func:`judge_catch`, also the planted-bug table's): a catch counts when one of the bug's checkers
is violated, unless

* the run is broken: it did not start, the harness itself crashed (an exception that is neither a StepError
  nor a HarnessError or TargetError), or it recorded an event outside harness.events (LASTCALL_STRICT_EVENTS=1);
* the run stopped (a step error, or the watchdog's hang) before every armed fault fired (fault_fired on the
  history is violated): the bug's path may never have been walked, and a checker that fires on a run cut
  short proves nothing about the bug.  One exception: a step error that is a ``wait`` timing out on an
  event kind that one of the violated checkers judges (its ``judges=``) does not void the catch: the wait
  timed out on exactly what the bug prevents (``wait: {closed: r1}`` waits for ``peer_closed``, which
  reads_cancelled judges; ``wait: {returned: s1}`` for ``step_returned``, which stop_result judges; ``wait:
  {event: K}`` for K; ``wait: {reached: f1}`` for ``fault_reached``, which no checker but fault_fired
  judges).  The kind waited for is the one the wait's ``step_failed`` event records (:func:`waited_for`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.launch.outcome import watchdog_words
from harness.scenario.result import RunResult

__all__ = ["Catch", "judge_catch", "waited_for", "resolve", "declared_variants", "is_spec"]

@dataclass(frozen=True)
class Catch:
    """Whether a run of a planted bug counts as caught, by which checkers, and why (for a miss)."""

    counted: bool
    by: tuple[str, ...]  # the bug's checkers that were violated
    why: str  # one line: what caught it, or why it does not count

    def to_dict(self, bug: str, checkers: Sequence[str]) -> dict[str, Any]:
        """verdicts.json's ``catch`` (harness.verdicts_file.CATCH reads it back)."""
        return {"bug": bug, "checkers": list(checkers), "counted": self.counted, "by": list(self.by),
                "why": self.why}


def waited_for(r: RunResult) -> str | None:
    """The event kind a timed-out wait of run ``r`` waited for, as its ``step_failed`` event records it (the
    Player's StepError carries it); None when the run's failure was no wait's."""
    failed = [e for e in r.events if e.kind == "step_failed"]
    kind = failed[-1].data.get("waited_for") if failed else None
    return kind if isinstance(kind, str) else None


def _judges(checker: str) -> tuple[str, ...]:
    from harness.checkers.base import CHECKERS

    chk = CHECKERS.get(checker)
    return tuple(getattr(chk, "judges", ())) if chk is not None else ()


def _hung(r: RunResult) -> str:
    """A hung run in words, with the watchdog's bound where the run recorded it: ``the run hung: watchdog after
    2 s (its detail)``."""
    words = watchdog_words(r.outcome.watchdog or {})
    head = f"the run {words}" if words else "the run hung"
    return f"{head} ({r.outcome.detail})" if r.outcome.detail else head


def _unfired(r: RunResult) -> str | None:
    """fault_fired's message when some armed fault never fired in ``r``'s history, else None."""
    from harness.checkers import RunRecord, judge

    v = judge("fault_fired", RunRecord(tuple(r.events), r.snapshots))
    return v.message if v.status == "violated" else None


def judge_catch(r: RunResult, checkers: Sequence[str]) -> Catch:
    """Whether run ``r`` of a planted bug is caught by one of ``checkers`` (the module docstring's rule)."""
    by = tuple(dict.fromkeys(v.checker for v in r.violated if v.checker in checkers))
    if r.broken:
        return Catch(False, by, f"the run is broken, so nothing it shows counts: {r.broken}")
    if not by:
        fired = [v.checker for v in r.violated]
        others = f" (violated instead: {', '.join(fired)})" if fired else ""
        return Catch(False, by, f"none of {', '.join(checkers)} reported a violation{others}")
    stopped = r.step_error or (_hung(r) if r.outcome.status == "hung" else "")
    unfired = _unfired(r) if stopped else None
    if unfired is not None:
        kind = waited_for(r)
        if kind is None or not any(kind in _judges(c) for c in by):
            return Catch(False, by, f"the run stopped before every armed fault fired ({stopped}; {unfired}): "
                         f"{', '.join(by)} fired on a run cut short")
        return Catch(True, by, f"caught by {', '.join(by)} (the wait timed out on {kind}, which the bug prevents)")
    return Catch(True, by, f"caught by {', '.join(by)}")


def is_spec(name: str) -> bool:
    """Whether a ``catches`` name is a ``module:attribute`` target spec (a planted bug of the user's own)."""
    module, sep, attribute = name.partition(":")
    return bool(sep and module and attribute)


def declared_variants(target: Any) -> Mapping[str, str] | None:
    """The target's ``variants`` (bug name -> target spec), or None when it declares none."""
    variants = getattr(target, "variants", None)
    return variants if isinstance(variants, Mapping) else None


def resolve(target: Any, name: str) -> tuple[str | None, str]:
    """The target spec a ``catches`` name runs as under ``target``, or None and why it is skipped.

    A ``module:attribute`` name is a target spec of its own (a planted bug of the user's): it runs as itself
    under any target. Any other name, under a target declaring ``variants``: its variant of that name (a spec
    string), or None when it lacks it; under any other target, the name itself (a registered variant)."""
    variants = declared_variants(target)
    if variants is None or is_spec(name):
        return name, ""
    spec = variants.get(name)
    if isinstance(spec, str):
        return spec, ""
    about = getattr(target, "name", type(target).__name__)
    if spec is not None:
        return None, (f"target {about}'s variant {name!r} is a {type(spec).__name__}, not a target spec "
                      f"(module:attribute or a target name)")
    known = ", ".join(sorted(variants)) or "none"
    return None, f"target {about} declares no variant {name!r} (its variants: {known})"
