"""The checkers that judge the contract lines once proven only by their checks' own assertions, on literal
histories: quiet on the clean run, firing on the history of the planted bug each names.

unlinks_only_own_socket (line 4, unlink_by_path).  tests/test_checkers.py finds these proofs here
(test_every_checker_is_proven_both_ways).
"""

from __future__ import annotations

from typing import Any

from harness.checkers import RunRecord, Verdict, judge
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


def H(kind: str, t: int, /, **data: Any) -> Event:
    return Event(t, HARNESS, "harness", "", "MainThread", kind, data)


def check(name: str, events: list[Event], params: dict[str, Any] | None = None, **snapshots: Snapshot) -> Verdict:
    return judge(name, RunRecord(tuple(events), dict(snapshots)), params)


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
