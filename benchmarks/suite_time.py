"""How long lastcall's own test suite takes: pytest alone, ``-n 2``, on a clean clone, the median of N runs.

Run:  .venv/bin/python benchmarks/suite_time.py [--runs 3] [--select default|not-slow ...] [--tree]
          [--census FILE] [--write [--append]]

The tree's HEAD is cloned (``git clone``; ``--tree`` runs in the working tree instead) and set up as .ci/run
does (``./dev setup``: its own .venv), untimed; each run starts from a clean clone (``git clean -fdx``, the
.venv kept) and runs ``.venv/bin/python -m pytest -n 2 --dist worksteal -q -p no:randomly`` there (``./dev
test``'s scheduling), timing pytest alone.
Beside the wall time it takes the CPU time of everything pytest ran (``RUSAGE_CHILDREN``: every descendant
that was reaped), which a busy machine inflates far less than the wall time.

``--write`` commits the figures: docs/data/suite_time.json and its table in docs/running.md (between the
``suite-time-table`` markers; tests/test_suite_time.py re-renders it from the JSON).  With ``--append`` the
selections of this run replace only their own rows.

``--census FILE`` (one run, no timing table): every Python process the suite starts writes one line of JSON
to FILE when it exits through its atexit hooks (a ``sitecustomize`` put first on PYTHONPATH): its argv,
whether it is a fork of a fork server, whether torch was imported, its CPU time until then and its
children's.  A fork server's children's CPU time (reaped by it) minus what they had used at their atexit is
what their interpreter finalization cost.  ``--census`` prints the totals per kind of process.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import docpage

NAME = "suite-time"
ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "running.md"
SELECTIONS: dict[str, list[str]] = {"default": [], "not-slow": ["-m", "not slow"]}
# ./dev test's scheduling (a worker that runs dry takes the other's pending items)
PYTEST_ARGS = ["-n", "2", "--dist", "worksteal", "-q", "-p", "no:randomly"]
OLD_ARGS = "-n 2 -q -p no:randomly"  # what the runs recorded before PYTEST_ARGS was in the JSON used
TARGET_S = {"default": 240.0, "not-slow": 120.0}  # <= 4 min, <= 2 min
_SUMMARY = re.compile(r"^=*\s*(\d+ \w+.*?) in ([\d.]+)s", re.M)
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")

# Written into a temp dir put first on PYTHONPATH for --census.  Kept to the standard library.
CENSUS_SITE = '''\
import atexit, json, os, resource, sys, time
_LOG = os.environ.get("LASTCALL_CENSUS")
_PID = os.getpid()
def _lastcall_census():
    ru, ch = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    rec = {"pid": os.getpid(), "ppid": os.getppid(), "forked": os.getpid() != _PID, "argv": sys.argv[:6],
           "torch": "torch" in sys.modules, "cpu": ru.ru_utime + ru.ru_stime,
           "children_cpu": ch.ru_utime + ch.ru_stime, "t": time.monotonic()}
    fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(rec) + "\\n").encode())
    finally:
        os.close(fd)
if _LOG:
    atexit.register(_lastcall_census)
'''


def parse_summary(output: str) -> dict[str, Any]:
    """pytest's last summary line: the counts and pytest's own seconds; {} when there is none."""
    found = _SUMMARY.findall(output)
    if not found:
        return {}
    text, secs = found[-1]
    counts = {k.rstrip("s") if k.startswith("error") else k: int(n) for n, k in _COUNT.findall(text)}
    # what failed, from the short test summary (a timing run that fails says which item, for the log)
    failures = [line[:300] for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    return {"counts": counts, "pytest_s": float(secs), **({"failures": failures} if failures else {})}


def clone(tree: Path, into: Path) -> str:
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(tree), str(into)], check=True)
    return subprocess.run(["git", "-C", str(into), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def timed_pytest(cmd: list[str], where: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float,
                                                                            float]:
    """Run ``cmd`` in ``where`` (PYTEST_ADDOPTS left out of ``env``): the process, its wall seconds and the CPU
    seconds of everything it ran (benchmarks/suite_profile.py's probed runs time themselves the same way)."""
    env = {k: v for k, v in env.items() if k != "PYTEST_ADDOPTS"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def one_run(where: Path, select: str, extra_env: Mapping[str, str] | None = None,
            paths: tuple[str, ...] = (), python: Path | None = None,
            extra_args: tuple[str, ...] = ()) -> dict[str, Any]:
    """One pytest run in ``where`` (with ``python``, default this one): wall seconds, CPU seconds of
    everything it ran, its summary.  ``extra_args`` go before the selection (benchmarks/suite_profile.py's
    probe plugin)."""
    cmd = [str(python or sys.executable), "-m", "pytest", *PYTEST_ARGS, *extra_args, *SELECTIONS[select], *paths]
    proc, wall, cpu = timed_pytest(cmd, where, {**os.environ, **(extra_env or {})})
    summary = parse_summary(proc.stdout)
    at = proc.stdout.find("= FAILURES =")
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "rc": proc.returncode, **summary,
            "tail": proc.stdout[-1500:] if proc.returncode not in (0, 1) or not summary
            else proc.stdout[max(at, 0):][:8000] if summary.get("failures") else ""}


def set_up(where: Path) -> None:
    """The clone's own set-up, untimed, as .ci/run's before ``./dev test``: ``./dev setup`` (its .venv) and the
    kvcached sdists fetched into the cache (once a machine: a no-op after)."""
    subprocess.run(["./dev", "setup"], cwd=where, check=True, stdout=subprocess.DEVNULL)
    # kvcached's pinned sdists, as .ci/run fetches them before ./dev test: without them the kvcached-marked
    # tests skip and a record is faster than CI (11 items fewer, about 10 s of test time)
    subprocess.run([".venv/bin/lastcall", "fetch", "kvcached==0.1.5", "kvcached==0.1.6"], cwd=where, check=True,
                   stdout=subprocess.DEVNULL)


def clean(where: Path) -> None:
    """Back to a clean clone between runs, its set-up kept: everything untracked goes but .venv."""
    subprocess.run(["git", "-C", str(where), "clean", "-q", "-fdx", "-e", ".venv"], check=True)


def measure(tree: Path, selects: list[str], runs: int, in_tree: bool) -> dict[str, Any]:
    """``runs`` timed runs per selection; a clean clone (set up once, cleaned before each run) unless
    ``in_tree``."""
    rows: dict[str, Any] = {}
    commit = "working tree"
    tmp = None if in_tree else Path(tempfile.mkdtemp(prefix="lc-suite-"))
    where = tree if tmp is None else tmp / "tree"
    try:
        if tmp is not None:
            commit = clone(tree, where)
            set_up(where)
        for select in selects:
            rows[select] = measure_one(where, select, runs, clean_first=tmp is not None)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return {"date": datetime.date.today().isoformat(), "commit": commit,
            "where": "working tree" if in_tree else "clean clone", "pytest_args": " ".join(PYTEST_ARGS),
            "selections": rows}


def from_profiles(files: list[Path]) -> dict[str, Any]:
    """The timed runs of probed whole-selection runs (benchmarks/suite_profile.py: the same pytest command plus
    its probe plugin, which appends one record per report), one row per selection; one commit for all."""
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    commits, dates, wheres = set(), set(), set()
    for f in files:
        rec = json.loads(f.read_text())
        if not rec.get("whole") or rec.get("select") not in SELECTIONS or "clean clone" not in rec.get("where", ""):
            raise SystemExit(f"{f}: not a probed run of a whole selection on a clean clone "
                             "(suite_profile.py --clone --select default|not-slow --probe-out FILE)")
        commits.add(rec["commit"])
        wheres.add(rec["where"])
        dates.add(rec["date"])
        runs[rec["select"]].append({k: rec[k] for k in ("wall_s", "cpu_s", "rc", "counts")})
    if len(commits) != 1:
        raise SystemExit(f"runs of more than one commit: {sorted(commits)}")
    rows = {sel: {"runs": rs, "median_wall_s": statistics.median(r["wall_s"] for r in rs),
                  "median_cpu_s": statistics.median(r["cpu_s"] for r in rs), "target_s": TARGET_S[sel]}
            for sel, rs in runs.items()}
    return {"date": max(dates), "commit": commits.pop(), "where": " and ".join(sorted(wheres)), "selections": rows}


def measure_one(where: Path, select: str, runs: int, clean_first: bool) -> dict[str, Any]:
    results = []
    for i in range(runs):
        if clean_first:
            clean(where)
        r = one_run(where, select, python=where / ".venv" / "bin" / "python" if clean_first else None)
        print(f"{select} run {i + 1}/{runs}: {r['wall_s']:.0f} s wall, {r['cpu_s']:.0f} s CPU, "
              f"{r.get('counts', {})}", *r.get("failures", ()), sep="\n  " if r.get("failures") else " ",
              flush=True)
        if r.get("tail"):
            print(r["tail"], file=sys.stderr)
        results.append(r)
    return {"runs": [{k: v for k, v in r.items() if k != "tail"} for r in results],
            "median_wall_s": statistics.median(r["wall_s"] for r in results),
            "median_cpu_s": statistics.median(r["cpu_s"] for r in results), "target_s": TARGET_S[select]}


def _mmss(s: float) -> str:
    whole = round(s)  # 419.6 s is 7 min 00 s, not 6 min 60 s
    return f"{whole // 60} min {whole % 60:02d} s" if whole >= 60 else f"{whole} s"


def stamped(row: dict[str, Any], run: Mapping[str, Any]) -> dict[str, Any]:
    """A selection's row kept by --append, with the commit, date and place of the run that measured it (the
    file's own are the newest run's)."""
    return {**row, **{k: row.get(k, run.get(k)) for k in ("commit", "date", "where")}}


def table(result: Mapping[str, Any]) -> str:
    """The markdown table of docs/running.md, from the JSON this script writes."""
    lines = ["| selection | runs (wall) | median wall | median CPU | items | target | met |",
             "|---|---|---|---|---|---|---|"]
    for select, row in result["selections"].items():
        counts = row["runs"][-1].get("counts", {})
        items = ", ".join(f"{n} {k}" for k, n in counts.items())
        flag = "**yes**" if row["median_wall_s"] <= row["target_s"] else "no (missed)"
        lines.append(f"| `{' '.join(SELECTIONS[select]) or '(default)'}` | "
                     f"{' / '.join(_mmss(r['wall_s']) for r in row['runs'])} | {_mmss(row['median_wall_s'])} | "
                     f"{_mmss(row['median_cpu_s'])} | {items} | <= {_mmss(row['target_s'])} | {flag} |")
    lines.append("")
    lines.append(f"In a {result['where']}: `pytest {result.get('pytest_args', OLD_ARGS)}`, pytest alone timed."
                 + (f" {result['note']}" if result.get("note") else ""))
    for select, row in result["selections"].items():  # a row an --append kept from an earlier run says whose
        if row.get("commit", result["commit"]) != result["commit"] or row.get("date", result["date"]) != result["date"]:
            lines.append(f"The `{' '.join(SELECTIONS[select]) or '(default)'}` row is an earlier run's, kept: "
                         f"{row.get('where', result['where'])} of {row['commit']}, {row.get('date', '?')}.")
    return "\n".join([*lines, "", docpage.provenance(result)])


def census(tree: Path, select: str, log: Path, in_tree: bool, paths: tuple[str, ...] = ()) -> dict[str, Any]:
    """One run with every process's exit recorded into ``log``; the totals per kind of process."""
    site = Path(tempfile.mkdtemp(prefix="lc-census-"))
    (site / "sitecustomize.py").write_text(CENSUS_SITE)
    tmp = None if in_tree else Path(tempfile.mkdtemp(prefix="lc-suite-"))
    where = tree if tmp is None else tmp / "tree"
    try:
        if tmp is not None:
            clone(tree, where)
            set_up(where)
        log.unlink(missing_ok=True)
        env = {"LASTCALL_CENSUS": str(log),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
        run = one_run(where, select, env, paths, python=None if tmp is None else where / ".venv" / "bin" / "python")
    finally:
        shutil.rmtree(site, ignore_errors=True)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    recs = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return {"run": {k: v for k, v in run.items() if k != "tail"}, **summarise(recs)}


def kind_of(rec: Mapping[str, Any]) -> str:
    argv = " ".join(rec["argv"])
    if "harness/launch/forkserver" in argv or "harness.launch.forkserver" in argv:
        return "forked child" if rec["forked"] else "fork server"
    if rec["forked"]:
        return "other fork"
    if os.path.basename(rec["argv"][0] if rec["argv"] else "") == "lastcall" or "harness.cli" in argv:
        return "lastcall CLI"
    if "pytest" in argv or "xdist" in argv or argv.startswith("-c"):
        return "pytest process"
    return "other python"


def summarise(recs: list[Mapping[str, Any]]) -> dict[str, Any]:
    kinds: dict[str, dict[str, float]] = defaultdict(lambda: {"n": 0, "cpu_s": 0.0, "with_torch": 0})
    for r in recs:
        k = kinds[kind_of(r)]
        k["n"] += 1
        k["cpu_s"] += r["cpu"]
        k["with_torch"] += bool(r["torch"])
    # A fork server reaps its children: their CPU (with finalization) minus theirs at atexit = finalization.
    servers = {r["pid"]: r for r in recs if kind_of(r) == "fork server"}
    at_exit: dict[int, float] = defaultdict(float)
    for r in recs:
        if kind_of(r) == "forked child" and r["ppid"] in servers:
            at_exit[r["ppid"]] += r["cpu"]
    final = sum(max(0.0, servers[p]["children_cpu"] - c) for p, c in at_exit.items())
    return {"kinds": {k: {"n": int(v["n"]), "cpu_s": round(v["cpu_s"], 1), "with_torch": int(v["with_torch"])}
                      for k, v in sorted(kinds.items())},
            "forked_children_finalization_cpu_s": round(final, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--runs", type=int, default=3, help="runs per selection (default 3; the median is kept)")
    p.add_argument("--select", nargs="+", choices=sorted(SELECTIONS), default=["default", "not-slow"])
    p.add_argument("--tree", action="store_true", help="run in the working tree, not a clean clone")
    p.add_argument("--census", type=Path, metavar="FILE", help="one run recording every process's exit")
    p.add_argument("paths", nargs="*", help="with --census: only these test paths (default: the whole selection)")
    p.add_argument("--write", action="store_true", help="commit the figures to docs/running.md and docs/data/")
    p.add_argument("--append", action="store_true", help="with --write: keep the other selections' rows")
    p.add_argument("--note", default="", help="with --write: a sentence printed under the table (the load, say)")
    p.add_argument("--from-profile", type=Path, nargs="+", metavar="FILE",
                   help="take the runs from benchmarks/suite_profile.py --clone --probe-out files instead of running")
    args = p.parse_args(argv)

    def terminated(*_: object) -> None:  # SIGTERM ends the script through its finally blocks (the clone removed)
        raise SystemExit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, terminated)
    if args.runs < 1:
        p.error(f"--runs {args.runs}: give 1 or more")
    if args.census is not None:
        if args.write:
            p.error("--census measures where the time goes; it writes no table (leave out --write)")
        out = census(ROOT, args.select[0], args.census, args.tree, tuple(args.paths))
        print(json.dumps(out, indent=2))
        return 0
    if args.paths:
        p.error("test paths are for --census only: the timed runs take the whole selection")

    measured = from_profiles(args.from_profile) if args.from_profile else measure(ROOT, args.select, args.runs,
                                                                                      args.tree)
    # the machine, python and command of this run; the date and commit the runs measured carry
    result = {**docpage.measured(__file__, sys.argv[1:] if argv is None else argv), **measured}
    if args.note:
        result["note"] = args.note
    print(table(result))
    if args.write:
        if args.append and docpage.data_path(NAME).exists():
            old = json.loads(docpage.data_path(NAME).read_text())
            kept = {k: stamped(row, old) for k, row in old.get("selections", {}).items()
                    if k not in result["selections"]}
            result["selections"] = {**kept, **result["selections"]}
        docpage.write(NAME, result, table(result), page=PAGE)
        import targets_block

        targets_block.write()  # the README's table of the measured targets
    return 0


if __name__ == "__main__":
    sys.exit(main())
