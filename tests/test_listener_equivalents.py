"""The tests mutation/equivalent.yaml names for mutants of harness/reference/listener.py: each shows that what
anyone can observe of the mutant is what they observe of the reference.

``listener.py:594:8:remove`` (``_close`` keeps the connection's queued frames, ``conn.bodies.clear()`` removed):
every read of ``conn.bodies`` is in ``_dispatch_ready``'s loop, which stops as soon as the socket is closed
(``conn.sock.fileno() != -1``), and the only other use is ``_on_readable``'s extend, which runs only on an open
connection found in ``_conns`` (a closed one was popped) or a fresh accept.  The test checks that premise on the
source, then runs the one case where a closed connection still has frames queued (a client pipelines three
requests and goes away while the first is in the backend): reference and mutant make one backend call, answer
nothing more and close the connection once.

``listener.py:569:47:negate`` (after a reply is flushed, a connection between frames is labelled READING and one
mid-frame IDLE, instead of the other way round): READING and IDLE are told apart only where an IDLE connection
mid-frame is promoted to READING (``_on_readable``) and where an IDLE one is cancelled after a dispatch pass;
the latter sees only a state the pass itself set.  The test checks that premise on the source, then runs a
reply larger than the socket buffer followed, on the same connection, by half of a second request (flushed
while mid-frame), the rest, and a stop with a connection between frames and one mid-frame after such flushes:
the same replies, the same cancellations, the same stop.

``listener.py:522:16:unlock`` (the state update after a connection's replies runs without the listener lock):
the only other thread that reads or writes a connection's state or the stop flag is a stop's ``_begin_stop``
(under the lock), and every statement of the unlocked block reads or writes one attribute at a time.  The test
holds the serving thread before each statement of the block in turn (a line tracer on that thread only), runs
the stop's part there, and lets it go on: each outcome (the reply, the connections the stop cancelled, the
closes, what stop returned) is one the locked block has too, with the stop before the block or after it.
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

from harness.faults import client as cf
from harness.history import Recorder
from harness.mutate.mutator import apply, mutants_of
from harness.reference import wire
from harness.reference.backend import NoopBackend
from harness.reference.listener import WorkerListener
from harness.reference.paths import socket_path

pytestmark = pytest.mark.slow  # making the mutants of listener.py takes ~3 s (~10 s on a loaded machine)

LISTENER_PY = Path(__file__).resolve().parent.parent / "harness" / "reference" / "listener.py"
BODIES_CLEAR = "harness/reference/listener.py:594:8:remove"
FLUSHED_STATE = "harness/reference/listener.py:569:47:negate"
POST_DISPATCH_UNLOCK = "harness/reference/listener.py:522:16:unlock"
SAFETY = 10.0  # seconds: a safety net on every wait, never a timer


@functools.cache
def _mutants(src: str) -> dict[str, Any]:
    return {m.id: m for m in mutants_of(src, "harness/reference/listener.py")}


@functools.cache
def _mutated(mid: str) -> Any:
    """The listener module with mutant ``mid`` applied (a module of its own: the reference is untouched)."""
    src = LISTENER_PY.read_text()
    m = _mutants(src)[mid]
    mod = types.ModuleType(f"listener_mutant_{m.line}")
    sys.modules[mod.__name__] = mod  # its dataclasses look their module up
    exec(compile(apply(src, m), str(LISTENER_PY), "exec"), mod.__dict__)
    return mod


def _method(name: str) -> ast.FunctionDef:
    tree = ast.parse(LISTENER_PY.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "WorkerListener")
    return next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == name)


def _uses(attr: str) -> dict[str, list[str]]:
    """Each method of WorkerListener that names ``conn.<attr>``, with the statements (unparsed) that do."""
    tree = ast.parse(LISTENER_PY.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "WorkerListener")
    out: dict[str, list[str]] = {}
    for fn in (f for f in cls.body if isinstance(f, ast.FunctionDef)):
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
    for name, cls in (("reference", WorkerListener), ("mutant", _mutated(BODIES_CLEAR).WorkerListener)):
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


# ------------------------------------------------------ 569: flushed state
def test_reading_and_idle_are_told_apart_only_where_the_flushed_state_cannot_matter() -> None:
    where: dict[str, list[str]] = {}
    tree = ast.parse(LISTENER_PY.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "WorkerListener")
    for fn in (f for f in cls.body if isinstance(f, ast.FunctionDef)):
        for node in ast.walk(fn):
            if isinstance(node, ast.Compare) and any(state in ast.unparse(c) for c in node.comparators
                                                     for state in ("_State.READING", "_State.IDLE")):
                where.setdefault(fn.name, []).append(ast.unparse(node))
    assert where == {
        "_on_readable": ["conn.state is _State.IDLE", "conn.state is _State.IDLE"],  # the promotion to READING
        "_dispatch_ready": ["conn.state is _State.IDLE"],  # after the pass set it (below)
    }, where
    begin = ast.unparse(_method("_begin_stop"))  # stop() takes both alike, through one local tuple
    assert "reads, cancelled = (list(self._conns.values()), (_State.IDLE, _State.READING), _State.CANCELLED)" \
        in begin and "[c for c in conns if c.state in reads]" in begin
    assert begin.count(" reads") == 3  # its docstring, the tuple, the one test of it
    pass_ = next(n for n in ast.walk(_method("_dispatch_ready")) if isinstance(n, ast.With)
                 and "conn.state is _State.IDLE" in ast.unparse(n))
    first, second = pass_.body[:2]
    assert ast.unparse(first.test) == "conn.state is _State.QUEUED or conn.state is _State.DISPATCHING"  # type: ignore[attr-defined]
    assert "self._stopping and conn.state is _State.IDLE" in ast.unparse(second)  # a state the pass just set


@pytest.mark.parametrize("variant", ["reference", "mutant"])
def test_a_flushed_connection_mid_frame_or_between_frames_is_served_and_cancelled_alike(
        lc_root: Path, variant: str, no_thread_leak: None) -> None:
    cls = WorkerListener if variant == "reference" else _mutated(FLUSHED_STATE).WorkerListener
    rec = Recorder()
    listener = cls(socket_path("f", 0, 0, lc_root), NoopBackend(), ipc="f", recorder=rec)
    listener.start()
    try:
        big, second = _frame(rid="big", size=900_000), _frame(rid="two")
        mid = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # flushed while mid-frame
        mid.connect(str(listener.path))
        mid.sendall(big + second[:3])
        mid.settimeout(SAFETY)
        assert wire.decode_reply(wire.recv_frame(mid)).status == "success"  # read as it is written: flushed
        mid.sendall(second[3:])
        assert wire.decode_reply(wire.recv_frame(mid)).status == "success"  # the second request on it, answered
        between = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # flushed between frames
        between.connect(str(listener.path))
        between.sendall(_frame(rid="big2", size=900_000))
        between.settimeout(SAFETY)
        assert wire.decode_reply(wire.recv_frame(between)).status == "success"
        half = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # and one mid-frame after its flush
        half.connect(str(listener.path))
        half.sendall(_frame(rid="big3", size=900_000) + second[:3])
        half.settimeout(SAFETY)
        assert wire.decode_reply(wire.recv_frame(half)).status == "success"
        assert listener.stop()
        assert len(rec.events("dispatch_finished")) == 4 and not rec.events("dispatch_refused")
        for s in (mid, between, half):  # every one of them ended by the stop
            assert cf.closed(s, SAFETY)
            s.close()
    finally:
        listener.stop()


# ------------------------------------------------ 522: post-dispatch unlock
def _held_at(cls: type, lc_root: Path, line: int, nth: int) -> tuple[Any, ...]:
    """Run one request on ``cls``; hold the serving thread before ``line`` of _dispatch_ready (its ``nth`` time
    there), run a stop's _begin_stop meanwhile, let the thread go on, stop; what anyone can observe."""
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
        return local if frame.f_code.co_name == "_dispatch_ready" else None

    rec = Recorder()
    listener = cls(socket_path("u", 0, 0, lc_root), NoopBackend(), ipc="u", recorder=rec)
    threading.settrace(tracer)  # only the serving thread, started now, is traced
    try:
        listener.start()
    finally:
        threading.settrace(None)  # type: ignore[arg-type]
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
    src = LISTENER_PY.read_text().splitlines()
    assert src[520].strip() == "if conn.sock.fileno() != -1:" and src[521].strip() == "with self._lock:"
    assert src[491].strip() == "while self._ready:"
    reference = {_held_at(WorkerListener, lc_root, 521, 1),  # the stop before the block
                 _held_at(WorkerListener, lc_root, 492, 2)}  # and after it (the loop's next test)
    assert len(reference) == 2, reference  # the two orders differ: what the stop cancelled
    mutant = _mutated(POST_DISPATCH_UNLOCK).WorkerListener
    assert src[524].strip() == "if self._stopping and conn.state is _State.IDLE:"
    for line in (523, 524, 525):  # before each statement of the unlocked block that reads or writes a state
        got = _held_at(mutant, lc_root, line, 1)
        assert got in reference, (line, got, reference)



