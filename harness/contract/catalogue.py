"""What the explorer (harness.explore) reaches: which planted bugs it finds, which it cannot, and which replays
fall short, each by the contract line it breaks.  Data only: here, below the explorer, so that the contract's page
(harness.contract.doc) reads it without importing the explorer."""

from __future__ import annotations

__all__ = ["REACHABLE", "UNREACHABLE", "REPLAY_GAPS", "REFERENCE_GAPS", "LINE_SUSPECTS", "HISTORY_CHECKERS",
           "NOT_JUDGED_HERE", "CATCHES", "STEP_CHECKERS", "STEP_LINES",
           "OWN_INVARIANT_ONLY"]

# The registered checkers that judge the explorer's history after every step (the line each breaks is the
# contract table's, harness.contract.line_of); the explorer's own invariants judge the rest.
HISTORY_CHECKERS: tuple[str, ...] = ("no_late_dispatch", "reads_cancelled", "handler_drained", "teardown_deferred",
                                     "no_dispatch_after_teardown", "registration_kept", "unlinks_only_own_socket",
                                     "served_while_stalled", "stop_result", "restart_refused")
# Of those, the ones judged once per step that names them, with what that step must return (the explorer's
# model says: a stop with no handler parked returns True, a restart over a parked handler is refused).
STEP_CHECKERS: tuple[str, ...] = ("stop_result", "restart_refused")
# The lines a step checker's violation breaks in the explorer: not one line per checker (line_of gives the first
# line naming it, 4 for stop_result) but the line that says what the step it judges must return: a stop with no
# handler parked returns True (4; 7 once the socket path is gone), with one parked False (5), with its cleanup
# failing False (6, as a stop concurrent with a draining one), an integration shutdown over a parked handler
# False (10); a restart over a draining listener is refused (9).
STEP_LINES: dict[str, tuple[int, ...]] = {"stop_result": (4, 5, 6, 7, 10), "restart_refused": (9,)}
# Checkers of the contract's checks that the explorer does not run after every step, and why.
NOT_JUDGED_HERE: dict[str, str] = {
    "retained_for_retry": "stop_cleanup_fails tears part of the listener down on purpose before its stop returns "
                          "False",
}

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
# How the explorer catches each reachable bug on its shortest interleaving (tests/test_stateful.py MINIMAL): the
# contract line found broken first (by the explorer's own invariant or a checker of HISTORY_CHECKERS, whichever
# judges first), and the checkers of HISTORY_CHECKERS that the history recorded until then violates.
CATCHES: dict[str, tuple[int, tuple[str, ...]]] = {
    "no_conn_tracking": (2, ("reads_cancelled",)),
    "teardown_while_alive": (5, ("handler_drained", "stop_result")),
    "timed_join_teardown": (5, ("handler_drained", "stop_result")),
    "wake_by_connect": (7, ("stop_result",)),
    "dispatch_after_stop": (1, ("no_late_dispatch",)),
    "head_of_line_blocking": (11, ("served_while_stalled",)),
    "restart_drops_old": (9, ("registration_kept", "restart_refused")),
    "unlink_by_path": (4, ("unlinks_only_own_socket",)),
    "drop_registration_on_error": (6, ("registration_kept",)),
    "concurrent_stop_true": (6, ("handler_drained", "stop_result")),
    "teardown_ignores_stop": (10, ("handler_drained", "teardown_deferred", "no_dispatch_after_teardown",
                                   "stop_result")),
}
# Reachable bugs that only the explorer's own invariants catch (no checker over its history does), and why:
# none now (tests/test_explore_oracles.py holds it); a bug added here must say what no checker can see.
OWN_INVARIANT_ONLY: dict[str, str] = {}
UNREACHABLE: dict[str, str] = {
    "rmtree_dir": "needs a second rank sharing the socket directory; the explorer runs one worker",
    "dies_on_bad_frame": "needs malformed input; the explorer sends only well-formed frames (tests/test_listener "
                         "covers bad input)",
    **{name: "needs a backend that calls stop(); the explorer's backend is the allocator"
       for name in ("stop_from_handler_deadlocks", "stop_from_handler_says_true")},
    "unbounded_exit_hook": "needs interpreter exit; the explorer does not model the exit hook",
    "teardown_then_false": "not yet modelled: the explorer's False stops park a handler, and its invariants do not "
                           "look for teardown steps inside a failed stop (the retained_for_retry checker does)",
    "lost_unmap": "needs client-side bookkeeping of mapped pages; the explorer does not unmap",
    "leaks_usage_segment": "an engine-side bug; the explorer runs a worker listener only",
    "leaks_a_child": "a process-level bug (no_orphan_processes on real processes); the explorer runs in-process",
    # the write path's and the edge steps' bugs (scenarios/*.yaml catch each; tests/test_write_path.py and
    # tests/test_edge_steps.py in-process)
    **{name: "needs a client that does not read its reply, or a reply larger than the socket buffer; the explorer "
       "reads each reply at once and its replies are small" for name in ("blocking_write", "short_write_lost",
                                                                         "partial_flush_abandoned",
                                                                         "dead_reader_spins", "reply_leaves_writing")},
    **{name: "needs a start that fails after socket(); the explorer starts only where the bind succeeds"
       for name in ("failed_start_leaks", "failed_start_not_undone")},
    **{name: "needs a second owner at the listener's path (live, or SIGKILLed with its socket left); the explorer "
       "runs one listener per path" for name in ("takes_over_live_socket", "refuses_stale_socket",
                                                "stop_unstarted_unlinks")},
    "no_owner_record": "needs lastcall ctl; the explorer's invariants do not read owner records",
    "no_keep_alive": "needs a second request on one connection; the explorer sends each request on a fresh one (a "
                     "kept connection stays idle until stop, whose EOF a closed one gives too)",
    "cuts_drained_reply": "not yet modelled: the explorer's invariants do not require the parked handler's reply "
                          "to arrive after a stop (the calls_answered checker does, on real processes)",
    # the mutation survivors' kills (scenarios/*.yaml catch each, tests/test_mutant_kills.py)
    "busy_polls_after_reply": "a cost, not an outcome: the explorer's invariants judge what steps return and "
                              "record, not CPU time (idle_cost, over a measure_idle window on real processes)",
    "cancel_left_to_thread": "needs the serving thread held away from epoll (a failpoint delay) when stop lands; the "
                             "thread closes what stop left it on its way out, before any step the explorer takes next",
    "queues_partial_reads": "needs the serving thread slowed between two partial reads of one frame (a failpoint "
                            "delay); the explorer takes each step only once it has completed",
    "accepts_after_stop": "needs the serving thread held between an accept and its decision (a failpoint delay) "
                          "when stop lands; the explorer takes each step only once it has completed",
    "answered_not_cancelled": "needs a second request on one kept-alive connection sent once the listener has "
                              "answered the first after a stop began; the explorer sends each request on a fresh one",
    "reply_without_deadline": "a bug of the engine's client, not the listener: needs a rank paused (SIGSTOP) with a "
                              "call in flight; the explorer's client is its own and pauses nothing",
    "dies_on_accept_failure": "needs an accept that fails (EMFILE under a lowered fd limit); the explorer's accepts "
                              "succeed",
    "spins_on_accept_failure": "needs an accept that fails (EMFILE under a lowered fd limit), and is a cost, not an "
                               "outcome (idle_cost over a measure_idle window, on real processes)",
    **{name: "needs interpreter exit; the explorer does not model the exit hook"
       for name in ("exit_hook_waits_a_second", "hook_per_start", "exit_hook_says_ok")},
    **{name: "a mode or umask of what a start creates; the explorer's invariants read no modes (private_paths does)"
       for name in ("leaves_umask", "socket_mode_open")},
    "starts_twice": "needs a second start of one listener object; the explorer's restarts make a new listener",
    **{name: "not yet modelled: the checkers of the listener's own record (dispatches_recorded, close_reasons) are "
       "not among the explorer's HISTORY_CHECKERS" for name in ("misreports_close", "unrecorded_dispatch")},
    **{name: "a race of a decision with stop: the explorer takes each step only once it has completed, so no "
       "stop ever lands inside the decision's window; the stress scenarios widen it (docs/stress.md)"
       for name in ("unlocked_dispatch_decision", "unlocked_frame_completion", "unlocked_accept",
                    "unlocked_concurrent_stops")},
}
# Reachable bugs whose rendered scenario, replayed on real processes, does not catch them (the rest it does).
REPLAY_GAPS: dict[str, str] = {
    "dispatch_after_stop": "the explorer pipelines the queued request on the parked one's connection; scenario steps "
                           "cannot pipeline, so the replay leaves it out (a comment says so)",
}
# Interleavings where the reference itself breaks the contract; off by default (machine_for's flags turn them on).
REFERENCE_GAPS: dict[str, str] = {}  # none open: the one found here (a freed inode reused) is fixed
LINE_SUSPECTS: dict[int, str] = {  # a failure of contract line N on 'reference' resembles this planted bug
    1: "dispatch_after_stop", 2: "no_conn_tracking", 3: "teardown_while_alive", 4: "teardown_while_alive",
    5: "timed_join_teardown", 6: "drop_registration_on_error", 7: "wake_by_connect", 9: "restart_drops_old",
    10: "teardown_ignores_stop", 11: "head_of_line_blocking",
}
