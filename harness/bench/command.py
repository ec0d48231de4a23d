"""``lastcall bench``: arms in real worker processes, interleaved windows, statistics, a leak check.

:func:`run_bench` starts one ``Cluster(tp=1)`` per arm (an arm is a variant
name or a ``module:attribute`` Variant, every one in the same flavour, see
:mod:`harness.bench.arms`) and measures from this process against each
worker's socket with :func:`harness.bench.interleave.run_interleaved`.  An arm
named by a worker target (``kvcached==0.1.6``, or ``T+tracking-noop``) is served
instead by the target's own listener in a forked child and spoken to in its
codec (:mod:`harness.bench.target_arm`); ``--arm T`` alone runs
``T+tracking-noop`` (the baseline) and ``T``, with the A/A control of ``T``.

The A/A control is a *second cluster of the first arm* (of ``T`` for ``--arm T`` alone), measured as one more
interleaved arm: a separate worker process, as every real arm is, so the floor
includes what differs between two processes of one implementation (placement,
memory layout, a neighbour's load), not only what differs between windows of
one process.  Its ratio, interval and p-value are printed beside each result.

Statistics (:mod:`harness.bench.stats`, ``compare(..., paired=True)``): per op
and arm the median of window medians; against the first arm the ratio, a
bootstrap interval that is paired by round (it resamples *rounds*: an arm's
window and the baseline's of one round drawn together, so the machine's slow and
fast stretches move both medians of a resample alike), and the Mann-Whitney U
test over the two arms' window medians, whose p alone gives the verdict at
``alpha``.  Only the interval uses the pairing: the U test is a rank-sum test of
two samples, blind to which windows ran in one round (Comparison.paired says
the interval's, as ``paired`` in the JSON).

After every window the worker it measured is checked: its fds (by identity:
number, kind, target) and threads must not outnumber those after the previous
window (after the warm-up, for the first).  A transient connection is given a
moment to close (the check re-reads /proc until the count settles, up to
SETTLE_S); growth that stays ends the bench with :class:`LeakFound`.  A
worker that does not exit cleanly at the end, or leaves a path or segment
behind, is listed in ``BenchResult.problems`` (and ``lastcall bench`` exits 1).
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import random
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import provenance
from harness.bench.arms import OPS, Client, check_op, flavoured
from harness.bench.interleave import ORDERS, Arm, Result, Window, format_rows, run_interleaved
from harness.bench.serverproc import ServerProcess, on_cpu, pin_threads, two_cpus
from harness.bench.stats import MIN_SAMPLES, Comparison, compare
from harness.bench.target_arm import expand, new_root, resolve
from harness.bench.workload import WORKLOAD_KEYS, load_workload
from harness.errors import ConfigError, HarnessError
from harness.launch.cluster import Cluster
from harness.launch.spawn import LaunchError
from harness.probes.model import FdEntry
from harness.probes.procs import proc_entry
from harness.timeouts import scaled

__all__ = ["BenchResult", "LeakFound", "run_bench", "format_bench", "render_svg", "bench_main", "DEFAULT_ARMS",
           "WORKLOAD_KEYS", "load_workload"]

DEFAULT_ARMS = ("reference", "harness.bench.arms:TRACKING_NOOP")
CAPACITY = 1 << 30  # each worker's KV address space: 512 pages of PAGE_SIZE
PAGE_SIZE = 2 << 20
DEADLINE_S = 3600.0  # the cluster watchdog: a bench that runs longer is killed as hung
SETTLE_S = 0.25  # how long a grown fd or thread count may take to shrink back before it is a leak
EXIT_OK, EXIT_LEAK = 0, 1


class LeakFound(HarnessError):
    """A worker's fds or threads grew over a window and stayed grown: the bench stops."""


@dataclass(frozen=True)
class ArmInfo:
    label: str  # the name in tables and JSON
    spec: str  # what the user gave
    pid: int  # the worker's
    planted_delay_ns: float | None = None  # a PlantedDelay arm's busy wait as calibrated at import (worker)
    planted_delay_run_ns: float | None = None  # ... and its median as timed during the run


