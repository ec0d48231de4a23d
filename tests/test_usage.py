"""Tests of the engine-side usage record."""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from pathlib import Path

import pytest

from harness.errors import ConfigError, HarnessError
from harness.reference.usage import RECORD_SIZE, SHM_DIR, UsageRecord


def test_create_read_update_open_unlink(tmp_path: Path) -> None:
    rec = UsageRecord.create("kv-usage", total=1000, shm_dir=str(tmp_path))
    path = tmp_path / "kv-usage"
    assert rec.path == str(path) and rec.owner
    st = os.stat(path)
    assert st.st_size == RECORD_SIZE == 24
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert rec.read() == (1000, 0, 0)
    rec.update(used=300)
    rec.update(prealloc=50)
    assert rec.read() == (1000, 300, 50)

    other = UsageRecord.open("kv-usage", shm_dir=str(tmp_path))
    assert not other.owner
    assert other.read() == (1000, 300, 50)
    other.update(total=2000, used=7)
    assert rec.read() == (2000, 7, 50)
    assert path.read_bytes() == (2000).to_bytes(8, "little") + (7).to_bytes(8, "little") \
        + (50).to_bytes(8, "little")
    other.close()
    other.close()  # idempotent
    assert other.closed
    with pytest.raises(HarnessError, match="closed"):
        other.read()

    rec.close()
    assert rec.unlink() is True
    assert rec.unlink() is False
    assert not path.exists()


def test_exclusive_create_refused(tmp_path: Path) -> None:
    with UsageRecord.create("dup", total=1, shm_dir=str(tmp_path)) as rec:
        with pytest.raises(ConfigError) as info:
            UsageRecord.create("dup", total=2, shm_dir=str(tmp_path))
        assert rec.path in str(info.value)
        assert "lastcall ctl delete" in str(info.value)
        assert rec.read() == (1, 0, 0)  # the existing record is untouched
    assert not (tmp_path / "dup").exists()  # the owner's exit unlinks


def test_open_missing_names_path(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match=str(tmp_path / "absent")):
        UsageRecord.open("absent", shm_dir=str(tmp_path))


def test_open_short_file_refused(tmp_path: Path) -> None:
    (tmp_path / "short").write_bytes(b"\0" * 8)
    with pytest.raises(HarnessError, match="8 bytes"):
        UsageRecord.open("short", shm_dir=str(tmp_path))


def test_non_owner_exit_does_not_unlink(tmp_path: Path) -> None:
    with UsageRecord.create("keep", total=5, shm_dir=str(tmp_path)) as rec:
        with UsageRecord.open("keep", shm_dir=str(tmp_path)) as other:
            assert other.read() == (5, 0, 0)
        assert (tmp_path / "keep").exists()
        assert rec.read() == (5, 0, 0)


@pytest.mark.parametrize("name", ["", "a/b", "..", "x\0y", "n" * 256])
def test_bad_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match="name"):
        UsageRecord.create(name, total=1, shm_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="name"):
        UsageRecord.open(name, shm_dir=str(tmp_path))


@pytest.mark.parametrize("value", [-1, 1 << 63, True, 1.0])
def test_bad_values(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError, match="total"):
        UsageRecord.create("v", total=value, shm_dir=str(tmp_path))  # type: ignore[arg-type]
    assert not (tmp_path / "v").exists()
    with UsageRecord.create("v", total=1, shm_dir=str(tmp_path)) as rec:
        with pytest.raises(ConfigError, match="used"):
            rec.update(used=value)  # type: ignore[arg-type]
        assert rec.read() == (1, 0, 0)


@pytest.mark.skipif(not os.path.isdir(SHM_DIR), reason="no /dev/shm on this machine")
def test_real_dev_shm() -> None:
    name = f"lastcall-test-usage-{uuid.uuid4().hex[:12]}"
    path = os.path.join(SHM_DIR, name)
    rec: UsageRecord | None = None
    try:
        rec = UsageRecord.create(name, total=1 << 40)
        assert rec.path == path and os.path.exists(path)
        rec.update(used=1 << 30, prealloc=1 << 20)
        with UsageRecord.open(name) as other:
            assert other.read() == (1 << 40, 1 << 30, 1 << 20)
        rec.close()
        assert rec.unlink() is True
        assert not os.path.exists(path)
    finally:
        if rec is not None:
            rec.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
