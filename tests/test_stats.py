"""llome_jax.stats: the exact tests and bootstrap intervals of the report's verdicts, against
hand-derived values and, independently, ``scipy.stats`` (used here only; the library is pure
NumPy)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from llome_jax import stats


def _scipy_permutation(a, b, alternative: str) -> float:
    def statistic(x, y, axis):
        return np.mean(x, axis=axis) - np.mean(y, axis=axis)

    return scipy_stats.permutation_test(
        (np.asarray(a, float), np.asarray(b, float)),
        statistic,
        vectorized=True,
        n_resamples=np.inf,  # every split: scipy's exact null distribution
        alternative=alternative,
        permutation_type="independent",
    ).pvalue


# ------------------------------------------------------------------------------------------
# Hand-derived values
# ------------------------------------------------------------------------------------------
def test_three_vs_three_cannot_reach_five_percent() -> None:
    """Perfect separation of 3 vs 3: one split of C(6, 3) = 20 is as extreme on each side, so
    p = 1/20 one-sided and 2/20 = 0.1 two-sided: a 3-seed comparison is never significant."""
    assert stats.permutation_test([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    assert stats.permutation_test([1, 2, 3], [4, 5, 6], "less") == pytest.approx(0.05)
    assert stats.permutation_test([1, 2, 3], [4, 5, 6], "greater") == pytest.approx(1.0)
    assert stats.permutation_test([4, 5, 6], [1, 2, 3], "greater") == pytest.approx(0.05)
    assert stats.smallest_p(3, 3) == pytest.approx(0.1)
    assert stats.smallest_p(3, 3, "less") == pytest.approx(0.05)


@pytest.mark.parametrize(
    "n_a, n_b, two_sided",
    [(3, 3, 2 / 20), (4, 4, 2 / 70), (3, 4, 2 / 35), (5, 5, 2 / 252), (1, 3, 0.5), (1, 1, 1.0)],
)
def test_smallest_p_is_reached_by_perfect_separation(n_a, n_b, two_sided) -> None:
    assert stats.smallest_p(n_a, n_b) == pytest.approx(two_sided)
    assert stats.smallest_p(n_a, n_b, "greater") == pytest.approx(two_sided / 2)
    low, high = list(range(n_a)), list(range(100, 100 + n_b))
    assert stats.permutation_test(low, high) == pytest.approx(two_sided)


def test_smallest_p_edge_cases() -> None:
    assert stats.smallest_p(0, 3) == 1.0
    assert stats.smallest_p_stratified([]) == 1.0
    assert stats.smallest_p_stratified([(3, 3), (1, 1)]) == pytest.approx(2 / 40)
    assert stats.smallest_p_stratified([(3, 3), (1, 1)], "less") == pytest.approx(1 / 40)
    assert stats.smallest_p_sign_flip(3) == pytest.approx(0.25)
    assert stats.smallest_p_sign_flip(3, "greater") == pytest.approx(0.125)
    assert stats.smallest_p_sign_flip(5, "less") == pytest.approx(1 / 32)
    assert stats.smallest_p_sign_flip(0) == 1.0


def test_ties_count_as_extreme() -> None:
    """[0, 0, 1] vs [1, 1, 1]: the splits whose ``a`` holds both zeros (4 of 20) have a's sum 1,
    as low as observed: p = 4/20 one-sided, 0.4 two-sided. All values equal: p = 1."""
    assert stats.permutation_test([0, 0, 1], [1, 1, 1], "less") == pytest.approx(0.2)
    assert stats.permutation_test([0, 0, 1], [1, 1, 1]) == pytest.approx(0.4)
    for alternative in ("two-sided", "less", "greater"):
        assert stats.permutation_test([0.789] * 3, [0.789] * 4, alternative) == 1.0
        assert stats.sign_flip_test([0.0, 0.0], alternative) == 1.0


def test_issue_53_hypervolumes() -> None:
    """The review's per-run areas: LLOME-MargE (16.20, 16.21, 17.48) vs LaMBO-2 (16.76, 17.02,
    16.81). Rank sums of MargE's ranks (1, 2, 6) = 9; the 3-subsets of 1..6 with sum <= 9 are
    {123, 124, 125, 134, 126, 135, 234}: 7 of 20, p = 0.35 one-sided. The difference of means
    (-0.233) is as low or lower in 6 splits: p = 0.3 one-sided."""
    marge, lambo = [16.20, 16.21, 17.48], [16.76, 17.02, 16.81]
    assert stats.rank_sum_test(marge, lambo, "less") == pytest.approx(0.35)
    assert stats.permutation_test(marge, lambo, "less") == pytest.approx(0.3)
    assert stats.permutation_test(marge, lambo) == pytest.approx(0.6)


def test_stratified_test_permutes_within_strata() -> None:
    """Strata ([1], [2]) and ([3], [4]): 2 x 2 splits, T = mean of the strata's differences
    in {-1, 0, 0, 1}; observed -1: p = 1/4 one-sided, 1/2 two-sided. Pooled across strata
    (1, 3 vs 2, 4: a's sum 4 of the 2-subset sums 3, 4, 5, 5, 6, 7) it would be 2/6."""
    strata = [([1.0], [2.0]), ([3.0], [4.0])]
    assert stats.stratified_permutation_test(strata, "less") == pytest.approx(0.25)
    assert stats.stratified_permutation_test(strata) == pytest.approx(0.5)
    assert stats.permutation_test([1, 3], [2, 4], "less") == pytest.approx(2 / 6)


def test_stratified_test_against_brute_force() -> None:
    rng = np.random.default_rng(4)
    strata = [
        (rng.normal(0, 1, 3).round(2), rng.normal(0.8, 1, 2).round(2)),
        (rng.normal(5, 1, 2).round(2), rng.normal(5.5, 1, 3).round(2)),
    ]
    observed = np.mean([a.mean() - b.mean() for a, b in strata])
    null = []
    splits = []
    for a, b in strata:
        pooled = np.concatenate([a, b])
        ways = []
        for idx in itertools.combinations(range(pooled.size), a.size):
            mask = np.zeros(pooled.size, bool)
            mask[list(idx)] = True
            ways.append(pooled[mask].mean() - pooled[~mask].mean())
        splits.append(ways)
    null = np.array([np.mean(c) for c in itertools.product(*splits)])
    less = np.mean(null <= observed + 1e-12)
    greater = np.mean(null >= observed - 1e-12)
    assert stats.stratified_permutation_test(strata, "less") == pytest.approx(less)
    assert stats.stratified_permutation_test(strata, "greater") == pytest.approx(greater)
    assert stats.stratified_permutation_test(strata) == pytest.approx(
        min(1, 2 * min(less, greater))
    )
    # one stratum is the plain test
    a, b = strata[0]
    assert stats.stratified_permutation_test([(a, b)]) == stats.permutation_test(a, b)


def test_sign_flip_hand_values() -> None:
    """Three positive differences: one of 2^3 sign vectors is as large, p = 1/8 one-sided."""
    assert stats.sign_flip_test([0.1, 0.2, 0.3], "greater") == pytest.approx(0.125)
    assert stats.sign_flip_test([0.1, 0.2, 0.3]) == pytest.approx(0.25)
    assert stats.sign_flip_test([0.1, 0.2, 0.3], "less") == pytest.approx(1.0)
    # [0.3, -0.1]: sums of (+-0.3, +-0.1) are 0.4, 0.2, -0.2, -0.4; observed 0.2: 2 of 4
    assert stats.sign_flip_test([0.3, -0.1], "greater") == pytest.approx(0.5)


# ------------------------------------------------------------------------------------------
# Against scipy
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_permutation_test_matches_scipy(seed: int, alternative: str) -> None:
    rng = np.random.default_rng(seed)
    n_a, n_b = rng.integers(2, 7, size=2)
    a = rng.normal(0.0, 1.0, n_a).round(1)  # rounded: ties, as quantised regrets have
    b = rng.normal(0.7, 1.0, n_b).round(1)
    assert stats.permutation_test(a, b, alternative) == pytest.approx(
        _scipy_permutation(a, b, alternative), rel=1e-9
    )


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_rank_sum_test_matches_scipy_mann_whitney_without_ties(seed: int, alternative: str) -> None:
    rng = np.random.default_rng(seed)
    a, b = rng.normal(0, 1, 5), rng.normal(0.8, 1, 6)  # continuous: no ties
    expected = scipy_stats.mannwhitneyu(a, b, alternative=alternative, method="exact").pvalue
    assert stats.rank_sum_test(a, b, alternative) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_sign_flip_matches_scipy(alternative: str) -> None:
    d = np.array([0.3, -0.1, 0.25, 0.0, 0.4, 0.05, -0.2])

    def statistic(x, axis):
        return np.mean(x, axis=axis)

    expected = scipy_stats.permutation_test(
        (d,),
        statistic,
        vectorized=True,
        n_resamples=np.inf,
        alternative=alternative,
        permutation_type="samples",  # one sample: scipy flips signs
    ).pvalue
    assert stats.sign_flip_test(d, alternative) == pytest.approx(expected, rel=1e-9)


def test_exact_up_to_max_splits_then_monte_carlo() -> None:
    """C(20, 10) = 184,756 splits are enumerated; C(22, 11) = 705,432 are sampled, reproducibly
    and close to scipy's exact answer."""
    assert math.comb(20, 10) <= stats.MAX_SPLITS < math.comb(21, 10)
    assert stats.is_exact((10, 10)) and not stats.is_exact((11, 10))
    assert not stats.is_exact((3, 3), (10, 10))  # 20 x 184,756 splits
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1, 11), rng.normal(0.6, 1, 11)
    p = stats.permutation_test(a, b)
    assert p == stats.permutation_test(a, b)  # the seed fixes it
    assert p >= 1 / (1 + stats.MONTE_CARLO)
    assert p == pytest.approx(_scipy_permutation(a, b, "two-sided"), abs=0.01)
    d = rng.normal(0.3, 1, 19)  # 2^19 sign vectors: sampled
    assert stats.sign_flip_test(d) == pytest.approx(
        scipy_stats.permutation_test(
            (d,),
            lambda x, axis: np.mean(x, axis=axis),
            vectorized=True,
            n_resamples=np.inf,
            permutation_type="samples",
        ).pvalue,
        abs=0.01,
    )


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="finite"):
        stats.permutation_test([1.0, float("nan")], [2.0])
    with pytest.raises(ValueError, match="at least one"):
        stats.permutation_test([], [2.0])
    with pytest.raises(ValueError, match="at least one"):
        stats.sign_flip_test([])
    with pytest.raises(ValueError, match="alternative"):
        stats.permutation_test([1.0], [2.0], "bigger")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="level"):
        stats.bootstrap_interval([1.0, 2.0], level=1.0)