@dataclass
class BenchResult:
    settings: dict[str, Any]
    arms: list[ArmInfo]  # the measured arms, the baseline first
    aa_arm: str | None  # label of the A/A control (second cluster of the baseline), None without one
    result: Result  # every window median, per op and arm
    comparisons: dict[str, dict[str, Comparison]]  # op -> arm -> that arm vs the baseline
    aa: dict[str, Comparison] = field(default_factory=dict)  # op -> A/A control vs the baseline
    leak_checks: int = 0  # windows checked
    seconds: float = 0.0  # measurement wall time (clusters started)
    problems: list[str] = field(default_factory=list)  # a worker that did not close cleanly, or left files

    def as_dict(self) -> dict[str, Any]:
        base = self.result.baseline
        ops: dict[str, Any] = {}
        for op in self.result.ops:
            st = self.result.per_op[op]
            ops[op] = {
                "arms": {a: {"median_us": st.arms[a].median_ns / 1e3,
                             "window_medians_us": [m / 1e3 for m in st.arms[a].window_medians_ns]}
                         for a in self.result.arms},
                "vs_baseline": {a: c.as_dict() for a, c in self.comparisons[op].items()},
                "aa_floor": self.aa[op].as_dict() if op in self.aa else None,
            }
        return {"settings": self.settings, "baseline": base, "aa_arm": self.aa_arm,
                "arms": [vars(a) for a in self.arms], "ops": ops, "leak_checks": self.leak_checks,
                "seconds": self.seconds, "problems": self.problems}


# ----------------------------------------------------------------- leak check
class _LeakCheck:
    """Called after every window: the measured worker's fds and threads must not grow."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.last: dict[str, tuple[frozenset[FdEntry], int]] = {}
        self.checks = 0

    def _read(self, label: str) -> tuple[frozenset[FdEntry], int]:
        entry = proc_entry(self.pids[label])
        if entry is None:
            raise LeakFound(f"the worker of arm {label} (pid {self.pids[label]}) is gone")
        return frozenset(entry.fds), len(entry.threads)

    def baseline(self, label: str) -> None:
        self.last[label] = self._settled(label, None)

    def _settled(self, label: str, ref: tuple[frozenset[FdEntry], int] | None) -> tuple[frozenset[FdEntry], int]:
        now = self._read(label)
        end = time.monotonic() + SETTLE_S
        while time.monotonic() < end:  # re-read /proc: a just-closed client's socket closes within it
            if ref is not None and len(now[0]) <= len(ref[0]) and now[1] <= ref[1]:
                break
            prev, now = now, self._read(label)
            if ref is None and now == prev:
                break
        return now

    def __call__(self, w: Window) -> None:
        before = self.last[w.arm]
        now = self._settled(w.arm, before)
        self.last[w.arm] = now
        if w.warmup:
            return
        self.checks += 1
        fds, threads = now
        if len(fds) > len(before[0]) or threads > before[1]:
            new = sorted(f"{e.fd}->{e.target}" for e in fds - before[0])
            raise LeakFound(
                f"leak: the worker of arm {w.arm} (pid {self.pids[w.arm]}) went from {len(before[0])} fds and "
                f"{before[1]} threads to {len(fds)} fds and {threads} threads over window {w.index} "
                f"(op {w.op}, round {w.round}) and stayed there for {SETTLE_S}s; new fds: "
                f"{', '.join(new[:8]) or 'none'}{' ...' if len(new) > 8 else ''}. "
                f"A benchmark must not hide a leak: fix the arm, then rerun")


# ------------------------------------------------------------------- progress
class _Progress:
    def __init__(self, total: int, rounds: int, enabled: bool) -> None:
        self.total, self.rounds, self.done = total, rounds, 0
        self.enabled, self.tty = enabled, sys.stderr.isatty()
        self.t0 = self.last_line = time.monotonic()

    def __call__(self, w: Window) -> None:
        self.done += 1
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            bar = "#" * (30 * self.done // self.total)
            sys.stderr.write(f"\r[{bar:<30}] {self.done}/{self.total} windows, round {w.round + 1}/{self.rounds}"
                             f"{' (warm-up)' if w.warmup else ''}, {now - self.t0:.0f}s ")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif self.done == self.total or (self.done % (self.total // self.rounds) == 0 and now - self.last_line >= 1):
            self.last_line = now  # one line per round, at most one a second
            print(f"bench: round {w.round + 1}/{self.rounds} done, {self.done}/{self.total} windows, "
                  f"{now - self.t0:.1f}s", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- run
def arm_variant(spec: str) -> Any:
    """The worker variant an arm names, looked up as every target name is (harness.targets.load_target).

    Error handling: ConfigError, one line: an unknown name (with the nearest), a module:attribute that
    does not import, or a target that is not a worker variant (a handshake variant, kvcached, a swap).
    """
    from harness.reference.variants import Variant
    from harness.targets import load_target

    if "@" in spec:
        raise ConfigError(f"arm {spec!r}: a bench arm is a variant name or module:attribute naming a Variant, "
                          f"not a listener swap; give the swapped listener's module:attribute Variant")
    target = load_target(spec)
    if not isinstance(target, Variant):
        raise ConfigError(f"arm {spec!r} is a target without the reference worker ({type(target).__name__}); a "
                          f"bench arm is the reference, one of its planted-bug variants or module:attribute naming "
                          f"a harness.reference.variants.Variant")
    return target


def _leave(label: str, sp: ServerProcess, problems: list[str]) -> None:
    """Stop a target arm's child; a stop that failed or left files is a problem of the run, not a traceback."""
    try:
        sp.__exit__(None, None, None)
    except RuntimeError as exc:
        problems.append(f"{label}: {exc}")


