"""The record of a release's reproducers run against a real engine: ``runs.json`` beside the scripts, one entry
a script run by ``python -m harness.repro.check --record`` (``./dev vllm-engine-test --repro --record``), and
the table of it written into the scripts' README.md between its markers.

An entry: the scenario, the checker its exit stands for, each repeat's exit status, whether the repeats agreed
with expected.yaml, and the provenance of the run (harness.provenance: date, commit, machine, python,
command).  Entries are only appended, so runs of several sittings add up; the table shows each script's latest
entry and, over every entry, in how many runs the defect was present.  The file is read back bounded and
checked field by field: a malformed entry is refused with its position, never shown.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import provenance
from harness.artifacts import read_json
from harness.errors import ConfigError

__all__ = ["RUNS", "BEGIN", "END", "load", "append", "render", "write"]

RUNS = "runs.json"  # beside the scripts
BEGIN, END = "<!-- repro-runs-table:begin -->", "<!-- repro-runs-table:end -->"
MAX_RUNS_BYTES = 1 << 20  # a few hundred entries
_EXITS = {0: "0 (absent)", 1: "1 (present)"}  # anything else: the script could not tell


def _check(i: int, e: object) -> Mapping[str, Any]:
    where = f"{RUNS}[{i}]"
    if not isinstance(e, Mapping):
        raise ConfigError(f"{where}: expected an object, found {type(e).__name__}")
    for key, kind in (("scenario", str), ("checker", str), ("date", str), ("as_expected", bool)):
        if not isinstance(e.get(key), kind):
            raise ConfigError(f"{where}.{key}: expected a {kind.__name__}, found {e.get(key)!r:.80}")
    exits = e.get("exits")
    if not (isinstance(exits, list) and 1 <= len(exits) <= 1000
            and all(isinstance(x, int) and not isinstance(x, bool) and -255 <= x <= 255 for x in exits)):
        raise ConfigError(f"{where}.exits: expected a list of 1 to 1000 exit statuses, found {exits!r:.80}")
    return e


def load(folder: Path) -> list[Mapping[str, Any]]:
    """The entries of ``folder``'s runs.json (none when there is no file)."""
    path = folder / RUNS
    if not path.exists():
        return []
    data = read_json(path, RUNS, MAX_RUNS_BYTES)
    if not isinstance(data, list):
        raise ConfigError(f"{path}: expected a list of runs, found {type(data).__name__}")
    return [_check(i, e) for i, e in enumerate(data)]


def append(folder: Path, entry: Mapping[str, Any]) -> None:
    """Add one script's run to ``folder``'s runs.json."""
    entries = load(folder)
    entries.append(_check(len(entries), dict(entry)))
    (folder / RUNS).write_text(json.dumps(entries, indent=1) + "\n")


def render(entries: Sequence[Mapping[str, Any]]) -> str:
    """A row a script (its latest entry), and the provenance line of those entries."""
    if not entries:
        return "No reproducer of this release has been run against the real engine with `--record` yet."
    latest: dict[str, Mapping[str, Any]] = {}
    every: dict[str, list[int]] = {}  # every recorded exit of a script, of all its entries
    for e in entries:
        latest[e["scenario"]] = e
        every.setdefault(e["scenario"], []).extend(e["exits"])
    lines = ["| script | judged as | exit statuses (latest run) | as expected.yaml says | date | "
             "present in, of every recorded run |", "| --- | --- | --- | --- | --- | --- |"]
    for name in sorted(latest):
        e = latest[name]
        exits = ", ".join(_EXITS.get(x, f"{x} (cannot tell)") for x in e["exits"])
        told = [x for x in every[name] if x in _EXITS]
        rest = "" if len(told) == len(every[name]) else " (the rest could not tell)"
        lines.append(f"| [{name}.py]({name}.py) | `{e['checker']}` | {exits} | "
                     f"{'yes' if e['as_expected'] else '**no**'} | {e['date']} | {sum(told)} of {len(told)}{rest} |")
    return "\n".join([*lines, "", provenance.line([latest[n] for n in sorted(latest)])])


def write(folder: Path) -> None:
    """Rewrite the table between the markers of ``folder``'s README.md from its runs.json."""
    page = folder / "README.md"
    text = page.read_text()
    if BEGIN not in text or END not in text:
        raise ConfigError(f"{page}: has no {BEGIN} ... {END} markers to write the table between")
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    page.write_text(text[:a] + "\n" + render(load(folder)) + "\n" + text[b:])
