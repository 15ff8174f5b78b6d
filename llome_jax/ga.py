"""The paper's genetic algorithm as pure jitted functions (App. "Genetic Algorithm", Algs. 2-4).

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
``run`` scans ``ask/evaluate/tell`` over generations under one
``lax.scan``; ``jax.vmap(run, in_axes=(0, ...))`` runs many seeds in one call. ``run_archive``
records every evaluated sequence of the first ``n0`` generations (the seed data of LLOME and
LaMBO-2). This module imports only jax, numpy, :mod:`llome_jax.ehrlich` and
:mod:`llome_jax.objective`.

**What ``fn`` may be.** An Ehrlich instance, or a :class:`~llome_jax.objective.Objective`. An
objective made from an Ehrlich instance runs exactly as that instance; a traceable objective (a
jitted JAX ``evaluate``) runs inside the same jitted ``lax.scan``; any other objective (NumPy or
Python code) runs the same generations from a host loop (``start``/``advance`` dispatch): per
generation the jitted ``ask`` proposes, the objective labels on the host (one checked call of
``n`` sequences), the jitted ``tell`` updates. Same keys, same populations: the host loop and
the scan give identical results for the same values.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax import ehrlich
from llome_jax.objective import Objective

__all__ = [
    "GAArchive",
    "GAConfig",
    "GAState",
    "GATrace",
    "advance",
    "approx_count_unique_rows",
    "archive_from_trajectory",
    "ask",
    "count_unique_rows",
    "generation_keys",
    "init",
    "mutate",
    "on_host",
    "random_bits",
    "recombine",
    "run",
    "run_archive",
    "start",
    "survival_mask",
    "tell",
    "validate_ga_inputs",
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


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=[
        "best_value",
        "generation_best",
        "mean_feasible_value",
        "frac_feasible",
        "frac_unique",
        "num_evaluations",
    ],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class GATrace:
    """Per-generation statistics, each ``[T]`` (or ``[seeds, T]`` under vmap).

    Attributes:
      best_value: best value seen so far (including the initial solution).
      generation_best: best value in this generation's population.
      mean_feasible_value: mean value of the feasible particles (NaN if none).
      frac_feasible: fraction of feasible particles.
      frac_unique: fraction of distinct particles.
      num_evaluations: oracle calls so far.
    """

    best_value: jax.Array
    generation_best: jax.Array
    mean_feasible_value: jax.Array
    frac_feasible: jax.Array
    frac_unique: jax.Array
    num_evaluations: jax.Array


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["sequences", "values", "generations", "count"],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class GAArchive:
    """Deduplicated evaluated sequences (fixed capacity; rows ``>= count`` are padding).

    Attributes:
      sequences: int32 ``[capacity, L]`` (padding rows are -1).
      values: float32 ``[capacity]`` (padding is NaN).
      generations: int32 ``[capacity]`` generation (1-based) of first evaluation (padding -1).
      count: int32 ``[]`` number of valid rows.
    """

    sequences: jax.Array
    values: jax.Array
    generations: jax.Array
    count: jax.Array

    def to_numpy(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The valid rows as numpy ``(sequences [count, L], values [count], generations [count])``."""
        n = int(self.count)
        return (
            np.asarray(self.sequences[:n]),
            np.asarray(self.values[:n]),
            np.asarray(self.generations[:n]),
        )


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
# Statistics
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


