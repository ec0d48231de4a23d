"""Tests of ``lastcall ctl``: list, delete and sweep real leftovers."""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cli import EXIT_OK, EXIT_USAGE, main
from harness.reference.ctl import delete_instance, list_instances, sweep, usage_owner_path
from harness.reference.paths import OwnerRecord, owner_path, socket_path, usage_segment_name
from harness.reference.registry import Registry
from harness.reference.usage import UsageRecord
from harness.reference.worker import ReferenceWorker, WorkerSpec

MiB = 1 << 20
SAFETY_S = 30.0  # safety net for a child that hangs; never reached when things work


@pytest.fixture
def root(lc_root: Path) -> str:
    """The plugin's short socket root (it fails the test if anything is left in it)."""
    return str(lc_root)


@pytest.fixture
def shm(tmp_path: Path) -> str:
    """A private stand-in for /dev/shm."""
    path = tmp_path / "shm"
    path.mkdir()
    return str(path)


@pytest.fixture
def live(root: str) -> Iterator[tuple[str, list[ReferenceWorker]]]:
    """A live instance served by this process: rank 0 in stage 0 and rank 1 in stage 1."""
    ipc = f"live{uuid.uuid4().hex[:6]}"
    registry = Registry()
    workers = [ReferenceWorker(WorkerSpec(ipc, rank=r, pp=r, root=root, capacity=64 * MiB), registry=registry)
               for r in (0, 1)]
    for w in workers:
        w.start()
    yield ipc, workers
    for w in workers:
        assert w.shutdown()


