"""The tests mutation/equivalent.yaml names for mutants of the worker listener (harness/reference/listener.py and
its request path, harness/reference/serving.py): each shows that what anyone can observe of the mutant is what
they observe of the reference.

``serving.py::ServingLoop._close::remove:01b4f0`` (``_close`` keeps the connection's queued frames,
``conn.bodies.clear()`` removed):
every read of ``conn.bodies`` is in ``_dispatch_ready``'s loop, which stops as soon as the socket is closed
(``conn.sock.fileno() != -1``), and the only other use is ``_on_readable``'s extend, which runs only on an open
connection found in ``_conns`` (a closed one was popped) or a fresh accept.  The test checks that premise on the
source, then runs the one case where a closed connection still has frames queued (a client pipelines three
requests and goes away while the first is in the backend): reference and mutant make one backend call, answer
nothing more and close the connection once.

``serving.py::ServingLoop._dispatch_ready::unlock:50e45c`` (the state update after a connection's replies runs
without the listener lock):
the only other thread that reads or writes a connection's state or the stop flag is a stop's ``_begin_stop``
(under the lock), and every statement of the unlocked block reads or writes one attribute at a time.  The test
holds the serving thread before each statement of the block in turn (a line tracer on that thread only), runs
the stop's part there, and lets it go on: each outcome (the reply, the connections the stop cancelled, the
closes, what stop returned) is one the locked block has too, with the stop before the block or after it.

``serving.py::ServingLoop._deliver_unread::remove:43964b``
(``_deliver_unread`` without its close of a connection whose reply was not read) is closed by the thread's exit
that follows at once, only its recorded reason differing.
"""

from __future__ import annotations

import ast
import functools
import os
import select
import socket
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest
from lc_helpers import ROOT, SERVING_PY, listener_methods

from harness.faults import client as cf
from harness.history import Recorder
from harness.mutate.mutator import apply, mutants_of
from harness.reference import wire
from harness.reference.backend import NoopBackend
from harness.reference.listener import WorkerListener
from harness.reference.paths import socket_path

pytestmark = pytest.mark.slow  # making the mutants of the listener takes ~3 s (~10 s on a loaded machine)

BODIES_CLEAR = "harness/reference/serving.py::ServingLoop._close::remove:01b4f0"
POST_DISPATCH_UNLOCK = "harness/reference/serving.py::ServingLoop._dispatch_ready::unlock:50e45c"
SAFETY = 10.0  # seconds: a safety net on every wait, never a timer


@functools.cache
def _mutants(file: str) -> dict[str, Any]:
    """The mutants of ``file`` (as ids name it) by id."""
    return {m.id: m for m in mutants_of((ROOT / file).read_text(), file)}


@functools.cache
def _mutated(mid: str) -> Any:
    """WorkerListener with the method mutant ``mid`` edits compiled from its file with the mutant applied (a
    module of its own: the reference is untouched), every other method the reference's."""
    file = mid.partition("::")[0]
    src = (ROOT / file).read_text()
    m = _mutants(file)[mid]
    mod = types.ModuleType("mutant_" + "".join(c if c.isalnum() else "_" for c in mid))
    sys.modules[mod.__name__] = mod  # its dataclasses look their module up
    exec(compile(apply(src, m), str(ROOT / file), "exec"), mod.__dict__)
    owner, _, name = m.qualname.partition(".")
    return type(f"Mutant{owner}", (WorkerListener,), {name: vars(getattr(mod, owner))[name]})


def _method(name: str) -> ast.FunctionDef:
    return listener_methods()[name]


def _uses(attr: str) -> dict[str, list[str]]:
    """Each method of WorkerListener that names ``conn.<attr>``, with the statements (unparsed) that do."""
    out: dict[str, list[str]] = {}
    for fn in listener_methods().values():
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and node.attr == attr and ast.unparse(node.value) == "conn":
                out.setdefault(fn.name, []).append(ast.unparse(node))
    return out


