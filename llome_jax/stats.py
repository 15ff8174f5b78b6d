"""Small exact tests and intervals for comparisons over a handful of seeds (issue 53).

Pure NumPy, no SciPy (the tests check these against ``scipy.stats``). Every function takes
plain sequences of floats and returns Python floats.

* :func:`permutation_test` -- two independent samples ``a`` (``n_a`` values) and ``b``
  (``n_b``), the statistic ``T = mean(a) - mean(b)``. Under the null hypothesis (``a`` and
  ``b`` drawn from one distribution, so every split of the pooled ``n = n_a + n_b`` values
  into ``n_a`` and ``n_b`` is equally likely) the exact p-value enumerates all
  ``C(n, n_a)`` splits::

      p_less    = #{splits: T_split <= T_obs} / C(n, n_a)
      p_greater = #{splits: T_split >= T_obs} / C(n, n_a)
      p_two     = min(1, 2 min(p_less, p_greater))

  (the two-sided definition of ``scipy.stats.permutation_test``). The split that was
  observed counts, so ``p >= 1 / C(n, n_a)``. *Ties*: tied values are enumerated as distinct
  items, so a split and its tied twins share one ``T``; "as or more extreme" includes equal
  ``T`` (within a relative tolerance of ``1e-9`` for the rounding of sums), which keeps the
  test exact and makes it conservative with ties. The difference of means, not of medians:
  with 3 or 4 values a side many splits share the extreme median, so a median test could not
  reach ``p < 0.05`` at all on 4 vs 4 (the report's rules use medians; a verdict needs both).
  Above :data:`MAX_SPLITS` splits the null distribution is sampled (:data:`MONTE_CARLO`
  random splits, a fixed seed) and ``p = (1 + hits) / (1 + draws)``.
* :func:`stratified_permutation_test` -- the same within strata (e.g. functions): labels
  are permuted inside each stratum only; ``T = (1 / S) sum_s (mean(a_s) - mean(b_s))``, the
  mean over the ``S`` strata of the per-stratum difference; ``prod_s C(n_s, n_a,s)`` splits.
* :func:`rank_sum_test` -- Wilcoxon-Mann-Whitney: :func:`permutation_test` on the pooled
  mid-ranks (exact, ties included through the mid-ranks).
* :func:`sign_flip_test` -- one sample of paired differences ``d`` (e.g. a run's regret at
  two budgets): ``T = sum_i d_i``; under the null (each ``d_i`` symmetric about 0) all
  ``2^n`` sign vectors are equally likely; p as above over the ``2^n`` flips (a zero
  difference flips to itself).
* :func:`smallest_p` / :func:`smallest_p_sign_flip` -- the smallest p a test can reach:
  ``2 / C(n_a + n_b, n_a)`` two-sided (``1 / C`` one-sided), ``2 / 2^n`` for the sign flip.
  3 vs 3 gives 0.1: no 3-vs-3 comparison can be significant at 0.05 two-sided.
* :func:`bootstrap_interval` -- the percentile bootstrap interval of a statistic (the median
  by default): ``num`` resamples of ``n`` values with replacement (a NumPy Generator seeded
  with ``seed``, so the interval is reproducible), the ``(1 - level) / 2`` and
  ``(1 + level) / 2`` quantiles of the resampled statistic. :func:`bootstrap_interval_stratified`
  resamples within each stratum and takes the mean over strata of the strata's means.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

__all__ = [
    "MAX_SPLITS",
    "MONTE_CARLO",
    "Alternative",
    "bootstrap_interval",
    "bootstrap_interval_stratified",
    "is_exact",
    "permutation_test",
    "rank_sum_test",
    "sign_flip_test",
    "smallest_p",
    "smallest_p_sign_flip",
    "smallest_p_stratified",
    "stratified_permutation_test",
]

Alternative = Literal["two-sided", "less", "greater"]

#: Largest number of splits (or sign vectors) enumerated exactly: ``C(20, 10) = 184,756``, so
#: every split of 20 values is exact (``2^17`` sign vectors).
MAX_SPLITS = 200_000
#: Random splits drawn above :data:`MAX_SPLITS` (seeded: the p-value is reproducible).
MONTE_CARLO = 100_000
_RTOL = 1e-9


def _as_array(values: Sequence[float]) -> np.ndarray:
    x = np.asarray(values, np.float64).reshape(-1)
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite")
    return x


def _p_value(
    null: np.ndarray, observed: float, alternative: str, exact: bool, scale: float
) -> float:
    """``p`` of ``observed`` against the null statistics ``null`` (see the module docstring)."""
    tol = _RTOL * max(1.0, scale)
    extra = 0 if exact else 1
    total = null.size + extra
    less = (np.count_nonzero(null <= observed + tol) + extra) / total
    greater = (np.count_nonzero(null >= observed - tol) + extra) / total
    if alternative == "less":
        return float(less)
    if alternative == "greater":
        return float(greater)
    if alternative == "two-sided":
        return float(min(1.0, 2.0 * min(less, greater)))
    raise ValueError(f"unknown alternative {alternative!r}")


def _split_statistics(a: np.ndarray, b: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
    """``mean(a') - mean(b')`` for every split of the pooled values (or :data:`MONTE_CARLO`
    random ones when ``rng`` is given)."""
    pooled = np.concatenate([a, b])
    n, k = pooled.size, a.size
    total = pooled.sum()
    if rng is None:
        count = math.comb(n, k)
        index = np.fromiter(
            itertools.chain.from_iterable(itertools.combinations(range(n), k)),
            dtype=np.int64,
            count=count * k,
        ).reshape(count, k)
    else:
        index = np.argsort(rng.random((MONTE_CARLO, n)), axis=1)[:, :k]
    sums = pooled[index].sum(axis=1)
    return sums / k - (total - sums) / (n - k)


def is_exact(*splits: tuple[int, int]) -> bool:
    """Whether the test of strata with ``(n_a, n_b)`` each enumerates every split
    (``prod C(n_a + n_b, n_a) <= MAX_SPLITS``)."""
    return math.prod(math.comb(na + nb, na) for na, nb in splits) <= MAX_SPLITS


def permutation_test(
    a: Sequence[float],
    b: Sequence[float],
    alternative: Alternative = "two-sided",
    seed: int = 0,
) -> float:
    """The permutation test's p of ``T = mean(a) - mean(b)`` (module docstring): exact up to
    :data:`MAX_SPLITS` splits, else over :data:`MONTE_CARLO` random splits drawn with
    ``seed``. ``"less"``: the alternative is that ``a`` tends lower than ``b``.

    >>> round(permutation_test([1, 2, 3], [4, 5, 6]), 3)  # 2 / C(6, 3)
    0.1
    """
    return stratified_permutation_test([(a, b)], alternative, seed)


def stratified_permutation_test(
    strata: Sequence[tuple[Sequence[float], Sequence[float]]],
    alternative: Alternative = "two-sided",
    seed: int = 0,
) -> float:
    """The permutation test of ``T = (1 / S) sum_s (mean(a_s) - mean(b_s))`` over ``S`` strata
    ``(a_s, b_s)``, labels permuted within each stratum: exact over ``prod_s C(n_s, n_a,s)``
    splits up to :data:`MAX_SPLITS`, else :data:`MONTE_CARLO` random ones (``seed``)."""
    pairs = [(_as_array(a), _as_array(b)) for a, b in strata]
    if not pairs or any(a.size == 0 or b.size == 0 for a, b in pairs):
        raise ValueError("every stratum needs at least one value on each side")
    exact = is_exact(*((a.size, b.size) for a, b in pairs))
    rng = None if exact else np.random.default_rng(seed)
    observed = float(np.mean([a.mean() - b.mean() for a, b in pairs]))
    null = np.zeros(1)
    for a, b in pairs:
        each = _split_statistics(a, b, rng)
        # exact: every combination of the strata's splits; sampled: the strata's draws side by side
        null = np.add.outer(null, each).reshape(-1) if exact else null + each
    null = null / len(pairs)
    scale = max(float(np.max(np.abs(np.concatenate([np.concatenate(p) for p in pairs])))), 1.0)
    return _p_value(null, observed, alternative, exact, scale)


def _midranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(x.size, np.float64)
    sorted_x = x[order]
    i = 0
    while i < x.size:
        j = i
        while j + 1 < x.size and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def rank_sum_test(
    a: Sequence[float], b: Sequence[float], alternative: Alternative = "two-sided"
) -> float:
    """The exact Wilcoxon-Mann-Whitney rank-sum test: :func:`permutation_test` on the pooled
    mid-ranks (``T`` is then a function of the rank sum of ``a``; ties take mid-ranks).

    >>> # issue 53's hypervolumes: LLOME-MargE (16.20, 16.21, 17.48) vs LaMBO-2 (16.76, 17.02, 16.81)
    >>> rank_sum_test([16.20, 16.21, 17.48], [16.76, 17.02, 16.81], "less")  # 7 / 20
    0.35
    """
    x, y = _as_array(a), _as_array(b)
    ranks = _midranks(np.concatenate([x, y]))
    return permutation_test(ranks[: x.size], ranks[x.size :], alternative)


def sign_flip_test(
    differences: Sequence[float], alternative: Alternative = "two-sided", seed: int = 0
) -> float:
    """The one-sample sign-flip permutation test of ``T = sum_i d_i`` (module docstring): exact
    over the ``2^n`` sign vectors up to :data:`MAX_SPLITS`, else :data:`MONTE_CARLO` random ones
    (``seed``). ``"greater"``: the alternative is that ``d`` tends above 0.

    >>> sign_flip_test([0.1, 0.2, 0.3], "greater")  # 1 / 2^3
    0.125
    """
    d = _as_array(differences)
    if d.size == 0:
        raise ValueError("needs at least one difference")
    exact = 2**d.size <= MAX_SPLITS
    if exact:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
    else:
        signs = np.where(np.random.default_rng(seed).random((MONTE_CARLO, d.size)) < 0.5, -1.0, 1.0)
    null = signs @ d
    scale = max(float(np.abs(d).sum()), 1.0)
    return _p_value(null, float(d.sum()), alternative, exact, scale)


def smallest_p(n_a: int, n_b: int, alternative: Alternative = "two-sided") -> float:
    """The smallest p :func:`permutation_test` can return for ``n_a`` vs ``n_b`` values (reached
    when every value of one side is below every value of the other):
    ``2 / C(n_a + n_b, n_a)`` two-sided, ``1 / C(n_a + n_b, n_a)`` one-sided (1 with an empty
    side). 3 vs 3: 0.1; 4 vs 4: 0.029; 3 vs 4: 0.057."""
    return smallest_p_stratified([(n_a, n_b)], alternative)


def smallest_p_stratified(
    sizes: Sequence[tuple[int, int]], alternative: Alternative = "two-sided"
) -> float:
    """The smallest p :func:`stratified_permutation_test` can return for strata of ``(n_a, n_b)``
    values: ``2 / prod_s C(n_a,s + n_b,s, n_a,s)`` two-sided, half that one-sided (1 with an
    empty side or no stratum). One stratum: :func:`smallest_p`."""
    if not sizes or any(na <= 0 or nb <= 0 for na, nb in sizes):
        return 1.0
    splits = math.prod(math.comb(na + nb, na) for na, nb in sizes)
    return min(1.0, (2.0 if alternative == "two-sided" else 1.0) / splits)


def smallest_p_sign_flip(n: int, alternative: Alternative = "two-sided") -> float:
    """The smallest p :func:`sign_flip_test` can return for ``n`` differences: ``2 / 2^n``
    two-sided, ``1 / 2^n`` one-sided (1 for ``n = 0``). 3: 0.25 (0.125 one-sided); 5: 0.0625."""
    if n <= 0:
        return 1.0
    return min(1.0, (2.0 if alternative == "two-sided" else 1.0) / 2.0**n)


def bootstrap_interval(
    values: Sequence[float],
    stat: Callable[..., np.ndarray] = np.median,
    level: float = 0.95,
    num: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile bootstrap interval ``(lo, hi)`` of ``stat`` (called as
    ``stat(x, axis=1)`` on a ``[num, n]`` array, like ``np.median``): ``num`` resamples with
    replacement drawn by ``np.random.default_rng(seed)``, their statistic's
    ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles (linear interpolation). Deterministic
    for a given ``seed``; one value gives ``(v, v)``, none ``(nan, nan)``. With 3 seeds the
    interval of the median spans most of the range: it says how little 3 seeds pin down."""
    x = _as_array(values)
    if x.size == 0:
        return float("nan"), float("nan")
    if not 0.0 < level < 1.0:
        raise ValueError("level must be in (0, 1)")
    rng = np.random.default_rng(seed)
    resampled = x[rng.integers(0, x.size, size=(num, x.size))]
    stats = np.asarray(stat(resampled, axis=1), np.float64)
    lo, hi = np.quantile(stats, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(lo), float(hi)


def bootstrap_interval_stratified(
    strata: Sequence[Sequence[float]], level: float = 0.95, num: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """The percentile bootstrap interval of ``(1 / S) sum_s mean(x_s)``, the mean over ``S``
    strata (e.g. functions) of each stratum's mean: each resample draws ``n_s`` values with
    replacement within every stratum (one ``np.random.default_rng(seed)``, strata in order);
    ``(nan, nan)`` without a value."""
    groups = [_as_array(x) for x in strata if len(x)]
    if not groups or len(groups) < len(strata):
        return float("nan"), float("nan")
    if not 0.0 < level < 1.0:
        raise ValueError("level must be in (0, 1)")
    rng = np.random.default_rng(seed)
    total = np.zeros(num)
    for x in groups:
        total += x[rng.integers(0, x.size, size=(num, x.size))].mean(axis=1)
    lo, hi = np.quantile(total / len(groups), [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(lo), float(hi)
