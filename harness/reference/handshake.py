"""The reference handshake listener: agent metadata over a ZeroMQ ROUTER socket, and its client.

Modelled on vLLM's NIXL side channel (see /work/shared/notes/vllm-nixl-listener.md),
with that listener's defects fixed.  The wire:

* request: one frame, msgpack of ``("get_meta_msg", pp_rank, tp_rank)``, from a REQ
  peer (the ROUTER sees ``[identity, b"", payload]``; a DEALER's ``[identity, payload]``
  is served the same);
* reply: the envelope, the msgpack-encoded :class:`AgentMetadata`, then the listener's
  ``time.perf_counter()`` as msgpack (a second frame, as vLLM 0.33 sends);
* error reply: the envelope and a msgpack-encoded :class:`HandshakeErrorReply`.

The contract (tests/test_handshake.py proves each line, and shows the variant of
harness/reference/handshake_variants.py that breaks it):

1. ``start()`` returns only once the socket is bound and served (the thread, which
   binds, sets a ready event after bind), or raises a typed error within a bounded
   time: :class:`~harness.errors.PortInUse` naming host:port and the fix when the port
   is held, :class:`~harness.errors.ListenerError` for any other failure, or when the
   thread is not ready within ``start_timeout``.  Never a hang.
2. ``shutdown()`` wakes the thread at once, whatever the traffic: the thread polls the
   ROUTER and a self-pipe (a pipe write is safe from any thread; a ZeroMQ socket is
   not) with no timeout, and checks the stop flag after every wake-up.
   The thread closes its own socket (linger 0) and terminates its context; shutdown
   joins it with a bound and returns True only once all that is done, False if the
   thread did not exit in time (a later call retries).  Idempotent and safe from any
   thread: concurrent callers serialise on a lock and each gets the truth.  No
   ``__del__``.
3. A bad message (wrong frame count, undecodable body, wrong shape or tag, unknown
   (pp_rank, tp_rank), an error while serving it) gets an error reply and a
   ``bad_handshake`` event; the listener keeps serving.
4. After a True shutdown nothing listens on the port: a plain bind succeeds and a new
   listener binds it at once.

Events (to ``recorder``): handshake_listener_started (host, port), bind_failed (host,
port, error), handshake_served (pp, tp), bad_handshake (why), reply_failed (error),
thread_crashed (error), stop_started, stop_returned (ok), thread_exited.
Failpoint sites: ``handshake.before_bind``, ``handshake.woke`` (the thread woke from its
poll, before it checks the stop flag), ``handshake.request`` (a request received, before it
is served), ``handshake.before_reply``, ``handshake.stop_requested`` (on the stopping
thread: the stop flag is set, the wake-up not yet written).

Variant seams are the ``_``-prefixed methods between "variant seams" comments.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import msgspec
import zmq

from harness import failpoints, timeouts
from harness.errors import ConfigError, HandshakeError, ListenerError, PortInUse
from harness.history import Emitter, NullRecorder
from harness.osthread import name_os_thread

__all__ = [
    "GET_META_MSG",
    "AgentMetadata",
    "HandshakeErrorReply",
    "HandshakeListener",
    "encode_request",
    "envelope_of",
    "fetch_metadata",
    "req_exchange",
]

GET_META_MSG = "get_meta_msg"  # the request tag vLLM uses
DEFAULT_HOST = "127.0.0.1"  # loopback only, unless a caller says otherwise
START_TIMEOUT_S = 5.0  # safety net: start() waits this long (scaled) for the thread to bind
JOIN_TIMEOUT_S = 5.0  # safety net: shutdown() waits this long (scaled) for the thread to exit
MAX_REQUEST_BYTES = 64 * 1024  # a peer sending a larger message is disconnected by ZeroMQ


class AgentMetadata(msgspec.Struct, frozen=True, tag="agent_metadata"):
    """What one (pp_rank, tp_rank) agent publishes to its peers."""

    engine_id: str
    agent_name: str
    pp_rank: int
    tp_rank: int
    payload: bytes


class HandshakeErrorReply(msgspec.Struct, frozen=True, tag="error"):
    """The reply to a request the listener could not serve; ``error`` says why."""

    error: str


_REQUEST = msgspec.msgpack.Decoder(tuple[str, int, int])
_REPLY = msgspec.msgpack.Decoder(AgentMetadata | HandshakeErrorReply)
_ENCODER = msgspec.msgpack.Encoder()


def encode_request(pp_rank: int, tp_rank: int, tag: str = GET_META_MSG) -> bytes:
    """The request frame asking for (pp_rank, tp_rank)'s metadata."""
    return _ENCODER.encode((tag, pp_rank, tp_rank))