# ------------------------------------------------------------------------------------------
# Bootstrap intervals
# ------------------------------------------------------------------------------------------
def test_bootstrap_interval_hand_values() -> None:
    """Two values {0, 1}: a resample's median is 0, 0.5 or 1 with probabilities 1/4, 1/2, 1/4,
    so the 95 % interval is (0, 1) and the 40 % interval (0.5, 0.5). One value: (v, v)."""
    assert stats.bootstrap_interval([0.0, 1.0]) == (0.0, 1.0)
    assert stats.bootstrap_interval([0.0, 1.0], level=0.4) == (0.5, 0.5)
    assert stats.bootstrap_interval([0.789]) == (0.789, 0.789)
    assert stats.bootstrap_interval([0.5, 0.5, 0.5]) == (0.5, 0.5)
    lo, hi = stats.bootstrap_interval([])
    assert math.isnan(lo) and math.isnan(hi)


def test_bootstrap_interval_is_deterministic_and_nested() -> None:
    values = [0.789, 0.684, 0.789, 0.859, 0.5]
    first = stats.bootstrap_interval(values)
    assert first == stats.bootstrap_interval(values)  # seed 0 by default
    inner = stats.bootstrap_interval(values, level=0.5)
    assert min(values) <= first[0] <= inner[0] <= np.median(values) <= inner[1] <= first[1]
    assert first[1] <= max(values)


def test_bootstrap_interval_matches_scipy_percentile_bootstrap() -> None:
    values = np.random.default_rng(3).normal(0.0, 1.0, 60)
    ours = stats.bootstrap_interval(values, np.mean)
    theirs = scipy_stats.bootstrap(
        (values,), np.mean, method="percentile", n_resamples=10_000, rng=0
    ).confidence_interval
    assert ours == pytest.approx((theirs.low, theirs.high), abs=0.03)


def test_stratified_bootstrap() -> None:
    """One stratum: the plain bootstrap of the mean (the same draws); constant strata: the
    mean of their values; an empty stratum: nan."""
    x = [16.20, 16.21, 17.48]
    assert stats.bootstrap_interval_stratified([x]) == stats.bootstrap_interval(x, np.mean)
    assert stats.bootstrap_interval_stratified([[1.0, 1.0], [3.0]]) == (2.0, 2.0)
    lo, hi = stats.bootstrap_interval_stratified([[1.0], []])
    assert math.isnan(lo) and math.isnan(hi)
