"""The explorer's state machine: Hypothesis rules over one real worker of a variant, the contract after each.

:class:`ListenerMachine` drives one real worker (rank 0, real Unix socket, real
serving thread) started by :class:`~harness.contract.rig.Rig`;
:func:`harness.explore.drive.machine_for` makes one per variant and
:func:`harness.explore.drive.run_steps` replays a trace without Hypothesis.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from harness import failpoints
from harness.contract.rig import ContractViolation, Pending, Rig, _force_down
from harness.errors import ListenerBusy
from harness.explore.invariants import ContractInvariants, Violation
from harness.explore.model import MAP, MiB, Phase, _Conn, _describe, _map, _Parked, _read_replies
from harness.explore.render import DRAIN_S, ExplorationFailure, TraceStep, render_scenario
from harness.faults import env
from harness.history import Event
from harness.names import temp_root
from harness.reference import wire
from harness.reference.listener import WorkerListener
from harness.reference.variants import VARIANTS, Variant
from harness.reference.worker import ReferenceWorker
from harness.timeouts import AT_ONCE_S, scaled

__all__ = ["ListenerMachine", "Violation"]

SHORT_STOP_S = 0.05  # stop(timeout) while a handler is parked: the drain cannot finish, so False at once
SERVE_S = AT_ONCE_S  # (scaled) a new connection is accepted and read while other clients idle or stall
ACTIVE_KINDS = frozenset({  # listener events worth showing in the recorded interleaving
    "accepted", "accepted_after_stop", "frame_started", "frame_completed", "dispatch_started", "dispatch_refused",
    "dispatch_finished", "connection_closed", "stop_started", "reads_cancelled", "drain_started",
    "drain_finished", "teardown_step", "cleanup_failed", "stop_returned", "thread_exited", "thread_crashed",
    "listener_started", "stale_socket_removed", "fault_reached", "teardown_deferred", "allocator_torn_down",
    "reply_failed",
})


class ListenerMachine(ContractInvariants, RuleBasedStateMachine):
    """The explorer's state machine; :func:`machine_for` makes one per variant (class attributes below)."""

    variant: ClassVar[Variant] = VARIANTS["reference"]
    root_factory: ClassVar[Callable[[], Path]] = staticmethod(temp_root)
    replace_after_failed_cleanup: ClassVar[bool] = False  # also replace the path once the server socket closed

    def __init__(self) -> None:
        super().__init__()
        self.trace: list[TraceStep] = []
        self._marks: list[int] = []
        self._counter: dict[str, int] = {}
        self.root = type(self).root_factory()
        self.rig = Rig(self.variant, self.root, drain_timeout=scaled(DRAIN_S))
        try:
            self.w: ReferenceWorker = self.rig.worker()
        except BaseException:
            self.rig.close()
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        self.listener = self.rig.listener(self.w)
        self.listeners: list[WorkerListener] = [self.listener]
        self.phase = Phase.SERVING
        self.path_state = "ours"  # ours | removed | replaced
        self.replacements: list[socket.socket] = []
        self.replacement_ino: int | None = None
        self.conns: list[_Conn] = []
        self.parked: _Parked | None = None
        self.draining: list[tuple[str, Pending]] = []  # concurrent first stops still waiting for the drain
        self.eof_due: list[_Conn] = []  # connections open when a stop began: each must read EOF at once
        self.server_closed = False  # a stop's cleanup failed after closing the server socket (until a restart)
        # the STEP_CHECKERS, with what each step must return and the contract line that says so
        self.expect: list[tuple[str, dict[str, Any], int]] = []

    # ------------------------------------------------------------- bookkeeping
    def _name(self, prefix: str) -> str:
        n = self._counter.get(prefix, 0) + 1
        self._counter[prefix] = n
        return f"{prefix}{n}"

    def _record(self, kind: str, **args: Any) -> TraceStep:
        self._fill_events()
        step = TraceStep(kind, args)
        self.trace.append(step)
        self._marks.append(self.rig.mark())
        return step

    def _fill_events(self) -> None:
        """Attach to the last step the listener events that happened since it began."""
        if self.trace:
            evs = self.rig.rec.events()[self._marks[-1]:]
            self.trace[-1].events = [_describe(e) for e in evs if e.kind in ACTIVE_KINDS]

    def scenario(self, failure: str = "", line: int | None = None) -> str:
        """The trace so far as a replayable scenario YAML."""
        self._fill_events()
        return render_scenario(self.trace, variant=self.variant.name, failure=failure, line=line,
                               drain_timeout=self.rig.config.drain_timeout)

    @contextmanager
    def _explaining(self, where: str) -> Iterator[None]:
        """Turn any failure inside into an ExplorationFailure that carries the replayable scenario."""
        try:
            yield
        except ExplorationFailure:
            raise
        except Exception as exc:
            line = exc.line if isinstance(exc, Violation) else None
            fired = self._violated()
            message = f"{where} on {self.variant.name}: {type(exc).__name__}: {exc}" + "".join(
                f"\n  checker {v.checker} (line {ln}) over the history: {v.message}" for v, ln in fired)
            raise ExplorationFailure(message, self.scenario(f"{where}: {exc}", line), line,
                                     checkers=tuple(dict.fromkeys(v.checker for v, _ln in fired))) from exc

    # ---------------------------------------------------------------- helpers
    def _wait(self, match: Callable[[Event], bool], after: int, what: str, bound: float | None = None,
              line: int | None = None) -> Event:
        limit = scaled(bound) if bound is not None else scaled()
        ev = self.rig.rec.wait_for(match, limit, after=after)
        if ev is None:
            if line is not None:
                raise Violation(line, f"the listener did not {what} within {limit:.1f}s")
            raise ContractViolation(f"the listener did not {what} within the {limit:.0f}s safety timeout")
        return ev

    def _accepted(self, mark: int) -> int:
        ev = self._wait(lambda e: e.kind == "accepted", mark, "accept a new connection (no idle or stalled client "
                        "may hold it up)", SERVE_S, line=11)
        return int(ev.data["conn"])

    def _stop_step(self, name: str, fn: Callable[[], bool], returns: bool | None, line: int,
                   kind: str = "stop") -> bool:
        """Run a stop as a harness step (step_returned: stop_result and handler_drained judge it); ``returns``:
        what it must return (None: not judged here), by contract line ``line`` (the line stop_result breaks
        there); after a True stop, snapshot the paths (after_<name>)."""
        if returns is not None:
            self.expect.append(("stop_result", {"step": name, "returns": returns}, line))
        ok = bool(self.rig.step(kind, name, fn))
        if ok:
            self.rig.snapshot(f"after_{name}")
        return ok

    def _client(self, name: str, fn: Callable[[], int]) -> int:
        """A client's connection being accepted (and read), as a harness request step: served_while_stalled
        judges those begun while another client idles or stalls.

        Category "request", not one of its own: line 11 asks that other clients are served while one stalls,
        and being served begins with being accepted and read, which is all this step waits for (its value is
        the accepted connection; a step that never is fails, ok false). served_while_stalled selects the
        "request" steps; under another category it would see none of the explorer's and be unknown there,
        and head_of_line_blocking, which it alone catches in the explorer, would go uncaught by a checker."""
        return int(self.rig.step("connect", name, fn, category="request"))

    def _closed(self, conn: _Conn) -> None:
        conn.state = "closed"
        conn.sock.close()
        self.rig.rec.emit("peer_closed", step=conn.name)

    def _open_conns(self) -> list[_Conn]:
        return [c for c in self.conns if c.state in ("idle", "header", "kept")]

    def _stop_begins(self) -> None:
        """A stop of the current listener begins: every connection it serves must read EOF at once."""
        if self.phase is Phase.SERVING:
            self.eof_due = self._open_conns()
            if self.eof_due:
                self.trace[-1].args["closes"] = [c.name for c in self.eof_due]

    def can_serve(self) -> bool:
        return self.phase is Phase.SERVING and self.parked is None and self.path_state == "ours"

    def _finishable(self) -> list[_Conn]:
        ready = self.phase is Phase.SERVING and self.parked is None
        return [c for c in self.conns if c.state == "cancelled" or (c.state == "header" and ready)]

    # ------------------------------------------------------------------ rules
    @precondition(lambda self: self.can_serve())
    @rule()
    def connect(self) -> None:
        """An idle connection: accepted, never speaks."""
        name = self._name("c")
        self._record("connect", name=name)
        with self._explaining(f"connect {name}"):
            mark = self.rig.mark()
            sock = self.rig.connect(self.w)
            self.conns.append(_Conn(name, sock, "idle", self._client(name, lambda: self._accepted(mark))))
            self.rig.rec.emit("peer_idle", step=name, count=1)

    @precondition(lambda self: self.can_serve())
    @rule(page=st.integers(0, 7))
    def send_header(self, page: int) -> None:
        """A fresh connection sends a map's 4-byte header and withholds the body."""
        name = self._name("h")
        data = wire.encode_request(_map(page, name))
        self._record("send_header", name=name, offsets=[page * 2 * MiB])
        with self._explaining(f"send_header {name}"):
            mark = self.rig.mark()
            sock = self.rig.connect(self.w)
            sock.sendall(data[:wire.HEADER.size])

            def read() -> int:
                cid = self._accepted(mark)
                self._wait(lambda e: e.kind == "frame_started" and e.data.get("conn") == cid, mark,
                           f"start reading the frame of {name}", SERVE_S, line=11)
                return cid
            self.conns.append(_Conn(name, sock, "header", self._client(name, read), data[wire.HEADER.size:]))
            self.rig.rec.emit("peer_stalled", step=name, fault="withhold_body")

    @precondition(lambda self: bool(self._finishable()))
    @rule(data=st.data())
    def send_body(self, data: st.DataObject) -> None:
        """The withheld body arrives: served while serving; refused at the socket once stop cancelled the read."""
        self.finish(data.draw(st.sampled_from([c.name for c in self._finishable()]), label="conn"))

    def finish(self, name: str) -> None:
        """send_body on the connection named ``name`` (what the rule does once it has drawn one)."""
        conn = next(c for c in self._finishable() if c.name == name)
        self._record("send_body", name=conn.name)
        with self._explaining(f"send_body {conn.name}"):
            if conn.state == "header":
                mark = self.rig.mark()
                conn.sock.settimeout(scaled())
                conn.sock.sendall(conn.rest)
                reply = wire.decode_reply(wire.recv_frame(conn.sock))
                if reply.status != "success":
                    raise Violation(11, f"{conn.name}, completed while serving, was answered {reply.status} "
                                        f"({reply.error_type}: {reply.message})")
                self._wait(lambda e: e.kind == "dispatch_finished" and e.data.get("conn") == conn.cid, mark,
                           f"finish dispatching {conn.name}")
                conn.state = "kept"
                self.rig.rec.emit("peer_finished", step=conn.name)
                return
            try:
                conn.sock.sendall(conn.rest)
                sent = True
            except OSError:
                sent = False
            self._closed(conn)
            if sent:
                raise Violation(2, f"the connection of {conn.name}, whose read stop cancelled, still took the rest "
                                   f"of its frame")

    @precondition(lambda self: self.can_serve())
    @rule(page=st.integers(0, 7), queued=st.booleans())
    def park(self, page: int, queued: bool) -> None:
        """A map parks inside the backend (failpoint); ``queued``: a second map is pipelined behind it."""
        fault, call = self._name("f"), self._name("p")
        self._record("park", fault=fault, call=call, offsets=[page * 2 * MiB],
                     queued=[(page + 8) * 2 * MiB] if queued else [])
        with self._explaining(f"park {call}"):
            fp = failpoints.arm(f"backend.{MAP}", "pause", count=1)
            mark = self.rig.mark()
            sock = self.rig.connect(self.w)
            payload = wire.encode_request(_map(page, call))
            if queued:
                payload += wire.encode_request(_map(page + 8, call + "_queued"))
            sock.sendall(payload)  # one write: both frames arrive in one read
            cid = self._client(call, lambda: self._accepted(mark))
            if not fp.wait_reached(timeout=scaled(SERVE_S)):
                raise Violation(11, f"{call} never reached the backend within {scaled(SERVE_S):.1f}s")
            n = 2 if queued else 1
            pending = self.rig.call_async(lambda: _read_replies(sock, n), name=f"explore-client-{call}")
            self.parked = _Parked(fault, call, fp, sock, cid, pending, queued)

    @precondition(lambda self: self.parked is not None)
    @rule()
    def release(self) -> None:
        """The parked handler goes on: its reply (and the queued one's) arrives; a draining stop finishes."""
        parked = self.parked
        assert parked is not None
        self._record("release", fault=parked.fault, call=parked.call, stops=[n for n, _ in self.draining])
        with self._explaining(f"release {parked.fault}"):
            self.parked = None
            mark = self.rig.mark()
            parked.fp.release()
            replies: list[wire.Reply] = parked.pending.result()
            parked.sock.close()
            if not replies or replies[0].status != "success":
                got = f"{replies[0].status} ({replies[0].error_type}: {replies[0].message})" if replies else "nothing"
                raise Violation(3, f"the drained handler {parked.call} got {got} after release, not success")
            if parked.queued:
                want = "success" if self.phase is Phase.SERVING else "shutting_down"
                got = "nothing" if len(replies) < 2 else replies[1].error_type or replies[1].status
                if got != want:
                    raise Violation(1, f"the request queued behind {parked.call} got {got}, expected {want}"
                                       + ("" if want == "success" else ": stop had begun before it was dispatched"))
            if self.phase is Phase.SERVING:
                self._wait(lambda e: e.kind == "connection_closed" and e.data.get("conn") == parked.cid, mark,
                           f"see {parked.call}'s client close")
            else:
                self._wait(lambda e: e.kind == "thread_exited", mark, "exit its serving thread after the drain")
            for name, stop in self.draining:
                if stop.result() is not True:
                    raise Violation(3, f"stop {name}, waiting for the drain, did not return True once the handler "
                                       f"finished")
                self.phase = Phase.STOPPED
            self.draining = []

    @precondition(lambda self: self.phase is not Phase.STOPPED)
    @rule()
    def stop(self) -> None:
        """Stop through the registry: False while a handler is parked (short timeout), else True."""
        parked = self.parked is not None
        name = self._name("s")
        timeout = SHORT_STOP_S if parked else None
        self._record("stop", name=name, timeout=timeout, returns=not parked)
        with self._explaining(f"stop {name}"):
            self._stop_begins()
            line = 5 if parked else 7 if self.path_state != "ours" else 4
            ok = self._stop_step(name, lambda: self.rig.registry.stop_all(timeout), not parked, line)
            if parked and ok:
                raise Violation(5, f"stop {name} returned True while a handler was parked inside the backend "
                                   f"(it must wait for the drain and return False when it times out)")
            if not parked and not ok:
                raise Violation(line, f"stop {name} returned False with no handler in the backend"
                                + (f" (socket path {self.path_state} while live)" if self.path_state != "ours"
                                   else ""))
            self.phase = Phase.STOPPED if ok else Phase.STOPPING

    @precondition(lambda self: self.parked is None and not self.draining and self.phase is not Phase.STOPPED)
    @rule()
    def stop_cleanup_fails(self) -> None:
        """Stop while the socket unlink fails: False, nothing dropped; a later stop retries."""
        fault, name = self._name("f"), self._name("s")
        self._record("stop_cleanup_fails", fault=fault, name=name, returns=False)
        with self._explaining(f"stop_cleanup_fails {name}"):
            fp = failpoints.arm("cleanup.unlink", "raise", count=1, message="injected cleanup failure")
            self._stop_begins()
            try:
                ok = self._stop_step(name, self.rig.registry.stop_all, False, 6)
            finally:
                failpoints.disarm("cleanup.unlink")
            if ok:
                raise Violation(6, f"stop {name} returned True although its cleanup failed")
            self.phase = Phase.STOPPING
            # teardown unlinks first and closes the server only after: a failed unlink leaves it open
            self.server_closed = self.server_closed and fp.hits > 0

    @precondition(lambda self: self.parked is not None and not self.draining)
    @rule()
    def concurrent_stop(self) -> None:
        """While one stop waits for the parked handler, a second stop (short timeout) must return False."""
        first, second = self._name("s"), self._name("s")
        self._record("concurrent_stop", first=first, second=second, timeout_first=scaled(), timeout=SHORT_STOP_S)
        with self._explaining(f"concurrent_stop {first}/{second}"):
            self._stop_begins()
            mark = self.rig.mark()
            pending = self.rig.call_async(lambda: self._stop_step(first, lambda: self.rig.registry.stop_all(scaled()),
                                                                  None, 3), name=f"explore-{first}")
            self.draining.append((first, pending))
            self.phase = Phase.STOPPING
            ev = self._wait(lambda e: e.kind in ("drain_started", "stop_returned"), mark,
                            f"start draining for {first}")
            if ev.kind == "stop_returned":  # it did not wait for the parked handler at all
                raise Violation(5, f"stop {first} returned {pending.result()} without waiting for the handler "
                                   f"parked inside the backend")
            if self._stop_step(second, lambda: self.rig.registry.stop_all(SHORT_STOP_S), False, 6):
                raise Violation(6, f"the concurrent stop {second} returned True while {first} was still draining")

    @precondition(lambda self: self.parked is not None and self.phase is Phase.SERVING)
    @rule()
    def shutdown(self) -> None:
        """Integration shutdown while a handler is parked: False, and the allocator is kept for the retry."""
        name = self._name("x")
        self._record("shutdown", name=name, returns=False)
        with self._explaining(f"shutdown {name}"):
            self._stop_begins()
            ok = self._stop_step(name, self.w.shutdown, False, 10, kind="shutdown")
            self.phase = Phase.STOPPING
            if ok or self.w.allocator.torn_down:
                raise Violation(10, f"shutdown {name} returned {ok} and "
                                    f"{'tore' if self.w.allocator.torn_down else 'did not tear'} the allocator down "
                                    f"while a handler was parked inside the backend")

    @precondition(lambda self: not self.draining)
    @rule()
    def restart(self) -> None:
        """start() again on the key: replaces a listener that stops; refused (ListenerBusy) while one drains."""
        busy = self.parked is not None
        name = self._name("t")
        self._record("restart", name=name, returns=not busy)
        with self._explaining(f"restart {name}"):
            self._stop_begins()
            if busy:
                self.expect.append(("restart_refused", {"step": name, "error_class": "ListenerBusy"}, 9))
            started: list[WorkerListener] = []

            def start() -> bool:  # the step's value says it started (the listener object is not a value)
                started.append(self.w.start())
                return True
            try:
                self.rig.step("restart", name, start, category="start")
                new = started[0]
            except ListenerBusy as exc:
                self.phase = Phase.STOPPING
                if not busy:
                    raise Violation(9, f"restart {name} was refused with no handler in the backend: {exc}") from None
                return
            except Exception as exc:
                raise Violation(9, f"restart {name} raised {type(exc).__name__} ({exc}); expected "
                                   + ("ListenerBusy, the draining listener left registered" if busy
                                      else "a new listener")) from exc
            if busy:
                raise Violation(9, f"restart {name} replaced a listener whose handler was still parked")
            old = self.listener
            if not old.torn_down:
                raise Violation(9, f"restart {name} started a new listener without stopping the old one")
            self.listener = new
            self.listeners.append(new)
            self.phase = Phase.SERVING
            self.path_state = "ours"
            self.replacement_ino = None
            self.server_closed = False

    @precondition(lambda self: self.path_state == "ours" and self.phase is not Phase.STOPPED)
    @rule()
    def remove_path(self) -> None:
        """Delete the socket file (and its owner record) while the listener is live."""
        self._record("remove_path")
        with self._explaining("remove_path"):
            env.remove_socket(self.w.path)
            self.path_state = "removed"

    @precondition(lambda self: self.path_state == "ours" and self.phase is not Phase.STOPPED
                  and (not self.server_closed or self.replace_after_failed_cleanup))
    @rule()
    def replace_path(self) -> None:
        """Put another socket (another inode) at the path while the listener is live."""
        self._record("replace_path")
        with self._explaining("replace_path"):
            self.replacements.append(env.replace_socket(self.w.path))
            self.replacement_ino = os.stat(self.w.path).st_ino
            self.rig.rec.emit("path_replaced", step=self._name("r"), path=self.w.path, ino=self.replacement_ino)
            self.path_state = "replaced"

    # --------------------------------------------------------------- teardown
    def teardown(self) -> None:
        """Release every failpoint, force every listener down, close every socket, remove the root."""
        for c in self.conns:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self.parked is not None:
            try:
                self.parked.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            failpoints.reset()  # parked handlers go on, so a stop still draining finishes before the rig closes
            for _, stop in self.draining:
                try:
                    stop.result()
                except Exception:
                    pass
            for listener in self.listeners:  # first: a dropped listener's connections close, so a reader of one
                _force_down(listener)        # reads EOF and the rig's close below waits for no reply it never gets
            self.rig.close()
        finally:
            for s in self.replacements:
                s.close()
            shutil.rmtree(self.root, ignore_errors=True)
