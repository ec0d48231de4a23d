"""Target names known without importing a target: the static lists match the registries, and loading and
``lastcall validate`` import neither torch nor the reference."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lc_helpers import ROOT

from harness.reference.handshake_variants import HANDSHAKE_VARIANTS
from harness.reference.variants import VARIANTS
from harness.targets import load_target, names
from harness.targets.names import check_target


def test_the_static_lists_are_the_registries() -> None:
    assert tuple(VARIANTS) == names.WORKER_VARIANTS
    assert tuple(HANDSHAKE_VARIANTS) == names.HANDSHAKE_VARIANTS
    for name in names.target_names():
        assert check_target(name) is None
        assert load_target(name) is not None


@pytest.mark.parametrize(("spec", "says"), [
    ("refrence", "unknown target 'refrence' (did you mean 'reference'?); known: reference, "),
    ("kvcached==latest", "target 'kvcached==latest': 'latest' is not a PEP 440 version in its normal form, as "
                         "kvcached==0.1.6"),
    ("vllm==0.11", "target 'vllm==0.11': only kvcached takes a pinned version"),
    ("no_such_module_xyz:T", "target 'no_such_module_xyz:T': no module named 'no_such_module_xyz' (not installed, "
                             "and not under "),
    ("mod:", "target 'mod:' is not module:attribute (e.g. mypkg.targets:MINE)"),
    ("a-b:c", "target 'a-b:c' is not module:attribute"),
    ("never_stopped@x:y", "target 'never_stopped@x:y': a listener factory (@module:attribute) applies to the "
                          "reference or one of its variants, not 'never_stopped'"),
    ("reference@NoColon", "target 'reference@NoColon': after @ give the listener factory as module:attribute"),
    ("reference@nosuch_xyz:L", "target 'reference@nosuch_xyz:L': the listener factory 'nosuch_xyz:L': no module "
                               "named 'nosuch_xyz'"),
])
def test_check_target_says_why_without_importing(spec: str, says: str) -> None:
    why = check_target(spec)
    assert why is not None and why.startswith(says) and "\n" not in why


@pytest.mark.parametrize("spec", ["reference", "kvcached==0.1.6", "harness.targets.kvcached:TARGET",
                                  "reference@harness.reference.variants:NoConnTracking", "tests.test_targets:X"])
def test_check_target_accepts_what_load_target_reads(spec: str) -> None:
    assert check_target(spec) is None  # (tests.test_targets:X: found from the working directory, not imported)


def test_load_and_validate_import_neither_torch_nor_the_reference(tmp_path: Path) -> None:
    """In a fresh interpreter: every scenario of the library validated, one with a module:attribute target."""
    mine = tmp_path / "mine.yaml"
    text = (ROOT / "scenarios" / "stalled-read-is-cancelled.yaml").read_text()
    mine.write_text(text.replace("\ncatches:", "\ntarget: harness.targets.vllm_nixl:TARGET\ncatches:", 1))
    code = ("import json, sys; from harness.cli import main; rc = main(['validate', 'scenarios', sys.argv[1]]); "
            "print(json.dumps([rc, sorted(sys.modules)]))")
    proc = subprocess.run([sys.executable, "-c", code, str(mine)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    rc, modules = json.loads(proc.stdout.splitlines()[-1])
    assert (rc, proc.stderr) == (0, "")
    assert f"{mine}: ok, " in proc.stdout
    assert [m for m in modules if m.split(".")[0] in ("torch", "zmq")] == []
    # the wire codec (msgspec only) is the one reference module loading needs: steps name its commands
    assert [m for m in modules if m.startswith("harness.reference.")] == ["harness.reference.wire"]
    assert "harness.targets.vllm_nixl" not in modules
