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
  round is exactly ``generations_per_round`` generations; ``evaluated.csv`` holds the distinct
  sequences of each round.

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
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax import configs, ga, ga_loop
from llome_jax.migrations import GA_MIGRATIONS
from llome_jax.objective import Objective
from llome_jax.oracle import check_contract_settings
from llome_jax.plugin import RoundOptimizerBase
from llome_jax.runner import RoundResult, RunResult, optimum_stop_reason, progress_text
from llome_jax.runner import run as run_rounds

__all__ = ["MAX_GENERATIONS_PER_ROUND", "GARoundState", "GARunConfig", "GeneticAlgorithm", "run"]

#: With ``pay_once``, a round that has not paid its budget after this many times
#: ``generations_per_round`` generations ends the run (the GA proposes nothing new).
MAX_GENERATIONS_PER_ROUND = 50


@dataclasses.dataclass(frozen=True)
class GARunConfig:
    """A GA run under the round driver.

    Attributes:
      function / instance_seed: the Ehrlich function (``ehrlich.resolve_function``) [f2].
      seed: run seed. rounds: rounds after round 0 [10].
      initial_generations: ``n0``, the generations of round 0 [10].
      generations_per_round: ``G``: with ``every_evaluation``, the generations of every later
        round; with ``pay_once``, a round pays ``G n`` new labels [2: 2,000] unless
        ``labels_per_round`` is given.
      labels_per_round: with ``pay_once``, exactly the new labels a round pays (its generations
        run until it has; the generation that completes it labels only what is left and is
        drawn again by the next round, which pays only the rest) [``None``: at least ``G n``,
        whole generations].
      ga: the GA's settings (population ``n``, ``alpha``, ``p_m``, ``p_r``; the paper's defaults).
      accounting: ``"pay_once"`` or ``"every_evaluation"`` (the paper's; module docstring).
      constraint_queries: ``"off"`` or ``"free"`` (the GA asks no constraint query either way).
    """

    function: str = "f2"
    instance_seed: int | None = None
    seed: int = 0
    rounds: int = 10
    initial_generations: int = 10
    generations_per_round: int = 2
    ga: ga.GAConfig = dataclasses.field(default_factory=ga.GAConfig)
    accounting: str = "pay_once"
    constraint_queries: str = "off"
    labels_per_round: int | None = None

    def __post_init__(self) -> None:
        for name in ("rounds", "initial_generations", "generations_per_round"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}")
        labels = self.labels_per_round
        if labels is not None and (
            isinstance(labels, bool) or not isinstance(labels, int) or labels < 1
        ):
            raise ValueError(f"labels_per_round must be a positive integer; got {labels!r}")
        check_contract_settings(self.accounting, self.constraint_queries)

    @property
    def round_labels(self) -> int:
        """The new labels a ``pay_once`` round pays: ``labels_per_round`` or ``G n``."""
        if self.labels_per_round is not None:
            return self.labels_per_round
        return self.generations_per_round * self.ga.num_particles

    def replace(self, **overrides: Any) -> GARunConfig:
        """This configuration with settings replaced (dotted keys such as ``ga.num_particles``
        or nested dicts; ``llome_jax.configs.override``)."""
        return configs.override(self, overrides)

    def to_dict(self) -> dict[str, Any]:
        return configs.to_dict(self)


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["ga_state", "run_key"],
    meta_fields=["round", "stop"],
)
@dataclasses.dataclass(frozen=True)
class GARoundState:
    """What the GA carries between rounds (a pytree, checkpointed whole).

    Attributes:
      ga_state: the ``ga.GAState`` after the last generation (its ``generation`` counts them).
      run_key: the key whose split gives every generation its key (``ga_loop.start``).
      round: rounds done (static; a checkpoint's step).
      stop: why the run stopped early (``""``: it did not).
    """

    ga_state: Any
    run_key: Any
    round: int = 0
    stop: str = ""


