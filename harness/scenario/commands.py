"""``lastcall run`` (a thin front over pytest) and ``lastcall list``."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["run", "list_scenarios", "PYTEST_TO_EXIT"]

# pytest's exit codes -> lastcall's: 0 ok, 1 violations, 2 usage/scenario errors (and "nothing collected"),
# 3 internal error, 130 interrupted
PYTEST_TO_EXIT = {0: 0, 1: 1, 2: 130, 3: 3, 4: 2, 5: 2}


def run(paths: Sequence[str], *, workers: str | None = None, target: str | None = None,
        keyword: str | None = None, marks: str | None = None, extra: Sequence[str] = ()) -> int:
    """Run the scenarios under ``paths`` through pytest; every directory given is a scenario root."""
    import pytest

    dirs = [p for p in paths if os.path.isdir(p)]
    args = [*paths, "-p", "no:cacheprovider", "-q", "-rfE"]
    if dirs:
        args += ["-o", "lastcall_scenarios=" + " ".join(dirs)]
    if workers:
        args += ["-n", workers]
    if target:
        args += ["--target", target]
    if keyword:
        args += ["-k", keyword]
    if marks:
        args += ["-m", marks]
    code = int(pytest.main([*args, *extra]))
    return PYTEST_TO_EXIT.get(code, 3)


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


def replay(report: str) -> int:
    """Rerun the scenario item that produced ``report`` (a run's report dir, its verdicts.json or history)."""
    import json
    from pathlib import Path

    p = Path(report)
    meta_path = p / "verdicts.json" if p.is_dir() else p.with_name("verdicts.json")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        print(f"lastcall replay: cannot read {meta_path}: {exc}", file=sys.stderr)
        return 2
    nodeid = meta.get("nodeid")
    if not nodeid:
        print(f"lastcall replay: {meta_path} names no test (it was written outside pytest)", file=sys.stderr)
        return 2
    target = None
    if "-catches-" not in nodeid:
        from harness.scenario import load

        try:
            scenario = load(nodeid.split("::")[0])
        except Exception as exc:
            print(f"lastcall replay: {exc}", file=sys.stderr)
            return 2
        if meta.get("variant") and meta["variant"] != scenario.target:
            target = str(meta["variant"])
    print(f"lastcall replay: {nodeid}" + (f" --target {target}" if target else ""), flush=True)
    return run([nodeid], target=target)
