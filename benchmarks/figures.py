"""docs/figures.md, the index of every generated table: one row per table (its page and section, what it
measures, when, at which commit and by which command it was measured), read from the provenance line each
table's renderer prints under it (harness/provenance.py), so the index says what the pages say.

Run:  .venv/bin/python benchmarks/figures.py --write    (without --write: print the page)
tests/test_docs_tables.py regenerates it and compares, and fails on a table the registry below lacks."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import docpage

from harness import markdown, provenance

ROOT = docpage.ROOT
PAGE = ROOT / "docs" / "figures.md"
COMMAND = "python benchmarks/figures.py --write"  # what regenerates the page
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # where a generated table may live
BEGIN = re.compile(r"<!-- ([\w-]+)-table:begin -->")

# every generated table, by the name in its markers: what it measures
MEASURES = {
    "targets": "the speed targets: the suite's time, stop() with 256 parked connections, the engine library",
    "ipc-roundtrip": "the reference worker listener against a bare one: cost per request, stop()'s time",
    "failpoint-cost": "ns per `failpoints.hit()` call on a site nothing or another site armed",
    "handshake-latency": "the handshake listener's shutdown, idle and with a peer handshaking, and a held port",
    "lastcall-bench": "connection tracking on vs off in the reference listener (`lastcall bench`)",
    "kvcached-bench": "connection tracking on vs off in kvcached 0.1.6's listener, and the reference against it",
    "engine-launch": "an engine's launch to ready and SIGTERM to gone, per target and launcher",
    "hostile-input": "lastcall's wall time and peak memory on hostile and near-limit input files",
    "load-robustness": "the scenario library's failures under each kind of neighbour load",
    "mutation": "the mutation score of the recorded sample of the stop path",
    "mutation-fresh": "the mutation score of a fresh sample of the code as it is",
    "planted-bug": "every scenario against every planted bug: caught or not",
    "suite-time": "the test suite's wall time per selection, against its target",
    "stress-catch-rate": "how often each stress item catches its planted race over repeated runs",
    "suite-profile": "where the test suite's time goes: per worker, file and test",
}


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def tables() -> list[tuple[str, Path, str]]:
    """Every generated table: its name, its page, the heading of the section it is in ("" above any)."""
    found = []
    for page in PAGES:
        heading, fenced = "", False
        for line in page.read_text().splitlines():
            fenced ^= line.startswith("```")  # a "#" in a code block is no heading
            if line.startswith("#") and not fenced:
                heading = line.lstrip("#").strip()
            m = BEGIN.search(line)
            if m:
                found.append((m.group(1), page, heading))
    return found


def unindexed() -> list[str]:
    """The tables the pages hold that :data:`MEASURES` lacks, and the names it has that no page holds."""
    names = [name for name, _, _ in tables()]
    return [n for n in names if n not in MEASURES] + [n for n in MEASURES if n not in names]


def row(name: str, page: Path, heading: str) -> str:
    """The index row of one table, its provenance read from the line under it on its page."""
    rel = page.relative_to(ROOT).as_posix()
    shown = docpage.between(page.read_text(), name)
    made = provenance.parse(shown)
    if made is None:
        raise SystemExit(f"{rel}: the {name} table shows no provenance line under it (its renderer prints "
                         "one with docpage.provenance)")
    if name not in MEASURES:
        raise SystemExit(f"{rel}: the {name} table is not in benchmarks/figures.py's MEASURES: add what it measures")
    link = ("../" if page.parent == ROOT else "") + page.name + (f"#{slug(heading)}" if heading else "")
    where = f"[{rel}{' § ' + heading if heading else ''}]({link})"
    command = made["command"]
    return (f"| `{name}` | {markdown.cell(where)} | {markdown.cell(MEASURES[name])} | {made['date']} | "
            f"{markdown.cell(made['commit'])} | {markdown.cell(command)} |")


def render() -> str:
    rows = [row(*t) for t in tables()]
    return "\n".join([
        "# Measured figures", "",
        "Every table of measured figures in these pages, where it lives and how it was made. Each is written by "
        "the script that measures it, from its JSON under [data/](data/), with a line under it that gives the "
        "date, commit, machine, Python and command of the measurement (\"not recorded\" where the JSON "
        "lacks one; a `+` after a commit: the working tree had uncommitted changes). What each script measures "
        "and how: [benchmarks.md](benchmarks.md).", "",
        f"This page is generated: `{COMMAND}`.", "",
        "| figure | page | measures | date | commit | command |", "|---|---|---|---|---|---|", *rows, ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--write", action="store_true", help="write docs/figures.md (else print it)")
    args = ap.parse_args(argv)
    text = render()
    if args.write:
        PAGE.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
