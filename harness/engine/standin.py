"""A well-behaved stand-in for ``vllm serve``: the engine scenarios' negative control, and its planted bugs.

``python -m harness.engine.standin serve --port P [--variant V]`` starts a tree shaped like vLLM's:

* the **API server** (this process, the session leader) answers ``GET /health`` (200; 503 once shutdown
  began) and ``POST /v1/completions`` (OpenAI's completion object, or with ``"stream": true`` server-sent
  events ending ``data: [DONE]``; a request once shutdown began is refused with 503 ``shutting down``);
* it forks the **engine core** (renamed ``VLLM::EngineCore``, truncated by the kernel as vLLM's is), which
  binds a Unix socket under ``VLLM_RPC_BASE_PATH`` (else TMPDIR), writes a state file in TMPDIR and forks
  the **worker** (``VLLM::Worker``);
* once the tree is whole and the port bound it prints vLLM's ready line ``Application startup complete``.

Stopping, correctly: SIGTERM or SIGINT to the API server refuses new requests, ends streams in flight with
``finish_reason: "abort"``, then stops its engine core (closing its control pipe), which stops its worker
(closing the worker's pipe), waits for it, removes its socket and file and exits 0; the API server exits 0
once its engine core is reaped: children first, nothing left.  A signal to the engine core or the worker
stops that part the same way, and the API server, finding its engine core gone unasked, exits 1.  SIGKILL of
the API server: the engine core sees its control pipe close and stops as above (a parent-death watch, as
vLLM's engine core has).  Everything waits on file descriptors (a signal wake-up pipe, pipes, pidfds): no
polling, no sleeps.  Only the standard library: it starts in well under a second.

The planted-bug variants (``--variant``), each one defect of the kinds the engine checkers judge:
``ignores_sigterm`` (the API server ignores SIGTERM), ``leaves_socket_file`` (the engine core does not
remove its socket file), ``keeps_child`` (the worker outlives its engine core: it ignores its parent's
exit, and holds the API server's listening socket, inherited: a restart cannot bind),
``exits_zero_after_engine_died`` (the API server exits 0 although its engine core died).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["VARIANTS", "READY_LINE", "main"]

VARIANTS = ("standin", "ignores_sigterm", "leaves_socket_file", "keeps_child", "exits_zero_after_engine_died")
READY_LINE = "INFO:     Application startup complete."
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _rename(name: str) -> None:
    """PR_SET_NAME, as vLLM renames its processes (the kernel keeps 15 bytes)."""
    ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)


def _signal_pipe(sigs: tuple[int, ...]) -> int:
    """A pipe the given signals wake (a handler that does nothing, and the wake-up fd); its read end."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w)
    for s in sigs:
        signal.signal(s, lambda *_: None)
    return r


def _read_signals(fd: int) -> list[int]:
    return list(os.read(fd, 64))


# --------------------------------------------------------------------- the worker
def _fork_child(child: Callable[[int, int, str], int], variant: str) -> tuple[int, int, int]:
    """Fork ``child(ctl_r, ready_w, variant)``; in the parent (pid, ctl_w, ready_r): closing ctl_w stops the
    child, ready_r gets a byte once it is ready (EOF if it died first)."""
    ctl_r, ctl_w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ctl_w)
        os.close(ready_r)
        os._exit(child(ctl_r, ready_w, variant))
    os.close(ctl_r)
    os.close(ready_w)
    return pid, ctl_w, ready_r


def _worker(parent_r: int, ready_w: int, variant: str) -> int:
    _rename("VLLM::Worker")
    sig_r = _signal_pipe(STOP_SIGNALS)
    os.write(ready_w, b"w")
    os.close(ready_w)
    watch = [sig_r] if variant == "keeps_child" else [sig_r, parent_r]  # keeps_child: blind to its parent
    select.select(watch, [], [])
    return 0


# ---------------------------------------------------------------- the engine core
def _engine_core(ctl_r: int, ready_w: int, variant: str) -> int:
    _rename("VLLM::EngineCore")
    sig_r = _signal_pipe(STOP_SIGNALS)
    base = os.environ.get("VLLM_RPC_BASE_PATH") or tempfile.gettempdir()
    sock_path = os.path.join(base, f"standin-engine-{os.getpid()}.sock")
    state_path = os.path.join(tempfile.gettempdir(), f"standin-engine-{os.getpid()}.state")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(sock_path)
    sock.listen()
    with open(state_path, "w") as f:
        f.write(f"{os.getpid()}\n")
    # the worker's parent pipe: closed (by exit or on purpose) stops the worker
    pid, wr_w, wready_r = _fork_child(_worker, variant)
    os.read(wready_r, 1)
    os.write(ready_w, b"e")
    os.close(ready_w)
    worker_fd = os.pidfd_open(pid)
    readable, _, _ = select.select([sig_r, ctl_r, worker_fd], [], [])
    worker_died = worker_fd in readable
    os.close(wr_w)  # stop the worker (keeps_child: it does not listen)
    if variant != "keeps_child":
        os.waitpid(pid, 0)
    sock.close()
    if variant != "leaves_socket_file":
        os.unlink(sock_path)
    os.unlink(state_path)
    return 1 if worker_died else 0


