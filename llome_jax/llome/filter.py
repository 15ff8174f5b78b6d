"""Filter: choose the ``j`` candidates of a round that the oracle will label.

Paper, App. "Algorithms", Alg. Filter(X, j)::

    X <- X minus S                                                # never label a sequence twice
    X <- {x in X : pi_theta(x) > p_min}                          # likelihood threshold
    X_feasible, X_infeasible <- split X by f(x) != -inf
    n_max_infeas <- |X_feasible| * p_max_infeas / (1 - p_max_infeas)
    X <- X_feasible  u  Sample(X_infeasible, n_max_infeas)       # cap the infeasible share
    X <- Sample(X, min(j, |X|))                                   # uniform subsample

The first line is implicit in the paper: its labelled set is a set (``S <- S u S_{i+1}``), so a
candidate that is already labelled (GA data, an earlier round, a seed) is never labelled again;
pass the archive as ``exclude``. The authors' code could relabel earlier rounds' sequences
(``exclude=None``).

The paper gives no value for ``p_min``; the authors' code (its selection of the j labelled
sequences) ranks by likelihood only to a cut at the 0.6 quantile, so both variants here express
``p_min`` as that quantile of the candidates' likelihoods by default. The **reference** variant
(``FilterConfig.reference()``) is the code: deduplicate (keep first), and *only if more than ``j``
rows remain* keep those with ``likelihood >= quantile_0.6``, then a uniform sample of ``min(j, n)``;
no infeasible cap.

``likelihood`` is ``exp(mean per-token log-prob)`` of the generated target (the reference's
``exp(loglikelihood)``); the caller passes the mean per-token log-prob. Rows with a NaN likelihood
(e.g. seeds that were never generated) fail any likelihood threshold.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

from llome_jax.llome.data import _permutation, _random_subset, first_occurrences
from llome_jax.metrics import rows_in

__all__ = ["FilterConfig", "FilterResult", "filter_candidates"]


@dataclasses.dataclass(frozen=True)
class FilterConfig:
    """Static settings of the Filter step. Defaults are the paper's algorithm.

    Attributes:
      num_selected: ``j``, sequences returned per round (2000 in the paper).
      likelihood_quantile: ``p_min`` as this quantile of the candidates' likelihoods (linear
        interpolation, as pandas); ``None`` to use ``likelihood_threshold`` or no threshold.
      likelihood_threshold: absolute ``p_min`` on ``exp(mean log-prob)``; exclusive with
        ``likelihood_quantile``.
      strict_threshold: keep ``likelihood > p_min`` (paper) rather than ``>=`` (reference).
      threshold_only_over_budget: apply the likelihood threshold only when more than
        ``num_selected`` candidates remain (reference); the paper always applies it.
      max_infeasible_fraction: ``p_max_infeas``; at most ``floor(F * p / (1 - p))`` infeasible
        candidates are kept for ``F`` feasible ones, before the subsample. ``None``: no cap
        (reference, which caps infeasible *pairs* instead, see ``PropEnConfig``).
      deduplicate: drop repeated sequences first, keeping the first occurrence (both variants;
        the paper deduplicates at the end of IterativeRefinement).
    """

    num_selected: int = 2000
    likelihood_quantile: float | None = 0.6
    likelihood_threshold: float | None = None
    strict_threshold: bool = True
    threshold_only_over_budget: bool = False
    max_infeasible_fraction: float | None = 0.1
    deduplicate: bool = True

    def __post_init__(self) -> None:
        if self.num_selected < 1:
            raise ValueError(f"num_selected (j) must be >= 1; got {self.num_selected}.")
        if self.likelihood_quantile is not None and self.likelihood_threshold is not None:
            raise ValueError("set likelihood_quantile or likelihood_threshold, not both.")
        q = self.likelihood_quantile
        if q is not None and not 0.0 <= q <= 1.0:
            raise ValueError(f"likelihood_quantile must be in [0, 1]; got {q}.")
        t = self.likelihood_threshold
        if t is not None and not math.isfinite(t):
            raise ValueError(f"likelihood_threshold must be finite; got {t}.")
        p = self.max_infeasible_fraction
        if p is not None and not 0.0 <= p < 1.0:
            raise ValueError(f"max_infeasible_fraction must be in [0, 1) or None; got {p}.")

    @classmethod
    def paper(cls, num_selected: int = 2000, **overrides: Any) -> FilterConfig:
        """The paper's Filter (the default): threshold always, strict, infeasible share <= 10%."""
        return cls(num_selected=num_selected, **overrides)

    @classmethod
    def reference(cls, num_selected: int = 2000, **overrides: Any) -> FilterConfig:
        """The authors' code: ``>=`` 0.6-quantile only when over budget, no infeasible cap."""
        settings: dict[str, Any] = dict(
            likelihood_quantile=0.6,
            likelihood_threshold=None,
            strict_threshold=False,
            threshold_only_over_budget=True,
            max_infeasible_fraction=None,
            deduplicate=True,
        )
        settings.update(overrides)
        return cls(num_selected=num_selected, **settings)


