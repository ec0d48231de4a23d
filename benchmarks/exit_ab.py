"""What the fast exit saves on one scenario item: its run with the rule's exit and with the faithful one, interleaved.

Run:  .venv/bin/python benchmarks/exit_ab.py SCENARIO [--pairs 5] [--variant V]

The item (the scenario's first) is run once to start the fork server, then ``--pairs`` times in each mode,
alternating (fast, faithful, fast, ...), so a machine's load falls on both alike; the medians of each run's
wall time and their ratio are printed with each mode's verdicts, which must be the same.  ``fast`` is what
harness.scenario.exitmode allows for the item (it says why); ``faithful`` forces the whole finalization.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from harness.scenario import runner
from harness.scenario.loader import expand, load

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("scenario", help="a scenario's name (scenarios/NAME.yaml) or path")
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--variant", default=None, help="the target (default: the scenario's)")
    args = p.parse_args(argv)
    path = Path(args.scenario) if args.scenario.endswith(".yaml") else ROOT / "scenarios" / f"{args.scenario}.yaml"
    if not path.is_file():
        p.error(f"{args.scenario}: no such scenario ({path})")
    if args.pairs < 1:
        p.error(f"--pairs {args.pairs}: give 1 or more")
    it = expand(load(str(path)))[0]
    rule = runner.fast_exit_for
    allowed, why = rule(it, args.variant or it.scenario.target, [e.checker for e in it.scenario.expect])
    runner.run_item(it, variant=args.variant)  # the fork server starts here, in neither mode
    walls: dict[str, list[float]] = {"fast": [], "faithful": []}
    verdicts: dict[str, set[tuple[tuple[str, str], ...]]] = {"fast": set(), "faithful": set()}
    try:
        for _ in range(args.pairs):
            for mode in ("fast", "faithful"):
                runner.fast_exit_for = rule if mode == "fast" else (lambda *a: (False, "forced faithful"))  # type: ignore[assignment]
                t0 = time.monotonic()
                r = runner.run_item(it, variant=args.variant)
                walls[mode].append(time.monotonic() - t0)
                verdicts[mode].add(tuple((v.checker, v.status) for v in r.verdicts))
    finally:
        runner.fast_exit_for = rule
    med = {m: statistics.median(w) for m, w in walls.items()}
    print(json.dumps({"item": it.id, "scenario": str(path.relative_to(ROOT)), "fast_allowed": allowed, "why": why,
                      "pairs": args.pairs, "median_s": {m: round(v, 3) for m, v in med.items()},
                      "faithful_over_fast": round(med["faithful"] / med["fast"], 2),
                      "same_verdicts": verdicts["fast"] == verdicts["faithful"],
                      "verdicts": sorted(map(list, verdicts["fast"] | verdicts["faithful"]))}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
