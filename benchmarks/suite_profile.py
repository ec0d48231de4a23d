"""Where lastcall's own test suite spends its time: per test file and per test, under ``pytest -n 2``.

Run:  .venv/bin/python benchmarks/suite_profile.py [--select not-slow] [--clone] [-k EXPR] [PATHS...]
          [--from FILE] [--slow FILE ...] [--write] [--note TEXT]

One run of the selection (``-n 2 -q -p no:randomly``, as benchmarks/suite_time.py runs it) with a probe plugin
(benchmarks/suite_probe.py) that records every test report's phase, duration, start, stop and xdist worker.
From it: the run's wall time; each worker's busy time, its start-up (the session's start to its first test:
interpreter, plugin, collection) and its idle tail (its last test to the session's end: the imbalance); the
seconds per test file (set-up + call + teardown of its tests) and its share; the slowest tests.  ``--clone``
runs in a clean clone of HEAD with this .venv's python (the clone's ``harness`` first on the path), else the
working tree.  ``--from FILE`` renders a probe file already written instead of running.

The slow tests (``-m slow``) are listed by ``--collect-only``; their durations come from probe files of runs
of some of them alone (``--slow FILE``, written by ``--select slow --probe-out FILE PATHS``), and the rest
are listed unmeasured: the default suite is too long to run whole for a profile on a shared 2-core machine.

``--write`` commits the result: docs/data/suite_profile.json and its tables in docs/suite-profile.md
(between the ``suite-profile-table`` markers; tests/test_suite_time.py re-renders them from the JSON).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import docpage
import suite_time

NAME = "suite-profile"
ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "suite-profile.md"
SELECTIONS: dict[str, list[str]] = {"default": [], "not-slow": ["-m", "not slow"], "slow": ["-m", "slow"]}
TOP = 30  # the slowest tests shown
_ITEM = re.compile(r"^(\S+::\S+)$", re.M)


def run_probe(where: Path, select: str, paths: Sequence[str], keyword: str | None, probe: Path,
              python: Path, workers: int = 2) -> dict[str, Any]:
    """One probed pytest run in ``where`` with ``python``: its wall seconds, return code and the probe's records."""
    cmd = [str(python), "-m", "pytest", "-n", str(workers), "-q", "-p", "no:randomly", "-p", "suite_probe",
           *SELECTIONS[select], *(["-k", keyword] if keyword else []), *paths]
    env = {**os.environ, "LASTCALL_SUITE_PROBE": str(probe),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")]))}
    proc, wall, cpu = suite_time.timed_pytest(cmd, where, env)
    if not probe.exists():
        raise SystemExit(f"suite_profile: pytest exited {proc.returncode} without a probe file:\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    rec = json.loads(probe.read_text())
    tail = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    return {"select": select, "whole": not paths and not keyword and workers == 2, "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1), "rc": proc.returncode, "summary": tail[0] if tail else "",
            "counts": suite_time.parse_summary(proc.stdout).get("counts", {}),
            "command": " ".join(["pytest", *cmd[3:]]), **rec}


def collect_slow(where: Path) -> list[str]:
    """The ids of the slow tests, as ``--collect-only -q -m slow`` lists them."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow", "-p", "no:randomly"],
                          cwd=where, capture_output=True, text=True)
    return _ITEM.findall(proc.stdout)


def per_test(reports: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """nodeid -> its seconds (set-up + call + teardown), worker, outcome, start and stop."""
    tests: dict[str, dict[str, Any]] = {}
    for r in reports:
        t = tests.setdefault(r["nodeid"], {"s": 0.0, "worker": r["worker"], "outcome": "passed",
                                            "start": r["start"], "stop": r["stop"], "slow": r["slow"]})
        t["s"] += r["duration"]
        t["start"], t["stop"] = min(t["start"], r["start"]), max(t["stop"], r["stop"])
        if r["when"] == "call" or (r["outcome"] != "passed" and t["outcome"] == "passed"):
            t["outcome"] = r["outcome"]  # the call's outcome, or a failed or skipped set-up's, or teardown's
    return tests


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def analyse(run: Mapping[str, Any]) -> dict[str, Any]:
    """The profile of one probed run: workers, files, slowest tests."""
    tests = per_test(run["reports"])
    start, finish = run["session"]["start"], run["session"]["finish"]
    workers: dict[str, dict[str, float]] = {}
    for t in tests.values():
        w = workers.setdefault(t["worker"], {"tests": 0, "busy_s": 0.0, "first": t["start"], "last": t["stop"]})
        w["tests"] += 1
        w["busy_s"] += t["s"]
        w["first"], w["last"] = min(w["first"], t["start"]), max(w["last"], t["stop"])
    total = sum(t["s"] for t in tests.values())
    phases = {w: round(sum(r["duration"] for r in run["reports"] if r["when"] == w), 1)
              for w in ("setup", "call", "teardown")}
    files: dict[str, dict[str, Any]] = defaultdict(lambda: {"tests": 0, "s": 0.0, "max_s": 0.0, "max": ""})
    for nodeid, t in tests.items():
        f = files[file_of(nodeid)]
        f["tests"] += 1
        f["s"] += t["s"]
        if t["s"] > f["max_s"]:
            f["max_s"], f["max"] = t["s"], nodeid
    ordered = sorted(files.items(), key=lambda kv: -kv[1]["s"])
    return {
        "wall_s": run["wall_s"], "session_s": round(finish - start, 1), "summary": run.get("summary", ""),
        "command": run.get("command", ""), "tests": len(tests), "test_s": round(total, 1), "phases": phases,
        "workers": {k: {"tests": int(v["tests"]), "busy_s": round(v["busy_s"], 1),
                        "start_up_s": round(v["first"] - start, 1), "idle_tail_s": round(finish - v["last"], 1)}
                    for k, v in sorted(workers.items())},
        "files": [{"file": k, "tests": int(v["tests"]), "s": round(v["s"], 1),
                   "share": round(v["s"] / total, 4) if total else 0.0, "max_s": round(v["max_s"], 1),
                   "max": v["max"]} for k, v in ordered],
        "top": [{"test": k, "s": round(v["s"], 2), "outcome": v["outcome"]}
                for k, v in sorted(tests.items(), key=lambda kv: -kv[1]["s"])[:TOP]],
    }


def compare(before: Mapping[str, Any], after: Mapping[str, Any], unlike: Sequence[str] = ()) -> dict[str, Any]:
    """Two profiles side by side: the files whose test count is the same in both (the like-for-like ones, less
    ``unlike``: files whose cost differs for a reason outside the code, e.g. a set-up), their seconds before
    and after and the ratio; the phases' totals."""
    old = {f["file"]: f for f in before["files"]}
    rows = [{"file": f["file"], "tests": f["tests"], "before_s": old[f["file"]]["s"], "after_s": f["s"],
             "ratio": round(f["s"] / old[f["file"]]["s"], 2) if old[f["file"]]["s"] else None}
            for f in after["files"] if f["file"] in old and old[f["file"]]["tests"] == f["tests"]
            and f["file"] not in unlike]
    same_b = sum(r["before_s"] for r in rows)
    same_a = sum(r["after_s"] for r in rows)
    return {"files": sorted(rows, key=lambda r: -r["before_s"]), "same_files": len(rows),
            "same_before_s": round(same_b, 1), "same_after_s": round(same_a, 1),
            "same_ratio": round(same_a / same_b, 2) if same_b else None,
            "phases": {"before": before.get("phases", {}), "after": after.get("phases", {})},
            "unlike": list(unlike), "wall": {"before": before["wall_s"], "after": after["wall_s"]},
            "tests": {"before": before["tests"], "after": after["tests"]}}


def slow_rows(ids: Sequence[str], measured: Mapping[str, float], known: Mapping[str, str]) -> list[dict[str, Any]]:
    """The slow tests grouped by file: how many, how many measured, their measured seconds."""
    by_file: dict[str, dict[str, Any]] = defaultdict(lambda: {"tests": 0, "measured": 0, "s": 0.0, "max_s": 0.0})
    for nodeid in ids:
        f = by_file[file_of(nodeid)]
        f["tests"] += 1
        if nodeid in measured:
            f["measured"] += 1
            f["s"] += measured[nodeid]
            f["max_s"] = max(f["max_s"], measured[nodeid])
    return [{"file": k, "tests": int(v["tests"]), "measured": int(v["measured"]), "s": round(v["s"], 1),
             "max_s": round(v["max_s"], 1), "known": known.get(k, "")}
            for k, v in sorted(by_file.items(), key=lambda kv: (-kv[1]["s"], kv[0]))]


def _s(x: float) -> str:
    return f"{x:.1f}"


def table(result: Mapping[str, Any]) -> str:
    """The markdown of docs/suite-profile.md, from the JSON this script writes."""
    p = result["profile"]
    note = f"; {result['note'].rstrip('.')}" if result.get("note") else ""
    out = [f"One probed run: `{p['command']}`, in the {result['where']}{note}.", "",
           f"Wall {_s(p['wall_s'])} s (pytest's session from start to finish: {_s(p['session_s'])} s), "
           f"{p['tests']} tests, "
           f"{_s(p['test_s'])} s of test time (set-up + call + teardown, summed over both workers); "
           f"pytest's summary: `{p['summary']}`.", "",
           "| worker | tests | busy | start-up (session start to its first test) | idle tail (its last test "
           "to the end) |", "|---|---|---|---|---|"]
    for w, v in p["workers"].items():
        out.append(f"| {w} | {v['tests']} | {_s(v['busy_s'])} s | {_s(v['start_up_s'])} s | "
                   f"{_s(v['idle_tail_s'])} s |")
    out += ["", "Per test file, the slowest first:", "", "| file | tests | seconds | share | slowest test (s) |",
            "|---|---|---|---|---|"]
    for f in p["files"]:
        name = f["max"].split("::", 1)[1] if "::" in f["max"] else f["max"]
        out.append(f"| `{f['file']}` | {f['tests']} | {_s(f['s'])} | {100 * f['share']:.1f} % | "
                   f"`{name}` ({_s(f['max_s'])}) |")
    out += ["", f"The {len(p['top'])} slowest tests:", "", "| test | seconds | outcome |", "|---|---|---|"]
    for t in p["top"]:
        out.append(f"| `{t['test']}` | {_s(t['s'])} | {t['outcome']} |")
    cmp = result.get("compare")
    if cmp:
        b, ph = result["before"], cmp["phases"]
        out += ["", f"Against an earlier profile ({b['where']} of {b['commit']}, {b['note']}): wall "
                f"{_s(cmp['wall']['before'])} s for {cmp['tests']['before']} tests, now {_s(cmp['wall']['after'])} s "
                f"for {cmp['tests']['after']}. Like for like, the {cmp['same_files']} files with as many tests in "
                f"both" + (f" (less {', '.join(f'`{u}`' for u in cmp['unlike'])})" if cmp["unlike"] else "")
                + f": {_s(cmp['same_before_s'])} s, now {_s(cmp['same_after_s'])} s (x{cmp['same_ratio']}). "
                "Phases (summed over the workers), before / after: " + ", ".join(
                    f"{w} {_s(ph['before'].get(w, 0.0))} / {_s(ph['after'].get(w, 0.0))} s"
                    for w in ("setup", "call", "teardown")) + ".", "",
                "| file (as many tests in both) | tests | before s | after s | after / before |",
                "|---|---|---|---|---|"]
        for r in cmp["files"][:TOP]:
            out.append(f"| `{r['file']}` | {r['tests']} | {_s(r['before_s'])} | {_s(r['after_s'])} | "
                       f"{r['ratio'] if r['ratio'] is not None else '-'} |")
    slow = result.get("slow", {})
    if slow:
        out += ["", f"The slow tests (`-m slow`): {slow['collected']} collected; measured where a run of them "
                "alone was probed (`--slow`), the rest from what is known.", "",
                "| file | slow tests | measured | measured seconds | slowest measured (s) | known |",
                "|---|---|---|---|---|---|"]
        for r in slow["files"]:
            out.append(f"| `{r['file']}` | {r['tests']} | {r['measured']} | {_s(r['s'])} | {_s(r['max_s'])} | "
                       f"{r['known'] or '-'} |")
    return "\n".join([*out, "", docpage.provenance(result)])


def measured_from(files: Sequence[Path]) -> dict[str, float]:
    got: dict[str, float] = {}
    for f in files:
        got.update({k: v["s"] for k, v in per_test(json.loads(f.read_text())["reports"]).items()})
    return got


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--select", choices=sorted(SELECTIONS), default="not-slow")
    p.add_argument("--clone", action="store_true", help="run in a clean clone of HEAD (this .venv's python)")
    p.add_argument("--setup", action="store_true",
                   help="with --clone: set the clone up as .ci/run does (./dev setup), on a copy of this .venv")
    p.add_argument("-k", dest="keyword", help="pytest -k, to probe a part of the selection")
    p.add_argument("-n", dest="workers", type=int, default=2, help="xdist workers (default 2; 0 for slow tests alone)")
    p.add_argument("paths", nargs="*", help="test paths (default: the whole selection)")
    p.add_argument("--from", dest="from_", type=Path, metavar="FILE", help="render this probe file; run nothing")
    p.add_argument("--probe-out", type=Path, metavar="FILE", help="keep the probe file here")
    p.add_argument("--slow", type=Path, nargs="*", default=[], metavar="FILE",
                   help="probe files of runs of slow tests: their durations go into the slow table")
    p.add_argument("--known", type=Path, metavar="JSON", help="{file: words} for slow files not measured here")
    p.add_argument("--write", action="store_true", help="commit to docs/suite-profile.md and docs/data/")
    p.add_argument("--note", default="", help="with --write: a sentence about the machine and its load")
    p.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "NOTE"),
                   help="an earlier probe file and a note on it: the like-for-like files side by side")
    p.add_argument("--unlike", nargs="*", default=[], metavar="FILE",
                   help="with --compare: test files left out of the like-for-like sum (say why in the note)")
    args = p.parse_args(argv)
    for f in [*(args.slow or []), *([args.from_] if args.from_ else []), *([args.known] if args.known else []),
              *([args.compare[0]] if args.compare else [])]:
        if not f.is_file():
            p.error(f"{f}: no such file")
    tmp = Path(tempfile.mkdtemp(prefix="lc-profile-"))
    try:
        where, python = ROOT, Path(sys.executable)
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip() or "an unknown commit"
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        commit = f"{head} with uncommitted changes" if dirty else head  # the working tree's commit
        if args.clone:
            where = tmp / "tree"
            subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(where)], check=True)
            commit = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"], check=True,
                                    capture_output=True, text=True).stdout.strip()
            if args.setup:  # .ci/run's ./dev setup, untimed; the copy saves the torch download, pip does the rest
                subprocess.run(["cp", "-a", str(ROOT / ".venv"), str(where / ".venv")], check=True)
                subprocess.run(["./dev", "setup"], cwd=where, check=True, stdout=subprocess.DEVNULL)
                python = where / ".venv" / "bin" / "python"
        if args.from_ is not None:
            run = json.loads(args.from_.read_text())
            run.setdefault("wall_s", round(run["session"]["finish"] - run["session"]["start"], 1))
        else:
            probe = args.probe_out or tmp / "probe.json"
            run = run_probe(where, args.select, args.paths, args.keyword, probe, python, args.workers)
        result: dict[str, Any] = {**docpage.measured(__file__, sys.argv[1:] if argv is None else argv),
                                  "date": run.get("date", datetime.date.today().isoformat()),
                                  "commit": run.get("commit", commit),
                                  "where": run.get("where", ("set-up clean clone" if args.setup else "clean clone")
                                                   if args.clone else "working tree"),
                                  "profile": analyse(run)}
        if args.note:
            result["note"] = args.note
        if args.probe_out and args.from_ is None:  # the run with where and what it ran: suite_time.py --from-profile
            args.probe_out.write_text(json.dumps({**run, **{k: result[k] for k in ("commit", "where", "date")}}))
        if args.compare:
            earlier = json.loads(args.compare[0].read_text())
            result["before"] = {"commit": earlier.get("commit", "?"), "where": earlier.get("where", "?"),
                                "note": str(args.compare[1])}
            result["compare"] = compare(analyse(earlier), result["profile"], args.unlike)
        if args.slow or args.known:
            ids = collect_slow(where)
            known = json.loads(args.known.read_text()) if args.known else {}
            result["slow"] = {"collected": len(ids), "files": slow_rows(ids, measured_from(args.slow), known)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(table(result))
    if args.write:
        docpage.write(NAME, result, table(result), page=PAGE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
