"""The statistics of an A/B comparison of window medians: a rank test, a bootstrap interval, a verdict.

The unit of every statistic here is the *window median* (one per window of an
interleaved run, :mod:`harness.bench.interleave`), never a single request:
requests of one window share the machine's state of that moment, so they are
not independent, and a test over thousands of them calls any drift "significant".

* :func:`mann_whitney_u`: the two-sided Mann-Whitney U test, normal
  approximation with tie correction and continuity correction (what
  ``scipy.stats.mannwhitneyu(a, b, method="asymptotic")`` computes).
* :func:`bootstrap_ratio_ci`: a percentile bootstrap interval of
  ``median(b) / median(a)``, resampling windows within each arm, or (``paired``)
  resampling *rounds*: the windows of both arms that ran side by side are drawn
  together, so a slow stretch of the machine moves both medians of a resample
  alike instead of widening the interval.
* :func:`compare`: both, and a verdict at ``alpha`` taken from the test alone
  ("slower" / "faster" / "no difference"); the interval is reported beside it.

Pure functions of their inputs (the bootstrap takes a seed): unit-tested on
synthetic samples in tests/test_bench_stats.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from harness.errors import ConfigError

__all__ = ["MIN_SAMPLES", "Comparison", "Verdict", "mann_whitney_u", "min_p_value", "bootstrap_ratio_ci",
           "compare"]

MIN_SAMPLES = 3  # fewest values per sample the rank test and the bootstrap accept
DEFAULT_RESAMPLES = 2000  # bootstrap resamples per interval

Verdict = Literal["slower", "faster", "no difference"]


def _clean(name: str, xs: Sequence[float]) -> np.ndarray:
    arr = np.asarray(xs, dtype=float)
    if arr.ndim != 1:
        raise ConfigError(f"{name} must be a flat sequence of numbers, got shape {arr.shape}")
    if len(arr) < MIN_SAMPLES:
        raise ConfigError(f"{name} has {len(arr)} value(s); the test needs at least {MIN_SAMPLES} "
                          f"per sample: run more windows (--windows)")
    if not np.all(np.isfinite(arr)):
        raise ConfigError(f"{name} holds a non-finite value: {arr[~np.isfinite(arr)][:3].tolist()}")
    return arr


def _midranks(values: np.ndarray) -> tuple[np.ndarray, float]:
    """Ranks from 1 with ties given their average rank, and the tie term sum(t**3 - t) over tie groups."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=float)
    sorted_vals = values[order]
    tie_term = 0.0
    i = 0
    while i < len(sorted_vals):
        j = i
        while j + 1 < len(sorted_vals) and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1  # positions i..j hold ranks i+1..j+1
        t = j - i + 1
        tie_term += t ** 3 - t
        i = j + 1
    return ranks, tie_term


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """The Mann-Whitney U statistic of ``a`` and the two-sided p-value that both come from one distribution.

    Returns: ``(U, p)``: ``U`` counts the pairs (x in a, y in b) with x > y, a tie
        counting one half (0 when every ``a`` is below every ``b``, ``len(a) *
        len(b)`` when above); ``p`` from the normal approximation with the tie
        correction of the variance and a continuity correction of 0.5.  When
        every value is tied the variance is zero and ``p`` is 1.0.
    Error handling: ConfigError when a sample has fewer than MIN_SAMPLES values
        or a non-finite one.
    """
    x, y = _clean("sample a", a), _clean("sample b", b)
    n1, n2 = len(x), len(y)
    n = n1 + n2
    ranks, tie_term = _midranks(np.concatenate([x, y]))
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2)
    mu = n1 * n2 / 2
    var = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if var <= 0:
        return u1, 1.0
    z = max(0.0, abs(u1 - mu) - 0.5) / math.sqrt(var)
    return u1, min(1.0, math.erfc(z / math.sqrt(2)))


def min_p_value(n1: int, n2: int) -> float:
    """The smallest p :func:`mann_whitney_u` can return for samples of these sizes (complete separation).

    When it is not below ``alpha`` the test can never report a difference: the
    design has too few windows, and "no difference" means nothing.
    """
    return mann_whitney_u(list(range(n1)), list(range(n1, n1 + n2)))[1]


