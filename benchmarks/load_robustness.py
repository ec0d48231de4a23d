"""Does a verdict move with the machine's load?  The scenario library, R times under each kind of neighbour load,
every item's outcome read from a JUnit file; a table of every item that ever failed (or was skipped as too slow),
with its rate, per kind.

Run:  ./dev load-check [--kinds none cpu2 ...] [--repeats 5] [-k EXPR] [--write]

Each repeat is one ``python -m pytest scenarios/ -n 2 --dist worksteal -q -p no:randomly -p no:cacheprovider``
in the working tree (``cold``: in a fresh clone of HEAD), started once the load's neighbours have said they are
running.  The kinds of load:

* ``none``; ``cpu2``, ``cpu4``: 2 or 4 busy loops;
* ``io``: a writer that rewrites and fsyncs a 64 MiB file, and a reader that evicts the page cache of the venv's
  site-packages files (posix_fadvise DONTNEED) and reads them back;
* ``memory``: a process that touches half of MemAvailable under its own RLIMIT_AS and keeps touching it;
* ``forks``: a fork storm, /bin/true spawned and reaped 4 at a time;
* ``mixed``: cpu2, io and forks together;
* ``cold``: the library's first run in a fresh ``git clone --local`` of HEAD, no bytecode cached (an empty
  PYTHONPYCACHEPREFIX) and the page cache of the clone and of site-packages evicted.

The loads are benchmarks/loads.py's; none of their processes outlives a load, also on ^C or SIGTERM.
``--write`` commits docs/data/load_robustness.json and the table in
docs/load-robustness.md between its markers; tests/test_load_robustness.py re-renders the table from the JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import docpage
from loads import CI, KINDS, STOP_S, Load, die_with_parent, group_alive, group_members, load

from harness.checkers.modes import HOST_TOO_SLOW

ROOT = docpage.ROOT
NAME = "load-robustness"
PAGE = ROOT / "docs" / "load-robustness.md"
TARGET_REPEATS = 5
PYTEST_ARGS = ["scenarios/", "-n", "2", "--dist", "worksteal", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
RUN_LIMIT_S = 3600.0  # one repeat of the library; a hung run is stopped and counted as broken


# --- one repeat, and its JUnit file -----------------------------------------------------------------------------

def node_id(classname: str, name: str) -> str:
    """pytest's node id from a JUnit testcase: a scenario file's classname is its path with dots for slashes
    (``scenarios.x-y.yaml``), and the library's files sit directly in scenarios/."""
    if classname.endswith((".yaml", ".yml")):
        head, _, rest = classname.partition(".")
        return f"{head}/{rest}::{name}"
    return f"{classname}::{name}" if classname else name


DETAIL_CHARS = 6000  # of a failure's text, printed under its item: a CI log is all a failed gate leaves
_WHY = re.compile(r"(broken|step failed): |[A-Z]+ [a-z_]+: ")  # a scenario failure's line that says what failed


def first_line(text: str, detail: str = "") -> str:
    """A message's first line and, for a scenario's failure, the first line of its text that names what failed
    (its first line only says the outcome and the run): ``... outcome ok, 3.12s, run X; VIOLATED reads_cancelled:
    ...``."""
    head = next((line.strip() for line in text.splitlines() if line.strip()), "")
    why = next((line.strip() for line in detail.splitlines() if _WHY.match(line.strip())), "")
    return (f"{head}; {why}" if why and why not in head else head)[:300]


def parse_junit(path: Path) -> list[dict[str, Any]]:
    """Every item of a JUnit file: its node id, outcome (passed, failed, too_slow or skipped), whether it runs a
    planted bug, and for a failure or skip the first line of its message."""
    items = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        variant = props.get("lastcall_variant")
        bad = [c for c in case if c.tag in ("failure", "error")]
        skip = case.find("skipped")
        if bad:
            outcome, why = "failed", bad[0].get("message") or bad[0].text or ""
        elif skip is not None:
            why = skip.get("message") or skip.text or ""
            outcome = "too_slow" if HOST_TOO_SLOW in why else "skipped"
        else:
            outcome, why = "passed", ""
        catches = variant not in (None, "reference") if variant is not None else "-catches-" in name
        text = (bad[0].text or "") if bad else ""
        items.append({"nodeid": node_id(case.get("classname", ""), name), "outcome": outcome,
                      "catches": catches, **({"message": first_line(why, text)} if why else {}),
                      **({"detail": (text or why)[:DETAIL_CHARS]} if bad else {})})
    return items