def _remove_root(label: str, root: str, problems: list[str]) -> None:
    left = sorted(str(p) for p in Path(root).rglob("*"))
    if left:
        problems.append(f"{label}: leftovers {left}")
    shutil.rmtree(root, ignore_errors=True)


def _labels(specs: list[str]) -> list[str]:
    labels = [s.rpartition(":")[2] if ":" in s else s for s in specs]
    return labels if len(set(labels)) == len(labels) else list(specs)


def _info(label: str, spec: str, c: Cluster) -> ArmInfo:
    cal, run = c.rec.events("planted_delay_calibrated"), c.rec.events("planted_delay_measured")
    return ArmInfo(label, spec, c.worker(0).pid, float(cal[0].data["measured_ns"]) if cal else None,
                   float(run[0].data["median_ns"]) if run else None)


def pin_plan(enabled: bool) -> dict[str, int]:
    """Where a pinned bench runs: its client on the first CPU it may use, every arm on the second; {} where it
    may use fewer than two, or ``enabled`` is False (``--no-pin``)."""
    two = two_cpus(enabled)
    return {"client": two[0], "arms": two[1]} if two else {}


def run_bench(arms: list[str], ops: list[str], windows: int = 15, requests: int = 300, warmup: int = 1,
              order: str = "abba", keep_alive: bool = False, aa: bool = True, json_path: str | None = None,
              svg_path: str | None = None, progress: bool = True, *, alpha: float = 0.01,
              confidence: float = 0.95, seed: int | None = None, backend: str = "noop",
              record: bool = False, pin: bool = True, command: str | None = None) -> BenchResult:
    """Measure ``ops`` on every arm in its own worker process; compare each arm with the first.

    Returns: the window medians, per op each arm's comparison with the first
        (ratio, bootstrap interval, Mann-Whitney p, verdict at ``alpha``) and the
        A/A control's (when ``aa``); also written as JSON / SVG when paths are given, the JSON with the
        date, commit, machine and Python of the run and ``command``, the command line that asked for it.
    Placement: pinned (``pin``, where this process may use two CPUs or more), the requests are sent from the
        first CPU and every arm's listener process runs on the second, so each request is the same cross-CPU
        round trip in every window of every arm; unpinned, the scheduler's choice (the listener on the client's
        CPU or the other) changes from window to window and moves the medians by a factor of about 3 on a
        2-CPU machine (benchmarks/ipc_roundtrip.py measured it).
    Resource handling: every cluster is closed (and its leftovers removed)
        before this returns or raises.
    Error handling: ConfigError for a bad argument (nothing started);
        LeakFound when a worker's fds or threads grow; LaunchError when a
        worker does not start.
    """
    if not arms or len(set(arms)) != len(arms):
        raise ConfigError(f"give distinct arms, got {arms}; the A/A control (--no-aa to drop it) compares "
                          f"an arm with itself")
    if len(arms) < 2 and not aa:
        raise ConfigError("one arm and no A/A control leaves nothing to compare: add an arm or drop --no-aa")
    if windows < MIN_SAMPLES or requests < 1 or warmup < 0:
        raise ConfigError(f"need windows >= {MIN_SAMPLES}, requests >= 1, warmup >= 0; "
                          f"got {windows}, {requests}, {warmup}")
    if not (0 < alpha < 1 and 0 < confidence < 1):
        raise ConfigError(f"alpha and confidence must be between 0 and 1, got {alpha!r} and {confidence!r}")
    if order not in ORDERS:
        raise ConfigError(f"unknown order {order!r}; known: {', '.join(ORDERS)}")
    ops = [check_op(op) for op in dict.fromkeys(ops or OPS)]
    given = list(arms)
    arms, aa_of = expand(given)  # --arm T alone (a worker target): T+tracking-noop, then T with its A/A
    targets = {spec: resolve(spec) for spec in arms}  # a bad name fails here, before anything starts
    for spec, ta in targets.items():
        if ta is None:
            arm_variant(spec)
        elif keep_alive:
            raise ConfigError(f"arm {spec!r}: its listener serves one request per connection; drop --keep-alive")
        elif backend != "noop" or record:
            raise ConfigError(f"arm {spec!r}: a target's arm runs with its backend stubbed and no events; "
                              f"drop --backend {backend}")
    variants = [flavoured(spec, backend, record) if targets[spec] is None else "" for spec in arms]
    labels = _labels(arms)
    seed = random.randrange(1 << 32) if seed is None else seed
    placement = pin_plan(pin)
    settings = {"arms": arms, "ops": ops, "windows": windows, "requests": requests, "warmup": warmup,
                "order": order, "keep_alive": keep_alive, "aa": aa, "alpha": alpha, "confidence": confidence,
                "seed": seed, "backend": backend, "record": record, "given_arms": given, "aa_of": arms[aa_of],
                "placement": placement}
    arm_cpus = frozenset({placement["arms"]}) if placement else None
    plan = list(zip(labels, variants, arms, strict=True))
    aa_label = f"{labels[aa_of]} (A/A)" if aa else None
    if aa_label is not None:
        plan.append((aa_label, variants[aa_of], arms[aa_of]))
    clusters: dict[str, Cluster] = {}
    served: dict[str, ServerProcess] = {}
    problems: list[str] = []
    with contextlib.ExitStack() as stack:
        started: dict[str, Client] = {}
        # target arms first: each is a fork of this process, made before the clusters start their threads
        for label, variant, spec in sorted(plan, key=lambda p: targets[p[2]] is None):
            ta = targets[spec]
            if ta is None:
                c = clusters[label] = Cluster(tp=1, variant=variant, capacity=CAPACITY, deadline=DEADLINE_S)
                c.start()
                stack.callback(c.close)
                if placement:
                    pin_threads(c.worker(0).pid, placement["arms"])
                path, codec = c.worker(0).path, None
            else:
                root = new_root()
                stack.callback(_remove_root, label, root, problems)
                sp = served[label] = ServerProcess(ta.factory(root), name=f"arm {label}", timeout=scaled(60.0),
                                                   cpus=arm_cpus)
                try:
                    sp.__enter__()
                except RuntimeError as exc:  # its child said why (an import, a bind): one line, exit 1
                    raise LaunchError(str(exc)) from None
                stack.callback(_leave, label, sp, problems)
                path, codec = sp.path, ta.codec
            started[label] = cl = Client(path, pages=CAPACITY // PAGE_SIZE, page_size=PAGE_SIZE,
                                         keep_alive=keep_alive, codec=codec)
            stack.callback(cl.close)
        clients = {label: started[label] for label, _v, _s in plan}
        pids = {label: c.worker(0).pid for label, c in clusters.items()} | {k: v.pid for k, v in served.items()}
        leaks = _LeakCheck({label: pids[label] for label in clients})
        for label, cl in clients.items():
            cl.created()  # opens the kept-alive connection before the baseline
            leaks.baseline(label)
        bench_arms = [Arm(label, {op: cl.op(op) for op in ops}) for label, cl in clients.items()]
        rounds = warmup + windows
        bar = _Progress(rounds * len(ops) * len(bench_arms), rounds, progress)

        def after_window(w: Window, _median: float) -> None:
            leaks(w)
            bar(w)

        t0 = time.monotonic()
        with on_cpu(placement.get("client")):
            res = run_interleaved(bench_arms, ops=ops, windows=windows, requests=requests, warmup=warmup,
                                  baseline=labels[0], progress=after_window, order=order, seed=seed)
        seconds = time.monotonic() - t0
    infos = [_info(label, spec, clusters[label]) if label in clusters else ArmInfo(label, spec, served[label].pid)
             for label, _variant, spec in plan]  # closed: every event is in
    problems += [f"{label}: {c.outcome.status}, exits {c.outcome.exits}, leftovers {c.outcome.leftovers} "
                 f"{c.outcome.detail}".rstrip() for label, c in clusters.items()
                 if c.outcome.status != "ok" or c.outcome.leftovers or any(c.outcome.exits.values())]

    def vs(op: str, label: str, base: str = labels[0]) -> Comparison:
        st = res.per_op[op]
        return compare(st.arms[base].window_medians_ns, st.arms[label].window_medians_ns, alpha=alpha,
                       confidence=confidence, seed=seed, paired=True)

    out = BenchResult(settings, [i for i in infos if i.label != aa_label], aa_label, res,
                      {op: {label: vs(op, label) for label in labels[1:]} for op in ops},
                      {op: vs(op, aa_label, labels[aa_of]) for op in ops} if aa_label else {}, leaks.checks,
                      seconds, problems)
    if json_path:
        # its provenance beside it; the command only where the caller says it (a call from code has none)
        made = provenance.record(command or "", Path(__file__).resolve().parents[2])
        made = {k: v for k, v in made.items() if v or k != "command"}
        Path(json_path).write_text(json.dumps({**out.as_dict(), **made}, indent=2) + "\n")
    if svg_path:
        Path(svg_path).write_text(render_svg(out))
    return out