def check_listener_args(metadata: Mapping[tuple[int, int], AgentMetadata], port: int) -> None:
    """ConfigError unless each metadata entry is keyed by its own (pp_rank, tp_rank) and port is 0..65535."""
    for key, meta in metadata.items():
        if key != (meta.pp_rank, meta.tp_rank):
            raise ConfigError(f"metadata key {key!r} does not match its (pp_rank, tp_rank) = "
                              f"{(meta.pp_rank, meta.tp_rank)!r}; key each entry by its own ranks")
    if not 0 <= port <= 65535:
        raise ConfigError(f"port must be 0 (pick a free one) to 65535, got {port!r}")


class HandshakeListener:
    """Serves agent metadata on host:port until shut down.

    Lifecycle: ``start()`` once, then ``shutdown()`` any number of times from any thread.
    """

    def __init__(self, metadata: Mapping[tuple[int, int], AgentMetadata], *, host: str = DEFAULT_HOST,
                 port: int = 0, recorder: Emitter | None = None, start_timeout: float | None = None,
                 join_timeout: float | None = None) -> None:
        check_listener_args(metadata, port)
        self.metadata = dict(metadata)
        self.host = host
        self.requested_port = port
        self.rec: Emitter = recorder if recorder is not None else NullRecorder()
        self.start_timeout = timeouts.scaled(START_TIMEOUT_S) if start_timeout is None else start_timeout
        self.join_timeout = timeouts.scaled(JOIN_TIMEOUT_S) if join_timeout is None else join_timeout
        self._lock = threading.Lock()  # serialises start and every shutdown
        self._stop = threading.Event()  # set once stop is requested; the thread checks it after each wake-up
        self._ready = threading.Event()  # set by the thread once bound, or once binding failed
        self._bind_error: ListenerError | None = None  # why binding failed (set before _ready)
        self._port = 0  # the bound port, set by the thread before _ready
        self._wake_r, self._wake_w = -1, -1  # self-pipe: a write from any thread wakes the poll
        self._thread: threading.Thread | None = None
        self._stop_started = False  # stop_started was recorded (once)
        self._closed = False  # everything is gone: shutdown() is then a no-op returning True

    @property
    def port(self) -> int:
        """The bound port (0 until ``start()`` returns)."""
        return self._port

    @property
    def where(self) -> str:
        return f"{self.host}:{self._port or self.requested_port}"

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    # ------------------------------------------------------------------ start
    def start(self) -> int:
        """Start the thread, which binds the ROUTER socket, and wait until it serves.

        Returns: the bound port, once the socket is bound and the thread polls it.
        Resource handling: the thread owns its context and socket; a self-pipe is
            created here.  All are released by a True ``shutdown()``; on a bind
            failure they are released before start raises.
        Error handling: PortInUse when the port is held; ListenerError for any
            other bind failure, or when the thread is not ready within
            ``start_timeout`` (the thread is then told to stop; ``shutdown()``
            reaps it); ConfigError when called twice or after shutdown.
        """
        with self._lock:
            if self._thread is not None or self._closed:
                raise ConfigError(f"handshake listener {self.where} was already started or shut down; "
                                  "create a new HandshakeListener")
            self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"lastcall-handshake-{self.host}:{self.requested_port}")
            self._thread.start()
            if not self._wait_ready(self.start_timeout):
                self._request_stop()
                raise ListenerError(f"handshake listener {self.where} was not ready within "
                                    f"{self.start_timeout:g} s; raise LASTCALL_TIMEOUT_SCALE on a slow machine")
            if self._bind_error is not None:
                self._thread.join(self.join_timeout)  # it is leaving: nothing was bound
                if not self._thread.is_alive():
                    self._release()
                    self._closed = True
                raise self._bind_error
            return self._port

    # -------------------------------------------------------------- shutdown
    def shutdown(self) -> bool:
        """Stop serving: wake the thread, wait for it to close everything, release the rest.

        Returns: True once the thread has exited (its socket closed with linger 0,
            its context terminated) and the self-pipe is closed; also on every
            later call, and before ``start()``.  False when the thread did not exit
            within ``join_timeout`` (a later call retries) or when called on the
            listener's own thread (it cannot wait for itself).
        Resource handling: the thread releases what it owns, on its own thread;
            the pipe is closed here only after the thread is gone.
        Error handling: never raises; safe from any thread, concurrently.
        """
        if self._thread is not None and threading.current_thread() is self._thread:
            self._request_stop()  # no lock: a concurrent shutdown may hold it while joining us
            self.rec.emit("stop_returned", ok=False, reason="called on the listener's own thread")
            return False
        with self._lock:
            if self._closed:
                ok = True
            elif self._thread is None:
                ok = self._closed = True
            else:
                if not self._stop_started:
                    self._stop_started = True
                    self.rec.emit("stop_started", host=self.host, port=self._port)
                ok = self._stop_thread(self.join_timeout)
                if ok:
                    self._release()
                    self._closed = True
            self.rec.emit("stop_returned", ok=ok)
            return ok

    # ------------------------------------------------------------ variant seams
    def _wait_ready(self, timeout: float) -> bool:
        """Wait for the thread's ready-or-failed event; False if ``timeout`` passed first."""
        return self._ready.wait(timeout)

    def _report_bind_failure(self, error: ListenerError) -> None:
        """On the thread: hand the bind failure back to the starter."""
        self._bind_error = error
        self._ready.set()

    def _stop_thread(self, timeout: float) -> bool:
        """Request stop, then join with a bound; True only if the thread has exited."""
        self._request_stop()
        assert self._thread is not None
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _release(self) -> None:
        """Close the self-pipe (only once the thread is gone). Idempotent."""
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1

    def _router(self, ctx: zmq.Context[Any]) -> zmq.Socket[Any]:
        """The ROUTER socket, unbound: closed at once on close (linger 0), and a request over MAX_REQUEST_BYTES
        drops its peer unread (libzmq applies the size limit only when it is set before the bind)."""
        router: zmq.Socket[Any] = ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST_BYTES)
        return router

    def _serve_loop(self, router: zmq.Socket[Any]) -> None:
        """Poll the ROUTER and the self-pipe with no timeout; check the stop flag after each wake-up."""
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        while not self._stop.is_set():
            ready = dict(poller.poll())
            failpoints.hit("handshake.woke")  # where a request that arrives with the stop is held
            if self._stop.is_set():
                return
            if router in ready:  # (the pipe is written only after _stop is set: no need to drain it)
                try:
                    frames = router.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    continue
                self._on_message(router, frames)

    def _on_message(self, router: zmq.Socket[Any], frames: list[bytes]) -> None:
        """Serve one message; any error becomes an error reply and a bad_handshake event."""
        envelope = envelope_of(frames)
        try:
            meta = self._answer(frames[len(envelope):])
        except Exception as exc:
            why = str(exc) if isinstance(exc, HandshakeError) else f"{type(exc).__name__}: {exc}"
            self.rec.emit("bad_handshake", why=why)
            self._reply(router, envelope, [_ENCODER.encode(HandshakeErrorReply(error=why))])
            return
        self._send_metadata(router, envelope, meta)

    # ----------------------------------------------------------- serving side
    def _run(self) -> None:
        """The thread: bind, report ready, serve, and release what it owns on the way out."""
        name_os_thread("lc-handshake")
        ctx: zmq.Context[Any] = zmq.Context()
        router: zmq.Socket[Any] | None = None
        try:
            try:
                failpoints.hit("handshake.before_bind")
                if self._stop.is_set():  # start gave up waiting: never serve
                    return
                router = self._router(ctx)
                port = "*" if self.requested_port == 0 else str(self.requested_port)
                router.bind(f"tcp://{self.host}:{port}")
                endpoint = router.getsockopt(zmq.LAST_ENDPOINT)
                assert isinstance(endpoint, bytes)
                self._port = int(endpoint.decode().rsplit(":", 1)[1])
            except Exception as exc:
                error = self._bind_failure(exc)
                self.rec.emit("bind_failed", host=self.host, port=self.requested_port, error=str(exc))
                self._report_bind_failure(error)
                return
            self.rec.emit("handshake_listener_started", host=self.host, port=self._port)
            self._ready.set()
            self._serve_loop(router)
        except Exception as exc:
            self.rec.emit("thread_crashed", error=f"{type(exc).__name__}: {exc}")
        finally:
            if router is not None:
                router.close(linger=0)
            ctx.term()
            self.rec.emit("thread_exited")

    def _bind_failure(self, exc: Exception) -> ListenerError:
        where = f"{self.host}:{self.requested_port}"
        if isinstance(exc, zmq.ZMQError) and exc.errno == errno.EADDRINUSE:
            err: ListenerError = PortInUse(
                f"handshake listener cannot bind {where}: the port is already in use; stop whatever holds it "
                f"(`ss -ltnp 'sport = :{self.requested_port}'` names it) or pass port=0 to pick a free one")
        else:
            err = ListenerError(f"handshake listener cannot bind {where}: {type(exc).__name__}: {exc}")
        err.__cause__ = exc
        return err

    def _request_stop(self) -> None:
        """Set the stop flag and wake the thread through the self-pipe (safe from any thread)."""
        self._stop.set()
        failpoints.hit("handshake.stop_requested")  # the flag is set: a thread held at woke now sees it
        if self._wake_w >= 0:
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass  # a full pipe is already a wake-up

    def _answer(self, body: list[bytes]) -> AgentMetadata:
        """The metadata a request asks for; HandshakeError saying why it cannot be served."""
        failpoints.hit("handshake.request")
        if len(body) != 1:
            raise HandshakeError(f"expected 1 request frame after the envelope, got {len(body)}")
        try:
            tag, pp, tp = _REQUEST.decode(body[0])
        except msgspec.ValidationError as exc:
            raise HandshakeError(f"request is not ({GET_META_MSG!r}, pp_rank, tp_rank): {exc}")
        except msgspec.DecodeError as exc:
            raise HandshakeError(f"undecodable request ({len(body[0])} bytes): {exc}")
        if tag != GET_META_MSG:
            raise HandshakeError(f"unknown message tag {tag!r}; expected {GET_META_MSG!r}")
        meta = self.metadata.get((pp, tp))
        if meta is None:
            raise HandshakeError(f"no metadata for pp_rank={pp} tp_rank={tp}; serving {sorted(self.metadata)}")
        return meta

    def _send_metadata(self, router: zmq.Socket[Any], envelope: list[bytes], meta: AgentMetadata) -> None:
        """Reply with the metadata and this process's perf_counter (for the peer's clock offset)."""
        if self._reply(router, envelope, [_ENCODER.encode(meta), _ENCODER.encode(time.perf_counter())]):
            self.rec.emit("handshake_served", pp=meta.pp_rank, tp=meta.tp_rank)

    def _reply(self, router: zmq.Socket[Any], envelope: list[bytes], body: list[bytes]) -> bool:
        """Send one reply; a failure (a vanished peer, an injected fault) is recorded, never fatal."""
        try:
            failpoints.hit("handshake.before_reply")
            router.send_multipart(envelope + body, zmq.NOBLOCK)
        except Exception as exc:
            self.rec.emit("reply_failed", error=f"{type(exc).__name__}: {exc}")
            return False
        return True


