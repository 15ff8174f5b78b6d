"""Whole GA runs: many generations of :mod:`llome_jax.ga` under one ``lax.scan``, or a host loop.

``run`` scans ``ask/evaluate/tell`` over generations under one ``lax.scan``;
``jax.vmap(run, in_axes=(0, ...))`` runs many seeds in one call. ``start``/``advance`` split the
same run into segments (``generation_keys`` gives a segment its keys). ``run_archive`` records
every evaluated sequence of the first ``n0`` generations (the seed data of LLOME and LaMBO-2).
This module imports only jax, numpy, :mod:`llome_jax.ga`, :mod:`llome_jax.ehrlich` and
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
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax import ehrlich
from llome_jax.ga import (
    GAConfig,
    GAState,
    approx_count_unique_rows,
    ask,
    init,
    sorted_unique_rows,
    tell,
)
from llome_jax.objective import Objective

__all__ = [
    "GAArchive",
    "GATrace",
    "advance",
    "archive_from_trajectory",
    "generation_keys",
    "on_host",
    "run",
    "run_archive",
    "start",
    "validate_ga_inputs",
]


# ---------------------------------------------------------------------------------------------
# What a run returns
# ---------------------------------------------------------------------------------------------
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


def _generation_stats(population: jax.Array, values: jax.Array, state: GAState, num_states: int):
    """One :class:`GATrace` row for an evaluated ``[n, L]`` population and its ``[n]`` values."""
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
    config: GAConfig = GAConfig(),  # noqa: B008 (frozen, hashable)
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
    permutation, is_first = sorted_unique_rows(rows, num_states, order)
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
    config: GAConfig = GAConfig(),  # noqa: B008 (frozen, hashable)
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