# ------------------------------------------------------------------ output
def _ci(c: Comparison) -> str:
    return f"[{c.ci[0]:.3f}, {c.ci[1]:.3f}]"


def format_bench(r: BenchResult) -> str:
    """The terminal table: per op and arm, the medians, the ratio to the baseline, its interval, p, verdict."""
    s, base = r.settings, r.result.baseline
    conf = f"{s['confidence'] * 100:g}%"
    headers = ["op", "arm", f"{base} (us)", "arm (us)", "ratio", f"{conf} CI", "p", f"verdict (alpha {s['alpha']})"]
    if r.aa_arm:
        headers.append(f"A/A floor [{conf} CI], p")
    rows: list[list[str]] = []
    for op in r.result.ops:
        st = r.result.per_op[op]
        others = list(r.comparisons[op]) or [base]
        for label in others:
            c = r.comparisons[op].get(label)
            row = [op, label, f"{st.arms[base].median_ns / 1e3:.1f}", f"{st.arms[label].median_ns / 1e3:.1f}",
                   *([f"{c.ratio:.3f}", _ci(c), f"{c.p:.2g}", c.verdict] if c else ["", "", "", ""])]
            if r.aa_arm:
                a = r.aa[op]
                row.append(f"{a.ratio:.3f} {_ci(a)}, p {a.p:.2g}{'' if a.verdict == 'no difference' else ' !'}")
            rows.append(row)
    conn = "one kept-alive connection" if s["keep_alive"] else "a fresh connection per request"
    where = s.get("placement") or {}
    conn += (f", requests sent from CPU {where['client']} to every arm on CPU {where['arms']}" if where
             else ", unpinned")
    head = (f"{s['windows']} windows x {s['requests']} requests per op and arm, {s['warmup']} warm-up round(s), "
            f"order {s['order']} (seed {s['seed']}), {conn}, backend {s['backend']}; median of window medians, "
            f"interval resamples rounds, Mann-Whitney U over window medians; {r.leak_checks} leak checks passed; "
            f"{r.seconds:.1f}s")
    notes = [f"planted delay in {a.label}: {a.planted_delay_ns / 1e3:.2f} us per request as calibrated in the "
             f"worker, {(a.planted_delay_run_ns or 0) / 1e3:.2f} us median as timed in the run"
             for a in r.arms if a.planted_delay_ns is not None]
    if any(not c.decidable for cs in r.comparisons.values() for c in cs.values()):
        notes.append(f"too few windows: p can never reach alpha {s['alpha']} (add --windows)")
    if r.aa_arm and any(a.verdict != "no difference" for a in r.aa.values()):
        notes.append("! the A/A control differs from itself: a verdict on this run is no better than that floor")
    notes += [f"! not closed cleanly: {p}" for p in r.problems]
    return "\n".join([head, format_rows(headers, rows), *notes])


