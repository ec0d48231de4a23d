"""The explorer's invariants: the stop contract, judged after every step of :class:`~harness.explore.machine.
ListenerMachine` (a mixin of it: Hypothesis collects the ``@invariant`` of every base class).

Each breaks one line of docs/stop-contract.md: a registered checker over the history so far (HISTORY_CHECKERS), or
one of the explorer's own checks of what no history shows (the socket path, the registry, what a client reads).
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hypothesis.stateful import invariant

from harness.checkers import RunRecord, Verdict, judge_all
from harness.contract import line_of
from harness.contract.catalogue import HISTORY_CHECKERS, STEP_CHECKERS
from harness.contract.rig import ContractViolation, Rig
from harness.explore.model import Phase, _Conn, _is_eof
from harness.reference.paths import owner_path
from harness.timeouts import AT_ONCE_S, scale, scaled

__all__ = ["ContractInvariants", "Violation"]


class Violation(ContractViolation):
    """A broken line of the stop contract, seen by the explorer; ``line`` is its number in docs/stop-contract.md.

    ``checker``: the registered checker that found it over the history, or None where one of the explorer's
    own invariants did (its harness-side part: what happens at the socket path, in the registry, to a client).
    """

    def __init__(self, line: int, message: str, *, checker: str | None = None) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.checker = checker



class ContractInvariants:
    """The invariants of the machine; its state (below) is the machine's own."""

    rig: Rig
    listener: Any
    w: Any
    phase: Phase
    parked: Any
    eof_due: list[_Conn]
    expect: list[tuple[str, Any, int]]
    path_state: str
    replacement_ino: int | None
    trace: list[Any]

    if TYPE_CHECKING:  # the machine's own
        def _closed(self, conn: _Conn) -> None: ...

        def _explaining(self, where: str) -> AbstractContextManager[None]: ...

    @invariant()
    def stop_contract(self) -> None:
        """The stop contract, after every step."""
        with self._explaining(f"after step {len(self.trace)} ({self.trace[-1].kind if self.trace else 'start'})"):
            self._reads_cancelled()
            self._history()
            if self.phase is Phase.SERVING:
                self._serving()
            elif self.phase is Phase.STOPPING:
                self._retained()
            else:
                self._torn_down()

    def _reads_cancelled(self) -> None:
        """Line 2: every connection open when stop began (idle, stalled, kept alive) reads EOF at once."""
        due, self.eof_due = self.eof_due, []
        for conn in due:
            if not _is_eof(conn.sock, scaled(AT_ONCE_S)):
                raise Violation(2, f"connection {conn.name} ({conn.state}), open when stop began, was not closed "
                                   f"within {scaled(AT_ONCE_S):.1f}s"
                                   + (" while a handler was parked" if self.parked is not None else ""))
            if conn.state == "header":
                conn.state = "cancelled"  # keep the socket: a later send_body tries to finish the frame
            else:
                self._closed(conn)

    def _history(self) -> None:
        """The checkers of HISTORY_CHECKERS judge the recorded history; a violation breaks the line the
        contract table (harness.contract) gives the checker."""
        for verdict, line in self._verdicts():
            if verdict.status == "violated":
                raise Violation(line, f"{verdict.checker}: {verdict.message}",
                                checker=verdict.checker)
            if verdict.status == "unknown" and "crashed" in verdict.message:
                raise ContractViolation(f"checker {verdict.checker}: {verdict.message}")

    def _verdicts(self) -> list[tuple[Verdict, int]]:
        """Each verdict with the line its violation breaks: the contract table's line of the checker, or for
        a step checker (stop_result, restart_refused) the line that says what that step must return."""
        run = RunRecord(tuple(self.rig.rec.events()), dict(self.rig.taken.snapshots), scale=scale())
        history = judge_all(run, [name for name in HISTORY_CHECKERS if name not in STEP_CHECKERS])
        steps = list(self.expect)
        return ([(v, line_of(v.checker)) for v in history]
                + list(zip(judge_all(run, [(name, params) for name, params, _ in steps]),
                           [line for *_, line in steps], strict=True)))

    def _violated(self) -> list[tuple[Verdict, int]]:
        """The checkers of HISTORY_CHECKERS violated over the history so far, each with its line (none if
        judging itself fails)."""
        try:
            return [(v, ln) for v, ln in self._verdicts() if v.status == "violated"]
        except Exception:
            return []

    def _serving(self) -> None:
        thread = self.listener.thread
        if thread is None or not thread.is_alive():
            raise Violation(11, "the serving thread is gone although no stop has begun")
        if self.rig.registry.get(self.rig.registry.key_of(self.listener)) is not self.listener:
            raise Violation(9, "the serving listener is not registered")

    def _path_kept(self) -> str | None:
        """What is wrong at the socket path of a listener that must still own (or not own) it, if anything."""
        path = self.w.path
        if self.path_state == "ours":
            try:
                st_ = os.stat(path)
            except FileNotFoundError:
                return "the socket file is gone"
            if (st_.st_dev, st_.st_ino) != self.listener._ident:
                return "the socket file is not the one the listener bound"
        elif self.path_state == "replaced":
            try:
                if os.stat(path).st_ino != self.replacement_ino:
                    return "the socket that replaced ours is not at the path any more"
            except FileNotFoundError:
                return "the socket that replaced ours was unlinked"
        return None

    def _retained(self) -> None:
        """Line 5 (and 6): after a False stop nothing is torn down and the listener stays registered."""
        if self.listener.torn_down:
            raise Violation(5, "a stop that returned False tore the listener down")
        if self.rig.registry.get(self.rig.registry.key_of(self.listener)) is not self.listener:
            raise Violation(6, "a stop that returned False dropped the registration: nothing is left to retry")
        wrong = self._path_kept()
        if wrong:
            raise Violation(5, f"after a stop that returned False, {wrong}")

    def _torn_down(self) -> None:
        """Line 4: after a True stop the thread has exited, the path and directory are gone, nothing registered."""
        thread = self.listener.thread
        if thread is not None:
            thread.join(scaled(AT_ONCE_S))
            if thread.is_alive():
                raise Violation(4, "stop returned True but the serving thread is still alive")
        if self.rig.registry.get(self.rig.registry.key_of(self.listener)) is self.listener:
            raise Violation(4, "stop returned True but the listener is still registered")
        path = Path(self.w.path)
        if self.path_state == "replaced":
            wrong = self._path_kept()
            if wrong:
                raise Violation(4, f"after stop returned True, {wrong}: teardown removed what was not its own")
            return
        left = [str(p) for p in (path, owner_path(path), path.parent) if os.path.lexists(p)]
        if left:
            raise Violation(4, f"stop returned True but left {left}")
