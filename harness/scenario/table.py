"""The planted-bug table: every scenario against every variant, caught or not.

``python -m harness.scenario.table scenarios/`` prints it as Markdown (``--write`` commits
it to docs/); the slow test tests/test_scenario_table.py builds the same table and
asserts that each scenario catches what it names and that the reference passes.

A cell is caught by the rule of ``catches`` (harness.scenario.catches, :func:`judge_cell`), never on vacuity.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.scenario.catches import judge_catch
from harness.scenario.errors import ScenarioError
from harness.scenario.loader import expand, load_many
from harness.scenario.result import RunResult
from harness.scenario.runner import run_item
from harness.scenario.schema import Scenario

__all__ = ["Cell", "build", "from_data", "judge_cell", "load_cells", "markdown", "table_variants", "to_data",
           "write"]


@dataclass(frozen=True)
class Cell:
    scenario: str
    variant: str
    caught: bool  # the catch counts (harness.scenario.catches; for the reference: the run failed)
    named: bool  # the scenario names this variant in catches
    checkers: tuple[str, ...]  # the checkers that caught it (the reference: every one that fired)
    detail: str = ""  # why the run ended as it did: the step error, the outcome, every verdict (for a miss)


def _detail(r: RunResult) -> str:
    parts = [f"step error: {r.step_error}"] if r.step_error else []
    if r.outcome.status != "ok":
        parts.append(f"outcome: {r.outcome.status} {r.outcome.detail}".rstrip())
    parts += [f"{v.checker}: {v.status} ({v.message})" for v in r.verdicts]
    return "; ".join(parts)


def judge_cell(scn: Scenario, variant: str, r: RunResult) -> Cell:
    """One cell: on the reference, whether the run failed; on a planted bug, whether it is caught by the rule
    of ``catches`` (harness.scenario.catches.judge_catch) with the checkers the scenario names for it, or, for
    a variant it does not name, any expect checker but fault_fired: no cell counts on vacuity (fault_fired
    alone), on a broken run, or on a run that stopped before every armed fault fired."""
    if variant == "reference":
        return Cell(scn.name, variant, not r.passed, False, tuple(v.checker for v in r.violated), _detail(r))
    catch = judge_catch(r, scn.catch_checkers(variant))
    detail = _detail(r) if catch.counted else f"{catch.why}; {_detail(r)}"
    return Cell(scn.name, variant, catch.counted, variant in scn.catches, catch.by, detail)


REAL_TARGETS = ("kvcached", "vllm_nixl", "vllm_engine")  # real code, not planted bugs: their own findings pages


def table_variants() -> list[str]:
    """The table's columns: the reference and every planted-bug variant (worker and handshake), not the
    real targets."""
    from harness.targets import target_names

    return [v for v in target_names() if v not in REAL_TARGETS]


def build(paths: Sequence[str], variants: Sequence[str],
          progress: Callable[[Cell, RunResult], None] | None = None) -> list[Cell]:
    """Run every scenario of ``paths`` against every variant; ``progress`` sees each cell with its run as it
    is made (the command prints a line; the slow test keeps the history of a cell that went wrong)."""
    scenarios, errors = load_many(list(paths))
    if errors:
        raise errors[0]
    from harness.scenario.needs import step_needs
    from harness.targets import load_target, missing_for

    cells = []
    for scn in scenarios:
        item = expand(scn)[0]
        for variant in variants:
            if missing_for(load_target(variant), step_needs(scn.steps)):
                continue  # the other listener's variant: lacking by design, no cell ("-" in the table)
            r: RunResult = run_item(item, variant=variant)
            cell = judge_cell(scn, variant, r)
            cells.append(cell)
            if progress is not None:
                progress(cell, r)
    return cells


def markdown(cells: list[Cell], variants: Sequence[str]) -> str:
    """Rows: scenarios; columns: variants. ``caught``: a checker fired; **bold**: the scenario names it."""
    names = list(dict.fromkeys(c.scenario for c in cells))
    short = [v.replace("_", " ") for v in variants]
    lines = ["| scenario | " + " | ".join(short) + " |", "|---|" + "---|" * len(variants)]
    by = {(c.scenario, c.variant): c for c in cells}
    for n in names:
        row = []
        for v in variants:
            c = by.get((n, v))
            if c is None:
                row.append("-")
                continue
            mark = ("FAIL" if c.caught else "pass") if v == "reference" else ("x" if c.caught else "")
            row.append(f"**{mark}**" if c.named and mark else mark)
        lines.append(f"| {n} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def load_cells(directory: str) -> list[Cell]:
    """The cells the slow test wrote (``reports/planted-bug-table/*.json``), scenarios in name order."""
    import json
    from pathlib import Path

    files = sorted(Path(directory).glob("*.json"))
    if not files:
        raise SystemExit(f"no *.json under {directory}: run `pytest -m slow tests/test_scenario_table.py` first")
    cells = []
    for f in files:
        try:
            for d in json.loads(f.read_text()):
                d["checkers"] = tuple(d.get("checkers", ()))
                cells.append(Cell(**d))
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise SystemExit(f"{f}: not a file of cells the slow test writes ({type(exc).__name__}: {exc})") from None
    return cells


DATA = "docs/data/planted_bug_table.json"  # the table's cells as data: the page is rendered from it
PAGE = "docs/planted-bug-table.md"  # the page that shows the table, between the markers below
BEGIN, END = "<!-- planted-bug-table:begin -->", "<!-- planted-bug-table:end -->"


def to_data(cells: list[Cell], variants: Sequence[str], source: str,
            made: dict[str, Any] | None = None) -> dict[str, object]:
    """The committed form of a table: its columns, its cells, where the cells came from, and the provenance
    ``made`` of the run that measured them (the command alone where none is given: the cells came from a run
    this process did not see)."""
    from dataclasses import asdict

    return {"source": source, **(made or {"command": source}), "variants": list(variants),
            "cells": [asdict(c) for c in cells]}


def rendered(data: dict[str, object]) -> str:
    """The page's text between the markers: the table of :func:`to_data`'s output and its provenance line."""
    from harness import provenance

    return markdown(*from_data(data)) + "\n\n" + provenance.line(provenance.records_of(data))


def from_data(data: dict[str, object]) -> tuple[list[Cell], list[str]]:
    """The cells and columns of :func:`to_data`'s output."""
    raw_cells, variants = data["cells"], data["variants"]
    assert isinstance(raw_cells, list) and isinstance(variants, list)
    return [Cell(**{**d, "checkers": tuple(d.get("checkers", ()))}) for d in raw_cells], [str(v) for v in variants]


def between_markers(text: str, begin: str, end: str) -> str:
    """The text between a page's two markers, without the newlines next to them."""
    return text[text.index(begin) + len(begin):text.index(end)].strip("\n")


def write(cells: list[Cell], variants: Sequence[str], source: str, root: str = ".",
          made: dict[str, Any] | None = None) -> None:
    """Commit a table: its cells to :data:`DATA`, its Markdown into :data:`PAGE` between the markers."""
    import json
    from dataclasses import asdict
    from pathlib import Path

    data, page = Path(root) / DATA, Path(root) / PAGE
    d = to_data(cells, variants, source, made)
    body = ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in d.items() if k != "cells")
    rows = ",\n".join(json.dumps(asdict(c)) for c in cells)  # one cell a line: a rerun's diff shows the cells
    data.write_text(f"{{\n{body},\n \"cells\": [\n{rows}\n]}}\n")
    text = page.read_text()
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    page.write_text(text[:start] + "\n" + rendered(d) + "\n" + text[stop:])


def merged(kept: Sequence[Cell], fresh: Sequence[Cell], variants: Sequence[str]) -> list[Cell]:
    """``kept``'s cells with the rows of every scenario of ``fresh`` replaced by ``fresh``'s (a new scenario's
    rows last), in the committed order: scenarios as they come, each row's cells in column order."""
    names = {c.scenario for c in fresh}
    order = list(dict.fromkeys([c.scenario for c in kept] + [c.scenario for c in fresh]))
    by = {(c.scenario, c.variant): c for c in kept if c.scenario not in names}
    by.update({(c.scenario, c.variant): c for c in fresh})
    return [by[(n, v)] for n in order for v in variants if (n, v) in by]


def _parser() -> Any:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m harness.scenario.table",
        description="Run every scenario against every planted bug and print the planted-bug table (Markdown).")
    ap.add_argument("--write", action="store_true",
                    help="also commit it: the cells to docs/data/planted_bug_table.json, the table into "
                         "docs/planted-bug-table.md")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--update", nargs="+", metavar="PATH",
                     help="run only these scenarios and replace their rows of the committed table")
    how.add_argument("--from", dest="from_dir", nargs="?", const="reports/planted-bug-table", metavar="DIR",
                     help="print the table the slow test left in DIR (default reports/planted-bug-table), "
                          "running nothing")
    ap.add_argument("paths", nargs="*", metavar="PATH", help="scenario files or directories (default: scenarios)")
    return ap


def main(argv: list[str]) -> int:
    """``python -m harness.scenario.table [PATH...]`` runs the table; ``--from DIR`` prints the one the slow
    test left in DIR (reports/planted-bug-table) without running anything.  ``--write`` also commits it: the
    cells to docs/data/planted_bug_table.json and the table into docs/planted-bug-table.md, which
    tests/test_docs_tables.py re-renders from that file and compares.  ``--update PATH...`` runs only those
    scenarios and replaces their rows of the committed table (a scenario changed, the rest not rerun); the
    source then names both commands.  Bad input (an unknown option, a scenario that does not load, an empty
    DIR) is one line on stderr and exit 2, before anything runs."""
    ap = _parser()
    args = ap.parse_args(argv)
    if args.paths and (args.update or args.from_dir):
        ap.error("PATH goes alone: --update takes its own paths, --from runs nothing")
    try:
        return _table(args)
    except ScenarioError as exc:
        print(f"{ap.prog}: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:
        if isinstance(exc.code, str):  # a usage problem said in words (load_cells, the committed table's columns)
            print(f"{ap.prog}: {exc.code}", file=sys.stderr)
            return 2
        raise


def _table(args: Any) -> int:
    variants = table_variants()
    if args.update:
        import json
        from pathlib import Path

        _, errors = load_many(list(args.update))  # a bad path or file is said first, before anything is compared
        if errors:
            raise errors[0]
        old = json.loads(Path(DATA).read_text())
        kept, old_variants = from_data(old)
        if list(old_variants) != list(variants):
            raise SystemExit("the committed table has other columns: rerun it whole (python -m harness.scenario.table)")
        fresh = build(args.update, variants)
        cells = merged(kept, fresh, variants)
        first = str(old["source"]).split("; rows of ")[0]
        names = ", ".join(sorted({c.scenario for c in fresh}))
        source = f"{first}; rows of {names}: python -m harness.scenario.table --write --update " + " ".join(args.update)
    elif args.from_dir:
        cells, source = load_cells(args.from_dir), f"python -m harness.scenario.table --write --from {args.from_dir}"
    else:
        paths = args.paths or ["scenarios"]
        cells = build(paths, variants,
                      progress=lambda c, _run: print(f"{c.scenario:45} {c.variant:28} {'caught' if c.caught else '-'} "
                                               f"{','.join(c.checkers)}", file=sys.stderr, flush=True))
        source = "python -m harness.scenario.table --write " + " ".join(paths)
    print(markdown(cells, variants))
    if args.write:
        from pathlib import Path

        from harness import provenance

        root = Path(__file__).resolve().parents[2]  # --from measured nothing here: its cells' run is not known
        write(cells, variants, source, made=None if args.from_dir else provenance.record(source, root))
    return 0


if __name__ == "__main__":
    from harness.interrupts import sigterm_interrupts

    sigterm_interrupts()  # a kill unwinds through each run's cleanup instead of leaving its segments behind
    sys.exit(main(sys.argv[1:]))
