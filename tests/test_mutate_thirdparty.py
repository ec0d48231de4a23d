"""``lastcall mutate`` on the worked third-party listener (tests/thirdparty/) through its target: a planted-like
mutant (the teardown's unlink removed: the socket file is left behind) is killed by a scenario, a dropped
lock nothing races on survives, and the report prints both scores and the survivor's diff.  Real processes:
slow (about a minute)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from lc_helpers import ROOT

from harness.mutate.run import resolve

SCENARIO = ROOT / "scenarios" / "executing-handler-is-drained.yaml"


@pytest.mark.slow
def test_lastcall_mutate_kills_a_planted_like_mutant_of_the_worked_listener() -> None:
    spec = "tests.thirdparty.listener:ThreadedListener._teardown"
    mutants = resolve(spec).mutants()
    unlink = next(m for m in mutants if m.about == "`os.unlink(self.path)` removed")
    unlock = next(m for m in mutants if m.op == "unlock")
    before = (ROOT / "tests" / "thirdparty" / "listener.py").read_bytes()
    argv = ["mutate", spec, "--target", "tests.thirdparty.target:TARGET", str(SCENARIO), "--only", unlink.id,
            "--only", unlock.id]
    r = subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    out = r.stdout
    assert r.returncode == 1, (r.stdout, r.stderr)  # a survivor
    assert "unmutated: 1 given scenario files pass" in out
    assert f"{unlink.id} ThreadedListener._teardown: `os.unlink(self.path)` removed: killed by " \
           "executing-handler-is-drained.yaml::executing-handler-is-drained[tp1-pp1-cpu]" in out, out
    assert "raw score 1/2 (50.0 %); non-equivalent 1/2 (50.0 %); 0 equivalent" in out
    assert f"survivor {unlock.id}  tests/thirdparty/listener.py:{unlock.line}" in out
    assert "-        with self._lock:\n  +        if True:" in out
    assert (ROOT / "tests" / "thirdparty" / "listener.py").read_bytes() == before  # never the user's file
