"""The checkers that judge the contract lines once proven only by their checks' own assertions, on literal
histories: quiet on the clean run, firing on the history of the planted bug each names.

unlinks_only_own_socket (line 4, unlink_by_path), registration_kept (line 6 and 8, drop_registration_on_error;
restart_drops_old), failed_stop_retried and exit_hook_within (line 8: drop_registration_on_error,
unbounded_exit_hook), restart_refused (line 9, restart_drops_old).  tests/test_checkers.py finds these
proofs here (test_every_checker_is_proven_both_ways).
"""

from __future__ import annotations

from typing import Any

from lc_helpers import check, harness_events

from harness.checkers import RunRecord, judge
from harness.history import Event
from harness.probes.model import PathEntry, Snapshot

S = 1_000_000_000  # one second in ns
W, HARNESS = 10, 1
L0 = "pp0/rank0"
ROOT = "/tmp/lc-xyz"
DIR = f"{ROOT}/lastcall-tp-t-96a6b1b7"
SOCK = f"{DIR}/w0.sock"


def E(kind: str, t: int, /, pid: int = W, **data: Any) -> Event:
    """A worker process's event (the registry's, the listener's with ``listener`` in its data)."""
    return Event(t, pid, "worker", L0, "MainThread", kind, data)


def LE(kind: str, t: int, /, pid: int = W, listener: str = L0, **data: Any) -> Event:
    return E(kind, t, pid, listener=listener, **data)


H = harness_events(HARNESS)


def snap(label: str, t: int, *paths: PathEntry, root: str | None = ROOT) -> Snapshot:
    return Snapshot(label=label, t_ns=t, paths=paths, extra={"root": root})


# ------------------------------------------------------------------ unlinks_only_own_socket
def replaced(t: int = 2 * S, ino: int = 77) -> list[Event]:
    """The listener bound SOCK (inode 5), the harness put a socket of its own there (inode ``ino``), a stop."""
    return [LE("listener_started", 1 * S, path=SOCK, rank=0, pp=0),
            H("path_replaced", t, step="r1", path=SOCK, ino=ino), LE("stop_started", 3 * S),
            LE("teardown_step", 3 * S + 1, step="unlink_skipped", why="socket path replaced"),
            LE("stop_returned", 3 * S + 2, ok=True)]


def test_unlinks_only_own_socket_ok() -> None:
    after = snap("after", 4 * S, PathEntry(DIR, "dir", 6), PathEntry(SOCK, "socket", 77))
    v = check("unlinks_only_own_socket", replaced(), after=after)
    assert (v.status, v.message) == ("ok", "1 replacement(s) still there after the run")


def test_unlinks_only_own_socket_violated() -> None:
    """unlink_by_path: teardown unlinks whatever is at the path, the harness's replacement too."""
    events = replaced()
    after = snap("after", 4 * S)  # the replacement (and the emptied directory) gone
    v = check("unlinks_only_own_socket", events, after=after)
    assert v.status == "violated"
    assert [(e.kind, e.data["ino"]) for e in v.evidence] == [("path_replaced", 77)]
    assert v.message == ("a socket file the listener did not bind was unlinked: "
                         f"{SOCK} (inode 77, put there by step r1) is gone in snapshot after")


def test_unlinks_only_own_socket_violated_by_the_same_path_with_another_inode() -> None:
    """What is at the path after the run is not the replacement (identity is the inode, never the name)."""
    after = snap("after", 4 * S, PathEntry(SOCK, "socket", 78))
    assert check("unlinks_only_own_socket", replaced(), after=after).status == "violated"


def test_unlinks_only_own_socket_reads_every_after_snapshot_taken_later() -> None:
    mid = snap("after_s1", 3 * S + 5)  # gone right after the stop ...
    after = snap("after", 4 * S, PathEntry(SOCK, "socket", 77))  # ... whatever is there at the end
    assert check("unlinks_only_own_socket", replaced(), after_s1=mid, after=after).status == "violated"
    early = snap("after_x", 1 * S)  # taken before the replacement: says nothing about it
    assert check("unlinks_only_own_socket", replaced(), after_x=early, after=after).status == "ok"


