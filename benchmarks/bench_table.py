"""The docs table of a ``lastcall bench --json OUT.json`` run (connection tracking on vs off, in
docs/benchmarks.md), and the run itself committed as docs/data/lastcall_bench.json.

Run:  .venv/bin/lastcall bench --windows 200 --requests 100 --warmup 2 --seed 1 --json /tmp/bench.json
      .venv/bin/python benchmarks/bench_table.py /tmp/bench.json "lastcall bench --windows 200 ..." [--write]

The committed JSON keeps what the table shows (per op: each arm's median, each arm's comparison with the
baseline, the A/A floor) and the run's settings; the window medians are left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

import docpage

from harness.provenance import FIELDS

NAME = "lastcall-bench"  # docs/data/lastcall_bench.json and the markers in docs/benchmarks.md


def reduce(run: Mapping[str, Any], command: str) -> dict[str, Any]:
    """What the table needs of a ``lastcall bench --json`` result, the command that made it, and the rest of
    the provenance the result recorded."""
    keep = ("ratio", "ci", "p", "verdict")
    ops = {op: {"arms": {a: {"median_us": s["median_us"]} for a, s in o["arms"].items()},
                "vs_baseline": {a: {k: c[k] for k in keep} for a, c in o["vs_baseline"].items()},
                "aa_floor": {k: o["aa_floor"][k] for k in keep} if o.get("aa_floor") else None}
           for op, o in run["ops"].items()}
    made = {k: run[k] for k in FIELDS if k in run and k != "command"}
    return {**made, "command": command, "settings": run["settings"], "baseline": run["baseline"],
            "aa_arm": run["aa_arm"], "ops": ops, "leak_checks": run.get("leak_checks"), "seconds": run.get("seconds")}


def _ci(c: Mapping[str, Any]) -> str:
    return f"[{c['ci'][0]:.3f}, {c['ci'][1]:.3f}]"


def where(run: Mapping[str, Any]) -> str:
    """Where a run's client and arms ran (runs from before lastcall bench pinned them have no placement)."""
    p = run["settings"].get("placement")
    return f"requests from CPU {p['client']}, every arm on CPU {p['arms']}" if p else "unpinned"


def table(result: Mapping[str, Any]) -> str:
    """One row per op and compared arm: the medians, the ratio to the baseline with its interval, p, the
    verdict, and the A/A floor (the formats of ``lastcall bench``'s own table)."""
    base, ops = result["baseline"], result["ops"]
    conf = f"{result['settings']['confidence'] * 100:g}%"
    arms = list(dict.fromkeys(a for o in ops.values() for a in o["vs_baseline"]))
    one = len(arms) == 1  # one compared arm names its column; several are named in each row
    out = [f"| op | {base} (us) | {arms[0] if one else 'arm'} (us) | ratio | {conf} CI | p | verdict | "
           "A/A floor [CI], p |", "|---|---|---|---|---|---|---|---|"]
    for op, o in ops.items():
        for a, c in o["vs_baseline"].items():
            shown = op if one else f"{op}, {a}"
            aa = o["aa_floor"]
            floor = (f"{aa['ratio']:.3f} {_ci(aa)}, p {aa['p']:.2g}{'' if aa['verdict'] == 'no difference' else ' !'}"
                     if aa else "")
            out.append(f"| {shown} | {o['arms'][base]['median_us']:.1f} | {o['arms'][a]['median_us']:.1f} | "
                       f"{c['ratio']:.3f} | {_ci(c)} | {c['p']:.2g} | {c['verdict']} | {floor} |")
    return "\n".join([*out, "", f"Placement: {where(result)}.", "", docpage.provenance(result)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("run", help="the file `lastcall bench --json` wrote")
    ap.add_argument("command", help="the lastcall bench command that made it (shown beside the table)")
    ap.add_argument("--write", action="store_true", help="commit it: docs/data/lastcall_bench.json and the table")
    args = ap.parse_args(argv)
    with open(args.run) as f:
        result = reduce(json.load(f), args.command)
    print(table(result))
    if args.write:
        docpage.write(NAME, result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
