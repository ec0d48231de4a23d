"""The stand-in engine's HTTP side in process (harness.engine.standin_http): a connection whose client went away
mid-request is closed, so nothing the client had queued on it is served (pipelined requests of a gone client
would otherwise be generated for nobody, and hold a drain of the requests in flight)."""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from harness.engine.standin_flags import Options
from harness.engine.standin_http import _Handler, _Server, _State


def _post(max_tokens: int) -> bytes:
    body = json.dumps({"model": "standin", "prompt": "hello", "max_tokens": max_tokens}).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[_Server, list[int], threading.Event]]:
    """A stand-in HTTP server on a free port; the max_tokens of each request it generated for, and an event
    set once it closed a connection."""
    generated: list[int] = []
    closed = threading.Event()
    complete = _Handler._complete

    def counted(self: _Handler, body: dict[str, Any], late: bool) -> None:
        generated.append(int(body["max_tokens"]))
        complete(self, body, late)

    monkeypatch.setattr(_Handler, "_complete", counted)
    httpd = _Server(0, _State(Options(interval=0.001)))
    shutdown_request = httpd.shutdown_request

    def closing(request: Any) -> None:
        shutdown_request(request)
        closed.set()

    httpd.shutdown_request = closing  # type: ignore[method-assign]
    serving = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    serving.start()
    try:
        yield httpd, generated, closed
    finally:
        httpd.shutdown()
        httpd.server_close()
        serving.join(5)


def test_a_request_queued_behind_one_whose_client_went_away_is_never_generated(
        server: tuple[_Server, list[int], threading.Event]) -> None:
    httpd, generated, closed = server
    client = socket.create_connection(("127.0.0.1", httpd.server_address[1]))
    client.sendall(_post(1) + _post(5))  # pipelined: the second waits behind the first on the connection
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()  # a reset: the first reply's write fails
    assert closed.wait(10), "the server never closed the connection"
    assert generated == [1], f"generated for a client that had gone away: {generated}"