def test_unlinks_only_own_socket_excuses_a_later_start_that_took_the_path_over() -> None:
    """A listener started after the stop removes a dead owner's leftover at its path, and says so."""
    events = [*replaced(), LE("stale_socket_removed", 3 * S + 9, path=SOCK)]
    v = check("unlinks_only_own_socket", events, after=snap("after", 4 * S))
    assert v.status == "ok"
    assert v.notes == (f"{SOCK}: removed as a stale socket by {L0} when it started",)


def test_unlinks_only_own_socket_unknown() -> None:
    no_ino = [H("path_replaced", 2 * S, step="r1", path=SOCK)]  # a version-1 history: no inode recorded
    v = check("unlinks_only_own_socket", no_ino, after=snap("after", 4 * S))
    assert (v.status, v.message) == ("unknown", "no socket file was replaced (path_replaced with its inode)")
    v = check("unlinks_only_own_socket", replaced())  # no snapshot
    assert (v.status, v.message) == ("unknown", f"no snapshot after the replacement of {SOCK}")
    elsewhere = snap("after", 4 * S, root="/somewhere/else")  # its paths probe did not look there
    assert check("unlinks_only_own_socket", replaced(), after=elsewhere).status == "unknown"
    blind = snap("after", 4 * S, root=None)  # no paths probe at all
    assert check("unlinks_only_own_socket", replaced(), after=blind).status == "unknown"


def test_no_leftover_paths_leaves_the_harness_its_own_replacement() -> None:
    """The replacement (and the directory the listener rightly kept because it is in it) is the harness's."""
    before = snap("before", 0)
    after = snap("after", 4 * S, PathEntry(DIR, "dir", 6), PathEntry(SOCK, "socket", 77))
    v = check("no_leftover_paths", replaced(), before=before, after=after)
    assert v.status == "ok"
    assert v.notes == (f"{SOCK}: the harness's own replacement (inode 77), left with its directories for the "
                       "harness to remove",)
    # anything else the listener left beside it is still its leftover
    owner = PathEntry(f"{DIR}/w0.owner", "file", 8)
    after = snap("after", 4 * S, PathEntry(DIR, "dir", 6), owner, PathEntry(SOCK, "socket", 77))
    v = check("no_leftover_paths", replaced(), before=before, after=after)
    assert (v.status, v.message) == ("violated", f"left behind: {[owner.path]}")
    # the listener's own socket (another inode) at the path is not excused
    after = snap("after", 4 * S, PathEntry(DIR, "dir", 6), PathEntry(SOCK, "socket", 5))
    v = check("no_leftover_paths", replaced(), before=before, after=after)
    assert (v.status, v.message) == ("violated", f"left behind: {[DIR, SOCK]}")


# ------------------------------------------------------------------ registration_kept
def registered(t: int = 1 * S, listener: str = L0) -> list[Event]:
    return [LE("listener_started", t, listener=listener, path=SOCK, rank=0, pp=0),
            E("listener_registered", t + 1, listener=listener, ipc="c")]


def unregistered(t: int, listener: str = L0) -> Event:
    return E("listener_unregistered", t, listener=listener, ipc="c")


def test_registration_kept_ok() -> None:
    """A cleanup error: stop False, still registered; the retry True, then it leaves the registry."""
    events = [*registered(), LE("stop_started", 2 * S), LE("cleanup_failed", 2 * S + 1, error="OSError: unlink"),
              LE("stop_returned", 2 * S + 2, ok=False), LE("stop_returned", 3 * S, ok=True), unregistered(3 * S + 1)]
    v = check("registration_kept", events)
    assert (v.status, v.message) == ("ok", "1 listener(s) left the registry, each after a stop returned True")


