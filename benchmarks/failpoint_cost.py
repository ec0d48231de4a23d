"""Cost of ``harness.failpoints.hit(site)`` at a site nothing is armed at.

Run:  .venv/bin/python benchmarks/failpoint_cost.py [--runs 10] [--calls 1000000] [--write]

``--write`` commits the result: docs/data/failpoint_cost.json and its table in docs/benchmarks.md.

Each figure is the median over ``runs`` of (loop time / calls), in ns per call:

* ``empty loop``: ``for _ in range(n): pass``: the floor every loop pays;
* ``hit, nothing armed``: the listener's case in production;
* ``hit, another site armed``: the registry holds a different site (armed with
  ``pass``): still one dict miss;
* ``hit, this site armed (pass)``: for comparison, the cost once the site is
  armed (a lock, a counter, a condition notify); not on any production path.

Target: a disarmed hit <= 0.2 us (200 ns).  The verdict is printed for the
call itself (loop floor subtracted) and for the whole loop iteration.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping

import docpage

from harness import failpoints
from harness.bench.interleave import format_rows

TARGET_NS = 200.0
SITE = "listener.frame_read"
OTHER = "backend.map_to_kv_tensors"


def empty_loop(n: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        pass
    return time.perf_counter_ns() - t0


def hit_loop(n: int) -> int:
    hit, site = failpoints.hit, SITE
    t0 = time.perf_counter_ns()
    for _ in range(n):
        hit(site)
    return time.perf_counter_ns() - t0


def per_call(loop: Callable[[int], int], runs: int, n: int) -> float:
    loop(min(n, 10_000))  # warm up
    return statistics.median(loop(n) / n for _ in range(runs))


def table(result: Mapping[str, object]) -> str:
    """The docs table of a result (:func:`main`'s JSON): ns per call, and the floor subtracted."""
    ns = result["ns_per_call"]
    assert isinstance(ns, dict)
    floor = ns["empty_loop"]
    return "\n".join([
        "| case | ns per call | minus the empty loop |", "|---|---|---|",
        f"| `failpoints.hit(site)`, nothing armed | {ns['nothing_armed']:.1f} | {ns['nothing_armed'] - floor:.1f} "
        f"(target <= {result['target_ns']:.0f}) |",
        f"| another site armed | {ns['another_armed']:.1f} | {ns['another_armed'] - floor:.1f} |",
        f"| this site armed with `pass` | {ns['this_armed']:.1f} | (comparison only) |",
        "", docpage.provenance(result)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="ns per failpoints.hit() call on a disarmed site")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--calls", type=int, default=1_000_000)
    p.add_argument("--write", action="store_true", help="commit the result to docs/ (data and table)")
    args = p.parse_args(argv)
    runs, n = args.runs, args.calls
    failpoints.reset()
    rows: list[list[str]] = []
    floor = per_call(empty_loop, runs, n)
    rows.append(["empty loop (floor)", f"{floor:.1f}", "", ""])
    bare = per_call(hit_loop, runs, n)
    net_ok = bare - floor <= TARGET_NS
    verdict = (f"<= {TARGET_NS:.0f} ns: net {'ok' if net_ok else 'MISSED'}, "
               f"gross {'ok' if bare <= TARGET_NS else 'MISSED'}")
    rows.append(["hit, nothing armed", f"{bare:.1f}", f"{bare - floor:.1f}", verdict])
    failpoints.arm(OTHER, "pass")
    try:
        other = per_call(hit_loop, runs, n)
        rows.append(["hit, another site armed", f"{other:.1f}", f"{other - floor:.1f}", ""])
    finally:
        failpoints.reset()
    failpoints.arm(SITE, "pass")
    try:
        armed = per_call(hit_loop, runs, max(n // 10, 1))
        rows.append([f"hit, this site armed (pass; {max(n // 10, 1)} calls)", f"{armed:.1f}",
                     f"{armed - floor:.1f}", "(comparison only)"])
    finally:
        failpoints.reset()
    print(f"# failpoint_cost  {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"# python {platform.python_version()} on {platform.platform()}")
    print(f"# argv: {' '.join(sys.argv[1:]) or '(defaults)'}")
    print(f"failpoints.hit(site): median of {runs} runs x {n} calls, ns per call")
    print(format_rows(["case", "ns/call", "minus floor", "target"], rows))
    if args.write:
        result = {**docpage.measured(__file__, sys.argv[1:] if argv is None else argv), "runs": runs, "calls": n,
                  "target_ns": TARGET_NS, "ns_per_call": {"empty_loop": floor, "nothing_armed": bare,
                                                          "another_armed": other, "this_armed": armed}}
        docpage.write("failpoint-cost", result, table(result))
    return 0 if net_ok else 1


if __name__ == "__main__":
    sys.exit(main())
