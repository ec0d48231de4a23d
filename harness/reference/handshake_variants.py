"""Planted-bug variants of the reference handshake listener, by name.

Each variant overrides one or two seams of
:class:`~harness.reference.handshake.HandshakeListener` to reproduce a bug vLLM's
NIXL side channel shipped (see /work/shared/notes/vllm-nixl-listener.md).  A check
earns trust by passing on ``reference`` and failing on the variant that breaks its
contract line; tests/test_handshake.py does both.

A variant may leave its thread running (that is its bug).  Test cleanup reaps it
with the reference's own seams, e.g. ``HandshakeListener._stop_thread(lst, t)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import zmq

from harness import failpoints
from harness.errors import ConfigError, ListenerError
from harness.reference.handshake import GET_META_MSG, AgentMetadata, HandshakeListener, envelope_of

__all__ = ["HANDSHAKE_VARIANTS", "RECV_TIMEOUT_MS", "get_handshake_variant", "HandshakeTarget", "handshake_target"]

RECV_TIMEOUT_MS = 1000  # vLLM 0.11.1+: the receive timeout on which the stop flag is checked


class NeverStopped(HandshakeListener):
    """vLLM 0.11.0 before the fix: shutdown() does not touch the listener thread.

    It reports success; the thread keeps the port bound until the process exits,
    so the next listener on that port cannot bind (contract lines 2 and 4).
    """

    def _stop_thread(self, timeout: float) -> bool:
        return True

    def _release(self) -> None:
        return None  # the thread still polls the self-pipe


class JoinTimeoutZero(HandshakeListener):
    """vLLM 0.11.0: shutdown() asks the thread to stop, joins with timeout=0 and reports success.

    True comes back while the thread may still be serving and holding the port
    (contract line 2: True only once the thread has exited).
    """

    def _stop_thread(self, timeout: float) -> bool:
        self._request_stop()
        assert self._thread is not None
        self._thread.join(timeout=0)
        return True

    def _release(self) -> None:
        return None  # the thread may still poll the self-pipe


class PollTimeout1s(HandshakeListener):
    """vLLM 0.11.1+: the thread checks the stop flag only when a 1 s receive times out.

    An idle shutdown takes up to 1 s; a peer that sends at least once a second
    defers it forever (contract line 2: shutdown wakes the thread at once).
    """

    def _serve_loop(self, router: zmq.Socket[Any]) -> None:
        router.setsockopt(zmq.RCVTIMEO, RECV_TIMEOUT_MS)
        while True:
            try:
                frames = router.recv_multipart()
            except zmq.Again:
                if self._stop.is_set():
                    return
                continue
            self._on_message(router, frames)


class ReadyWaitNoTimeout(HandshakeListener):
    """vLLM 0.33.0 defect 1: a failed bind kills the thread without a word, and the
    starter waits on the ready event with no timeout: with the port held, start()
    hangs (contract line 1).

    The bind error is kept, so once a test sets ``_ready`` itself (the only way
    out) start() raises it: a test never leaves a hung thread behind.
    """

    def _wait_ready(self, timeout: float) -> bool:
        self._ready.wait()
        return True

    def _report_bind_failure(self, error: ListenerError) -> None:
        self._bind_error = error  # and the ready event is never set


class DiesOnBadMessage(HandshakeListener):
    """vLLM 0.33.0 defect 3 (PR #54757): any exception while handling one message
    escapes and kills the thread; every later handshake fails (contract line 3)."""

    def _on_message(self, router: zmq.Socket[Any], frames: list[bytes]) -> None:
        envelope = envelope_of(frames)
        meta = self._answer(frames[len(envelope):])  # raises on a bad message: nothing catches it
        self._send_metadata(router, envelope, meta)


class BindFailureLeaksPipe(HandshakeListener):
    """A start whose bind fails does not release what it made: the self-pipe (two fds) stays open for the
    life of the process, however many starts fail (contract line 1: a failed start leaves nothing)."""

    def _release(self) -> None:
        if self._bind_error is None:  # a started listener's shutdown still releases its pipe
            super()._release()


class StartTimeoutKeepsThread(HandshakeListener):
    """start() gives up after start_timeout without telling the thread: a thread held before its bind
    binds and serves once it goes on, after start raised (contract line 1: a failed start never serves)."""

    def _wait_ready(self, timeout: float) -> bool:
        if self._ready.wait(timeout):
            return True
        raise ListenerError(f"handshake listener {self.where} was not ready within {timeout:g} s")  # no stop asked


class UncheckedRequest(HandshakeListener):
    """The request is used as it comes, unchecked: a request of several frames is served from its first, and
    an undecodable one fails inside the decoder, whose message is all the peer is told (contract line 3: a
    malformed request is refused, saying what was wrong)."""

    def _answer(self, body: list[bytes]) -> AgentMetadata:
        tag, pp, tp = msgspec.msgpack.decode(body[0])
        if tag != GET_META_MSG:
            raise ValueError(f"unknown message tag {tag!r}")
        return self.metadata[(pp, tp)]


class UnstartedShutdownFails(HandshakeListener):
    """shutdown() of a listener never started says False and leaves it open: a caller that tears down an
    engine whose listener never started sees a failed stop, and the listener can still be started after it
    was shut down (contract line 2: True before ``start()``, and a shut-down listener stays shut)."""

    def shutdown(self) -> bool:
        if self._thread is None and not self._closed:
            self.rec.emit("stop_returned", ok=False)
            return False
        return super().shutdown()


class UnboundedRequest(HandshakeListener):
    """The ROUTER has no size limit (no ZMQ_MAXMSGSIZE): a request of any size is read into memory and
    answered, where the reference's libzmq drops the peer unread (the size limit of MAX_REQUEST_BYTES)."""

    def _router(self, ctx: zmq.Context[Any]) -> zmq.Socket[Any]:
        router: zmq.Socket[Any] = ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        return router


class ServesAfterStop(HandshakeListener):
    """The thread checks the stop flag only before it polls: a request that arrives with the stop (both
    pending as the poll returns) is received and served after the stop began (contract line 2: the stop
    flag is checked after every wake-up)."""

    def _serve_loop(self, router: zmq.Socket[Any]) -> None:
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        while not self._stop.is_set():
            ready = dict(poller.poll())
            failpoints.hit("handshake.woke")
            if router in ready:
                try:
                    frames = router.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    continue
                self._on_message(router, frames)


HANDSHAKE_VARIANTS: dict[str, type[HandshakeListener]] = {
    "reference": HandshakeListener,
    "never_stopped": NeverStopped,
    "join_timeout_zero": JoinTimeoutZero,
    "poll_timeout_1s": PollTimeout1s,
    "ready_wait_no_timeout": ReadyWaitNoTimeout,
    "dies_on_bad_message": DiesOnBadMessage,
    "bind_failure_leaks_pipe": BindFailureLeaksPipe,
    "start_timeout_keeps_thread": StartTimeoutKeepsThread,
    "unchecked_request": UncheckedRequest,
    "unstarted_shutdown_fails": UnstartedShutdownFails,
    "unbounded_request": UnboundedRequest,
    "serves_after_stop": ServesAfterStop,
}


def get_handshake_variant(name: str) -> type[HandshakeListener]:
    """The listener class registered as ``name``; ConfigError with the known names otherwise."""
    try:
        return HANDSHAKE_VARIANTS[name]
    except KeyError:
        raise ConfigError(f"unknown handshake variant {name!r}; known: {', '.join(HANDSHAKE_VARIANTS)}") from None


_ABOUT = {
    "never_stopped": "vLLM 0.11.0: shutdown() leaves the thread serving; the port stays bound",
    "join_timeout_zero": "vLLM 0.11.0: join(timeout=0) and True while the thread still holds the port",
    "poll_timeout_1s": "vLLM 0.11.1+: the stop flag is seen only on a 1 s receive timeout",
    "ready_wait_no_timeout": "vLLM: start waits for ready without a timeout; a held port hangs startup",
    "dies_on_bad_message": "vLLM: one malformed handshake kills the listener thread",
    "bind_failure_leaks_pipe": "a start whose bind fails leaves its self-pipe open",
    "start_timeout_keeps_thread": "start gives up after start_timeout without stopping the thread: it binds later",
    "unchecked_request": "the request is not checked: extra frames ignored, a decode error's text is the reply",
    "unstarted_shutdown_fails": "shutdown before start returns False and leaves the listener startable",
    "unbounded_request": "no ZMQ_MAXMSGSIZE: an oversized request is read and answered, not dropped unread",
    "serves_after_stop": "no stop check after the poll: a request arriving with the stop is served after it",
}


@dataclass(frozen=True)
class HandshakeTarget:
    """A handshake-only target (harness.targets.Target): a planted-bug handshake listener class."""

    name: str
    about: str
    handshake_listener: Callable[..., Any]
    capabilities: frozenset[str] = frozenset({"handshake_listener", "failpoints", "listener_failpoints",
                                              "listener_events"})
    codec: Any = None
    worker_side: Any = None
    engine_side: Any = None
    uses_torch: bool = False  # a handshake run makes no KV page


def handshake_target(name: str) -> HandshakeTarget | None:
    """The planted-bug handshake variant ``name`` as a target; None if there is none of that name.

    ``reference`` is not one of them: the reference target (harness.reference.variants) has both
    the worker listener and this handshake listener.
    """
    cls = HANDSHAKE_VARIANTS.get(name)
    if cls is None or name == "reference":
        return None
    return HandshakeTarget(name, _ABOUT.get(name, cls.__doc__ or name), cls)
