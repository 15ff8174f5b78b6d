"""Seeds and the next-input rule of iterative refinement.

Paper, App. "Algorithms", Alg. IterativeRefinement(pi_theta; S):

* seeds ``X <- TopK(S, n_s)``: the ``n_s = 200`` best labelled sequences of the round by value;
* per seed, ``n_i = 10`` iterations; greedy decoding feeds its output to the next iteration; with
  sampling, ``x_{i+1} = argmax_{x' in X_i} pi_theta(x' | x_i)``: the highest-likelihood sample of
  *this* iteration.

The authors' code (its iterative generation; docs/design/llome_data.md) differs on both:

* seeds are the first 200 **rows of the round's training file** sorted by target value (the
  better member of each pair; DPO: the chosen one), duplicates allowed, so one sequence that is the
  target of many pairs can fill many seed slots (:func:`select_seeds_reference`);
* the next input is the highest-likelihood valid output **ever** produced in that trajectory
  (all iterations so far), the seed while there is none (``best_so_far=True``).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["next_refinement_inputs", "select_seeds", "select_seeds_reference"]


def select_seeds(key: jax.Array, values: Any, num_seeds: int = 200) -> np.ndarray:
    """Paper seeds: indices of the ``num_seeds`` highest values (``TopK(S, n_s)``).

    Ties are broken uniformly at random (many labelled sequences share a value on Ehrlich
    functions); infeasible (``-inf``/NaN) rows come last. Pass values of distinct sequences (the
    round's labelled set is deduplicated by the Filter).

    Args:
      key: PRNG key for tie-breaking.
      values: float ``[n]`` (higher is better).
      num_seeds: ``n_s``.

    Returns:
      int64 ``[min(n, num_seeds)]`` indices, best first.

    Example:
      >>> import jax, numpy as np
      >>> values = np.array([0.5, -np.inf, 1.0, 0.25, 0.5])
      >>> top = select_seeds(jax.random.key(0), values, 3)
      >>> int(top[0]), sorted(top[1:].tolist())     # 1.0 first, then the two tied 0.5
      (2, [0, 4])
    """
    v = np.asarray(values, np.float64)
    if v.ndim != 1:
        raise ValueError(f"values must be a 1-D array [n]; got shape {v.shape}.")
    if num_seeds < 1:
        raise ValueError(f"num_seeds must be >= 1; got {num_seeds}.")
    v = np.where(np.isnan(v), -np.inf, v)
    if v.size == 0:
        return np.zeros((0,), np.int64)
    tie_break = np.asarray(jax.random.uniform(key, (v.size,)))
    order = np.lexsort((tie_break, -v))
    return order[:num_seeds].astype(np.int64)


def select_seeds_reference(
    target_index: Any, target_value: Any, num_seeds: int = 200
) -> np.ndarray:
    """Reference seeds: targets of the first ``num_seeds`` training rows sorted by target value.

    The reference sorts the (already shuffled) pairs file by ``lower_score`` (DPO:
    ``chosen_score``) and takes the first 200 rows, keeping duplicates. We sort stably (pandas'
    default quicksort is not stable, so its order among equal values is arbitrary).

    Args:
      target_index: int ``[P]`` sequence index of each row's target (``PropEnPairs.target_index``
        or ``PreferenceTriples.chosen_index``), in the training file's order.
      target_value: float ``[P]`` the targets' values.
      num_seeds: number of rows.

    Returns:
      int64 ``[min(P, num_seeds)]`` sequence indices (may repeat), best first.

    Example:
      >>> select_seeds_reference([7, 3, 7, 9], [0.5, 0.75, 0.5, 0.25], 3).tolist()
      [3, 7, 7]
    """
    idx = np.asarray(target_index)
    v = np.asarray(target_value, np.float64)
    if idx.ndim != 1 or v.shape != idx.shape:
        raise ValueError(
            f"target_index and target_value must be 1-D of equal length; got {idx.shape}, {v.shape}."
        )
    if num_seeds < 1:
        raise ValueError(f"num_seeds must be >= 1; got {num_seeds}.")
    v = np.where(np.isnan(v), -np.inf, v)
    order = np.argsort(-v, kind="stable")[:num_seeds]
    return idx[order].astype(np.int64)


@functools.partial(jax.jit, static_argnames=("best_so_far",))
def next_refinement_inputs(
    inputs: jax.Array,
    best_log_likelihood: jax.Array,
    outputs: jax.Array,
    log_likelihood: jax.Array,
    valid: jax.Array,
    *,
    best_so_far: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """Choose each trajectory's next prompt from this iteration's outputs.

    Paper (``best_so_far=False``): the valid output with the highest likelihood in this
    iteration; the current input is kept if no output is valid. Reference (``True``): switch only
    if that output beats the best likelihood of the trajectory so far (strictly, so earlier entries
    win ties, as ``pandas.idxmax``); the seed stays while nothing valid has been produced.

    Args:
      inputs: int ``[B, L]`` current prompts (one per trajectory).
      best_log_likelihood: float ``[B]`` best likelihood so far (start with ``-inf``); ignored by
        the paper rule.
      outputs: int ``[B, n, L]`` this iteration's outputs (``n = 1`` greedy, ``n_o`` sampled).
      log_likelihood: float ``[B, n]`` their (mean per-token) log-likelihoods; NaN counts as
        ``-inf``.
      valid: bool ``[B, n]`` parsed, right length, tokens in range.
      best_so_far: the reference rule.

    Returns:
      ``(next_inputs [B, L], best_log_likelihood [B])``; the latter is the likelihood of the chosen
      prompt when it came from an output, carried over otherwise.
    """
    logp = jnp.where(valid & ~jnp.isnan(log_likelihood), log_likelihood, -jnp.inf)
    # First maximum among valid outputs (the first valid one if all their likelihoods are -inf).
    pick = jnp.where(
        jnp.max(logp, axis=1) > -jnp.inf, jnp.argmax(logp, axis=1), jnp.argmax(valid, axis=1)
    )
    pick_logp = jnp.take_along_axis(logp, pick[:, None], axis=1)[:, 0]
    pick_seq = jnp.take_along_axis(outputs, pick[:, None, None], axis=1)[:, 0]
    any_valid = jnp.any(valid, axis=1)
    switch = any_valid & (pick_logp > best_log_likelihood) if best_so_far else any_valid
    next_inputs = jnp.where(switch[:, None], pick_seq, inputs)
    best = jnp.where(switch, pick_logp, best_log_likelihood)
    return next_inputs.astype(inputs.dtype), best
