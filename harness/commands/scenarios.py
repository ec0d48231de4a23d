"""The scenario commands: ``lastcall run``, ``fetch``, ``replay``, ``list``, ``targets``, ``validate`` and
``schema``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from harness import envvars
from harness.commands.common import EXIT_OK, EXIT_USAGE, REFERENCE, REPEAT_MAX, int_at_least, table, unique

__all__ = ["register"]


def register(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    """Add the scenario commands to lastcall's subcommands: run, fetch, replay, list, targets, validate, schema."""
    _register_run(sub, fmt)
    _register_others(sub, fmt)


def _register_run(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    """``lastcall run``: the one command whose options go on to pytest."""
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
    p.add_argument("--repeat", type=int_at_least(1, REPEAT_MAX), metavar="N",
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


def _register_others(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    """fetch, replay, list, targets, validate and schema, in that order."""
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

    rows = catalogue() if not args.specs else [describe_one(spec) for spec in unique(args.specs)]
    table([("TARGET", "CAPABILITIES", "STATUS"), *((n, caps, state if state.startswith("unavailable") else
                                                     f"{state}: {about}" if about else state)
                                                    for n, state, caps, about in rows)])
    return EXIT_OK


def _cmd_list(args: argparse.Namespace) -> int:
    from harness.scenario.commands import list_scenarios

    return list_scenarios(args.paths)


def _cmd_schema(args: argparse.Namespace) -> int:
    import json

    from harness.scenario import json_schema
    from harness.targets.names import WORKER_VARIANTS  # the names only: the variants import torch

    print(json.dumps(json_schema(variants=[v for v in WORKER_VARIANTS if v != REFERENCE]), indent=2))
    return EXIT_OK
