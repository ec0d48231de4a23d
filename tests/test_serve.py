"""Tests of ``lastcall serve``: a real process, real signals, nothing left behind."""

from __future__ import annotations

import io
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from harness import failpoints
from harness.errors import ConfigError
from harness.reference import wire
from harness.reference.listener import ListenerConfig
from harness.reference.paths import OwnerRecord, owner_path
from harness.reference.serve import serve
from harness.reference.worker import WorkerSpec

SAFETY_S = 30.0  # safety net for a child that hangs; never reached when things work


@pytest.fixture
def root(lc_root: Path) -> str:
    """The plugin's short socket root (it fails the test if anything is left in it)."""
    return str(lc_root)


def start_serve(*args: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``python -m harness.cli serve ARGS`` and return it with its first stdout line."""
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "serve", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], SAFETY_S)
    if not ready:
        proc.kill()
    line = proc.stdout.readline()
    if not line:
        _, err = proc.communicate(timeout=SAFETY_S)
        pytest.fail(f"serve printed no path (rc={proc.returncode}): {err}")
    return proc, line.rstrip("\n")


def request(path: str, req: wire.Request) -> wire.Reply:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(SAFETY_S)
        s.connect(path)
        s.sendall(wire.encode_request(req))
        return wire.decode_reply(wire.recv_frame(s))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_until_signal_leaves_nothing(root: str, sig: signal.Signals) -> None:
    ipc = f"s{uuid.uuid4().hex[:8]}"
    proc, path = start_serve("--ipc", ipc, "--root", root, "--capacity", "64MiB", "--drain-timeout", "2s")
    try:
        assert path.startswith(root + "/") and path.endswith("/w0.sock")
        rec = OwnerRecord.read(owner_path(path))
        assert rec is not None and (rec.pid, rec.ipc, rec.kind) == (proc.pid, ipc, "socket")
        assert request(path, wire.Request(cmd="kv_tensors_created")).created is True
        reply = request(path, wire.Request(cmd="map_to_kv_tensors", offsets=[0], id="m1"))
        assert (reply.status, reply.newly_mapped_offsets, reply.id) == ("success", [0], "m1")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=SAFETY_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out == ""
    assert err == f"lastcall serve: {sig.name}: shutting down {path}\n"
    assert os.listdir(root) == []


def test_serve_bad_flag_exits_2() -> None:
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "serve", "--ipc", "x", "--capacity", "huge"],
                          capture_output=True, text=True, timeout=SAFETY_S)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("lastcall serve: error: argument --capacity: size 'huge' is not a size")
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_serve_path_too_long_exits_2(root: str) -> None:
    deep = os.path.join(root, "d" * 40)
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "serve", "--ipc", "x" * 64, "--root", deep],
                          capture_output=True, text=True, timeout=SAFETY_S)
    assert proc.returncode == 2
    assert proc.stderr.startswith("lastcall: error: socket path ") and "at most 107 bytes" in proc.stderr
    assert os.listdir(root) == []


class _Lines(io.StringIO):
    """A text sink that sets ``seen`` once a written line contains ``marker``."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker
        self.seen = threading.Event()

    def write(self, s: str) -> int:
        n = super().write(s)
        if self.marker in self.getvalue():
            self.seen.set()
        return n


def test_serve_retries_until_the_handler_drains(root: str) -> None:
    """In process: SIGTERM while a handler is parked; the drain times out, serve retries, then exits 0."""
    spec = WorkerSpec(f"r{uuid.uuid4().hex[:8]}", root=root, capacity=64 << 20,
                      config=ListenerConfig(drain_timeout=0.05))
    out, err = _Lines("\n"), _Lines("(attempt 1); retrying")
    fp = failpoints.arm("backend.map_to_kv_tensors", "pause", count=1)
    replies: list[wire.Reply] = []
    problems: list[BaseException] = []

    def drive() -> None:
        try:
            assert out.seen.wait(SAFETY_S)
            path = out.getvalue().strip()
            client = threading.Thread(target=lambda: replies.append(
                request(path, wire.Request(cmd="map_to_kv_tensors", offsets=[0]))))
            client.start()
            assert fp.wait_reached(timeout=SAFETY_S)
            os.kill(os.getpid(), signal.SIGTERM)
            assert err.seen.wait(SAFETY_S)
            fp.release()
            client.join(SAFETY_S)
        except BaseException as exc:
            problems.append(exc)
            fp.release()
            os.kill(os.getpid(), signal.SIGTERM)

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        rc = serve(spec, out=out, err=err)
    finally:
        driver.join(SAFETY_S)
        failpoints.reset()
    assert problems == []
    assert rc == 0
    assert [r.status for r in replies] == ["success"]  # the drained handler's reply still arrived
    assert "did not drain within 0.05s (attempt 1); retrying" in err.getvalue()
    assert os.listdir(root) == []


def test_serve_refuses_other_threads(root: str) -> None:
    caught: list[BaseException] = []
    t = threading.Thread(target=lambda: _capture(caught, lambda: serve(WorkerSpec("t", root=root))))
    t.start()
    t.join(SAFETY_S)
    assert len(caught) == 1 and isinstance(caught[0], ConfigError)
    assert "must run on the main thread" in str(caught[0])


def _capture(into: list[BaseException], fn: object) -> None:
    try:
        fn()  # type: ignore[operator]
    except BaseException as exc:
        into.append(exc)
