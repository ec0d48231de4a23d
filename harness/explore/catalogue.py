"""What the explorer reaches: which planted bugs it finds, which it cannot, and which replays fall short."""

from __future__ import annotations

__all__ = ["REACHABLE", "UNREACHABLE", "REPLAY_GAPS", "REFERENCE_GAPS", "LINE_SUSPECTS"]

# Which planted bugs the explorer finds, and why it cannot reach the others (tests/test_stateful.py proves the first).
REACHABLE: dict[str, str] = {
    "no_conn_tracking": "connect or send_header, park, stop: the idle or stalled read is not closed at once",
    "teardown_while_alive": "park, stop: stop returns True while the handler is parked",
    "timed_join_teardown": "park, stop: stop returns True after its timed join, handler still parked",
    "wake_by_connect": "remove_path or replace_path, stop: the wake-up never arrives, stop returns False",
    "dispatch_after_stop": "park (queued), stop, release: the request queued behind the handler is dispatched",
    "head_of_line_blocking": "connect, then connect/send_header/park: the next client is not served",
    "restart_drops_old": "park, restart: the registry drops the draining listener instead of raising ListenerBusy",
    "unlink_by_path": "replace_path, stop: teardown unlinks the socket that replaced ours",
    "drop_registration_on_error": "stop_cleanup_fails: the failed stop drops the registration",
    "concurrent_stop_true": "park, concurrent_stop: the second stop reports True while the first drains",
    "teardown_ignores_stop": "park, shutdown: the allocator is torn down although the stop returned False",
}
UNREACHABLE: dict[str, str] = {
    "rmtree_dir": "needs a second rank sharing the socket directory; the explorer runs one worker",
    "dies_on_bad_frame": "needs malformed input; the explorer sends only well-formed frames (tests/test_listener "
                         "covers bad input)",
    "stop_from_handler_deadlocks": "needs a backend that calls stop(); the explorer's backend is the allocator",
    "unbounded_exit_hook": "needs interpreter exit; the explorer does not model the exit hook",
    "teardown_then_false": "not yet modelled: the explorer's False stops park a handler, and its invariants do not "
                           "look for teardown steps inside a failed stop (the retained_for_retry checker does)",
    "lost_unmap": "needs client-side bookkeeping of mapped pages; the explorer does not unmap",
    "leaks_usage_segment": "an engine-side bug; the explorer runs a worker listener only",
    "leaks_a_child": "a process-level bug (no_orphan_processes on real processes); the explorer runs in-process",
    "cuts_drained_reply": "not yet modelled: the explorer's invariants do not require the parked handler's reply "
                          "to arrive after a stop (the calls_answered checker does, on real processes)",
}
# Reachable bugs whose rendered scenario, replayed on real processes, does not catch them (the rest it does).
REPLAY_GAPS: dict[str, str] = {
    "dispatch_after_stop": "the explorer pipelines the queued request on the parked one's connection; scenario steps "
                           "cannot pipeline, so the replay leaves it out (a comment says so)",
    "unlink_by_path": "no checker sees that the socket which replaced ours was unlinked (the explorer checks the "
                      "inode at the path); the replay runs, but nothing in it can fail",
}
# Interleavings where the reference itself breaks the contract; off by default (machine_for's flags turn them on).
REFERENCE_GAPS: dict[str, str] = {}  # none open: the one found here (a freed inode reused) is fixed
LINE_SUSPECTS: dict[int, str] = {  # a failure of contract line N on 'reference' resembles this planted bug
    1: "dispatch_after_stop", 2: "no_conn_tracking", 3: "teardown_while_alive", 4: "teardown_while_alive",
    5: "timed_join_teardown", 6: "drop_registration_on_error", 7: "wake_by_connect", 9: "restart_drops_old",
    10: "teardown_ignores_stop", 11: "head_of_line_blocking",
}
