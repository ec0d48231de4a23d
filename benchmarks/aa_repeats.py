"""How often does ``lastcall bench`` call two workers of one implementation different?

Run:  .venv/bin/python benchmarks/aa_repeats.py [--repeats 20] [--windows 15] [--requests 300] [--alpha 0.01]

Each repeat is one ``run_bench(["reference"], ...)`` with the A/A control on and
no other arm: two fresh worker processes of the reference (each its own
cluster), every op measured in interleaved windows, compared at ``alpha`` by
the Mann-Whitney U test over window medians.  Every (repeat, op) pair is one
A/A comparison; the figure is the fraction that reports "no difference"
(target: at least 95 % at alpha 0.01).  Seeds are the repeat numbers, so a run
is reproducible in its order and bootstrap (not in its timings).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

from harness.bench.arms import OPS
from harness.bench.command import run_bench
from harness.bench.interleave import format_rows

TARGET = 0.95  # fraction of A/A comparisons that must report "no difference"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--repeats", type=int, default=20, help="A/A runs (default 20)")
    p.add_argument("--windows", type=int, default=15, help="measured windows per op and arm (default 15)")
    p.add_argument("--requests", type=int, default=300, help="requests per window (default 300)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up rounds (default 1)")
    p.add_argument("--alpha", type=float, default=0.01, help="significance level (default 0.01)")
    p.add_argument("--op", action="append", default=[], help="ops (default: all three)")
    args = p.parse_args(argv)
    ops = args.op or list(OPS)
    print(f"# aa_repeats  {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"# python {platform.python_version()} on {platform.platform()}, {os.cpu_count()} CPUs, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"# argv: {' '.join(sys.argv[1:]) or '(defaults)'}\n", flush=True)
    rows: list[list[str]] = []
    calm = {op: 0 for op in ops}
    t0 = time.monotonic()
    for i in range(args.repeats):
        r = run_bench(["reference"], ops, args.windows, args.requests, args.warmup, aa=True, progress=False,
                      alpha=args.alpha, seed=i)
        for op in ops:
            c = r.aa[op]
            calm[op] += c.verdict == "no difference"
            rows.append([str(i + 1), op, f"{c.ratio:.3f}", f"[{c.ci[0]:.3f}, {c.ci[1]:.3f}]", f"{c.p:.2g}",
                         c.verdict])
        print(f"repeat {i + 1}/{args.repeats} done, {time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)
    print(format_rows(["repeat", "op", "A/A ratio", "95% CI", "p", f"verdict (alpha {args.alpha})"], rows))
    total = sum(calm.values())
    n = args.repeats * len(ops)
    print()
    for op in ops:
        print(f"{op}: {calm[op]}/{args.repeats} no difference")
    ok = total / n >= TARGET
    print(f"A/A 'no difference' in {total}/{n} comparisons = {100 * total / n:.1f}% "
          f"(target >= {100 * TARGET:.0f}%: {'ok' if ok else 'MISSED'}); {args.windows} windows x "
          f"{args.requests} requests, alpha {args.alpha}; {time.monotonic() - t0:.0f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
