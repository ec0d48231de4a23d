"""The probes against the real machine: sockets, binds, processes, zombies, paths, shm, leftovers.

No sleeps: children say they are ready on a pipe; kernel state changes that
follow an event asynchronously (a zombie appearing, TIME_WAIT) are awaited by
re-reading /proc in a bounded loop.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from lc_helpers import exited, until

from harness.launch.snapshots import for_cluster
from harness.leftovers import session_leftovers
from harness.probes.fs import paths_under, shm_entries
from harness.probes.gpu import gpu_processes
from harness.probes.model import Snapshot
from harness.probes.net import decode_addr, sockets, trial_bind
from harness.probes.procs import classify_fd, proc_entry, processes, read_stat, reparented_away
from harness.probes.snapshot import take
from harness.reference.paths import OwnerRecord

ME = os.getpid()


@pytest.fixture
def blocker() -> Iterator[subprocess.Popen[bytes]]:
    """A python child that says 'ready' and blocks reading its stdin (a pipe)."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    yield child
    assert child.stdin is not None
    child.stdin.close()
    child.wait()
    child.stdout.close()


# ---------------------------------------------------------------- sockets
def test_decode_addr() -> None:
    assert decode_addr("0100007F:1F90") == ("127.0.0.1", 8080)
    assert decode_addr("00000000000000000000000001000000:0016") == ("::1", 22)


def test_listening_tcp_socket_shows_with_our_pid() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        found = [e for e in sockets(pids=[ME], ports=[port]) if e.port == port]
        assert [(e.proto, e.state, e.local) for e in found] == [("tcp", "LISTEN", f"127.0.0.1:{port}")]
        assert found[0].pids == (ME,)
        # attributed by a full scan when the holder is not among the given pids
        assert [e.pids for e in sockets(ports=[port])] == [(ME,)]
        # a LISTENing socket blocks every bind
        assert not trial_bind("127.0.0.1", port).ok
        refused = trial_bind("127.0.0.1", port, reuseaddr=True)
        assert not refused.ok and refused.error.startswith("EADDRINUSE") and refused.reuseaddr


def _time_wait_port(listener_reuseaddr: bool) -> int:
    """A port whose server side closed first: the server's end is in TIME_WAIT, nothing listens."""
    with socket.socket() as lst:
        if listener_reuseaddr:
            lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind(("127.0.0.1", 0))
        lst.listen()
        port = int(lst.getsockname()[1])
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = lst.accept()
    server.close()  # the side that closes first gets TIME_WAIT
    assert client.recv(1) == b""
    client.close()
    until(lambda: any(e.state == "TIME_WAIT" for e in sockets(ports=[port])))
    return port


def test_time_wait_reported_and_trial_bind_with_server_options() -> None:
    # a server like libzmq's listener (SO_REUSEADDR set): only TIME_WAIT is left on the port
    port = _time_wait_port(listener_reuseaddr=True)
    entries = sockets(ports=[port])
    assert {e.state for e in entries if e.port == port} == {"TIME_WAIT"}
    assert all(e.inode == 0 and e.pids == () for e in entries)  # the kernel holds a TIME_WAIT, no process
    plain = trial_bind("127.0.0.1", port)
    assert not plain.ok and plain.error.startswith("EADDRINUSE")  # without SO_REUSEADDR, TIME_WAIT blocks
    assert trial_bind("127.0.0.1", port, reuseaddr=True).ok  # with the server's own options it rebinds


def test_time_wait_of_a_plain_listener_blocks_even_reuseaddr() -> None:
    # Linux wants SO_REUSEADDR on both sockets: a TIME_WAIT left by a listener without it blocks every bind
    port = _time_wait_port(listener_reuseaddr=False)
    assert not trial_bind("127.0.0.1", port).ok
    assert not trial_bind("127.0.0.1", port, reuseaddr=True).ok


def test_trial_bind_never_raises() -> None:
    bad = trial_bind("no-such-host.invalid", 1)
    assert not bad.ok and bad.error


