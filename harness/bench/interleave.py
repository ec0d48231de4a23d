"""Interleaved-window A/B(/C...) latency measurement.

Two or more *arms* (implementations under comparison) each serve the same named
*ops*.  The run is cut into *windows*: one window is ``requests`` timed calls of
one op on one arm, each timed alone with :func:`time.perf_counter_ns`.  Windows
come in *rounds*; each round runs every op once on every arm, the arms in
forward order on one round and in reversed order on the next (``A B | B A | A B
...``, the ABBA pattern), so slow drift of the machine (thermal, a neighbour's
load) lands on every arm alike.  The first ``warmup`` rounds are run and thrown
away.

The figure per op and arm is the median of the window medians; the comparison
is that figure's ratio to a baseline arm.  The window medians themselves are
kept in the result (:class:`ArmStats`), so that an interval or a rank test can
be computed from them later without re-running anything.

The statistics (:func:`median_of_medians`, :func:`ratio`, :func:`summarize`)
and the order (:func:`round_order`, :func:`window_order`, :func:`schedule`)
are pure functions, separate from the timing loop (:func:`run_interleaved`).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "Call",
    "Step",
    "Request",
    "Arm",
    "Window",
    "ArmStats",
    "OpStats",
    "Result",
    "round_order",
    "window_order",
    "schedule",
    "ORDERS",
    "window_median",
    "median_of_medians",
    "ratio",
    "summarize",
    "time_window",
    "run_interleaved",
    "format_rows",
    "format_result",
]

Call = Callable[[], object]
Clock = Callable[[], int]


@dataclass(frozen=True)
class Step:
    """One request with untimed set-up and clean-up around the timed part.

    ``before`` and ``after`` run outside the clock for every request (e.g. map
    pages before timing their unmap, or unmap them again after timing a map).
    """

    timed: Call
    before: Call | None = None
    after: Call | None = None


Request = Call | Step
"""What an arm runs for one request of an op: a plain callable (all of it timed) or a :class:`Step`."""


@dataclass(frozen=True)
class Arm:
    """One implementation under comparison: a name and, per op name, its request."""

    name: str
    ops: Mapping[str, Request]

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("an arm needs a non-empty name")
        if not self.ops:
            raise ValueError(f"arm {self.name!r} has no ops")


@dataclass(frozen=True)
class Window:
    """One window of the schedule: ``requests`` calls of ``op`` on ``arm``."""

    index: int  # position in the whole run, from 0
    round: int  # round number from 0, warm-up rounds included
    op: str
    arm: str
    warmup: bool  # thrown away


@dataclass
class ArmStats:
    """One arm's windows for one op."""

    arm: str
    window_medians_ns: list[float] = field(default_factory=list)  # measured windows, in run order
    warmup_medians_ns: list[float] = field(default_factory=list)  # discarded windows, for the record

    @property
    def median_ns(self) -> float:
        """The median of the measured window medians."""
        return statistics.median(self.window_medians_ns)


@dataclass
class OpStats:
    """Every arm's windows for one op, and their ratio to the baseline arm."""

    op: str
    baseline: str
    arms: dict[str, ArmStats]

    def ratio(self, arm: str) -> float:
        """``arm``'s median of window medians over the baseline's."""
        return ratio(self.arms[arm].median_ns, self.arms[self.baseline].median_ns)

    def window_ratios(self, arm: str) -> list[float]:
        """Per measured round, ``arm``'s window median over the baseline's in the same round.

        Windows of one round are adjacent in time, so the spread of these says how
        much the machine moved the comparison (a noise indicator, not an interval).
        """
        mine, base = self.arms[arm].window_medians_ns, self.arms[self.baseline].window_medians_ns
        return [ratio(m, b) for m, b in zip(mine, base, strict=True)]

    @property
    def ratios(self) -> dict[str, float]:
        """The ratio of every arm (the baseline's is 1.0)."""
        return {name: self.ratio(name) for name in self.arms}


@dataclass
class Result:
    """A whole interleaved run."""

    arms: list[str]
    ops: list[str]
    baseline: str
    windows: int  # measured windows per (op, arm)
    requests: int  # requests per window
    warmup: int  # warm-up rounds discarded
    per_op: dict[str, OpStats]

    def median_ns(self, op: str, arm: str) -> float:
        return self.per_op[op].arms[arm].median_ns

    def ratio(self, op: str, arm: str) -> float:
        return self.per_op[op].ratio(arm)


