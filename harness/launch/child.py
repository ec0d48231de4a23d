"""What runs in a forked engine or worker process: the control client and the role mains.

Each child connects back to the harness's control socket, says hello, sends
every event it records (the harness's recorder is the only writer of the
history), and runs commands on threads of their own so a parked call never
blocks the channel.  It ends by returning from main: atexit hooks run and
non-daemon threads are joined, as in a real engine process.

Why a child ends (``exit_reason`` of the ``main_returned`` event): the
``exit`` command, SIGTERM, its engine dying (EOF on the death pipe, workers
only), or the harness going away (EOF on the control channel).  All but a
plain ``exit`` with ``shutdown: false`` run the integration shutdown first.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from harness import events, failpoints
from harness.launch.channel import Channel
from harness.osthread import name_os_thread

__all__ = ["ControlClient", "ExitRequest", "run"]

SHUTDOWN_TRIES = 3  # integration shutdown attempts before a child gives up and lets the exit hook try

Handler = Callable[..., Any]


class ExitRequest:
    """The first reason to end this process, with whether to shut down in order first."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""
        self.shutdown = True

    def set(self, reason: str, shutdown: bool = True) -> None:
        if not self._event.is_set():
            self.reason, self.shutdown = reason, shutdown
            self._event.set()

    def wait(self) -> None:
        while not self._event.wait(3600):
            pass


class ControlClient:
    """The child's end of the control channel; also the child's event emitter."""

    def __init__(self, path: str, role: str, label: str, lost: Callable[[], None]) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        self.chan = Channel(sock)
        self.role = role
        self.label = label
        self.handlers: dict[str, Handler] = {}
        self._lost = lost
        self.chan.send({"t": "hello", "role": role, "label": label, "pid": os.getpid()})
        self._thread = threading.Thread(target=self._serve, name="lastcall-control", daemon=True)
        self._thread.start()

    def emit(self, kind: str, /, **data: Any) -> None:
        self.chan.send({"t": "event", "t_ns": time.monotonic_ns(), "pid": os.getpid(), "role": self.role,
                        "rank": self.label, "thread": threading.current_thread().name, "kind": kind,
                        "data": data})

    def send(self, msg: dict[str, Any]) -> None:
        self.chan.send(msg)

    def _serve(self) -> None:
        name_os_thread("lc-control")
        for msg in self.chan.messages():
            if msg.get("t") == "cmd":
                threading.Thread(target=self._run_cmd, args=(msg,), name=f"lastcall-cmd-{msg.get('op')}",
                                 daemon=True).start()
        self._lost()

    def _run_cmd(self, msg: dict[str, Any]) -> None:
        op = str(msg.get("op"))
        handler = self.handlers.get(op)
        try:
            if handler is None:
                raise KeyError(f"unknown command {op!r}; known: {', '.join(sorted(self.handlers))}")
            reply = {"t": "reply", "id": msg["id"], "ok": True, "value": handler(**msg.get("args", {}))}
        except Exception as exc:
            reply = {"t": "reply", "id": msg["id"], "ok": False, "error": f"{type(exc).__name__}: {exc}",
                     "error_type": getattr(exc, "error_type", None), "error_class": type(exc).__name__}
        self.chan.send(reply)


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


def process_resources() -> dict[str, Any]:
    """This process's threads by name and fds by (kind, target): what leak checkers compare."""
    from harness.probes.procs import proc_entry

    entry = proc_entry(os.getpid())
    fds = [] if entry is None else [[f.fd, f.kind, f.target] for f in entry.fds]
    return {"threads": sorted(t.name for t in threading.enumerate()), "fds": fds}


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
    label = events.label(spec.get('pp', 0), spec.get('rank', 0)) if role == "worker" else role
    exit_req = ExitRequest()
    ctl = ControlClient(spec["ctl"], role, label, lost=lambda: exit_req.set("harness_gone"))
    _install_process_hooks(ctl, exit_req, spec)
    ctl.handlers.update(_common_handlers(ctl, exit_req))
    if role == "worker":
        from harness.launch.roles import worker_main

        return worker_main(spec, ctl, exit_req)
    if role in ("hs_engine", "hs_peer"):
        from harness.launch.hsroles import MAINS

        return MAINS[role](spec, ctl, exit_req)
    from harness.launch.roles import engine_main

    return engine_main(spec, ctl, exit_req)
