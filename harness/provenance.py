"""Where a measured figure came from: the fields a measuring script records beside its result (date, commit,
machine, python, command), and the one line a generated table shows under itself, read only from what was
recorded.  A field the record lacks is shown as "not recorded", never filled in from the machine that renders."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["FIELDS", "NOT_RECORDED", "machine", "machine_text", "record", "line", "records_of", "fields", "parse"]

FIELDS = ("date", "commit", "machine", "python", "command")  # what a record holds and the line shows, in order
NOT_RECORDED = "not recorded"  # the value shown for a field a record lacks
_PREFIX = "Measured: "  # how the line opens; :func:`parse` finds it by this


def machine() -> dict[str, Any]:
    """The machine measuring: its CPUs, their model, its memory."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")),
                 platform.processor() or platform.machine())
    mem = next((int(ln.split()[1]) * 1024 for ln in (Path("/proc/meminfo").read_text().splitlines()
                                                     if Path("/proc/meminfo").exists() else [])
                if ln.startswith("MemTotal:")), None)
    return {"cpus": os.cpu_count(), "model": model,
            "mem_total_gib": None if mem is None else round(mem / (1 << 30), 1)}


def _commit(root: Path) -> str | None:
    """HEAD's short hash, with ``+`` where the tracked files differ from it; None outside a checkout."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    try:
        head = git("rev-parse", "--short", "HEAD")
        return head + ("+" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def record(command: str, root: Path) -> dict[str, Any]:
    """The fields to store beside a result measured now by ``command`` in the checkout at ``root``."""
    return {"date": datetime.date.today().isoformat(), "commit": _commit(root), "machine": machine(),
            "python": platform.python_version(), "command": command}


_KEYS = (*FIELDS, "cpus", "dirty")  # what a record's provenance is read from


def records_of(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The records a result holds: each of its ``runs`` (a run's own fields over the result's), or itself."""
    runs = data.get("runs")
    listed = list(runs.values()) if isinstance(runs, Mapping) else list(runs) if isinstance(runs, list) else []
    top = {k: data[k] for k in _KEYS if k in data}
    return [{**top, **{k: r[k] for k in _KEYS if k in r}} for r in listed if isinstance(r, Mapping)] or [data]


def machine_text(rec: Mapping[str, Any]) -> str | None:
    """A record's machine in words (``2 CPUs, AMD EPYC, 23.5 GiB``), or None when it records none."""
    m, cpus = rec.get("machine"), rec.get("cpus")
    if isinstance(m, Mapping):
        parts = [f"{m['cpus']} CPUs" if m.get("cpus") else None, m.get("model"),
                 f"{m['mem_total_gib']} GiB" if m.get("mem_total_gib") is not None else None]
        return ", ".join(str(p) for p in parts if p) or None
    parts = [str(m) if m else None, f"{cpus} CPUs" if cpus and f"{cpus} CPUs" not in str(m or "") else None]
    return ", ".join(p for p in parts if p) or None


def _value(rec: Mapping[str, Any], field: str) -> str | None:
    if field == "machine":
        return machine_text(rec)
    value = rec.get(field)
    if field == "commit" and value and rec.get("dirty") and not str(value).endswith("+"):
        value = f"{value}+"
    return str(value) if value not in (None, "") else None


def fields(records: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Each field's recorded values (distinct, in order, joined), or :data:`NOT_RECORDED`."""
    out = {}
    for field in FIELDS:
        values = [_value(r, field) for r in records]
        seen = list(dict.fromkeys(v for v in values if v is not None))
        joiner = "; " if field in ("command", "machine") else ", "
        out[field] = joiner.join(seen) if seen else NOT_RECORDED
    return out


def line(records: Sequence[Mapping[str, Any]]) -> str:
    """The line under a table: each field from what ``records`` hold (a ``+`` commit had uncommitted changes)."""
    f = fields(records)
    command = f["command"] if f["command"] == NOT_RECORDED else f"`{f['command']}`"
    return (f"{_PREFIX}date {f['date']} · commit {f['commit']} · machine {f['machine']} · "
            f"python {f['python']} · command {command}")


def parse(text: str) -> dict[str, str] | None:
    """The fields of the provenance line in ``text`` (a table and its line, as a page shows them), or None."""
    found = next((ln for ln in text.splitlines() if ln.startswith(_PREFIX + "date ")), None)
    if found is None:
        return None
    parts = found[len(_PREFIX):].split(" · ")
    if len(parts) != len(FIELDS) or any(not p.startswith(f + " ") for f, p in zip(FIELDS, parts, strict=True)):
        return None
    return {f: p[len(f) + 1:] for f, p in zip(FIELDS, parts, strict=True)}
