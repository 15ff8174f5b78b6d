"""Discrete Markov processes: banded ergodic transition matrices, stationary laws, chain samples.

Implements the paper's Appendix "Constructing the Transition Matrix" exactly as pytorch-holo does
(``sample_sparse_ergodic_transition_matrix``): a 0/1 band of half-width ``b`` that wraps around,
rows permuted, diagonal forced to 1, then ``softmax(Z / tau)`` masked and renormalised.
Instance construction runs once, eagerly, so the linear algebra here is NumPy (float64, exact
reachability test); chain sampling is jittable JAX.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "banded_mask",
    "is_ergodic",
    "sample_chain",
    "sample_transition_matrix",
    "stationary_distribution",
]


def banded_mask(num_states: int, bandwidth: int) -> np.ndarray:
    """0/1 band that wraps around: ``B[i, j] = 1`` iff ``(j - i) mod v`` lies in ``[-b, b]``.

    Returns:
      bool ``[v, v]``.
    """
    offsets = (np.arange(num_states)[None, :] - np.arange(num_states)[:, None]) % num_states
    return (offsets <= bandwidth) | (offsets >= num_states - bandwidth)


def is_ergodic(transition_matrix: np.ndarray) -> bool:
    """Perron-Frobenius test ``(A^m)_ij > 0`` for ``m = (v-1)^2 + 1`` (paper, App. A.3).

    Done on the 0/1 support with boolean matrix products (repeated squaring), so it is exact and
    cannot underflow; a positive ``A^m`` means the chain is irreducible and aperiodic.
    """
    support = np.asarray(transition_matrix) > 0
    v = support.shape[0]
    power = (v - 1) ** 2 + 1
    result = np.eye(v, dtype=bool)
    base = support.copy()
    while power:
        if power & 1:
            result = (result.astype(np.int64) @ base.astype(np.int64)) > 0
        base = (base.astype(np.int64) @ base.astype(np.int64)) > 0
        power >>= 1
    return bool(result.all())


def stationary_distribution(transition_matrix: np.ndarray) -> np.ndarray:
    """Solve ``pi^T A = pi^T``, ``sum(pi) = 1`` by least squares in float64 (holo uses QR).

    Returns:
      float32 ``[v]``.

    Raises:
      ValueError: if the system has no probability-vector solution (chain not ergodic).
    """
    a = np.asarray(transition_matrix, dtype=np.float64)
    v = a.shape[0]
    system = np.concatenate([(np.eye(v) - a).T, np.ones((1, v))], axis=0)
    rhs = np.zeros(v + 1)
    rhs[-1] = 1.0
    solution, *_ = np.linalg.lstsq(system, rhs, rcond=None)
    residual = np.linalg.norm(system @ solution - rhs)
    if residual > 1e-5 or np.any(solution < -1e-8):
        raise ValueError(
            "stationary distribution does not exist: the transition matrix is not ergodic."
        )
    solution = np.clip(solution, 0.0, None)
    return (solution / solution.sum()).astype(np.float32)


def sample_transition_matrix(
    key: jax.Array,
    num_states: int,
    bandwidth: int,
    softmax_temp: float = 0.5,
    repeats_always_possible: bool = True,
) -> np.ndarray:
    """Sample a sparse ergodic transition matrix as the reference does (paper App. A.3).

    ``Z ~ N(0, 1)^{v x v}``; ``D = softmax(Z / tau)`` row-wise; ``B = band(v, b)[perm]`` with the
    diagonal set to 1; ``A = (D * B) / rowsum(D * B)`` (float32).

    Raises:
      ValueError: if the sampled matrix is not ergodic (possible for tiny ``v``; try another key).
    """
    if softmax_temp <= 0:
        raise ValueError(f"softmax_temp must be > 0, got {softmax_temp}.")
    key_logits, key_perm = jax.random.split(key)
    logits = jax.random.normal(key_logits, (num_states, num_states), dtype=jnp.float32)
    dense = np.asarray(jax.nn.softmax(logits / softmax_temp, axis=-1))
    permutation = np.asarray(jax.random.permutation(key_perm, num_states))
    mask = banded_mask(num_states, bandwidth)[permutation]
    if repeats_always_possible:
        mask = mask | np.eye(num_states, dtype=bool)
    masked = np.where(mask, dense, np.float32(0.0)).astype(np.float32)
    matrix = (masked / masked.sum(axis=-1, keepdims=True)).astype(np.float32)
    if not is_ergodic(matrix):
        raise ValueError(
            f"the sampled {num_states}-state transition matrix (bandwidth {bandwidth}) is not "
            "ergodic; use another key or more states (bandwidth int(0.4 v) >= 1 needs v >= 3)."
        )
    return matrix


def sample_chain(
    key: jax.Array,
    transition_matrix: jax.Array,
    initial_dist: jax.Array,
    length: int,
    num_samples: int,
) -> jax.Array:
    """Sample ``num_samples`` chains of ``length`` states (first state from ``initial_dist``).

    Args:
      key: PRNG key.
      transition_matrix: float ``[v, v]`` row-stochastic.
      initial_dist: float ``[v]`` law of the first state.
      length: number of states per chain (static).
      num_samples: number of chains (static).

    Returns:
      int32 ``[num_samples, length]``.
    """
    log_p = jnp.log(jnp.asarray(transition_matrix, jnp.float32))
    key_first, key_rest = jax.random.split(key)
    first = jax.random.categorical(
        key_first, jnp.log(jnp.asarray(initial_dist, jnp.float32)), shape=(num_samples,)
    )

    if length == 1:
        return first[:, None].astype(jnp.int32)
    # log_p rides in the carry, not in a closure: an eager scan of a module-level step is
    # compiled once per shape, not once per instance (1,000 instances of a pretraining pool
    # compiled 1,000 scans, each an executable holding memory mappings); the same operations
    _, rest = jax.lax.scan(_chain_step, (first, log_p), jax.random.split(key_rest, length - 1))
    return jnp.concatenate([first[:, None], rest.T], axis=1).astype(jnp.int32)


def _chain_step(
    carry: tuple[jax.Array, jax.Array], step_key: jax.Array
) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
    """One step of :func:`sample_chain`: the next states drawn from the rows ``log_p[state]``."""
    state, log_p = carry
    nxt = jax.random.categorical(step_key, log_p[state], axis=-1)
    return (nxt, log_p), nxt
