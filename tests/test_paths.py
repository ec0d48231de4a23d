"""The socket path rule, ipc-name sanitising, sun_path limits and owner records."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import ConfigError, SocketPathTooLong
from harness.names import temp_root
from harness.reference import paths


def test_layout_and_hash_are_stable() -> None:
    d = paths.instance_dir("engine0", "/r")
    assert d == Path(f"/r/lastcall-tp-engine0-{paths.hash8('engine0')}")
    assert paths.socket_path("engine0", 3, 0, "/r") == d / "w3.sock"
    assert paths.socket_path("engine0", 1, 2, "/r") == d / "pp2" / "w1.sock"
    assert paths.hash8("engine0") == "09c85a15"  # uuid5(NAMESPACE_DNS, name): pinned, stable across runs
    assert paths.usage_segment_name("engine0") == f"lastcall-usage-engine0-{paths.hash8('engine0')}"


def test_sanitise() -> None:
    assert paths.sanitize_ipc_name("a b/c:d") == "a_b_c_d"
    assert len(paths.sanitize_ipc_name("x" * 200)) == paths.IPC_NAME_MAX
    # names that sanitise alike still get different directories
    assert paths.instance_dir("a/b", "/r") != paths.instance_dir("a_b", "/r")
    for bad in ("", ".", ".."):
        with pytest.raises(ConfigError, match="empty after sanitising"):
            paths.sanitize_ipc_name(bad)
    with pytest.raises(ConfigError, match="must be a str"):
        paths.sanitize_ipc_name(5)  # type: ignore[arg-type]


def test_sun_path_limit_exact() -> None:
    tail = len(str(paths.socket_path("n", 0, 0, "/r"))) - 2  # the path minus a 2-byte root
    root_edge = "/" + "r" * (paths.SUN_PATH_MAX - tail - 1)
    assert len(os.fsencode(paths.socket_path("n", 0, 0, root_edge))) == paths.SUN_PATH_MAX
    with pytest.raises(SocketPathTooLong, match=r"is 108 bytes; a Unix socket path must be at most 107") as info:
        paths.socket_path("n", 0, 0, root_edge + "r")
    assert "--root" in str(info.value)


def test_a_107_byte_path_really_binds(tmp_path: Path) -> None:
    import socket

    base = str(temp_root())
    try:
        fixed = len(str(paths.socket_path("n", 0, 0, base))) - len(base)
        root = os.path.join(base, "d" * (paths.SUN_PATH_MAX - fixed - len(base) - 1))
        p = paths.socket_path("n", 0, 0, root)
        assert len(os.fsencode(p)) == paths.SUN_PATH_MAX
        p.parent.mkdir(parents=True)
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
        s.close()
    finally:
        import shutil

        shutil.rmtree(base)


def test_bad_rank() -> None:
    with pytest.raises(ConfigError, match="rank must be an int >= 0, got -1"):
        paths.socket_path("n", -1)
    with pytest.raises(ConfigError, match="pp must be"):
        paths.socket_path("n", 0, True)  # type: ignore[arg-type]


def test_owner_record(tmp_path: Path) -> None:
    rec = paths.OwnerRecord.for_self("n", "socket", 1, 2)
    rec.write(tmp_path / "w1.owner")
    back = paths.OwnerRecord.read(tmp_path / "w1.owner")
    assert back == rec and back.alive()
    assert paths.OwnerRecord.read(tmp_path / "missing") is None
    (tmp_path / "bad").write_text("{")
    assert paths.OwnerRecord.read(tmp_path / "bad") is None
    assert (tmp_path / "w1.owner").stat().st_mode & 0o777 == 0o600


def test_owner_record_of_a_dead_process() -> None:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(child.stdout)
    assert paths.process_start_ticks(pid) is None
    assert not paths.OwnerRecord(pid=pid, start_ticks=1, ipc="n", kind="socket").alive()
    # our own pid with another start time is a recycled pid, not us
    assert not paths.OwnerRecord(pid=os.getpid(), start_ticks=1, ipc="n", kind="socket").alive()
