"""Tests of the engine-side client against real in-process reference workers."""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from harness.errors import (
    ClientError,
    ConfigError,
    HarnessError,
    OperationFailed,
    RankError,
    StateConsistencyError,
    TargetError,
)
from harness.history import Recorder
from harness.reference import wire
from harness.reference.backend import AllocatorBackend
from harness.reference.client import (
    DEFAULT_TIMEOUT,
    TIMEOUT_ENV,
    Client,
    Connection,
    RequestNotSent,
    Target,
    request,
    resolve_timeout,
    targets_for,
)
from harness.reference.listener import ListenerConfig
from harness.reference.paths import socket_path
from harness.reference.registry import Registry
from harness.reference.serving import Backend
from harness.reference.worker import ReferenceWorker, WorkerSpec
from harness.timeouts import scaled

MiB = 1 << 20
PAGE = 2 * MiB
IPC = "cl"
KV = wire.Request(cmd="kv_tensors_created")


@dataclass
class Cluster:
    workers: list[ReferenceWorker]
    targets: list[Target]
    recs: dict[str, Recorder]  # each rank's listener history, by label
    registry: Registry

    def mapped(self) -> dict[str, frozenset[int]]:
        return {t.label: w.allocator.mapped_offsets(0) for t, w in zip(self.targets, self.workers, strict=True)}

    def pending(self) -> list[str | None]:
        return [w.allocator.pending_transaction() for w in self.workers]

    def accepted(self, label: str) -> int:
        return len(self.recs[label].events("accepted"))


Make = Callable[..., Cluster]


@pytest.fixture
def cluster(lc_root: Path, lastcall_failpoints: ModuleType) -> Iterator[Make]:
    """``cluster(tp, pp, backend=None)`` starts tp x pp reference workers in a private registry.

    ``backend(worker)`` may return a Backend to use instead of the allocator's.  Teardown releases
    every failpoint, stops every listener and tears every allocator down.
    """
    registry = Registry()
    started: list[ReferenceWorker] = []

    def make(tp: int = 1, pp: int = 1, backend: Callable[[ReferenceWorker], Backend | None] | None = None) -> Cluster:
        workers, recs = [], {}
        for p in range(pp):
            for r in range(tp):
                rec = Recorder(role="worker", rank=f"pp{p}/rank{r}")
                spec = WorkerSpec(IPC, rank=r, pp=p, root=str(lc_root), config=ListenerConfig(drain_timeout=2.0),
                                  capacity=64 * MiB)
                w = ReferenceWorker(spec, registry=registry, recorder=rec)
                custom = backend(w) if backend is not None else None
                if custom is not None:
                    w.backend = custom
                started.append(w)
                w.start()
                workers.append(w)
                recs[rec.rank] = rec
        return Cluster(workers, targets_for(IPC, tp, pp, root=str(lc_root)), recs, registry)

    try:
        yield make
    finally:
        lastcall_failpoints.reset()
        stopped = registry.stop_all()
        for w in started:
            w.allocator.teardown()
        assert stopped, "a listener did not stop at teardown"


class FailingCommits(AllocatorBackend):
    """The allocator's backend, except that the next ``fails`` commits fail."""

    def __init__(self, worker: ReferenceWorker, fails: int) -> None:
        super().__init__(worker.allocator)
        self.fails = fails

    def handle(self, req: wire.Request) -> wire.Reply:
        if req.cmd == "commit_unmap_from_kv_tensors" and self.fails > 0:
            self.fails -= 1
            raise OperationFailed("commit failed on purpose", phase="commit")
        return super().handle(req)


# ------------------------------------------------------------------ targets, config
def test_targets_for_paths_and_labels(lc_root: Path) -> None:
    ts = targets_for("eng", tp=2, pp=2, root=str(lc_root))
    assert [t.label for t in ts] == ["pp0/rank0", "pp0/rank1", "pp1/rank0", "pp1/rank1"]
    assert [t.path for t in ts] == [os.fspath(socket_path("eng", t.rank, t.pp, str(lc_root))) for t in ts]
    assert ts[0].path.endswith("/w0.sock") and "/pp1/w1.sock" in ts[3].path
    assert Target("/x", rank=3, pp=1).label == "pp1/rank3"
    for bad, name in (({"tp": 0}, "tp"), ({"tp": 1, "pp": 0}, "pp"), ({"tp": True}, "tp")):
        with pytest.raises(ConfigError, match=f"^{name}="):
            targets_for("eng", **bad)


