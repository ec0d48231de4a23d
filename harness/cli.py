"""The ``lastcall`` command line: ``main(argv) -> int``, one subcommand per concern.

Commands:
  contract   prove every stop-contract check twice: kept by the reference, broken by its planted bug
  serve      run one reference worker in the foreground until SIGTERM or SIGINT
  ctl        list, delete or sweep the sockets and usage segments instances leave behind
  run        run scenario files or directories through pytest; everything after -- goes to pytest
  list       list scenarios with their matrix, marks and the planted bugs they catch
  replay     rerun the scenario item that produced a report
  validate   check scenario files (or directories of them) without running anything
  schema     print the JSON Schema of a scenario file, for editors
  bench      compare listener variants in real worker processes: interleaved windows, interval, A/A floor
  report     re-judge a stored run's history with the checkers and rebuild its HTML page; --merge shards
  mutate     mutate a listener module one edit at a time: which breaks its scenarios miss
  prune-reports  remove the old runs and sessions of a reports directory

Exit codes:
  0    ok
  1    contract: the reference broke a check, or a planted bug was not caught;
       run: a scenario failed (a violated invariant, a hung run, or a planted bug not caught; pytest's 1);
       report: a checker found a violation in the history (--merge: a run failed, or an item is FLAKY);
       bench: a worker's fds or threads grew over a window (a leak), or a worker did not exit cleanly;
       mutate: a non-equivalent mutant survived; prune-reports: something could not be removed
  2    usage error or bad input (bad flag, unknown name, invalid file, instance in use): one line on stderr
       per error; run: also pytest's 4 (usage) and 5 (nothing collected)
  3    internal error: one line on stderr naming the file the traceback was written to (run: pytest's 3)
  130  interrupted (Ctrl-C or SIGTERM outside ``serve``; every run cleans up first; run: pytest's 2)
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NoReturn

from harness import __version__, envvars
from harness.errors import ConfigError, HarnessError, TargetError
from harness.interrupts import sigterm_interrupts
from harness.units import parse_duration, parse_size

if TYPE_CHECKING:
    from harness.contract import Check, Outcome

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_BROKEN", "EXIT_USAGE", "EXIT_INTERNAL", "EXIT_INTERRUPTED"]

EXIT_OK = 0  # the command did what was asked
EXIT_BROKEN = 1  # contract: a check failed its expectation
EXIT_USAGE = 2  # bad invocation or input; the message says what to change
EXIT_INTERNAL = 3  # a bug in lastcall; the traceback is in a temp file
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
REFERENCE = "reference"  # the variant that must keep every check
DETAIL_MIN = 30  # columns of detail shown however narrow the terminal
REPEAT_MAX = 1000  # lastcall run --repeat: more is a typo, not a flakiness hunt


class UsageError(HarnessError):
    """A bad command line, as argparse reports it (exit code 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so main() has one boundary."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


# ------------------------------------------------------------------ argument types
def _arg_type(fn: Callable[[str], object], name: str) -> Callable[[str], object]:
    def convert(text: str) -> object:
        try:
            return fn(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name
    return convert


def _int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer, e.g. {low}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} must be >= {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{value} is over lastcall's limit of {high}; give at most {high}")
        return value

    return convert


def _pick(kind: str, name: str, known: Sequence[str]) -> str:
    """``name`` if known, else ConfigError with the nearest known name and the full list."""
    if name in known:
        return name
    near = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise ConfigError(f"unknown {kind} {name!r}{hint} (known: {', '.join(known)})")


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


# ------------------------------------------------------------------------ contract
def _expectation(check: Check, variant: str) -> str | None:
    """The expected result: "kept" for the reference, "broken" for a bug the check names, else None."""
    if variant == REFERENCE:
        return "kept"
    return "broken" if variant in check.catches else None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _cmd_contract(args: argparse.Namespace) -> int:
    from harness.contract import CHECKS, of_target, run_check
    from harness.reference.variants import VARIANTS

    if args.target:
        return of_target.run_target_contract(args.target, args.check)
    by_name = {c.name: c for c in CHECKS}
    checks = [by_name[_pick("check", n, list(by_name))] for n in _unique(args.check)] or list(CHECKS)
    chosen = [_pick("variant", n, list(VARIANTS)) for n in _unique(args.variant)]
    plan: list[tuple[Check, str]] = []
    for check in checks:
        names = list(VARIANTS) if args.all else chosen or [REFERENCE, *check.catches]
        plan += [(check, v) for v in names]
    width_c = max(len("check"), *(len(c.name) for c, _ in plan))
    width_v = max(len("variant"), *(len(v) for _, v in plan))
    prefix = f"{'line':>4}  {'check':<{width_c}}  {'variant':<{width_v}}  {'result':<6}  {'time':>7}  "
    room = max(DETAIL_MIN, shutil.get_terminal_size().columns - len(prefix)) if sys.stdout.isatty() else None
    print(f"{prefix}detail", flush=True)
    outcomes: list[tuple[Check, Outcome]] = []
    for check, name in plan:
        out = run_check(check, VARIANTS[name])
        outcomes.append((check, out))
        expect = _expectation(check, name)
        detail = "" if out.kept else _first_line(out.detail)
        if expect == "kept" and not out.kept:
            detail = f"SURPRISE: {detail}"
        elif expect == "broken" and out.kept:
            detail = "SURPRISE: the check names this bug but it was kept"
        if room is not None and len(detail) > room:
            detail = detail[: room - 3] + "..."
        result = "kept" if out.kept else "BROKEN"
        row = f"{check.line:>4}  {check.name:<{width_c}}  {name:<{width_v}}  {result:<6}  {out.seconds:>6.2f}s"
        print(f"{row}  {detail}".rstrip(), flush=True)
    return _contract_summary(outcomes)


def _contract_summary(outcomes: list[tuple[Check, Outcome]]) -> int:
    ref = [o for _, o in outcomes if o.variant == REFERENCE]
    named = [(c, o) for c, o in outcomes if _expectation(c, o.variant) == "broken"]
    bugs = _unique(o.variant for _, o in named)
    caught = [v for v in bugs if all(not o.kept for _, o in named if o.variant == v)]
    extra = sum(1 for c, o in outcomes if _expectation(c, o.variant) is None and not o.kept)
    wrong = [(c, o) for c, o in outcomes if _expectation(c, o.variant) == ("broken" if o.kept else "kept")]
    parts = []
    if ref:
        parts.append(f"reference keeps {sum(o.kept for o in ref)}/{len(ref)} checks")
    if bugs:
        parts.append(f"{len(caught)}/{len(bugs)} planted bugs caught by the checks that name them")
    if extra:
        parts.append(f"{extra} more broken by checks that do not name the bug")
    parts.append(f"{len(wrong)} surprise{'' if len(wrong) == 1 else 's'}")
    total = sum(o.seconds for _, o in outcomes)
    print(f"{'; '.join(parts)} ({total:.1f}s)", flush=True)
    for check, out in wrong:
        what = (f"reference broke {check.name} (line {check.line}): {_first_line(out.detail)}"
                if out.variant == REFERENCE else f"{out.variant} was not caught by {check.name} (line {check.line})")
        print(f"  {what}\n    replay: lastcall contract --check {check.name} --variant {out.variant}")
    return EXIT_BROKEN if wrong else EXIT_OK


# --------------------------------------------------------------------------- serve
def _cmd_serve(args: argparse.Namespace) -> int:
    from harness.reference.paths import socket_path

    if args.rank >= args.tp:
        raise ConfigError(f"--rank {args.rank} must be smaller than --tp {args.tp}")
    socket_path(args.ipc, args.rank, args.pp, args.root)  # refuse a too-long path before importing torch
    from harness.reference.listener import ListenerConfig
    from harness.reference.serve import serve
    from harness.reference.worker import WorkerSpec

    spec = WorkerSpec(args.ipc, rank=args.rank, pp=args.pp, root=args.root, capacity=args.capacity,
                      config=ListenerConfig(drain_timeout=args.drain_timeout))
    return serve(spec)


# ----------------------------------------------------------------------------- ctl
def _table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


def _cmd_ctl_list(args: argparse.Namespace) -> int:
    from harness.reference.ctl import list_instances
    from harness.reference.paths import default_root

    rows: list[tuple[str, ...]] = [("kind", "ipc", "rank/pp", "pid", "state", "path")]
    for inst in list_instances(args.root, args.shm_dir):
        for a in inst.artifacts:
            where = f"{a.rank}/{a.pp}" if a.rank is not None else "-"
            rows.append((a.kind, a.ipc, where, str(a.owner.pid) if a.owner else "-", a.state, str(a.path)))
    if len(rows) == 1:
        print(f"no lastcall instances under {args.root or default_root()} or in {args.shm_dir}")
    else:
        _table(rows)
    return EXIT_OK


def _cmd_ctl_delete(args: argparse.Namespace) -> int:
    from harness.reference.ctl import delete_instance

    removed = delete_instance(args.ipc, args.root, args.shm_dir, force=args.force)
    for path in removed:
        print(f"removed {path}")
    if not removed:
        print(f"nothing to delete for {args.ipc}")
    return EXIT_OK


def _cmd_ctl_sweep(args: argparse.Namespace) -> int:
    from harness.reference.ctl import sweep

    result = sweep(args.root, args.shm_dir)
    for path in result.removed:
        print(f"removed {path}")
    for inst in result.kept:
        print(f"kept {inst.ipc} (live pid {', '.join(str(o.pid) for o in inst.live_owners)})")
    if not result.removed:
        print("nothing to sweep")
    return EXIT_OK


# ------------------------------------------------------------------ validate, schema
def _cmd_validate(args: argparse.Namespace) -> int:
    from harness.scenario import expand, load_many
    from harness.targets.names import check_target

    target = args.target or envvars.text("LASTCALL_TARGET")
    why = None if target is None else check_target(target)  # by name only: validate imports no target
    scenarios, errors = load_many(args.paths)
    for sc in scenarios:
        ids = [item.id for item in expand(sc)]
        print(f"{sc.source}: ok, {len(ids)} run{'' if len(ids) == 1 else 's'}: {', '.join(ids)}")
    if why is not None:
        print(f"lastcall validate: {'--target' if args.target else 'LASTCALL_TARGET'}: {why}", file=sys.stderr)
    for err in errors:
        for each in err.errors:
            print(each, file=sys.stderr)
    if errors:
        total = len(scenarios) + len(errors)
        print(f"lastcall validate: {len(errors)} of {total} file{'' if total == 1 else 's'} invalid",
              file=sys.stderr)
    return EXIT_USAGE if errors or why is not None else EXIT_OK


def _cmd_run(args: argparse.Namespace) -> int:
    from harness.scenario.commands import run

    own = [*([f"--kvcached-src={args.kvcached_src}"] if args.kvcached_src else []),
           *([f"--repeat={args.repeat}"] if args.repeat is not None else []),
           *([f"--junitxml={args.junitxml}"] if args.junitxml else []),
           *(["-x"] if args.exitfirst else []),
           *(["--lastcall-chain"] if args.chain else []),
           *([f"--lastcall-reports={args.lastcall_reports}"] if args.lastcall_reports is not None else [])]
    return run(args.paths, workers=args.n, target=args.target, listener=args.listener, keyword=args.k,
               marks=args.m, extra=[*own, *args.pytest_args])


def _cmd_fetch(args: argparse.Namespace) -> int:
    from harness.errors import ConfigError
    from harness.targets.fetch import fetch

    code = 0
    for spec in args.specs:
        try:
            print(fetch(spec))
        except ConfigError as exc:
            print(f"lastcall fetch: {exc}", file=sys.stderr)
            code = 2
    return code


def _cmd_replay(args: argparse.Namespace) -> int:
    from harness.report.replay import replay

    return replay(args.report, args.path)


def _cmd_targets(args: argparse.Namespace) -> int:
    from harness.targets import catalogue, describe_one

    if os.getcwd() not in sys.path:  # a module:attribute under the working directory, as check_target finds it
        sys.path.insert(0, os.getcwd())
    rows = catalogue() if not args.specs else [describe_one(spec) for spec in _unique(args.specs)]
    _table([("TARGET", "CAPABILITIES", "STATUS"), *((n, caps, state if state.startswith("unavailable") else
                                                     f"{state}: {about}" if about else state)
                                                    for n, state, caps, about in rows)])
    return EXIT_OK


def _cmd_list(args: argparse.Namespace) -> int:
    from harness.scenario.commands import list_scenarios

    return list_scenarios(args.paths)


def _cmd_report(args: argparse.Namespace) -> int:
    if args.merge is not None or args.history is None:
        from harness.report.merge import merge_command

        return merge_command(args.merge, args.history, args.out, args.check)
    from harness.checkers.params import CHECKER_PARAMS
    from harness.report.rejudge import report_history

    checks = [_pick("checker", n, sorted(CHECKER_PARAMS)) for n in _unique(args.check)]
    return report_history(args.history, args.out, checks)


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.workload:  # its limits and bounds before the bench is imported (torch: seconds): a bad file exits 2 at once
        from harness.bench.workload import read_workload

        read_workload(args.workload)
    from harness.bench.command import bench_main

    return bench_main(args)


def _cmd_schema(args: argparse.Namespace) -> int:
    import json

    from harness.scenario import json_schema
    from harness.targets.names import WORKER_VARIANTS  # the names only: the variants import torch

    print(json.dumps(json_schema(variants=[v for v in WORKER_VARIANTS if v != REFERENCE]), indent=2))
    return EXIT_OK


# -------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    """The whole command line; each subparser sets ``func`` to its command."""
    fmt = argparse.RawDescriptionHelpFormatter
    codes = (__doc__ or "").split("Exit codes:", 1)[1].rstrip()
    parser = _Parser(prog="lastcall", formatter_class=fmt, epilog=f"exit codes:{codes}",
                     description="lastcall: test and fault injection for the shutdown paths of IPC listeners.")
    parser.add_argument("--version", action="version", version=f"lastcall {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("contract", help="run the stop-contract checks", formatter_class=fmt,
                       description="Run each stop-contract check against the reference (must keep it) and "
                                   "against the planted bugs it names (must break it), one row per pair.",
                       epilog="exit codes: 0 every expectation met, 1 a surprise (named in the summary), "
                              "2 unknown name, 3 internal error")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--variant", action="append", default=[], metavar="NAME",
                       help="run against these variants instead (repeatable; 'reference' is one)")
    group.add_argument("--all", action="store_true", help="the full matrix: every check x every variant")
    group.add_argument("--target", metavar="T", help="the checks against target T and its planted bugs (variants)")
    p.add_argument("--check", action="append", default=[], metavar="NAME", help="only these checks (repeatable)")
    p.set_defaults(func=_cmd_contract)

    p = sub.add_parser("serve", help="run one reference worker until SIGTERM/SIGINT", formatter_class=fmt,
                       description="Serve one reference worker in the foreground. The socket path is the first "
                                   "line on stdout; SIGTERM or SIGINT shuts it down (a drain that times out is "
                                   "retried) and the process exits 0 with nothing left behind.",
                       epilog="exit codes: 0 shut down cleanly, 2 bad flag or socket in use, 3 internal error")
    p.add_argument("--ipc", required=True, metavar="NAME", help="instance name (names the socket directory)")
    p.add_argument("--rank", type=_int_at_least(0, 63), default=0, help="tensor-parallel rank (default 0)")
    p.add_argument("--pp", type=_int_at_least(0, 63), default=0, help="pipeline stage (default 0)")
    p.add_argument("--tp", type=_int_at_least(1, 64), default=1, help="tensor-parallel size; rank < tp (default 1)")
    p.add_argument("--root", metavar="DIR", help="socket root (default $LASTCALL_ROOT or the temp dir)")
    p.add_argument("--capacity", type=_arg_type(parse_size, "size"), default=1 << 30, metavar="SIZE",
                   help="KV address space of group 0, e.g. 512MiB (default 1GiB)")
    p.add_argument("--drain-timeout", type=_arg_type(parse_duration, "duration"), default=5.0,
                   metavar="SECONDS", help="how long stop waits for a handler, e.g. 500ms (default 5s)")
    p.set_defaults(func=_cmd_serve)

    ctl = sub.add_parser("ctl", help="list, delete or sweep leftover instances",
                         description="Instances are socket directories under the root and usage segments "
                                     "in the shm dir; owner records say whether their process is alive.")
    ctl_sub = ctl.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, func, about in (("list", _cmd_ctl_list, "one line per socket or segment, with its owner"),
                              ("delete", _cmd_ctl_delete, "remove one instance's sockets, records and segment"),
                              ("sweep", _cmd_ctl_sweep, "remove every instance whose owners are all dead")):
        q = ctl_sub.add_parser(name, help=about, description=about)
        if name == "delete":
            q.add_argument("ipc", metavar="IPC", help="the instance's ipc name (or the key list shows)")
            q.add_argument("--force", action="store_true", help="delete even while an owner is alive")
        q.add_argument("--root", metavar="DIR", help="socket root (default $LASTCALL_ROOT or the temp dir)")
        q.add_argument("--shm-dir", default="/dev/shm", metavar="DIR", help="where usage segments live")
        q.set_defaults(func=func)

    p = sub.add_parser("run", help="run scenarios (through pytest)", formatter_class=fmt,
                       usage="lastcall run [options] PATH... [-- PYTEST ARGS]",
                       description="Run scenario files or directories through pytest with the lastcall plugin: "
                                   "each matrix point on its target, and each planted bug it names. Every file "
                                   "is validated and every target named is imported first: any error is "
                                   "printed, all of them, and nothing starts. Everything after -- goes to "
                                   "pytest as it is (e.g. -- -rs --durations 5).",
                       epilog="exit codes (pytest's in brackets): 0 all passed (0), 1 a scenario failed (1), "
                              "2 usage error, an invalid file, an unknown target or nothing collected (4, 5), "
                              "3 internal error (3), 130 interrupted (2)")
    p.add_argument("paths", nargs="+", metavar="PATH", help="scenario files or directories")
    p.add_argument("-n", metavar="N", help="parallel workers (pytest-xdist), e.g. 2 or auto")
    p.add_argument("--target", metavar="T", help="run every scenario against this target or variant "
                   "(pytest: --lastcall-target; default: each file's target:, or $LASTCALL_TARGET)")
    p.add_argument("-k", metavar="EXPR", help="only scenarios matching the expression (as pytest -k)")
    p.add_argument("-m", metavar="MARKS", help="only scenarios with these marks (as pytest -m)")
    p.add_argument("-x", "--exitfirst", action="store_true", help="stop at the first failing scenario item")
    p.add_argument("--repeat", type=_int_at_least(1, REPEAT_MAX), metavar="N",
                   help="run each item N times; one that passes sometimes and fails sometimes is FLAKY")
    p.add_argument("--chain", action="store_true",
                   help="run engine scenarios as chained runs: one that ends by restarting its engine hands it to "
                        "the next of the same flags, each judged on its own window (pytest: --lastcall-chain; "
                        "not with -n)")
    p.add_argument("--junitxml", metavar="FILE", help="write a JUnit XML report (one testcase per item)")
    p.add_argument("--lastcall-reports", metavar="DIR",
                   help="where each run writes its report (default: reports/; empty: none)")
    p.add_argument("--listener", metavar="MODULE:ATTR",
                   help="the reference target with this listener class instead of its own")
    p.add_argument("--kvcached-src", metavar="DIR", help="kvcached source tree for --target kvcached")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("fetch", help="download and unpack a pinned sdist (kvcached) into the cache",
                       formatter_class=fmt,
                       description="Download NAME==VERSION's sdist from PyPI once, check its sha256 against the "
                                   "hash recorded in harness/targets/fetch.py, and unpack it into the cache "
                                   "($LASTCALL_CACHE, default ~/.cache/lastcall); prints the tree's path. "
                                   "--target kvcached==VERSION then runs scenarios against it.",
                       epilog="exit codes: 0 fetched (or already there), 2 bad spec, unknown version, failed "
                              "download or hash mismatch")
    p.add_argument("specs", nargs="+", metavar="NAME==VERSION", help="e.g. kvcached==0.1.6")
    p.set_defaults(func=_cmd_fetch)

    p = sub.add_parser("replay", help="rerun the scenario that produced a report", formatter_class=fmt,
                       description="Rerun the scenario item (and the target or variant) that wrote a report, from "
                                   "any directory: give its reports/<run id>, verdicts.json or history.jsonl.",
                       epilog="exit codes: as lastcall run; 2 when the report cannot be read or its scenario not found")
    p.add_argument("report", metavar="REPORT", help="reports/<run id> (or a file in it)")
    p.add_argument("--path", action="append", default=[], metavar="DIR", help="search DIR first for the scenario "
                   "(by its name and recorded sha256; repeatable); then ., the rootdir, lastcall's scenario library")
    p.set_defaults(func=_cmd_replay)

    p = sub.add_parser("list", help="list scenarios, their matrix and marks", formatter_class=fmt,
                       description="One line per scenario: name, matrix ids, marks, and the bugs it catches.",
                       epilog="exit codes: 0 listed, 2 a file has errors")
    p.add_argument("paths", nargs="+", metavar="PATH", help="scenario files or directories")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("targets", help="list the targets, their capabilities and availability",
                       formatter_class=fmt,
                       description="One line per target: every built-in name and every lastcall.targets entry "
                                   "point (or the targets given, module:attribute too), whether it can run on "
                                   "this machine (else why not, in one line), and its capabilities "
                                   "(harness.targets.api.CAPABILITIES). Loads each target.",
                       epilog="exit codes: 0 listed, 2 a given name is no target")
    p.add_argument("specs", nargs="*", metavar="TARGET", help="target names or module:attribute (default: all)")
    p.set_defaults(func=_cmd_targets)

    p = sub.add_parser("validate", help="check scenario files without running them", formatter_class=fmt,
                       description="Load each scenario file (directories: every *.yaml/*.yml under them) and "
                                   "report every mistake as FILE:LINE:COL: KEYPATH: MESSAGE, with a hint where "
                                   "the fix is known. Nothing is started.",
                       epilog="exit codes: 0 every file valid, 2 a file has errors (on stderr), 3 internal error")
    p.add_argument("paths", nargs="+", metavar="PATH", help="scenario files or directories")
    p.add_argument("--target", metavar="T", help="check this target name too, as lastcall run --target takes it "
                   "(by name and module path, nothing imported; default: $LASTCALL_TARGET when set)")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("schema", help="print the scenario JSON Schema", formatter_class=fmt,
                       description="Print the JSON Schema of a scenario file, for editors to complete and check "
                                   "scenario files (e.g. yaml-language-server: $schema=...).",
                       epilog="exit codes: 0 printed, 3 internal error")
    p.set_defaults(func=_cmd_schema)

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
    p.add_argument("--windows", type=_int_at_least(3, 1000), default=15, help="measured windows per op and arm "
                   "(default 15)")
    p.add_argument("--requests", type=_int_at_least(1, 100_000), default=300, help="requests per window (default 300)")
    p.add_argument("--warmup", type=_int_at_least(0, 100), default=1, help="rounds run first and discarded (default 1)")
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

    from harness.mutate.command import register  # its own module: lastcall mutate
    from harness.report.prune import register as register_prune  # and lastcall prune-reports

    register(sub, fmt)
    register_prune(sub, fmt)
    return parser


# ------------------------------------------------------------------ error boundary
def _write_traceback() -> str:
    fd, path = tempfile.mkstemp(prefix="lastcall-crash-", suffix=".txt")
    with os.fdopen(fd, "w") as f:
        f.write(traceback.format_exc())
    return path


def _parse(argv: list[str]) -> argparse.Namespace:
    """The command line, with what follows the first ``--`` kept for pytest (``lastcall run`` only)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    args = build_parser().parse_args(argv[:cut])
    args.pytest_args = argv[cut + 1:]
    if cut < len(argv) and args.command != "run":
        raise UsageError(f"lastcall {args.command}: error: only lastcall run takes arguments after -- "
                         f"(they go to pytest) (see lastcall {args.command} --help)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit code (see the module docstring).  SIGTERM counts as ^C."""
    restore = sigterm_interrupts()
    try:
        args = _parse(list(sys.argv[1:] if argv is None else argv))
        envvars.check()  # a numeric LASTCALL_* variable out of bounds: exit 2 before the command starts
        return int(args.func(args))
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except (HarnessError, TargetError) as exc:  # lastcall's own error, or the system under test's
        print(f"lastcall: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("lastcall: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `lastcall ... | head`: stop quietly, and keep Python's final flush quiet too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN
    except Exception as exc:
        path = _write_traceback()
        print(f"lastcall: internal error: {type(exc).__name__}: {exc} (traceback in {path}; please report it)",
              file=sys.stderr)
        return EXIT_INTERNAL
    finally:
        restore()


if __name__ == "__main__":
    sys.exit(main())
