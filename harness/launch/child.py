"""What runs first in a forked child: process hooks, the common commands, then its role's main.

The child connects back to the harness over a :class:`~harness.launch.control.ControlClient`, installs its
hooks (SIGTERM, the thread excepthook, faulthandler, the death watch of a worker), registers the commands
every process answers (arm, release, exit, stacks, ...) and runs the main its role names in
:data:`harness.launch.roles.ROLE_MAINS`.  It ends by returning from main: atexit hooks run and non-daemon
threads are joined, as in a real engine process.

Why a child ends (``exit_reason`` of the ``main_returned`` event): the
``exit`` command, SIGTERM, its engine dying (EOF on the death pipe, workers
only), or the harness going away (EOF on the control channel).  All but a
plain ``exit`` with ``shutdown: false`` run the integration shutdown first.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import traceback
from typing import Any

from harness import events, failpoints
from harness.launch.control import ControlClient, ExitRequest, Handler
from harness.launch.roles import ROLE_MAINS

__all__ = ["run"]

def _stacks() -> str:
    """Every thread's Python stack, from the control thread (which is not the one that hangs)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    return "\n".join(f"Thread {names.get(ident, ident)} (most recent call last):\n"
                     + "".join(traceback.format_stack(frame))
                     for ident, frame in sys._current_frames().items())


_IGNORE_SIGTERM = threading.Event()  # set by the hang fault: SIGTERM then does nothing


def _hang() -> str:
    """A test fault: a non-daemon thread blocked forever, and SIGTERM ignored: exit can never finish."""
    _IGNORE_SIGTERM.set()
    threading.Thread(target=threading.Event().wait, name="lastcall-hang", daemon=False).start()
    return "hanging"


def _common_handlers(ctl: ControlClient, exit_req: ExitRequest) -> dict[str, Handler]:
    def arm(site: str, action: str = "pause", count: int | None = None, delay: float = 0.0,
            message: str = "injected fault") -> str:
        failpoints.arm(site, action, count=count, delay=delay, message=message)
        return site

    def release(site: str) -> bool:
        fp = failpoints.get(site)
        if fp is not None:
            fp.release()
        return fp is not None

    def exit_(shutdown: bool = True) -> str:
        exit_req.set("command", shutdown=shutdown)
        return "exiting"

    return {"arm": arm, "release": release, "disarm": failpoints.disarm, "reset": failpoints.reset,
            "exit": exit_, "stacks": _stacks, "hang": _hang, "ping": lambda: os.getpid()}


def _install_process_hooks(ctl: ControlClient, exit_req: ExitRequest, spec: dict[str, Any]) -> None:
    stacks_path = spec.get("stacks")
    if stacks_path:
        f = open(stacks_path, "w")  # noqa: SIM115 - kept open for the life of the process
        faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)

    def excepthook(args: threading.ExceptHookArgs) -> None:
        ctl.emit("thread_exception", thread=args.thread.name if args.thread else None,
                 error=f"{args.exc_type.__name__}: {args.exc_value}")

    threading.excepthook = excepthook
    failpoints.set_observer(ctl.emit)
    def on_sigterm(*_: object) -> None:
        if not _IGNORE_SIGTERM.is_set():
            exit_req.set("sigterm")

    signal.signal(signal.SIGTERM, on_sigterm)
    death_fd = spec.get("death_fd")
    if spec["role"] == "worker" and isinstance(death_fd, int):
        def watch() -> None:
            while os.read(death_fd, 1):
                pass
            ctl.emit("engine_died")
            exit_req.set("engine_died")

        threading.Thread(target=watch, name="lastcall-deathwatch", daemon=True).start()


def run(spec: dict[str, Any]) -> int:
    """The child's main: returns its exit status (the interpreter then finalises normally)."""
    role = spec["role"]
    label = str(spec.get("label") or (events.label(spec.get('pp', 0), spec.get('rank', 0)) if role == "worker"
                                      else role))
    exit_req = ExitRequest()
    ctl = ControlClient(spec["ctl"], role, label, lost=lambda: exit_req.set("harness_gone"))
    _install_process_hooks(ctl, exit_req, spec)
    ctl.handlers.update(_common_handlers(ctl, exit_req))
    main = ROLE_MAINS.get(role)
    if main is None:
        raise KeyError(f"no role main {role!r}; known: {', '.join(sorted(ROLE_MAINS))}")
    return main(spec, ctl, exit_req)
