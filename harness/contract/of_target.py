"""``lastcall contract --target T``: the stop-contract checks against any target that can take them.

Each check of :data:`harness.contract.CHECKS` runs on the target's own worker sides
(:class:`~harness.contract.target_rig.TargetRig`) when the target has what the check drives; otherwise it is
*not applicable*, with the reason: a capability it lacks, a party whose events the check's checkers need and
the target declares absent, or a seam only the reference has.  The target must keep each check it can take;
each of its planted bugs (``variants``) that a check names in ``catches`` must break that check.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from harness.checkers import CHECKERS
from harness.contract import CHECKS, Check, Outcome, run_check
from harness.contract.target_rig import UnderCheck
from harness.errors import ConfigError
from harness.events import PARTY_CAPABILITIES, absent_parties

__all__ = ["not_applicable", "plan", "run_target_contract"]

DRIVES = ("worker_listener", "wire")  # every check starts worker sides and writes lastcall's framing to them
ARMS_BACKEND = frozenset({"no_late_dispatch", "reads_cancelled", "handler_drained", "retained_for_retry",
                          "concurrent_stop_waits", "stop_from_handler_returns", "teardown_deferred"})
SHUTS_DOWN = frozenset({"teardown_deferred"})
REFERENCE_ONLY = {  # what the check drives that the target API has no part for
    "cleanup_error_keeps_registration": "it fails the reference's cleanup site cleanup.unlink and reads its "
                                        "registry; the target API has neither",
    "exit_hook_bounded": "it runs the reference's exit hook in a child interpreter; a target's exit hook is "
                         "proved by the exit-hook-* scenarios",
    "exit_hook_retries": "it runs the reference's exit hook in a child interpreter; a target's exit hook is "
                         "proved by the exit-hook-* scenarios",
    "restart_refused_while_draining": "it starts a second listener on one key of the reference's registry; "
                                      "restart-refused-while-draining proves it on a target",
}


def not_applicable(check: Check, target: object) -> str | None:
    """Why ``check`` cannot run on ``target`` (one line), or None when it can."""
    caps = set(getattr(target, "capabilities", ()))
    needs = [*DRIVES, *(["failpoints"] if check.name in ARMS_BACKEND else []),
             *(["integration_shutdown"] if check.name in SHUTS_DOWN else [])]
    lacks = [c for c in needs if c not in caps]
    if lacks:
        return f"needs {', '.join(lacks)}, which the target does not declare"
    if getattr(target, "codec", None) is not None:
        return "it writes lastcall's framing, and the target has a codec of its own"
    why = REFERENCE_ONLY.get(check.name)
    if why:
        return why
    gone = absent_parties(caps)
    for name, params in check.judged:
        chk = CHECKERS[name]
        party = next((p for p in chk.evidence_for(chk.params.model_validate(params)) if p in gone), None)
        if party is not None:
            return f"its checker {name} needs {party} events, and the target declares none (no " \
                   f"{PARTY_CAPABILITIES[party]})"
    return None


@dataclass(frozen=True)
class Row:
    """One row of the table: a check on the target (expect kept) or on one of its bugs (expect broken)."""

    check: Check
    name: str  # the target's name, or the bug's
    spec: str  # what load_target loads
    expect: str  # "kept" or "broken"
    why_not: str | None = None  # not applicable: why


def plan(spec: str, target: object, checks: Sequence[Check]) -> list[Row]:
    """The rows to run: each check on the target, then on each of its planted bugs the check names."""
    variants = dict(getattr(target, "variants", None) or {})
    rows = []
    for check in checks:
        why = not_applicable(check, target)
        rows.append(Row(check, spec, spec, "kept", why))
        if why is None:
            rows += [Row(check, bug, variants[bug], "broken") for bug in check.catches if bug in variants]
    return rows


def _pick_checks(names: Sequence[str]) -> list[Check]:
    by_name = {c.name: c for c in CHECKS}
    out = []
    for n in dict.fromkeys(names):
        if n not in by_name:
            near = difflib.get_close_matches(n, list(by_name), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ConfigError(f"unknown check {n!r}{hint} (known: {', '.join(by_name)})")
        out.append(by_name[n])
    return out or list(CHECKS)


def run_target_contract(spec: str, check_names: Sequence[str] = ()) -> int:
    """Run the plan for the target ``spec``, one printed row each, then a summary; 0, or 1 on a surprise."""
    from harness.targets import load_target

    target = load_target(spec)
    rows = plan(spec, target, _pick_checks(check_names))
    width_c = max(len("check"), *(len(r.check.name) for r in rows))
    width_v = max(len("target"), *(len(r.name) for r in rows))
    print(f"{'line':>4}  {'check':<{width_c}}  {'target':<{width_v}}  {'result':<6}  {'time':>7}  detail", flush=True)
    done: list[tuple[Row, Outcome]] = []
    for row in rows:
        head = f"{row.check.line:>4}  {row.check.name:<{width_c}}  {row.name:<{width_v}}"
        if row.why_not is not None:
            print(f"{head}  {'n/a':<6}  {'':>7}  not applicable: {row.why_not}", flush=True)
            continue
        under = UnderCheck(row.name, target if row.spec == spec else load_target(row.spec))
        out = run_check(row.check, under)  # type: ignore[arg-type]  # lines.open_rig takes either
        done.append((row, out))
        detail = "" if out.kept else out.detail.strip().splitlines()[0]
        if (row.expect == "kept") != out.kept:
            detail = f"SURPRISE: {detail or 'the check names this bug but it was kept'}"
        print(f"{head}  {'kept' if out.kept else 'BROKEN':<6}  {out.seconds:>6.2f}s  {detail}".rstrip(), flush=True)
    return _summary(spec, rows, done)


def _summary(spec: str, rows: list[Row], done: list[tuple[Row, Outcome]]) -> int:
    own = [o for r, o in done if r.expect == "kept"]
    bugs = [(r, o) for r, o in done if r.expect == "broken"]
    wrong = [(r, o) for r, o in done if (r.expect == "kept") != o.kept]
    na = sum(r.why_not is not None for r in rows)
    parts = [f"{spec} keeps {sum(o.kept for o in own)}/{len(own)} of the checks it can take ({na} not applicable)"]
    if bugs:
        parts.append(f"{sum(not o.kept for _, o in bugs)}/{len(bugs)} of its planted bugs' rows broken by the "
                     "checks that name them")
    parts.append(f"{len(wrong)} surprise{'' if len(wrong) == 1 else 's'}")
    total = sum(o.seconds for _, o in done)
    print(f"{'; '.join(parts)} ({total:.1f}s)", flush=True)
    for row, out in wrong:
        what = (f"{spec} broke {row.check.name} (line {row.check.line}): {out.detail.strip().splitlines()[0]}"
                if row.expect == "kept"
                else f"{row.name} was not caught by {row.check.name} (line {row.check.line})")
        print(f"  {what}\n    replay: lastcall contract --target {spec} --check {row.check.name}", flush=True)
    return 1 if wrong else 0