def _frame(cmd: str = "kv_tensors_created", rid: str = "r", size: int | None = None) -> bytes:
    return wire.encode_request(wire.Request(cmd=cmd, id=cf.padded_id(rid, size)))


# --------------------------------------------------------- 594: bodies kept
def test_a_closed_connections_queued_frames_are_never_read_whether_cleared_or_not(
        lc_root: Path, lastcall_failpoints: Any, no_thread_leak: None) -> None:
    assert set(_uses("bodies")) == {"_on_readable", "_dispatch_ready", "_close"}
    loop = next(n for n in ast.walk(_method("_dispatch_ready")) if isinstance(n, ast.While)
                and "conn.bodies" in ast.unparse(n.test))
    assert ast.unparse(loop.test) == "conn.bodies and conn.sock.fileno() != -1"  # stops once closed
    seen: dict[str, tuple[int, list[str], int]] = {}
    for name, cls in (("reference", WorkerListener), ("mutant", _mutated(BODIES_CLEAR))):
        rec = Recorder()
        listener = cls(socket_path(name, 0, 0, lc_root), NoopBackend(), ipc=name, recorder=rec)
        listener.start()
        fp = lastcall_failpoints.arm("backend.kv_tensors_created", "pause", count=1)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(listener.path))
        client.sendall(_frame(rid="a") + _frame(rid="b") + _frame(rid="c"))
        assert fp.wait_reached(timeout=SAFETY)  # the first is in the backend, two more queued behind it
        client.close()  # its client is gone: the first reply fails and the connection is closed
        fp.release()
        assert rec.wait_for("connection_closed", SAFETY) is not None
        assert listener.stop()
        kinds = [e.kind for e in rec.events() if e.kind in ("dispatch_started", "dispatch_finished",
                                                            "dispatch_refused", "reply_failed", "connection_closed")]
        seen[name] = (len(rec.events("dispatch_started")), kinds, len(rec.events("connection_closed")))
    assert seen["reference"] == seen["mutant"], seen
    assert seen["reference"][0] == 1 and seen["reference"][2] == 1


def _started_held(cls: type, lc_root: Path, ipc: str, func: str, line: int,
                  nth: int) -> tuple[Any, Recorder, threading.Event, threading.Event]:
    """A started ``cls`` whose serving thread, the ``nth`` time it reaches ``line`` of ``func``, sets ``at`` and
    waits for ``go`` (a line tracer: no failpoint lies there); its listener, recorder and the two events."""
    at, go = threading.Event(), threading.Event()
    hits = 0

    def local(frame: Any, event: str, arg: Any) -> Any:
        nonlocal hits
        if event == "line" and frame.f_lineno == line:
            hits += 1
            if hits == nth:
                at.set()
                go.wait(SAFETY)
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_name == func else None

    rec = Recorder()
    listener = cls(socket_path(ipc, 0, 0, lc_root), NoopBackend(), ipc=ipc, recorder=rec)
    threading.settrace(tracer)  # only the serving thread, started now, is traced
    try:
        listener.start()
    finally:
        threading.settrace(None)  # type: ignore[arg-type]
    return listener, rec, at, go


# ------------------------------------------------ 522: post-dispatch unlock
def _held_at(cls: type, lc_root: Path, line: int, nth: int) -> tuple[Any, ...]:
    """Run one request on ``cls``; hold the serving thread before ``line`` of _dispatch_ready (its ``nth`` time
    there), run a stop's _begin_stop meanwhile, let the thread go on, stop; what anyone can observe."""
    listener, rec, at, go = _started_held(cls, lc_root, "u", "_dispatch_ready", line, nth)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(str(listener.path))
        client.sendall(_frame(rid="u"))
        assert at.wait(SAFETY), f"the serving thread never reached line {line}"
        stopper = threading.Thread(target=listener._begin_stop)
        stopper.start()
        stopper.join(SAFETY)
        assert not stopper.is_alive(), "the stop's part waited for the serving thread"
        go.set()
        client.settimeout(SAFETY)
        status = wire.decode_reply(wire.recv_frame(client)).status
        stopped = listener.stop()
        closed = cf.closed(client, SAFETY)
    finally:
        go.set()
        client.close()
        listener.stop()
    cancelled = [tuple(e.data["conns"]) for e in rec.events("reads_cancelled")]
    whys = tuple(e.data.get("why") for e in rec.events("connection_closed"))
    return status, tuple(cancelled), whys, stopped, closed


