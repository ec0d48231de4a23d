"""Where a benchmark script's figures go: its result as JSON under docs/data/, its table written into its
docs page between two markers (``<!-- NAME-table:begin -->`` and ``...:end -->``).  tests/test_docs_tables.py
re-renders each table from its JSON with the script's own renderer and compares it with the page.  Each result
records where it was measured (:func:`measured`) and each table shows that under itself (:func:`provenance`)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import provenance as _provenance

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"  # the page the benchmark tables live on


def measured(script: str, argv: Sequence[str]) -> dict[str, Any]:
    """The provenance fields to store in a result that ``script`` (its ``__file__``) measures now, run with
    ``argv``."""
    command = shlex.join(["python", str(Path(script).resolve().relative_to(ROOT)), *argv])
    return _provenance.record(command, ROOT)


def provenance(result: Mapping[str, Any]) -> str:
    """The line under a table: the provenance its result recorded, "not recorded" for each field it lacks."""
    return _provenance.line(_provenance.records_of(result))


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}-table:begin -->", f"<!-- {name}-table:end -->"


def data_path(name: str) -> Path:
    return ROOT / "docs" / "data" / f"{name.replace('-', '_')}.json"


def between(text: str, name: str) -> str:
    """The text between NAME's markers, without the newlines next to them."""
    begin, end = markers(name)
    return text[text.index(begin) + len(begin):text.index(end)].strip("\n")


def write(name: str, result: dict[str, object], table: str, page: Path = PAGE) -> None:
    """Commit a result: ``result`` to docs/data/NAME.json, ``table`` into ``page`` between NAME's markers."""
    path = data_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    begin, end = markers(name)
    text = page.read_text()
    start, stop = text.index(begin) + len(begin), text.index(end)
    page.write_text(text[:start] + "\n" + table + "\n" + text[stop:])
