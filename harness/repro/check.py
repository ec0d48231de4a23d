"""``python -m harness.repro.check``: run the committed reproducers against a real engine and compare each exit
status with expected.yaml (``./dev vllm-engine-test --repro``).

A reproducer's exit 1 counts as its checker ``violated``, 0 as ``ok``, anything else as ``unknown``; a repeat
of ``--runs`` is judged by harness.engine.expected.rate_differences (a rated finding by Fisher's exact test).

With ``--record`` each script's run is appended to runs.json beside the scripts, with its provenance, and the
table of harness.repro.runs is written into their README.md.

Returns 0 (every reproducer as expected), 1 (one differs), 2 (bad invocation, or a malformed runs.json)."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from harness import provenance
from harness.engine.expected import Expected, load_expected, rate_differences
from harness.errors import ConfigError
from harness.repro import FINDINGS, runs

__all__ = ["main", "REPRO_DIR", "STATUS_OF_EXIT"]

REPRO_DIR = Path("docs/findings/vllm-0.32-cpu/repro")
ROOT = Path(__file__).resolve().parents[2]  # the checkout whose commit a record names
STATUS_OF_EXIT = {0: "ok", 1: "violated"}  # a reproducer's exit status as its checker's verdict


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.repro.check")
    ap.add_argument("--engine-cmd", default="vllm", help="the engine's command")
    ap.add_argument("--dir", type=Path, default=REPRO_DIR, help="the reproducers and ../expected.yaml")
    ap.add_argument("--runs", type=int, default=1, help="runs of each reproducer")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--only", action="append", default=[], metavar="SCENARIO",
                    help="run only this scenario's reproducer (repeatable; default: every one in --dir)")
    ap.add_argument("--record", action="store_true",
                    help="append each script's run to runs.json beside the scripts and write its table into their "
                         "README.md")
    a = ap.parse_args(argv)
    if a.runs < 1:
        ap.error(f"--runs: expected a whole number of at least 1, found {a.runs}")
    scripts = sorted(a.dir.glob("*.py"))
    unknown = sorted(set(a.only) - {s.stem for s in scripts})
    if unknown:
        ap.error(f"--only: no reproducer {', '.join(map(repr, unknown))} in {a.dir}; expected one of: "
                 f"{', '.join(s.stem for s in scripts)}")
    expected = load_expected(a.dir.parent / "expected.yaml")
    if a.record:
        try:
            runs.write(a.dir)  # a malformed runs.json or a page without the markers: refused now, not after launches
        except ConfigError as exc:
            print(f"python -m harness.repro.check: {exc}", file=sys.stderr)
            return 2
    command = shlex.join(["python", "-m", "harness.repro.check", *(sys.argv[1:] if argv is None else argv)])
    # the tree as the run began: the record's own writes (runs.json, README.md) never make it read as changed
    origin = provenance.record(command, ROOT) if a.record else {}
    rc = 0
    for script in (s for s in scripts if not a.only or s.stem in a.only):
        scenario = script.stem
        if scenario not in FINDINGS or scenario not in expected:
            print(f"{script}: no finding of that name in harness.repro.FINDINGS and expected.yaml", file=sys.stderr)
            return 2
        checker = FINDINGS[scenario][2]
        cmd = [sys.executable, str(script), "--engine-cmd", a.engine_cmd]
        if a.dry_run:
            print(shlex.join(cmd), f"# x{a.runs}, judged as {checker}")
            continue
        exits = [subprocess.run(cmd).returncode for _ in range(a.runs)]
        want = expected[scenario]
        diffs = rate_differences([{checker: STATUS_OF_EXIT.get(x, "unknown")} for x in exits],
                                 Expected(want.runs, want.outcome, {checker: want.checkers[checker]}))
        print(f"{scenario}: {'as expected' if not diffs else '; '.join(diffs)}")
        if a.record:
            runs.append(a.dir, {"scenario": scenario, "checker": checker, "exits": exits, "as_expected": not diffs,
                                **origin})
            runs.write(a.dir)
        rc = rc or (1 if diffs else 0)
    return rc


if __name__ == "__main__":
    sys.exit(main())