def envelope_of(frames: list[bytes]) -> list[bytes]:
    """The routing frames: identity and the empty delimiter (REQ), or the identity alone (DEALER)."""
    if len(frames) >= 2 and frames[1] == b"":
        return frames[:2]
    return frames[:1]


def req_exchange(host: str, port: int, frames: list[bytes], *, timeout: float, where: str, hint: str) -> list[bytes]:
    """One REQ round trip to host:port, as a handshake peer makes it: send ``frames``, return the reply's.

    Resource handling: a fresh context and REQ socket (linger 0), both closed before this returns or raises.
    Error handling: HandshakeError naming ``where`` when no reply comes within ``timeout`` seconds, with
        ``hint`` (what should be serving there).
    """
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        sock = ctx.socket(zmq.REQ)
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVTIMEO, max(1, int(timeout * 1000)))
            sock.setsockopt(zmq.SNDTIMEO, max(1, int(timeout * 1000)))
            sock.connect(f"tcp://{host}:{port}")
            sock.send_multipart(frames)
            reply: list[bytes] = sock.recv_multipart()
            return reply
        except zmq.Again:
            raise HandshakeError(f"handshake with {where}: no reply within {timeout:g} s; {hint}")
        finally:
            sock.close(linger=0)
    finally:
        ctx.term()


def fetch_metadata(host: str, port: int, pp_rank: int, tp_rank: int, *, timeout: float = 5.0) -> AgentMetadata:
    """Ask the listener at host:port for (pp_rank, tp_rank)'s metadata.

    Returns: the decoded metadata.
    Resource handling: a fresh context and REQ socket (linger 0), both closed
        before this returns or raises.
    Error handling: HandshakeError naming host:port on no reply within
        ``timeout`` seconds, an error reply, or an undecodable reply.
    """
    where = f"{host}:{port} (pp_rank={pp_rank}, tp_rank={tp_rank})"
    frames = req_exchange(host, port, [encode_request(pp_rank, tp_rank)], timeout=timeout, where=where,
                          hint="is a handshake listener serving there?")
    try:
        reply = _REPLY.decode(frames[0])
    except (msgspec.DecodeError, IndexError) as exc:
        raise HandshakeError(f"handshake with {where}: undecodable reply: {exc}")
    if isinstance(reply, HandshakeErrorReply):
        raise HandshakeError(f"handshake with {where} refused: {reply.error}")
    return reply
