"""Whether overlap moves any verdict: the scenario library run with catches items played N at a time and alone.

Run:  .venv/bin/python benchmarks/overlap_ab.py [--width 12] [--rounds 1] [--json OUT] [-- PYTEST_ARGS...]

Each round runs ``pytest scenarios -n 2 -p no:randomly --lastcall-reports=DIR`` twice in this tree, once with
``--lastcall-overlap N`` and once with ``--lastcall-overlap 1`` (alternating which goes first), CI's variables
as the caller sets them; PYTEST_ARGS are added to both (``-m "not slow"``, say).  Every run's ``verdicts.json``
gives, per node id, the set of violated checkers, whether a step failed and why the run is broken.  The script
prints every item whose record differs between the two sides (in any round), each side's wall time per round
and how many items ran overlapped (their JUnit property ``lastcall_overlapped_with``), then a line: the count of
items, the differences.  Exit 0 when nothing differs, 1 when something does, 2 for bad input.  A
timing-sensitive checker may differ between any two runs; rerun a differing item alone before calling it
overlap's doing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def side(width: int, extra: list[str], where: Path) -> dict[str, Any]:
    """One session: its records per node id, its wall time, its exit status and the overlapped items."""
    reports, junit = where / "reports", where / "junit.xml"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "scenarios", "-n", "2", "-q", "-p", "no:randomly",
                           f"--lastcall-reports={reports}", f"--lastcall-overlap={width}", f"--junitxml={junit}",
                           *extra], cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    records: dict[str, Any] = {}
    for f in sorted(reports.glob("*/verdicts.json")):
        v = json.loads(f.read_text())
        records[v["nodeid"]] = [sorted(x["checker"] for x in v["verdicts"] if x["status"] == "violated"),
                                bool(v.get("step_error")), v.get("broken") or ""]
    overlapped = 0
    if junit.exists():
        for case in ET.parse(junit).iter("testcase"):
            overlapped += any(p.get("name") == "lastcall_overlapped_with" for p in case.iter("property"))
    return {"records": records, "wall_s": round(wall, 1), "exit": proc.returncode, "overlapped": overlapped,
            "tail": proc.stdout[-1500:]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--width", type=int, default=12, help="N of the overlapped side (default 12)")
    ap.add_argument("--rounds", type=int, default=1, help="pairs of sessions (default 1)")
    ap.add_argument("--json", type=Path, help="write every round's records there")
    ap.add_argument("pytest_args", nargs="*", help="after --: added to both sides' pytest")
    args = ap.parse_args(argv)
    if not 2 <= args.width <= 32 or args.rounds < 1:
        print("overlap_ab: --width is 2 to 32 and --rounds at least 1", file=sys.stderr)
        return 2
    rounds = []
    with tempfile.TemporaryDirectory(prefix="overlap-ab-") as tmp:
        for r in range(args.rounds):
            order = [args.width, 1] if r % 2 == 0 else [1, args.width]
            got = {}
            for w in order:
                where = Path(tmp) / f"r{r}-w{w}"
                where.mkdir()
                got[w] = side(w, args.pytest_args, where)
                if got[w]["exit"] not in (0, 1):
                    print(f"overlap_ab: pytest with --lastcall-overlap={w} ended with {got[w]['exit']}:\n"
                          f"{got[w]['tail']}", file=sys.stderr)
                    return 2
            rounds.append(got)
    differ = 0
    for r, got in enumerate(rounds):
        on, off = got[args.width], got[1]
        ids = sorted(set(on["records"]) | set(off["records"]))
        for nid in ids:
            a, b = on["records"].get(nid, ["absent"]), off["records"].get(nid, ["absent"])
            if a != b:
                differ += 1
                print(f"round {r + 1}: {nid}\n  overlapped: {a}\n  alone:      {b}")
        print(f"round {r + 1}: {len(ids)} items; overlap {args.width}: {on['wall_s']} s, {on['overlapped']} items "
              f"overlapped, exit {on['exit']}; alone: {off['wall_s']} s, exit {off['exit']}")
    if args.json:
        args.json.write_text(json.dumps([{str(k): v for k, v in g.items()} for g in rounds], indent=1))
    print(f"{sum(len(g[1]['records']) for g in rounds)} item runs per side, {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
