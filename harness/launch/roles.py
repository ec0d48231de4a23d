"""The role mains of a forked child, by role name: :data:`ROLE_MAINS`.

``worker`` (listener + backend) and ``engine`` (the client driving the workers) make up a worker run;
``hs_engine`` (an engine owning a handshake listener, like vLLM's EngineCore with the NIXL connector) and
``hs_peer`` (a peer engine handshaking with it) make up a handshake run.  Which roles a run starts is its
cast (harness.launch.parts): a new kind of run adds its role mains here and names them in its parts.

The roles speak only the plug-in contract of harness.targets: the target named in the spec is loaded
here, after the fork, so a ``module:attribute`` target is imported in the child too.  The handshake listener
is started and shut down by command, so a port can be held before start; the peer handshakes once, back to
back (bounded in count) or with malformed messages.  Traffic only ever goes to 127.0.0.1.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from harness import failpoints
from harness.errors import ConfigError
from harness.launch.control import SHUTDOWN_TRIES, ControlClient, ExitRequest, process_resources
from harness.reference.probe import start_and_stop
from harness.targets import load_target

__all__ = ["ROLE_MAINS", "RoleMain", "worker_main", "engine_main", "hs_engine_main", "hs_peer_main", "HOST"]

RoleMain = Callable[[dict[str, Any], ControlClient, ExitRequest], int]
HOST = "127.0.0.1"
HAMMER_MAX = 100_000  # a continuous peer stops by itself after this many handshakes


def worker_main(spec: dict[str, Any], ctl: ControlClient, exit_req: ExitRequest) -> int:
    """Serve one rank until asked to end; shut down by the contract; return."""
    target = load_target(spec.get("variant", "reference"))
    if target.worker_side is None:
        raise ConfigError(f"target {spec.get('variant')!r} has no worker listener")
    side = target.worker_side(spec, ctl)
    ctl.emit("process_resources", when="before_start", **process_resources())
    side.start()
    ctl.handlers.update({
        "shutdown": side.shutdown,
        "stop": lambda timeout=None: side.stop(timeout),
        "mapped": lambda group_id=0: side.mapped(group_id),
        "torn_down": side.torn_down,
        "restart": side.start,
        "stop_in_handler": lambda site="backend.kv_tensors_created": _stop_in_handler(ctl, side, site),
        "start_listener": lambda **kw: start_and_stop(side, **kw),  # a throw-away listener (harness.reference.probe)
    })
    ctl.send({"t": "ready", "path": side.path})
    exit_req.wait()
    ctl.emit("exit_requested", reason=exit_req.reason, shutdown=exit_req.shutdown)
    stopped = False
    if exit_req.shutdown:
        for _ in range(SHUTDOWN_TRIES):
            if side.shutdown():
                stopped = True
                break
    ctl.emit("process_resources", when="after_shutdown" if stopped else "at_exit", **process_resources())
    failpoints.hit("process.exit")
    failpoints.hit("process.exit")
    ctl.emit("main_returned", reason=exit_req.reason)
    return 0


def _stop_in_handler(ctl: ControlClient, side: Any, site: str) -> str:
    """Environment fault: the next handler to hit ``site`` calls stop on its own listener (from the
    serving thread). Its result and duration become a ``stop_from_handler_returned`` event."""
    import time

    def stop_here() -> None:
        t0 = time.monotonic()
        ok = side.stop()
        ctl.emit("stop_from_handler_returned", ok=ok, seconds=time.monotonic() - t0)

    failpoints.arm(site, "call", count=1, fn=stop_here)
    return site


def engine_main(spec: dict[str, Any], ctl: ControlClient, exit_req: ExitRequest) -> int:
    """Drive the workers with the target's client (and own what its engine owns) until asked to end."""
    target = load_target(spec.get("variant", "reference"))
    if target.engine_side is None:
        raise ConfigError(f"target {spec.get('variant')!r} has no engine side")
    engine = target.engine_side(spec, ctl)
    handlers = {"map": engine.map, "unmap": engine.unmap, "kv_tensors_created": engine.kv_tensors_created}
    if hasattr(engine, "broadcast"):
        handlers["broadcast"] = engine.broadcast
    ctl.handlers.update(handlers)
    ctl.send({"t": "ready", "path": engine.path})
    try:
        exit_req.wait()
        ctl.emit("exit_requested", reason=exit_req.reason, shutdown=exit_req.shutdown)
    finally:
        engine.close()
    failpoints.hit("process.exit")
    ctl.emit("main_returned", reason=exit_req.reason)
    return 0


# ------------------------------------------------------ handshake side channel
def _listener_factory(name: str) -> Callable[..., Any]:
    """The handshake listener (class or factory) of the target ``name``: called with HandshakeListener's
    constructor signature, (metadata, *, host, port, recorder, start_timeout, join_timeout)."""
    factory = getattr(load_target(name), "handshake_listener", None)
    if factory is None:
        raise ConfigError(f"target {name!r} has no handshake listener")
    return factory  # type: ignore[no-any-return]