_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def _panel(op: str, series: dict[str, list[float]], top: int, width: int, height: int) -> list[str]:
    """One op's panel: a line and dots per arm, window medians (us) against the measured round."""
    lo = min(min(v) for v in series.values())
    hi = max(max(v) for v in series.values())
    hi = hi if hi > lo else lo + 1.0
    n = max(len(v) for v in series.values())
    x0, x1, y0, y1 = 60, width - 20, top + 30, top + height - 30

    def xy(j: int, v: float) -> tuple[float, float]:
        return x0 + (x1 - x0) * (j / (n - 1) if n > 1 else 0.5), y1 - (y1 - y0) * (v - lo) / (hi - lo)

    out = [f'<text x="{x0}" y="{top + 18}" font-weight="bold">{html.escape(op)}: window medians (us) '
           f'by measured round</text>',
           f'<polyline points="{x0},{y0} {x0},{y1} {x1},{y1}" fill="none" stroke="#888"/>',
           f'<text x="{x0 - 6}" y="{y0 + 4}" text-anchor="end">{hi:.1f}</text>'
           f'<text x="{x0 - 6}" y="{y1 + 4}" text-anchor="end">{lo:.1f}</text>'
           f'<text x="{x0}" y="{y1 + 16}">1</text><text x="{x1}" y="{y1 + 16}" text-anchor="end">{n}</text>']
    for i, values in enumerate(series.values()):
        colour = _COLOURS[i % len(_COLOURS)]
        pts = [xy(j, v) for j, v in enumerate(values)]
        out.append(f'<polyline points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in pts)}" fill="none" '
                   f'stroke="{colour}" stroke-width="1" opacity="0.7"/>')
        if len(pts) <= 200:
            out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{colour}"/>' for x, y in pts]
    return out