def test_timeout_resolution_and_bad_arguments(monkeypatch: pytest.MonkeyPatch, lc_root: Path) -> None:
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert resolve_timeout() == DEFAULT_TIMEOUT == 60.0
    monkeypatch.setenv(TIMEOUT_ENV, "0.5")
    assert resolve_timeout() == 0.5 and resolve_timeout(2) == 2.0
    monkeypatch.setenv(TIMEOUT_ENV, "soon")
    with pytest.raises(ConfigError, match=f"{TIMEOUT_ENV}='soon'"):
        resolve_timeout()
    for bad in (0, -1.0, math.nan, math.inf, True, "1"):
        with pytest.raises(ConfigError, match=r"timeout=.*positive number of seconds"):
            resolve_timeout(bad)  # type: ignore[arg-type]
    t = Target(str(lc_root / "w0.sock"), 0)
    with pytest.raises(ConfigError, match="timeout=0"):
        Connection(t, timeout=0)
    with pytest.raises(ConfigError, match="targets=\\[\\]"):
        Client([])
    with pytest.raises(ConfigError, match="pp0/rank0 more than once"):
        Client([t, t])


# ------------------------------------------------------------------ one rank
def test_fresh_and_kept_alive_requests(cluster: Make) -> None:
    c = cluster()
    t = c.targets[0]
    rep = request(t, KV)
    assert rep.status == "success" and rep.created is True and rep.id
    assert request(t, wire.Request(cmd="kv_tensors_created", id="mine")).id == "mine"
    assert c.accepted(t.label) == 2  # a fresh connection per request
    with Connection(t) as conn:
        assert conn.request(KV).created is True
        assert conn.request(wire.Request(cmd="map_to_kv_tensors", offsets=[0, PAGE])).newly_mapped_offsets == [0, PAGE]
        assert conn.request(wire.Request(cmd="map_to_kv_tensors", offsets=[0])).newly_mapped_offsets == []
        bad = conn.request(wire.Request(cmd="map_to_kv_tensors", offsets=[1]))  # an error reply is returned
        assert bad.status == "error" and bad.error_type == "bad_request"
        assert conn.request(KV).status == "success"
    assert c.accepted(t.label) == 3  # the kept-alive connection was accepted once
    with pytest.raises(RequestNotSent, match=r"pp0/rank0: connection .* is closed"):
        conn.request(KV)


def test_stale_kept_alive_connection_is_replaced(cluster: Make) -> None:
    first = cluster()
    with Connection(first.targets[0]) as conn:
        assert conn.request(KV).status == "success"
        assert first.registry.stop_all()  # the listener closes our idle connection
        second = cluster()  # a new listener on the same path
        assert conn.request(KV).created is True
        assert second.accepted("pp0/rank0") == 1


def test_timeout_names_the_rank(cluster: Make, lastcall_failpoints: ModuleType) -> None:
    c = cluster(tp=1, pp=2)
    t = c.targets[1]
    fp = lastcall_failpoints.arm("backend.kv_tensors_created", "pause", count=1)
    try:
        with Connection(t, timeout=0.3) as conn:
            with pytest.raises(ClientError, match=r"^pp1/rank0: no reply to kv_tensors_created within 0.3s") as ei:
                conn.request(KV)
            assert ei.value.rank == "pp1/rank0" and t.path in str(ei.value)
            assert not isinstance(ei.value, RequestNotSent)
            assert fp.wait_reached()
            fp.release()
            assert conn.request(KV).created is True  # a fresh socket after the failed exchange
    finally:
        fp.release()


def test_missing_path_and_refused(lc_root: Path) -> None:
    gone = Target(str(lc_root / "gone.sock"), rank=3, pp=1)
    with pytest.raises(RequestNotSent, match=r"^pp1/rank3: no socket at") as ei:
        request(gone, KV)
    assert ei.value.rank == "pp1/rank3" and gone.path in str(ei.value)
    with Client([gone]) as cl, pytest.raises(RankError) as re_:
        cl.map([0])  # never sent: a plain RankError, not StateConsistencyError
    assert list(re_.value.failures) == ["pp1/rank3"] and not isinstance(re_.value, StateConsistencyError)
    path = lc_root / "dead.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        dead.bind(os.fspath(path))  # bound, never listening: connect is refused
        with pytest.raises(RequestNotSent, match=r"^pp0/rank0: connection refused at .*dead.sock"):
            request(Target(os.fspath(path), 0), KV)
    finally:
        dead.close()
        path.unlink()


