"""Catches items played N at a time (harness.scenario.overlap): each judged as alone, nothing left on ^C.

The soundness of it is the probes': runs that share a process are told apart by process group.  A run beside a
run whose planted bug leaves a child behind is judged on its own processes (and, with the exclusion undone, it
is not: the leaked child is blamed on it).  The plugin part: the next catches items start beside the first, each
item takes its own result, and JUnit says which item played it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.launch import cluster as cluster_mod
from harness.launch.spawn import become_subreaper
from harness.probes.procs import processes, read_stat
from harness.probes.snapshot import for_cluster
from harness.scenario.catches import resolve
from harness.scenario.loader import expand, load
from harness.scenario.overlap import _join, _Run
from harness.scenario.runner import run_item
from harness.targets import load_target
from tests.test_sigterm import PARKED  # a map parked in the backend, its wait 120 s

ROOT = Path(__file__).resolve().parent.parent
SAFETY_S = 60.0  # safety nets only: every wait below ends on an event


def _sleeper(group: int | None) -> subprocess.Popen[bytes]:
    """A child that waits on its stdin (ended by closing it), in a new process group (0) or this one (None)."""
    return subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                            process_group=group)


def _end(*procs: subprocess.Popen[bytes]) -> None:
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()
        p.wait(SAFETY_S)


def test_the_probe_leaves_out_another_runs_engine_session_even_an_orphan_in_a_group_of_its_own() -> None:
    """An engine tree is launched into a session of its own (harness.engine.tree).  A process of it that left
    its group and whose parent died (reparented to the harness, the subreaper) is below no pid of that run
    and in no group of it: the session alone says whose it is."""
    become_subreaper()
    leader = subprocess.Popen(  # starts its child and exits; the child, in a new group, says its pid, reads stdin
        [sys.executable, "-c", "import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
         "'import os, sys; os.setpgid(0, 0); print(os.getpid(), flush=True); sys.stdin.read()'])"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    assert leader.stdout is not None and leader.stdin is not None
    orphan = int(leader.stdout.readline())
    try:
        leader.wait(SAFETY_S)
        st = read_stat(orphan)
        assert st is not None and st.sid == leader.pid and st.pgid != leader.pid and st.ppid == os.getpid()
        alone = {p.pid for p in processes(descendants_of=os.getpid(), fds=False, threads=False)}
        assert orphan in alone
        beside = {p.pid for p in processes(descendants_of=os.getpid(), fds=False, threads=False,
                                           foreign_sids={leader.pid})}
        assert orphan not in beside
    finally:
        leader.stdin.close()  # the orphan's stdin too: it reads EOF and exits; reaped here, its subreaper
        leader.stdout.close()
        os.waitpid(orphan, 0)


def test_the_probe_leaves_out_other_runs_groups_what_is_below_them_and_the_shared_group() -> None:
    mine, theirs, shared = _sleeper(0), _sleeper(0), _sleeper(None)
    try:
        below_theirs = subprocess.Popen(  # a grandchild in their group: left out with them
            [sys.executable, "-c", "import os, sys; os.setpgid(0, 0); sys.stdin.read()"], stdin=subprocess.PIPE)
        try:
            everything = {p.pid for p in processes(descendants_of=os.getpid(), fds=False, threads=False)}
            assert {mine.pid, theirs.pid, shared.pid, below_theirs.pid} <= everything  # alone: nothing left out
            got = {p.pid for p in processes(descendants_of=os.getpid(), fds=False, threads=False,
                                            foreign_pgids={theirs.pid}, foreign_pids={below_theirs.pid},
                                            shared_pgids={os.getpgrp()})}
            assert mine.pid in got
            assert not {theirs.pid, below_theirs.pid, shared.pid} & got
            # a run's own group and pids always stay, even where another rule would leave them out
            own = {p.pid for p in processes(pids=[shared.pid], pgids=[theirs.pid], descendants_of=os.getpid(),
                                            fds=False, threads=False, foreign_pgids={theirs.pid},
                                            shared_pgids={os.getpgrp()})}
            assert {shared.pid, theirs.pid} <= own
        finally:
            _end(below_theirs)
    finally:
        _end(mine, theirs, shared)


@pytest.mark.parametrize("isolated", [True, False], ids=["by-group", "exclusion-undone"])
def test_a_run_beside_a_leaking_run_is_judged_on_its_own_processes(isolated: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The leaking run (leaks_a_child: a helper of its worker outlives it) is held at its after snapshot, its
    leaked child alive, while a clean run of the same scenario plays beside it from start to end."""
    if not isolated:  # the planted defect of the probes: every descendant of the harness is the run's
        monkeypatch.setattr(cluster_mod, "others_live", lambda cluster: cluster_mod.Others())
    item = expand(load(str(ROOT / "scenarios" / "nothing-outlives-the-run.yaml")))[0]
    spec, why = resolve(load_target("reference"), "leaks_a_child")
    assert spec is not None, why
    at_after, clean_done = threading.Event(), threading.Event()

    def held(cl: cluster_mod.Cluster, label: str) -> object:
        if label == "after":
            at_after.set()
            clean_done.wait(SAFETY_S)
        return for_cluster(cl, label)

    leaker = _Run(item, "test")
    leaker.thread = threading.Thread(
        target=lambda: setattr(leaker, "result", run_item(item, variant=spec, snapshot=held)), daemon=True)
    leaker.thread.start()
    try:
        assert at_after.wait(SAFETY_S)
        clean = run_item(item)
    finally:
        clean_done.set()
        _join([leaker], "test")
    assert "no_orphan_processes" in {v.checker for v in leaker.result.violated}  # its own bug, caught
    orphans = next(v for v in clean.verdicts if v.checker == "no_orphan_processes")
    if isolated:
        assert clean.passed, [str(v) for v in clean.violated]
        assert orphans.status == "ok"
    else:
        assert orphans.status == "violated" and "sleep" in orphans.message, orphans