def dead_pid() -> int:
    """The pid of a child that has exited and been reaped."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def leftover(root: str, ipc: str, *, owner_pid: int | None) -> Path:
    """A socket file (bound, then closed) with an owner record naming ``owner_pid`` (None: no record)."""
    path = socket_path(ipc, 0, 0, root)
    path.parent.mkdir(mode=0o700, parents=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
    if owner_pid is not None:
        OwnerRecord(pid=owner_pid, start_ticks=1, ipc=ipc, kind="socket").write(owner_path(path))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_list_shows_live_instance(capsys: pytest.CaptureFixture[str], root: str, shm: str,
                                  live: tuple[str, list[ReferenceWorker]]) -> None:
    ipc, workers = live
    [inst] = list_instances(root, shm)
    assert (inst.ipc, inst.alive, [o.pid for o in inst.live_owners]) == (ipc, True, [os.getpid()])
    assert [(a.kind, a.rank, a.pp, str(a.path), a.state) for a in inst.artifacts] == [
        ("socket", 0, 0, workers[0].path, "alive"), ("socket", 1, 1, workers[1].path, "alive")]
    rc, out, _ = run(capsys, "ctl", "list", "--root", root, "--shm-dir", shm)
    assert rc == EXIT_OK
    rows = out.splitlines()
    assert re.fullmatch(r"kind +ipc +rank/pp +pid +state +path", rows[0])
    assert re.fullmatch(rf"socket +{ipc} +0/0 +{os.getpid()} +alive +{re.escape(workers[0].path)}", rows[1])
    assert re.fullmatch(rf"socket +{ipc} +1/1 +{os.getpid()} +alive +{re.escape(workers[1].path)}", rows[2])


def test_delete_refuses_live_owner_unless_forced(capsys: pytest.CaptureFixture[str], root: str, shm: str,
                                                 live: tuple[str, list[ReferenceWorker]]) -> None:
    ipc, workers = live
    rc, out, err = run(capsys, "ctl", "delete", ipc, "--root", root, "--shm-dir", shm)
    assert (rc, out) == (EXIT_USAGE, "")
    assert err == (f"lastcall: error: instance {ipc!r} is in use by live pid {os.getpid()}; stop it first, "
                   "or pass --force to delete it anyway\n")
    assert all(os.path.exists(w.path) for w in workers)
    rc, out, _ = run(capsys, "ctl", "delete", ipc, "--root", root, "--shm-dir", shm, "--force")
    assert rc == EXIT_OK
    assert f"removed {workers[0].path}\n" in out and f"removed {workers[1].path}\n" in out
    assert os.listdir(root) == []
    # the listeners still stop cleanly without their paths (stop contract line 7): the fixture asserts it


def test_killed_serve_is_dead_and_deleted(capsys: pytest.CaptureFixture[str], root: str, shm: str) -> None:
    ipc = f"k{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "serve", "--ipc", ipc, "--root", root,
                             "--capacity", "64MiB"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert select.select([proc.stdout], [], [], SAFETY_S)[0], "serve printed no path"
        path = proc.stdout.readline().strip()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=SAFETY_S)
    [inst] = list_instances(root, shm)
    [art] = inst.artifacts
    assert (art.kind, art.ipc, str(art.path), art.state, art.owner and art.owner.pid) == (
        "socket", ipc, path, "dead", proc.pid)
    rc, out, _ = run(capsys, "ctl", "list", "--root", root, "--shm-dir", shm)
    assert re.search(rf"^socket +{ipc} +0/0 +{proc.pid} +dead +{re.escape(path)}$", out, re.M)

    rc, out, _ = run(capsys, "ctl", "delete", ipc, "--root", root, "--shm-dir", shm)
    sock_dir = os.path.dirname(path)
    assert (rc, out) == (EXIT_OK, f"removed {path}\nremoved {sock_dir}/w0.owner\nremoved {sock_dir}\n")
    assert os.listdir(root) == []
    rc, out, _ = run(capsys, "ctl", "delete", ipc, "--root", root, "--shm-dir", shm)
    assert (rc, out) == (EXIT_OK, f"nothing to delete for {ipc}\n")


def test_sweep_removes_dead_keeps_live(capsys: pytest.CaptureFixture[str], root: str, shm: str,
                                       live: tuple[str, list[ReferenceWorker]]) -> None:
    ipc, _ = live
    dead = leftover(root, "gone", owner_pid=dead_pid())
    orphan = leftover(root, "norecord", owner_pid=None)
    states = {i.ipc: [a.state for a in i.artifacts] for i in list_instances(root, shm)}
    assert states == {ipc: ["alive", "alive"], "gone": ["dead"], "norecord": ["unknown"]}
    rc, out, _ = run(capsys, "ctl", "sweep", "--root", root, "--shm-dir", shm)
    assert rc == EXIT_OK
    assert out.splitlines() == [
        f"removed {dead}", f"removed {owner_path(dead)}", f"removed {dead.parent}",
        f"removed {orphan}", f"removed {orphan.parent}",
        f"kept {ipc} (live pid {os.getpid()})",
    ]
    assert [i.ipc for i in list_instances(root, shm)] == [ipc]
    rc, out, _ = run(capsys, "ctl", "sweep", "--root", root, "--shm-dir", shm)
    assert out == f"kept {ipc} (live pid {os.getpid()})\nnothing to sweep\n"


def test_usage_segments(capsys: pytest.CaptureFixture[str], root: str, shm: str) -> None:
    ipc = f"u{uuid.uuid4().hex[:8]}"
    name = usage_segment_name(ipc)
    owner = usage_owner_path(shm, name)
    assert owner == Path(shm) / f"{name}.owner"
    rec = UsageRecord.create(name, total=MiB, shm_dir=shm)
    try:
        OwnerRecord.for_self(ipc, "usage").write(owner)
        sock = leftover(root, ipc, owner_pid=dead_pid())  # the same instance's socket dir, by key
        [inst] = list_instances(root, shm)
        assert [(a.kind, a.state) for a in inst.artifacts] == [("socket", "dead"), ("usage", "alive")]
        rc, out, _ = run(capsys, "ctl", "list", "--root", root, "--shm-dir", shm)
        assert re.search(rf"^usage +{ipc} +- +{os.getpid()} +alive +{re.escape(rec.path)}$", out, re.M)
        with pytest.raises(Exception, match=f"in use by live pid {os.getpid()}"):
            delete_instance(ipc, root, shm)
        assert sweep(root, shm).removed == []
    finally:
        rec.close()
    OwnerRecord(pid=dead_pid(), start_ticks=1, ipc=ipc, kind="usage").write(owner)
    rc, out, _ = run(capsys, "ctl", "delete", ipc, "--root", root, "--shm-dir", shm)
    assert (rc, out.splitlines()) == (EXIT_OK, [
        f"removed {rec.path}", f"removed {owner}",
        f"removed {sock}", f"removed {owner_path(sock)}", f"removed {sock.parent}"])
    assert os.listdir(shm) == [] and os.listdir(root) == []


def test_usage_segment_without_owner_is_unknown_and_swept(capsys: pytest.CaptureFixture[str], root: str,
                                                          shm: str) -> None:
    name = usage_segment_name("stray")
    UsageRecord.create(name, total=MiB, shm_dir=shm).close()
    [inst] = list_instances(root, shm)
    assert [(a.kind, a.ipc, a.state, a.owner) for a in inst.artifacts] == [("usage", "stray", "unknown", None)]
    assert sweep(root, shm).removed == [Path(shm) / name]
    assert os.listdir(shm) == []
    rc, out, _ = run(capsys, "ctl", "list", "--root", root, "--shm-dir", shm)
    assert (rc, out) == (EXIT_OK, f"no lastcall instances under {root} or in {shm}\n")


def test_delete_reports_a_path_it_cannot_remove(capsys: pytest.CaptureFixture[str], root: str, shm: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    sock = leftover(root, "theirs", owner_pid=dead_pid())
    real_unlink = Path.unlink

    def refuse(self: Path, missing_ok: bool = False) -> None:
        if self.name == "w0.owner":
            raise PermissionError(13, "Permission denied")
        real_unlink(self, missing_ok)

    monkeypatch.setattr(Path, "unlink", refuse)
    rc, out, err = run(capsys, "ctl", "delete", "theirs", "--root", root, "--shm-dir", shm)
    assert (rc, out) == (EXIT_USAGE, "")
    assert err == (f"lastcall: error: cannot remove {owner_path(sock)}: Permission denied "
                   "(removed 1 path before it); is it another user's?\n")
    monkeypatch.undo()
    shutil.rmtree(owner_path(sock).parent)  # what the refused delete had to leave
