"""A preloaded fork server: engine and worker processes in tens of milliseconds.

A fresh interpreter that imports torch takes about a second; a fork of one that
already has takes a few milliseconds.  The server (``python -m
harness.launch.forkserver FD [--no-torch]``) imports the reference stack once
(torch too, unless ``--no-torch``: the server of a target whose processes never
use it, harness.launch.spawn.ForkServer), never
initialises CUDA and never starts a thread, then forks on request.  A target's
own modules are imported after the fork, in the child (kvcached fixes its
socket directory at import time).

A forked child *returns* from the server loop and runs its role's main in the
module's ordinary flow, so it ends through normal interpreter finalization:
atexit hooks run and non-daemon threads are joined (multiprocessing children
end with os._exit and skip both).

A spec with ``call`` (``module:function``) runs that function instead of a role (:func:`call`).

Protocol (framed msgpack over a socketpair, see channel.py):
harness -> server ``{"op": "spawn_group", "req": n, "specs": [...], "env": {...}}`` and ``{"op": "quit"}``;
server -> harness ``{"op": "ready"}``, ``{"op": "spawned", "req": n, "pids": [...]}``,
``{"op": "exited", "pid", "status", "t_ns"}`` for every child it reaps.
In a group the first spec is the engine: it leads a new process group that the
workers join, and holds the write end of a death pipe whose read end each
worker watches.  If the harness goes away, the server kills its children.

Each child gets the environment its requester had when it asked (``env``), and its
import path first (:func:`_take_path`), as a subprocess would, not the ones the
server started with: the server is shared for the harness process's life, and
was perhaps started inside a test that had changed the environment (pytester
points HOME at its temporary directory, so a server first started there would
have sent every later run's workers looking for ``~/.cache/lastcall`` in a
directory long gone), or before a directory was added to the import path.
"""

from __future__ import annotations

import gc
import importlib
import os
import selectors
import signal
import socket
import sys
import time
from typing import Any

import msgspec

from harness import envvars
from harness.launch.channel import MAX_MESSAGE, Channel
from harness.reference import wire

__all__ = ["serve", "main"]


def preload(with_torch: bool = True) -> None:
    """Import what every child needs, so a fork finds it loaded (torch only where the target's processes use
    it: ``--no-torch``, harness.launch.spawn.ForkServer). Must not touch CUDA or start threads."""
    if with_torch:
        import torch  # noqa: F401

    import harness.launch.child
    import harness.reference.client
    import harness.reference.variants  # noqa: F401

    # A target whose code is slow to import (vllm_nixl: about 11 s for vLLM's scheduler module) names it in
    # LASTCALL_PRELOAD (comma-separated modules), so each fork finds it loaded; such imports start no threads.
    for module in filter(None, (envvars.text("LASTCALL_PRELOAD") or "").split(",")):
        importlib.import_module(module.strip())

    # Move everything imported so far out of the collector's sight: children share these pages
    # copy-on-write, and interpreter exit does not spend most of a second collecting torch's objects.
    gc.collect()
    gc.freeze()


def _reap(chan: Channel, children: set[int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        chan.send({"op": "exited", "pid": pid, "status": status, "t_ns": time.monotonic_ns()})


def _redirect(path: str | None, fds: tuple[int, ...]) -> None:
    target = os.open(path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for fd in fds:
        os.dup2(target, fd)
    os.close(target)


def _take_path(pythonpath: str) -> None:
    """In a child: its requester's import path first (``PYTHONPATH`` of its env: the requester's sys.path when it
    asked, harness.launch.spawn._child_env), then the server's. The server's own path was fixed when it started;
    a directory its requester added since (a conftest's, a test's) must serve the child's imports too, as it
    would a subprocess's."""
    first = [p for p in pythonpath.split(os.pathsep) if p]
    sys.path[:] = list(dict.fromkeys([*first, *sys.path]))


def _fork_group(specs: list[dict[str, Any]], keep: list[int],
                env: dict[str, str] | None = None) -> tuple[list[int], dict[str, Any] | None]:
    """Fork every spec. In the parent: (pids, None). In a child: ([], its spec), under ``env`` if given."""
    death_r, death_w = os.pipe()
    pids: list[int] = []
    pgid = 0
    for i, spec in enumerate(specs):
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, pgid)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in keep:
                os.close(fd)
            engine = i == 0
            os.close(death_r if engine else death_w)
            spec = dict(spec, death_fd=death_w if engine else death_r)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            if env is not None:
                os.environ.clear()
                os.environ.update(env)
                _take_path(env.get("PYTHONPATH", ""))
            _redirect(spec.get("stdout"), (1,))
            _redirect(spec.get("stderr"), (2,))
            return [], spec
        if i == 0:
            pgid = pid
        try:
            os.setpgid(pid, pgid)
        except OSError:
            pass  # the child already did it, or already exited: both fine
        pids.append(pid)
    os.close(death_r)
    os.close(death_w)
    return pids, None


def serve(fd: int) -> dict[str, Any] | None:
    """The server loop. Returns a child's spec in a forked child, None when the server should exit."""
    sock = socket.socket(fileno=fd)
    chan = Channel(sock)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    reader = wire.FrameReader(MAX_MESSAGE)
    decoder = msgspec.msgpack.Decoder()
    children: set[int] = set()
    chan.send({"op": "ready", "pid": os.getpid()})
    while True:
        for key, _ in sel.select():
            if key.fileobj == wake_r:
                try:
                    while os.read(wake_r, 256):
                        pass
                except BlockingIOError:
                    pass
                _reap(chan, children)
                continue
            try:
                data = sock.recv(1 << 16)
            except OSError:
                data = b""
            msgs: list[dict[str, Any]] = [decoder.decode(b) for b in reader.feed(data)] if data else [{"op": "quit"}]
            for msg in msgs:
                if msg.get("op") == "spawn_group":
                    pids, spec = _fork_group(msg["specs"], keep=[fd, wake_r, wake_w], env=msg.get("env"))
                    if spec is not None:
                        sock.detach()  # its fd is closed: the object must not close a reused number
                        sel.close()
                        return spec
                    children.update(pids)
                    chan.send({"op": "spawned", "req": msg["req"], "pids": pids})
                elif msg.get("op") == "quit":
                    for pid in children:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    for pid in list(children):
                        try:
                            os.waitpid(pid, 0)
                        except ChildProcessError:
                            pass
                    sel.close()
                    return None


def call(spec: dict[str, Any]) -> int:
    """A ``call`` spec: ``module:function`` run with ``args`` in the forked child, with no control channel
    (``path`` entries first on sys.path); its return value (None: 0) is the exit status, and the child ends,
    as a role's does, through normal interpreter finalization. The contract's exit probes run this way: an
    interpreter that has its modules loaded already, as a worker's has."""
    sys.path[:0] = [str(p) for p in spec.get("path") or ()]
    module, _, name = str(spec["call"]).partition(":")
    result = getattr(importlib.import_module(module), name)(*spec.get("args") or ())
    return int(result or 0)


def main() -> int:
    preload(with_torch="--no-torch" not in sys.argv[2:])
    spec = serve(int(sys.argv[1]))
    if spec is None:
        return 0
    if "call" in spec:
        return call(spec)
    from harness.launch.child import run

    code = run(spec)
    if spec.get("fast_exit"):
        # exit hooks and non-daemon threads as in a normal exit, but skip the interpreter's module teardown
        # and final collection (most of a second with torch loaded); asked for only by a run whose judged
        # verdicts cannot tell (harness.scenario.exitmode), never by the environment alone
        import atexit
        import threading

        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
