"""The full planted-bug table (slow): every scenario against every variant.

One test per scenario, so the table spreads over xdist workers.  Each must pass
on the reference and be caught by every variant it names; the other variants
each scenario happens to catch are recorded in reports/planted-bug-table/ and
``python -m harness.scenario.table scenarios`` prints the whole table (the
README quotes it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.scenario.table import build
from harness.targets import target_names

VARIANTS = [v for v in target_names() if v not in ("kvcached", "vllm_nixl")]  # worker and handshake variants
SCENARIOS = sorted(Path("scenarios").glob("*.yaml"))


@pytest.mark.slow
@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_against_every_variant(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LASTCALL_FAST_EXIT", "1")  # hundreds of runs: skip each worker's module teardown
    cells = build([str(path)], VARIANTS)
    out = Path("reports") / "planted-bug-table" / f"{path.stem}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([c.__dict__ for c in cells], indent=1))
    failures = [f"{c.scenario} fails on the reference: {c.detail}" for c in cells
                if c.variant == "reference" and c.caught]
    failures += [f"{c.scenario} does not catch {c.variant}: {c.detail}" for c in cells
                 if c.named and c.variant != "reference" and not c.caught]
    assert not failures, failures
