"""The GA as a round-driver optimizer: the same run directory, resume and budget as LLOME and LaMBO-2.

What a GA *round* is: a block of generations of ``n`` particles, every particle one oracle call.

* Round 0 is the first ``n0`` generations (default 10): with the same run seed it is exactly the
  seed data LLOME starts from (``ga.run_archive`` with the run key's ``"ga"`` sub-key), so the
  three optimizers' curves share their first ``n0 n`` evaluations (paper Fig. 3: "the first 10K
  test function evaluations ... correspond to the solutions produced by the GA pre-solver").
* Every later round is ``generations_per_round`` more generations (default 2, i.e. 2,000 labels at
  ``n = 1000``: LLOME's and LaMBO-2's ``j``), so equal rounds mean equal label budgets.

The generations of all rounds together are one uninterrupted GA run (``ga.run`` with ``n0 + R G``
generations gives the same populations): generation ``g`` uses key ``g`` of
``split(run_key, total)``, and a prefix of a split does not depend on its length (JAX's
partitionable threefry). ``evaluated.csv`` holds the distinct sequences of each round (first
occurrence within the round, in evaluation order); ``num_evaluations`` counts every particle
(``n`` per generation), duplicates included, as the paper does; ``min_regret`` is over every
particle so far.

**Objectives.** ``GeneticAlgorithm(cfg, objective)`` optimises an
:class:`~llome_jax.objective.Objective` instead of ``cfg.function``: a traceable (jitted JAX)
objective runs inside the same jitted ``lax.scan``, any other one from a host loop over the same
generations (``ga.advance``); ``config.json`` then records ``objective`` / ``objective_info``
instead of ``function`` / ``instance_seed``, and the regret fields follow the objective's
``optimal_value`` (null when unknown; ``best_value`` is always recorded).
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from llome_jax import configs, ga
from llome_jax.objective import Objective, ehrlich_objective, objective_config
from llome_jax.runner import RoundResult, RunResult, progress_text
from llome_jax.runner import run as run_rounds

__all__ = ["GARoundState", "GARunConfig", "GeneticAlgorithm", "run"]


@dataclasses.dataclass(frozen=True)
class GARunConfig:
    """A GA run under the round driver.

    Attributes:
      function / instance_seed: the Ehrlich function (``ehrlich.resolve_function``) [f2].
      seed: run seed. rounds: rounds after round 0 [10].
      initial_generations: ``n0``, the generations of round 0 [10].
      generations_per_round: ``G``, the generations of every later round [2: ``2 n`` labels].
      ga: the GA's settings (population ``n``, ``alpha``, ``p_m``, ``p_r``; the paper's defaults).
    """

    function: str = "f2"
    instance_seed: int | None = None
    seed: int = 0
    rounds: int = 10
    initial_generations: int = 10
    generations_per_round: int = 2
    ga: ga.GAConfig = dataclasses.field(default_factory=ga.GAConfig)

    def __post_init__(self) -> None:
        for name in ("rounds", "initial_generations", "generations_per_round"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}")

    def replace(self, **overrides: Any) -> GARunConfig:
        """This configuration with settings replaced (dotted keys such as ``ga.num_particles``
        or nested dicts; ``llome_jax.configs.override``)."""
        return configs.override(self, overrides)

    def to_dict(self) -> dict[str, Any]:
        return configs.to_dict(self)


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["ga_state", "run_key"], meta_fields=[]
)
@dataclasses.dataclass(frozen=True)
class GARoundState:
    """What the GA carries between rounds (a pytree, checkpointed whole).

    Attributes:
      ga_state: the ``ga.GAState`` after the last generation (its ``generation`` counts them).
      run_key: the key whose split gives every generation its key (``ga.start``).
    """

    ga_state: Any
    run_key: Any


class GeneticAlgorithm:
    """The paper's GA as a :class:`~llome_jax.runner.RoundOptimizer` over :class:`GARoundState`.

    Construction resolves the function (or takes ``objective``, an
    :class:`~llome_jax.objective.Objective`, instead of ``cfg.function``), checks the start
    sequence and makes one checked call of a custom objective (clear errors first).
    """

    name = "ga"

    def upgrade_config(self, saved: dict[str, Any]) -> dict[str, Any]:
        return saved

    def __init__(self, cfg: GARunConfig, objective: Objective | None = None) -> None:
        self.cfg = cfg
        self.seed = cfg.seed
        self.custom_objective = objective is not None
        if objective is None:
            objective = ehrlich_objective(cfg.function, cfg.instance_seed)
        elif not isinstance(objective, Objective):
            raise ValueError(f"objective must be a llome_jax.Objective; got {type(objective)}.")
        else:
            objective.validate()
        self.objective = objective
        self.x0 = ga.validate_ga_inputs(objective, objective.x0, cfg.ga)

    @property
    def problem(self) -> str:
        """What is optimised, for titles: ``cfg.function`` or the objective's name."""
        return self.objective.name if self.custom_objective else self.cfg.function

    def config_dict(self) -> dict[str, Any]:
        return objective_config(
            self.cfg.to_dict(), self.objective if self.custom_objective else None
        )

    def total_rounds(self) -> int:
        return self.cfg.rounds

    def _generations_done(self, round_index: int) -> int:
        return self.cfg.initial_generations + round_index * self.cfg.generations_per_round

    def _advance(self, state: GARoundState, start: int, stop: int) -> tuple[Any, Any, Any]:
        keys = jax.random.split(state.run_key, stop)[start:]
        ga_state, (trace, populations, values) = ga.advance(
            state.ga_state, keys, self.objective, self.cfg.ga, keep_populations=True
        )
        archive = ga.archive_from_trajectory(populations, values, self.objective.num_states)
        x, v, _ = archive.to_numpy()
        return ga_state, trace, (x.astype(np.int32), np.where(np.isfinite(v), v, -np.inf))

    def _result(
        self, round_index: int, ga_state: Any, trace: Any, x: np.ndarray, v: np.ndarray
    ) -> RoundResult:
        from llome_jax.metrics import regret, round_metrics

        num_generated = int(trace.num_evaluations.shape[0]) * self.cfg.ga.num_particles
        best = float(ga_state.best_value)
        optimum, worst = self.objective.optimal_value, self.objective.worst_value
        best_regret = regret([best], optimum, worst)[0]
        record = round_metrics(
            round_index,
            x,
            v,
            v,
            num_generated=num_generated,
            optimal_value=optimum,
            worst_value=worst,
            num_evaluations=int(ga_state.num_evaluations),
            min_regret=None if np.isnan(best_regret) else float(best_regret),
            best_value=best,
            generations=int(ga_state.generation),
        )
        return RoundResult(x, v.astype(np.float64), record)

    def init(self, key: jax.Array) -> tuple[GARoundState, RoundResult]:
        """Round 0: ``n0`` generations from the mutated copies of the start sequence."""
        from llome_jax.llome.runtime import named_key

        ga_state, run_key = ga.start(named_key(key, "ga"), self.objective, self.x0, self.cfg.ga)
        state = GARoundState(ga_state, run_key)
        n0 = self.cfg.initial_generations
        ga_state, trace, (x, v) = self._advance(state, 0, n0)
        return GARoundState(ga_state, run_key), self._result(0, ga_state, trace, x, v)

    def round(
        self, state: GARoundState, *, progress: bool = False
    ) -> tuple[GARoundState, RoundResult]:
        r = self.round_index(state) + 1
        start, stop = self._generations_done(r - 1), self._generations_done(r)
        ga_state, trace, (x, v) = self._advance(state, start, stop)
        return GARoundState(ga_state, state.run_key), self._result(r, ga_state, trace, x, v)

    def round_index(self, state: GARoundState) -> int:
        done = int(state.ga_state.generation) - self.cfg.initial_generations
        return done // self.cfg.generations_per_round

    def stop_reason(self, state: GARoundState) -> str:
        optimum = self.objective.optimal_value
        if optimum is not None and float(state.ga_state.best_value) >= optimum:
            return f"the optimum (f = {optimum:g}) was found"
        return ""

    def save(self, manager: Any, state: GARoundState) -> None:
        r = self.round_index(state)
        manager.save(r, state, {"round": r})

    def restore(self, manager: Any) -> GARoundState | None:
        cfg, num_states = self.cfg.ga, self.objective.num_states
        abstract = jax.eval_shape(  # shapes only: no objective call
            lambda k: GARoundState(
                ga.init(k, self.x0, cfg, num_states, 0.0), jax.random.split(k)[1]
            ),
            jax.random.key(0),
        )
        restored = manager.restore_latest_good(abstract)
        return None if restored is None else restored[1]

    def round0_description(self) -> str:
        return f"GA, {self.cfg.initial_generations} generations of {self.cfg.ga.num_particles}"

    def round_line(self, record: Mapping[str, Any]) -> str:
        return (
            f"round {record['round']}: {record['num_evaluations']} evaluations, "
            f"{progress_text(record)}, {record['num_generated']} particles"
        )

    def plot(self, run_dir: Any) -> None:
        from llome_jax.rundir import plot_options

        title = f"GA on {self.problem} (seed {self.cfg.seed})"
        run_dir.plot_regret("GA", title, log_x=False, **plot_options(self.objective))


def run(
    cfg: GARunConfig,
    out: str | pathlib.Path,
    *,
    objective: Objective | None = None,
    **options: Any,
) -> RunResult[GARoundState]:
    """Run (or resume) the GA into the run directory ``out``: :func:`llome_jax.runner.run` (its
    ``options``: ``resume``, ``progress``, ``max_rounds_this_call``, ``log``, ``extra_config``,
    ``trackers``) with the :class:`GeneticAlgorithm` plug-in, on ``objective`` if given (else
    ``cfg.function``).

    Raises:
      ValueError: unknown function, a malformed objective, bad settings, or a resume whose
        configuration differs (except ``rounds``); nothing is written then.
    """
    return run_rounds(GeneticAlgorithm(cfg, objective), out, **options)
