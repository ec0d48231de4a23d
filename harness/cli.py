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
import os
import sys
import tempfile
import traceback
from typing import NoReturn

from harness import __version__, envvars
from harness.commands import contract, instances, runs, scenarios
from harness.commands.common import EXIT_BROKEN, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from harness.errors import HarnessError, TargetError
from harness.interrupts import sigterm_interrupts

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_BROKEN", "EXIT_USAGE", "EXIT_INTERNAL", "EXIT_INTERRUPTED"]


class UsageError(HarnessError):
    """A bad command line, as argparse reports it (exit code 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so main() has one boundary."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


# -------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    """The whole command line; each subparser sets ``func`` to its command (in harness/commands/ and the
    modules of mutate and prune-reports), added in the order ``lastcall --help`` lists them."""
    fmt = argparse.RawDescriptionHelpFormatter
    codes = (__doc__ or "").split("Exit codes:", 1)[1].rstrip()
    parser = _Parser(prog="lastcall", formatter_class=fmt, epilog=f"exit codes:{codes}",
                     description="lastcall: test and fault injection for the shutdown paths of IPC listeners.")
    parser.add_argument("--version", action="version", version=f"lastcall {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    contract.register(sub, fmt)  # contract
    instances.register(sub, fmt)  # serve, ctl
    scenarios.register(sub, fmt)  # run, fetch, replay, list, targets, validate, schema
    runs.register(sub, fmt)  # report, repro, bench
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
        if os.getcwd() not in sys.path:  # a MODULE:ATTR a user names is under the working directory, as `python -m`
            sys.path.append(os.getcwd())  # finds it; appended, so it never shadows an installed module
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
