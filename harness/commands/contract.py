"""``lastcall contract``: every stop-contract check against the reference and the planted bugs it names."""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import TYPE_CHECKING, Any

from harness.commands.common import DETAIL_MIN, EXIT_BROKEN, EXIT_OK, REFERENCE, pick, unique

if TYPE_CHECKING:
    from harness.contract import Check, Outcome

__all__ = ["register"]


def register(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    """Add ``contract`` to lastcall's subcommands (``sub`` is build_parser's subparsers action)."""
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
    checks = [by_name[pick("check", n, list(by_name))] for n in unique(args.check)] or list(CHECKS)
    chosen = [pick("variant", n, list(VARIANTS)) for n in unique(args.variant)]
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
    bugs = unique(o.variant for _, o in named)
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
