"""The reference listener out of descriptors: a failed accept pauses accepting instead of spinning.

accept() failing with EMFILE leaves the connection pending in the backlog, so a level-triggered epoll reports
the server socket again at once; the reference takes it out of the epoll set's events for a backoff (5 ms
doubling to 100 ms), records the first failure of a streak only, and serves the pending connection once
accept works again.  Whether it spins is a cost over time: scenarios/accept-failure-keeps-serving.yaml judges
it on a real worker whose descriptor limit is lowered (idle_cost over a measure_idle window, quiet on the
reference, firing on spins_on_accept_failure).  Here, deterministically, in one process: what is recorded,
the backoff, the resume and a stop while paused.  The failing accepts come from a stand-in for the server
socket's raw accept (a real process out of descriptors would take every other test's descriptors too); the
serving thread is held inside its N-th accept, so every figure is read while it stands still.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from harness.history import Recorder
from harness.reference import wire
from harness.reference.backend import NoopBackend
from harness.reference.listener import WorkerListener
from harness.reference.listener_variants import SpinsOnAcceptFailure
from harness.reference.paths import socket_path

pytestmark = pytest.mark.usefixtures("no_thread_leak")

SAFETY = 10.0  # seconds: a safety net on every wait, never a timer


class _OutOfDescriptors:
    """The listener's server socket, whose raw accept fails with EMFILE while ``failing`` is set; its
    ``hold``-th call waits until the test lets it go (the serving thread stands still there)."""

    def __init__(self, server: socket.socket, hold: int) -> None:
        self.server, self.hold = server, hold
        self.failing = True
        self.calls = 0
        self.held, self.go = threading.Event(), threading.Event()

    def _accept(self) -> tuple[int, Any]:
        self.calls += 1
        if self.calls == self.hold:
            self.held.set()
            assert self.go.wait(SAFETY)
        if self.failing:
            raise OSError(errno.EMFILE, "Too many open files")
        return self.server._accept()  # type: ignore[attr-defined,no-any-return]

    def fileno(self) -> int:
        return self.server.fileno()

    def close(self) -> None:
        self.server.close()


def _serving(cls: type[WorkerListener], tmp_path: Path,
             hold: int) -> tuple[WorkerListener, Recorder, _OutOfDescriptors]:
    rec = Recorder()
    lst = cls(socket_path("ab", 0, root=tmp_path), NoopBackend(), recorder=rec)
    lst.start()
    assert lst._server is not None
    stand_in = _OutOfDescriptors(lst._server, hold)
    lst._server = stand_in  # type: ignore[assignment]  # read by the serving thread at each accept
    return lst, rec, stand_in


def _client(lst: WorkerListener) -> socket.socket:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(SAFETY)
    c.connect(str(lst.path))
    c.sendall(wire.encode_request(wire.Request(cmd="kv_tensors_created")))
    return c


def _failures(rec: Recorder) -> int:
    return sum(e.kind == "accept_failed" for e in rec.events())


def test_a_streak_of_failed_accepts_is_recorded_once_and_backs_off_doubling_to_its_cap(tmp_path: Path) -> None:
    hold = 8  # the 8th accept: seven have failed, 5 ms doubling six times is past the 100 ms cap
    lst, rec, stand_in = _serving(WorkerListener, tmp_path, hold)
    c = _client(lst)
    try:
        assert stand_in.held.wait(SAFETY)
        assert _failures(rec) == 1
        delays = [min(lst.ACCEPT_RETRY_MAX_S, lst.ACCEPT_RETRY_MIN_S * 2 ** k) for k in range(hold - 1)]
        assert lst._accept_delay == delays[-1] == lst.ACCEPT_RETRY_MAX_S, (lst._accept_delay, delays)
        stand_in.failing = False  # descriptors are back: the pending connection is accepted and served
        stand_in.go.set()
        reply = wire.recv_frame(c)
        assert wire.decode_reply(reply).status == "success"
        assert rec.wait_for("accepted", SAFETY) is not None
        assert lst._poll_timeout() == -1 and lst._accept_delay == 0  # the streak is over
        assert _failures(rec) == 1
    finally:
        stand_in.go.set()
        c.close()
        assert lst.stop()


def test_a_later_streak_is_recorded_again(tmp_path: Path) -> None:
    lst, rec, stand_in = _serving(WorkerListener, tmp_path, hold=3)
    first = _client(lst)
    try:
        assert stand_in.held.wait(SAFETY)
        stand_in.failing = False
        stand_in.go.set()
        assert wire.decode_reply(wire.recv_frame(first)).status == "success"
        stand_in.failing = True  # out of descriptors again: a new streak
        mark = len(rec.events())
        second = _client(lst)
        try:
            assert rec.wait_for("accept_failed", SAFETY, after=mark) is not None
            assert _failures(rec) == 2
            stand_in.failing = False
            assert wire.decode_reply(wire.recv_frame(second)).status == "success"
        finally:
            second.close()
    finally:
        stand_in.go.set()
        first.close()
        assert lst.stop()


def test_a_stop_while_accepting_is_paused_returns_true_and_the_pending_client_is_refused(tmp_path: Path) -> None:
    lst, rec, _ = _serving(WorkerListener, tmp_path, hold=0)  # never held: it backs off in epoll
    c = _client(lst)
    try:
        assert rec.wait_for("accept_failed", SAFETY) is not None
        assert lst.stop(timeout=SAFETY)  # the self-pipe wakes it whatever its epoll timeout
        assert not lst.path.exists()
        with contextlib.suppress(ConnectionResetError):  # the kernel reports either for a never-accepted one
            assert c.recv(1) == b""  # never accepted: the backlog went with the server socket
    finally:
        c.close()


def test_the_planted_bug_never_pauses(tmp_path: Path) -> None:
    """spins_on_accept_failure: seven failed accepts, the eighth attempted at once, with no backoff between
    (the reference's is at its 100 ms cap by then); it records the first failure only."""
    hold = 8
    lst, rec, stand_in = _serving(SpinsOnAcceptFailure, tmp_path, hold)
    c = _client(lst)
    try:
        assert stand_in.held.wait(SAFETY)
        assert _failures(rec) == 1 and lst._accept_delay == 0 and lst._accept_retry_at is None
        stand_in.failing = False
        stand_in.go.set()
        assert wire.decode_reply(wire.recv_frame(c)).status == "success"
    finally:
        stand_in.go.set()
        c.close()
        assert lst.stop()


@pytest.mark.parametrize("server_state", ["closed", "not_in_the_epoll_set"])
def test_a_failed_accept_never_raises_when_there_is_nothing_left_to_pause(tmp_path: Path, server_state: str) -> None:
    """A server socket closed under the serving thread (the planted teardown_while_alive does it): the thread
    once died here of ``epoll.modify(-1)`` where it had recorded the failure and served on (the contract's full
    matrix saw the thread's exception).  Recorded, not paused, nothing raised."""
    import select

    rec = Recorder()
    lst = WorkerListener(socket_path("ab", 0, root=tmp_path), NoopBackend(), recorder=rec)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ep = select.epoll()
    try:
        if server_state == "closed":
            server.close()
        lst._server, lst._ep = server, ep
        lst._accept_failed(OSError(errno.EMFILE, "Too many open files"))
        assert _failures(rec) == 1 and lst._accept_retry_at is None and lst._accept_delay == 0
    finally:
        server.close()
        ep.close()


def test_an_error_that_leaves_nothing_pending_is_recorded_each_time_and_pauses_nothing(tmp_path: Path) -> None:
    """Only running out of descriptors or memory pauses accepting (asyncio's list: EMFILE, ENFILE, ENOBUFS,
    ENOMEM); any other failed accept (an aborted connection, taken off the backlog by the failure) is recorded
    and the thread goes on at once."""
    rec = Recorder()
    lst = WorkerListener(socket_path("ab", 0, root=tmp_path), NoopBackend(), recorder=rec)
    lst._accept_failed(OSError(errno.ECONNABORTED, "Software caused connection abort"))
    lst._accept_failed(OSError(errno.ECONNABORTED, "Software caused connection abort"))
    assert _failures(rec) == 2 and lst._accept_retry_at is None and lst._accept_delay == 0
    assert lst._poll_timeout() == -1