def run_once(where: Load, junit: Path, reports: Path, k: str | None) -> dict[str, Any]:
    """One repeat of the library in ``where``: its wall seconds, exit code, items; a run that did not finish
    (no JUnit file, an exit code other than 0 or 1, a neighbour gone) says why under ``broken``."""
    cmd = [sys.executable, "-m", "pytest", *PYTEST_ARGS, f"--junitxml={junit}", f"--lastcall-reports={reports}",
           *(["-k", k] if k else [])]
    env = {key: v for key, v in {**os.environ, **where.env}.items() if key != "PYTEST_ADDOPTS"}
    out = junit.with_suffix(".log")
    broken, left = [], []
    t0 = time.monotonic()
    with open(out, "wb") as log:
        # its own session, stopped as a group: ^C reaches this script, which stops the run and then the load; a
        # SIGINT from the kernel should this script be killed outright (pytest tears its items down on SIGINT)
        proc = subprocess.Popen(cmd, cwd=where.cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=lambda: die_with_parent(signal.SIGINT))
        try:
            proc.wait(RUN_LIMIT_S)
        except subprocess.TimeoutExpired:
            broken.append(f"still running after {RUN_LIMIT_S:.0f} s")
        finally:
            left = stop_group(proc)
    wall = round(time.monotonic() - t0, 1)
    if proc.returncode not in (0, 1):
        broken.append(f"pytest exit {proc.returncode}")
    if dead := where.dead():
        broken.append("neighbour gone: " + ", ".join(dead))
    if not junit.exists():
        broken.append("no JUnit file")
    items = parse_junit(junit) if not broken else []
    tail = out.read_text(errors="replace")[-3000:]
    return {"wall_s": wall, "rc": proc.returncode, "items": items, **({"left": left} if left else {}),
            **({"broken": broken, "tail": tail} if broken else {})}


def stop_group(proc: subprocess.Popen[bytes]) -> list[int]:
    """End a run's process group: SIGINT first (pytest tears its items down), then SIGKILL.  The processes of it
    still running once pytest had exited (a zombie left to pid 1 is not one: nothing here can reap it)."""
    left = [pid for pid, state in group_members(proc.pid) if state != "Z"] if proc.poll() is not None else []
    for sig, grace in ((signal.SIGINT, 30.0), (signal.SIGKILL, STOP_S)):
        if proc.poll() is not None and not group_alive(proc.pid, zombies=False):
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
        deadline = time.monotonic() + grace
        while group_alive(proc.pid, zombies=False) and time.monotonic() < deadline:
            time.sleep(0.1)
    return left


# --- the figures ------------------------------------------------------------------------------------------------

def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), each term from logs (n of thousands overflows the plain products)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    lp, lq = math.log(p), math.log1p(-p)
    return min(1.0, sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp
                                 + (n - i) * lq) for i in range(k + 1)))


def upper_bound(k: int, n: int, confidence: float = 0.95) -> float:
    """The exact (Clopper-Pearson) one-sided upper confidence bound on a rate seen k times in n: the p at which
    k or fewer would be seen with probability 1 - confidence.  With k = 0 it is 1 - (1 - confidence)^(1/n), about
    3/n (the rule of three).  By bisection on the binomial CDF: scipy's beta quantile would do it in one call, but
    scipy is not among lastcall's dependencies and this one figure does not warrant adding it."""
    if n <= 0:
        return 1.0
    if k >= n:
        return 1.0
    alpha, lo, hi = 1.0 - confidence, k / n, 1.0
    for _ in range(100):  # the CDF falls as p rises; 100 halvings are below a float's resolution
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if binom_cdf(k, n, mid) > alpha else (lo, mid)
    return hi


