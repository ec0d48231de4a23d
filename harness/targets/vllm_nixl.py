"""vLLM's own NIXL handshake listener as a target (``--target vllm_nixl``; vLLM 0.33.x, 0.11.x best effort).

Described here for 0.33.x; 0.11.x keeps the listener in ``nixl_connector.py``
and speaks a slightly different wire (see :class:`Layout`, picked from the
installed version).

What runs is vLLM's code, unchanged: the scheduler side of its NIXL connector
(``vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py``,
class ``NixlBaseConnectorScheduler``).  ``start()`` builds that scheduler with
vLLM's own ``__init__`` and calls its ``set_xfer_handshake_metadata``, which
starts the daemon thread ``nixl_handshake_listener`` (the static method
``_nixl_handshake_listener``) and waits on its ready event **with no timeout**,
as an EngineCore does; ``shutdown()`` calls the scheduler's own ``shutdown()``:
set the stop event, ``join()`` **without a timeout**, clear the thread.  So
vLLM's defects show as they are (see /work/shared/notes/vllm-nixl-listener.md):
a held port hangs ``start()``, a shutdown waits for a 1 s receive timeout and
for traffic to pause, one malformed message kills the thread.  Nothing here
bounds those waits: the harness's call timeouts and watchdog do, and report it.

What the adapter supplies around vLLM's code:

* configuration, the way vLLM takes it: ``VLLM_NIXL_SIDE_CHANNEL_HOST`` and
  ``VLLM_NIXL_SIDE_CHANNEL_PORT`` are set while the scheduler is constructed
  (vLLM reads them in ``__init__``); the configs it reads are small stand-ins
  (TP 1, DP index 0, no KV cache groups): enough for the listener, not an
  engine.  Port 0 means a free port picked here first (vLLM always binds a
  configured port and never reports the bound one).
* the NIXL library, faked as vLLM's tests fake it (``FakeNixlWrapper`` in
  tests/v1/kv_connector/unit/test_nixl_connector.py): :class:`FakeNixlAgent`
  publishes the agent metadata blob a real ``nixl_agent`` would; here the blob
  is the reference :class:`~harness.reference.handshake.AgentMetadata`, so a
  peer can tell which agent answered.  The scheduler side never calls NIXL.
* events, where they can be seen from outside vLLM's code:
  ``handshake_listener_started`` (host, port) once vLLM's start returned;
  ``stop_started`` (host, port) and ``stop_returned`` (ok, took_ms) around
  vLLM's shutdown; ``thread_exited`` once the listener thread is seen gone;
  ``handshake_served`` (pp, tp) after each reply the socket accepted.  That
  last one needs one seam, for observation only: the module's ``zmq_ctx``
  (the context manager that creates and destroys the listener's context and
  ROUTER socket) is wrapped so the socket it yields is a pass-through proxy
  that records a reply once ``send_multipart`` returned.  vLLM's loop, its
  socket options, its exceptions and its context teardown are untouched.
  A thread killed by an exception (a failed bind, a malformed message) is
  reported by the process's ``threading.excepthook`` (the harness's children
  record it as ``thread_exception``).
* the wire, for a peer: vLLM's request is msgpack of ``(b"get_meta_msg",
  pp_rank, tp_rank)`` (a bytes tag) and its reply two frames, the msgpack of
  ``NixlHandshakePayload`` and the listener's ``perf_counter``; the reference
  peer cannot decode that reply.  :class:`HandshakeCodec` (``TARGET.
  handshake_codec``) speaks it: ``request(pp, tp)``, ``decode(frames)`` and
  ``fetch(host, port, pp, tp, timeout=...)`` as a drop-in for
  :func:`harness.reference.handshake.fetch_metadata`.  It needs no vLLM.

vLLM is imported lazily (this module imports without it); ``unavailable()``
says why it cannot be imported and what fixes it (``./dev vllm-env``, which
builds ``.venv-vllm`` with vllm 0.33.0 and the light packages its scheduler
module needs on CPU).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from types import ModuleType, SimpleNamespace
from typing import Any

from harness.errors import ConfigError, HandshakeError
from harness.history import Emitter, NullRecorder
from harness.reference.handshake import AgentMetadata, check_listener_args, req_exchange
from harness.targets.vllm_nixl_layout import (
    _AGENT,
    _ENCODER,
    FIX,
    GET_META_MSG,
    METADATA_MODULE,
    SCHEDULER_MODULE,
    _import_error,
    _unavailable_message,
    _vllm,
    layout,
    vllm_version,
)

__all__ = ["TARGET", "VllmNixlTarget", "VllmNixlListener", "HandshakeCodec", "FakeNixlAgent", "GET_META_MSG",
           "SCHEDULER_MODULE", "METADATA_MODULE", "FIX"]

COMPAT_HASH = "lastcall-fake-nixl"  # what a real engine derives from its config; the listener only serves it
HOST_ENV, PORT_ENV = "VLLM_NIXL_SIDE_CHANNEL_HOST", "VLLM_NIXL_SIDE_CHANNEL_PORT"
_ENV_LOCK = threading.Lock()  # the side-channel env vars are set only while a scheduler reads them


# ------------------------------------------------------------------ fake NIXL
class FakeNixlAgent:
    """Stands in for ``nixl._api.nixl_agent`` as vLLM's tests' FakeNixlWrapper does.

    Only what the handshake carries: the agent's metadata blob, which a peer's
    NIXL would load with ``add_remote_agent`` and get the agent's name back.
    """

    def __init__(self, agent_name: str, meta: AgentMetadata) -> None:
        self.agent_name = agent_name
        self._meta = meta

    def get_agent_metadata(self) -> bytes:
        return _ENCODER.encode(self._meta)

    def add_remote_agent(self, agent_metadata: bytes) -> str:
        return _AGENT.decode(agent_metadata).agent_name


def _handshake_payloads(md: ModuleType, metadata: Mapping[tuple[int, int], AgentMetadata]) -> dict[Any, Any]:
    """What vLLM's ``set_xfer_handshake_metadata`` takes: 0.33, a NixlHandshakePayload per (pp, tp);
    0.11, a NixlAgentMetadata per tp rank (pp must be 0: its wire has no pp rank)."""
    lay = layout()
    if lay.by_pp:
        return {key: _handshake_payload(md, meta) for key, meta in metadata.items()}
    if any(pp != 0 for pp, _ in metadata):
        raise ConfigError(f"vLLM {vllm_version()} serves handshake metadata per tp rank only: pp ranks "
                          f"{sorted({pp for pp, _ in metadata} - {0})} cannot be served (vllm_nixl on 0.11.x)")
    return {tp: _agent_metadata(md, meta) for (_, tp), meta in metadata.items()}


def _handshake_payload(md: ModuleType, meta: AgentMetadata) -> Any:
    """vLLM 0.33's NixlHandshakePayload for one rank around :func:`_agent_metadata`."""
    return md.NixlHandshakePayload(compatibility_hash=COMPAT_HASH,
                                   agent_metadata_bytes=_ENCODER.encode(_agent_metadata(md, meta)))