# ------------------------------------------------------------------ the API server
class _State:
    def __init__(self, interval: float) -> None:
        self.shutting_down = threading.Event()
        self.engine_dead = threading.Event()
        self.interval = interval
        self.lock = threading.Lock()
        self.in_flight = 0
        self.idle = threading.Condition(self.lock)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _answer(self, code: int, body: dict[str, Any] | None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        st = self.server.st
        if self.path != "/health":
            self._answer(404, {"error": "not found"})
        elif st.shutting_down.is_set() or st.engine_dead.is_set():
            self._answer(503, {"error": "shutting down"})
        else:
            self._answer(200, None)

    def do_POST(self) -> None:
        st = self.server.st
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path != "/v1/completions":
            self._answer(404, {"error": "not found"})
            return
        with st.lock:
            refused = st.shutting_down.is_set() or st.engine_dead.is_set()
            if not refused:
                st.in_flight += 1
        if refused:
            self._answer(503, {"error": "shutting down"})
            return
        try:
            self._complete(body)
        finally:
            with st.lock:
                st.in_flight -= 1
                st.idle.notify_all()

    def _complete(self, body: dict[str, Any]) -> None:
        st = self.server.st
        n = int(body.get("max_tokens", 16))
        rid = f"cmpl-standin-{threading.get_ident()}"
        if not body.get("stream"):
            if st.shutting_down.wait(st.interval * n):  # the time n tokens take; a stop aborts them
                self._answer(503, {"error": "aborted: shutting down"})
                return
            self._answer(200, {"id": rid, "object": "text_completion", "model": "standin",
                               "choices": [{"index": 0, "text": " tok" * n, "finish_reason": "length"}],
                               "usage": {"completion_tokens": n}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        reason = "length"
        for i in range(n):
            if st.shutting_down.wait(st.interval if i else 0):
                reason = "abort"
                break
            self._event({"id": rid, "choices": [{"index": 0, "text": " tok", "finish_reason": None}]})
        self._event({"id": rid, "choices": [{"index": 0, "text": "", "finish_reason": reason}]})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _event(self, obj: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, st: _State) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.st = st


def serve(port: int, variant: str, interval: float, drain: float) -> int:
    sigs = (signal.SIGINT,) if variant == "ignores_sigterm" else STOP_SIGNALS
    if variant == "ignores_sigterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    st = _State(interval)
    # keeps_child binds its port before it forks: the tree inherits the listening socket (the orphan keeps it)
    httpd = _Server(port, st) if variant == "keeps_child" else None
    pid, ctl_w, ready_r = _fork_child(_engine_core, variant)
    sig_r = _signal_pipe(sigs)
    core_fd = os.pidfd_open(pid)
    if not os.read(ready_r, 1):
        print("ERROR: the engine core died during start", flush=True)
        return 1
    httpd = httpd or _Server(port, st)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), name="standin-http", daemon=True).start()
    print(f"INFO:     Started server process [{os.getpid()}]", flush=True)
    print(READY_LINE, flush=True)
    readable, _, _ = select.select([sig_r, core_fd], [], [])
    died = core_fd in readable
    if died:
        st.engine_dead.set()
        print("ERROR: the engine core died unexpectedly", flush=True)
    st.shutting_down.set()
    with st.lock:  # let the requests in flight end (each stops at once: shutting_down aborts it)
        end = time.monotonic() + drain
        while st.in_flight and (left := end - time.monotonic()) > 0:
            st.idle.wait(left)
    httpd.shutdown()
    httpd.server_close()
    os.close(ctl_w)  # stop the engine core; it stops its worker first
    _, status = os.waitpid(pid, 0)
    print(f"INFO:     Shutting down: engine core exited with {os.waitstatus_to_exitcode(status)}", flush=True)
    if died and variant != "exits_zero_after_engine_died":
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.engine.standin")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sv = sub.add_parser("serve", help="serve like `vllm serve` (a model argument, if given, is ignored)")
    sv.add_argument("model", nargs="?", default="standin")
    sv.add_argument("--port", type=int, required=True)
    sv.add_argument("--variant", choices=VARIANTS, default="standin")
    sv.add_argument("--token-interval", type=float, default=0.01, help="seconds per generated token")
    sv.add_argument("--drain", type=float, default=5.0, help="seconds in-flight requests get at shutdown")
    a, _ = ap.parse_known_args(argv)  # vLLM's other options (--dtype, ...) are accepted and ignored
    try:
        return serve(a.port, a.variant, a.token_interval, a.drain)
    except OSError as exc:
        print(f"ERROR: {exc}", flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