def test_the_post_dispatch_update_without_its_lock_ends_as_the_locked_one_can(lc_root: Path,
                                                                              no_thread_leak: None) -> None:
    src = [ln.strip() for ln in SERVING_PY.read_text().splitlines()]
    loop = src.index("while self._ready:")  # _dispatch_ready's loop, and its post-dispatch block (0-based indexes)
    block = src.index("if conn.sock.fileno() != -1:", loop)
    assert src[block + 1] == "with self._lock:"
    reference = {_held_at(WorkerListener, lc_root, block + 1, 1),  # the stop before the block (1-based lines)
                 _held_at(WorkerListener, lc_root, loop + 1, 2)}  # and after it (the loop's next test)
    assert len(reference) == 2, reference  # the two orders differ: what the stop cancelled
    mutant = _mutated(POST_DISPATCH_UNLOCK)
    assert src[block + 4] == "if self._stopping and conn.state is _State.IDLE:"
    for line in (block + 3, block + 4, block + 5):  # before each statement of the unlocked block that reads or writes
        got = _held_at(mutant, lc_root, line, 1)  # a state
        assert got in reference, (line, got, reference)



POLL_FOREVER = "harness/reference/serving.py::ServingLoop._serve::constant:0bbd1b"
_EPOLL_WAIT = ("232", "281")  # x86_64 epoll_wait, epoll_pwait


def _epoll_wait_timeout(timeout: float) -> int:
    """The timeout (ms, as the kernel is given it) of an ``epoll.poll(timeout)`` a thread is blocked in: read
    from /proc/self/task/TID/syscall while the thread waits in epoll_wait, then released by a write."""
    r, w = os.pipe()
    ep = select.epoll()
    ep.register(r, select.EPOLLIN)
    tid: list[int] = []
    got: list[Any] = []
    t = threading.Thread(target=lambda: (tid.append(threading.get_native_id()), got.append(ep.poll(timeout))))
    try:
        t.start()
        end = time.monotonic() + SAFETY  # a safety net: the thread is in epoll_wait at once
        fields: list[str] = []
        while not (fields and fields[0] in _EPOLL_WAIT) and time.monotonic() < end:
            if tid:
                with open(f"/proc/self/task/{tid[0]}/syscall") as f:
                    fields = f.read().split()
        assert fields and fields[0] in _EPOLL_WAIT, fields
        os.write(w, b"x")
        t.join(SAFETY)
        assert got == [[(r, select.EPOLLIN)]], got
        raw = int(fields[4], 16) & 0xFFFFFFFF  # epoll_wait's 4th argument, an int
        return raw - (1 << 32) if raw >= 1 << 31 else raw
    finally:
        ep.close()
        os.close(r)
        os.close(w)


def test_epoll_poll_waits_forever_for_any_negative_timeout_as_for_minus_one() -> None:
    """``serving.py::ServingLoop._serve::constant:0bbd1b`` (the serving thread's ``ep.poll(... else -1)`` becomes
    ``-2``): CPython's
    ``epoll.poll`` hands the kernel -1 (wait until an event) for every negative timeout, so the serving loop
    blocks exactly as before.  Shown on the syscall itself: the kernel's timeout argument for -1 and -2, against
    a positive one that reaches it as it is (so the probe can tell them apart)."""
    src = SERVING_PY.read_text()
    mutant = _mutants("harness/reference/serving.py")[POLL_FOREVER]
    line = src.splitlines()[mutant.line - 1]
    assert "ep.poll(self._poll_timeout() if self._accept_delay else -1)" in line, line
    assert apply(src, mutant).splitlines()[mutant.line - 1] == line.replace("else -1)", "else -2)")
    assert _epoll_wait_timeout(-1) == -1
    assert _epoll_wait_timeout(-2) == -1
    assert _epoll_wait_timeout(5) == 5000


