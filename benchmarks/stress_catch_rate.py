"""How often each stress scenario passes on the reference and catches each planted race bug it names, and how long
a run takes: ``lastcall run scenarios/stress-*.yaml --repeat N -n 2`` with a JUnit file, counted per item.

    .venv/bin/python benchmarks/stress_catch_rate.py --repeat 20          # writes docs/data + docs/stress.md
    .venv/bin/python benchmarks/stress_catch_rate.py --repeat 3 --json out.json --no-write

An item passes when the reference run is clean, or when its ``-catches-BUG`` run saw one of the bug's named
checkers fire (harness.scenario.catches): its pass count over N is the catch rate.  The times are pytest's
per-item call times (one run: launch, the steps, the exit and the checkers) on this machine, with -n 2.
tests/test_stress.py re-renders the table from the JSON; its slow test runs this script with --repeat 20 and
holds every rate to N of N and every run to the bound.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import docpage

ROOT = docpage.ROOT
NAME = "stress-catch-rate"
PAGE = ROOT / "docs" / "stress.md"
BOUND_S = 20.0  # the most one stress run may take on 2 cores
SCENARIOS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "scenarios").glob("stress-*.yaml"))
_REPEAT = re.compile(r"-r\d+\]$")


def measure(repeat: int, scenarios: list[str], workers: int = 2) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [str(ROOT / ".venv" / "bin" / "lastcall"), "run", *scenarios, "-n", str(workers),
               "--repeat", str(repeat), "--junitxml", str(junit), "--lastcall-reports", "", "--",
               "-p", "no:randomly", "-q"]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ})
        if not junit.exists():
            raise SystemExit(f"stress_catch_rate: no JUnit file; lastcall run said:\n{proc.stdout}\n{proc.stderr}")
        cases = ET.parse(junit).getroot().iter("testcase")
        items: dict[str, dict[str, list[float] | int]] = {}
        for case in cases:
            name = _REPEAT.sub("]", case.get("name", ""))
            row = items.setdefault(name, {"passed": 0, "runs": 0, "times": []})
            row["runs"] = int(row["runs"]) + 1  # type: ignore[call-overload]
            bad = [child for child in case if child.tag in ("failure", "error", "skipped")]
            if not bad:
                row["passed"] = int(row["passed"]) + 1  # type: ignore[call-overload]
            elif "why" not in row:  # the first failure's message, kept in the JSON (not the table)
                row["why"] = (bad[0].get("message") or bad[0].text or "")[:2000]  # type: ignore[assignment]
            row["times"].append(float(case.get("time", "0")))  # type: ignore[union-attr]
    rows = []
    for name, row in sorted(items.items()):
        times = list(row["times"])  # type: ignore[call-overload]
        rows.append({"item": name, "passed": row["passed"], "runs": row["runs"],
                     "median_s": round(statistics.median(times), 2), "max_s": round(max(times), 2),
                     **({"why": row["why"]} if "why" in row else {})})
    return {"repeat": repeat, "workers": workers, "bound_s": BOUND_S, "rows": rows, "exit": proc.returncode,
            "cpus": os.cpu_count()}


def table(result: dict[str, object]) -> str:
    lines = ["| item | passed | median s | max s |", "|---|---|---|---|"]
    for row in result["rows"]:  # type: ignore[attr-defined]
        what = row["item"]
        lines.append(f"| `{what}` | {row['passed']}/{row['runs']} | {row['median_s']:.2f} | {row['max_s']:.2f} |")
    lines.append("")
    lines.append(f"`--repeat {result['repeat']}`, `-n {result['workers']}` on {result['cpus']} cores; a run's bound "
                 f"is {result['bound_s']:.0f} s.")
    return "\n".join([*lines, "", docpage.provenance(result)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", help="also write the result here")
    ap.add_argument("--no-write", action="store_true", help="do not write docs/data or docs/stress.md")
    ap.add_argument("scenarios", nargs="*", default=SCENARIOS)
    args = ap.parse_args(argv)
    if not 1 <= args.repeat <= 1000:
        print(f"stress_catch_rate: --repeat must be from 1 to 1000, got {args.repeat}", file=sys.stderr)
        return 2
    result = {**docpage.measured(__file__, sys.argv[1:] if argv is None else argv),
              **measure(args.repeat, args.scenarios)}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    if not args.no_write:
        docpage.write(NAME, result, table(result), PAGE)
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
