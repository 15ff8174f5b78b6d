"""The paper's genetic algorithm, one generation at a time (App. "Genetic Algorithm", Algs. 2-4).

Semantics follow the reference, ``holo.optim.DiscreteEvolution`` (pytorch-holo 0.0.5), with the
paper's initialisation:

* the population starts as ``n`` copies of the initial solution, mutated (``mutate({x*}, p_m, n)``);
* each generation: evaluate; the survival threshold ``tau`` is the ``(1 - alpha)`` quantile of the
  values (linear interpolation, as ``torch.quantile``); particles with ``f >= tau`` survive (ties
  may keep more than ``alpha n``); if ``tau`` is ``-inf`` (an infeasible particle enters the
  interpolation) everybody survives, exactly as holo's NaN/inf threshold does;
* every non-survivor is replaced by a uniform recombination of two survivors drawn uniformly with
  replacement (each position from parent 1 with probability ``p_r``, else from parent 2);
* every particle, survivors included, is mutated (each position replaced by a uniform state with
  probability ``p_m``; the new state may equal the old one).

Infeasible particles score ``-inf`` and so count as the worst value. Higher is better.

The API follows evosax: ``init(key, initial_solution, config, num_states, initial_value)`` ->
``GAState``; ``ask(key, state, config, num_states)`` -> the ``[n, L]`` population to evaluate
(generation 0: the initial mutated copies); ``tell(population, values, state)`` -> ``GAState``.
This module holds the per-generation pieces (config, state, the operators, ``ask``/``tell`` and
the unique-row counts) and imports only jax and numpy; whole runs of many generations
(``run``, ``start``/``advance``, ``run_archive``) are :mod:`llome_jax.ga.loop`.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp

__all__ = [
    "GAConfig",
    "GAState",
    "approx_count_unique_rows",
    "ask",
    "count_unique_rows",
    "init",
    "mutate",
    "random_bits",
    "recombine",
    "sorted_unique_rows",
    "survival_mask",
    "tell",
]


# ---------------------------------------------------------------------------------------------
# Configuration and state
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class GAConfig:
    """Static GA settings (the paper's values are the defaults).

    Attributes:
      num_particles: population size ``n``.
      survival_quantile: ``alpha``: the fraction of the population kept each generation; must lie
        in ``(2/n, 1)`` so that at least two parents survive.
      mutation_prob: ``p_m``: per-position probability of a uniform substitution.
      recombine_prob: ``p_r``: per-position probability of taking parent 1's token.
    """

    num_particles: int = 1000
    survival_quantile: float = 0.1
    mutation_prob: float = 0.005
    recombine_prob: float = 0.0882

    def __post_init__(self) -> None:
        n = self.num_particles
        if isinstance(n, bool) or not isinstance(n, int) or n < 3:
            raise ValueError(f"num_particles must be an int >= 3, got {n!r}.")
        for name in ("mutation_prob", "recombine_prob"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
                raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}.")
        alpha = self.survival_quantile
        if not (isinstance(alpha, int | float) and 2.0 / n < alpha < 1.0):
            raise ValueError(
                f"survival_quantile={alpha!r} must lie in (2/n, 1) = ({2.0 / n:g}, 1) so that at "
                "least two parents survive; raise it or use more particles."
            )


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=[
        "population",
        "values",
        "best_sequence",
        "best_value",
        "generation",
        "num_evaluations",
    ],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class GAState:
    """GA state (a pytree).

    Attributes:
      population: int32 ``[n, L]`` the particles of the current generation.
      values: float32 ``[n]`` their values (``-inf`` before the first evaluation).
      best_sequence: int32 ``[L]`` best sequence seen so far.
      best_value: float32 ``[]`` its value.
      generation: int32 ``[]`` generations evaluated so far.
      num_evaluations: int32 ``[]`` oracle calls so far (``n`` per generation).
    """

    population: jax.Array
    values: jax.Array
    best_sequence: jax.Array
    best_value: jax.Array
    generation: jax.Array
    num_evaluations: jax.Array


# ---------------------------------------------------------------------------------------------
# Operators (module-level pure functions)
# ---------------------------------------------------------------------------------------------
_GOLDEN = 0x9E3779B9


def _fmix32(x: jax.Array) -> jax.Array:
    """murmur3's 32-bit finaliser (a bijective avalanche mix)."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def random_bits(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Uniform uint32 bits for the per-position GA operators, ~15x cheaper than threefry on CPU.

    Two rounds of murmur3's finaliser over the element's global index, keyed by 64 bits drawn from
    ``key`` with ``jax.random``. Deterministic per key, independent across keys, and a function of
    the global index only, so sharded and unsharded runs draw identical bits. Statistical quality
    is ample for mutation/crossover masks (tested against binomial bounds); it is not a
    cryptographic or general-purpose generator.
    """
    seed = jax.random.bits(key, (2,), jnp.uint32)
    size = math.prod(shape)
    counter = jax.lax.iota(jnp.uint32, size).reshape(shape)
    return _fmix32(_fmix32(counter * jnp.uint32(_GOLDEN) + seed[0]) ^ seed[1])


def _probability_threshold(probability: float) -> int:
    """``round(p 2^32)`` clipped to uint32, so that ``bits < threshold`` has probability ``p``."""
    return int(min(max(round(probability * 2.0**32), 0), 2**32 - 1))


def mutate(
    key: jax.Array, population: jax.Array, mutation_prob: float, num_states: int
) -> jax.Array:
    """Replace each position by a uniform state with probability ``p_m`` (paper Alg. 3).

    One 32-bit draw ``u`` per position serves both decisions: the position mutates iff
    ``u < T = round(p_m 2^32)``, and then ``u`` is uniform on ``[0, T)``, so ``u // ceil(T / v)``
    is the new state (relative bias at most ``v / T``, 1.5e-6 for the paper's settings). When
    ``T`` is too small for that (tiny ``p_m``) a second draw is used.

    Args:
      key: PRNG key.
      population: int ``[n, L]``.
      mutation_prob: ``p_m`` (static).
      num_states: ``v``.

    Returns:
      int32 ``[n, L]``.
    """
    population = population.astype(jnp.int32)
    if mutation_prob >= 1.0:
        key_states = key
        mask = jnp.ones(population.shape, bool)
        states = (random_bits(key_states, population.shape) % jnp.uint32(num_states)).astype(
            jnp.int32
        )
        return jnp.where(mask, states, population)
    threshold = _probability_threshold(mutation_prob)
    bits = random_bits(key, population.shape)
    mask = bits < jnp.uint32(threshold)
    if threshold >= num_states << 16:
        width = -(-threshold // num_states)
        states = (bits // jnp.uint32(width)).astype(jnp.int32)
    else:
        extra = random_bits(jax.random.fold_in(key, 1), population.shape)
        states = (extra % jnp.uint32(num_states)).astype(jnp.int32)
    return jnp.where(mask, states, population)


def recombine(
    key: jax.Array, parent_1: jax.Array, parent_2: jax.Array, recombine_prob: float
) -> jax.Array:
    """Uniform crossover: each position from ``parent_1`` with probability ``p_r`` (paper Alg. 4)."""
    if recombine_prob >= 1.0:
        return parent_1
    mask = random_bits(key, parent_1.shape) < jnp.uint32(_probability_threshold(recombine_prob))
    return jnp.where(mask, parent_1, parent_2)


def survival_threshold(values: jax.Array, survival_quantile: float) -> jax.Array:
    """The ``(1 - alpha)`` quantile of ``values`` (linear interpolation, as ``torch.quantile``).

    Only the two order statistics around position ``(1 - alpha)(n - 1)`` are needed, so they are
    read off ``lax.top_k`` (several times faster than a full sort on CPU). Returns ``-inf`` when an
    infeasible (``-inf``) value enters the interpolation.
    """
    n = values.shape[0]
    position = (1.0 - survival_quantile) * (n - 1)
    low, high = math.floor(position), math.ceil(position)
    largest, _ = jax.lax.top_k(values, n - low)  # descending; ascending index i is largest[n-1-i]
    below, above = largest[n - 1 - low], largest[n - 1 - high]
    interpolated = below + jnp.float32(position - low) * (above - below)
    return jnp.where(jnp.isneginf(below), -jnp.inf, interpolated)


def survival_mask(values: jax.Array, survival_quantile: float) -> jax.Array:
    """Survivors: ``f >= tau`` (everybody if ``tau = -inf``). bool ``[n]``."""
    threshold = survival_threshold(values, survival_quantile)
    return (values >= threshold) | jnp.isneginf(threshold)


def _sample_survivors(key: jax.Array, survivors: jax.Array, num: int) -> jax.Array:
    """Indices of ``num`` survivors drawn uniformly with replacement (fixed shapes)."""
    cumulative = jnp.cumsum(survivors.astype(jnp.int32))
    rank = jax.random.randint(key, (num,), 0, cumulative[-1])  # which survivor
    return jnp.searchsorted(cumulative, rank, side="right").astype(jnp.int32)


# ---------------------------------------------------------------------------------------------
# init / ask / tell
# ---------------------------------------------------------------------------------------------
def init(
    key: jax.Array,
    initial_solution: jax.Array,
    config: GAConfig,
    num_states: int,
    initial_value: jax.Array | float = -jnp.inf,
) -> GAState:
    """``n`` mutated copies of the initial solution (paper Alg. 2, line 1).

    Args:
      key: PRNG key.
      initial_solution: int ``[L]``.
      config: GA settings.
      num_states: ``v``.
      initial_value: ``f(initial_solution)`` if known (seeds the best-so-far).
    """
    x0 = jnp.asarray(initial_solution, jnp.int32)
    copies = jnp.broadcast_to(x0, (config.num_particles, x0.shape[-1]))
    return GAState(
        population=mutate(key, copies, config.mutation_prob, num_states),
        values=jnp.full((config.num_particles,), -jnp.inf, jnp.float32),
        best_sequence=x0,
        best_value=jnp.asarray(initial_value, jnp.float32),
        generation=jnp.zeros((), jnp.int32),
        num_evaluations=jnp.zeros((), jnp.int32),
    )


def ask(key: jax.Array, state: GAState, config: GAConfig, num_states: int) -> jax.Array:
    """The next population to evaluate (paper Alg. 2, lines 8-11).

    In generation 0 this is the initial (mutated) population; afterwards survivors of the last
    evaluated population are kept, the others replaced by recombinations of random survivor pairs,
    and every particle is mutated.

    Returns:
      int32 ``[n, L]``.
    """

    def evolve(key: jax.Array) -> jax.Array:
        key_parents_1, key_parents_2, key_cross, key_mutate = jax.random.split(key, 4)
        n = config.num_particles
        survivors = survival_mask(state.values, config.survival_quantile)
        parent_1 = state.population[_sample_survivors(key_parents_1, survivors, n)]
        parent_2 = state.population[_sample_survivors(key_parents_2, survivors, n)]
        children = recombine(key_cross, parent_1, parent_2, config.recombine_prob)
        refilled = jnp.where(survivors[:, None], state.population, children)
        return mutate(key_mutate, refilled, config.mutation_prob, num_states)

    return jax.lax.cond(state.generation == 0, lambda _: state.population, evolve, key)


def tell(population: jax.Array, values: jax.Array, state: GAState) -> GAState:
    """Record an evaluated population and update the best-so-far (paper Alg. 2, lines 4-7)."""
    values = jnp.asarray(values, jnp.float32)
    best_index = jnp.argmax(values)
    improved = values[best_index] > state.best_value
    return dataclasses.replace(
        state,
        population=population,
        values=values,
        best_sequence=jnp.where(improved, population[best_index], state.best_sequence),
        best_value=jnp.where(improved, values[best_index], state.best_value),
        generation=state.generation + 1,
        num_evaluations=state.num_evaluations + population.shape[0],
    )


# ---------------------------------------------------------------------------------------------
# Distinct rows (exact sort, 32-bit hash)
# ---------------------------------------------------------------------------------------------
def _pack_rows(rows: jax.Array, num_states: int) -> list[jax.Array]:
    """Pack int rows ``[n, L]`` (states < v) into few uint32 sort keys, order-preserving."""
    bits = max(1, math.ceil(math.log2(max(num_states, 2) + 1)))  # +1: room for a -1 sentinel
    per_word = max(1, 32 // bits)
    shifted = (rows.astype(jnp.int32) + 1).astype(jnp.uint32)  # -1 padding -> 0
    keys = []
    for start in range(0, rows.shape[1], per_word):
        word = jnp.zeros(rows.shape[0], jnp.uint32)
        for offset in range(min(per_word, rows.shape[1] - start)):
            word = (word << bits) | shifted[:, start + offset]
        keys.append(word)
    return keys


def sorted_unique_rows(
    rows: jax.Array, num_states: int, order: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Sort rows lexicographically (ties broken by ``order``); flag the first of each group.

    Args:
      rows: int ``[n, L]`` with states in ``[-1, v)`` (-1: padding).
      num_states: ``v``.
      order: int32 ``[n]`` tie-breaker (e.g. evaluation order: the smallest is "first").

    Returns:
      ``(permutation [n], is_first [n])``: ``rows[permutation]`` is sorted and ``is_first[i]``
      marks the first occurrence (smallest ``order``) of each distinct row in that order.
    """
    keys = _pack_rows(rows, num_states)
    index = jnp.arange(rows.shape[0], dtype=jnp.int32)
    sorted_operands = jax.lax.sort((*keys, order, index), num_keys=len(keys) + 1)
    sorted_keys, permutation = sorted_operands[: len(keys)], sorted_operands[-1]
    differs = jnp.zeros(rows.shape[0] - 1, bool)
    for k in sorted_keys:
        differs = differs | (k[1:] != k[:-1])
    is_first = jnp.concatenate([jnp.ones(1, bool), differs])
    return permutation, is_first


def count_unique_rows(rows: jax.Array, num_states: int) -> jax.Array:
    """Number of distinct rows of an int ``[n, L]`` array (exact, sort-based). int32 ``[]``."""
    _, is_first = sorted_unique_rows(rows, num_states, jnp.zeros(rows.shape[0], jnp.int32))
    return jnp.sum(is_first.astype(jnp.int32))


def _row_hash(rows: jax.Array) -> jax.Array:
    """A 32-bit hash per row: ``fmix32(sum_t (x_t + 1) r_t)`` with fixed odd multipliers ``r_t``.

    Two rows differing in one position never collide; otherwise collisions have probability
    about ``2^-32``.
    """
    positions = jax.lax.iota(jnp.uint32, rows.shape[-1])
    multipliers = _fmix32(positions * jnp.uint32(_GOLDEN) + jnp.uint32(0x243F6A88)) | jnp.uint32(1)
    total = jnp.sum(
        (rows.astype(jnp.uint32) + jnp.uint32(1)) * multipliers, axis=-1, dtype=jnp.uint32
    )
    return _fmix32(total)


def approx_count_unique_rows(rows: jax.Array) -> jax.Array:
    """Distinct rows of ``[n, L]`` counted by sorting a 32-bit row hash (one sort key).

    Used for the per-generation ``frac_unique`` statistic, where it is ~10x cheaper than the exact
    multi-key sort of :func:`count_unique_rows`; two distinct rows are merged only on a hash
    collision (about ``n^2 / 2^33``, i.e. 1e-4 per generation for ``n = 1000``).
    """
    hashes = jnp.sort(_row_hash(rows))
    return 1 + jnp.sum((hashes[1:] != hashes[:-1]).astype(jnp.int32))
