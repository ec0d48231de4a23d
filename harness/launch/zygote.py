"""A preloaded launcher for an engine's command: ``vllm serve`` without paying its imports on every launch.

An engine's API server spends most of its start importing (vLLM and torch: about 6 s of a 16 s launch to
ready on 2 cores).  The zygote (``python -m harness.launch.zygote FD MODULE,...``) imports those modules
once, starts no thread, and then forks one process per launch that runs the engine's own command script
exactly as its interpreter would (``runpy.run_path(script, run_name="__main__")``, ``sys.argv`` the
command line): the same code, arguments, environment, working directory and exit path (the script's
``sys.exit`` ends in normal interpreter finalization).  What the engine starts itself is untouched: vLLM's
EngineCore and workers are spawned by vLLM (``multiprocessing`` spawn, fresh interpreters), which see the
same main script path, ``sys.path`` and working directory as under a plain launch.

What differs from ``execve`` of the command, and is set back where it matters:

- the process is a fork: ``/proc/PID/cmdline`` is the zygote's (its ``comm`` is set to the script's name, as
  the kernel names an exec'd script);
- its parent is the zygote, which reaps it and reports its wait status to the harness (the harness is still
  the subreaper every orphan of the tree is reparented to);
- state a module computed at import is the zygote's: ``tempfile``'s cached directory is reset, and so are
  ``multiprocessing``'s authentication key (a fresh random one, as a new interpreter makes) and original
  directory; a module that reads an environment variable at import reads the zygote's, which is the
  launch's own environment less the per-run variables (``TMPDIR`` and the paths the harness points at the
  run), none of which the preloaded modules read at import (vLLM reads its variables when they are used).

Protocol (a SOCK_SEQPACKET socketpair, one JSON message a packet): zygote -> harness ``{"op": "ready"}`` (or
``{"op": "error", "message"}``); harness -> zygote ``{"op": "spawn", "req", "argv", "env", "cwd"}`` with the
write end of the output pipe attached (SCM_RIGHTS); zygote -> harness ``{"op": "spawned", "req", "pid"}`` and
``{"op": "exited", "pid", "status"}``.  When the harness goes away the zygote kills every session it started
and exits.  The client side is :class:`Zygote` (one per harness process and module list, like the fork server).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Zygote", "ZygoteProcess", "helper_pids", "helper_threads"]

MAX_PACKET = 1 << 20
PR_SET_NAME = 15


# ----------------------------------------------------------------------------------------------- server
def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        sock.send(json.dumps(msg).encode())


def _preload(modules: Sequence[str]) -> None:
    import gc
    import importlib

    for name in modules:
        importlib.import_module(name)
    if threading.active_count() != 1:  # a fork copies only the calling thread: a preload must start none
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.main_thread())
        raise RuntimeError(f"importing {', '.join(modules)} started threads ({names}): cannot fork from it")
    gc.collect()
    gc.freeze()  # the children's collector skips what they share with the zygote, as the fork server does


def _serve(sock: socket.socket) -> tuple[str | None, list[str]] | None:
    """Fork on request. In the zygote: None once the harness is gone. In a child: its command (:func:`_command`)."""
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, None)
    children: dict[int, int] = {}  # pid -> pidfd
    while True:
        for key, _ in sel.select():
            if key.data is not None:  # a child exited
                pid = key.data
                _, status = os.waitpid(pid, 0)
                sel.unregister(key.fd)
                os.close(children.pop(pid))
                _send(sock, {"op": "exited", "pid": pid, "status": status})
                continue
            try:
                raw, fds, _, _ = socket.recv_fds(sock, MAX_PACKET, 4)
            except OSError:
                raw, fds = b"", []
            if not raw:  # the harness is gone: nothing it started outlives it
                for pid in children:
                    with contextlib.suppress(OSError):
                        os.killpg(pid, signal.SIGKILL)
                for pid in children:
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(pid, 0)
                return None
            req = json.loads(raw)
            out = fds[0]
            sys.stdout.flush()
            sys.stderr.flush()
            # the child closes its end once it leads its session: as Popen returns only after the exec, the
            # harness hears of the process only once its tree can be found by its session id
            settled_r, settled_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                sel.close()
                sock.close()
                os.close(settled_r)
                for fd in children.values():
                    os.close(fd)
                command = _become(req, out)
                os.close(settled_w)
                return command
            os.close(settled_w)
            os.read(settled_r, 1)  # EOF: the child has settled (or died, which its exit then reports)
            os.close(settled_r)
            os.close(out)
            for extra in fds[1:]:
                os.close(extra)
            children[pid] = os.pidfd_open(pid)
            sel.register(children[pid], selectors.EVENT_READ, pid)
            _send(sock, {"op": "spawned", "pid": pid, "req": req.get("req")})


def _become(req: Mapping[str, Any], out: int) -> tuple[str | None, list[str]]:
    """In the child: the session, streams, directory and environment a plain launch of the command has; the
    command to run."""
    os.setsid()  # as subprocess's start_new_session: the tree is found by its session id
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    module, argv = _command(req["argv"])
    sys.argv = argv  # `python -m M`: runpy.run_module(alter_sys=True) sets argv[0] to the module's file
    # the first entry of sys.path an exec'd command has: the script's directory, or for -m the directory it ran in
    sys.path[0] = os.getcwd() if module else os.path.dirname(os.path.abspath(argv[0]))
    import tempfile

    tempfile.tempdir = None  # gettempdir() reads TMPDIR again: the run's directory
    if "multiprocessing.process" in sys.modules:
        from multiprocessing import process

        process.ORIGINAL_DIR = os.getcwd()  # type: ignore[attr-defined]  # set at its import: the zygote's
        process.current_process().authkey = os.urandom(32)
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        name = os.path.basename(req["argv"][0]).encode()[:15]
        ctypes.CDLL(None).prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
    return module, argv


def _command(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """The exec'd command line ``argv`` as (module, sys.argv): ``[python, -m, M, *args]`` runs module M,
    ``[python, script, *args]`` and ``[script, *args]`` (its ``#!`` names this interpreter) run the script."""
    argv = [str(a) for a in argv]
    if len(argv) >= 2 and os.path.basename(argv[0]).startswith("python"):
        if argv[1] == "-m" and len(argv) >= 3:
            return argv[2], [argv[2], *argv[3:]]
        if not argv[1].startswith("-"):
            return None, argv[1:]
    return None, argv


def main(argv: Sequence[str]) -> None:
    fd, modules = int(argv[0]), [m for m in argv[1].split(",") if m]
    sock = socket.socket(fileno=fd)
    try:
        _preload(modules)
    except BaseException as exc:
        _send(sock, {"op": "error", "message": f"{type(exc).__name__}: {exc}"})
        raise SystemExit(1) from None
    _send(sock, {"op": "ready"})
    command = _serve(sock)
    if command is None:
        return
    import runpy

    # the engine's command, in the module's ordinary flow: its SystemExit ends the interpreter normally
    module, args = command
    if module:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(args[0], run_name="__main__")


# ----------------------------------------------------------------------------------------------- client
_LOCK = threading.Lock()
_SHARED: dict[tuple[str, tuple[str, ...]], Zygote] = {}


def helper_pids() -> set[int]:
    """The pids of this process's live zygotes: the harness's helpers, not a run's processes."""
    with _LOCK:
        return {z.pid for z in _SHARED.values() if z.alive}


def helper_threads() -> set[threading.Thread]:
    """The reader threads of this process's live zygotes."""
    with _LOCK:
        return {z._reader for z in _SHARED.values() if z.alive}


class ZygoteProcess:
    """What :class:`subprocess.Popen` offers the engine tree, for a process the zygote forked: ``pid``,
    ``stdout``, ``poll()``, ``wait()``, ``returncode`` (negative: the signal that ended it)."""

    def __init__(self, pid: int, stdout: Any, zygote: Zygote) -> None:
        self.pid = pid
        self.stdout = stdout
        self._z = zygote
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            status = self._z.status_of(self.pid)
            if status is not None:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        if self.poll() is None and self._z.wait_exit(self.pid, timeout) is None:
            raise subprocess.TimeoutExpired(["zygote child", str(self.pid)], timeout or 0.0)
        code = self.poll()
        assert code is not None
        return code


class Zygote:
    """The harness's side: one zygote per (interpreter, modules), started on first use, stopped at exit."""

    def __init__(self, python: str, modules: Sequence[str], env: Mapping[str, str], ready_timeout: float) -> None:
        import subprocess
        import tempfile

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.dir = tempfile.mkdtemp(prefix="lastcall-zygote-")
        self.log = os.path.join(self.dir, "zygote.log")
        zenv = {**env, "TMPDIR": self.dir, "PYTHONUNBUFFERED": "1"}
        with open(self.log, "w") as log:
            argv = [python, "-m", "harness.launch.zygote", str(theirs.fileno()), ",".join(modules)]
            self.proc = subprocess.Popen(argv, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=log, env=zenv, cwd=self.dir, start_new_session=True)
        theirs.close()
        self.pid = self.proc.pid
        self.sock = ours
        self.alive = True
        self._cond = threading.Condition()
        self._spawned: dict[int, int] = {}  # request number -> pid
        self._req = 0
        self._status: dict[int, int] = {}
        self._ready: dict[str, Any] | None = None
        self._reader = threading.Thread(target=self._read, name="lastcall-zygote-reader", daemon=True)
        self._reader.start()
        with self._cond:
            self._cond.wait_for(lambda: self._ready is not None or not self.alive, ready_timeout)
            ready = self._ready
        if ready is None or ready.get("op") != "ready":
            why = ready.get("message") if ready else f"not ready in {ready_timeout:.0f} s" if self.alive else "it died"
            tail = self._tail()
            self.stop()
            from harness.errors import HarnessError

            raise HarnessError(f"the engine's preloading zygote did not start ({why}); its log: {tail}")

    @classmethod
    def shared(cls, python: str, modules: Sequence[str], env: Mapping[str, str], ready_timeout: float) -> Zygote:
        key = (python, tuple(modules))
        with _LOCK:
            z = _SHARED.get(key)
            if z is None or not z.alive:
                z = _SHARED[key] = cls(python, modules, env, ready_timeout)
                import atexit

                atexit.register(z.stop)
            return z

    def _tail(self) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-2000:] or "(empty)"
        except OSError:
            return "(no log)"

    def _read(self) -> None:
        while True:
            try:
                raw = self.sock.recv(MAX_PACKET)
            except OSError:
                raw = b""
            if not raw:
                break
            msg = json.loads(raw)
            with self._cond:
                op = msg.get("op")
                if op in ("ready", "error"):
                    self._ready = msg
                elif op == "spawned":
                    self._spawned[int(msg["req"])] = int(msg["pid"])
                elif op == "exited":
                    self._status[int(msg["pid"])] = int(msg["status"])
                self._cond.notify_all()
        with self._cond:
            self.alive = False
            self._cond.notify_all()

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: str, timeout: float) -> ZygoteProcess:
        """Fork a process that runs ``argv`` (argv[0] a Python script) in a new session, its stdout and stderr
        one pipe (the returned process's ``stdout``).

        Error handling: OSError when the zygote is gone or does not answer within ``timeout``."""
        r, w = os.pipe()
        try:
            with self._cond:
                self._req += 1
                req = self._req  # a late answer to an earlier request that gave up is never taken for this one
                msg = json.dumps({"op": "spawn", "req": req, "argv": list(argv), "env": dict(env), "cwd": cwd})
                socket.send_fds(self.sock, [msg.encode()], [w])
                if not self._cond.wait_for(lambda: req in self._spawned or not self.alive, timeout):
                    raise OSError(f"the zygote did not fork in {timeout:.0f} s; its log: {self._tail()}")
                if req not in self._spawned:
                    raise OSError(f"the zygote is gone; its log: {self._tail()}")
                pid = self._spawned.pop(req)
        except BaseException:
            os.close(r)
            raise
        finally:
            os.close(w)
        return ZygoteProcess(pid, os.fdopen(r, "rb"), self)

    def status_of(self, pid: int) -> int | None:
        with self._cond:
            return self._status.get(pid)

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        with self._cond:
            self._cond.wait_for(lambda: pid in self._status or not self.alive, timeout)
            return self._status.get(pid)

    def stop(self) -> None:
        """End the zygote (it kills whatever it started that is left) and remove its directory."""
        import shutil
        import subprocess

        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        try:
            self.proc.wait(10.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()
        self._reader.join(5.0)
        self.alive = False
        shutil.rmtree(self.dir, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
