"""The stand-in engine's API server over HTTP (harness.engine.standin, which starts it and stops it): what it
answers, its admission decision, and its drain of the requests in flight at a stop.

``GET /health`` answers 200, 503 once shutdown began or the engine core died; ``POST /v1/completions`` answers
OpenAI's completion object, or with ``"stream": true`` server-sent events ending ``data: [DONE]``; a request
once shutdown began is refused with 503 ``shutting down`` (``late_generation``: admitted and generated).  At a
stop, :func:`_drain` gives the requests in flight up to ``--shutdown-timeout`` to finish, then aborts them
(``finish_reason: "abort"``) and closes a connection whose client stopped reading after a grace.

Only the standard library: the stand-in starts in well under a second.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from harness.engine.standin_flags import Options

__all__ = ["ABORT_GRACE_S"]

ABORT_GRACE_S = 2.0  # seconds aborted requests get to write their end before their connections are closed


class _State:
    def __init__(self, o: Options) -> None:
        self.o = o
        self.shutting_down = threading.Event()  # admission closed (health 503, new requests refused)
        self.abort = threading.Event()  # requests in flight end now
        self.engine_dead = threading.Event()
        self.never = threading.Event()  # hangs_stream: what a hung stream waits for
        self.lock = threading.Lock()
        self.in_flight: set[socket.socket] = set()  # the connections of the requests in flight
        self.idle = threading.Condition(self.lock)

    def drained(self, timeout: float | None) -> bool:
        """Wait until no request is in flight (``timeout`` None: however long); True if none is."""
        end = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while self.in_flight:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.idle.wait(left)
            return True


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
        with st.lock:  # the admission decision and the count of requests in flight, under one lock
            late = st.shutting_down.is_set() and st.o.variant == "late_generation"  # admitted anyway
            refused = (st.shutting_down.is_set() and not late) or st.engine_dead.is_set()
            if not refused:
                st.in_flight.add(self.connection)
        if refused:
            self._answer(503, {"error": "shutting down"})
            return
        try:
            self._complete(body, late)
        except OSError:  # the client went away (a disconnect), or the stop closed a stalled connection
            self.close_connection = True
        finally:
            with st.lock:
                st.in_flight.discard(self.connection)
                st.idle.notify_all()

    def _complete(self, body: dict[str, Any], late: bool) -> None:
        st = self.server.st
        n = int(body.get("max_tokens", 16))
        rid = f"cmpl-standin-{threading.get_ident()}"
        stop = st.never if late else st.abort  # late_generation: a late request runs to its end
        if not body.get("stream"):
            if stop.wait(st.o.interval * n):  # the time n tokens take; an abort ends them
                self._hang_if_planted()
                self._answer(200, {"id": rid, "object": "text_completion", "model": "standin",
                                   "choices": [{"index": 0, "text": "", "finish_reason": "abort"}],
                                   "usage": {"completion_tokens": 0}})
                return
            self._answer(200, {"id": rid, "object": "text_completion", "model": "standin",
                               "choices": [{"index": 0, "text": " tok" * n, "finish_reason": "length"}],
                               "usage": {"completion_tokens": n}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        reason = "length"
        for i in range(n):
            if stop.wait(st.o.interval if i else 0):
                reason = "abort"
                self._hang_if_planted()
                break
            self._event({"id": rid, "choices": [{"index": 0, "text": " tok", "finish_reason": None}]})
        self._event({"id": rid, "choices": [{"index": 0, "text": "", "finish_reason": reason}]})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _hang_if_planted(self) -> None:
        if self.server.st.o.variant == "hangs_stream":  # never ends, never errors
            self.server.st.never.wait()

    def _event(self, obj: dict[str, Any]) -> None:
        data = b"data: " + json.dumps(obj).encode() + b"\n\n"
        try:
            sent = self.connection.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            sent = 0
        if sent < len(data):  # its socket's buffers are full: the rest waits for the client to read
            if not getattr(self, "said_blocked", False):
                self.said_blocked = True
                print(f"INFO:     {obj['id']}: the client is not reading; the stream waits", flush=True)
            self.connection.sendall(data[sent:])


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, st: _State) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.st = st


def _drain(st: _State) -> None:
    """Shutdown's handling of the requests in flight: up to --shutdown-timeout to finish, then abort; a
    connection that still has not ended after the abort's grace (its client stopped reading) is closed."""
    o = st.o
    if o.shutdown_timeout > 0 and not st.engine_dead.is_set() and o.variant != "aborts_within_drain":
        st.drained(o.shutdown_timeout)
    st.abort.set()
    if o.variant == "hangs_stream":
        st.drained(None)  # waits for a stream that never ends
        return
    if not st.drained(ABORT_GRACE_S):
        with st.lock:
            stalled = list(st.in_flight)
        print(f"INFO:     closing {len(stalled)} connection(s) that did not end {ABORT_GRACE_S:g}s after the "
              "abort (their clients stopped reading)", flush=True)
        for conn in stalled:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        st.drained(ABORT_GRACE_S)