# ------------------------------------------------------------------ order
def round_order(arms: Sequence[str], r: int) -> list[str]:
    """The arms of measured round ``r``: forward when ``r`` is even, reversed when odd.

    Negative ``r`` (a warm-up round before the first measured one) follows the
    same alternation, so the pattern runs on unbroken into the measured rounds.
    """
    return list(arms) if r % 2 == 0 else list(reversed(arms))


def window_order(arms: Sequence[str], rounds: int) -> list[str]:
    """The arms of ``rounds`` consecutive rounds, flat: ``A B B A A B ...`` for two arms."""
    return [a for r in range(rounds) for a in round_order(arms, r)]


ORDERS = ("abba", "random")  # arm orders within a round: alternating forward/reversed, or shuffled


def schedule(arms: Sequence[str], ops: Sequence[str], windows: int, warmup: int = 1, *, order: str = "abba",
             seed: int | None = None) -> list[Window]:
    """Every window of a run, in order: ``warmup`` discarded rounds, then ``windows`` measured ones.

    Within a round each op gets one window per arm, in the round's arm order,
    so every op is spread over the whole run.  ``order="random"`` shuffles the
    arms afresh for every op of every round (``random.Random(seed)``) instead of
    alternating them, so no fixed position can favour an arm.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    rng = random.Random(seed)
    if len(set(arms)) != len(arms) or not arms:
        raise ValueError(f"arms must be distinct and non-empty, got {list(arms)}")
    if len(set(ops)) != len(ops) or not ops:
        raise ValueError(f"ops must be distinct and non-empty, got {list(ops)}")
    if windows < 1 or warmup < 0:
        raise ValueError(f"need windows >= 1 and warmup >= 0, got windows={windows} warmup={warmup}")
    out: list[Window] = []
    for r in range(warmup + windows):
        forward = round_order(arms, r - warmup)
        for op in ops:
            for arm in forward if order == "abba" else rng.sample(list(arms), len(arms)):
                out.append(Window(len(out), r, op, arm, r < warmup))
    return out


# ------------------------------------------------------------- statistics
def window_median(samples: Sequence[int | float]) -> float:
    """The median of one window's per-request times."""
    if not samples:
        raise ValueError("a window needs at least one sample")
    return float(statistics.median(samples))


def median_of_medians(windows: Sequence[Sequence[int | float]]) -> float:
    """The median over windows of each window's median."""
    if not windows:
        raise ValueError("need at least one window")
    return float(statistics.median(window_median(w) for w in windows))


def ratio(value: float, base: float) -> float:
    """``value / base``; ValueError when the base is not positive."""
    if not base > 0:
        raise ValueError(f"baseline must be > 0, got {base!r}")
    return value / base


def summarize(windows: Sequence[Window], medians: Sequence[float], *, baseline: str,
              requests: int) -> Result:
    """Build a :class:`Result` from a schedule and each of its windows' median (same order).

    Warm-up windows are kept apart (``warmup_medians_ns``) and count for nothing.
    Arms and ops are listed in the order the measured windows first take them.
    """
    if len(windows) != len(medians):
        raise ValueError(f"{len(windows)} windows but {len(medians)} medians")
    arms: list[str] = []
    ops: list[str] = []
    for w in sorted(windows, key=lambda w: (w.warmup, w.index)):
        if w.arm not in arms:
            arms.append(w.arm)
        if w.op not in ops:
            ops.append(w.op)
    if baseline not in arms:
        raise ValueError(f"baseline {baseline!r} is not one of the arms {arms}")
    per_op = {op: OpStats(op, baseline, {a: ArmStats(a) for a in arms}) for op in ops}
    for w, m in zip(windows, medians, strict=True):
        st = per_op[w.op].arms[w.arm]
        (st.warmup_medians_ns if w.warmup else st.window_medians_ns).append(float(m))
    counts = {len(st.window_medians_ns) for o in per_op.values() for st in o.arms.values()}
    if 0 in counts:
        raise ValueError("every (op, arm) needs at least one measured (non-warm-up) window")
    warm_rounds = len({w.round for w in windows if w.warmup})
    return Result(arms, ops, baseline, max(counts), requests, warm_rounds, per_op)


