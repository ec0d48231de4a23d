"""The stop contract (docs/stop-contract.md) as executable checks, each judged by the checkers.

``CHECKS`` lists one or more checks per contract line (:data:`harness.contract.table.LINES`).
A check drives a :class:`~harness.contract.rig.Rig` (or a child interpreter), which
records a history; :func:`run_check` judges that history with the registered
checkers the check names (``checkers``) and adds the check's own assertions, the
harness-side part that no checker judges yet.  ``by`` says, per planted bug the
check names, which oracles must fire on it: checker names, or
:data:`~harness.contract.table.HARNESS` (the default).
"""

from __future__ import annotations

import os
import shutil
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.checkers import RunRecord, Verdict, judge_all
from harness.contract import lines
from harness.contract.exit_probe import EXIT_BUDGET_S, exit_hook_bounded, exit_hook_retries
from harness.contract.rig import ContractViolation, recorded
from harness.contract.table import HARNESS, LINES, ContractLine
from harness.names import temp_root
from harness.probes.procs import process_umask
from harness.reference.variants import Variant
from harness.reference.wire import PeerClosed
from harness.timeouts import AT_ONCE_S, scale

__all__ = ["Check", "CHECKS", "Outcome", "run_check", "ContractViolation", "LINES", "ContractLine", "HARNESS",
           "checkers_of", "line_of"]

CheckFn = Callable[[Variant, Path], None]
Judged = str | tuple[str, Mapping[str, Any]]  # a checker's name, or its name and parameters


@dataclass(frozen=True)
class Check:
    """One executable check of contract line ``line``; ``catches`` names the variants it must fail on.

    ``checkers``: the registered checkers that judge the history it records (a name, or a name and its
    parameters); ``by``: for a bug of ``catches``, the oracles that must fire on it (checker names or
    HARNESS; HARNESS when not given); ``own``: whether it asserts anything itself.
    """

    line: int
    name: str
    fn: CheckFn
    catches: tuple[str, ...]
    checkers: tuple[Judged, ...] = ()
    by: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    own: bool = True  # it asserts something itself (False: its checkers are the whole check)

    @property
    def about(self) -> str:
        doc = (self.fn.__doc__ or "").strip().split("\n\n")[0]  # the first paragraph: what the line asks
        return doc.split(". ", 1)[-1] if doc[:1].isdigit() else doc

    @property
    def judged(self) -> tuple[tuple[str, dict[str, Any]], ...]:
        """Each checker with its parameters."""
        return tuple((j, {}) if isinstance(j, str) else (j[0], dict(j[1])) for j in self.checkers)

    @property
    def checker_names(self) -> tuple[str, ...]:
        """The names of its checkers, each once."""
        return tuple(dict.fromkeys(name for name, _ in self.judged))

    def oracles(self, bug: str) -> tuple[str, ...]:
        """The oracles that must fire on ``bug``."""
        return self.by.get(bug, (HARNESS,))


def _by(**bugs: tuple[str, ...]) -> Mapping[str, tuple[str, ...]]:
    return MappingProxyType(bugs)


