"""The GPU check, ready for a lent machine: its wheelhouse resolves offline for cp312, and it skips cleanly here.

The lent GPU machine has python 3.12 with a CUDA torch, pytest, xdist, hypothesis, psutil and PyYAML, and
reaches no package registry. ``./dev gpu-wheels`` fills a wheelhouse with cp312 wheels of the rest;
``./dev gpu-check`` installs from it there and runs ``pytest -m gpu``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lc_helpers import ROOT

tomllib = pytest.importorskip("tomllib")  # python 3.11+ (the GPU machine has 3.12)
CP312 = ["--python-version", "3.12", "--only-binary=:all:", "--implementation", "cp", "--abi", "cp312",
         "--abi", "abi3", "--abi", "none", "--platform", "manylinux2014_x86_64", "--platform",
         "manylinux_2_17_x86_64", "--platform", "manylinux_2_28_x86_64", "--platform", "any"]


def _name(req: str) -> str:
    return re.split(r"[<>=!~ \[;]", req, maxsplit=1)[0].lower().replace("_", "-")


def _dev(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ROOT / "dev"), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


@pytest.mark.slow
def test_the_gpu_wheelhouse_holds_what_the_gpu_machine_lacks_and_resolves_offline_for_cp312(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    got = _dev("gpu-wheels", env={"LASTCALL_GPU_WHEELS": str(wheels)})
    assert got.returncode == 0, got.stderr[-2000:]
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    provided = {_name(p) for p in cfg["tool"]["lastcall"]["gpu-machine"]["provides"]}
    wanted = [r for r in cfg["project"]["dependencies"] if _name(r) not in provided]
    wanted += cfg["project"]["optional-dependencies"]["gpu"]
    assert (wheels / "requirements.txt").read_text().split() == wanted
    assert "torch" in provided and not any(_name(r) == "torch" for r in wanted)  # never a CUDA torch download
    report = tmp_path / "report.json"
    dry = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
                          "--disable-pip-version-check", "--no-index", "--find-links", str(wheels), *CP312,
                          "--target", str(tmp_path / "never-written"), "--report", str(report),
                          "-r", str(wheels / "requirements.txt")],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert dry.returncode == 0, dry.stderr[-2000:]
    installed = {_name(i["metadata"]["name"]) for i in json.loads(report.read_text())["install"]}
    assert {_name(r) for r in wanted} <= installed
    on_disk = {_name(w.name.split("-")[0]) for w in wheels.glob("*.whl")}
    assert installed == on_disk  # every wheel is needed, and nothing needed is missing
    assert not (tmp_path / "never-written").exists()


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="./dev is a bash script for Linux machines")
def test_gpu_check_skips_cleanly_without_a_gpu(tmp_path: Path) -> None:
    got = _dev("gpu-check", "scenarios/stalled-read-is-cancelled.yaml", f"--lastcall-reports={tmp_path}",
               env={"LASTCALL_GPU_PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    out = got.stdout + got.stderr
    assert got.returncode == 0, out[-3000:]
    assert "0 CUDA device(s): every gpu item skips" in got.stderr
    assert re.search(r"^2 skipped, \d+ deselected", got.stdout, re.M), got.stdout[-2000:]
    assert "this machine has 0" in got.stdout  # the reason, as -rs prints it


def test_gpu_check_without_dependencies_or_wheels_is_a_one_line_usage_error(tmp_path: Path) -> None:
    bare = tmp_path / "python"  # an interpreter that imports none of lastcall's dependencies
    bare.write_text(f"#!/bin/sh\nexec {sys.base_prefix}/bin/python3 -I -S \"$@\"\n")
    bare.chmod(0o755)
    got = _dev("gpu-check", env={"LASTCALL_GPU_PYTHON": str(bare), "LASTCALL_GPU_WHEELS": str(tmp_path / "none")},
               timeout=60)
    assert got.returncode == 2
    assert got.stderr.strip().splitlines() == [
        f"dev: gpu-check: lastcall's dependencies are missing and {tmp_path / 'none'}/ has no wheels; "
        f"run ./dev gpu-wheels on a machine with PyPI and carry {tmp_path / 'none'}/ here"]
