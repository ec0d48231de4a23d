"""``lastcall mutate`` (a user's listener module through its target) and ``./dev mutate`` (the reference).

``lastcall mutate MODULE[:QUALNAME,...] --target T [SCENARIO PATH...]`` mutates the functions named (every
function of MODULE when none is) one edit at a time in a temporary copy first on the run's PYTHONPATH, runs
the scenarios (reference items only, through ``lastcall run``) against T for each, and prints the raw and
non-equivalent scores and every survivor with its diff.  ``python -m harness.mutate`` (``./dev mutate``)
does the same over mutation/stop-path.txt, each mutant against the scenarios of its file's listener, and with
``--engine`` over mutation/engine-stop-path.txt, each mutant of the engine stand-in against the engine scenarios.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import ConfigError

if TYPE_CHECKING:
    from harness.mutate.scopes import Scope

__all__ = ["register", "cmd_mutate", "dev_main", "EXIT_OK", "EXIT_SURVIVORS", "EXIT_USAGE"]

EXIT_OK, EXIT_SURVIVORS, EXIT_USAGE = 0, 1, 2
SAMPLE_MAX = 100_000
EPILOG = ("exit codes: 0 every non-equivalent mutant killed, 1 a survivor (each printed with its diff), 2 bad "
          "input (unknown module, qualname or target, no scenario, scenarios failing on the unmutated code), "
          "3 internal error")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer, e.g. 5") from None
    if not 1 <= value <= SAMPLE_MAX:
        raise argparse.ArgumentTypeError(f"{value} must be between 1 and {SAMPLE_MAX}")
    return value


def _seconds(text: str) -> float:
    from harness.units import parse_duration

    try:
        value = parse_duration(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0 s")
    return value


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sample", type=_count, metavar="N", help="run a seeded sample of N mutants (default: all)")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="the sample's seed (default: drawn at run time, and printed: a fresh sample)")
    p.add_argument("--only", action="append", default=[], metavar="ID",
                   help="run only this mutant (FILE::QUALNAME::OP:ANCHOR as a run prints it; repeatable)")
    p.add_argument("--timeout", type=_seconds, metavar="SECONDS", help="per mutant (default: 3x the unmutated "
                   "run, at least 90 s); a run past it is killed and the mutant counts as killed by timeout")
    p.add_argument("--json", metavar="FILE", help="write every mutant's outcome and the scores here")
    p.add_argument("--workers", type=_count, metavar="N", help="each mutant's run on N pytest-xdist workers "
                   "(lastcall run -n N; default: one process)")
    p.add_argument("-k", metavar="EXPR", dest="keyword", help="only the scenario items matching the expression "
                   "(as lastcall run -k; the planted-bug items are always left out)")


class _Intermixed(argparse.ArgumentParser):
    """Scenario paths may follow the options (``MODULE --target T PATH...``): positionals are parsed
    intermixed with the options (argparse takes a ``*`` positional only where it first meets one)."""

    _inner = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._inner:
            return super().parse_known_args(args, namespace)
        self._inner = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inner = False


def register(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    """Add ``mutate`` to lastcall's subcommands (``sub`` is build_parser's subparsers action)."""
    base = sub._parser_class  # lastcall's parser (its errors exit 2 through main), made intermixed
    sub._parser_class = type("MutateParser", (_Intermixed, base), {})
    try:
        p = sub.add_parser("mutate", help="which one-line breaks of your listener your scenarios miss",
                           formatter_class=fmt, usage="lastcall mutate MODULE[:QUALNAME,...] --target T "
                                                      "[options] [SCENARIO PATH...]",
                           description=(__doc__ or "").split("\n\n")[1], epilog=EPILOG)
    finally:
        sub._parser_class = base
    p.add_argument("spec", metavar="MODULE[:QUALNAME,...]", help="the module to mutate (importable from here) "
                   "and, comma-separated, the functions (default: all of them), e.g. mypkg.listener:L.stop,L.start")
    p.add_argument("paths", nargs="*", metavar="SCENARIO PATH", help="scenario files or directories (default: "
                   "scenarios/ here)")
    p.add_argument("--target", required=True, metavar="T", help="the target the scenarios run against "
                   "(reference@module:attribute, module:attribute or a name, as lastcall run --target)")
    p.add_argument("--equivalent", metavar="FILE", help="mutants you have shown equivalent (the format of "
                   "lastcall's mutation/equivalent.yaml): left out of the non-equivalent score")
    _common(p)
    p.set_defaults(func=cmd_mutate)


def _check_target(target: str) -> None:
    from harness.targets import load_target
    from harness.targets.names import check_target

    why = check_target(target)
    if why is None:
        try:
            load_target(target)
        except ConfigError as exc:
            why = str(exc)
    if why is not None:
        raise ConfigError(f"mutate: --target: {why}")


def _finish(a: Any, args: argparse.Namespace, command: str) -> int:
    from harness.mutate.analysis import print_report, to_json, write_json

    print_report(a)
    if args.json:
        write_json(to_json(a, sample=args.sample, seed=args.seed, target=getattr(args, "target", None),
                           command=command), args.json)
    bad = [o for o in a.non_equivalent if not o.killed] or a.wrongly_equivalent
    return EXIT_SURVIVORS if bad else EXIT_OK


def _progress(args: argparse.Namespace, command: str) -> Callable[[Any], None] | None:
    """After each mutant: the JSON so far (``--json``), so a run cut short keeps what it measured."""
    if not args.json:
        return None
    from harness.mutate.analysis import to_json, write_json

    def write(a: Any) -> None:
        write_json(to_json(a, sample=args.sample, seed=args.seed, target=getattr(args, "target", None),
                           command=command), args.json)

    return write


def _seed(args: argparse.Namespace) -> bool:
    """Draw the sample's seed unless one was given; whether it was drawn (a fresh sample)."""
    if args.seed is not None:
        return False
    from harness.mutate.samples import draw_seed

    args.seed = draw_seed()
    if args.sample:
        print(f"mutate: seed {args.seed} (drawn; --seed {args.seed} runs this sample again)", file=sys.stderr)
    return True