def _agent_metadata(md: ModuleType, meta: AgentMetadata) -> Any:
    """vLLM's NixlAgentMetadata (its own dataclass) around the fake agent's blob, for a one-block,
    one-region KV cache."""
    agent = FakeNixlAgent(meta.agent_name, meta)
    known: dict[str, Any] = {
        "engine_id": meta.engine_id, "agent_metadata": agent.get_agent_metadata(), "kv_caches_base_addr": [0],
        "device_id": 0, "num_blocks": 1, "block_lens": [4096], "block_strides": [4096], "kv_cache_layout": "HND",
        "block_size": 16, "ssm_sizes": (0, 0), "attn_backend_name": "FLASH_ATTN",
        "physical_blocks_per_logical_kv_block": 1}
    cls = md.NixlAgentMetadata
    fields = dataclasses.fields(cls)
    missing = [f.name for f in fields if f.name not in known and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"vLLM {vllm_version()}: NixlAgentMetadata has required fields {missing} this adapter "
                          "does not fill; vllm_nixl supports vLLM 0.33.x, 0.34.x and 0.11.x")
    return cls(**{f.name: known[f.name] for f in fields if f.name in known})


def _stand_in_configs() -> tuple[Any, Any]:
    """The vllm_config and kv_cache_config vLLM's scheduler __init__ reads: TP 1, DP index 0, no KV groups."""
    from vllm.config import KVTransferConfig

    ns = SimpleNamespace
    vllm_config = ns(
        parallel_config=ns(tensor_parallel_size=1, decode_context_parallel_size=1, data_parallel_index=0,
                           data_parallel_rank=0),  # 0.33 reads the index, 0.11 the rank
        cache_config=ns(block_size=16),
        kv_transfer_config=KVTransferConfig(kv_connector="NixlConnector", kv_role="kv_both"),
        scheduler_config=ns(disable_hybrid_kv_cache_manager=False))
    kv_cache_config = ns(transfer_groups=[], kv_cache_groups=[], has_mamba_layers=False)
    return vllm_config, kv_cache_config


