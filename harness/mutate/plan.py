"""What a mutation run mutates and how its mutants are judged: the stop-path list, the sample, the equivalents.

``mutation/stop-path.txt`` lists the functions ``./dev mutate`` mutates (MODULE:QUALNAME, one a line, ``#``
comments); ``mutation/equivalent.yaml`` names the mutants that cannot change what the listener does, each
with a checkable reason (``unreachable`` or ``same_behaviour``) and the test that shows it;
``mutation/survivors.yaml`` explains each survivor of the recorded measurement (what the library misses).
Each entry carries the source line its id points at: an equivalent.yaml entry whose code has moved fails
tests/test_mutate_plan.py instead of naming another mutant (survivors.yaml is held to the measurement's
JSON by tests/test_mutate_docs.py).  ``mutation/moved.txt`` names the functions moved to another file or
class since a stored record named their mutants: a recorded id is found under its function's name now
(:func:`with_recorded_ids`), as the stored records are never rewritten.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from harness.errors import ConfigError
from harness.mutate.mutator import Mutant, mutants_of
from harness.mutate.run import Subject, resolve

__all__ = ["STOP_PATH", "EQUIVALENT", "SURVIVORS", "MOVED", "REASONS", "Entry", "read_stop_path", "subjects_of",
           "read_entries", "read_moved", "with_recorded_ids", "choose", "source_line"]

HERE = Path(__file__).resolve().parents[2] / "mutation"
STOP_PATH = HERE / "stop-path.txt"
EQUIVALENT = HERE / "equivalent.yaml"
SURVIVORS = HERE / "survivors.yaml"
MOVED = HERE / "moved.txt"
REASONS = ("unreachable", "same_behaviour")


def read_stop_path(path: Path = STOP_PATH) -> list[tuple[str, int]]:
    """The MODULE:QUALNAME lines of ``path`` with their line numbers."""
    out = []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if line:
            if ":" not in line:
                raise ConfigError(f"{path}:{n}: {line!r}: give MODULE:QUALNAME")
            out.append((line, n))
    return out


def subjects_of(specs: Sequence[tuple[str, int]], where: Path = STOP_PATH) -> list[Subject]:
    """One Subject per module, its qualnames in the file's order; ConfigError located at the bad line."""
    by_module: dict[str, list[str]] = {}
    for spec, _n in specs:
        module, _, qual = spec.partition(":")
        by_module.setdefault(module, []).append(qual)
    subjects = []
    for module, quals in by_module.items():
        try:
            subjects.append(resolve(f"{module}:{','.join(quals)}", where=str(where)))
        except ConfigError as exc:
            line = next(n for s, n in specs if s.startswith(module + ":"))
            raise ConfigError(f"{where}:{line}: {exc}") from None
    return subjects


@dataclass(frozen=True)
class Entry:
    """One entry of equivalent.yaml or survivors.yaml."""

    id: str
    line: str  # the source line the id points at, stripped
    why: str
    reason: str = ""  # equivalent.yaml: unreachable or same_behaviour
    test: str = ""  # equivalent.yaml: the test that shows it (path::name)
    where: str = ""  # file:N of the entry, for messages


def read_entries(path: Path, *, equivalent: bool) -> dict[str, Entry]:
    """The entries of ``path`` by mutant id (an absent file has none); ConfigError for a malformed one."""
    import yaml

    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or []
    if not isinstance(data, list):
        raise ConfigError(f"{path}: a list of entries (id, line, why{', reason, test' if equivalent else ''})")
    out: dict[str, Entry] = {}
    keys = {"id", "line", "why", *(("reason", "test") if equivalent else ())}
    for i, item in enumerate(data):
        where = f"{path}: entry {i + 1}"
        if not isinstance(item, dict) or set(item) != keys or not all(isinstance(v, str) for v in item.values()):
            raise ConfigError(f"{where}: give exactly the string keys {', '.join(sorted(keys))}")
        if equivalent and item["reason"] not in REASONS:
            raise ConfigError(f"{where}: reason {item['reason']!r}: one of {', '.join(REASONS)}")
        if item["id"] in out:
            raise ConfigError(f"{where}: {item['id']} is named twice")
        out[item["id"]] = Entry(item["id"], item["line"], item["why"], item.get("reason", ""), item.get("test", ""),
                                where)
    return out


def read_moved(path: Path = MOVED) -> dict[str, str]:
    """FILE::QUALNAME as a stored record names a function -> FILE::QUALNAME now, one pair a line of ``path``
    (``#`` comments; an absent file has none); ConfigError located at a malformed line."""
    out: dict[str, str] = {}
    if not path.exists():
        return out
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2 or not all(w.count("::") == 1 for w in words) or words[0] in out:
            raise ConfigError(f"{path}:{n}: {raw.strip()!r}: give FILE::QUALNAME as recorded, then as it is now, "
                              f"each function once")
        out[words[0]] = words[1]
    return out


_T = TypeVar("_T")


def with_recorded_ids(entries: Mapping[str, _T], moved: Mapping[str, str] | None = None) -> dict[str, _T]:
    """``entries`` (by mutant id now) also under the id a stored record gives each of a moved function: a
    mutant's anchor does not depend on its file or qualname, so only the FILE::QUALNAME part differs."""
    moved = read_moved() if moved is None else moved
    now_to_then = {now: then for then, now in moved.items()}
    out = dict(entries)
    for key, value in entries.items():
        file, _, rest = key.partition("::")
        qualname, sep, tail = rest.partition("::")
        then = now_to_then.get(f"{file}::{qualname}")
        if then is not None and sep:
            out.setdefault(f"{then}::{tail}", value)
    return out


def source_line(root: Path, mutant_id: str) -> str | None:
    """The stripped first source line of the mutant an id (FILE::QUALNAME::OP:ANCHOR) names, None if no mutant of
    the tree has that id."""
    file, _, rest = mutant_id.partition("::")
    qualname = rest.partition("::")[0]
    path = root / file
    if not qualname or not path.is_file():
        return None
    source = path.read_text()
    try:
        found = [m for m in mutants_of(source, file, [qualname]) if m.id == mutant_id]
    except (KeyError, SyntaxError):
        return None
    return source.splitlines()[found[0].line - 1].strip() if found else None


def choose(mutants: Sequence[Mutant], *, sample: int | None, seed: int, only: Sequence[str] = ()) -> list[Mutant]:
    """The mutants to run: those ``only`` names, else a seeded sample of ``sample`` (all when None), in order.

    Error handling: ConfigError for an id in ``only`` that names no mutant (with the nearest one).
    """
    if only:
        by_id = {m.id: m for m in mutants}
        for name in only:
            if name not in by_id:
                near = difflib.get_close_matches(name, list(by_id), n=1)
                raise ConfigError(f"--only {name}: no such mutant" + (f"; did you mean {near[0]}?" if near else "")
                                  + " (ids are FILE::QUALNAME::OP:ANCHOR, as a run prints them)")
        return [by_id[n] for n in dict.fromkeys(only)]
    if sample is None or sample >= len(mutants):
        return list(mutants)
    picked = sorted(random.Random(seed).sample(range(len(mutants)), sample))
    return [mutants[i] for i in picked]


def as_json(entry: Entry) -> dict[str, Any]:
    return {"why": entry.why, **({"reason": entry.reason, "test": entry.test} if entry.reason else {})}