def render_svg(r: BenchResult, width: int = 720, panel: int = 220) -> str:
    """A hand-written SVG: per op, every arm's window medians (us) in run order, one line per arm."""
    arms = r.result.arms
    legend = 20 * len(arms) + 6
    height = legend + panel * len(r.result.ops) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">', f'<rect width="{width}" height="{height}" fill="white"/>']
    for i, arm in enumerate(arms):
        out.append(f'<rect x="60" y="{6 + 20 * i}" width="12" height="12" fill="{_COLOURS[i % len(_COLOURS)]}"/>'
                   f'<text x="78" y="{16 + 20 * i}">{html.escape(arm)}</text>')
    for k, op in enumerate(r.result.ops):
        st = r.result.per_op[op]
        series = {a: [m / 1e3 for m in st.arms[a].window_medians_ns] for a in arms}
        out += _panel(op, series, legend + k * panel, width, panel)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def bench_main(args: argparse.Namespace) -> int:
    """``lastcall bench``: run, print the table; 1 when a leak stopped the bench or a worker did not close cleanly."""
    if getattr(args, "workload", None):
        w = load_workload(args.workload)
        args.op = args.op or w["ops"]
        args.arm = args.arm or w.get("arms", [])
        args.windows = w.get("windows", args.windows)
        args.requests = w.get("requests", args.requests)
        args.warmup = w.get("warmup", args.warmup)
    try:
        r = run_bench(args.arm or list(DEFAULT_ARMS), args.op or list(OPS), args.windows, args.requests,
                      args.warmup, args.order, args.keep_alive, not args.no_aa, args.json, args.svg,
                      progress=True, alpha=args.alpha, seed=args.seed, backend=args.backend,
                      pin=not getattr(args, "no_pin", False), command=shlex.join(["lastcall", *sys.argv[1:]]))
    except LeakFound as exc:
        print(f"lastcall bench: {exc}", file=sys.stderr)
        return EXIT_LEAK
    print(format_bench(r))
    return EXIT_LEAK if r.problems else EXIT_OK

