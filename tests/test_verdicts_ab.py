"""benchmarks/verdicts_ab.py: a bad tree is a usage error; two runs of one tree's item record the same verdicts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from lc_helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))


def test_a_tree_that_is_no_checkout_is_exit_2_in_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "verdicts_ab.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"{tmp_path}: not a lastcall checkout" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_one_item_run_on_this_tree_twice_differs_in_nothing(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    import verdicts_ab

    item = "scenarios/stalled-read-is-cancelled.yaml::stalled-read-is-cancelled[tp1-pp1-cpu-catches-no_conn_tracking]"
    monkeypatch.setattr(verdicts_ab, "collected", lambda: [item, "scenarios/gone.yaml::gone[tp1-pp1-cpu]"])
    assert verdicts_ab.main([str(ROOT)]) == 0
    assert "2 items, 0 differ" in capsys.readouterr().out