def cmd_mutate(args: argparse.Namespace) -> int:
    from harness.mutate.analysis import analyse
    from harness.mutate.plan import read_entries
    from harness.mutate.run import resolve, scenarios_for

    _seed(args)
    command = " ".join(["lastcall mutate", args.spec, "--target", args.target, *args.paths,
                        *([f"--sample {args.sample} --seed {args.seed}"] if args.sample else [])])
    subject = resolve(args.spec)
    _check_target(args.target)
    paths = args.paths or (["scenarios"] if os.path.isdir("scenarios") else [])
    if not paths:
        raise ConfigError("mutate: no scenario path given and no scenarios/ here: give the scenario "
                          "files or directories to run")
    for p in paths:
        if not os.path.exists(p):
            raise ConfigError(f"mutate: {p}: no such scenario file or directory")
    scenarios = scenarios_for(paths, ("worker", "handshake"))  # a listener's; an engine tree's are not mutated here
    equivalent = read_entries(Path(args.equivalent), equivalent=True) if args.equivalent else {}
    a = analyse([("given", [subject], scenarios)], target=args.target, sample=args.sample, seed=args.seed,
                only=args.only, timeout=args.timeout, equivalent=equivalent, keyword=args.keyword,
                after=_progress(args, command), workers=args.workers)
    return _finish(a, args, command)


def dev_main(argv: Sequence[str] | None = None) -> int:
    """``./dev mutate``: the reference's stop path (mutation/stop-path.txt) against the scenario library; with
    ``--engine``, the engine stand-in's (mutation/engine-stop-path.txt) against the engine scenarios."""
    from harness.mutate.analysis import analyse
    from harness.mutate.plan import EQUIVALENT, SURVIVORS, read_entries
    from harness.mutate.scopes import ENGINE, REFERENCE, groups_of

    p = argparse.ArgumentParser(prog="./dev mutate", description=dev_main.__doc__, epilog=EPILOG)
    _common(p)
    p.add_argument("--engine", action="store_true", help="mutate the engine stand-in's stop path "
                   "(mutation/engine-stop-path.txt) and run the engine scenarios on it, recorded apart")
    p.add_argument("--record", action="store_true", help="write the run's JSON (docs/data/mutation.json; "
                   "mutation_engine.json with --engine), a sample's line of the record of samples, and "
                   "docs/mutation.md's tables")
    args = p.parse_args(argv)
    scope = ENGINE if args.engine else REFERENCE
    if args.record:
        args.json = args.json or str(scope.data)
    given = list(argv if argv is not None else sys.argv[1:])
    drawn = _seed(args)
    command = ("./dev mutate " + " ".join(given + ([f"--seed {args.seed}"] if drawn and args.sample else []))).strip()
    from harness.interrupts import sigterm_interrupts

    restore = sigterm_interrupts()  # SIGTERM as ^C: the mutant's run is stopped and cleaned up too
    try:
        a = analyse(groups_of(scope), target=None, sample=args.sample, seed=args.seed, only=args.only,
                    timeout=args.timeout, equivalent=read_entries(EQUIVALENT, equivalent=True),
                    explained=read_entries(SURVIVORS, equivalent=False), keyword=args.keyword,
                    after=_progress(args, command), workers=args.workers)
    except ConfigError as exc:
        print(f"./dev mutate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("./dev mutate: interrupted", file=sys.stderr)
        return 130
    finally:
        restore()
    code = _finish(a, args, command)
    if args.record:
        _record(a, args, command, scope, drawn=drawn)
    return code


def _record(a: Any, args: argparse.Namespace, command: str, scope: Scope, *, drawn: bool) -> None:
    """--record: the page's tables, and a sample's line appended to its scope's record (none ever dropped)."""
    from harness.mutate.analysis import to_json
    from harness.mutate.samples import append, render

    if scope.measured_tables:
        from harness.mutate.table import render_doc

        render_doc()
    if args.sample and not args.only:
        append(to_json(a, sample=args.sample, seed=args.seed, target=None, command=command), drawn=drawn,
               path=scope.record)
        render(scope.page, scope.record, scope.markers)
