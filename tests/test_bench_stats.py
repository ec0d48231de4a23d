"""harness.bench.stats on synthetic samples: the rank test, the bootstrap interval, the verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.bench.stats import (
    MIN_SAMPLES,
    bootstrap_ratio_ci,
    compare,
    mann_whitney_u,
    min_p_value,
)
from harness.errors import ConfigError

SEEDS = range(100)


# ------------------------------------------------------------- Mann-Whitney U
def test_complete_separation_matches_the_hand_computed_normal_approximation() -> None:
    u, p = mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert u == 0.0
    sigma = math.sqrt(5 * 5 / 12 * 11)  # no ties
    assert p == pytest.approx(math.erfc((12.5 - 0.5) / sigma / math.sqrt(2)))
    assert p == pytest.approx(0.01219, abs=5e-5)  # scipy.stats.mannwhitneyu(..., method="asymptotic")


def test_u_counts_pairs_and_is_symmetric() -> None:
    a, b = [3.0, 1.0, 4.0, 1.5, 5.0], [9.0, 2.0, 6.0, 5.5]
    u_ab, p_ab = mann_whitney_u(a, b)
    u_ba, p_ba = mann_whitney_u(b, a)
    assert u_ab == sum(1.0 for x in a for y in b if x > y)
    assert u_ab + u_ba == len(a) * len(b)
    assert p_ab == pytest.approx(p_ba)


def test_ties_get_midranks_and_shrink_the_variance() -> None:
    a, b = [1, 2, 2, 3], [2, 3, 3, 4]
    u, p = mann_whitney_u(a, b)
    # pairs a > b count 1, ties count 1/2
    assert u == sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)
    # tie groups: 2 (x3), 3 (x3): sum(t^3 - t) = 48; N = 8
    var = 4 * 4 / 12 * (9 - 48 / (8 * 7))
    assert p == pytest.approx(math.erfc((abs(u - 8) - 0.5) / math.sqrt(var) / math.sqrt(2)))


def test_all_values_tied_gives_p_one() -> None:
    assert mann_whitney_u([5, 5, 5], [5, 5, 5, 5]) == (6.0, 1.0)


@pytest.mark.parametrize("a,b", [([], [1, 2, 3]), ([1, 2], [1, 2, 3]), ([1, 2, 3], [4])])
def test_tiny_samples_are_refused_with_the_fix(a: list[float], b: list[float]) -> None:
    with pytest.raises(ConfigError, match=rf"needs at least {MIN_SAMPLES} per sample: run more windows"):
        mann_whitney_u(a, b)


def test_non_finite_values_are_refused() -> None:
    with pytest.raises(ConfigError, match="non-finite"):
        mann_whitney_u([1, 2, float("nan")], [1, 2, 3])


def test_a_known_shift_of_normal_samples_is_detected_in_every_seed() -> None:
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        a, b = rng.normal(100, 1, 15), rng.normal(102, 1, 15)  # a 2-sigma shift
        _, p = mann_whitney_u(list(a), list(b))
        assert p < 0.01, seed


def test_identical_distributions_give_a_small_p_rarely() -> None:
    small = 0
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        _, p = mann_whitney_u(list(rng.normal(100, 1, 15)), list(rng.normal(100, 1, 15)))
        small += p < 0.05
    assert small <= 10  # about 5 expected


def test_min_p_value_says_when_the_design_cannot_decide() -> None:
    assert min_p_value(4, 4) > 0.01  # four windows per arm can never reach alpha 0.01
    assert min_p_value(9, 9) < 0.001


# ------------------------------------------------------------------ bootstrap
def test_the_interval_contains_the_true_ratio_on_lognormal_data_in_most_seeds() -> None:
    true_ratio = 1.03
    hits = 0
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        a = 70.0 * rng.lognormal(0.0, 0.02, 15)  # median 70
        b = 70.0 * true_ratio * rng.lognormal(0.0, 0.02, 15)
        lo, hi = bootstrap_ratio_ci(list(a), list(b), seed=seed)
        hits += lo <= true_ratio <= hi
    assert hits >= 85  # a 95 % interval; percentile bootstrap of medians under-covers a little at n=15


def test_the_interval_brackets_the_point_ratio_and_is_reproducible() -> None:
    a, b = [10.0, 11, 12, 10.5, 11.5], [20.0, 22, 24, 21, 23]
    lo, hi = bootstrap_ratio_ci(a, b, seed=7)
    assert lo <= 22 / 11 <= hi
    assert bootstrap_ratio_ci(a, b, seed=7) == (lo, hi)


def test_a_wider_confidence_gives_a_wider_interval() -> None:
    rng = np.random.default_rng(1)
    a, b = list(rng.normal(100, 3, 12)), list(rng.normal(100, 3, 12))
    lo90, hi90 = bootstrap_ratio_ci(a, b, confidence=0.90)
    lo99, hi99 = bootstrap_ratio_ci(a, b, confidence=0.99)
    assert lo99 <= lo90 and hi90 <= hi99


@pytest.mark.parametrize("kwargs,message", [
    ({"confidence": 1.0}, "confidence must be between 0 and 1"),
    ({"resamples": 10}, "resamples must be >= 100"),
])
def test_bad_bootstrap_settings_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        bootstrap_ratio_ci([1, 2, 3], [1, 2, 3], **kwargs)  # type: ignore[arg-type]


def test_a_ratio_needs_positive_values() -> None:
    with pytest.raises(ConfigError, match="must be > 0"):
        bootstrap_ratio_ci([0, 1, 2], [1, 2, 3])


# -------------------------------------------------------------------- compare
def test_compare_calls_a_clear_shift_slower_or_faster() -> None:
    rng = np.random.default_rng(3)
    a = list(rng.normal(100, 1, 12))
    slow = compare(a, list(rng.normal(103, 1, 12)), alpha=0.01)
    fast = compare(a, list(rng.normal(97, 1, 12)), alpha=0.01)
    assert slow.verdict == "slower" and slow.ratio > 1 and slow.ci_excludes_one and slow.ci[0] > 1
    assert fast.verdict == "faster" and fast.ratio < 1 and fast.ci[1] < 1
    assert slow.n_a == slow.n_b == 12 and slow.decidable


def test_compare_on_one_distribution_says_no_difference_at_alpha_001_in_most_seeds() -> None:
    calm = 0
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        c = compare(list(rng.normal(100, 2, 12)), list(rng.normal(100, 2, 12)), alpha=0.01, resamples=200,
                    seed=seed)
        calm += c.verdict == "no difference"
    assert calm >= 95


def test_compare_as_dict_is_plain_data() -> None:
    c = compare([1.0, 2, 3, 4], [2.0, 3, 4, 5])
    d = c.as_dict()
    assert d["verdict"] == c.verdict and d["ci"] == list(c.ci) and d["n_a"] == 4


def test_compare_refuses_a_bad_alpha() -> None:
    with pytest.raises(ConfigError, match="alpha must be between 0 and 1"):
        compare([1, 2, 3], [1, 2, 3], alpha=0)


def test_paired_resampling_cancels_drift_common_to_both_arms() -> None:
    rng = np.random.default_rng(5)
    drift = np.where(rng.random(40) < 0.5, 50.0, 80.0)  # a bimodal machine: each round fast or slow
    a = drift * rng.lognormal(0.0, 0.005, 40)
    b = drift * 1.04 * rng.lognormal(0.0, 0.005, 40)
    lo_u, hi_u = bootstrap_ratio_ci(list(a), list(b))
    lo_p, hi_p = bootstrap_ratio_ci(list(a), list(b), paired=True)
    assert lo_p <= 1.04 <= hi_p
    assert lo_p > 1.0 and hi_p - lo_p < (hi_u - lo_u) / 3


def test_paired_resampling_needs_one_value_per_round_each() -> None:
    with pytest.raises(ConfigError, match="paired samples need one value per round each, got 3 and 4"):
        bootstrap_ratio_ci([1, 2, 3], [1, 2, 3, 4], paired=True)


def test_compare_records_whether_the_interval_was_paired() -> None:
    assert compare([1.0, 2, 3], [1.0, 2, 3], paired=True).paired
    assert compare([1.0, 2, 3], [1.0, 2, 3]).as_dict()["paired"] is False


def test_only_the_interval_uses_the_rounds_the_rank_test_does_not() -> None:
    """What lastcall bench's docstring says of compare(paired=True): the interval resamples rounds (the order
    of one arm's windows matters to it), the U test is a rank-sum test of two samples (the order does not)."""
    drift = [1.0 + 0.5 * i for i in range(12)]  # a machine that slows down, round by round, for both arms
    a = [d * 100 for d in drift]
    b = [d * 110 for d in drift]
    shuffled = b[6:] + b[:6]  # the same windows of b, out of their rounds
    kept, moved = compare(a, b, paired=True), compare(a, shuffled, paired=True)
    assert (kept.u, kept.p) == (moved.u, moved.p)
    assert kept.ci != moved.ci and kept.ci[1] - kept.ci[0] < moved.ci[1] - moved.ci[0]
