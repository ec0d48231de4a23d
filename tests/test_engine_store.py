"""python -m harness.engine.store: a real engine's runs kept as findings, and the expected.yaml drafted from them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from harness.engine.expected import Rate, load_expected
from harness.engine.store import draft, main, store

STORED = Path(__file__).resolve().parent.parent / "docs" / "findings" / "vllm-0.32-cpu"


def _run(runs: Path, run_id: str, source: Path, **over: object) -> Path:
    run = runs / run_id
    shutil.copytree(source, run)
    doc = json.loads((run / "verdicts.json").read_text())
    doc.update(run_id=run_id, **over)
    (run / "verdicts.json").write_text(json.dumps(doc))
    return run


def test_runs_are_stored_alone_or_chained_and_add_up(tmp_path: Path) -> None:
    runs, findings = tmp_path / "runs", tmp_path / "findings"
    runs.mkdir()
    findings.mkdir()
    _run(runs, "r1", STORED / "reports" / "engine-sigterm-idle")
    _run(runs, "r2", STORED / "reports-chained" / "engine-sigterm-worker-tp2")
    (runs / "r1" / "extra.html").write_text("<p>not kept</p>")
    lines = store(runs, findings)
    assert lines == ["r1: engine-sigterm-idle -> reports/engine-sigterm-idle",
                     "r2: engine-sigterm-worker-tp2 -> reports-chained/engine-sigterm-worker-tp2"]
    assert sorted(p.name for p in (findings / "reports" / "engine-sigterm-idle").iterdir()) == [
        "history.jsonl", "snapshots.json", "verdicts.json"]
    assert store(runs, findings) == ["r1: stored already as reports/engine-sigterm-idle",  # a run is kept once
                                     "r2: stored already as reports-chained/engine-sigterm-worker-tp2"]
    # a second session's run of the same scenario goes beside the first
    later = tmp_path / "later"
    later.mkdir()
    _run(later, "r3", STORED / "reports" / "engine-sigterm-idle")
    assert store(later, findings) == ["r3: engine-sigterm-idle -> reports/engine-sigterm-idle.r3"]
    assert load_expected_of(findings)["engine-sigterm-idle"].runs == 2


def load_expected_of(findings: Path) -> dict[str, object]:
    (findings / "expected.yaml").write_text(draft(findings))
    return load_expected(findings / "expected.yaml")  # type: ignore[return-value]


def test_the_draft_gives_a_status_where_runs_agree_and_a_rate_where_they_differ(tmp_path: Path) -> None:
    runs, findings = tmp_path / "runs", tmp_path / "findings"
    runs.mkdir()
    findings.mkdir()
    for i in range(3):
        run = _run(runs, f"r{i}", STORED / "reports" / "engine-sigterm-idle")
        doc = json.loads((run / "verdicts.json").read_text())
        if i == 0:  # one run of three in which the tree did not exit in time
            for v in doc["verdicts"]:
                if v["checker"] == "engine_tree_exits":
                    v["status"] = "violated"
        (run / "verdicts.json").write_text(json.dumps(doc))
    store(runs, findings)
    want = load_expected_of(findings)["engine-sigterm-idle"]
    assert want.runs == 3  # type: ignore[attr-defined]
    assert want.checkers["engine_nothing_left"] == "violated"  # type: ignore[attr-defined]
    assert want.checkers["engine_tree_exits"] == Rate("violated", 1, 3)  # type: ignore[attr-defined]


def test_a_run_that_is_not_data_lastcall_reads_is_skipped_named(tmp_path: Path) -> None:
    runs, findings = tmp_path / "runs", tmp_path / "findings"
    runs.mkdir()
    findings.mkdir()
    _run(runs, "bad-name", STORED / "reports" / "engine-sigterm-idle", scenario="../../etc")
    link = _run(runs, "linked", STORED / "reports" / "engine-sigterm-idle")
    (link / "history.jsonl").unlink()
    (link / "history.jsonl").symlink_to(STORED / "reports" / "engine-sigterm-idle" / "history.jsonl")
    _run(runs, "other", STORED / "reports" / "engine-sigterm-idle", variant="engine_standin")
    _run(runs, "up", STORED / "reports" / "engine-sigterm-idle")
    doc = json.loads((runs / "up" / "verdicts.json").read_text())
    (runs / "up" / "verdicts.json").write_text(json.dumps({**doc, "run_id": "../../x"}))
    lines = store(runs, findings)
    assert lines[0].startswith("bad-name: skipped: ")
    assert lines[1] == "linked: skipped: history.jsonl missing, not a regular file or over 33554432 bytes"
    assert lines[2] == "up: skipped: its run_id is not one lastcall writes"
    assert len(lines) == 3 and not (findings / "reports").exists()  # the stand-in's run is not vllm_engine's


def test_the_command_line_says_how_to_use_it(tmp_path: Path) -> None:
    assert main([]) == 2
    assert main([str(tmp_path / "nope"), str(tmp_path)]) == 2
    assert main(["--draft", str(tmp_path)]) == 0
