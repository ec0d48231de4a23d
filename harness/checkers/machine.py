"""Checkers of what a run left on the machine, judged from snapshots (and process reports).

Snapshots ``before`` and ``after`` are taken by probes around the run; identity
(path and inode, segment name, pid) decides what is new, never a count.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Hashable
from itertools import accumulate

from harness.checkers.base import RunRecord, Verdict, checker, ok, unknown, violated
from harness.checkers.index import frozen
from harness.checkers.params import Params, PortReleased
from harness.history import Event
from harness.probes.model import Snapshot

TRANSIENT_THREADS = ("lastcall-cmd-",)  # command threads of the control channel come and go


def _pair(run: RunRecord) -> tuple[Snapshot, Snapshot] | None:
    before, after = run.snapshots.get("before"), run.snapshots.get("after")
    return None if before is None or after is None else (before, after)


def _new(before: list[tuple[str, int]], after: list[tuple[str, int]]) -> list[str]:
    """Names in ``after`` whose (name, inode) identity was not there ``before``: what the run left."""
    had = set(before)
    return [name for name, ino in after if (name, ino) not in had]


def _replacements(run: RunRecord) -> list[tuple[Event, str, int]]:
    """The files the harness put at a listener's path (``path_replaced`` with the replacement's inode)."""
    return [(e, str(e.data["path"]), int(e.data["ino"])) for e in run.of("path_replaced")
            if isinstance(e.data.get("ino"), int)]


@checker("no_leftover_paths", "no socket file, owner record or directory of the run is left under its root",
         judges=("path_replaced",), observes_exit=False)
def no_leftover_paths(run: RunRecord, p: Params) -> Verdict:
    snaps = _pair(run)
    if snaps is None:
        return unknown("no_leftover_paths", "no before/after snapshots")
    # the harness's own replacement of a socket file, and the directories kept because it is in them (a listener
    # removes its directory only once empty): the harness removes those itself
    after = {(e.path, e.ino) for e in snaps[1].paths}
    ours = {(path, ino) for _, path, ino in _replacements(run) if (path, ino) in after}
    inside = sorted(path for path, _ in ours)
    holding = {e.path for e in snaps[1].paths if e.kind == "dir" and _has_prefix(inside, e.path + "/")}
    left = _new([(e.path, e.ino) for e in snaps[0].paths],
                [(e.path, e.ino) for e in snaps[1].paths if (e.path, e.ino) not in ours and e.path not in holding])
    notes = tuple(f"{path}: the harness's own replacement (inode {ino}), left with its directories for the harness "
                  "to remove" for path, ino in sorted(ours))
    if left:
        return violated("no_leftover_paths", f"left behind: {left}", notes=notes)
    return ok("no_leftover_paths", notes=notes)


def _has_prefix(ordered: list[str], prefix: str) -> bool:
    """Whether a string of ``ordered`` (sorted) starts with ``prefix``: those that do sort together, first among
    those not before it."""
    i = bisect_left(ordered, prefix)
    return i < len(ordered) and ordered[i].startswith(prefix)


@checker("unlinks_only_own_socket", "a file that replaced the listener's socket at its path is still there after "
         "the run: teardown unlinks only the socket the listener bound (same inode)",
         judges=("path_replaced", "stale_socket_removed"), observes_exit=False)
def unlinks_only_own_socket(run: RunRecord, p: Params) -> Verdict:
    replaced = _replacements(run)
    if not replaced:
        return unknown("unlinks_only_own_socket", "no socket file was replaced (path_replaced with its inode)")
    bad: list[Event] = []
    notes: list[str] = []
    judged = 0
    afters = [s for label, s in sorted(run.snapshots.items()) if label.startswith("after")]
    held = [{(x.path, x.ino) for x in s.paths} for s in afters]  # each snapshot's paths, by identity
    removed = _Removals(run.of("stale_socket_removed"))
    for rep, path, ino in replaced:
        later = [i for i, s in enumerate(afters) if s.t_ns > rep.t_ns and _covers(s, path)]
        if not later:
            continue
        judged += 1
        gone = next((afters[i].label for i in later if (path, ino) not in held[i]), None)
        if gone is None:
            continue
        # a listener started later took the path over as a dead owner's leftover, and said so: not a theft
        took = removed.first_after(path, rep.t_ns)
        if took is not None:
            notes.append(f"{path}: removed as a stale socket by {took.data.get('listener')} when it started")
            continue
        bad.append(rep)
        notes.append(f"{path} (inode {ino}, put there by step {rep.data.get('step')}) is gone in snapshot "
                     f"{gone}")
    if not judged:
        return unknown("unlinks_only_own_socket", "no snapshot after the replacement of "
                       + ", ".join(sorted({path for _, path, _ in replaced})))
    if bad:
        return violated("unlinks_only_own_socket", "a socket file the listener did not bind was unlinked: "
                        + "; ".join(n for n in notes if "is gone" in n), bad, tuple(notes))
    return ok("unlinks_only_own_socket", f"{judged} replacement(s) still there after the run", tuple(notes))


class _Removals:
    """The stale_socket_removed events by path: the first (in the history's order) after a time, found in log n (the
    least place in the history over the removals of a path from each time on)."""

    def __init__(self, events: list[Event]) -> None:
        self.events = events
        self.times: dict[Hashable, list[int]] = {}
        self.first: dict[Hashable, list[int]] = {}  # the least place of the removals from the i-th on, by time
        by_path: dict[Hashable, list[int]] = {}
        for i, e in enumerate(events):
            by_path.setdefault(frozen(e.data.get("path")), []).append(i)
        for path, places in by_path.items():
            places.sort(key=lambda i: events[i].t_ns)
            self.times[path] = [events[i].t_ns for i in places]
            self.first[path] = list(accumulate(reversed(places), min))[::-1]

    def first_after(self, path: str, t: int) -> Event | None:
        times = self.times.get(frozen(path), [])
        i = bisect_right(times, t)
        return self.events[self.first[frozen(path)][i]] if i < len(times) else None


def _covers(snap: Snapshot, path: str) -> bool:
    """Whether ``snap`` looked at ``path``: its paths probe ran on a root above it (one that names no root, as a
    literal snapshot, is taken to cover every path it could list)."""
    if "root" not in snap.extra:
        return True
    root = snap.extra["root"]
    return root is not None and path.startswith(str(root).rstrip("/") + "/")


@checker("no_leftover_shm", "no /dev/shm segment of the run is left", observes_exit=False)
def no_leftover_shm(run: RunRecord, p: Params) -> Verdict:
    snaps = _pair(run)
    if snaps is None:
        return unknown("no_leftover_shm", "no before/after snapshots")
    left = _new([(e.name, e.ino) for e in snaps[0].shm], [(e.name, e.ino) for e in snaps[1].shm])
    if left:
        return violated("no_leftover_shm", f"left in /dev/shm: {left}")
    return ok("no_leftover_shm")


@checker("port_released", "nothing LISTENs on the run's ports and a bind with the server's options succeeds",
         judges=("handshake_listener_started",), observes_exit=False)
def port_released(run: RunRecord, p: PortReleased) -> Verdict:
    # every snapshot labelled after*: "after" (all reaped) and any taken mid-run once a stop returned
    afters = [snap for label, snap in sorted(run.snapshots.items()) if label.startswith("after")]
    if not afters:
        return unknown("port_released", "no after snapshot")
    ports = set(p.ports or ()) | {int(e.data["port"]) for e in run.of("handshake_listener_started")
                                  if e.data.get("port")}
    if not ports:
        return unknown("port_released", "no port to judge: the run bound none")
    listening = [(snap.label, s) for snap in afters for s in snap.sockets if s.port in ports and s.state == "LISTEN"]
    if listening:
        return violated("port_released", "still LISTENing: " + ", ".join(
            f"{s.local} held by pid {list(s.pids) or '?'} ({label})" for label, s in listening))
    failed = [b for snap in afters for b in snap.binds if b.port in ports and not b.ok]
    waits = [s for snap in afters for s in snap.sockets if s.port in ports and s.state == "TIME_WAIT"]
    notes = tuple(f"{s.local} in TIME_WAIT (reported, not a violation)" for s in waits)
    # TIME_WAIT excuses a failed bind only without SO_REUSEADDR: with it, TIME_WAIT cannot block a bind
    unexcused = [b for b in failed if b.reuseaddr or not waits]
    if unexcused:
        failed = unexcused
    if unexcused:
        return violated("port_released", "a trial bind failed: " + ", ".join(f"{b.port}: {b.error}" for b in failed),
                        notes=notes)
    return ok("port_released", f"ports {sorted(ports)} free", notes)


def _resources(run: RunRecord, when: str) -> dict[int, dict[str, object]]:
    return {e.pid: e.data for e in run.of("process_resources") if e.data.get("when") == when}


def _reports_of(run: RunRecord, pids: set[int]) -> list[Event]:
    return [e for e in run.of("process_resources") if e.pid in pids]


@checker("no_leaked_threads", "after a clean shutdown a process runs no thread it did not run before it started",
         judges=("process_resources",), observes_exit=False)
def no_leaked_threads(run: RunRecord, p: Params) -> Verdict:
    before, after = _resources(run, "before_start"), _resources(run, "after_shutdown")
    pairs = [(pid, before[pid], after[pid]) for pid in after if pid in before]
    if not pairs:
        return unknown("no_leaked_threads", "no process reported its threads before start and after shutdown")
    bad = []
    for pid, b, a in pairs:
        extra = Counter(str(t) for t in a["threads"]) - Counter(str(t) for t in b["threads"])  # type: ignore[attr-defined]
        names = [t for t in extra.elements() if not t.startswith(TRANSIENT_THREADS)]
        if names:
            bad.append(f"pid {pid}: {names}")
    if bad:
        return violated("no_leaked_threads", "threads left after shutdown: " + "; ".join(bad),
                        _reports_of(run, {x[0] for x in pairs}))
    return ok("no_leaked_threads", f"{len(pairs)} process(es) back to their threads before start")


@checker("no_leaked_fds", "after a clean shutdown a process holds no socket, pipe or epoll it did not hold before",
         judges=("process_resources",), observes_exit=False)
def no_leaked_fds(run: RunRecord, p: Params) -> Verdict:
    before, after = _resources(run, "before_start"), _resources(run, "after_shutdown")
    pairs = [(pid, before[pid], after[pid]) for pid in after if pid in before]
    if not pairs:
        return unknown("no_leaked_fds", "no process reported its fds before start and after shutdown")
    bad = []
    for pid, b, a in pairs:  # identity: the target (socket:[inode], pipe:[inode], anon_inode:[eventpoll])
        had = Counter(str(t) for _, _k, t in b["fds"])  # type: ignore[attr-defined]
        kinds = {str(t): str(k) for _, k, t in a["fds"]}  # type: ignore[attr-defined]
        has = Counter(str(t) for _, _k, t in a["fds"])  # type: ignore[attr-defined]
        extra = sorted(t for t in (has - had).elements() if kinds.get(t) in ("socket", "pipe", "anon"))
        if extra:
            bad.append(f"pid {pid}: {extra}")
    if bad:
        return violated("no_leaked_fds", "descriptors left after shutdown: " + "; ".join(bad),
                        _reports_of(run, {x[0] for x in pairs}))
    return ok("no_leaked_fds", f"{len(pairs)} process(es) hold no new socket, pipe or epoll")


@checker("no_orphan_processes", "every process of the run is gone: no survivor, no zombie, none reparented away",
         observes_exit=False)
def no_orphan_processes(run: RunRecord, p: Params) -> Verdict:
    after = run.snapshots.get("after")
    if after is None:
        return unknown("no_orphan_processes", "no after snapshot")
    harness_pids = set(after.harness_pids)
    mine = [pr for pr in after.procs if pr.pid not in harness_pids]
    if mine:
        return violated("no_orphan_processes", "still present after the run: " + ", ".join(
            f"pid {pr.pid} {pr.name} ({'zombie' if pr.state == 'Z' else 'ppid ' + str(pr.ppid)})" for pr in mine))
    return ok("no_orphan_processes")


@checker("gpu_memory_released", "no process of the run holds GPU memory; per-device use is back to the baseline",
         judges=("process_spawned",), observes_exit=True)
def gpu_memory_released(run: RunRecord, p: Params) -> Verdict:
    snaps = _pair(run)
    if snaps is None or snaps[1].gpu is None:
        return unknown("gpu_memory_released", "no GPU probe on this machine")
    spawned = {int(e.data["pid"]) for e in run.of("process_spawned")}
    holders = [g for g in snaps[1].gpu if g.pid in spawned]
    if holders:
        return violated("gpu_memory_released", "still holding GPU memory: " + ", ".join(
            f"pid {g.pid} on cuda:{g.device} ({g.used_bytes >> 20} MiB)" for g in holders))
    grown = {d: u - (snaps[0].gpu_used or {}).get(d, 0) for d, u in (snaps[1].gpu_used or {}).items()}
    over = {d: g for d, g in grown.items() if g > 64 << 20}
    if over:
        return violated("gpu_memory_released", f"device memory above the baseline: {over}")
    return ok("gpu_memory_released")
