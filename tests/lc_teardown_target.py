"""A target for tests/test_exitmode.py whose worker's module teardown leaves a mark (loaded in the worker).

``reference@tests.lc_teardown_target:TeardownListener``: the reference listener; once started, a module
global holds an object whose ``__del__`` writes ``teardown-ran`` into the run's socket root.  That runs only
in the interpreter's module teardown at exit: a faithful exit leaves the file (a leftover the run's
``after`` snapshot sees), the fast exit (harness.launch.forkserver) does not.  Code like it in a target is
why harness.scenario.exitmode keeps the faithful exit for a target that is not the harness's own whenever
the run judges the after snapshot.

``reference@tests.lc_teardown_target:StallingTeardownListener``: the same, but the object's ``__del__`` holds
the exit up for :data:`STALL_S` (a planted bug: an exit that stalls in module teardown, as a C++ static
destructor or a ``__del__`` joining a thread can).  Only a faithful exit shows it to ``exit_without_stall``.
"""

from __future__ import annotations

import importlib
import os
import select

from harness.reference.listener import WorkerListener

MARK = "teardown-ran"
STALL_S = 4.0  # how long the stalling target's module teardown holds its worker's exit up


class _Mark:
    def __init__(self, path: str) -> None:
        self.path = path
        # module globals (os itself) may be None by the time __del__ runs: everything it needs is held here
        self._open, self._close, self._flags = os.open, os.close, os.O_WRONLY | os.O_CREAT

    def __del__(self) -> None:
        self._close(self._open(self.path, self._flags, 0o600))


class TeardownListener(WorkerListener):
    def start(self) -> None:
        super().start()
        root = self.path.parent.parent if self.pp == 0 else self.path.parent.parent.parent
        # held by a module nothing else refers to (not by this one, which the target's objects keep alive)
        importlib.import_module("tests.lc_teardown_mark").HELD.append(_Mark(os.path.join(root, MARK)))


class _Stall:
    def __init__(self) -> None:
        # a pipe nobody writes: waiting for it to be readable is the planted stall, bounded by STALL_S
        self._r, self._w = os.pipe()
        self._select, self._stall = select.select, STALL_S

    def __del__(self) -> None:
        self._select([self._r], [], [], self._stall)


class StallingTeardownListener(WorkerListener):
    def start(self) -> None:
        super().start()
        importlib.import_module("tests.lc_teardown_mark").HELD.append(_Stall())