class GeneticAlgorithm(RoundOptimizerBase):
    """The paper's GA as a :class:`~llome_jax.runner.RoundOptimizer` over :class:`GARoundState`.

    Construction resolves the function (or takes ``objective``, an
    :class:`~llome_jax.objective.Objective`, instead of ``cfg.function``), checks the start
    sequence and makes one checked call of a custom objective (clear errors first).
    """

    name = "ga"
    migrations = GA_MIGRATIONS

    def __init__(self, cfg: GARunConfig, objective: Objective | None = None) -> None:
        checked = self.checked_objective(cfg, objective, check_ehrlich=True)
        super().__init__(cfg, checked, custom_objective=objective is not None)
        self.x0 = ga_loop.validate_ga_inputs(checked, checked.x0, cfg.ga)

    @property
    def _fn(self) -> Objective:
        """What the generations call: the objective, behind the label cache on the host."""
        return self.oracle.cached_objective()

    def _advance(self, state: GARoundState, start: int, stop: int) -> tuple[Any, np.ndarray, Any]:
        """Generations ``start .. stop - 1``: the new ``GAState``, their particles
        int32 ``[(stop - start) n, L]`` in evaluation order, and their values."""
        keys = ga_loop.generation_keys(state.run_key, start, stop)
        ga_state, (_, populations, values) = ga_loop.advance(
            state.ga_state, keys, self._fn, self.cfg.ga, keep_populations=True
        )
        length = self.objective.length
        x = np.asarray(populations, np.int32).reshape(-1, length)
        v = np.asarray(values, np.float64).reshape(-1)
        return ga_state, x, np.where(np.isfinite(v), v, -np.inf)

    def _result(
        self,
        round_index: int,
        ga_state: Any,
        proposals: tuple[np.ndarray, np.ndarray],
        x: np.ndarray,
        v: np.ndarray,
        best: float | None = None,
    ) -> RoundResult:
        """The round's result: ``x``/``v`` go to ``evaluated.csv``; ``mean_regret``,
        ``frac_feasible`` and ``frac_unique`` are over the ``proposals`` (particles, values);
        ``best``: the best label so far (default: the GA state's best-so-far)."""
        from llome_jax.metrics import regret, round_metrics

        best = float(ga_state.best_value) if best is None else float(best)
        optimum, worst = self.objective.optimal_value, self.objective.worst_value
        best_regret = regret([best], optimum, worst)[0]
        px, pv = proposals
        record = round_metrics(
            round_index,
            px,
            pv,
            v,
            num_generated=len(px),
            optimal_value=optimum,
            worst_value=worst,
            num_evaluations=self.oracle.num_paid,
            num_proposals=len(px),
            min_regret=None if np.isnan(best_regret) else float(best_regret),
            best_value=best,
            generations=int(ga_state.generation),
        )
        return RoundResult(x, v.astype(np.float64), record)

    def _labelled(self, x: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Register the particles ``x`` (values ``v``) with the oracle; the rows that go to
        ``evaluated.csv``: with ``pay_once`` the sequences paid for now, else the distinct
        ones (first occurrence, evaluation order)."""
        if self.oracle.pay_once:
            self.oracle.record_labels(x, v)
            return self.oracle.take_paid(self.objective.length)
        self.oracle.record_labels(x, v, num_paid=len(x))
        self.oracle.take_paid(self.objective.length)
        _, first = np.unique(x, axis=0, return_index=True)
        first = np.sort(first)
        return x[first], v[first]

    def init(self, key: jax.Array) -> tuple[GARoundState, RoundResult]:
        """Round 0: ``n0`` generations from the mutated copies of the start sequence."""
        from llome_jax.runner import round0_key

        ga_state, run_key = ga_loop.start(round0_key(key), self._fn, self.x0, self.cfg.ga)
        state = GARoundState(ga_state, run_key)
        n0 = self.cfg.initial_generations
        ga_state, particles, values = self._advance(state, 0, n0)
        x, v = self._labelled(particles, values)
        result = self._result(0, ga_state, (particles, values), x, v)
        return GARoundState(ga_state, run_key, 0), result

    def round(
        self, state: GARoundState, *, progress: bool = False
    ) -> tuple[GARoundState, RoundResult | None]:
        """The next block of generations. Under a label budget (``oracle.limit``) the round
        ends at the generation that spends it: that generation's particles are labelled up to
        the budget (:meth:`Oracle.affordable`, evaluation order) and the GA state stays before
        it, so that a run extended later redraws the same generation and pays only the rest."""
        r = self.round_index(state) + 1
        per_round = self.cfg.generations_per_round
        g = int(state.ga_state.generation)
        oracle = self.oracle
        if not oracle.pay_once and (
            oracle.remaining() is None
            or oracle.remaining() >= per_round * self.cfg.ga.num_particles
        ):
            ga_state, particles, values = self._advance(state, g, g + per_round)
            x, v = self._labelled(particles, values)
            new = GARoundState(ga_state, state.run_key, r)
            return new, self._result(r, ga_state, (particles, values), x, v)
        budget = self.cfg.round_labels
        paid_before, ga_state = oracle.num_paid, state.ga_state
        run_limit = oracle.limit
        if self.cfg.labels_per_round is not None:  # exactly: the round's cut as the budget's
            round_limit = paid_before + budget
            oracle.limit = round_limit if run_limit is None else min(run_limit, round_limit)
        chunks: list[tuple[np.ndarray, np.ndarray]] = []
        cut_best = -np.inf  # the best label of a generation cut at the budget
        for step in range(MAX_GENERATIONS_PER_ROUND * per_round):
            if oracle.num_paid - paid_before >= budget or oracle.remaining() == 0:
                break
            left = oracle.remaining()
            kept = None  # the state before a generation the budget may end in (_advance donates)
            if left is not None and left < self.cfg.ga.num_particles:
                kept = jax.tree.map(jnp.copy, ga_state)
            current = GARoundState(ga_state, state.run_key, state.round)
            advanced, particles, values = self._advance(current, g + step, g + step + 1)
            cut = oracle.affordable(particles)
            if cut < len(particles):  # the budget ends inside this generation
                particles, values = particles[:cut], values[:cut]
                self._record(particles, values)
                chunks.append((particles, values))
                cut_best = float(np.max(values, initial=-np.inf))
                ga_state = kept
                break
            self._record(particles, values)
            ga_state = advanced
            chunks.append((particles, values))
        round_full = oracle.remaining() == 0
        oracle.limit = run_limit
        x, v = oracle.take_paid(self.objective.length)
        stop = ""
        spent = round_full
        if oracle.pay_once and not spent and oracle.num_paid - paid_before < budget:
            stop = (
                f"the GA paid {oracle.num_paid - paid_before} of {budget} labels in "
                f"{MAX_GENERATIONS_PER_ROUND * per_round} generations (it proposes little new)"
            )
        # the cut generation is not in the GA state: a label of it at the optimum stops the run
        stop = stop or optimum_stop_reason(cut_best, self.objective.optimal_value)
        length = self.objective.length
        proposals = (
            np.concatenate([c[0] for c in chunks]) if chunks else np.zeros((0, length), np.int32),
            np.concatenate([c[1] for c in chunks]) if chunks else np.zeros(0),
        )
        new = GARoundState(ga_state, state.run_key, r, stop)
        best = max(float(ga_state.best_value), cut_best)
        return new, self._result(r, ga_state, proposals, x, v, best=best)

    def _record(self, particles: np.ndarray, values: np.ndarray) -> None:
        """Register one generation's particles (every one paid under ``every_evaluation``)."""
        if self.oracle.pay_once:
            self.oracle.record_labels(particles, values)
        else:
            self.oracle.record_labels(particles, values, num_paid=len(particles))

    def round_index(self, state: GARoundState) -> int:
        return int(state.round)

    def stop_reason(self, state: GARoundState) -> str:
        best = float(state.ga_state.best_value)
        return optimum_stop_reason(best, self.objective.optimal_value) or state.stop

    def save(self, manager: Any, state: GARoundState) -> None:
        r = self.round_index(state)
        manager.save(r, state, {"round": r, "stop": state.stop})

    def restore(self, manager: Any) -> GARoundState | None:
        cfg, num_states = self.cfg.ga, self.objective.num_states
        abstract = jax.eval_shape(  # shapes only: no objective call
            lambda k: GARoundState(
                ga.init(k, self.x0, cfg, num_states, 0.0), jax.random.split(k)[1]
            ),
            jax.random.key(0),
        )
        restored = manager.restore_latest_good(abstract)
        if restored is None:
            return None
        step, state, metadata = restored
        return dataclasses.replace(state, round=int(step), stop=str(metadata.get("stop", "")))

    def round0_description(self) -> str:
        return f"GA, {self.cfg.initial_generations} generations of {self.cfg.ga.num_particles}"

    def round_line(self, record: Mapping[str, Any]) -> str:
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
