"""In-process failpoints: arm, wait, release, count, actions; and the history they feed."""

from __future__ import annotations

import threading
from pathlib import Path
from types import ModuleType

import pytest

from harness.errors import FailpointError, InjectedFault
from harness.history import Event, Recorder, read_jsonl, write_jsonl


def test_disarmed_site_is_a_no_op(lastcall_failpoints: ModuleType) -> None:
    lastcall_failpoints.hit("nowhere")
    assert lastcall_failpoints.get("nowhere") is None


def test_pause_parks_until_released(lastcall_failpoints: ModuleType) -> None:
    fp = lastcall_failpoints.arm("site.a", "pause")
    passed = threading.Event()
    t = threading.Thread(target=lambda: (lastcall_failpoints.hit("site.a"), passed.set()))
    t.start()
    assert fp.wait_reached(timeout=10)
    assert not passed.is_set()  # parked: it reached the site and cannot have gone past it
    fp.release()
    t.join(10)
    assert passed.is_set() and fp.released


def test_a_release_ends_a_delay_early_and_later_hits_pass(lastcall_failpoints: ModuleType) -> None:
    fp = lastcall_failpoints.arm("site.d", "delay", delay=300.0)  # longer than any run: only the release ends it
    passed = threading.Event()
    t = threading.Thread(target=lambda: (lastcall_failpoints.hit("site.d"), passed.set()))
    t.start()
    assert fp.wait_reached(timeout=10)
    assert not passed.is_set()
    fp.release()
    t.join(10)
    assert passed.is_set() and not t.is_alive()
    lastcall_failpoints.hit("site.d")  # released: a later hit is not delayed (else this test would hang 300 s)
    assert fp.hits == 2


def test_raise_with_count(lastcall_failpoints: ModuleType) -> None:
    lastcall_failpoints.arm("site.b", "raise", count=2, message="nope")
    for _ in range(2):
        with pytest.raises(InjectedFault, match=r"failpoint site\.b: nope"):
            lastcall_failpoints.hit("site.b")
    lastcall_failpoints.hit("site.b")  # the third hit passes
    assert lastcall_failpoints.get("site.b").hits == 2  # type: ignore[union-attr]


def test_pass_counts_and_wait(lastcall_failpoints: ModuleType) -> None:
    fp = lastcall_failpoints.arm("site.c", "pass")
    for _ in range(3):
        lastcall_failpoints.hit("site.c")
    assert fp.wait_reached(3, timeout=1)
    assert not fp.wait_reached(4, timeout=0)


def test_rearm_and_reset_release_parked_threads(lastcall_failpoints: ModuleType) -> None:
    old = lastcall_failpoints.arm("site.d", "pause")
    t = threading.Thread(target=lastcall_failpoints.hit, args=("site.d",))
    t.start()
    assert old.wait_reached(timeout=10)
    lastcall_failpoints.arm("site.d", "pass")  # replacing releases the old one
    t.join(10)
    assert not t.is_alive() and old.released
    lastcall_failpoints.reset()
    assert lastcall_failpoints.armed() == {}


def test_bad_arguments(lastcall_failpoints: ModuleType) -> None:
    with pytest.raises(FailpointError, match="unknown failpoint action 'explode'; use one of pause, raise"):
        lastcall_failpoints.arm("x", "explode")
    with pytest.raises(FailpointError, match="count must be >= 1"):
        lastcall_failpoints.arm("x", "pause", count=0)


def test_observer_records_fault_events(lastcall_failpoints: ModuleType, lastcall_recorder: Recorder) -> None:
    lastcall_failpoints.set_observer(lastcall_recorder.emit)
    try:
        fp = lastcall_failpoints.arm("site.e", "pass", count=1)
        lastcall_failpoints.hit("site.e")
        fp.release()
    finally:
        lastcall_failpoints.set_observer(None)
    assert lastcall_recorder.kinds() == ["fault_armed", "fault_reached", "fault_released"]


def test_history_jsonl_round_trip_and_torn_line(tmp_path: Path, lastcall_recorder: Recorder) -> None:
    lastcall_recorder.emit("stop_started", label="pp0/rank0")
    lastcall_recorder.emit("stop_returned", ok=True)
    path = tmp_path / "h.jsonl"
    write_jsonl(path, lastcall_recorder.events())
    events, problems = read_jsonl(path)
    assert events == lastcall_recorder.events() and problems == []
    with open(path, "a") as f:
        f.write('{"t_ns": 1, "pid"')  # a writer killed mid-line
    events, problems = read_jsonl(path)
    assert len(events) == 2 and len(problems) == 1 and "torn last line" in problems[0]


def test_wait_for_and_wait_until(lastcall_recorder: Recorder) -> None:
    t = threading.Thread(target=lambda: [lastcall_recorder.emit("tick", n=i) for i in range(3)])
    t.start()
    ev = lastcall_recorder.wait_for(lambda e: e.kind == "tick" and e.data["n"] == 2)
    assert isinstance(ev, Event) and ev.data == {"n": 2}
    assert lastcall_recorder.wait_until(lambda evs: len(evs) == 3)
    t.join()
    assert lastcall_recorder.wait_for("never", timeout=0) is None