def test_registration_kept_ok_across_a_restart() -> None:
    """A restart stops the old listener (True), unregisters it, and registers the new one on the same label."""
    events = [*registered(), LE("stop_started", 2 * S), LE("stop_returned", 2 * S + 1, ok=True),
              unregistered(2 * S + 2), *registered(3 * S), LE("stop_started", 4 * S),
              LE("stop_returned", 4 * S + 1, ok=False)]
    assert check("registration_kept", events).status == "ok"


def test_registration_kept_violated() -> None:
    """drop_registration_on_error: the cleanup error escapes stop (no stop_returned) and the registry drops it."""
    events = [*registered(), LE("stop_started", 2 * S), unregistered(2 * S + 5),
              E("stop_all_returned", 2 * S + 6, ok=False, left=0)]
    v = check("registration_kept", events)
    assert v.status == "violated"
    assert [e.kind for e in v.evidence] == ["listener_unregistered"]
    assert v.message == (f"{L0} left its registry although no stop of it had returned: nothing is left to "
                         "retry (1 such)")


def test_registration_kept_violated_by_a_stop_that_returned_false() -> None:
    """restart_drops_old, and drop_registration_on_error on a drain timeout: False, then forgotten."""
    events = [*registered(), LE("stop_started", 2 * S), LE("stop_returned", 2 * S + 1, ok=False),
              unregistered(2 * S + 2)]
    v = check("registration_kept", events)
    assert v.status == "violated"
    assert [(e.kind, e.data.get("ok")) for e in v.evidence] == [("stop_returned", False),
                                                                ("listener_unregistered", None)]
    assert "its last stop returned False" in v.message


def test_registration_kept_unknown_without_the_registry_s_events() -> None:
    v = check("registration_kept", [LE("listener_started", 1 * S, path=SOCK, rank=0, pp=0)])
    assert v.status == "unknown"
    assert "the worker emitted none of listener_registered" in v.message


# ------------------------------------------------------------------ failed_stop_retried
def test_failed_stop_retried_ok() -> None:
    """A drain timeout (False), then the exit hook's stop (True)."""
    events = [*registered(), LE("stop_returned", 2 * S, ok=False), E("exit_hook_started", 3 * S, listeners=1,
                                                                        budget=0.5),
              LE("stop_returned", 3 * S + 1, ok=True), E("exit_hook_finished", 3 * S + 2, ok=True, left=0)]
    v = check("failed_stop_retried", events)
    assert (v.status, v.message) == ("ok", "1 failed stop(s), each retried until it returned True")


def test_failed_stop_retried_violated() -> None:
    """drop_registration_on_error: the registry forgot the listener, so the exit hook finds nothing to retry."""
    events = [*registered(), LE("stop_returned", 2 * S, ok=False), unregistered(2 * S + 1),
              E("exit_hook_started", 3 * S, listeners=0, budget=0.5), E("exit_hook_finished", 3 * S + 1, ok=True,
                                                                         left=0)]
    v = check("failed_stop_retried", events)
    assert v.status == "violated"
    assert [(e.kind, e.data["ok"]) for e in v.evidence] == [("stop_returned", False)]
    assert v.message == f"1 listener(s) whose stop returned False were never stopped afterwards: {[L0]}"


def test_failed_stop_retried_judges_each_life_of_a_label() -> None:
    """A new listener on the same label (a restart) is not the old one's retry."""
    events = [*registered(), LE("stop_returned", 2 * S, ok=False), unregistered(2 * S + 1), *registered(3 * S),
              LE("stop_returned", 4 * S, ok=True)]
    v = check("failed_stop_retried", events)
    assert v.status == "violated" and [e.t_ns for e in v.evidence] == [2 * S]
    same = [*registered(), LE("stop_returned", 2 * S, ok=False), LE("stop_returned", 4 * S, ok=True)]
    assert check("failed_stop_retried", same).status == "ok"


def test_failed_stop_retried_ok_with_nothing_to_retry() -> None:
    v = check("failed_stop_retried", [*registered(), LE("stop_returned", 2 * S, ok=True)])
    assert (v.status, v.message) == ("ok", "no stop returned False: nothing to retry")