POLL_FOREVER = "harness/reference/listener.py:370:81:constant"
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
    """``listener.py:370:81:constant`` (the serving thread's ``ep.poll(... else -1)`` becomes ``-2``): CPython's
    ``epoll.poll`` hands the kernel -1 (wait until an event) for every negative timeout, so the serving loop
    blocks exactly as before.  Shown on the syscall itself: the kernel's timeout argument for -1 and -2, against
    a positive one that reaches it as it is (so the probe can tell them apart)."""
    src = LISTENER_PY.read_text()
    mutant = _mutants(src)[POLL_FOREVER]
    line = src.splitlines()[mutant.line - 1]
    assert "ep.poll(self._poll_timeout() if self._accept_delay else -1)" in line, line
    assert apply(src, mutant).splitlines()[mutant.line - 1] == line.replace("else -1)", "else -2)")
    assert _epoll_wait_timeout(-1) == -1
    assert _epoll_wait_timeout(-2) == -1
    assert _epoll_wait_timeout(5) == 5000


# --------------------------------------------- 387: the last dispatch pass
LAST_PASS = "harness/reference/listener.py:387:12:remove"
_LAST_PASS_LINE = int(LAST_PASS.split(":")[1])
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
    """``listener.py:387:12:remove`` (the ``_dispatch_ready()`` after the serving loop, "everything left answers
    shutting_down", removed): that pass always finds ``_ready`` empty.  The only statement that adds to
    ``_ready`` is ``_on_readable``'s append; ``_on_readable`` runs only inside the loop's body (called there and
    from ``_accept``, itself called only there); the body ends with a dispatch pass whenever ``_ready`` holds a
    connection, a pass that takes connections off until it is empty and never reaches ``_on_readable``; and the
    loop's condition is tested only between two bodies.  So the pass after the loop has nothing to do, and
    without it the listener does the same.  The test checks that premise on the source, then stops a listener
    with frames queued behind a handler the stop drains (the pipelined case of the library): the reference's
    last pass finds no connection, and reference and mutant answer, record and close alike."""
    src = LISTENER_PY.read_text()
    line = src.splitlines()[_mutants(src)[LAST_PASS].line - 1]
    assert line.strip() == "self._dispatch_ready()  # everything left answers shutting_down", line
    tree = ast.parse(src)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "WorkerListener")
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
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
    for name, base in (("reference", WorkerListener), ("mutant", _mutated(LAST_PASS).WorkerListener)):
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
