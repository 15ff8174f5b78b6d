"""The GA as a round-driver optimizer: the same run directory, resume and budget as LLOME and LaMBO-2.

What a GA *round* is: a block of generations of ``n`` particles whose labels come from the run's
:class:`~llome_jax.oracle.Oracle` (the information contract every optimizer follows).

* Round 0 is the first ``n0`` generations (default 10): with the same run seed it is exactly the
  seed data LLOME starts from (``ga_loop.run_archive`` with the run key's ``"ga"`` sub-key), so the
  three optimizers' curves share their round 0 (paper Fig. 3: "the first 10K test function
  evaluations ... correspond to the solutions produced by the GA pre-solver").
* With ``accounting="pay_once"`` (default) a particle whose sequence is already labelled is looked
  up, not paid, so round 0 pays for its distinct sequences only (f2, seed 0: 1,133 of 10,000
  particles), and every later round runs generations until it has paid ``generations_per_round n``
  new labels (default 2,000: LLOME's and LaMBO-2's ``j``), at most ``MAX_GENERATIONS_PER_ROUND``
  times ``generations_per_round`` generations (then the run stops: the GA proposes nothing new).
  ``evaluated.csv`` holds each paid sequence once.
* With ``accounting="every_evaluation"`` (the paper's accounting) every particle is paid and a
  round is ``generations_per_round`` generations (``labels_per_round`` labels when given);
  ``evaluated.csv`` holds each sequence once, in the round that first labelled it.

It is an ask/tell plug-in of :class:`~llome_jax.optimizers.base.AskTellOptimizer`: round 0 is
the base's (the GA simply continues its state, ``data.round0``), and each ``ask`` is one
generation (``ga.ask``): its particles not labelled yet, in evaluation order, at most the labels
the round has left; the base labels them and ``tell`` completes the generation (``ga.tell`` with
every particle's label, looked up). A generation the budget cuts is labelled up to the cut
(evaluation order) and not told: the GA state stays before it, so that a run extended later
draws the same generation again and pays only the rest.

The generations of all rounds together are one uninterrupted GA run (``ga_loop.run`` with as many
generations gives the same populations): generation ``g`` uses key ``g`` of
``split(run_key, total)``, and a prefix of a split does not depend on its length (JAX's
partitionable threefry). ``min_regret`` is over every particle so far; ``frac_unique`` is over the
round's proposals (its particles, ``num_proposals``).

**Objectives.** ``GeneticAlgorithm(cfg, objective)`` optimises an
:class:`~llome_jax.objective.Objective` instead of ``cfg.function``: a traceable (jitted JAX)
objective runs inside the same jitted ``lax.scan``, any other one from a host loop over the same
generations (``ga_loop.advance``); ``config.json`` then records ``objective`` / ``objective_info``
instead of ``function`` / ``instance_seed``, and the regret fields follow the objective's
``optimal_value`` (null when unknown; ``best_value`` is always recorded).
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import jax
import numpy as np

from llome_jax import configs, ehrlich, ga
from llome_jax.ga import loop as ga_loop
from llome_jax.metrics import frac_unique, regret, round_metrics
from llome_jax.objective import Objective
from llome_jax.optimizers.base import (
    AskTellOptimizer,
    BenchmarkSettings,
    LabelledData,
    first_unlabelled,
)
from llome_jax.rough_mt_fuji import is_rmf_name
from llome_jax.run import plotting
from llome_jax.run.migrations import GA_MIGRATIONS
from llome_jax.run.rundir import RunDirectory
from llome_jax.run.runner import RunResult, progress_text
from llome_jax.run.runner import run as run_rounds

__all__ = [
    "MAX_GENERATIONS_PER_ROUND",
    "GARoundState",
    "GARunConfig",
    "GASeedsConfig",
    "GeneticAlgorithm",
    "run",
    "run_seeds",
]

#: With ``pay_once``, a round that has not paid its budget after this many times
#: ``generations_per_round`` generations ends the run (the GA proposes nothing new).
MAX_GENERATIONS_PER_ROUND = 50


@dataclasses.dataclass(frozen=True)
class GARunConfig(BenchmarkSettings):
    """A GA run under the round driver: the shared settings
    (:class:`~llome_jax.optimizers.base.BenchmarkSettings`) and the GA's own.

    Attributes:
      function / instance_seed: the Ehrlich function (``ehrlich.resolve_function``) [f2].
      seed: run seed. rounds: rounds after round 0 [10].
      round0_generations: ``n0``, the generations of round 0 [10].
      round0_ga: the GA's settings (population ``n``, ``alpha``, ``p_m``, ``p_r``; the paper's
        defaults): round 0's GA, which every later round continues.
      generations_per_round: ``G``: with ``every_evaluation``, the generations of every later
        round; with ``pay_once``, a round pays ``G n`` new labels [2: 2,000] unless
        ``labels_per_round`` is given.
      labels_per_round: exactly the new labels a round pays (its generations run until it has;
        the generation that completes it labels only what is left and is drawn again by the
        next round, which pays only the rest) [``None``: at least ``G n``, whole generations].
      accounting: ``"pay_once"`` or ``"every_evaluation"`` (the paper's; module docstring).
      constraint_queries: ``"off"`` or ``"free"`` (the GA asks no constraint query either way).

    Old names (``config_version`` 2 and before): ``initial_generations`` is
    ``round0_generations``, ``ga`` is ``round0_ga`` (accepted with a note).
    """

    RENAMED_SETTINGS: ClassVar[Mapping[str, str]] = {
        "initial_generations": "round0_generations",
        "ga": "round0_ga",
    }

    labels_per_round: int | None = None
    generations_per_round: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        value = self.generations_per_round
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"generations_per_round must be a positive integer; got {value!r}")

    @property
    def round_labels(self) -> int:
        """The new labels a round pays: ``labels_per_round`` or ``G n``."""
        if self.labels_per_round is not None:
            return self.labels_per_round
        return self.generations_per_round * self.round0_ga.num_particles

    def replace(self, **overrides: Any) -> GARunConfig:
        """This configuration with settings replaced (dotted keys such as
        ``round0_ga.num_particles`` or nested dicts; ``llome_jax.configs.override``)."""
        return configs.override(self, overrides)

    def to_dict(self) -> dict[str, Any]:
        return configs.to_dict(self)


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["ga_state", "run_key"],
    meta_fields=["cut"],
)
@dataclasses.dataclass(frozen=True)
class GARoundState:
    """The GA's own state between generations (a pytree; the base checkpoints it whole).

    Attributes:
      ga_state: the ``ga.GAState`` after the last generation told (its ``generation`` counts
        them).
      run_key: the key whose split gives every generation its key (``ga_loop.start``).
      cut: the last ``ask``'s generation was cut at the labels left (it is not told).
    """

    ga_state: Any
    run_key: Any
    cut: bool = False


_ask_jit = jax.jit(ga.ask, static_argnames=("config", "num_states"))
_tell_jit = jax.jit(ga.tell)


class GeneticAlgorithm(AskTellOptimizer):
    """The paper's GA as an ask/tell optimizer over :class:`GARoundState` (module docstring).

    Construction resolves the function (or takes ``objective``, an
    :class:`~llome_jax.objective.Objective`, instead of ``cfg.function``), checks the start
    sequence and makes one checked call of a custom objective (clear errors first).
    """

    name = "ga"
    migrations = GA_MIGRATIONS
    config_class = GARunConfig
    asks_until_paid = True
    ask_unit = "generations"

    @classmethod
    def test_config(cls, **overrides: Any) -> GARunConfig:
        """The contract tests' configuration: ``Ehr(8,8)-2-2-2`` instance 1, 2 rounds of one
        generation of 32 particles after a 3-generation round 0."""
        small = GARunConfig(
            function="Ehr(8,8)-2-2-2",
            instance_seed=1,
            seed=0,
            rounds=2,
            round0_generations=3,
            generations_per_round=1,
            round0_ga=ga.GAConfig(num_particles=32, mutation_prob=0.05),
        )
        return small.replace(**overrides)

    @property
    def display_name(self) -> str:
        return "the GA"

    def round_labels(self) -> tuple[int, bool]:
        """``labels_per_round`` exactly, or whole generations until ``G n`` are paid."""
        return self.cfg.round_labels, self.cfg.labels_per_round is None

    def max_asks(self) -> int:
        return MAX_GENERATIONS_PER_ROUND * self.cfg.generations_per_round

    def best_of(self, state: GARoundState) -> float:
        return float(state.ga_state.best_value)

    def init_state(self, key: jax.Array, data: LabelledData) -> GARoundState:
        """Round 0's GA state and key (``data.round0``); without it, the shapes of one."""
        if data.round0 is not None:
            return GARoundState(data.round0.ga_state, data.round0.run_key)
        k = jax.random.key(0)
        cfg, num_states = self.cfg.round0_ga, self.objective.num_states
        return GARoundState(ga.init(k, self.x0, cfg, num_states, 0.0), jax.random.split(k)[1])

    def _population(self, state: GARoundState) -> np.ndarray:
        """The next generation's particles, int32 ``[n, L]`` (generation ``g`` uses key ``g``
        of the run key's split)."""
        g = int(state.ga_state.generation)
        key = ga_loop.generation_keys(state.run_key, g, g + 1)[0]
        population = _ask_jit(key, state.ga_state, self.cfg.round0_ga, self.objective.num_states)
        return np.asarray(population, np.int32)

    def ask(
        self, key: jax.Array, state: GARoundState, data: LabelledData, num: int
    ) -> tuple[np.ndarray, GARoundState, np.ndarray]:
        """One generation: its particles not labelled yet (first occurrences, evaluation
        order; ``every_evaluation``: every particle), at most ``num``; the particles up to the
        cut go to the record."""
        particles = self._population(state)
        if not self.oracle.pay_once:
            cut = min(num, len(particles))
            shown = particles[:cut]
            return shown, dataclasses.replace(state, cut=cut < len(particles)), shown
        new = first_unlabelled(particles, data.lookup)
        if len(new) > num:  # the labels left end inside this generation
            shown = particles[: new[num]]
            return particles[new[:num]], dataclasses.replace(state, cut=True), shown
        return particles[new], dataclasses.replace(state, cut=False), particles

    def tell(
        self, state: GARoundState, sequences: np.ndarray, values: np.ndarray, data: LabelledData
    ) -> GARoundState:
        """``ga.tell`` with every particle's label; a generation that was cut is not told."""
        if state.cut:
            return dataclasses.replace(state, cut=False)
        particles = self._population(state)
        labels = np.asarray(data.lookup(particles), np.float32)
        ga_state = _tell_jit(particles, labels, state.ga_state)
        return GARoundState(ga_state, state.run_key)

    def _record(
        self, particles: np.ndarray, values: np.ndarray, state: GARoundState, best: float
    ) -> dict[str, Any]:
        """The common fields restated over the particles (every evaluation, repeats included)
        and the GA's: ``generations``, and ``min_regret`` / ``best_value`` of the best label so
        far."""
        optimum, worst = self.objective.optimal_value, self.objective.worst_value
        best_regret = regret([best], optimum, worst)[0]
        common = round_metrics(
            0,
            particles,
            values,
            values,
            optimal_value=optimum,
            worst_value=worst,
        )
        return {
            "num_generated": len(particles),
            "min_regret": None if np.isnan(best_regret) else float(best_regret),
            "mean_regret": common["mean_regret"],
            "frac_feasible": common["frac_feasible"],
            "frac_unique": frac_unique(particles),
            "num_proposals": len(particles),
            "best_value": best,
            "generations": int(state.ga_state.generation),
        }

    def record0(self, state: GARoundState, data: LabelledData) -> dict[str, Any]:
        r0 = data.round0
        return self._record(r0.particles, r0.values, state, float(state.ga_state.best_value))

    def record(
        self,
        state: GARoundState,
        sequences: np.ndarray,
        values: np.ndarray,
        data: LabelledData,
        *,
        asked: Sequence[Any] = (),
    ) -> dict[str, Any]:
        shown = list(asked)
        length = self.objective.length
        particles = np.concatenate(shown) if shown else np.zeros((0, length), np.int32)
        labels = data.lookup(particles)
        best = max(float(state.ga_state.best_value), float(np.max(labels, initial=-np.inf)))
        return self._record(particles, labels, state, best)

    def round0_description(self) -> str:
        cfg = self.cfg
        return f"GA, {cfg.round0_generations} generations of {cfg.round0_ga.num_particles}"

    def round_line(self, record: Any) -> str:
        return (
            f"round {record['round']}: {record['num_evaluations']} labels paid, "
            f"{progress_text(record)}, {record['num_generated']} particles"
        )


def run(
    cfg: GARunConfig,
    out: str | pathlib.Path,
    *,
    objective: Objective | None = None,
    **options: Any,
) -> RunResult[Any]:
    """Run (or resume) the GA into the run directory ``out``: :func:`llome_jax.run.runner.run` (its
    ``options``: ``resume``, ``progress``, ``max_rounds_this_call``, ``log``, ``extra_config``,
    ``trackers``) with the :class:`GeneticAlgorithm` plug-in, on ``objective`` if given (else
    ``cfg.function``).

    Raises:
      ValueError: unknown function, a malformed objective, bad settings, or a resume whose
        configuration differs (except ``rounds``); nothing is written then.
    """
    return run_rounds(GeneticAlgorithm(cfg, objective), out, **options)


# ---------------------------------------------------------------------------------------------
# Many seeds in one jitted call
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class GASeedsConfig:
    """The GA on many run seeds at once (``llome-jax ga`` without ``--rounds``): seeds
    ``seed .. seed + seeds - 1``, vmapped, ``generations`` generations each, every evaluation
    counted (the paper's and holo's accounting), in jitted segments of ``segment``
    generations. An Ehrlich function only (regret ``1 - f``)."""

    function: str = "f2"
    instance_seed: int | None = None
    seed: int = 0
    seeds: int = 8
    generations: int = 1000
    segment: int = 50
    ga: ga.GAConfig = dataclasses.field(default_factory=ga.GAConfig)

    def __post_init__(self) -> None:
        if min(self.generations, self.seeds, self.segment) < 1:
            raise ValueError("--generations, --seeds and --segment must be positive")


#: ``trace.csv``'s columns (one row per seed and generation)
TRACE_HEADER = (
    "seed",
    "generation",
    "num_evaluations",
    "best_value",
    "regret",
    "generation_best",
    "mean_feasible_value",
    "frac_feasible",
    "frac_unique",
)


def run_seeds(
    cfg: GASeedsConfig,
    out: str | pathlib.Path,
    *,
    progress: Callable[[int, float], None] | None = None,
) -> dict[str, Any]:
    """Run :class:`GASeedsConfig` into the new run directory ``out``: ``config.json``, then
    ``trace.csv`` (:data:`TRACE_HEADER`), ``summary.json`` and ``regret.png``, all written by
    :class:`~llome_jax.run.rundir.RunDirectory`. ``progress(generations_done, best_value)`` is
    called after each segment. Returns the summary.

    Generations to the optimum are counted as ours: ``g`` = the 1-based generation whose
    population first holds ``f = 1``, the first being the ``n`` mutated copies of ``x0``
    (holo's ``DiscreteEvolution`` first evaluates the unmutated copies as a generation of its
    own, so its count for the same run is ``g + 1``).

    Raises:
      ValueError: a Rough Mt. Fuji or unknown function, or ``out`` that holds a run; nothing is
        written then.
    """
    if is_rmf_name(cfg.function):
        raise ValueError(
            "the many-seeds mode reads regret as 1 - f (an Ehrlich function); run Rough Mt. "
            "Fuji in round mode: pass --rounds"
        )
    fn = ehrlich.resolve_function(cfg.function, cfg.instance_seed)
    x0 = ehrlich.resolve_initial_solution(cfg.function, cfg.instance_seed)
    x0 = ga_loop.validate_ga_inputs(fn, x0, cfg.ga)
    seeds = list(range(cfg.seed, cfg.seed + cfg.seeds))
    run_config = {
        "optimizer": "ga",
        "function": cfg.function,
        "function_name": fn.config.name,
        "instance_seed": cfg.instance_seed,
        "generations": cfg.generations,
        "seeds": seeds,
        "ga": {
            "num_particles": cfg.ga.num_particles,
            "survival_quantile": cfg.ga.survival_quantile,
            "mutation_prob": cfg.ga.mutation_prob,
            "recombine_prob": cfg.ga.recombine_prob,
        },
    }
    out = pathlib.Path(out)
    if (out / "trace.csv").exists():
        raise ValueError(f"{out} already holds a GA run; choose another --out")
    run_dir = RunDirectory.create(out, run_config)

    keys = jax.vmap(jax.random.key)(jax.numpy.arange(cfg.seed, cfg.seed + cfg.seeds))
    start = jax.jit(jax.vmap(lambda k: ga_loop.start(k, fn, x0, cfg.ga)))
    advance = jax.jit(jax.vmap(lambda s, k: ga_loop.advance(s, k, fn, cfg.ga)), donate_argnums=0)
    t0 = time.perf_counter()
    state, run_keys = start(keys)
    generation_keys = jax.vmap(lambda k: jax.random.split(k, cfg.generations))(run_keys)
    traces = []
    for begin in range(0, cfg.generations, cfg.segment):
        end = min(begin + cfg.segment, cfg.generations)
        state, trace = advance(state, generation_keys[:, begin:end])
        traces.append(jax.device_get(trace))
        if progress is not None:
            progress(end, float(np.max(traces[-1].best_value[:, -1])))
    seconds = time.perf_counter() - t0
    trace = jax.tree.map(lambda *parts: np.concatenate(parts, axis=1), *traces)

    run_dir.write_table(
        "trace.csv",
        TRACE_HEADER,
        (
            [
                seed,
                g + 1,
                int(trace.num_evaluations[s, g]),
                float(trace.best_value[s, g]),
                1.0 - float(trace.best_value[s, g]),
                float(trace.generation_best[s, g]),
                float(trace.mean_feasible_value[s, g]),
                float(trace.frac_feasible[s, g]),
                float(trace.frac_unique[s, g]),
            ]
            for s, seed in enumerate(seeds)
            for g in range(cfg.generations)
        ),
    )
    reached = [
        int(np.argmax(row >= 1.0)) + 1 if np.any(row >= 1.0) else None for row in trace.best_value
    ]
    finals = trace.best_value[:, -1].astype(float)
    hits = [r for r in reached if r is not None]
    summary = {
        **run_config,
        "final_best_value": finals.tolist(),
        "median_final_best_value": float(np.median(finals)),
        "median_final_regret": float(np.median(1.0 - finals)),
        "generations_to_optimum": reached,
        "median_generations_to_optimum": float(np.median(hits))
        if len(hits) * 2 > len(reached)
        else None,
        "best_sequence": np.asarray(state.best_sequence[int(np.argmax(finals))]).tolist(),
        "wall_seconds": seconds,
        "generations_per_second_per_seed": cfg.generations / seconds,
        "evaluations_per_second_total": cfg.generations
        * cfg.seeds
        * cfg.ga.num_particles
        / seconds,
    }
    run_dir.write_json("summary.json", summary)
    curves = [(trace.num_evaluations[s], 1.0 - trace.best_value[s]) for s in range(cfg.seeds)]
    problem = cfg.function
    if cfg.function != fn.config.name:
        problem = f"{cfg.function} = {fn.config.name}"
    if cfg.instance_seed is not None:
        problem += f" (instance seed {cfg.instance_seed})"
    plotting.plot_regret_curves(
        {f"GA ({cfg.ga.num_particles} particles)": curves},
        out / RunDirectory.REGRET_PLOT,
        title=f"GA on {problem}, run seeds {seeds[0]}-{seeds[-1]}"
        if len(seeds) > 1
        else f"GA on {problem}, run seed {seeds[0]}",
        unit="seed",
    )
    return summary
