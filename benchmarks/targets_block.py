"""The measured speed targets in the README: one table rendered from the JSON the measuring
scripts commit (docs/data/suite_time.json from benchmarks/suite_time.py, docs/data/ipc_roundtrip.json from
benchmarks/ipc_roundtrip.py, docs/data/engine_launch.json from benchmarks/engine_launch.py), written between the
README's ``targets`` markers whenever one of them runs with ``--write``.  tests/test_suite_time.py re-renders it
and compares."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import docpage

from harness import provenance

NAME = "targets"
README = docpage.ROOT / "README.md"
STOP_TARGET_MS = 1.0  # benchmarks/ipc_roundtrip.py's STOP_TARGET_MS
# the engine library's bound: CI's timeout for `./dev vllm-engine-test` (.ci/run).  A launch forked from a zygote
# was once held to 15 s amortised; exec'd launches, as users run them, answer to the library's bound instead
ENGINE_LIBRARY_TARGET_S = 1800.0


def _mmss(s: float) -> str:
    whole = round(s)
    return f"{whole // 60} min {whole % 60:02d} s" if whole >= 60 else f"{whole} s"


def _load(name: str) -> dict[str, Any]:
    path: Path = docpage.data_path(name)
    return json.loads(path.read_text()) if path.exists() else {}


def table(suite: dict[str, Any] | None = None, ipc: dict[str, Any] | None = None,
          engine: dict[str, Any] | None = None) -> str:
    suite = _load("suite-time") if suite is None else suite
    ipc = _load("ipc-roundtrip") if ipc is None else ipc
    engine = _load("engine-launch") if engine is None else engine
    rows = ["| target | measured | met | where |", "|---|---|---|---|"]
    shown: list[Mapping[str, Any]] = []  # the records of the measurements a row shows, for the line under them
    what = {"default": "the default suite (`./dev test`) <= 4 min", "not-slow": '`-m "not slow"` <= 2 min'}
    for select, row in suite.get("selections", {}).items():
        met = "yes" if row["median_wall_s"] <= row["target_s"] else "**no (missed)**"
        rows.append(f"| {what.get(select, select)} | {_mmss(row['median_wall_s'])}, median of {len(row['runs'])} "
                    f"({row.get('where', suite.get('where', ''))} of {row.get('commit', suite.get('commit', '?'))}, "
                    f"{row.get('date', suite.get('date', '?'))}) | {met} | "
                    "[running.md](docs/running.md#suite-time) |")
        shown += [{**suite, **{k: row[k] for k in ("commit", "date") if k in row}}]
    runs = ipc.get("runs") or [{}]
    last = runs[-1]
    ms, cpu = last.get("stop_median_ms", {}).get("256"), last.get("stop_cpu_us", {}).get("256")
    if ms is not None:
        met = "yes" if ms <= STOP_TARGET_MS else "**no (missed)**"
        profile = (f"; profile: {cpu['caller']:.0f} us of the caller's CPU, then {cpu['thread']:.0f} us of the "
                   "serving thread's, in the order line 4 of the stop contract sets") if cpu else ""
        floor = last.get("stop_floor_us", {}).get("256")
        if floor:
            profile += (f"; its floor, the kernel and the file system alone in one thread: "
                        f"{(floor['closes'] + floor['teardown']) / 1e3:.2f} ms ({floor['closes']:.0f} us of closes, "
                        f"{floor['teardown']:.0f} us of the teardown's calls)")
        rows.append(f"| stop() with 256 idle connections parked <= {STOP_TARGET_MS:g} ms, median | {ms:.2f} ms "
                    f"({last.get('stop_reps', '?')} fresh listeners, {last.get('date', '?')}){profile} | {met} | "
                    "[benchmarks.md](docs/benchmarks.md) |")
        shown += provenance.records_of({"runs": [last]})
    lib = engine.get("library")  # the engine library's wall time, `vllm serve` exec'd, against CI's bound
    if lib:
        met = "yes" if lib["wall_s"] <= ENGINE_LIBRARY_TARGET_S else "**no (missed)**"
        rows.append(f"| real vLLM: the engine library (`./dev vllm-engine-test`), exec'd, <= "
                    f"{_mmss(ENGINE_LIBRARY_TARGET_S)} | {_mmss(lib['wall_s'])} ({lib['tests']} tests, "
                    f"{lib.get('date', '?')}) | {met} | "
                    "[benchmarks.md](docs/benchmarks.md) |")
        shown += [{**engine, **{k: lib[k] for k in ("date",) if k in lib}}]
    return "\n".join([*rows, "", provenance.line(shown)])


def write() -> None:
    begin, end = docpage.markers(NAME)
    text = README.read_text()
    start, stop = text.index(begin) + len(begin), text.index(end)
    README.write_text(text[:start] + "\n" + table() + "\n" + text[stop:])


if __name__ == "__main__":
    write()
    print(table())
