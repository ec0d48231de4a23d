"""The test mutation/equivalent.yaml names for ``serving.py::ServingLoop._dispatch_ready::remove:26cc97``: the
dispatch pass's post-stop cancel of an answered connection without its ``conn.state = _State.CANCELLED`` (the
shutdown for reading kept).

The cancel runs only once the stop flag is set, in the dispatch pass, which is the last statement of the
serving loop's body, so the loop's test ends the loop right after it; every method that reads a connection's
state is one the loop's body runs (``_serve``'s skip, ``_on_readable``, ``_on_writable``, ``_dispatch_ready``,
whose later connections each read their own, and the pass after the loop finds nothing waiting) or a stop's
``_begin_stop``, which reads states only for the first stop, done before the flag was set.  So the label is
never read again: the connection is shut for reading either way, and closed at the thread's exit.  The test
checks that premise on the source, then runs reference and mutant through the one case that reaches the
cancel (a kept-alive client answered after the stop began, whose next request is sent once the pass is over):
the same replies (the first answered, the second's send failing at once), the same events, both stops True.
"""

from __future__ import annotations

import ast
import sys
import threading
import types
from pathlib import Path
from typing import Any

from lc_helpers import SERVING_PY, listener_methods

from harness import failpoints
from harness.faults import client as cf
from harness.history import Recorder
from harness.mutate.mutator import apply, mutants_of
from harness.reference import wire
from harness.reference.backend import NoopBackend
from harness.reference.listener import WorkerListener
from harness.reference.paths import socket_path

CANCEL_LABEL = "harness/reference/serving.py::ServingLoop._dispatch_ready::remove:26cc97"
SAFETY = 10.0  # seconds: a safety net on every wait, never a timer


def _mutant_class() -> Any:
    """WorkerListener with the mutant's _dispatch_ready, compiled from serving.py with the mutant applied."""
    src = SERVING_PY.read_text()
    m = {m.id: m for m in mutants_of(src, "harness/reference/serving.py")}[CANCEL_LABEL]
    mod = types.ModuleType("listener_mutant_cancel_label")
    sys.modules[mod.__name__] = mod  # its dataclasses look their module up
    exec(compile(apply(src, m), str(SERVING_PY), "exec"), mod.__dict__)
    return type("MutantServingLoop", (WorkerListener,), {"_dispatch_ready": vars(mod.ServingLoop)["_dispatch_ready"]})


def _reads_state(fn: ast.FunctionDef) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "state" and isinstance(n.ctx, ast.Load)
               for n in ast.walk(fn))


def _answered_after_stop(cls: type, lc_root: Path, name: str) -> tuple[Any, ...]:
    rec = Recorder()
    listener = cls(socket_path(name, 0, 0, lc_root), NoopBackend(), ipc=name, recorder=rec)
    held = failpoints.arm("backend.kv_tensors_created", "pause", count=1)
    snapshot = failpoints.arm("listener.stop_snapshot", "pass", count=1)
    answered = failpoints.arm("listener.answered", "pause", count=1)  # the thread kept alive past the pass
    listener.start()
    got: dict[str, Any] = {}
    frames = [wire.encode_request(wire.Request(cmd="kv_tensors_created", id=str(i))) for i in range(2)]

    def client() -> None:
        try:  # a request taken and never read waits out the timeout (a safety net: both fail at once)
            got["replies"] = cf.pipeline(str(listener.path), frames, 2.0, wire.decode_reply, read_each=True,
                                         gate=lambda n: answered.wait_reached(n, SAFETY))
        except TimeoutError:
            got["replies"] = []

    pipe, stopper = threading.Thread(target=client), threading.Thread(target=lambda: got.update(ok=listener.stop()))
    try:
        pipe.start()
        assert held.wait_reached(timeout=SAFETY)
        stopper.start()
        assert snapshot.wait_reached(timeout=SAFETY)  # the stop's snapshot leaves the connection in the backend
        held.release()
        pipe.join(SAFETY)
        answered.release()
        stopper.join(SAFETY)
    finally:
        failpoints.reset()
        pipe.join(SAFETY)
        stopper.join(SAFETY)
    replies = [None if r is None else (r.id, r.status) for r in got["replies"]]
    kinds = [e.kind for e in rec.events() if e.kind in ("dispatch_started", "dispatch_finished", "dispatch_refused",
                                                        "reads_cancelled", "connection_closed", "thread_exited")]
    return got["ok"], replies, kinds


def test_the_cancel_label_of_an_answered_connection_is_never_read_again(lc_root: Path,
                                                                        no_thread_leak: None) -> None:
    methods = listener_methods()
    assert {n for n, fn in methods.items() if _reads_state(fn)} == {
        "_begin_stop", "_serve", "_on_readable", "_dispatch_ready", "_on_writable"}
    begin = ast.unparse(methods["_begin_stop"])
    first = next(n for n in ast.walk(methods["_begin_stop"]) if isinstance(n, ast.If)
                 and ast.unparse(n.test) == "self._stopping")
    assert isinstance(first.body[0], ast.Return)  # a later stop reads no state
    assert begin.index("if self._stopping:") < begin.index("c.state is idle")
    loop = next(n for n in methods["_serve"].body[-1].body if isinstance(n, ast.While))  # type: ignore[attr-defined]
    assert ast.unparse(loop.test) == "not self._stopping"
    assert ast.unparse(loop.body[-1]) == "if self._ready:\n    self._dispatch_ready()"  # the pass ends the body
    cancel = next(n for n in ast.walk(methods["_dispatch_ready"]) if isinstance(n, ast.If)
                  and ast.unparse(n.test) == "self._stopping and conn.state is _State.IDLE")
    assert ast.unparse(cancel.body[0]) == "conn.state = _State.CANCELLED"
    ref = _answered_after_stop(WorkerListener, lc_root, "reference")
    mut = _answered_after_stop(_mutant_class(), lc_root, "mutant")
    assert ref == mut, (ref, mut)
    ok, replies, _kinds = ref
    assert ok and replies == [("0", "success"), None], ref