def _parked(text: str, tmp_path: Path) -> tuple[_Run, cluster_mod.Cluster]:
    """A run of the scenario ``text`` started on a thread (a _Run, as overlap plays one), once its cluster exists."""
    path = tmp_path / "parked.yaml"
    path.write_text(text)
    clusters: list[cluster_mod.Cluster] = []
    made = threading.Event()
    run = _Run(expand(load(str(path)))[0], "test")

    def play() -> None:
        try:
            run.result = run_item(run.item, on_cluster=lambda c: (clusters.append(c), made.set()))
        except BaseException as exc:
            run.error = exc
        finally:
            made.set()

    run.thread = threading.Thread(target=play, daemon=True)
    run.thread.start()
    assert made.wait(SAFETY_S)
    assert run.error is None and len(clusters) == 1, run.error
    return run, clusters[0]


ENGINE_PARKED = """\
name: engine-parked
about: the stand-in engine, ready and left alone; it waits for its tree to be gone, which only an interrupt does
target: engine_standin
catches: [engine_ignores_sigterm]
steps:
  - start: engine
  - wait_gone: {timeout: 60s, as: gone}
expect:
  - engine_tree_exits: {within: 60s}
"""


@pytest.mark.parametrize("isolated", [True, False], ids=["by-session", "exclusion-undone"])
def test_a_run_beside_a_live_engine_tree_is_judged_on_its_own_processes(isolated: bool, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine run (the stand-in's tree, a session of its own, a child of this process) is parked with its
    tree ready while a clean run of nothing-outlives-the-run plays beside it from start to end; then it is
    interrupted.  The clean run's probes leave the tree out; with the exclusion undone they blame it on it."""
    if not isolated:
        monkeypatch.setattr(cluster_mod, "others_live", lambda cluster: cluster_mod.Others())
    run, c = _parked(ENGINE_PARKED, tmp_path)
    try:
        parked = c.rec.wait_for(lambda e: e.kind == "step_started" and e.data.get("step") == "gone", SAFETY_S)
        assert parked is not None  # ready, and parked
        assert c.sessions, "its tree claimed its session"
        clean = run_item(expand(load(str(ROOT / "scenarios" / "nothing-outlives-the-run.yaml")))[0])
    finally:
        c.interrupt()
        _join([run], "test")
    assert run.error is None, run.error
    orphans = next(v for v in clean.verdicts if v.checker == "no_orphan_processes")
    if isolated:
        assert clean.passed, [str(v) for v in clean.violated]
        assert orphans.status == "ok"
    else:
        assert orphans.status == "violated", orphans


def test_an_interrupt_ends_a_run_beside_it_and_leaves_nothing(tmp_path: Path) -> None:
    """What the first item does on ^C to each run beside it (Cluster.interrupt): the run's wait ends at once,
    its processes are killed, and its own close reaps them and removes what it made."""
    run, c = _parked(PARKED, tmp_path)
    try:
        assert c.rec.wait_for("fault_reached", SAFETY_S) is not None  # parked: only the 120 s wait is left
        c.interrupt()
    finally:
        _join([run], "test")
    assert not run.thread.is_alive()
    r = run.result
    # its wait ended at the interrupt, not at 120 s: as a timeout (the history's waits end at once), or with the
    # parked call back, failed, its worker killed (whichever the player met first: both are the interrupt's)
    killed_call = [e for e in r.events if e.kind == "step_returned" and e.data.get("step") == "m1"
                   and not e.data.get("ok")]
    assert r.seconds < 60 and (r.step_error or killed_call), (r.step_error, r.seconds, killed_call)
    assert not c.root.exists() and not [p for p in r.outcome.leftovers if os.path.lexists(p)]  # removed at close
    assert all(not p.alive for p in c._procs.values())
    with cluster_mod.SPAWN_LOCK:
        assert c not in cluster_mod._LIVE


def _junit(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], ET.Element]:
    xml = tmp_path / "junit.xml"
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider",
                          "--lastcall-reports=", f"--junitxml={xml}", *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    return out, ET.parse(xml).getroot()


def test_off_by_default_and_a_bad_width_is_a_usage_error(tmp_path: Path) -> None:
    out, root = _junit(tmp_path, "scenarios/stalled-read-is-cancelled.yaml", "-o", "lastcall_overlap=1", "-q")
    assert out.returncode == 0, out.stdout[-3000:]
    assert not [p for p in root.iter("property") if p.get("name") == "lastcall_overlapped_with"]
    bad = subprocess.run([sys.executable, "-m", "pytest", "scenarios/stalled-read-is-cancelled.yaml", "-p",
                          "no:cacheprovider", "-o", "lastcall_overlap=lots"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 4, bad.stdout + bad.stderr
    assert "lastcall_overlap = 'lots': expected a whole number from 1 to 32" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_an_engine_catches_item_overlaps_unless_its_target_is_exclusive() -> None:
    """The stand-in's planted bugs overlap (their trees claim their sessions); real vLLM does not (one engine at
    a time on the machine, under its engine lock)."""
    from harness.scenario.overlap import eligible

    matrix = expand(load(str(ROOT / "scenarios" / "engine-sigterm-idle.yaml")))[0]

    def item(variant: str) -> object:
        return SimpleNamespace(matrix=matrix, catch=(variant, ()), chain=None, variant=variant,
                               nodeid=f"scenarios/engine-sigterm-idle.yaml::x[{variant}]",
                               get_closest_marker=lambda name: None)

    assert eligible(item("engine_keeps_child"))
    assert not eligible(item("vllm_engine"))


DECLARED = """\
import pytest


@pytest.mark.lastcall_catches_run("scenarios/stalled-read-is-cancelled.yaml", target="no_conn_tracking")
def test_declared(lastcall_catches_run):
    assert not lastcall_catches_run.passed and lastcall_catches_run.variant == "no_conn_tracking"


def test_undeclared(lastcall_catches_run):
    pass
"""


def test_the_next_catches_items_and_a_declared_test_play_beside_the_first_each_taking_its_own_result(
        tmp_path: Path) -> None:
    """Three catches items of three scenarios with their reference items between them, then a test function
    marked lastcall_catches_run, overlap 4: the first catches item plays the other two and the test function's
    run beside it; each takes its own result (a run each, judged as alone: the test function's run caught its
    bug); the reference items run alone.  The fixture without the mark is the test's own error, which names
    the mark.  (One sub-session for both: each was a pytest start and a wait of its own.)"""
    test_file = tmp_path / "test_declared.py"
    test_file.write_text(DECLARED)
    out, root = _junit(tmp_path, "scenarios/stalled-read-is-cancelled.yaml",
                       "scenarios/socket-file-removed-while-live.yaml",
                       "scenarios/stop-from-a-handler-returns-at-once.yaml", str(test_file),
                       "--lastcall-overlap", "4", "-q", "-m", "not gpu", "--rootdir", str(ROOT))
    assert out.returncode == 1, out.stdout[-3000:]  # test_undeclared's error, alone
    cases = {f"{c.get('classname')}::{c.get('name')}": c for c in root.iter("testcase")}
    props = {k: {p.get("name"): p.get("value") for p in c.iter("property")} for k, c in cases.items()}
    runs = {k: p for k, p in props.items() if "lastcall_run_id" in p}  # the runs (not a skipped CUDA point)
    catches = sorted(k for k in runs if "-catches-" in k)
    leaders = [k for k in catches if "lastcall_overlapped_with" not in runs[k]]
    assert len(catches) == 3 and len(leaders) == 1, runs
    leader = leaders[0]
    assert "stalled-read-is-cancelled" in leader, leader  # the first in the session's order
    for k in catches:
        if k != leader:
            assert runs[k]["lastcall_overlapped_with"].split("::")[-1] == leader.split("::")[-1], runs[k]
    assert not any("lastcall_overlapped_with" in p for k, p in runs.items() if "-catches-" not in k)
    assert len({p["lastcall_run_id"] for p in runs.values()}) == len(runs)  # a run each
    [declared] = [k for k in cases if k.endswith("::test_declared")]
    assert not [c.tag for c in cases[declared] if c.tag in ("failure", "error", "skipped")], "its run caught its bug"
    assert props[declared].get("lastcall_overlapped_with", "").split("::")[-1] == leader.split("::")[-1], props
    [undeclared] = [k for k in cases if k.endswith("::test_undeclared")]
    [error] = [c for c in cases[undeclared] if c.tag == "error"]
    assert "@pytest.mark.lastcall_catches_run(SCENARIO, target=T)" in (error.get("message") or "") + (error.text or "")


def test_the_longest_runs_are_played_first_and_brought_to_the_front_of_the_workers_queue(tmp_path: Path) -> None:
    """longest_first: by the committed durations, an item they do not name first (it may be the longest), the
    queue's order among equals and without the file.  bring_forward: under xdist, the played items move to the
    front of the worker's queue in their order (work stealing takes the end of it), the rest keep theirs."""
    import collections
    import contextlib
    import json

    from harness.scenario.overlap import bring_forward, longest_first

    names = ["a", "b", "c", "d", "e"]
    items = [SimpleNamespace(nodeid=n) for n in names]
    (tmp_path / ".test_durations").write_text(json.dumps({"a": 0.5, "b": 3.0, "c": 0.5, "e": 2.0}))

    def leader(root: Path) -> Any:
        return SimpleNamespace(config=SimpleNamespace(stash=pytest.Stash(), rootpath=root))

    assert [c.nodeid for c in longest_first(leader(tmp_path), items, 3)] == ["d", "b", "e"]
    assert [c.nodeid for c in longest_first(leader(tmp_path), items, 5)] == ["d", "b", "e", "a", "c"]
    assert [c.nodeid for c in longest_first(leader(tmp_path / "none"), items, 3)] == ["a", "b", "c"]

    queue: collections.deque[Any] = collections.deque([1, 2, 3, 4, 5, "shutdown"])

    @contextlib.contextmanager
    def lock() -> Any:
        yield queue

    session = SimpleNamespace(items=[SimpleNamespace(nodeid=f"i{n}") for n in range(6)])
    worker = SimpleNamespace(torun=SimpleNamespace(lock=lock), session=session, nextitem_index=1)
    item = SimpleNamespace(session=session, config=SimpleNamespace(
        pluginmanager=SimpleNamespace(get_plugins=lambda: [object(), worker])))
    bring_forward(item, [session.items[5], session.items[3]])  # type: ignore[arg-type]
    assert list(queue) == [3, 5, 1, 2, 4, "shutdown"]
    worker.session = SimpleNamespace(items=[])  # another session's worker: nothing moves
    bring_forward(item, [session.items[2]])  # type: ignore[arg-type]
    assert list(queue) == [3, 5, 1, 2, 4, "shutdown"]


@pytest.mark.parametrize(("marks", "plays"), [
    ([], True),
    ([pytest.mark.skipif(False, reason="runs")], True),
    ([pytest.mark.skipif(condition=False, reason="runs")], True),
    ([pytest.mark.skipif(False, reason="runs"), pytest.mark.skipif(True, reason="skips")], False),
    ([pytest.mark.skipif("sys.platform == 'linux'", reason="a string: evaluated by pytest, not here")], False),
    ([pytest.mark.skipif(reason="no condition: always skips")], False),
])
def test_a_skipif_whose_condition_is_plainly_false_keeps_an_item_playable(marks: list[Any], plays: bool) -> None:
    """``@needs_kvcached`` (a skipif whose condition is False where kvcached's source is cached) kept
    test_kvcached_016_cannot_stop_once_its_socket_file_is_removed out of every batch: it ran alone, 7 s."""
    from harness.scenario.overlap import _skipif_false

    item = SimpleNamespace(iter_markers=lambda name: [m.mark for m in marks if m.mark.name == name])
    assert _skipif_false(item) is plays
