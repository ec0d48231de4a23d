"""Connection tracking on kvcached 0.1.6's own listener (the review thread's measurement), and the reference
vs kvcached 0.1.6, each measured side by side in one ``lastcall bench`` run; the tables in docs/benchmarks.md.

Run:  .venv/bin/python benchmarks/bench_kvcached.py [--windows 200 --requests 100 --warmup 2 --seed 1] [--write]

Two runs, one after the other (each prints its own table as it ends):

* ``tracking``: ``lastcall bench --arm kvcached==0.1.6``: kvcached's listener with its connection tracking a
  no-op (the baseline), as shipped, and a second child as shipped (the A/A floor);
* ``reference``: ``lastcall bench --arm kvcached==0.1.6 --arm reference``: kvcached as shipped (the
  baseline), the reference worker listener, and the A/A floor of kvcached.

``--write`` commits both as docs/data/kvcached_bench.json (what the tables show, as benchmarks/bench_table.py
reduces a run) and the tables between the kvcached-bench markers of docs/benchmarks.md;
tests/test_bench_arm.py re-renders them from that JSON.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_table
import docpage

NAME = "kvcached-bench"  # docs/data/kvcached_bench.json and the markers in docs/benchmarks.md
KV = "kvcached==0.1.6"
THREAD = {"kv_tensors_created": 1.1, "map16": 3.1, "unmap_pair": 4.1}  # % shipped over its no-op arm, M1 Pro
OP_NAMES = {"kv_tensors_created": "small request (kv_tensors_created)", "map16": "map, 16 offsets",
            "unmap_pair": "unmap pair (prepare + commit)"}


def _ci(c: Mapping[str, Any]) -> str:
    return f"[{c['ci'][0]:.3f}, {c['ci'][1]:.3f}]"


def _floor(aa: Mapping[str, Any] | None) -> str:
    if not aa:
        return ""
    return f"{aa['ratio']:.3f} {_ci(aa)}, p {aa['p']:.2g}{'' if aa['verdict'] == 'no difference' else ' !'}"


def tracking_table(run: Mapping[str, Any]) -> str:
    """Per op: the no-op arm's and the shipped arm's medians, shipped / no-op with its interval, p, verdict,
    the A/A floor (shipped vs shipped), and the thread's own figure beside it."""
    base, conf = run["baseline"], f"{run['settings']['confidence'] * 100:g}%"
    out = [f"| op | tracking no-op (us) | as shipped (us) | shipped / no-op | {conf} CI | p | verdict | "
           "A/A floor (shipped vs shipped) [CI], p | the thread (M1 Pro) |", "|---|---|---|---|---|---|---|---|---|"]
    for op, o in run["ops"].items():
        (arm, c), = o["vs_baseline"].items()
        thread = f"+{THREAD[op]:.1f} %" if op in THREAD else ""
        out.append(f"| {OP_NAMES.get(op, op)} | {o['arms'][base]['median_us']:.1f} | {o['arms'][arm]['median_us']:.1f} "
                   f"| {c['ratio']:.3f} ({(c['ratio'] - 1) * 100:+.1f} %) | {_ci(c)} | {c['p']:.2g} | {c['verdict']} "
                   f"| {_floor(o['aa_floor'])} | {thread} |")
    return "\n".join(out)


def reference_table(run: Mapping[str, Any]) -> str:
    """Per op: kvcached's median, the reference's, reference / kvcached with its interval, p, verdict, floor."""
    base, conf = run["baseline"], f"{run['settings']['confidence'] * 100:g}%"
    out = [f"| op | {base} (us) | reference (us) | reference / kvcached | {conf} CI | p | verdict | "
           f"A/A floor ({base} vs itself) [CI], p |", "|---|---|---|---|---|---|---|---|"]
    for op, o in run["ops"].items():
        c = o["vs_baseline"]["reference"]
        out.append(f"| {OP_NAMES.get(op, op)} | {o['arms'][base]['median_us']:.1f} | "
                   f"{o['arms']['reference']['median_us']:.1f} | {c['ratio']:.3f} | {_ci(c)} | {c['p']:.2g} | "
                   f"{c['verdict']} | {_floor(o['aa_floor'])} |")
    return "\n".join(out)


def tables(data: Mapping[str, Any]) -> str:
    """Both tables, each under the command that measured it."""
    t, r = data["runs"]["tracking"], data["runs"]["reference"]
    return "\n".join([f"`{t['command']}` ({t['seconds']:.0f} s, {t['leak_checks']} leak checks passed, "
                      f"{bench_table.where(t)}):", "", tracking_table(t), "",
                      f"`{r['command']}` ({r['seconds']:.0f} s, {r['leak_checks']} leak checks passed, "
                      f"{bench_table.where(r)}):", "", reference_table(r), "", docpage.provenance(data)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--windows", type=int, default=200)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--write", action="store_true", help="commit: docs/data/kvcached_bench.json and the tables")
    args = ap.parse_args(argv)
    from harness.bench.arms import OPS
    from harness.bench.command import format_bench, run_bench

    flags = f"--windows {args.windows} --requests {args.requests} --warmup {args.warmup} --seed {args.seed}"
    runs: dict[str, Any] = {}
    for key, arms in (("tracking", [KV]), ("reference", [KV, "reference"])):
        r = run_bench(arms, list(OPS), args.windows, args.requests, args.warmup, seed=args.seed)
        print(format_bench(r), flush=True)
        if r.problems:
            print(f"bench_kvcached: not closed cleanly: {r.problems}", file=sys.stderr)
            return 1
        command = "lastcall bench " + " ".join(f"--arm {a}" for a in arms) + f" {flags}"
        runs[key] = bench_table.reduce(r.as_dict(), command)
    made = docpage.measured(__file__, sys.argv[1:] if argv is None else argv)
    data: dict[str, object] = {**{k: v for k, v in made.items() if k != "command"}, "runs": runs}
    print(tables(data))
    if args.write:
        docpage.write(NAME, data, tables(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