def _free_port(host: str) -> int:
    """A port nothing listens on now (vLLM binds a configured port; it has no 'pick one')."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------ the observation seam
_OBSERVERS: dict[int, Emitter] = {}  # port -> the recorder of the adapter listener configured on it
_SEAM_LOCK = threading.Lock()


class _ObservedSocket:
    """vLLM's ROUTER socket, passed through; records ``handshake_served`` after a reply was sent."""

    def __init__(self, sock: Any, rec: Emitter) -> None:
        self._sock = sock
        self._rec = rec
        self._asked: tuple[Any, Any] = (None, None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def recv_multipart(self, *args: Any, **kwargs: Any) -> Any:
        frames = self._sock.recv_multipart(*args, **kwargs)
        self._asked = layout().asked(frames[-1])  # only to name the ranks in the event; vLLM decodes it itself
        return frames

    def send_multipart(self, *args: Any, **kwargs: Any) -> Any:
        out = self._sock.send_multipart(*args, **kwargs)
        self._rec.emit("handshake_served", pp=self._asked[0], tp=self._asked[1])
        return out


def _install_seam(sched_mod: ModuleType) -> None:
    """Wrap ``zmq_ctx`` as the scheduler module sees it (once per process), for observation only."""
    with _SEAM_LOCK:
        real = sched_mod.zmq_ctx
        if getattr(real, "_lastcall_observed", False):
            return

        @contextlib.contextmanager
        def observed_zmq_ctx(socket_type: Any, addr: str) -> Iterator[Any]:
            with real(socket_type, addr) as sock:
                port = addr.rsplit(":", 1)[-1]
                rec = _OBSERVERS.get(int(port)) if port.isdigit() else None
                yield sock if rec is None else _ObservedSocket(sock, rec)

        observed_zmq_ctx._lastcall_observed = True  # type: ignore[attr-defined]
        setattr(sched_mod, "zmq_ctx", observed_zmq_ctx)  # noqa: B010 - a module attribute mypy cannot see


# ------------------------------------------------------------------ the listener
class VllmNixlListener:
    """vLLM's scheduler-side handshake listener behind the surface of the reference HandshakeListener.

    ``start()`` / ``shutdown()`` run vLLM's own start and shutdown (see the
    module docstring).  ``start_timeout`` and ``join_timeout`` are accepted and
    not used: vLLM waits for ready and joins with no timeout, and that is what
    is under test.
    """

    def __init__(self, metadata: Mapping[tuple[int, int], AgentMetadata], *, host: str = "127.0.0.1",
                 port: int = 0, recorder: Emitter | None = None, start_timeout: float | None = None,
                 join_timeout: float | None = None) -> None:
        check_listener_args(metadata, port)
        self.metadata = dict(metadata)
        self.host = host
        self.requested_port = port
        self.rec: Emitter = recorder if recorder is not None else NullRecorder()
        self.start_timeout = start_timeout  # unused: vLLM's ready wait has no timeout
        self.join_timeout = join_timeout  # unused: vLLM's join has no timeout
        self.scheduler: Any = None  # vLLM's NixlBaseConnectorScheduler, once start() built it
        self._port = 0
        self._thread: threading.Thread | None = None  # vLLM's listener thread, kept after vLLM drops it
        self._flags = threading.Lock()  # guards the two flags below only; vLLM's calls run unlocked, as in vLLM
        self._stop_started = False
        self._exited_seen = False

    @property
    def port(self) -> int:
        """The port vLLM bound (0 until ``start()`` returns)."""
        return self._port

    @property
    def thread(self) -> threading.Thread | None:
        """vLLM's ``nixl_handshake_listener`` thread (None before start)."""
        if self.scheduler is not None and self.scheduler._nixl_handshake_listener_t is not None:
            return self.scheduler._nixl_handshake_listener_t  # type: ignore[no-any-return]
        return self._thread

    def start(self) -> int:
        """vLLM's start: build the scheduler, then ``set_xfer_handshake_metadata`` (starts the thread and
        waits for it to bind, with no timeout: a port already held hangs here, as in vLLM)."""
        if self.scheduler is not None:
            raise ConfigError(f"vllm_nixl listener {self.host}:{self._port} was already started; create a new one")
        sched_mod, md = _vllm()
        _install_seam(sched_mod)
        port = self.requested_port or _free_port(self.host)
        _OBSERVERS[port] = self.rec
        payloads = _handshake_payloads(md, self.metadata)
        vllm_config, kv_cache_config = _stand_in_configs()
        lay = layout()
        args = (vllm_config, f"lastcall-{os.getpid()}") + ((kv_cache_config,) if lay.takes_kv_cache_config else ())
        with _ENV_LOCK:
            saved = {k: os.environ.get(k) for k in (HOST_ENV, PORT_ENV)}
            os.environ[HOST_ENV], os.environ[PORT_ENV] = self.host, str(port)
            if lay.host_read_by_thread:
                # 0.11 reads the host in the thread, after this lock is gone (a held port never lets start
                # return): the host stays set in this process, as an engine's environment would have it
                saved.pop(HOST_ENV)
            try:
                sched = getattr(sched_mod, lay.scheduler_class)(*args)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        self.scheduler = sched
        sched.set_xfer_handshake_metadata(payloads)  # vLLM: thread start + ready_event.wait() (no timeout)
        self._thread = sched._nixl_handshake_listener_t
        self._port = int(sched.side_channel_port)
        self.rec.emit("handshake_listener_started", host=self.host, port=self._port)
        return self._port

    def shutdown(self) -> bool:
        """vLLM's shutdown: set the stop event, join with no timeout, drop the thread.

        Returns True once vLLM's shutdown returned and its thread is gone (also
        before start, and on every later call).  It can take as long as vLLM's
        join does: bounded only by the caller.  Exceptions from vLLM's code
        propagate (none is expected).
        """
        sched = self.scheduler
        if sched is None:
            return True
        thread = sched._nixl_handshake_listener_t or self._thread
        with self._flags:
            first = not self._stop_started
            self._stop_started = True
        if first:
            self.rec.emit("stop_started", host=self.host, port=self._port)
        t0 = time.perf_counter()
        sched.shutdown()  # vLLM's own: _stop_event.set(); thread.join(); thread = None
        took_ms = (time.perf_counter() - t0) * 1e3
        ok = thread is None or not thread.is_alive()
        if ok and thread is not None:
            with self._flags:
                first_exit = not self._exited_seen
                self._exited_seen = True
            if first_exit:
                self.rec.emit("thread_exited")
        self.rec.emit("stop_returned", ok=ok, took_ms=round(took_ms, 3))
        return ok


# ------------------------------------------------------------------ the wire
class HandshakeCodec:
    """vLLM's side-channel wire, for a peer (needs no vLLM): 0.33.x's, or 0.11.x's where that is installed
    (:class:`Layout`).

    The peer must use :meth:`fetch` where it uses the reference's
    ``fetch_metadata`` (same signature and errors), or frame its own REQ
    exchange with :meth:`request` / :meth:`decode`.
    """

    def request(self, pp_rank: int, tp_rank: int) -> list[bytes]:
        """The request frames, as vLLM's worker sends them (one frame)."""
        return layout().request(pp_rank, tp_rank)

    def decode(self, frames: list[bytes]) -> AgentMetadata:
        """The reply frames (after the REQ envelope) as the reference AgentMetadata the fake agent published.

        HandshakeError when they are not vLLM's reply (0.33: two frames, a
        NixlHandshakePayload around a NixlAgentMetadata, and a perf_counter;
        0.11: one frame, the NixlAgentMetadata).
        """
        return layout().decode(frames)

    def fetch(self, host: str, port: int, pp_rank: int, tp_rank: int, *, timeout: float = 5.0) -> AgentMetadata:
        """Ask vLLM's listener at host:port for (pp_rank, tp_rank)'s metadata, as vLLM's worker does
        (a REQ socket, a receive timeout).  Drop-in for harness.reference.handshake.fetch_metadata."""
        where = f"{host}:{port} (pp_rank={pp_rank}, tp_rank={tp_rank})"
        frames = req_exchange(host, port, self.request(pp_rank, tp_rank), timeout=timeout, where=where,
                              hint="is vLLM's handshake listener serving there (its thread alive)?")
        try:
            return self.decode(frames)
        except HandshakeError as exc:
            raise HandshakeError(f"handshake with {where}: {exc}")


# ------------------------------------------------------------------ the target
class VllmNixlTarget:
    """vLLM's NIXL handshake listener (harness.targets.Target; handshake only)."""

    name = "vllm_nixl"
    about = "vLLM's own NIXL handshake listener (scheduler side; 0.33.x, 0.11.x), NIXL faked as vLLM's tests do"
    capabilities = frozenset({"handshake_listener", "listener_events"})
    codec = None  # no worker listener: the worker wire codec does not apply
    worker_side = None
    engine_side = None
    handshake_codec = HandshakeCodec()

    # Heavy imports (about 11 s on CPU) worth doing once in the fork server rather than in every engine
    # process: ./dev vllm-test names them in LASTCALL_PRELOAD.
    @property
    def preload(self) -> tuple[str, ...]:
        return layout().modules

    def unavailable(self) -> str | None:
        """None when vLLM's scheduler-side NIXL module imports here, else why and the fix."""
        why = _import_error()
        return None if why is None else _unavailable_message(why)

    def handshake_listener(self, metadata: Mapping[tuple[int, int], AgentMetadata], *, host: str, port: int,
                           recorder: Emitter | None, start_timeout: float | None = None,
                           join_timeout: float | None = None) -> VllmNixlListener:
        return VllmNixlListener(metadata, host=host, port=port, recorder=recorder, start_timeout=start_timeout,
                                join_timeout=join_timeout)


TARGET = VllmNixlTarget()