def _sorted_unique(
    rows: jax.Array, num_states: int, order: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Sort rows lexicographically (ties broken by ``order``); flag the first of each group.

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
    _, is_first = _sorted_unique(rows, num_states, jnp.zeros(rows.shape[0], jnp.int32))
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


def _generation_stats(population: jax.Array, values: jax.Array, state: GAState, num_states: int):
    feasible = jnp.isfinite(values)
    num_feasible = jnp.sum(feasible)
    mean_feasible = jnp.where(
        num_feasible > 0,
        jnp.sum(jnp.where(feasible, values, 0.0)) / jnp.maximum(num_feasible, 1),
        jnp.nan,
    )
    n = population.shape[0]
    return GATrace(
        best_value=state.best_value,
        generation_best=jnp.max(values),
        mean_feasible_value=mean_feasible.astype(jnp.float32),
        frac_feasible=(num_feasible / n).astype(jnp.float32),
        frac_unique=(approx_count_unique_rows(population) / n).astype(jnp.float32),
        num_evaluations=state.num_evaluations,
    )


# ---------------------------------------------------------------------------------------------
# What the generations evaluate: an Ehrlich instance or an Objective
# ---------------------------------------------------------------------------------------------
def _traced(fn: Any) -> Any:
    """What jitted code receives: the Ehrlich instance (also behind an objective made from one),
    or the traceable objective itself."""
    if isinstance(fn, Objective) and fn.ehrlich is not None:
        return fn.ehrlich
    return fn


def on_host(fn: Any) -> bool:
    """Whether ``fn`` is an objective whose ``evaluate`` JAX cannot trace (the host loop runs)."""
    return isinstance(fn, Objective) and fn.ehrlich is None and not fn.traceable


def _num_states(fn: Any) -> int:
    return fn.num_states if isinstance(fn, Objective) else fn.config.num_states


def _evaluate(fn: Any, x: jax.Array) -> jax.Array:
    """``f(x)`` inside a trace: float32 ``[...]`` for int ``[..., L]``."""
    if isinstance(fn, Objective):
        flat = x.reshape(-1, x.shape[-1])
        return jnp.asarray(fn.evaluate(flat), jnp.float32).reshape(x.shape[:-1])
    return ehrlich.evaluate(fn, x)


# ---------------------------------------------------------------------------------------------
# Whole runs
# ---------------------------------------------------------------------------------------------
def validate_ga_inputs(fn: Any, initial_solution: Any, config: GAConfig) -> jax.Array:
    """Eager checks before jit: config type and the initial solution's shape, dtype and range
    (``fn``: an Ehrlich instance or an :class:`~llome_jax.objective.Objective`)."""
    if not isinstance(config, GAConfig):
        raise ValueError(f"config must be a GAConfig, got {type(config).__name__}.")
    if isinstance(fn, Objective) and fn.ehrlich is None:
        x0 = np.asarray(initial_solution)
        if x0.ndim == 1:
            return jnp.asarray(fn.check_sequences(x0[None], what="initial_solution")[0])
    else:
        x0 = ehrlich.validate_tokens(_traced(fn), initial_solution, what="initial_solution")
    if x0.ndim != 1:
        raise ValueError(f"initial_solution must be one sequence [L], got shape {tuple(x0.shape)}.")
    return jnp.asarray(x0, jnp.int32)


def _generation_step(fn, config, population_sharding, keep_populations):
    num_states = _num_states(fn)

    def step(state: GAState, key: jax.Array):
        population = ask(key, state, config, num_states)
        if population_sharding is not None:
            population = jax.lax.with_sharding_constraint(population, population_sharding)
        values = _evaluate(fn, population)
        state = tell(population, values, state)
        stats = _generation_stats(population, values, state, num_states)
        return state, ((stats, population, values) if keep_populations else stats)

    return step


@functools.partial(jax.jit, static_argnames=("config",))
def _start(
    key: jax.Array, fn: Any, initial_solution: jax.Array, config: GAConfig
) -> tuple[GAState, jax.Array]:
    key_init, key_run = jax.random.split(key)
    initial_value = _evaluate(fn, initial_solution)
    state = init(key_init, initial_solution, config, _num_states(fn), initial_value)
    return state, key_run


def start(
    key: jax.Array, fn: Any, initial_solution: jax.Array, config: GAConfig
) -> tuple[GAState, jax.Array]:
    """Initial state (``f(x0)`` evaluated once to seed the best-so-far) and the generations' key.

    ``advance(state, jax.random.split(run_key, T), ...)`` then reproduces ``run`` exactly, also
    when the ``T`` keys are consumed in several segments (as the CLI does for its progress bar).
    Jitted, except for a host objective (:func:`on_host`), whose ``f(x0)`` is one host call.
    """
    if on_host(fn):
        key_init, key_run = jax.random.split(key)
        initial_value = fn(np.asarray(initial_solution)[None])[0]
        return _init_jit(key_init, initial_solution, config, fn.num_states, initial_value), key_run
    return _start(key, _traced(fn), initial_solution, config)


@functools.partial(
    jax.jit, static_argnames=("config", "population_sharding", "keep_populations"), donate_argnums=0
)
def _advance(
    state: GAState,
    keys: jax.Array,
    fn: Any,
    config: GAConfig,
    population_sharding: jax.sharding.Sharding | None = None,
    keep_populations: bool = False,
):
    if population_sharding is not None:
        state = dataclasses.replace(
            state,
            population=jax.lax.with_sharding_constraint(state.population, population_sharding),
        )
    step = _generation_step(fn, config, population_sharding, keep_populations)
    return jax.lax.scan(step, state, keys)


@functools.partial(jax.jit, static_argnames=("num", "count"))
def _key_slice(run_key: jax.Array, start: jax.Array, num: int, count: int) -> jax.Array:
    return jax.lax.dynamic_slice_in_dim(jax.random.split(run_key, num), start, count)


def generation_keys(run_key: jax.Array, start: int, stop: int) -> jax.Array:
    """The keys of generations ``start .. stop - 1``: ``jax.random.split(run_key, stop)[start:]``.

    Under JAX's default PRNG (threefry with ``jax_threefry_partitionable``, the default since
    JAX 0.5) key ``i`` of ``split(run_key, n)`` does not depend on ``n``, so the keys are sliced
    from a split of the next power of two: a round loop that advances one generation at a time
    compiles ``log2`` key programs instead of one per generation. Other PRNGs get the split
    itself. Returns a key array of shape ``[stop - start]``.
    """
    if not 0 <= start <= stop:
        raise ValueError(f"generation_keys needs 0 <= start <= stop, got {start}, {stop}")
    threefry = str(jax.random.key_impl(run_key)) == "threefry2x32"
    if not (threefry and jax.config.jax_threefry_partitionable) or start == stop:
        return jax.random.split(run_key, stop)[start:]
    return _key_slice(run_key, start, num=1 << (stop - 1).bit_length(), count=stop - start)


_init_jit = jax.jit(init, static_argnames=("config", "num_states"))
_ask_jit = jax.jit(ask, static_argnames=("config", "num_states"))
_tell_jit = jax.jit(tell)
_stats_jit = jax.jit(_generation_stats, static_argnames=("num_states",))


def _advance_host(
    state: GAState, keys: jax.Array, objective: Objective, config: GAConfig, keep_populations: bool
):
    """:func:`advance` for a host objective: the scan's step as a Python loop (same keys, same
    jitted ``ask``/``tell``, one checked objective call per generation)."""
    num_states = objective.num_states
    stats, populations, all_values = [], [], []
    for key in keys:
        population = _ask_jit(key, state, config, num_states)
        values = jnp.asarray(objective(np.asarray(population)))
        state = _tell_jit(population, values, state)
        stats.append(_stats_jit(population, values, state, num_states))
        populations.append(population)
        all_values.append(values)
    trace = jax.tree.map(lambda *xs: jnp.stack(xs), *stats)
    if keep_populations:
        return state, (trace, jnp.stack(populations), jnp.stack(all_values))
    return state, trace


def advance(
    state: GAState,
    keys: jax.Array,
    fn: Any,
    config: GAConfig,
    population_sharding: jax.sharding.Sharding | None = None,
    keep_populations: bool = False,
):
    """Run one generation per key under ``lax.scan`` (the state buffer is donated); a host
    objective (:func:`on_host`) runs the same steps from a Python loop.

    Returns:
      ``(state, trace)``, or ``(state, (trace, populations [T, n, L], values [T, n]))`` with
      ``keep_populations``.
    """
    if on_host(fn):
        if population_sharding is not None:
            raise ValueError("population_sharding needs a traceable objective (a jitted evaluate).")
        return _advance_host(state, keys, fn, config, keep_populations)
    return _advance(state, keys, _traced(fn), config, population_sharding, keep_populations)


@functools.partial(
    jax.jit,
    static_argnames=("num_generations", "config", "population_sharding", "keep_populations"),
)
def _run(
    key: jax.Array,
    fn: Any,
    initial_solution: jax.Array,
    num_generations: int,
    config: GAConfig,
    population_sharding: jax.sharding.Sharding | None = None,
    keep_populations: bool = False,
):
    state, key_run = _start(key, fn, initial_solution, config)
    keys = jax.random.split(key_run, num_generations)
    return _advance(state, keys, fn, config, population_sharding, keep_populations)


def _run_host(key, objective, x0, num_generations, config, keep_populations=False):
    state, key_run = start(key, objective, x0, config)
    keys = jax.random.split(key_run, num_generations)
    return _advance_host(state, keys, objective, config, keep_populations)


def run(
    key: jax.Array,
    fn: Any,
    initial_solution: Any,
    num_generations: int,
    config: GAConfig = GAConfig(),
    *,
    population_sharding: jax.sharding.Sharding | None = None,
) -> tuple[GAState, GATrace]:
    """Run the GA for ``num_generations`` under one ``lax.scan``.

    Args:
      key: PRNG key (the run seed).
      fn: the Ehrlich instance or an :class:`~llome_jax.objective.Objective` (higher is better;
        a host objective runs the generations from a Python loop, see the module docstring).
      initial_solution: int ``[L]`` start sequence (``paper_initial_solution(name)`` reproduces the
        paper's runs).
      num_generations: ``T`` (static).
      config: GA settings.
      population_sharding: optional sharding of the ``[n, L]`` population (e.g.
        ``NamedSharding(mesh, P("data"))``); results are identical to the unsharded run.

    Returns:
      ``(final_state, trace)`` with ``trace`` fields of shape ``[T]``.
      ``jax.vmap(lambda k: run(k, fn, x0, T, config))(keys)`` runs many seeds in one call.
    """
    if not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError(f"num_generations must be a positive int, got {num_generations!r}.")
    x0 = initial_solution
    if not isinstance(initial_solution, jax.core.Tracer):
        x0 = validate_ga_inputs(fn, initial_solution, config)
    if on_host(fn):
        if population_sharding is not None:
            raise ValueError("population_sharding needs a traceable objective (a jitted evaluate).")
        return _run_host(key, fn, x0, num_generations, config)
    return _run(key, _traced(fn), x0, num_generations, config, population_sharding)


def archive_from_trajectory(
    populations: jax.Array, values: jax.Array, num_states: int
) -> GAArchive:
    """Deduplicate ``[T, n, L]`` populations into a fixed-capacity archive (first occurrence wins).

    Returns:
      a ``GAArchive`` of capacity ``T n``; unique rows come first, ordered by generation then
      particle index.
    """
    num_generations, n, length = populations.shape
    rows = populations.reshape(-1, length)
    flat_values = values.reshape(-1)
    generations = jnp.repeat(jnp.arange(1, num_generations + 1, dtype=jnp.int32), n)
    order = jnp.arange(rows.shape[0], dtype=jnp.int32)
    permutation, is_first = _sorted_unique(rows, num_states, order)
    keep = jnp.zeros(rows.shape[0], bool).at[permutation].set(is_first)
    # stable compaction: kept rows first, in evaluation order
    compact = jnp.argsort(~keep, stable=True)
    count = jnp.sum(keep.astype(jnp.int32))
    valid = jnp.arange(rows.shape[0]) < count
    return GAArchive(
        sequences=jnp.where(valid[:, None], rows[compact], -1),
        values=jnp.where(valid, flat_values[compact], jnp.nan),
        generations=jnp.where(valid, generations[compact], -1),
        count=count,
    )


def run_archive(
    key: jax.Array,
    fn: Any,
    initial_solution: Any,
    num_generations: int = 10,
    config: GAConfig = GAConfig(),
) -> GAArchive:
    """Every evaluated ``(sequence, value, generation)`` of the first ``n0`` generations, deduplicated.

    This is the seed data of LLOME and LaMBO-2 (paper Sec. 4.2: ``n0 = 10`` GA generations, i.e.
    ``10 n`` oracle calls). The first generation is the mutated copies of the initial solution, so
    the archive equals the reference's recorded particles (holo records the post-update population
    after each of its 10 steps and never the unmutated copies). ``fn``: an Ehrlich instance or an
    :class:`~llome_jax.objective.Objective` (a host objective runs the generations from a loop).

    Returns:
      ``GAArchive`` with capacity ``n0 * n``.
    """
    if not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError(f"num_generations must be a positive int, got {num_generations!r}.")
    x0 = validate_ga_inputs(fn, initial_solution, config)
    if on_host(fn):
        _, (_, populations, values) = _run_host(key, fn, x0, num_generations, config, True)
        return _archive_jit(populations, values, fn.num_states)
    return _run_archive(key, _traced(fn), x0, num_generations, config)


_archive_jit = jax.jit(archive_from_trajectory, static_argnames=("num_states",))


@functools.partial(jax.jit, static_argnames=("num_generations", "config"))
def _run_archive(key, fn, x0, num_generations, config):
    _, (_, populations, values) = _run(key, fn, x0, num_generations, config, None, True)
    return archive_from_trajectory(populations, values, _num_states(fn))