def test_unix_listening_socket_under_root(tmp_path: Path) -> None:
    path = str(tmp_path / "w0.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(path)
        s.listen()
        for found in (sockets(unix_under=str(tmp_path)), sockets(pids=[ME], unix_under=str(tmp_path))):
            assert [(e.proto, e.state, e.local, e.pids) for e in found] == [("unix", "LISTEN", path, (ME,))]
    assert sockets(unix_under=str(tmp_path)) == ()


# -------------------------------------------------------------- processes
def test_child_with_threads_and_fds_by_type(blocker: subprocess.Popen[bytes]) -> None:
    (entry,) = processes(pids=[blocker.pid])
    assert entry.pid == blocker.pid and entry.ppid == ME and entry.state in "RS"
    assert entry.start_ticks > 0 and entry.name.startswith("python") and "sys.stdin.read()" in entry.cmdline
    assert entry.threads and entry.name in entry.threads
    by_fd = {fd.fd: fd for fd in entry.fds}
    assert by_fd[0].kind == "pipe" and by_fd[0].target.startswith("pipe:[")
    assert by_fd[1].kind == "pipe"
    assert blocker.pid in {p.pid for p in processes(descendants_of=ME)}


def test_classify_fd() -> None:
    assert [classify_fd(t) for t in ("socket:[1]", "pipe:[2]", "anon_inode:[eventfd]", "anon_inode:[eventpoll]",
                                     "/dev/null", "/dev/shm/x", "/tmp/a (deleted)", "net:[4026531840]")] == \
        ["socket", "pipe", "anon", "anon", "dev", "file", "file", "other"]


def test_gone_process_is_none() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    assert proc_entry(child.pid) is None and processes(pids=[child.pid]) == ()


def test_zombie_is_seen_then_reaped() -> None:
    child = subprocess.Popen(["true"], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.read() == b""  # EOF: it is exiting; not reaped yet
    exited(child.pid)  # its pidfd is readable once it has exited: a zombie until we reap it
    assert (st := read_stat(child.pid)) is not None and st.state == "Z", st
    snap = take("z", pids=[child.pid], gpu=False)
    (entry,) = snap.procs
    assert entry.state == "Z" and entry.fds == () and snap.extra["zombies"] == [child.pid]
    child.wait()
    child.stdout.close()
    assert take("z", pids=[child.pid], gpu=False).procs == ()


GRANDPARENT = """
import os, subprocess, sys
g = subprocess.Popen([sys.executable, '-c', 'import os; print("up", flush=True); os.read({r}, 1)'],
                     pass_fds=[{r}], stdout=subprocess.PIPE)
assert g.stdout.readline() == b"up\\n"
print(g.pid, flush=True)
sys.stdin.read()
"""


def test_descendants_pgid_and_reparented_away() -> None:
    r, w = os.pipe()
    child = subprocess.Popen([sys.executable, "-c", GRANDPARENT.format(r=r)], pass_fds=[r], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, start_new_session=True)
    os.close(r)
    grandchild = 0
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        tree = {p.pid: p for p in processes(descendants_of=ME)}
        assert tree[grandchild].ppid == child.pid and tree[child.pid].ppid == ME
        group = processes(pgids=[child.pid])
        assert {p.pid for p in group} == {child.pid, grandchild}
        assert reparented_away(group, [child.pid], []) == (child.pid,)  # its parent (us) is no run process
        assert reparented_away(group, [child.pid], [ME]) == ()  # ... unless we are a harness helper
        child.kill()
        child.wait()
        # reaped, so its exit is done, and the kernel reparents a process's children as it exits (before its
        # parent can reap it): the grandchild's parent is already another
        assert (st := read_stat(grandchild)) is not None and st.ppid != child.pid, st
        snap = take("after", pgids=[child.pid], gpu=False)  # its new parent: init, or us if we are a subreaper
        assert [p.pid for p in snap.procs] == [grandchild] and snap.extra["reparented_away"] == [grandchild]
    finally:
        os.close(w)  # the grandchild's read returns: it exits
        if child.poll() is None:
            child.kill()
            child.wait()
        if grandchild:
            try:
                os.waitpid(grandchild, 0)  # reparented to us if this process is a subreaper
            except ChildProcessError:
                pass  # init reaps it
        for f in (child.stdin, child.stdout):
            if f is not None:
                f.close()


# ------------------------------------------------------------ paths, shm
def test_paths_under(tmp_path: Path) -> None:
    assert paths_under(tmp_path / "missing") == ()
    (tmp_path / "d" / "pp1").mkdir(parents=True)
    (tmp_path / "d" / "w0.owner").write_text("{}")
    (tmp_path / "link").symlink_to(tmp_path / "d")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "d" / "pp1" / "w1.sock"))
        found = [(str(Path(p.path).relative_to(tmp_path)), p.kind) for p in paths_under(tmp_path)]
    assert found == [("d", "dir"), ("d/pp1", "dir"), ("d/pp1/w1.sock", "socket"), ("d/w0.owner", "file"),
                     ("link", "link")]  # the link is not followed


def test_shm_entries(tmp_path: Path) -> None:
    (tmp_path / "lastcall-usage-rabc-12345678").write_bytes(b"x" * 24)
    (tmp_path / "lastcall-usage-rabc-12345678.owner").write_text("{}")
    (tmp_path / "other").write_text("")
    assert [(e.name, e.size) for e in shm_entries(tmp_path, "rabc")] == \
        [("lastcall-usage-rabc-12345678", 24), ("lastcall-usage-rabc-12345678.owner", 2)]
    assert len(shm_entries(tmp_path)) == 3 and shm_entries(tmp_path / "nope", "x") == ()
    assert all(e.ino > 0 for e in shm_entries(tmp_path))