# --------------------------------------------- 387: the last dispatch pass
LAST_PASS = "harness/reference/serving.py::ServingLoop._serve::remove:e1fa66"
_LAST_PASS_LINE = _mutants("harness/reference/serving.py")[LAST_PASS].line
_ADDS = ("append", "appendleft", "extend", "extendleft", "insert")


def _calls(fn: ast.FunctionDef) -> set[str]:
    """The methods of self that ``fn`` calls."""
    return {n.func.attr for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and ast.unparse(n.func.value) == "self"}


def _stop_into(seen: dict[str, list[tuple[str, Any]]], key: str, listener: Any) -> None:
    seen[key] = [("ok", listener.stop())]


class _CountsLastPass:
    """Mixed into a listener class: records how many connections the dispatch pass after the serving loop
    found waiting (the reference makes that pass; the mutant does not)."""

    found: list[int]

    def _dispatch_ready(self) -> None:
        if self._stopping and sys._getframe(1).f_lineno == _LAST_PASS_LINE:  # type: ignore[attr-defined]
            self.found.append(len(self._ready))  # type: ignore[attr-defined]
        super()._dispatch_ready()  # type: ignore[misc]


def test_the_last_dispatch_pass_always_finds_nothing_waiting(lc_root: Path, lastcall_failpoints: Any,
                                                            no_thread_leak: None) -> None:
    """``serving.py::ServingLoop._serve::remove:e1fa66`` (the ``_dispatch_ready()`` after the serving loop,
    "everything left answers
    shutting_down", removed): that pass always finds ``_ready`` empty.  The only statement that adds to
    ``_ready`` is ``_on_readable``'s append; ``_on_readable`` runs only inside the loop's body (called there and
    from ``_accept``, itself called only there); the body ends with a dispatch pass whenever ``_ready`` holds a
    connection, a pass that takes connections off until it is empty and never reaches ``_on_readable``; and the
    loop's condition is tested only between two bodies.  So the pass after the loop has nothing to do, and
    without it the listener does the same.  The test checks that premise on the source, then stops a listener
    with frames queued behind a handler the stop drains (the pipelined case of the library): the reference's
    last pass finds no connection, and reference and mutant answer, record and close alike."""
    src = SERVING_PY.read_text()
    line = src.splitlines()[_LAST_PASS_LINE - 1]
    assert line.strip() == "self._dispatch_ready()  # everything left answers shutting_down", line
    methods = listener_methods()
    adders = {name for name, fn in methods.items() for n in ast.walk(fn) if isinstance(n, ast.Call)
              and isinstance(n.func, ast.Attribute) and n.func.attr in _ADDS
              and ast.unparse(n.func.value) == "self._ready"}
    assert adders == {"_on_readable"}, adders
    callers = {name: {m for m, fn in methods.items() if name in _calls(fn)} for name in ("_on_readable", "_accept")}
    assert callers == {"_on_readable": {"_serve", "_accept"}, "_accept": {"_serve"}}, callers
    loop = next(n for n in ast.walk(methods["_serve"]) if isinstance(n, ast.While))
    assert ast.unparse(loop.test) == "not self._stopping"
    in_body = {n.func.attr for s in loop.body for n in ast.walk(s) if isinstance(n, ast.Call)
               and isinstance(n.func, ast.Attribute)}
    outside = {n.func.attr for s in methods["_serve"].body if s is not loop for n in ast.walk(s)
               if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    assert {"_on_readable", "_accept"} <= in_body and not {"_on_readable", "_accept"} & outside - in_body
    assert ast.unparse(loop.body[-1]) == "if self._ready:\n    self._dispatch_ready()"
    body = methods["_dispatch_ready"].body
    assert len(body) == 1 and isinstance(body[0], ast.While) and ast.unparse(body[0].test) == "self._ready"
    reach, todo = set(), ["_dispatch_ready"]
    while todo:
        for callee in _calls(methods[todo.pop()]) & set(methods):
            if callee not in reach:
                reach.add(callee)
                todo.append(callee)
    assert not reach & {"_on_readable", "_accept", "_serve"}, reach
    seen: dict[str, list[tuple[str, Any]]] = {}
    for name, base in (("reference", WorkerListener), ("mutant", _mutated(LAST_PASS))):
        cls_ = type(f"Counted{name}", (_CountsLastPass, base), {"found": []})
        rec = Recorder()
        listener = cls_(socket_path(name, 0, 0, lc_root), NoopBackend(), ipc=name, recorder=rec)
        listener.start()
        fp = lastcall_failpoints.arm("backend.kv_tensors_created", "pause", count=1)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(SAFETY)
        client.connect(str(listener.path))
        try:
            client.sendall(_frame(rid="a") + _frame(rid="b") + _frame(rid="c"))
            assert fp.wait_reached(timeout=SAFETY)  # the first in the backend, two queued behind it
            stopper = threading.Thread(target=functools.partial(_stop_into, seen, f"{name}.stop", listener))
            stopper.start()
            assert rec.wait_for("stop_started", SAFETY) is not None
            fp.release()
            replies = [wire.decode_reply(wire.recv_frame(client)) for _ in range(3)]
            stopper.join(SAFETY)
        finally:
            client.close()
        assert not stopper.is_alive()
        seen[name] = [(r.id, r.error_type) for r in replies] + [
            (e.kind, e.data.get("why")) for e in rec.events() if e.kind in (
                "dispatch_started", "dispatch_finished", "dispatch_refused", "connection_closed", "stop_returned")]
        seen[f"{name}.found"] = [("last pass found", n) for n in cls_.found]
    assert seen["reference.found"] == [("last pass found", 0)], seen  # the pass ran, with nothing waiting
    assert seen["mutant.found"] == [], seen  # the mutant makes no such pass
    assert seen["reference"] == seen["mutant"] and seen["reference.stop"] == seen["mutant.stop"] == [("ok", True)]
    assert seen["reference"][:3] == [("a", None), ("b", "shutting_down"), ("c", "shutting_down")], seen


# ------------------------------------- 582: the close of a reply not read
UNREAD_CLOSE = "harness/reference/serving.py::ServingLoop._deliver_unread::remove:43964b"


def _unread_reply_given_up(cls: type, lc_root: Path, name: str) -> tuple[Any, ...]:
    """A client sends a request whose reply is larger than the socket buffer and never reads it; a stop with a
    short drain gives up on it.  What anyone can observe, and the reasons the listener recorded for its closes."""
    rec = Recorder()
    listener = cls(socket_path(name, 0, 0, lc_root), NoopBackend(), ipc=name, recorder=rec)
    listener.start()
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(str(listener.path))
        client.sendall(_frame(rid="big", size=900_000))
        assert rec.wait_for("dispatch_finished", SAFETY) is not None
        stopped = listener.stop(timeout=0.2)  # the drain times out on the unread reply: stop gives up on it
        poller = select.poll()
        poller.register(client, select.POLLIN | select.POLLRDHUP)
        hung_up = any(ev & (select.POLLHUP | select.POLLRDHUP) for _, ev in poller.poll(0))  # when stop returned
        closed = cf.closed(client, SAFETY, skip_data=True)
        left = dict(listener._conns)
    finally:
        client.close()
        listener.stop()
    closes = tuple(e.data.get("conn") for e in rec.events("connection_closed"))
    kinds = tuple(e.kind for e in rec.events())
    whys = tuple(e.data.get("why") for e in rec.events("connection_closed"))
    return (stopped, hung_up, closed, left, closes, kinds), whys


def test_the_close_of_an_unread_reply_is_the_exits_close_too(lc_root: Path, no_thread_leak: None) -> None:
    """``serving.py::ServingLoop._deliver_unread::remove:43964b`` (``_deliver_unread`` without its close of each
    connection whose reply was
    not read before the drain timeout): the serving thread's exit closes them anyway, at once.  _deliver_unread
    is called only as the last statement of _serve's try, so what follows it is the finally, which takes every
    connection still tracked (those _deliver_unread did not close) and closes it, recording connection_closed,
    before the thread sets _exited (what a stop waits for): the same connections are closed once each, before
    stop returns, in both.  _close's other effects (unregistering is implied by the close; clearing the
    connection's queued frames and reply bytes) leave nothing anyone reads: the connection objects are dropped
    with _conns.  What differs is only the reason the listener records for the close, "listener stopping"
    instead of "reply not read before the drain timeout": the history's wording, which no checker judges (as a
    removed recorder event, which the mutator leaves alone, would differ).  The test checks that premise on the
    source, then gives up on an unread reply larger than the socket buffer: stop returns True, the client is
    hung up on when it does, the same events in the same order, one close of the same connection."""
    src = SERVING_PY.read_text()
    assert src.splitlines()[_mutants("harness/reference/serving.py")[UNREAD_CLOSE].line - 1].strip() == \
        'self._close(conn, why="reply not read before the drain timeout")'
    methods = listener_methods()
    assert {m for m, fn in methods.items() if "_deliver_unread" in _calls(fn)} == {"_serve"}
    try_ = next(n for n in methods["_serve"].body if isinstance(n, ast.Try))
    assert ast.unparse(try_.body[-1]) == "self._deliver_unread(ep, server_fd)"  # nothing after it but finally
    final = "\n".join(ast.unparse(s) for s in try_.finalbody)
    assert "left = list(self._conns.values())" in final and "for conn in left:\n    conn.sock.close()" in final
    assert final.rstrip().endswith("self._exited.set()")
    got = {name: _unread_reply_given_up(c, lc_root, name)
           for name, c in (("reference", WorkerListener), ("mutant", _mutated(UNREAD_CLOSE)))}
    (ref, ref_whys), (mut, mut_whys) = got["reference"], got["mutant"]
    assert ref == mut, got
    stopped, hung_up, closed, left, closes, _kinds = ref
    assert stopped and hung_up and closed and not left and closes == (1,), ref
    assert ref_whys == ("reply not read before the drain timeout",) and mut_whys == ("listener stopping",), got


# --------------------------------------- the wake pipe's sentinel after teardown
WAKE_SENTINEL = "harness/reference/listener.py::WorkerListener._teardown::constant:761054"


def test_the_wake_pipes_sentinel_after_teardown_is_any_invalid_descriptor(lc_root: Path, no_thread_leak: None) -> None:
    """The teardown marks the closed wake pipe -1 (the mutant: -2).  Once torn down, the only code that reads the
    two fields again is _wake (a later stop's _begin_stop returns before it, and the serving thread is joined), and
    its write fails with EBADF for either value, which it takes as "the thread is gone": a stop, a stop from every
    path after it, and a _wake on a torn-down listener behave alike."""
    seen = {}
    for name, cls in (("reference", WorkerListener), ("mutant", _mutated(WAKE_SENTINEL))):
        rec = Recorder()
        listener = cls(socket_path(name, 0, 0, lc_root), NoopBackend(), ipc=name, recorder=rec)
        listener.start()
        first = listener.stop()
        fields = (listener._wake_r, listener._wake_w)
        listener._wake()  # what a late wake-up does: no exception, nothing written
        again = listener.stop()
        seen[name] = (first, again, [e.kind for e in rec.events() if e.kind in ("stop_started", "stop_returned")])
        assert all(fd < 0 for fd in fields), fields
    assert seen["reference"] == seen["mutant"], seen