CHECKS: tuple[Check, ...] = (
    Check(1, "no_late_dispatch", lines.no_late_dispatch, ("dispatch_after_stop", "cuts_drained_reply"),
          ("no_late_dispatch", "requests_served"), _by(dispatch_after_stop=("no_late_dispatch", HARNESS),
                                                      cuts_drained_reply=("requests_served", HARNESS))),
    # within the wait the check gives the stalled client (AT_ONCE_S, both scaled): the bug's close comes after it
    Check(2, "reads_cancelled", lines.reads_cancelled, ("no_conn_tracking",),
          (("reads_cancelled", {"within": AT_ONCE_S}), "no_late_dispatch"),
          _by(no_conn_tracking=("reads_cancelled", HARNESS))),
    Check(3, "handler_drained", lines.handler_drained, ("teardown_while_alive",), ("handler_drained",),
          _by(teardown_while_alive=("handler_drained", HARNESS))),
    Check(4, "teardown_keeps_other_ranks", lines.teardown_keeps_other_ranks, ("rmtree_dir",),
          (("stop_result", {"returns": True}), "requests_served"), _by(rmtree_dir=("requests_served", HARNESS))),
    Check(4, "unlink_only_own_socket", lines.unlink_only_own_socket, ("unlink_by_path",),
          ("unlinks_only_own_socket", ("stop_result", {"returns": True})),
          _by(unlink_by_path=("unlinks_only_own_socket", HARNESS))),
    Check(5, "retained_for_retry", lines.retained_for_retry,
          ("timed_join_teardown", "teardown_while_alive", "teardown_then_false"),
          ("retained_for_retry", "handler_drained", ("stop_result", {"step": "s1", "returns": False}),
           ("stop_result", {"step": "s2", "returns": True})),
          _by(timed_join_teardown=("handler_drained", "stop_result"), teardown_while_alive=("handler_drained",
              "stop_result"), teardown_then_false=("retained_for_retry", HARNESS))),
    Check(6, "concurrent_stop_waits", lines.concurrent_stop_waits, ("concurrent_stop_true",), ("handler_drained",),
          _by(concurrent_stop_true=("handler_drained", HARNESS))),
    Check(6, "stop_from_handler_returns", lines.stop_from_handler_returns, ("stop_from_handler_deadlocks",),
          (("stop_result", {"step": "inner", "returns": False}), ("stop_latency", {"step": "inner", "within": 0.5})),
          _by(stop_from_handler_deadlocks=("stop_latency", HARNESS))),
    Check(6, "cleanup_error_keeps_registration", lines.cleanup_error_keeps_registration,
          ("drop_registration_on_error",),
          ("registration_kept", ("stop_result", {"step": "s1", "returns": False}),
           ("stop_result", {"step": "s2", "returns": True}), "no_leftover_paths"),
          _by(drop_registration_on_error=("registration_kept", "no_leftover_paths", HARNESS))),
    Check(7, "stop_without_socket_path", lines.stop_without_socket_path, ("wake_by_connect",),
          (("stop_result", {"returns": True}),), _by(wake_by_connect=("stop_result",)), own=False),
    Check(8, "exit_hook_bounded", exit_hook_bounded, ("unbounded_exit_hook",),
          (("exit_hook_within", {"within": EXIT_BUDGET_S + 1.0}), ("exit_without_stall", {"within": 10.0})),
          _by(unbounded_exit_hook=("exit_hook_within", HARNESS))),
    Check(8, "exit_hook_retries", exit_hook_retries, ("drop_registration_on_error",),
          ("failed_stop_retried", "registration_kept", "no_leftover_paths"),
          _by(drop_registration_on_error=("failed_stop_retried", "registration_kept", "no_leftover_paths", HARNESS))),
    Check(9, "restart_refused_while_draining", lines.restart_refused_while_draining, ("restart_drops_old",),
          (("restart_refused", {"step": "r1", "error_class": "ListenerBusy"}),
           ("stop_result", {"step": "r2", "returns": True}), "registration_kept"),
          _by(restart_drops_old=("restart_refused", "registration_kept", HARNESS))),
    Check(10, "teardown_deferred", lines.teardown_deferred,
          ("teardown_ignores_stop", "timed_join_teardown", "drop_registration_on_error"),
          ("teardown_deferred", "no_dispatch_after_teardown", ("stop_result", {"step": "x1", "returns": False}),
           ("stop_result", {"step": "x2", "returns": True}), ("stop_result", {"step": "x3", "returns": True})),
          _by(teardown_ignores_stop=("teardown_deferred", "no_dispatch_after_teardown", "stop_result", HARNESS),
              timed_join_teardown=("no_dispatch_after_teardown", "stop_result", HARNESS),
              drop_registration_on_error=("teardown_deferred",))),
    Check(11, "served_while_stalled", lines.served_while_stalled, ("head_of_line_blocking",),
          ("served_while_stalled", "requests_served"),
          _by(head_of_line_blocking=("served_while_stalled", "requests_served", HARNESS))),
)