def bootstrap_ratio_ci(a_window_medians: Sequence[float], b_window_medians: Sequence[float],
                       confidence: float = 0.95, resamples: int = DEFAULT_RESAMPLES,
                       seed: int | None = 0, *, paired: bool = False) -> tuple[float, float]:
    """A percentile bootstrap interval of ``median(b) / median(a)``.

    Each resample draws ``len(a)`` windows of ``a`` and ``len(b)`` windows of
    ``b`` with replacement, independently; with ``paired`` it draws indices
    once and takes window ``i`` of both (``a[i]`` and ``b[i]`` ran in the same
    round).  The interval is the central ``confidence`` part of the resampled
    ratios.

    Error handling: ConfigError on a sample below MIN_SAMPLES values, a value
        that is not finite and positive, ``confidence`` outside (0, 1), fewer
        than 100 resamples, or paired samples of different lengths.
    """
    x, y = _clean("a_window_medians", a_window_medians), _clean("b_window_medians", b_window_medians)
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be between 0 and 1 (exclusive), got {confidence!r}; e.g. 0.95")
    if resamples < 100:
        raise ConfigError(f"resamples must be >= 100, got {resamples!r}")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ConfigError("window medians must be > 0 for a ratio; got a value <= 0")
    if paired and len(x) != len(y):
        raise ConfigError(f"paired samples need one value per round each, got {len(x)} and {len(y)}")
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(x), size=(resamples, len(x)))
    ib = ia if paired else rng.integers(0, len(y), size=(resamples, len(y)))
    ma, mb = np.median(x[ia], axis=1), np.median(y[ib], axis=1)
    tail = (1 - confidence) / 2
    lo, hi = np.quantile(mb / ma, [tail, 1 - tail])
    return float(lo), float(hi)


@dataclass(frozen=True)
class Comparison:
    """Arm B against arm A, from their window medians."""

    ratio: float  # median(b) / median(a)
    ci: tuple[float, float]  # bootstrap interval of the ratio, at ``confidence``
    confidence: float
    paired: bool  # the interval resampled rounds (both arms' windows of a round together)
    u: float  # Mann-Whitney U of b (pairs b > a)
    p: float  # two-sided
    alpha: float
    verdict: Verdict  # from p alone: "slower" / "faster" when p < alpha, else "no difference"
    n_a: int
    n_b: int
    min_p: float  # the smallest p these sample sizes allow; >= alpha means the test cannot decide

    @property
    def ci_excludes_one(self) -> bool:
        return self.ci[0] > 1.0 or self.ci[1] < 1.0

    @property
    def decidable(self) -> bool:
        """Whether these sample sizes can reach ``alpha`` at all."""
        return self.min_p < self.alpha

    def as_dict(self) -> dict[str, object]:
        return {"ratio": self.ratio, "ci": list(self.ci), "confidence": self.confidence, "paired": self.paired,
                "u": self.u,
                "p": self.p, "alpha": self.alpha, "verdict": self.verdict, "n_a": self.n_a, "n_b": self.n_b,
                "min_p": self.min_p}


def compare(a: Sequence[float], b: Sequence[float], *, alpha: float = 0.05, confidence: float = 0.95,
            resamples: int = DEFAULT_RESAMPLES, seed: int | None = 0, paired: bool = False) -> Comparison:
    """B (``b``'s window medians) against A: ratio of medians, its interval, the rank test, a verdict.

    The verdict is the test's: "slower" when ``p < alpha`` and B's median is
    above A's, "faster" when below, else "no difference".  The interval is
    independent of it (it can exclude 1.0 while p >= alpha, or the reverse, at
    the margin); both are reported.  ``paired``: see :func:`bootstrap_ratio_ci`
    (the rank test is unpaired either way).

    Error handling: ConfigError on bad samples (see :func:`mann_whitney_u`) or
        ``alpha`` outside (0, 1).
    """
    if not 0 < alpha < 1:
        raise ConfigError(f"alpha must be between 0 and 1 (exclusive), got {alpha!r}; e.g. 0.05")
    u_a, p = mann_whitney_u(a, b)
    med_a, med_b = float(np.median(np.asarray(a, dtype=float))), float(np.median(np.asarray(b, dtype=float)))
    if not med_a > 0:
        raise ConfigError(f"sample a's median must be > 0 for a ratio, got {med_a!r}")
    ratio = med_b / med_a
    lo, hi = bootstrap_ratio_ci(a, b, confidence, resamples, seed, paired=paired)
    verdict: Verdict = "no difference"
    if p < alpha and ratio != 1.0:
        verdict = "slower" if ratio > 1.0 else "faster"
    return Comparison(ratio=ratio, ci=(lo, hi), confidence=confidence, paired=paired, u=len(a) * len(b) - u_a, p=p,
                      alpha=alpha, verdict=verdict, n_a=len(a), n_b=len(b), min_p=min_p_value(len(a), len(b)))