@dataclasses.dataclass(frozen=True)
class FilterResult:
    """Which candidates were selected, and how many survived each step.

    Attributes:
      indices: int64 ``[m]`` rows of the caller's arrays, ``m = min(j, survivors)``, random order.
      likelihood_threshold: ``p_min`` actually used (NaN when no threshold was applied).
      num_candidates: rows passed in.
      num_unique: after deduplication.
      num_novel: of those, not in ``exclude`` (already labelled); ``num_unique`` without it.
      num_above_threshold: after the likelihood threshold.
      num_infeasible_dropped: removed by the infeasible cap.
    """

    indices: np.ndarray
    likelihood_threshold: float
    num_candidates: int
    num_unique: int
    num_novel: int
    num_above_threshold: int
    num_infeasible_dropped: int

    def __len__(self) -> int:
        return int(self.indices.shape[0])


def filter_candidates(
    key: jax.Array,
    sequences: Any,
    log_likelihood: Any,
    feasible: Any | None = None,
    config: FilterConfig = FilterConfig(),
    *,
    exclude: Any | None = None,
) -> FilterResult:
    """Select ``j`` of the round's generated candidates for labelling (paper Alg. Filter).

    Args:
      key: PRNG key (infeasible subsample, final subsample).
      sequences: int ``[n, L]`` candidates (only used to deduplicate).
      log_likelihood: float ``[n]`` mean per-token log-prob of each candidate under the policy
        that generated it (NaN: unknown, fails any threshold).
      feasible: bool ``[n]`` (or float values, feasible where ``> -inf``); required when
        ``config.max_infeasible_fraction`` is set. For Ehrlich functions this is the cheap
        constraint check ``ehrlich.is_feasible`` (no objective value needed).
      config: :class:`FilterConfig`; ``FilterConfig.reference()`` for the authors' code.
      exclude: optional int ``[m, L]`` sequences already labelled (the archive). Candidates equal
        to one of them are removed right after deduplication, before the likelihood quantile is
        taken, so every selected sequence is new.

    Returns:
      :class:`FilterResult` whose ``indices`` select rows of ``sequences``.

    Example:
      >>> import jax, numpy as np
      >>> x = np.arange(10)[:, None] * np.ones((1, 3), int)      # 10 distinct sequences
      >>> logp = np.log(np.linspace(0.1, 1.0, 10))              # likelihoods 0.1 .. 1.0
      >>> cfg = FilterConfig(num_selected=3, likelihood_quantile=0.5, max_infeasible_fraction=None)
      >>> r = filter_candidates(jax.random.key(0), x, logp, config=cfg)
      >>> r.num_above_threshold, sorted(r.indices.tolist())[0] >= 5, len(r)
      (5, True, 3)
    """
    x = np.asarray(sequences)
    if x.ndim != 2:
        raise ValueError(f"sequences must be an array [n, L]; got shape {x.shape}.")
    n = x.shape[0]
    logp = np.asarray(log_likelihood, np.float64)
    if logp.shape != (n,):
        raise ValueError(f"log_likelihood must have shape [n] = [{n}]; got {logp.shape}.")
    if config.max_infeasible_fraction is not None:
        if feasible is None:
            raise ValueError(
                "feasible is required when max_infeasible_fraction is set "
                "(pass ehrlich.is_feasible(fn, sequences), or max_infeasible_fraction=None)."
            )
        feas = np.asarray(feasible)
        if feas.shape != (n,):
            raise ValueError(f"feasible must have shape [n] = [{n}]; got {feas.shape}.")
        if feas.dtype != np.bool_:
            feas = np.asarray(feas, np.float64) > -np.inf
    else:
        feas = None

    rows = first_occurrences(x) if config.deduplicate else np.arange(n, dtype=np.int64)
    num_unique = int(rows.size)
    if exclude is not None:
        labelled = np.asarray(exclude)
        labelled = labelled.reshape(0, x.shape[1]) if labelled.size == 0 else labelled
        rows = rows[~rows_in(x[rows], labelled)]
    num_novel = int(rows.size)

    threshold = float("nan")
    use_threshold = (
        config.likelihood_quantile is not None or config.likelihood_threshold is not None
    )
    if config.threshold_only_over_budget and rows.size <= config.num_selected:
        use_threshold = False
    if use_threshold:
        likelihood = np.exp(logp[rows])
        if config.likelihood_threshold is not None:
            threshold = float(config.likelihood_threshold)
        elif np.any(~np.isnan(likelihood)):
            threshold = float(np.nanquantile(likelihood, config.likelihood_quantile))
        with np.errstate(invalid="ignore"):
            keep = likelihood > threshold if config.strict_threshold else likelihood >= threshold
        rows = rows[keep]  # NaN likelihoods (or an all-NaN threshold) keep nothing
    num_above = int(rows.size)

    key_cap, key_sample = jax.random.split(key)
    dropped = 0
    if feas is not None:
        p = config.max_infeasible_fraction
        feasible_rows = rows[feas[rows]]
        infeasible_rows = rows[~feas[rows]]
        limit = math.floor(feasible_rows.size * p / (1.0 - p) + 1e-9)
        if infeasible_rows.size > limit:
            dropped = int(infeasible_rows.size - limit)
            infeasible_rows = infeasible_rows[_random_subset(key_cap, infeasible_rows.size, limit)]
        rows = np.sort(np.concatenate([feasible_rows, infeasible_rows]))

    order = _permutation(key_sample, rows.size)[: config.num_selected]
    return FilterResult(
        indices=rows[order],
        likelihood_threshold=threshold,
        num_candidates=n,
        num_unique=num_unique,
        num_novel=num_novel,
        num_above_threshold=num_above,
        num_infeasible_dropped=dropped,
    )
