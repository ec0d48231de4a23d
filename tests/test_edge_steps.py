"""The edge steps and faults (pipeline, never_read / slow_reader, stale_socket, start_listener), the
start seams they exercise, and the checker ctl_sees_live_owners: each proven on the reference and on its bug."""

from __future__ import annotations

import os
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness import failpoints
from harness.checkers import RunRecord, judge
from harness.errors import ListenerError
from harness.faults import client as cf
from harness.faults import env
from harness.history import Event, Recorder
from harness.reference import wire
from harness.reference.backend import NoopBackend
from harness.reference.listener import ListenerConfig, WorkerListener
from harness.reference.paths import OwnerRecord, owner_path, socket_path
from harness.reference.probe import start_and_stop
from harness.reference.variants import VARIANTS
from harness.scenario.errors import ScenarioError
from harness.scenario.loader import loads

HEAD = "name: t\nabout: t\ncatches: [no_conn_tracking]\ntopology: {tp: 2, pp: 1}\n"


def _fds() -> set[str]:
    return {os.readlink(f"/proc/self/fd/{n}") for n in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{n}")}


@pytest.fixture
def live(lc_root: Path, lastcall_recorder: Recorder, no_thread_leak: None) -> Iterator[WorkerListener]:
    listener = WorkerListener(socket_path("t", 1, 0, lc_root), NoopBackend(), rank=1, ipc="t",
                              recorder=lastcall_recorder)
    listener.start()
    yield listener
    assert listener.stop()
    assert not any(lc_root.iterdir())


# --------------------------------------------------------------- client faults
def test_pipeline_back_to_back_and_reused_answers_in_order(live: WorkerListener) -> None:
    reqs = [wire.Request(cmd="kv_tensors_created", id=cf.padded_id(f"p.{i}", 300_000 if i == 1 else None))
            for i in range(3)]
    frames = [wire.encode_request(r) for r in reqs]
    for read_each in (False, True):
        replies = cf.pipeline(str(live.path), frames, 10.0, wire.decode_reply, read_each=read_each)
        assert [r.id for r in replies if r is not None] == [r.id for r in reqs]


@pytest.mark.parametrize("variant", ["reference", "answered_not_cancelled"])
def test_each_after_sends_the_next_request_after_the_answered_pass_whose_cancel_fails_it_at_once(
        lc_root: Path, variant: str, no_thread_leak: None) -> None:
    listener = VARIANTS[variant].listener(socket_path("t", 0, 0, lc_root), NoopBackend(), ipc="t")
    held = failpoints.arm("backend.kv_tensors_created", "pause", count=1)
    snapshot = failpoints.arm("listener.stop_snapshot", "pass", count=1)
    answered = failpoints.arm("listener.answered", "pause", count=1)
    listener.start()
    got: dict[str, Any] = {}

    def gate(n: int) -> None:
        got["gated"] = answered.wait_reached(n)

    def client() -> None:
        frames = [wire.encode_request(wire.Request(cmd="kv_tensors_created", id=str(i))) for i in range(2)]
        try:
            got["replies"] = cf.pipeline(str(listener.path), frames, 0.5, wire.decode_reply, read_each=True,
                                         gate=gate)
        except TimeoutError:
            got["replies"] = "timed out"

    pipe, stopper = threading.Thread(target=client), threading.Thread(target=lambda: got.update(ok=listener.stop()))
    try:
        pipe.start()
        assert held.wait_reached()
        stopper.start()
        assert snapshot.wait_reached()  # the stop's snapshot leaves the connection in the backend
        held.release()
        pipe.join(5)
    finally:
        failpoints.reset()
        pipe.join(5)
        stopper.join(10)
    assert got["gated"] and got["ok"]
    if variant == "reference":  # shut for reading once answered: the second request's send fails (EPIPE)
        assert got["replies"][0] is not None and got["replies"][1:] == [None]
    else:  # taken into the socket, never read: the client waits out its timeout
        assert got["replies"] == "timed out"


def test_each_after_is_checked_at_load_time() -> None:
    ok = HEAD + textwrap.dedent("""\
        steps:
          - start: cluster
          - arm: {site: listener.answered, action: pass, as: f1}
          - pipeline: {requests: [{cmd: kv_tensors_created}, {cmd: kv_tensors_created}], read_each: true,
                       each_after: f1, as: p1}
          - wait: {returned: p1}
        expect: [requests_served]
        """)
    assert loads(ok, "t.yaml").steps[2].spec.each_after == "f1"
    with pytest.raises(ScenarioError, match="each_after: requests written back to back"):
        loads(ok.replace("read_each: true", "read_each: false"), "t.yaml")
    with pytest.raises(ScenarioError, match="undefined step name 'p1'; expected the as: name of an earlier arm step"):
        loads(ok.replace("each_after: f1", "each_after: p1"), "t.yaml")


def test_pipeline_on_no_keep_alive_loses_the_rest(lc_root: Path, lastcall_recorder: Recorder) -> None:
    listener = VARIANTS["no_keep_alive"].listener(socket_path("t", 0, 0, lc_root), NoopBackend(), ipc="t")
    listener.start()
    try:
        frames = [wire.encode_request(wire.Request(cmd="kv_tensors_created", id=str(i))) for i in range(3)]
        replies = cf.pipeline(str(listener.path), frames, 5.0, wire.decode_reply, read_each=True)
        assert replies[0] is not None and replies[1:] == [None, None]
    finally:
        assert listener.stop()


def test_never_read_is_closed_at_the_drain_and_slow_reader_gets_it_all(lc_root: Path) -> None:
    listener = WorkerListener(socket_path("t", 0, 0, lc_root), NoopBackend(), ipc="t",
                              config=ListenerConfig(drain_timeout=0.2))
    listener.start()
    req = wire.Request(cmd="kv_tensors_created", id=cf.padded_id("q", 250_000))
    slow = cf.slow_reader(str(listener.path), req)
    reply = cf.read_slowly(slow.sock, 10.0, wire.decode_reply)
    assert reply is not None and reply.id == req.id
    slow.close()
    unread = cf.never_read(str(listener.path), req)
    assert not unread.closed_by_listener(0.2)  # data arrives, but no close: the reply is merely unread
    assert listener.stop() is True
    assert unread.closed_by_listener(5.0)  # past what arrived of the reply, the close the drain ended with
    unread.close()


# ------------------------------------------------------ a dead predecessor's socket
def test_stale_socket_is_a_sigkilled_owners_and_is_taken_over(lc_root: Path, lastcall_recorder: Recorder) -> None:
    path = socket_path("crashed", 0, 0, lc_root)
    pid = env.leave_stale_socket(str(path), "crashed")
    rec = OwnerRecord.read(owner_path(path))
    assert rec is not None and rec.pid == pid and not rec.alive() and path.is_socket()
    with pytest.raises(ListenerError, match="exists"):
        VARIANTS["refuses_stale_socket"].listener(path, NoopBackend(), ipc="crashed").start()
    taker = WorkerListener(path, NoopBackend(), ipc="crashed", recorder=lastcall_recorder)
    taker.start()
    assert lastcall_recorder.events("stale_socket_removed")
    assert OwnerRecord.read(owner_path(path)) == OwnerRecord.for_self("crashed", "socket")
    assert taker.stop()
    assert not any(lc_root.iterdir())


# ------------------------------------------------------------ start_listener
class _Side:
    """What harness.reference.probe needs of a worker side: a worker with its listener class."""

    def __init__(self, cls: type[WorkerListener]) -> None:
        self.worker = type("W", (), {"listener_cls": cls, "backend": NoopBackend(),
                                     "spec": type("S", (), {"config": ListenerConfig()})()})()


@pytest.mark.parametrize("variant", ["reference", "failed_start_leaks"])
def test_a_failed_bind_leaves_nothing_behind(lc_root: Path, lastcall_failpoints: ModuleType, variant: str) -> None:
    path = str(socket_path("second", 0, 0, lc_root))
    before = _fds()
    lastcall_failpoints.arm("listener.bind", "raise", count=1)
    out = start_and_stop(_Side(VARIANTS[variant].listener), path=path, ipc="second", stops=2)
    assert (out["started"], out["error_class"], out["stops"]) == (False, "ListenerError", [True, True])
    left, new = sorted(p.name for p in lc_root.rglob("*")), _fds() - before
    if variant == "reference":
        assert (left, new) == ([], set())
    else:  # its socket's fd stays open, and the directory it made stays
        assert left and any(fd.startswith("socket:") for fd in new)
        for fd in os.listdir("/proc/self/fd"):  # close what the planted bug leaked, for the leak guard
            if os.path.exists(f"/proc/self/fd/{fd}") and os.readlink(f"/proc/self/fd/{fd}") in new:
                os.close(int(fd))
        for d in sorted(lc_root.rglob("*"), reverse=True):
            d.rmdir()


@pytest.mark.parametrize("variant", ["reference", "takes_over_live_socket", "stop_unstarted_unlinks"])
def test_a_live_owners_socket_is_never_taken_or_unlinked(live: WorkerListener, variant: str) -> None:
    side = _Side(VARIANTS[variant].listener)
    refused = start_and_stop(side, path=str(live.path), ipc="t", rank=1, stops=2)
    never = start_and_stop(side, path=str(live.path), ipc="t", rank=1, start=False, stops=2)
    assert never == {"started": False, "error_class": None, "error": None, "stops": [True, True]}
    still = live.path.exists()
    if variant == "reference":
        assert refused["started"] is False and "in use by live pid" in refused["error"]
        assert still and cf.pipeline(str(live.path), [wire.encode_request(wire.Request(cmd="kv_tensors_created"))],
                                     5.0, wire.decode_reply)[0] is not None
    else:
        assert not still


# --------------------------------------------------------------- the loader
def test_stop_results_of_start_listener_stops_are_named_name_dot_stop_n() -> None:
    ok = HEAD + textwrap.dedent("""\
        steps:
          - start: cluster
          - start_listener: {at: {rank: 1}, stops: 2, as: t1}
        expect:
          - stop_result: {step: t1.stop2, returns: true}
        """)
    assert loads(ok, "t.yaml").steps[1].kind == "start_listener"
    with pytest.raises(ScenarioError, match=r"undefined step name 't1\.stop3'"):
        loads(ok.replace("t1.stop2", "t1.stop3"), "t.yaml")
    with pytest.raises(ScenarioError, match="fault 'garbage_body' sends no request"):
        loads(ok.replace("- start_listener: {at: {rank: 1}, stops: 2, as: t1}",
                         "- send: {fault: garbage_body, reply_size: 1KiB}"), "t.yaml")


# ------------------------------------------------------------ ctl_sees_live_owners
def _h(event: str, t: int, /, **data: Any) -> Event:
    return Event(t, 1, "harness", "", "MainThread", event, data)


def _listed(state: str, pid: int | None, t: int = 10) -> Event:
    return _h("step_returned", t, step="l1", kind="ctl", category="control", action="list", ok=True,
              value=[{"key": "k", "alive": True, "artifacts": [{"kind": "socket", "path": "/r/w0.sock", "state": state,
                                                                "pid": pid}]}])


def _owners(*evs: Event) -> Any:
    return judge("ctl_sees_live_owners", RunRecord(tuple(evs), {}))


def test_ctl_sees_live_owners_ok() -> None:
    assert _owners(_listed("alive", 42)).status == "ok"


def test_ctl_sees_live_owners_violated() -> None:
    fired = _owners(_listed("unknown", None))
    assert fired.status == "violated" and "'unknown'" in fired.message


def test_ctl_sees_live_owners_unknown_once_a_stop_began_or_without_a_listing() -> None:
    assert _owners(_h("step_started", 5, step="s1", kind="stop", category="stop"),
                   _listed("unknown", None)).status == "unknown"  # taken once a stop began: not judged
    assert _owners().status == "unknown"


# ------------------------------------------------------------ send: {timeout}
SEND_TIMEOUT = HEAD.replace("tp: 2", "tp: 1") + textwrap.dedent("""\
    config: {drain_timeout: 2s, ipc_timeout: 10s}
    steps:
      - start: cluster
      - arm: {site: backend.kv_tensors_created, on: {rank: 0}, action: pause, count: 1, as: f1}
      - send: {to: {rank: 0}, cmd: kv_tensors_created, timeout: 300ms, as: r1}
      - release: f1
      - stop: {on: all, as: s1}
      - wait: {returned: s1}
    expect:
      - stop_result: {step: s1, returns: true}
    """)


PIPELINE_TIMEOUT = SEND_TIMEOUT.replace(
    "- send: {to: {rank: 0}, cmd: kv_tensors_created, timeout: 300ms, as: r1}",
    "- pipeline: {to: {rank: 0}, requests: [{cmd: kv_tensors_created}], timeout: 300ms, as: r1}\n"
    "  - wait: {returned: r1}")


@pytest.mark.parametrize("kind, text", [("send", SEND_TIMEOUT), ("pipeline", PIPELINE_TIMEOUT)])
def test_a_step_timeout_bounds_the_wait_for_its_reply_not_the_runs(kind: str, text: str) -> None:
    """The request (a pipeline's first) is parked in the backend: the step fails with the client's TimeoutError
    after its own 300 ms, where the run's ipc_timeout (10 s) would have held it, and the run goes on (the release,
    the stop)."""
    from harness.scenario.loader import expand
    from harness.scenario.runner import run_item

    item = expand(loads(text, "t.yaml"))[0]
    assert getattr(item.scenario.steps[2], kind).timeout == pytest.approx(0.3)
    result = run_item(item, variant="reference")
    assert result.step_error == "" and result.passed, (result.step_error, result.verdicts)
    started = next(e for e in result.events if e.kind == "step_started" and e.data.get("step") == "r1")
    ended = next(e for e in result.events if e.kind == "step_returned" and e.data.get("step") == "r1")
    assert ended.data["ok"] is False and "TimeoutError" in ended.data["error"], ended.data
    assert 0.3 <= (ended.t_ns - started.t_ns) / 1e9 < 5.0  # its own bound, far under the run's 10 s
    with pytest.raises(ScenarioError, match="timeout"):
        loads(text.replace("timeout: 300ms", "timeout: 0s"), "t.yaml")


def test_a_send_timeout_is_refused_where_the_step_waits_for_no_reply() -> None:
    for fault in ("stall_after_header", "never_read", "reset_mid_frame"):
        with pytest.raises(ScenarioError, match=f"timeout: fault '{fault}' does not wait for a reply; remove it"):
            loads(SEND_TIMEOUT.replace("cmd: kv_tensors_created, timeout: 300ms",
                                       f"cmd: kv_tensors_created, fault: {fault}, timeout: 300ms"), "t.yaml")
