"""``lastcall run`` (a thin front over pytest) and ``lastcall list``."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from harness import envvars

__all__ = ["run", "preflight", "list_scenarios", "PYTEST_TO_EXIT"]

# pytest's exit codes -> lastcall's: 0 ok, 1 violations, 2 usage/scenario errors (and "nothing collected"),
# 3 internal error, 130 interrupted
PYTEST_TO_EXIT = {0: 0, 1: 1, 2: 130, 3: 3, 4: 2, 5: 2}
REWRITE_NOTE = "Module already imported so cannot be rewritten; harness"  # pytest's warning, filtered in run


def run(paths: Sequence[str], *, workers: str | None = None, target: str | None = None, listener: str | None = None,
        keyword: str | None = None, marks: str | None = None, extra: Sequence[str] = (), trust_cwd: bool = True) -> int:
    """Run the scenarios under ``paths`` through pytest; every directory given is a scenario root.

    ``paths`` reach pytest after ``--``, so none is ever read as an option; with ``trust_cwd`` (the user's own
    command line) the current directory is put on ``sys.path`` for a ``module:attribute`` target, as ``python -m``
    would (``lastcall replay`` passes False: docs/trust.md).

    Returns: lastcall's exit code for pytest's (PYTEST_TO_EXIT).
    Error handling: every file given (and under every directory given) is loaded first, and the
        targets named (``target``, ``listener``, LASTCALL_TARGET, each file's ``target:``) are
        imported here; any error is printed, all of them, and nothing starts (exit code 2).
    """
    import pytest

    if trust_cwd and "" not in sys.path and os.getcwd() not in sys.path:  # a module:attribute target from here
        sys.path.insert(0, os.getcwd())
    problems, forks = preflight(paths, target, listener)
    if problems:
        for line in problems:
            print(line, file=sys.stderr)
        print(f"lastcall run: {len(problems)} error{'' if len(problems) == 1 else 's'}; nothing was started",
              file=sys.stderr)
        return 2
    dirs = [p for p in paths if os.path.isdir(p)]
    # harness is imported before pytest starts, so pytest cannot rewrite the plugin's asserts: not news to a user
    # each option and its value in one argv element: pytest finds its rootdir from every bare argument, so a
    # separate value that names a folder here (``--lastcall-target tinykv``) would be taken for a path
    args = ["-pno:cacheprovider", "-q", "-rfE",
            f"-Wignore:{REWRITE_NOTE}:pytest.PytestAssertRewriteWarning"]
    if dirs:
        args += ["--override-ini=lastcall_scenarios=" + " ".join(dirs)]
    if workers:
        args += [f"--numprocesses={workers}"]
    if target:
        args += [f"--lastcall-target={target}"]
    if listener:
        args += [f"--lastcall-listener={listener}"]
    if keyword:
        args += [f"-k{keyword}"]
    if marks:
        args += [f"-m{marks}"]
    if not (workers or keyword or marks):  # every item runs here: its fork server starts while pytest does
        from harness.launch.spawn import ForkServer

        for torch in sorted(forks):
            ForkServer.prestart(torch)
    code = int(pytest.main([*args, *extra, "--", *paths]))
    return PYTEST_TO_EXIT.get(code, 3)


def preflight(paths: Sequence[str], target: str | None = None,
              listener: str | None = None) -> tuple[list[str], set[bool]]:
    """Every error ``lastcall run`` finds before starting anything, one per line (hint lines included); and the
    fork servers its scenarios' runs will fork from (harness.launch.spawn: True, the one that preloaded torch;
    False, the one that did not): none for an engine run, which the harness launches itself, nor for a target
    unavailable here, whose items skip. The servers of CPU runs: a CUDA item's (always torch's) starts at its
    first run."""
    from harness.errors import ConfigError
    from harness.scenario import load_many
    from harness.scenario.player import cast_for
    from harness.scenario.runner import STEP_KINDS  # noqa: F401 - every built-in step kind registered: cast_for
    from harness.targets import load_target, uses_torch

    problems: list[str] = []
    given = "--target" if target else "LASTCALL_TARGET"
    target = target or envvars.text("LASTCALL_TARGET")
    if listener or envvars.text("LASTCALL_LISTENER"):
        given = "--listener" if listener else "LASTCALL_LISTENER"
        listener = listener or envvars.text("LASTCALL_LISTENER")
        target = f"{(target or 'reference').partition('@')[0]}@{listener}"
    if target is not None:
        try:
            load_target(target)
        except ConfigError as exc:
            problems.append(f"lastcall run: {given}: {exc}")
    files = [p.split("::")[0] for p in paths]
    scenarios, errors = load_many([f for f in files if os.path.isdir(f) or f.endswith((".yaml", ".yml"))])
    problems += [str(each) for err in errors for each in err.errors]
    if target is None:
        for sc in scenarios:
            try:
                load_target(sc.target)  # a module:attribute the loader only found is imported here
            except ConfigError as exc:
                problems.append(f"{sc.where('target')}: target: {exc}")
    forks = set() if problems else {uses_torch(target or sc.target) for sc in scenarios
                                    if cast_for(sc.steps) != "engine" and runs_here(target or sc.target)}
    return problems, forks


def runs_here(spec: str) -> bool:
    """Whether the target named ``spec`` can run on this machine (its items skip with the reason otherwise)."""
    from harness.targets import load_target, unavailable

    return unavailable(load_target(spec)) is None


def list_scenarios(paths: Sequence[str]) -> int:
    """One line per scenario: its file, name, matrix ids, marks and the bugs it catches."""
    from harness.scenario import expand, load_many

    scenarios, errors = load_many(list(paths))
    for sc in scenarios:
        ids = ", ".join(item.id for item in expand(sc))
        marks = f"  marks: {', '.join(sc.marks)}" if sc.marks else ""
        print(f"{sc.name}  [{ids}]{marks}  catches: {', '.join(sc.catches)}  ({sc.source})")
    for err in errors:
        print(err, file=sys.stderr)
    return 2 if errors else 0
