"""Planted-bug variants of the reference listener, registry and worker, by name.

Each variant changes one seam of the reference to reproduce one real bug (most
are bugs kvcached or vLLM shipped, or had in review).  A checker, fault or
scenario earns trust by staying quiet on ``reference`` and firing on the variant
it names.  Later issues run these inside worker processes and benchmarks, so
they live in the package, registered in :data:`VARIANTS`.
"""

from __future__ import annotations

import os
import shutil
import socket
from dataclasses import dataclass
from typing import Any

from harness.errors import ConfigError, ListenerError, WireError
from harness.reference import wire
from harness.reference.capabilities import WORKER_CAPABILITIES
from harness.reference.client_variants import ReplyWithoutDeadlineClient
from harness.reference.handshake import HandshakeListener
from harness.reference.listener import WorkerListener, _Conn, _State
from harness.reference.listener_variants import (
    AcceptsAfterStop,
    AnsweredNotCancelled,
    BusyPollsAfterReply,
    CancelLeftToThread,
    DiesOnAcceptFailure,
    FailedStartNotUndone,
    LeavesUmask,
    MisreportsClose,
    QueuesPartialReads,
    SocketModeOpen,
    SpinsOnAcceptFailure,
    StartsTwice,
    UnrecordedDispatch,
)
from harness.reference.race_variants import (
    UnlockedAccept,
    UnlockedConcurrentStops,
    UnlockedDispatchDecision,
    UnlockedFrameCompletion,
)
from harness.reference.registry import Registry
from harness.reference.registry_variants import (
    ConcurrentStopReportsTrue,
    DropRegistrationOnError,
    ExitHookSaysOk,
    ExitHookWaitsASecond,
    HookPerStart,
    RestartDropsOld,
    UnboundedExitHook,
)
from harness.reference.sides import ReferenceEngineSide, ReferenceWorkerSide
from harness.reference.worker import ReferenceWorker
from harness.reference.write_variants import (
    BlockingWrite,
    DeadReaderSpins,
    PartialFlushAbandoned,
    ReplyLeavesWriting,
    ShortWriteLost,
)

__all__ = ["Variant", "VARIANTS", "get_variant"]



# ----------------------------------------------------------------- listeners
class TimedJoinTeardown(WorkerListener):
    """kvcached 50090d0: join with a timeout, then tear down and report success anyway."""

    def _wait_drained(self, timeout: float) -> bool:
        super()._wait_drained(timeout)
        return True


class NoConnTracking(WorkerListener):
    """Stop does not touch accepted connections: a parked read stays parked until the drain ends."""

    def _cancel_reads(self, victims: list[_Conn]) -> None:
        self.rec.emit("reads_cancelled", listener=self.label, n=0, conns=[])


class DispatchAfterStop(WorkerListener):
    """The dispatch decision ignores the stop flag: a frame that completes during stop is still run."""

    def _may_dispatch(self) -> bool:
        return True


class CutsDrainedReply(WorkerListener):
    """kvcached 0.1.6: stop shuts down every tracked connection, the one whose handler it is draining too.

    The handler finishes its backend call, but its reply can no longer be written: the
    client sees the connection drop and reports an unknown outcome for a request that
    was in fact done (found by lastcall running executing-handler-is-drained on 0.1.6).
    """

    def _cancel_reads(self, victims: list[_Conn]) -> None:
        busy = [c for c in self._conns.values() if c.state is _State.DISPATCHING]
        for conn in busy:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        super()._cancel_reads(victims)


class TeardownWhileAlive(WorkerListener):
    """Tears down as soon as stop begins, while a handler may still be inside the backend."""

    def _wait_drained(self, timeout: float) -> bool:
        return True


class StopFromHandlerDeadlocks(WorkerListener):
    """stop() from a handler waits for its own thread to exit: stuck for the whole drain timeout."""

    def _stop_from_handler(self) -> bool:
        return self._exited.wait(self.config.drain_timeout)


