"""The role mains of a forked child: a worker (listener + backend) and an engine (client), of any target.

The roles speak only the plug-in contract of harness.targets: the target named in the spec is loaded
here, after the fork, so a ``module:attribute`` target is imported in the child too.
"""

from __future__ import annotations

from typing import Any

from harness import failpoints
from harness.errors import ConfigError
from harness.launch.child import SHUTDOWN_TRIES, ControlClient, ExitRequest, process_resources
from harness.targets import load_target

__all__ = ["worker_main", "engine_main"]


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
