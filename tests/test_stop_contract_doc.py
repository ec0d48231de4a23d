"""docs/stop-contract.md is what python -m harness.contract.doc generates from the contract table and checks."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from harness.contract import CHECKS, LINES
from harness.contract.doc import PAGE, render

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_page_is_the_generated_one() -> None:
    assert PAGE == ROOT / "docs" / "stop-contract.md"
    assert PAGE.read_text() == render(), "docs/stop-contract.md is stale: run python -m harness.contract.doc"


def test_the_page_has_every_line_in_full_and_every_check() -> None:
    text = render()
    for ln in LINES:
        assert f"\n{ln.number}. {ln.text}\n" in text
    rows = [r for r in text.splitlines() if r.startswith("| ") and r.split("|")[2].strip().startswith("`")]
    assert [r.split("|")[2].strip().strip("`") for r in rows] == [c.name for c in CHECKS]
    assert all(r.count("|") == 6 for r in rows)  # five cells: no stray | inside one
    for c in CHECKS:
        row = next(r for r in rows if r.split("|")[2].strip() == f"`{c.name}`")
        for bug in c.catches:
            assert f"`{bug}`: " in row


def test_check_mode_says_when_the_page_differs(tmp_path: Path) -> None:
    stale = tmp_path / "stop-contract.md"
    stale.write_text(render().replace("eleven", "twelve"))
    cmd = [sys.executable, "-m", "harness.contract.doc", "--check", "--out", str(stale)]
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "differs from what python -m harness.contract.doc generates" in bad.stderr
    subprocess.run([sys.executable, "-m", "harness.contract.doc", "--out", str(stale)], check=True, timeout=60)
    assert subprocess.run(cmd, timeout=60).returncode == 0
    assert stale.read_text() == PAGE.read_text()


def test_no_file_cites_design_md() -> None:
    """The design notes are not in the repository, so nothing cites them: the stop contract is docs/stop-contract.md."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    citing = [p for p in tracked.split() if p.endswith((".py", ".md", ".yaml", ".toml"))
              and (ROOT / p).is_file() and "DESIGN" + ".md" in (ROOT / p).read_text(errors="replace")]
    assert citing == []


def _asked_of_a_listener() -> dict[str, set[str]]:
    """What the worker-side library scenarios wait for a listener to record, and the errors their sends must
    get back: name -> the scenarios asking it."""
    import yaml

    asked: dict[str, set[str]] = {}
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        sc = yaml.safe_load(path.read_text())
        for step in sc.get("steps", []):
            (kind, body), = step.items()
            if not isinstance(body, dict) or body.get("on") == "engine" or path.stem.startswith(("engine-",
                                                                                                "handshake-")):
                continue
            name = body.get("event") if kind == "wait" else body.get("refused") if kind == "send" else None
            if name:
                asked.setdefault(name, set()).add(path.stem)
    return asked


def test_every_event_a_scenario_waits_for_and_every_refusal_is_a_line_of_the_contract() -> None:
    """A scenario that waits for a listener's event (or a refusal) places an obligation on every target: the page
    says it, as a line or a lettered line, by the event's name."""
    said = " ".join(text for ln in LINES for text in (ln.text, *ln.clauses))
    asked = _asked_of_a_listener()
    assert {"drain_started", "stop_started", "bad_request"} <= set(asked), asked
    assert {name: sorted(by) for name, by in asked.items() if not re.search(rf"\b{name}\b", said)} == {}
    assert re.search(r"\b6a\. [^\n]*own drain_started", render())