class StopFromHandlerSaysTrue(WorkerListener):
    """stop() from a handler reports True: its caller believes the listener stopped while it still serves."""

    def _stop_from_handler(self) -> bool:
        return self._finish_stop(True, reason="called from the serving thread")


class WakeByConnect(WorkerListener):
    """kvcached 0.1.6: wakes the serving thread by connecting to its own socket path.

    If the path was removed or replaced while live, the wake-up never arrives and
    stop can never finish.
    """

    def _wake(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(1.0)
            s.connect(os.fspath(self.path))
        except OSError:
            pass
        finally:
            s.close()


class UnlinkByPath(WorkerListener):
    """Unlinks whatever is at the socket path, even another listener's socket that replaced ours."""

    def _teardown(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        super()._teardown()


class RmtreeDir(WorkerListener):
    """Removes the whole socket directory, taking other ranks' live sockets with it."""

    def _teardown(self) -> None:
        super()._teardown()
        shutil.rmtree(self.path.parent, ignore_errors=True)


class RaiseOnCleanupError(WorkerListener):
    """Lets a cleanup error escape stop() (paired with a registry that then drops the entry)."""

    def stop(self, timeout: float | None = None) -> bool:
        if self._thread is not None and not self._torn_down:
            self._begin_stop()
            if not self._wait_drained(self.config.drain_timeout if timeout is None else timeout):
                return self._finish_stop(False, reason="drain timeout")
            self._teardown()  # may raise
            self._torn_down = True
        return self._finish_stop(True)


class DiesOnBadFrame(WorkerListener):
    """vLLM PR #54757's bug, in the worker listener: one undecodable body kills the serving thread."""

    def _on_bad_request(self, conn: _Conn, exc: WireError) -> None:
        raise exc


class TeardownThenFalse(WorkerListener):
    """On a drain timeout it tears down anyway, then reports False: the retry finds nothing to retry."""

    def _wait_drained(self, timeout: float) -> bool:
        ok = super()._wait_drained(timeout)
        if not ok:
            try:
                self._teardown()
            except OSError:
                pass
        return ok


class LostUnmap(ReferenceWorker):
    """Acknowledges unmap_from_kv_tensors without unmapping: the client believes pages are free that are not."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        inner = self.backend

        class Forgetful:
            def handle(self, req: wire.Request) -> wire.Reply:
                if req.cmd == "unmap_from_kv_tensors":
                    return wire.Reply(status="success")
                return inner.handle(req)

        self.backend = Forgetful()


class LeaksAChild(WorkerListener):
    """Starts a helper process with the listener and never stops or reaps it: it outlives its worker."""

    def start(self) -> None:
        import subprocess

        super().start()
        self._child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)


class HeadOfLineBlocking(WorkerListener):
    """kvcached 0.1.6: serves one connection at a time, waiting on each new one to speak.

    One client that connects and sends nothing stalls every other request.
    """

    def _accept(self) -> None:
        super()._accept()
        with self._lock:
            fresh = [c for c in self._conns.values() if c.state is _State.IDLE and not c.reader.in_frame]
        for conn in fresh:  # block until the new client's first byte (or stop shuts it down)
            try:
                conn.sock.setblocking(True)
                conn.sock.recv(1, socket.MSG_PEEK)
                conn.sock.setblocking(False)
            except OSError:
                pass


class FailedStartLeaks(WorkerListener):
    """A start that fails after mkdir and socket() leaves them: the socket's fd (never closed, as a listener
    keeping it as a plain int does) and the directories it made."""

    def _undo_start(self, server: socket.socket) -> None:
        server.detach()


class TakesOverLiveSocket(WorkerListener):
    """kvcached 0.1.6: start unlinks whatever is at its path, so a second process steals a live owner's socket."""

    def _take_over_stale_path(self) -> None:
        if os.path.lexists(self.path):
            self.path.unlink()


class RefusesStaleSocket(WorkerListener):
    """Any file at the path counts as in use: a restart after a crash fails until someone cleans up by hand."""

    def _take_over_stale_path(self) -> None:
        if os.path.lexists(self.path):
            raise ListenerError(f"{self.label}: {self.path} exists")


class NoOwnerRecord(WorkerListener):
    """Writes no owner record: ``lastcall ctl`` cannot tell the live instance from a leftover and deletes it."""

    def _write_owner(self) -> None:
        pass


class StopUnstartedUnlinks(WorkerListener):
    """stop() of a listener that never started (or failed to) cleans up by path: it unlinks whoever is there."""

    def stop(self, timeout: float | None = None) -> bool:
        if self._thread is None:
            for p in (self.path, self.path.with_suffix(".owner")):
                if os.path.lexists(p):
                    p.unlink()
        return super().stop(timeout)


class NoKeepAlive(WorkerListener):
    """One request per connection: the connection is closed after its first reply, so a kept-alive client's next
    request (or the rest of a pipeline) is lost."""

    def _send(self, conn: _Conn, reply: wire.Reply) -> None:
        super()._send(conn, reply)
        self._close(conn, why="one request per connection")


# ------------------------------------------------------------------- workers
class TeardownIgnoresStop(ReferenceWorker):
    """kvcached 7d32e5e: integration shutdown tears the allocator down even when stop returned False."""

    def _stop_listeners(self) -> bool:
        self.registry.stop_all()
        return True


@dataclass(frozen=True)
class Variant:
    """A named system under test: which listener, registry and worker classes make it up."""

    name: str
    bug: str
    listener: type[WorkerListener] = WorkerListener
    registry: type[Registry] = Registry
    worker: type[ReferenceWorker] = ReferenceWorker
    keep_usage_segment: bool = False  # engine side: shutdown forgets the /dev/shm usage record (kvcached #477)
    client: Any = None  # engine side: its client class (harness.reference.client.Client; None: that one)
    capabilities: frozenset[str] = WORKER_CAPABILITIES  # what scenarios may ask of it (harness.scenario.needs)
    handshake_listener: Any = None  # the reference also owns the handshake listener (harness.reference.handshake)
    codec: Any = None  # the reference framing (harness.targets.REFERENCE_CODEC)
    # its KV pages are torch tensors only off the CPU (harness.reference.allocator), and a run on a CUDA device
    # forks from the server that preloaded torch whatever its target says (harness.targets.uses_torch)
    uses_torch: bool = False

    @property
    def about(self) -> str:
        return self.bug

    def worker_side(self, spec: dict[str, Any], recorder: Any) -> Any:
        """This variant's worker in a worker process (harness.targets.WorkerSide)."""
        return ReferenceWorkerSide(self, spec, recorder)

    def engine_side(self, spec: dict[str, Any], recorder: Any) -> Any:
        """The reference engine (client + /dev/shm usage record) in an engine process."""
        return ReferenceEngineSide(self, spec, recorder)


def _variants(*vs: Variant) -> dict[str, Variant]:
    return {v.name: v for v in vs}


VARIANTS: dict[str, Variant] = _variants(
    Variant("reference", "none: keeps every line of the stop contract", handshake_listener=HandshakeListener,
            capabilities=WORKER_CAPABILITIES | {"handshake_listener"}),
    Variant("timed_join_teardown", "a timed join, then teardown and True while the handler runs",
            listener=TimedJoinTeardown),
    Variant("no_conn_tracking", "a read in progress is not cancelled when stop begins",
            listener=NoConnTracking),
    Variant("dispatch_after_stop", "a request whose frame completes after stop began is dispatched",
            listener=DispatchAfterStop),
    Variant("teardown_while_alive", "teardown and True while the serving thread is still alive",
            listener=TeardownWhileAlive),
    Variant("cuts_drained_reply", "stop shuts down the connection of the handler it drains: its reply is lost "
            "(kvcached 0.1.6)", listener=CutsDrainedReply),
    Variant("drop_registration_on_error", "a cleanup error drops the registration: no retry possible",
            listener=RaiseOnCleanupError, registry=DropRegistrationOnError),
    Variant("concurrent_stop_true", "a concurrent stop reports True while another is draining",
            registry=ConcurrentStopReportsTrue),
    Variant("stop_from_handler_deadlocks", "stop() called from a handler waits for itself",
            listener=StopFromHandlerDeadlocks),
    Variant("stop_from_handler_says_true", "stop() called from a handler reports True, though it cannot stop its "
            "own thread", listener=StopFromHandlerSaysTrue),
    Variant("wake_by_connect", "stop wakes the thread through the socket path: path removed, stop hangs",
            listener=WakeByConnect),
    Variant("unlink_by_path", "teardown unlinks a socket that replaced ours at the path",
            listener=UnlinkByPath),
    Variant("rmtree_dir", "teardown removes the directory with another rank's live socket in it",
            listener=RmtreeDir),
    Variant("dies_on_bad_frame", "one undecodable request kills the serving thread",
            listener=DiesOnBadFrame),
    Variant("teardown_then_false", "a drain timeout tears down anyway and reports False", listener=TeardownThenFalse),
    Variant("lost_unmap", "an unmap is acknowledged but not done: the ranks hold pages the client freed",
            worker=LostUnmap),
    Variant("leaks_usage_segment", "engine shutdown forgets the /dev/shm usage record (kvcached #477)",
            keep_usage_segment=True),
    Variant("leaks_a_child", "a helper process started with the listener outlives its worker",
            listener=LeaksAChild),
    Variant("head_of_line_blocking", "one idle client stalls every other client",
            listener=HeadOfLineBlocking),
    Variant("restart_drops_old", "restart replaces a listener that did not stop",
            registry=RestartDropsOld),
    Variant("unbounded_exit_hook", "the exit hook waits drain_timeout per stuck listener",
            registry=UnboundedExitHook),
    Variant("teardown_ignores_stop", "integration shutdown tears the allocator down after a failed stop",
            worker=TeardownIgnoresStop),
    # races (harness.reference.race_variants): one lock of a racing point dropped; caught by scenarios/stress-*.yaml
    Variant("unlocked_dispatch_decision", "the dispatch decision without the lock: a stop that begins in between "
            "misses the dispatch", listener=UnlockedDispatchDecision),
    Variant("unlocked_frame_completion", "the frame-completion decision without the lock: a connection stop "
            "cancelled is queued and answered", listener=UnlockedFrameCompletion),
    Variant("unlocked_accept", "the accept decision without the lock: a connection stop's snapshot misses joins "
            "the stopping listener", listener=UnlockedAccept),
    Variant("unlocked_concurrent_stops", "teardown without its lock: concurrent stops tear down twice, one "
            "returns True mid-teardown", listener=UnlockedConcurrentStops),
    Variant("blocking_write", "a reply its client does not read blocks the serving thread (up to 5 s): every "
            "other client waits", listener=BlockingWrite),
    Variant("short_write_lost", "a reply larger than the socket buffer is cut short: one send, the rest dropped",
            listener=ShortWriteLost),
    Variant("partial_flush_abandoned", "a reply the socket took in part goes back to reading: the rest waits for "
            "the client's next request or a stop", listener=PartialFlushAbandoned),
    Variant("dead_reader_spins", "a client gone mid-reply is neither recorded nor closed: the serving thread "
            "spins on its connection until a stop", listener=DeadReaderSpins),
    Variant("reply_leaves_writing", "a connection whose reply took more than one write is never idle again: a "
            "stop does not cancel it", listener=ReplyLeavesWriting),
    Variant("failed_start_leaks", "a start that fails leaves its socket's fd and the directories it made",
            listener=FailedStartLeaks),
    Variant("takes_over_live_socket", "start unlinks whatever is at its path: a live owner's socket is stolen "
            "(kvcached 0.1.6)", listener=TakesOverLiveSocket),
    Variant("refuses_stale_socket", "a dead owner's leftover socket counts as in use: a restart after a crash fails",
            listener=RefusesStaleSocket),
    Variant("no_owner_record", "no owner record beside the socket: lastcall ctl deletes a live instance",
            listener=NoOwnerRecord),
    Variant("stop_unstarted_unlinks", "stop of a listener that never started, or failed to, unlinks whoever holds "
            "its path", listener=StopUnstartedUnlinks),
    Variant("no_keep_alive", "the connection is closed after its first reply: a kept-alive client's next request "
            "is lost", listener=NoKeepAlive),
    Variant("hook_per_start", "the exit hook is registered at every start: a restarted process runs it per start",
            registry=HookPerStart),
    Variant("exit_hook_waits_a_second", "the exit hook waits at least 1 s per stuck listener: a shorter budget is "
            "not kept", registry=ExitHookWaitsASecond),
    Variant("exit_hook_says_ok", "the exit hook records ok whatever it left: a listener that could not drain is "
            "reported stopped", registry=ExitHookSaysOk),
    Variant("cancel_left_to_thread", "stop leaves shutting idle and reading connections down to the serving "
            "thread's exit: while the thread is busy elsewhere their clients are not told",
            listener=CancelLeftToThread),
    Variant("starts_twice", "a listener started again after its stop serves again, and its stops return True "
            "without stopping it", listener=StartsTwice),
    Variant("leaves_umask", "the umask set for the bind is not restored: what the process creates later lacks "
            "bits (a directory without its search bit)", listener=LeavesUmask),
    Variant("socket_mode_open", "the socket file is not private to its owner (mode 0601)", listener=SocketModeOpen),
    Variant("busy_polls_after_reply", "after a reply the connection stays on EPOLLOUT: the serving thread spins "
            "while its client idles", listener=BusyPollsAfterReply),
    Variant("dies_on_accept_failure", "a failed accept (out of descriptors) kills the serving thread",
            listener=DiesOnAcceptFailure),
    Variant("spins_on_accept_failure", "a failed accept (out of descriptors) leaves the server socket watched: the "
            "serving thread spins until descriptors are back", listener=SpinsOnAcceptFailure),
    Variant("unrecorded_dispatch", "dispatch_started is not recorded: the checkers of late dispatches see none",
            listener=UnrecordedDispatch),
    Variant("misreports_close", "a connection its client closed is recorded as cancelled by stop",
            listener=MisreportsClose),
    Variant("queues_partial_reads", "a read that completes no frame queues its connection: a stop in between "
            "does not shut that reading client down", listener=QueuesPartialReads),
    Variant("failed_start_not_undone", "a start whose bind fails does not undo what it did: the directories it "
            "made stay", listener=FailedStartNotUndone),
    Variant("accepts_after_stop", "a connection accepted while a stop is under way is kept and answered, not "
            "closed unread", listener=AcceptsAfterStop),
    Variant("answered_not_cancelled", "a connection answered after a stop began is left open for reading: its "
            "client's next request is taken and never read", listener=AnsweredNotCancelled),
    Variant("reply_without_deadline", "the engine's client reads a reply without its deadline: a paused rank "
            "holds the call as long as it is stopped", client=ReplyWithoutDeadlineClient),
)


def get_variant(name: str) -> Variant:
    """The variant registered as ``name``; ConfigError with the known names otherwise."""
    try:
        return VARIANTS[name]
    except KeyError:
        import difflib

        near = difflib.get_close_matches(name, VARIANTS, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ConfigError(f"unknown variant {name!r}{hint}; known: {', '.join(VARIANTS)}") from None




def load_variant(spec: str) -> Variant:
    """A variant by registered name, or by ``module:attribute`` naming a :class:`Variant`.

    The module is imported by the caller's process (in a worker: after the fork).
    """
    if ":" not in spec:
        return get_variant(spec)
    import importlib

    module_name, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load variant {spec!r}: {exc}; give module:attribute of a Variant") from None
    if not isinstance(obj, Variant):
        raise ConfigError(f"{spec!r} is a {type(obj).__name__}, not a harness.reference.variants.Variant")
    return obj