@contextlib.contextmanager
def fake_listener(path: Path, answer: bytes | None) -> Iterator[None]:
    """Serve one connection: read one request, send ``answer`` (raw bytes) or nothing, close."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(os.fspath(path))
    srv.listen(1)

    def run() -> None:
        with contextlib.suppress(OSError, HarnessError, TargetError):
            conn, _ = srv.accept()
            with conn:
                wire.recv_frame(conn)
                if answer is not None:
                    conn.sendall(answer)

    th = threading.Thread(target=run, name="fake-listener", daemon=True)
    th.start()
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            srv.shutdown(socket.SHUT_RDWR)
        th.join(scaled())
        srv.close()
        path.unlink()


@pytest.mark.parametrize(("answer", "match", "error_type"), [
    (wire.encode_reply(wire.Reply(status="success", id="not-yours")), "does not match request id", None),
    (wire.frame(b"\xc1"), "bad reply to kv_tensors_created", None),
    (b"\xff\xff\xff\xff", "bad reply to kv_tensors_created", None),
    (wire.encode_reply(wire.Reply(status="error", error_type="bad_request", message="too big")),
     "refused before dispatch: too big", "bad_request"),
    (None, "connection to .* lost during kv_tensors_created", None),
], ids=["wrong-id", "garbage-body", "bad-length", "error-without-id", "closed-without-reply"])
def test_bad_replies_are_client_errors(lc_root: Path, answer: bytes | None, match: str,
                                       error_type: str | None) -> None:
    path = lc_root / "w2.sock"
    with fake_listener(path, answer), pytest.raises(ClientError, match=f"^pp0/rank2: .*{match}") as ei:
        request(Target(os.fspath(path), 2), KV, timeout=scaled())
    assert ei.value.error_type == error_type and not isinstance(ei.value, RequestNotSent)


# ------------------------------------------------------------------ every rank
def test_broadcast_tp2_pp2(no_thread_leak: None, cluster: Make) -> None:
    c = cluster(tp=2, pp=2)
    labels = [t.label for t in c.targets]
    for keep_alive in (False, True):
        with Client(c.targets, keep_alive=keep_alive) as cl:
            replies = cl.broadcast(KV)
            assert list(replies) == labels and all(r.created for r in replies.values())
            assert cl.kv_tensors_created() is True
            assert cl.kv_tensors_created(group_id=7) is False
            with pytest.raises(RankError, match="failed on 4 of 4 ranks") as ei:
                cl.broadcast(wire.Request(cmd="map_to_kv_tensors", offsets=[1]))
            assert list(ei.value.failures) == labels
            for label, err in ei.value.failures.items():
                assert err.rank == label and err.error_type == "bad_request" and str(err).startswith(label)
    assert all(c.accepted(lb) == 4 + 1 for lb in labels)  # 4 fresh connections, then one kept alive
    with pytest.raises(ClientError, match="closed"):
        cl.broadcast(KV)


def test_map_returns_newly_mapped(cluster: Make) -> None:
    c = cluster(tp=2)
    with Client(c.targets, keep_alive=True) as cl:
        assert cl.map([0, PAGE]) == [0, PAGE]
        assert cl.map([0, PAGE]) == []
        assert cl.map([PAGE, 2 * PAGE]) == [2 * PAGE]
    assert set(c.mapped().values()) == {frozenset({0, PAGE, 2 * PAGE})}


@pytest.mark.parametrize("before", [[], [0]])
def test_map_rolls_back_when_one_rank_fails(cluster: Make, lastcall_failpoints: ModuleType, before: list[int]) -> None:
    c = cluster(tp=2, pp=2)
    with Client(c.targets) as cl:
        if before:
            cl.map(before)
        fp = lastcall_failpoints.arm("backend.map_to_kv_tensors", "raise", count=1)
        with pytest.raises(RankError, match="failed on 1 of 4 ranks") as ei:
            cl.map([0, PAGE, 2 * PAGE])
    assert fp.hits == 1 and not isinstance(ei.value, StateConsistencyError)
    [(label, err)] = ei.value.failures.items()
    assert err.rank == label and err.error_type == "operation_failed" and "injected fault" in str(err)
    assert set(c.mapped().values()) == {frozenset(before)}  # each rank undid only what it newly mapped


def test_map_without_reply_is_state_consistency(cluster: Make, lastcall_failpoints: ModuleType) -> None:
    c = cluster(tp=2)
    fp = lastcall_failpoints.arm("backend.map_to_kv_tensors", "pause", count=1)
    try:
        with Client(c.targets, timeout=0.3) as cl, pytest.raises(StateConsistencyError) as ei:
            cl.map([0])
        assert fp.wait_reached()
    finally:
        fp.release()
    with Client(c.targets) as cl:
        assert cl.kv_tensors_created()  # served after the parked map: that map has finished now
    parked = [lb for lb, pages in c.mapped().items() if pages]
    assert parked == [ei.value.rank], "the error names the rank whose map outcome was unknown"
    assert isinstance(ei.value.__cause__, RankError) and "may have applied" in str(ei.value)


# ------------------------------------------------------------------ unmap
def test_unmap_single_target_and_two_phase(cluster: Make) -> None:
    c = cluster(tp=2)
    with Client(c.targets[:1]) as one, Client(c.targets) as both:
        both.map([0, PAGE, 2 * PAGE])
        one.unmap([0])
        assert c.mapped() == {"pp0/rank0": {PAGE, 2 * PAGE}, "pp0/rank1": {0, PAGE, 2 * PAGE}}
        both.unmap([0, PAGE, 2 * PAGE])
    assert c.mapped() == {"pp0/rank0": frozenset(), "pp0/rank1": frozenset()}
    assert c.pending() == [None, None]


def test_prepare_failure_aborts_everywhere(cluster: Make, lastcall_failpoints: ModuleType) -> None:
    c = cluster(tp=2)
    with Client(c.targets, keep_alive=True) as cl:
        cl.map([0, PAGE])
        fp = lastcall_failpoints.arm("backend.prepare_unmap_from_kv_tensors", "raise", count=1)
        with pytest.raises(RankError, match=r"prepare of unmap transaction .* failed on 1 of 2 ranks") as ei:
            cl.unmap([0, PAGE])
        assert fp.hits == 1 and len(ei.value.failures) == 1
        assert c.pending() == [None, None]  # aborted on the rank that prepared
        assert set(c.mapped().values()) == {frozenset({0, PAGE})}
        cl.unmap([0, PAGE])  # nothing is left pending to block the next one
    assert set(c.mapped().values()) == {frozenset()}


def test_commit_failing_once_is_retried(cluster: Make, lastcall_failpoints: ModuleType) -> None:
    c = cluster(tp=2)
    with Client(c.targets) as cl:
        cl.map([0])
        fp = lastcall_failpoints.arm("backend.commit_unmap_from_kv_tensors", "raise", count=1)
        cl.unmap([0])
    assert fp.hits == 1
    assert set(c.mapped().values()) == {frozenset()} and c.pending() == [None, None]


def test_commit_failing_twice_everywhere(cluster: Make, lastcall_failpoints: ModuleType) -> None:
    c = cluster(tp=2)
    with Client(c.targets) as cl:
        cl.map([0])
        fp = lastcall_failpoints.arm("backend.commit_unmap_from_kv_tensors", "raise")  # every commit fails
        with pytest.raises(StateConsistencyError, match="failed twice") as ei:
            cl.unmap([0])
    assert fp.hits == 4  # two ranks, each tried twice
    assert ei.value.rank == "pp0/rank0, pp0/rank1" and str(ei.value).startswith("pp0/rank0, pp0/rank1: ")
    assert set(c.mapped().values()) == {frozenset({0})} and all(c.pending())


@pytest.mark.parametrize("fails", [1, 2])
def test_commit_failing_on_one_rank(cluster: Make, fails: int) -> None:
    c = cluster(tp=2, backend=lambda w: FailingCommits(w, fails) if w.spec.rank == 1 else None)
    with Client(c.targets, keep_alive=True) as cl:
        cl.map([0, PAGE])
        if fails == 1:
            cl.unmap([0, PAGE])
            assert set(c.mapped().values()) == {frozenset()}
            return
        with pytest.raises(StateConsistencyError, match="commit failed on purpose") as ei:
            cl.unmap([0, PAGE])
    assert ei.value.rank == "pp0/rank1"
    assert c.mapped() == {"pp0/rank0": frozenset(), "pp0/rank1": {0, PAGE}}
    assert c.pending()[0] is None and c.pending()[1] is not None