def tally(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind: repeats, wall seconds, judged item runs (passed or failed), failures (of reference and of catches
    items), too-slow and other skips, broken runs; per item that ever failed or was too slow: the same per kind."""
    kinds: dict[str, dict[str, Any]] = {}
    items: dict[str, dict[str, dict[str, Any]]] = {}
    for run in runs:
        row = kinds.setdefault(run["kind"], {"repeats": 0, "wall_s": [], "item_runs": 0, "failures": 0,
                                             "reference_failures": 0, "catch_failures": 0, "too_slow": 0,
                                             "skipped": 0, "broken": []})
        row["repeats"] += 1
        row["wall_s"].append(run["wall_s"])
        if run.get("broken"):
            row["broken"].append(f"repeat {run['repeat']}: {'; '.join(run['broken'])}")
            continue
        for it in run["items"]:
            outcome = it["outcome"]
            row["item_runs"] += outcome in ("passed", "failed")
            row["too_slow"] += outcome == "too_slow"
            row["skipped"] += outcome == "skipped"
            cell = items.setdefault(it["nodeid"], {}).setdefault(run["kind"], {"runs": 0, "failures": 0,
                                                                               "too_slow": 0, "first": "",
                                                                               "too_slow_first": ""})
            cell["runs"] += outcome in ("passed", "failed")
            cell["too_slow"] += outcome == "too_slow"
            if outcome == "too_slow":
                cell["too_slow_first"] = cell["too_slow_first"] or it.get("message", "")
            if outcome == "failed":
                row["failures"] += 1
                row["catch_failures" if it["catches"] else "reference_failures"] += 1
                cell["failures"] += 1
                cell["first"] = cell["first"] or it.get("message", "")
    flagged = {nodeid: per for nodeid, per in sorted(items.items())
               if any(c["failures"] or c["too_slow"] for c in per.values())}
    return {"kinds": kinds, "items": flagged}


def _mmss(s: float) -> str:
    whole = round(s)
    return f"{whole // 60} min {whole % 60:02d} s" if whole >= 60 else f"{whole} s"


def _rate(k: int, n: int) -> str:
    return "-" if n == 0 else f"{k / n:.4f}"


def met(row: Mapping[str, Any]) -> bool:
    return row["repeats"] >= TARGET_REPEATS and row["failures"] == 0 and not row["broken"]


def table(result: Mapping[str, Any]) -> str:
    """The markdown of docs/load-robustness.md, from the JSON this script writes."""
    kinds, items = result["kinds"], result["items"]
    lines = ["| load | repeats | wall per repeat, median (range) | item runs | failures (reference / catches) | "
             "too slow | failure rate | 95 % upper bound | target met |", "|---|---|---|---|---|---|---|---|---|"]
    for kind in [k for k in KINDS if k in kinds] + sorted(set(kinds) - set(KINDS)):
        row = kinds[kind]
        walls = row["wall_s"]
        wall = f"{_mmss(statistics.median(walls))} ({_mmss(min(walls))} to {_mmss(max(walls))})" if walls else "-"
        bound = "-" if row["item_runs"] == 0 else f"{upper_bound(row['failures'], row['item_runs']):.4f}"
        lines.append(f"| `{kind}` | {row['repeats']} | {wall} | {row['item_runs']} | {row['failures']} "
                     f"({row['reference_failures']} / {row['catch_failures']}) | {row['too_slow']} | "
                     f"{_rate(row['failures'], row['item_runs'])} | {bound} | {'yes' if met(row) else 'no'} |")
    lines += ["", f"Target: R = {TARGET_REPEATS} under each kind, no reference item fails, every catches item "
              "caught (0 failures in every row). A too-slow skip (`not judged here: host too slow`) is no verdict: "
              "counted apart, not as a run, and listed below."]
    missing = [k for k in KINDS if k not in kinds]
    if missing:
        lines.append(f"Not measured: {', '.join(f'`{k}`' for k in missing)}.")
    for kind in kinds:
        for b in kinds[kind]["broken"]:
            lines.append(f"`{kind}` {b} (not counted).")
    lines.append("")
    if items:
        lines += ["| item | load | failures / runs | too slow | first line of the first failure (else of the skip) |",
                  "|---|---|---|---|---|"]
        for nodeid, per in items.items():
            for kind, c in per.items():
                if c["failures"] or c["too_slow"]:
                    first = (c["first"] or c.get("too_slow_first", "")).replace("|", "\\|")
                    lines.append(f"| `{nodeid}` | `{kind}` | {c['failures']} / {c['runs']} | {c['too_slow']} | "
                                 f"{first} |")
    else:
        lines.append("No item failed or was skipped as too slow under any load.")
    lines += ["", f"Each repeat `python -m pytest {' '.join(result['pytest_args'])}`"
              + (f" `-k {shlex.quote(result['k'])}`" if result.get("k") else "")
              + (" (`cold`: in a clone of the commit measured)" if "cold" in kinds else "") + ".",
              "", docpage.provenance(result)]
    return "\n".join(lines)


def measure(kinds: list[str], repeats: int, k: str | None, argv: list[str]) -> dict[str, Any]:
    """Every kind once per repeat, kinds in turn (a drift of the machine over the hours is spread over them)."""
    reports = ROOT / "reports" / "load-robustness"
    shutil.rmtree(reports, ignore_errors=True)  # this script's own reports of an earlier run
    runs = []
    with tempfile.TemporaryDirectory(prefix="load-robustness-junit-") as tmp:
        for r in range(1, repeats + 1):
            for kind in kinds:
                junit = Path(tmp) / f"{kind}-{r}.xml"
                with load(kind) as where:
                    run = run_once(where, junit, reports / f"{kind}-{r}", k)
                run.update(kind=kind, repeat=r)
                runs.append(run)
                counts = {o: sum(i["outcome"] == o for i in run["items"]) for o in
                          ("passed", "failed", "too_slow", "skipped")}
                print(f"{kind} repeat {r}/{repeats}: {run['wall_s']:.0f} s, {counts}", flush=True)
                for it in run["items"]:
                    if it["outcome"] in ("failed", "too_slow"):
                        print(f"  {it['outcome']}: {it['nodeid']}: {it.get('message', '')}", flush=True)
                        if it.get("detail"):
                            print(textwrap.indent(it["detail"], "    | "), flush=True)
                if run.get("left"):
                    print(f"  processes of the run still there after pytest exited (killed): {run['left']}",
                          flush=True)
                if run.get("broken"):
                    print(f"  broken: {'; '.join(run['broken'])}\n{run['tail']}", file=sys.stderr, flush=True)
    return {**docpage.measured(__file__, argv), "pytest_args": PYTEST_ARGS, "k": k, "repeats": repeats,
            "runs": [{key: run[key] for key in ("kind", "repeat", "wall_s", "rc", "broken", "left") if key in run}
                     for run in runs], **tally(runs)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description="Does a verdict move with the machine's load? The scenario library, R "
                                "times under each kind of neighbour load; every item that ever failed, per kind.")
    p.add_argument("--kinds", nargs="+", choices=(*KINDS, CI), default=list(KINDS), metavar="KIND",
                   help=f"the loads: {', '.join(KINDS)} (default: all), or {CI} (CI's one pass: a cold clone's "
                   "first run with the mixed load beside it)")
    p.add_argument("--repeats", type=int, default=TARGET_REPEATS, help=f"runs per load (default {TARGET_REPEATS})")
    p.add_argument("-k", metavar="EXPR", help="passed to pytest: only the items it selects")
    p.add_argument("--write", action="store_true", help="commit docs/data/load_robustness.json and the table")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats {args.repeats}: give 1 or more")

    def terminated(*_: object) -> None:  # SIGTERM ends the script through its finally blocks, as ^C does
        raise SystemExit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, terminated)
    try:
        result = measure(list(dict.fromkeys(args.kinds)), args.repeats, args.k, argv)
    except KeyboardInterrupt:
        print("load-check: interrupted; the run and its load were stopped", file=sys.stderr)
        return 130
    print(table(result))
    if args.write:
        docpage.write(NAME, result, table(result), page=PAGE)
    return verdict(result)


def verdict(result: dict[str, Any]) -> int:
    """The exit status a gate reads: 1 when an item failed (a reference item, or a catch missed) or a run was
    broken, else 0; an item skipped as "host too slow" is neither."""
    kinds = result.get("kinds", {}).values()
    return 1 if any(row["failures"] or row["broken"] for row in kinds) else 0


if __name__ == "__main__":
    sys.exit(main())
