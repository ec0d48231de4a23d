"""The checkers added for the mutation survivors of handshake.py and registry.py (docs/mutation.md), on literal
histories: quiet on the reference's history, firing on that of the planted bug each names.

failed_start_never_serves (start_timeout_keeps_thread), bad_handshake_refused (unchecked_request) and
exit_hook_once (hook_per_start).  tests/test_checkers.py finds these proofs here
(test_every_checker_is_proven_both_ways).
"""

from __future__ import annotations

from typing import Any

from lc_helpers import check, harness_events

from harness.history import Event

S = 1_000_000_000  # one second in ns
ENGINE, HARNESS, W = 20, 1, 10


H = harness_events(HARNESS)


def L(kind: str, t: int, /, **data: Any) -> Event:
    """The handshake engine's listener event (no label)."""
    return Event(t, ENGINE, "hs_engine", "", "lc-handshake", kind, data)


# ------------------------------------------------------------ failed_start_never_serves
def timed_out_start(*listener: Event) -> list[Event]:
    """l1's start gives up after start_timeout (ListenerError), then the harness shuts it down."""
    return [H("step_started", 1 * S, step="l1", kind="handshake_start", category="start", port=0),
            H("step_returned", 2 * S, step="l1", kind="handshake_start", category="start", ok=False, value=None,
              error="ListenerError: handshake listener 127.0.0.1:0 was not ready within 0.3 s",
              error_class="ListenerError"),
            *listener,
            L("stop_started", 4 * S, host="127.0.0.1", port=0), L("stop_returned", 4 * S + 1, ok=True)]


def test_failed_start_never_serves_ok() -> None:
    v = check("failed_start_never_serves", timed_out_start(L("thread_exited", 3 * S)))
    assert (v.status, v.message) == ("ok", "1 failed start(s): each thread left without serving")


def test_failed_start_never_serves_violated() -> None:
    """start_timeout_keeps_thread: the thread was never told to stop, so once it goes on it binds and serves."""
    v = check("failed_start_never_serves", timed_out_start(L("handshake_listener_started", 3 * S,
                                                             host="127.0.0.1", port=41234)))
    assert v.status == "violated"
    assert "l1 failed (ListenerError), and its listener then bound port 41234 and served" in v.message


def test_failed_start_never_serves_violated_when_the_thread_never_leaves() -> None:
    v = check("failed_start_never_serves", timed_out_start())
    assert (v.status, v.message) == ("violated", "l1 failed, and its listener thread never left")


def test_failed_start_never_serves_judges_only_until_the_next_start() -> None:
    """The held-port scenario: l1's bind fails, l2 (a start of its own) binds: that is not l1 serving."""
    events = [H("step_started", 1 * S, step="l1", kind="handshake_start", category="start", port=5),
              L("bind_failed", 1 * S + 5, host="127.0.0.1", port=5, error="Address already in use"),
              L("thread_exited", 1 * S + 6),
              H("step_returned", 2 * S, step="l1", kind="handshake_start", category="start", ok=False,
                value=None, error="PortInUse: ...", error_class="PortInUse"),
              H("step_started", 3 * S, step="l2", kind="handshake_start", category="start", port=0),
              L("handshake_listener_started", 3 * S + 5, host="127.0.0.1", port=41234),
              H("step_returned", 4 * S, step="l2", kind="handshake_start", category="start", ok=True, value=41234)]
    assert check("failed_start_never_serves", events).status == "ok"


def test_failed_start_never_serves_unknown_without_a_failed_start() -> None:
    events = [H("step_returned", 2 * S, step="l1", kind="handshake_start", category="start", ok=True, value=4),
              L("handshake_listener_started", 1 * S, host="127.0.0.1", port=4)]
    assert check("failed_start_never_serves", events).status == "unknown"


# ------------------------------------------------------------ bad_handshake_refused
def bad(t: int, name: str, kind: str, value: Any, says: str | None = None) -> Event:
    return H("step_returned", t, step=name, kind="malformed_handshake", category="request", fault="garbage_body",
             bad=kind, ok=isinstance(value, dict) and value.get("status") in ("error", "ok"), value=value,
             **({} if says is None else {"says": says}))


def test_bad_handshake_refused_ok() -> None:
    events = [bad(1 * S, "b1", "garbage", {"status": "error", "error": "undecodable request (2 bytes): ..."},
                  says="undecodable"),
              bad(2 * S, "b4", "extra_frame", {"status": "error", "error": "expected 1 request frame after the "
                                                                            "envelope, got 2"}, says="1 request frame"),
              bad(3 * S, "b2", "wrong_tag", {"status": "error", "error": "unknown message tag 'hello'"})]
    v = check("bad_handshake_refused", events)
    assert (v.status, v.message) == ("ok", "3 malformed handshake(s), each refused with an error")


def test_bad_handshake_refused_violated() -> None:
    """unchecked_request: the extra frame is ignored and the request served; the undecodable one is answered
    with the decoder's own message; and a listener that died answers nothing."""
    events = [bad(1 * S, "b1", "garbage", {"status": "error", "error": "DecodeError: MessagePack data is "
                                                                      "malformed"}, says="undecodable"),
              bad(2 * S, "b4", "extra_frame", {"status": "ok"}, says="1 request frame"),
              bad(3 * S, "b2", "wrong_tag", {"status": None})]
    v = check("bad_handshake_refused", events)
    assert v.status == "violated" and len(v.evidence) == 3
    assert ("b1 (garbage) was refused with 'DecodeError: MessagePack data is malformed', which does not say "
            "'undecodable'") in v.message
    assert "b4 (extra_frame) was served as if well-formed" in v.message and "b2 (wrong_tag) got no reply" in v.message


def test_bad_handshake_refused_unknown_without_a_malformed_handshake() -> None:
    assert check("bad_handshake_refused", [H("step_returned", 1 * S, step="h1", kind="handshake",
                                             category="request", ok=True, value="agent-0-0")]).status == "unknown"


# ------------------------------------------------------------ exit_hook_once
def W_(kind: str, t: int, /, pid: int = W, **data: Any) -> Event:
    return Event(t, pid, "worker", "pp0/rank0", "MainThread", kind, data)


def test_exit_hook_once_ok() -> None:
    events = [W_("exit_hook_started", 1 * S, listeners=1, budget=1.0), W_("exit_hook_finished", 2 * S, ok=True, left=0),
              W_("exit_hook_started", 1 * S, pid=11, listeners=1, budget=1.0)]
    v = check("exit_hook_once", events)
    assert (v.status, v.message) == ("ok", "2 process(es), each ran its exit hook once")


def test_exit_hook_once_violated() -> None:
    """hook_per_start: a process that restarted its listener registered the hook twice and runs it twice."""
    events = [W_("exit_hook_started", 1 * S, listeners=1, budget=1.0), W_("exit_hook_finished", 2 * S, ok=True, left=0),
              W_("exit_hook_started", 3 * S, listeners=0, budget=1.0), W_("exit_hook_finished", 3 * S, ok=True, left=0)]
    v = check("exit_hook_once", events)
    assert (v.status, v.message) == ("violated", "an exit hook ran more than once in one process: pid 10: 2 times")
    assert len(v.evidence) == 2


def test_exit_hook_once_unknown_without_an_exit_hook() -> None:
    assert check("exit_hook_once", [W_("stop_all_returned", 1 * S, ok=True, left=0)]).status == "unknown"
