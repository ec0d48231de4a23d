"""Wall time and peak memory of lastcall refusing each hostile input, one child process per case.

Run:  .venv/bin/python benchmarks/hostile_input.py [--runs 3] [--no-write]

Each case of tests/hostile_cases.py (the same inputs and commands the tests run)
has its input made here, then is run ``runs`` times in a fresh child,
``python -m harness.cli ARGV`` with the case's environment.  Wall time is the child's whole life
(interpreter start and imports included); peak RSS is the child's VmHWM, which
it writes at exit.  The median wall time and the largest peak are reported.  A few
files at the limits (which pass the reader's and the parser's limits; the schema
then judges their content) and a good scenario are measured the same way, for
comparison.

Goal: every case under 5 s and 500 MiB.  The script writes its table
into docs/limits.md between ``<!-- hostile-input-table:begin -->`` and ``...:end -->``
and its figures to docs/data/hostile_input.json (unless ``--no-write``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import docpage  # noqa: E402
from hostile_cases import CASES, GOOD, HEAD, TAIL  # noqa: E402

from harness.scenario.yamlnodes import MAX_BYTES, MAX_EXPANDED, MAX_NODES  # noqa: E402

GOAL_S, GOAL_MIB = 5.0, 500.0
BEGIN, END = "<!-- hostile-input-table:begin -->", "<!-- hostile-input-table:end -->"
PAGE = ROOT / "docs" / "limits.md"  # the page whose table this script writes
DATA = ROOT / "docs" / "data" / "hostile_input.json"


# The child runs lastcall's module as ``python -m harness.cli`` would, and at exit writes its own VmHWM (the peak
# RSS of its address space since exec): ru_maxrss would also count the pages it shared with this process at fork.
CHILD = ("import atexit, runpy, sys\n"
         "out = sys.argv.pop(1)\n"
         "def peak():\n"
         "    with open('/proc/self/status') as f:\n"
         "        hwm = next(line.split()[1] for line in f if line.startswith('VmHWM:'))\n"
         "    with open(out, 'w') as f:\n"
         "        f.write(hwm)\n"
         "atexit.register(peak)\n"
         "sys.argv[0] = 'lastcall'\n"
         "runpy.run_module('harness.cli', run_name='__main__', alter_sys=True)\n")


def _measure(argv: list[str], env: dict[str, str]) -> tuple[int, float, float]:
    """(exit code, wall seconds, peak RSS in MiB) of ``lastcall ARGV`` in a fresh child."""
    with tempfile.NamedTemporaryFile("r", suffix=".hwm") as hwm:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", CHILD, hwm.name, *argv], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, **env}, timeout=120)
        wall = time.perf_counter() - t0
        peak_kib = int(hwm.read())
    return proc.returncode, wall, peak_kib / 1024


def _near_limits(tmp: Path) -> list[tuple[str, str]]:
    """Files at the limits, which must load (or fail only on their scenario content): (name, path)."""
    comments = tmp / "at-size-limit.yaml"
    body = (HEAD + TAIL).encode()
    line = b"# a comment line, to make the file large\n"
    pad = MAX_BYTES - len(body)
    comments.write_bytes(body + line * (pad // len(line)) + b"#" * (pad % len(line) - 1) + b"\n")
    values = tmp / "at-value-limit.yaml"
    values.write_text(HEAD + "about: [" + ", ".join(["x"] * (MAX_NODES - 40)) + "]\n" + TAIL)
    aliases = tmp / "at-alias-budget.yaml"
    fits = (MAX_EXPANDED - 300) // 100
    aliases.write_text("a: &a [" + ", ".join(["x"] * 99) + "]\n" + HEAD + "about: ["
                       + ", ".join(["*a"] * fits) + "]\n" + TAIL)
    return [("good scenario (for comparison)", GOOD), ("1 MiB file of comments (at the size limit)", str(comments)),
            (f"{MAX_NODES - 40} values (under the value limit)", str(values)),
            (f"aliases expanding to ~{MAX_EXPANDED} values (under the budget)", str(aliases))]


def run(runs: int) -> dict[str, object]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="lastcall-hostile-") as tmp:
        for case in CASES:
            where = Path(tmp) / case.name
            where.mkdir()
            path = case.input(where)  # made here, so the child measured is lastcall alone
            argv = [a.replace("{path}", path) for a in case.argv]
            shown = " ".join([*(f"{k}={v}" for k, v in case.env.items()), "lastcall",
                              *(a.replace("{path}", _shown(path, tmp)) for a in case.argv)])
            rows.append(_row(case.name, shown, [_measure(argv, case.env) for _ in range(runs)]))
        for name, path in _near_limits(Path(tmp)):
            rows.append(_row(name, f"lastcall validate {_shown(path, tmp)}",
                             [_measure(["validate", path], {}) for _ in range(runs)]))
    return {**docpage.measured(__file__, sys.argv[1:]), "runs": runs,
            "goal": {"wall_s": GOAL_S, "peak_rss_mib": GOAL_MIB}, "rows": rows}


def _shown(path: str, tmp: str) -> str:
    return "$TMP/" + Path(path).name if path.startswith(tmp) else path


def _row(name: str, command: str, samples: list[tuple[int, float, float]]) -> dict[str, object]:
    codes = sorted({rc for rc, _, _ in samples})
    wall = statistics.median(w for _, w, _ in samples)
    peak = max(m for _, _, m in samples)
    return {"case": name, "command": command, "exit": codes, "wall_s": round(wall, 2),
            "peak_rss_mib": round(peak, 1), "within_goal": wall < GOAL_S and peak < GOAL_MIB}


def table(result: dict[str, object]) -> str:
    rows = result["rows"]
    assert isinstance(rows, list)
    out = [f"Measured by `benchmarks/hostile_input.py` (median wall time of {result['runs']} runs, largest peak "
           f"RSS; each a fresh process, interpreter start and imports included). Goal: under {GOAL_S:g} s and "
           f"{GOAL_MIB:g} MiB.",
           "", "| input | command | exit | wall s | peak RSS MiB | within goal |", "|---|---|---|---|---|---|"]
    for r in rows:
        code = "/".join(str(c) for c in r["exit"])
        out.append(f"| {r['case']} | `{r['command']}` | {code} | {r['wall_s']:.2f} | {r['peak_rss_mib']:.0f} | "
                   f"{'yes' if r['within_goal'] else '**no**'} |")
    return "\n".join([*out, "", docpage.provenance(result)])


def _write(result: dict[str, object]) -> None:
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(json.dumps(result, indent=2) + "\n")
    text = PAGE.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    PAGE.write_text(text[:start] + "\n" + table(result) + "\n" + text[end:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    args = ap.parse_args()
    result = run(args.runs)
    print(table(result))
    if not args.no_write:
        _write(result)
    rows = result["rows"]
    assert isinstance(rows, list)
    return 0 if all(r["within_goal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
