"""Special sequences of an Ehrlich instance: holo's constructive optimum, chain samples from
the stationary law (feasible) and uniform random sequences."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax.ehrlich.dispatch import evaluate
from llome_jax.ehrlich.dmp import sample_chain
from llome_jax.ehrlich.function import Ehrlich

__all__ = [
    "initial_solution",
    "optimal_solution",
    "random_solution",
]


def optimal_solution(fn: Ehrlich) -> jax.Array:
    """holo's constructive optimum: motifs placed end to end, gaps filled with repeats.

    Each motif occupies ``s_k + 1`` positions (element ``j`` at offset ``s_j``, every other
    position repeats the previous element); the tail repeats the last state. Transitions are then
    chain transitions of the motif sample or self-transitions, so the sequence is feasible.

    Returns:
      int32 ``[L]`` with ``evaluate(fn, x) == 1.0``.
    """
    motifs = np.asarray(fn.motifs)
    offsets = np.asarray(fn.offsets)
    length = fn.config.dim
    solution = []
    for motif, offset in zip(motifs, offsets):
        element = -1
        for position in range(int(offset[-1]) + 1):
            hits = np.nonzero(offset == position)[0]
            if hits.size:
                element = int(motif[hits[0]])
            solution.append(element)
    if len(solution) > length:
        raise ValueError(f"motifs end to end need {len(solution)} positions > dim={length}.")
    solution += [solution[-1]] * (length - len(solution))
    result = jnp.asarray(solution, jnp.int32)
    value = float(evaluate(fn, result))
    if value != 1.0:
        raise RuntimeError(
            f"the constructed optimum scores {value}, not 1.0: the instance is invalid."
        )
    return result


def initial_solution(key: jax.Array, fn: Ehrlich, n: int = 1) -> jax.Array:
    """``n`` chain samples of length ``L`` from the stationary law (feasible): int32 ``[n, L]``."""
    return sample_chain(key, fn.transition_matrix, fn.stationary_dist, fn.config.dim, n)


def random_solution(key: jax.Array, fn: Ehrlich, n: int = 1) -> jax.Array:
    """``n`` uniform random sequences (almost always infeasible for large ``v``): int32 ``[n, L]``."""
    return jax.random.randint(key, (n, fn.config.dim), 0, fn.config.num_states, dtype=jnp.int32)