# ------------------------------------------------------------ timing loop
def time_window(request: Request, n: int, clock: Clock = time.perf_counter_ns) -> list[int]:
    """Run ``request`` ``n`` times; return each timed part's duration in clock units."""
    out: list[int] = []
    if isinstance(request, Step):
        timed, before, after = request.timed, request.before, request.after
        for _ in range(n):
            if before is not None:
                before()
            t0 = clock()
            timed()
            t1 = clock()
            if after is not None:
                after()
            out.append(t1 - t0)
        return out
    for _ in range(n):
        t0 = clock()
        request()
        t1 = clock()
        out.append(t1 - t0)
    return out


def run_interleaved(arms: Sequence[Arm], *, ops: Sequence[str] | None = None, windows: int = 9,
                    requests: int = 300, warmup: int = 1, baseline: str | None = None,
                    clock: Clock = time.perf_counter_ns,
                    progress: Callable[[Window, float], None] | None = None, order: str = "abba",
                    seed: int | None = None) -> Result:
    """Time every op on every arm in interleaved windows; see the module docstring.

    Args:
        arms: the implementations; each must serve every op in ``ops``.
        ops: op names, in the order windows take them (default: the first arm's).
        windows: measured windows per (op, arm).
        requests: timed requests per window.
        warmup: rounds run first and discarded.
        baseline: the arm ratios are taken against (default: the first).
        progress: called after each window with it and its median (ns); an exception it raises
            ends the run (a leak check uses that).
        order, seed: the arm order within a round, see :func:`schedule`.
    """
    if not arms:
        raise ValueError("need at least one arm")
    if requests < 1:
        raise ValueError(f"requests must be >= 1, got {requests}")
    op_names = list(ops) if ops is not None else list(arms[0].ops)
    by_name = {a.name: a for a in arms}
    for a in arms:
        missing = [op for op in op_names if op not in a.ops]
        if missing:
            raise ValueError(f"arm {a.name!r} lacks ops {missing}")
    base = baseline if baseline is not None else arms[0].name
    plan = schedule([a.name for a in arms], op_names, windows, warmup, order=order, seed=seed)
    medians: list[float] = []
    for w in plan:
        m = window_median(time_window(by_name[w.arm].ops[w.op], requests, clock))
        medians.append(m)
        if progress is not None:
            progress(w, m)
    return summarize(plan, medians, baseline=base, requests=requests)


# ------------------------------------------------------------------ tables
def format_rows(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An aligned text table: first column left-aligned, the others right-aligned."""
    table = [list(headers), *[list(r) for r in rows]]
    ncol = max(len(r) for r in table)
    for r in table:
        r.extend([""] * (ncol - len(r)))
    widths = [max(len(r[i]) for r in table) for i in range(ncol)]

    def line(r: Sequence[str]) -> str:
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(table[0]), rule, *(line(r) for r in table[1:])])


_UNITS = {"ns": 1.0, "us": 1e3, "ms": 1e6}


def format_result(result: Result, *, unit: str = "us", targets: Mapping[str, str] | None = None,
                  title: str | None = None) -> str:
    """The result as a table: per op, each arm's median of window medians, then each ratio.

    ``targets`` adds a column (per op name) with whatever it says, e.g. ``"<= 1.10"``.
    """
    scale = _UNITS[unit]
    others = [a for a in result.arms if a != result.baseline]
    headers = ["op", *(f"{a} ({unit})" for a in result.arms),
               *(f"{a}/{result.baseline}" for a in others),
               *(f"per-window {a}/{result.baseline} min..max" for a in others)]
    if targets:
        headers.append("target")
    rows: list[list[str]] = []
    for op in result.ops:
        st = result.per_op[op]
        spreads = [st.window_ratios(a) for a in others]
        row = [op, *(f"{st.arms[a].median_ns / scale:.1f}" for a in result.arms),
               *(f"{st.ratio(a):.3f}" for a in others),
               *(f"{min(r):.2f}..{max(r):.2f}" for r in spreads)]
        if targets:
            row.append(targets.get(op, ""))
        rows.append(row)
    head = (f"{result.windows} windows x {result.requests} requests per op and arm, "
            f"{result.warmup} warm-up round(s) discarded; median of window medians")
    parts = [title, head] if title else [head]
    return "\n".join([*parts, format_rows(headers, rows)])
