"""``lastcall report`` (re-judge a stored run, or merge shards), ``lastcall repro`` and ``lastcall bench``."""

from __future__ import annotations

import argparse
from typing import Any

from harness.commands.common import int_at_least, pick, unique

__all__ = ["register"]


def register(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    """Add ``report``, ``repro`` and ``bench`` to lastcall's subcommands."""
    p = sub.add_parser("report", help="re-judge a stored run and rebuild its page", formatter_class=fmt,
                       description="Read a run's history (reports/<run id>/history.jsonl; missing or garbled "
                                   "lines are reported and the rest is judged), run the checkers of the "
                                   "verdicts.json beside it on it again (with the snapshots.json beside it), "
                                   "print the verdicts, and rewrite verdicts.json and index.html. --merge "
                                   "builds one session page from the report directories of a sharded session.",
                       epilog="exit codes: 0 no verdict violated, 1 a verdict violated, 2 missing or unreadable "
                              "history, 3 internal error; --merge: 0 all passed, 1 a run failed, an item is FLAKY "
                              "or a shard's pytest failed, 2 not one session's shards (each problem on one line)")
    p.add_argument("history", nargs="?", metavar="HISTORY.jsonl", help="a run's history.jsonl")
    p.add_argument("--merge", nargs="+", metavar="DIR", help="shards' report directories: one page and exit status")
    p.add_argument("--out", metavar="DIR", help="write verdicts.json and index.html here (default: beside HISTORY; "
                   "--merge: reports-merged)")
    p.add_argument("--check", action="append", default=[], metavar="NAME",
                   help="judge with these checkers (repeatable, default parameters) instead of the stored list")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("repro", help="write a standalone script that reproduces an engine run's finding",
                       formatter_class=fmt, description="Write a Python script (standard library only) that "
                       "launches the engine as RUN_DIR's run did, applies its faults and exits 1 when the defect "
                       "is there, 0 when not (harness.repro).", epilog="exit codes: 0 written, 2 refused run dir")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run's report directory")
    p.add_argument("--out", metavar="FILE", help="write the script here (default: stdout)")
    p.add_argument("--model", metavar="M", help="the script's default model (default: the run's)")
    p.set_defaults(func=lambda a: __import__("harness.repro", fromlist=["main"]).main(a.run_dir, a.out, a.model))

    p = sub.add_parser("bench", help="compare listener variants in real worker processes", formatter_class=fmt,
                       description="Start one worker process per arm (a variant name or module:attribute, or a "
                                   "worker target such as kvcached==0.1.6 serving its own listener), send "
                                   "each op's requests from here in windows interleaved across the arms, and "
                                   "print per op the median of window medians, the ratio to the first arm with "
                                   "a bootstrap interval, the Mann-Whitney p and a verdict, beside an A/A "
                                   "control (a second worker of the first arm). Every worker's fds and threads "
                                   "are checked after every window.",
                       epilog="exit codes: 0 measured, 1 a worker leaked fds or threads (or did not exit "
                              "cleanly), 2 bad flag or unknown arm or op, 3 internal error")
    p.add_argument("--arm", action="append", default=[], metavar="NAME",
                   help="an arm, the first is the baseline (repeatable; default: reference and "
                        "harness.bench.arms:TRACKING_NOOP); a worker target such as kvcached==0.1.6 runs its own "
                        "listener, backend stubbed; T+tracking-noop is T with connection tracking a no-op, and "
                        "--arm T alone compares T with T+tracking-noop")
    p.add_argument("--op", action="append", default=[], metavar="OP",
                   help="kv_tensors_created, map16 (or map<N>), unmap_pair (repeatable; default: all three)")
    p.add_argument("--workload", metavar="FILE", help="a YAML workload: ops, and optionally arms, windows, "
                   "requests, warmup (the file's values replace those flags; --op and --arm given here win)")
    p.add_argument("--windows", type=int_at_least(3, 1000), default=15, help="measured windows per op and arm "
                   "(default 15)")
    p.add_argument("--requests", type=int_at_least(1, 100_000), default=300, help="requests per window (default 300)")
    p.add_argument("--warmup", type=int_at_least(0, 100), default=1, help="rounds run first and discarded (default 1)")
    p.add_argument("--order", choices=["abba", "random"], default="abba",
                   help="arm order within a round: alternating (default) or shuffled")
    p.add_argument("--keep-alive", action="store_true", help="one connection per arm instead of one per request")
    p.add_argument("--no-aa", action="store_true", help="leave out the A/A control")
    p.add_argument("--no-pin", action="store_true", help="let the scheduler place the client and the arms (default: "
                   "requests sent from the first CPU, every arm on the second, where there are two)")
    p.add_argument("--alpha", type=float, default=0.01, help="significance level of the verdict (default 0.01)")
    p.add_argument("--seed", type=int, help="seed of the random order and the bootstrap (default: drawn, printed)")
    p.add_argument("--backend", choices=["noop", "allocator"], default="noop",
                   help="the workers' backend: stubbed (default, as kvcached's VMM stubbed) or the allocator")
    p.add_argument("--json", metavar="FILE", help="write medians, ratios, intervals, p-values and the A/A floor")
    p.add_argument("--svg", metavar="FILE", help="write a plot of every window median per arm and op")
    p.set_defaults(func=_cmd_bench)


def _cmd_report(args: argparse.Namespace) -> int:
    if args.merge is not None or args.history is None:
        from harness.report.merge import merge_command

        return merge_command(args.merge, args.history, args.out, args.check)
    from harness.checkers.params import CHECKER_PARAMS
    from harness.report.rejudge import report_history

    checks = [pick("checker", n, sorted(CHECKER_PARAMS)) for n in unique(args.check)]
    return report_history(args.history, args.out, checks)


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.workload:  # its limits and bounds before the bench is imported (torch: seconds): a bad file exits 2 at once
        from harness.bench.workload import read_workload

        read_workload(args.workload)
    from harness.bench.command import bench_main

    return bench_main(args)