# ------------------------------------------------------------------- gpu
def test_gpu_probe_never_raises() -> None:
    result = gpu_processes()
    if importlib.util.find_spec("pynvml") is None:
        assert result is None
    else:
        assert result is None or isinstance(result[1], dict)


# ------------------------------------------------------------- snapshots
def test_snapshot_round_trip(tmp_path: Path, blocker: subprocess.Popen[bytes]) -> None:
    (tmp_path / "f").write_text("x")
    with socket.socket() as s, socket.socket(socket.AF_UNIX) as u:
        s.bind(("127.0.0.1", 0))
        s.listen()
        u.bind(str(tmp_path / "u.sock"))
        u.listen()
        snap = take("before", root=tmp_path, pids=[blocker.pid, ME], ports=[s.getsockname()[1]],
                    unix_under=tmp_path, shm_match="lastcall", gpu=False)
    assert snap.procs and snap.sockets and snap.binds and snap.paths and not snap.binds[0].ok
    assert {e.state for e in snap.sockets if e.proto == "unix" and e.local.startswith(str(tmp_path))} == {"LISTEN"}
    data = json.loads(json.dumps(snap.to_dict()))
    assert Snapshot.from_dict(data) == snap
    with_gpu = Snapshot(label="g", t_ns=1, gpu=(), gpu_used={0: 5})
    assert Snapshot.from_dict(json.loads(json.dumps(with_gpu.to_dict()))) == with_gpu


def test_take_empty_selection() -> None:
    snap = take("empty", gpu=False)
    assert (snap.paths, snap.shm, snap.sockets, snap.procs, snap.binds, snap.errors) == ((),) * 6
    assert snap.gpu is None and snap.extra["zombies"] == [] and snap.extra["took_ms"] >= 0


def test_for_cluster_wiring(tmp_path: Path, blocker: subprocess.Popen[bytes]) -> None:
    root = tmp_path / "r"
    root.mkdir()
    with socket.socket(socket.AF_UNIX) as u:
        u.bind(str(root / "w0.sock"))
        u.listen()
        fake = SimpleNamespace(root=root, ipc="rnone-such", shm_dir=str(tmp_path), pgid=0, _lock=threading.Lock(),
                               _procs={blocker.pid: None})
        snap = for_cluster(fake, "before", gpu=False)  # type: ignore[arg-type]
    assert blocker.pid in {p.pid for p in snap.procs}
    assert [(e.local, e.pids) for e in snap.sockets if e.proto == "unix" and e.local.startswith(str(root))] == \
        [(str(root / "w0.sock"), (ME,))]
    assert [p.path for p in snap.paths] == [str(root / "w0.sock")]


def test_session_leftovers(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    dead = OwnerRecord(pid=ME, start_ticks=-1, ipc="gone", kind="socket")
    alive = OwnerRecord.for_self("live", "socket")
    (tmp_path / "lc-empty").mkdir()  # no owner at all: listed
    busy = tmp_path / "lc-busy"
    busy.mkdir()
    for name, rec in (("lastcall-tp-gone-00000000", dead), ("lastcall-tp-live-11111111", alive)):
        (tmp_path / name).mkdir()
        rec.write(tmp_path / name / "w0.owner")
    (shm / "lastcall-usage-gone-00000000").write_bytes(b"\0" * 24)
    OwnerRecord(pid=ME, start_ticks=-1, ipc="gone", kind="usage").write(shm / "lastcall-usage-gone-00000000.owner")
    with socket.socket(socket.AF_UNIX) as u:
        u.bind(str(busy / "c.sock"))
        u.listen()  # a live control socket: the run is alive
        found = session_leftovers(tmp_path, shm)
    assert found == sorted([str(tmp_path / "lc-empty"), str(tmp_path / "lastcall-tp-gone-00000000"),
                            str(shm / "lastcall-usage-gone-00000000")])
    assert str(busy) in session_leftovers(tmp_path, shm)  # nobody listens any more


def test_errors_are_recorded_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "locked" / "inner").mkdir(parents=True)
    (tmp_path / "open").mkdir()
    real = os.scandir

    def scandir(path: Any) -> Any:  # as root, permissions are not enforced: simulate another user's dir
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    errors: list[str] = []
    assert [Path(p.path).name for p in paths_under(tmp_path, errors)] == ["locked", "open"]
    assert errors == [f"paths_under {tmp_path / 'locked'}: Permission denied"]


def test_probe_is_fast(blocker: subprocess.Popen[bytes]) -> None:
    t0 = time.perf_counter()
    take("t", pids=[blocker.pid], pgids=[os.getpgid(0)], descendants_of=ME, ports=[1], gpu=False)
    assert time.perf_counter() - t0 < 1.0  # generous: the target is < 50 ms; see the report for figures
