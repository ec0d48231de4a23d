"""A YAML workload for lastcall bench: ops (and arms, windows, requests, warmup), errors naming file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.bench.command import load_workload
from harness.errors import ConfigError


def test_workload_loads(tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text("ops: [kv_tensors_created, map32, unmap_pair]\nwindows: 9\narms: [reference]\n")
    assert load_workload(str(f)) == {"ops": ["kv_tensors_created", "map32", "unmap_pair"], "windows": 9,
                                     "arms": ["reference"]}


@pytest.mark.parametrize(("text", "message"), [
    ("ops: []\n", "a workload is a mapping with a non-empty 'ops' list"),
    ("ops: [map16]\nwindow: 3\n", "unknown key(s) ['window']; a workload may set ops, arms, windows"),
    ("ops: [map16]\nrequests: -1\n", "requests: expected a positive whole number, found -1"),
    ("ops: map16\n", "ops: expected a list of names, found 'map16'"),
    ("ops: [mapp16]\n", "unknown op 'mapp16'"),
    ("ops: [map16\n", "cannot read the workload"),
])
def test_bad_workloads_name_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "w.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_workload(str(f))
    assert message in str(info.value)
    if "unknown op" not in message:
        assert str(f) in str(info.value)