def test_failed_stop_retried_unknown() -> None:
    v = check("failed_stop_retried", [E("stop_all_returned", 2 * S, ok=False, left=1)])  # no listener observed
    assert v.status == "unknown" and "the listener emitted none of" in v.message


# ------------------------------------------------------------------ exit_hook_within
def test_exit_hook_within_ok() -> None:
    events = [E("exit_hook_started", 1 * S, listeners=2, budget=0.5),
              E("exit_hook_finished", 1 * S + S // 2, ok=False, left=2)]
    v = check("exit_hook_within", events, {"within": 1.5})
    assert (v.status, v.message) == ("ok", "pid 10: 0.500s for 2 listener(s), budget 0.5")


def test_exit_hook_within_violated() -> None:
    """unbounded_exit_hook: drain_timeout (2 s) per stuck listener, one after the other."""
    events = [E("exit_hook_started", 1 * S, listeners=2, budget=None), E("exit_hook_finished", 5 * S, ok=False,
                                                                         left=2)]
    v = check("exit_hook_within", events, {"within": 1.5})
    assert v.status == "violated"
    assert [e.kind for e in v.evidence] == ["exit_hook_started", "exit_hook_finished"]
    assert v.message == "an exit hook took longer than 1.50s: pid 10: 4.000s for 2 listener(s), budget None"
    never = check("exit_hook_within", events[:1], {"within": 1.5})
    assert (never.status, never.message) == ("violated", "an exit hook took longer than 1.50s: pid 10: never "
                                             "finished")


def test_exit_hook_within_is_stretched_by_the_run_s_scale() -> None:
    events = [E("exit_hook_started", 1 * S, listeners=2, budget=0.5), E("exit_hook_finished", 3 * S, ok=True,
                                                                        left=0)]
    assert judge("exit_hook_within", RunRecord(tuple(events), scale=2.0), {"within": 1.5}).status == "ok"


def test_exit_hook_within_unknown() -> None:
    v = check("exit_hook_within", [*registered()])
    assert v.status == "unknown" and "the worker emitted none of exit_hook_started" in v.message


# ------------------------------------------------------------------ restart_refused
def restart(name: str, ok: bool, value: Any = None, **data: Any) -> list[Event]:
    return [H("step_started", 2 * S, step=name, kind="restart", category="start"),
            H("step_returned", 2 * S + 1, step=name, kind="restart", category="start", ok=ok, value=value, **data)]


def test_restart_refused_ok() -> None:
    events = restart("r1", False, error="pp0/rank0 of 'c' is still draining", error_class="ListenerBusy")
    v = check("restart_refused", events, {"step": "r1", "error_class": "ListenerBusy"})
    assert (v.status, v.message) == ("ok", "1 restart(s) refused with ListenerBusy")
    assert check("restart_refused", events).status == "ok"  # any refusal


def test_restart_refused_violated() -> None:
    """restart_drops_old in a worker process: the restart forgets the old listener and starts a new one."""
    v = check("restart_refused", restart("r1", True, True), {"step": "r1"})
    assert v.status == "violated"
    assert [e.data["step"] for e in v.evidence] == ["r1"]
    assert v.message == "r1 started a new listener over one that could not stop"


def test_restart_refused_violated_by_another_error() -> None:
    """restart_drops_old in-process: the old listener is forgotten, and the new one's bind finds its live
    socket (ListenerError): refused, but not because the old one could not stop."""
    events = restart("r1", False, error="pp0/rank0: ... is in use by live pid 10", error_class="ListenerError")
    v = check("restart_refused", events, {"step": "r1", "error_class": "ListenerBusy"})
    assert v.status == "violated"
    assert v.message.startswith("r1 was refused with ListenerError (") and v.message.endswith("not ListenerBusy")


def test_restart_refused_unknown() -> None:
    v = check("restart_refused", restart("r1", False), {"step": "r2"})
    assert (v.status, v.message) == ("unknown", "no restart step r2 returned in the history")