def checkers_of(number: int) -> tuple[str, ...]:
    """The checkers that prove contract line ``number``: its checks' (judged here), then the scenarios'."""
    named = [n for c in CHECKS if c.line == number for n in c.checker_names]
    return tuple(dict.fromkeys([*named, *LINES[number - 1].also]))


def line_of(checker: str) -> int:
    """The contract line a checker's violation breaks: the first line whose checks (else scenarios) name it.

    One line per checker: right for a checker of one line, the first of several otherwise. A checker that
    judges each step by what it must return (stop_result: lines 4, 5, 6, 7, 9, 10) breaks the line that
    says what that step must return; the explorer records that line with each step it judges
    (harness.contract.catalogue.STEP_LINES) instead of asking here."""
    for number in range(1, len(LINES) + 1):
        if checker in [n for c in CHECKS if c.line == number for n in c.checker_names]:
            return number
    for ln in LINES:
        if checker in ln.also:
            return ln.number
    raise KeyError(f"no line of the stop contract names the checker {checker!r}")


@dataclass(frozen=True)
class Outcome:
    """What one check said about one variant; ``fired``: the oracles that found a violation."""

    check: str
    variant: str
    kept: bool
    detail: str
    seconds: float
    fired: tuple[str, ...] = ()
    verdicts: tuple[Verdict, ...] = ()


def run_check(check: Check, variant: Variant, root: Path | None = None) -> Outcome:
    """Run ``check`` against ``variant`` in ``root`` (a fresh temp dir if None, removed after).

    Its assertions raising ContractViolation are its harness-side part (kept=False, HARNESS fired);
    then every history it recorded is judged by each of ``check.checkers``: a violated verdict breaks
    the line too.  Any other exception is a crash, reported as broken with its traceback, since a check
    must not crash; so is a checker that cannot judge (unknown) a history the assertions passed on.
    """
    own = root is None
    base = temp_root() if root is None else root
    t0 = time.monotonic()
    harness = ""
    umask = process_umask()  # the listener runs in this process: a variant's leaked umask must not stay here
    if umask is None:  # a kernel that does not say: read it by setting it, and put it back
        umask = os.umask(0o077)
        os.umask(umask)
    try:
        with recorded() as histories:
            try:
                check.fn(variant, base)
            except ContractViolation as exc:
                harness = str(exc)
            except PeerClosed as exc:  # a reply the check waited for never came: the listener dropped the connection
                harness = f"a reply was lost: the listener closed the connection under its request ({exc})"
        verdicts = tuple(v for h in histories for v in judge_all(
            RunRecord(tuple(h.rec.events()), dict(h.snapshots), scale=scale()), check.judged))
    except Exception as exc:
        detail = f"check crashed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        return Outcome(check.name, variant.name, False, detail, time.monotonic() - t0)
    finally:
        os.umask(umask)  # else every process started later from here (a fork server, its workers) inherits it
        if own:
            shutil.rmtree(base, ignore_errors=True)
    seconds = time.monotonic() - t0
    if check.checkers and not histories and not harness:  # (a child that died may have left none to read back)
        return Outcome(check.name, variant.name, False, "check crashed: it recorded no history for its checkers "
                       f"({', '.join(check.checker_names)})", seconds)
    broken = [v for v in verdicts if v.status == "violated"]
    fired = tuple(dict.fromkeys(v.checker for v in broken)) + ((HARNESS,) if harness else ())
    details = [f"{v.checker}: {v.message}" for v in broken] + ([harness] if harness else [])
    if not details:
        blind = [v for v in verdicts if not v.passes]
        if blind:
            return Outcome(check.name, variant.name, False, "check crashed: " + "; ".join(
                f"checker {v.checker} could not judge the history: {v.message}" for v in blind), seconds,
                verdicts=verdicts)
    return Outcome(check.name, variant.name, not details, "; ".join(details), seconds, fired, verdicts)
