"""The Filter step (paper Alg. Filter; the authors' selection rule) on constructed candidates."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from llome_jax.llome import FilterConfig, filter_candidates


def distinct(n: int, length: int = 4) -> np.ndarray:
    """n distinct sequences (row i encodes i in base 7)."""
    return np.stack([(np.arange(n) // 7**p) % 7 for p in range(length)], axis=1).astype(np.int32)


NO_CAP = dict(max_infeasible_fraction=None)


def test_paper_threshold_is_strict_quantile():
    x = distinct(10)
    logp = np.log(np.linspace(0.1, 1.0, 10))  # likelihoods 0.1 .. 1.0
    # 0.6 quantile (linear) = 0.1 + 5.4 * 0.1 = 0.64  ->  keep 0.7, 0.8, 0.9, 1.0
    r = filter_candidates(
        jax.random.key(0), x, logp, config=FilterConfig(num_selected=100, **NO_CAP)
    )
    assert sorted(r.indices.tolist()) == [6, 7, 8, 9]
    assert r.likelihood_threshold == pytest.approx(0.64)
    assert (r.num_candidates, r.num_unique, r.num_above_threshold) == (10, 10, 4)


def test_strict_vs_reference_at_tied_quantile():
    x = distinct(10)
    logp = np.log(np.array([0.5] * 5 + [1.0] * 5))  # 0.6 quantile is exactly 1.0
    paper = filter_candidates(
        jax.random.key(0), x, logp, config=FilterConfig(num_selected=4, **NO_CAP)
    )
    assert len(paper) == 0 and paper.likelihood_threshold == pytest.approx(1.0)
    ref = filter_candidates(
        jax.random.key(0), x, logp, config=FilterConfig.reference(num_selected=4)
    )
    assert ref.num_above_threshold == 5 and len(ref) == 4
    assert set(ref.indices.tolist()) <= {5, 6, 7, 8, 9}


def test_reference_applies_threshold_only_over_budget():
    x = distinct(10)
    logp = np.log(np.linspace(0.1, 1.0, 10))
    logp[0] = np.nan  # a seed without likelihood
    under = filter_candidates(
        jax.random.key(0), x, logp, config=FilterConfig.reference(num_selected=10)
    )
    assert sorted(under.indices.tolist()) == list(range(10))  # nothing filtered, NaN kept
    assert np.isnan(under.likelihood_threshold)
    over = filter_candidates(
        jax.random.key(0), x, logp, config=FilterConfig.reference(num_selected=9)
    )
    # quantile over the 9 non-NaN likelihoods 0.2..1.0: 0.2 + 4.8 * 0.1 = 0.68 -> 0.7 .. 1.0
    assert sorted(over.indices.tolist()) == [6, 7, 8, 9]
    paper = filter_candidates(
        jax.random.key(0), x, logp, config=FilterConfig(num_selected=10, **NO_CAP)
    )
    assert 0 not in paper.indices.tolist()  # the paper always thresholds: NaN never passes


def test_absolute_threshold_and_no_threshold():
    x = distinct(6)
    logp = np.log(np.array([0.2, 0.5, 0.5, 0.9, np.nan, 0.7]))
    cfg = FilterConfig(
        num_selected=10, likelihood_quantile=None, likelihood_threshold=0.5, **NO_CAP
    )
    assert sorted(filter_candidates(jax.random.key(0), x, logp, config=cfg).indices.tolist()) == [
        3,
        5,
    ]
    none = FilterConfig(num_selected=10, likelihood_quantile=None, **NO_CAP)
    assert len(filter_candidates(jax.random.key(0), x, logp, config=none)) == 6


@pytest.mark.parametrize(
    ("num_feasible", "expected_infeasible"), [(45, 5), (44, 4), (9, 1), (8, 0)]
)
def test_infeasible_cap(num_feasible, expected_infeasible):
    n = num_feasible + 20
    x = distinct(n)
    feasible = np.arange(n) < num_feasible
    cfg = FilterConfig(num_selected=1000, likelihood_quantile=None)  # paper cap p = 0.1
    r = filter_candidates(jax.random.key(1), x, np.zeros(n), feasible, cfg)
    kept = r.indices
    assert feasible[kept].sum() == num_feasible  # every feasible candidate kept
    assert (~feasible[kept]).sum() == expected_infeasible  # floor(F * 0.1 / 0.9)
    assert (~feasible[kept]).mean() <= 0.1
    assert r.num_infeasible_dropped == 20 - expected_infeasible
    # values instead of booleans: -inf marks infeasible
    values = np.where(feasible, 0.5, -np.inf)
    r2 = filter_candidates(jax.random.key(1), x, np.zeros(n), values, cfg)
    np.testing.assert_array_equal(r.indices, r2.indices)


def test_subsample_after_threshold_and_cap():
    n = 400
    x = distinct(n)
    rng = np.random.default_rng(0)
    likelihood = rng.uniform(0.05, 1.0, n)
    feasible = rng.random(n) < 0.5
    cfg = FilterConfig(num_selected=50)
    r = filter_candidates(jax.random.key(2), x, np.log(likelihood), feasible, cfg)
    threshold = np.quantile(likelihood, 0.6)
    above = likelihood > threshold
    assert r.num_above_threshold == above.sum()
    assert len(r) == 50 and len(set(r.indices.tolist())) == 50
    assert np.all(likelihood[r.indices] > threshold)
    survivors_infeasible = np.floor((above & feasible).sum() * 0.1 / 0.9 + 1e-9)
    assert r.num_infeasible_dropped == (above & ~feasible).sum() - survivors_infeasible
    # determinism per key, and a different key gives a different sample
    again = filter_candidates(jax.random.key(2), x, np.log(likelihood), feasible, cfg)
    other = filter_candidates(jax.random.key(3), x, np.log(likelihood), feasible, cfg)
    np.testing.assert_array_equal(r.indices, again.indices)
    assert set(r.indices.tolist()) != set(other.indices.tolist())


def test_deduplicates_keeping_first():
    x = np.array([[1, 1], [2, 2], [1, 1], [3, 3], [2, 2]])
    logp = np.log(np.array([0.1, 0.9, 0.95, 0.5, 0.2]))
    cfg = FilterConfig(num_selected=10, likelihood_quantile=None, **NO_CAP)
    r = filter_candidates(jax.random.key(0), x, logp, config=cfg)
    assert sorted(r.indices.tolist()) == [0, 1, 3] and r.num_unique == 3
    # the kept copy's likelihood is the first one's: row 0 (0.1) fails a 0.3 threshold
    cfg = FilterConfig(
        num_selected=10, likelihood_quantile=None, likelihood_threshold=0.3, **NO_CAP
    )
    assert sorted(filter_candidates(jax.random.key(0), x, logp, config=cfg).indices.tolist()) == [
        1,
        3,
    ]


def test_already_labelled_candidates_are_never_selected():
    """``exclude`` (the archive) removes candidates before the quantile and the draw of j."""
    x = distinct(10)
    logp = np.log(np.linspace(0.1, 1.0, 10))
    archive = np.concatenate([x[[9, 8, 2]], distinct(60)[50:]])  # three candidates, 10 others
    config = FilterConfig(num_selected=100, **NO_CAP)
    r = filter_candidates(jax.random.key(0), x, logp, config=config, exclude=archive)
    # novel: rows 0, 1, 3..7 with likelihoods 0.1 0.2 0.4 0.5 0.6 0.7 0.8; their 0.6 quantile is
    # at position 0.6 * 6 = 3.6 of the sorted values: 0.5 + 0.6 * 0.1 = 0.56 -> keep 0.6, 0.7, 0.8
    assert (r.num_unique, r.num_novel) == (10, 7)
    assert r.likelihood_threshold == pytest.approx(0.56)
    assert sorted(r.indices.tolist()) == [5, 6, 7]
    # without the archive the two best candidates would be drawn again
    again = filter_candidates(jax.random.key(0), x, logp, config=config)
    assert sorted(again.indices.tolist()) == [6, 7, 8, 9] and again.num_novel == 10
    # every candidate labelled already: nothing to label; an empty archive excludes nothing
    none = filter_candidates(jax.random.key(0), x, logp, config=config, exclude=x)
    assert len(none) == 0 and none.num_novel == 0
    empty = filter_candidates(
        jax.random.key(0), x, logp, config=config, exclude=np.zeros((0, 4), np.int32)
    )
    np.testing.assert_array_equal(np.sort(empty.indices), np.sort(again.indices))
    with pytest.raises(ValueError, match="share L"):
        filter_candidates(jax.random.key(0), x, logp, config=config, exclude=distinct(3, 5))


def test_bad_input():
    x = distinct(4)
    with pytest.raises(ValueError, match="feasible is required"):
        filter_candidates(jax.random.key(0), x, np.zeros(4))
    with pytest.raises(ValueError, match="shape"):
        filter_candidates(jax.random.key(0), x, np.zeros(3), config=FilterConfig(**NO_CAP))
    with pytest.raises(ValueError, match="not both"):
        FilterConfig(likelihood_threshold=0.5)
    with pytest.raises(ValueError, match="num_selected"):
        FilterConfig(num_selected=0)