def hs_engine_main(spec: dict[str, Any], ctl: ControlClient, exit_req: ExitRequest) -> int:
    from harness.reference.handshake import AgentMetadata

    cls = _listener_factory(spec.get("variant", "reference"))
    ctl.emit("process_resources", when="before_start", **process_resources())
    tp, pp = int(spec.get("tp", 1)), int(spec.get("pp_size", 1))
    meta = {(p, t): AgentMetadata(engine_id=spec["ipc"], agent_name=f"agent-{p}-{t}", pp_rank=p, tp_rank=t,
                                  payload=b"x" * 64) for p in range(pp) for t in range(tp)}
    state: dict[str, Any] = {"listener": None}

    def make(port: int = 0, start_timeout: float | None = None, join_timeout: float | None = None) -> Any:
        state["listener"] = cls(meta, host=HOST, port=port, recorder=ctl, start_timeout=start_timeout,
                                join_timeout=join_timeout)
        return state["listener"]

    def start(port: int = 0, start_timeout: float | None = None, join_timeout: float | None = None,
              reuse: bool = False) -> int:
        """Start a new listener; ``reuse``: start the one made last instead (one shut down must refuse)."""
        listener = state["listener"] if reuse and state["listener"] is not None else make(port, start_timeout,
                                                                                          join_timeout)
        return int(listener.start())

    def shutdown(unstarted: bool = False) -> bool:
        """Shut the listener down; ``unstarted``: make a new one and shut it down without starting it."""
        listener = make() if unstarted else state["listener"]
        return True if listener is None else bool(listener.shutdown())

    def cycle(n: int, port: int = 0) -> list[int]:
        """Start and shut down ``n`` listeners in this process on one port (the original hang)."""
        ports = []
        for _ in range(n):
            ports.append(start(port))
            port = ports[-1]
            if not shutdown():
                raise RuntimeError(f"shutdown {len(ports)} of {n} returned False")
        return ports

    ctl.handlers.update({"start": start, "shutdown": shutdown, "cycle": cycle})
    ctl.send({"t": "ready", "path": ""})
    exit_req.wait()
    ctl.emit("exit_requested", reason=exit_req.reason, shutdown=exit_req.shutdown)
    stopped = bool(exit_req.shutdown and shutdown())
    ctl.emit("process_resources", when="after_shutdown" if stopped else "at_exit", **process_resources())
    failpoints.hit("process.exit")
    ctl.emit("main_returned", reason=exit_req.reason)
    return 0


def hs_peer_main(spec: dict[str, Any], ctl: ControlClient, exit_req: ExitRequest) -> int:
    import msgspec
    import zmq

    from harness.reference.handshake import MAX_REQUEST_BYTES, HandshakeErrorReply, fetch_metadata

    codec = getattr(load_target(spec.get("variant", "reference")), "handshake_codec", None)
    if codec is not None:  # the target speaks its own handshake wire (vllm_nixl: vLLM's reply, two frames)
        fetch_metadata = codec.fetch
    stop_hammer = threading.Event()

    def fetch(port: int, pp: int = 0, tp: int = 0, within: float = 2.0) -> str:
        return fetch_metadata(HOST, port, pp, tp, timeout=within).agent_name

    def hammer(port: int) -> str:
        """Handshake back to back until told to stop (bounded); counts go into the history."""
        def run() -> None:
            done = failed = 0
            while not stop_hammer.is_set() and done + failed < HAMMER_MAX:
                try:
                    fetch_metadata(HOST, port, 0, 0, timeout=1.0)
                    done += 1
                except Exception:
                    failed += 1
                    if failed > 3:
                        break
            ctl.emit("hammer_finished", ok=done, failed=failed)

        threading.Thread(target=run, name="lastcall-hammer", daemon=True).start()
        return "hammering"

    def stop_hammering() -> bool:
        stop_hammer.set()
        return True

    def bad(port: int, kind: str = "garbage", within: float = 2.0, detail: bool = False) -> Any:
        """Send one malformed handshake from a REQ socket; returns what came back ("no reply" after ``within``).

        ``detail``: a dict instead, ``status`` "error" (an error reply, its text in ``error``), "ok" (anything
        else: served as if well-formed) or None (no reply)."""
        ctx: zmq.Context[Any] = zmq.Context()
        s = ctx.socket(zmq.REQ)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, max(1, int(within * 1000)))
        try:
            s.connect(f"tcp://{HOST}:{port}")
            good = msgspec.msgpack.encode(("get_meta_msg", 0, 0))
            body = {"garbage": [b"\xc1\xc1"], "wrong_tag": [msgspec.msgpack.encode(("hello", 0, 0))],
                    "unknown_rank": [msgspec.msgpack.encode(("get_meta_msg", 9, 9))],
                    "extra_frame": [good, b"extra"],  # a well-formed request and one frame more
                    "oversized": [b"\xc1" * (2 * MAX_REQUEST_BYTES)]}[kind]  # past the size limit
            s.send_multipart(body)
            reply = s.recv_multipart()
        except zmq.Again:
            return {"status": None} if detail else "no reply"
        finally:
            s.close()
            ctx.term()
        if not detail:
            return "replied" if reply else "empty"
        try:
            error = msgspec.msgpack.decode(reply[0], type=HandshakeErrorReply).error if len(reply) == 1 else None
        except (msgspec.DecodeError, msgspec.ValidationError):
            error = None
        return {"status": "ok"} if error is None else {"status": "error", "error": error}

    ctl.handlers.update({"fetch": fetch, "hammer": hammer, "stop_hammering": stop_hammering, "bad": bad})
    ctl.send({"t": "ready", "path": ""})
    exit_req.wait()
    stop_hammer.set()
    ctl.emit("main_returned", reason=exit_req.reason)
    return 0


ROLE_MAINS: dict[str, RoleMain] = {"worker": worker_main, "engine": engine_main, "hs_engine": hs_engine_main,
                                   "hs_peer": hs_peer_main}
