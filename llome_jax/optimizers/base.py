"""The ask/tell base of an optimizer: :class:`AskTellOptimizer` owns everything but the method.

An optimizer of a comparison supplies three things (evosax's ``Strategy`` shape, one round of
labels per ``ask``):

* a frozen configuration dataclass that extends :class:`BenchmarkSettings` (the settings every
  method of a comparison shares, one name each) with its own;
* ``init_state(key, data) -> state``: its pytree state after round 0 (shapes fixed by the
  configuration, never by the data, so that a checkpoint restores into it);
* ``ask(key, state, data, num) -> (proposals int[m, L], state)``: at most ``num`` new distinct
  sequences to label; ``tell(state, sequences, values, data) -> state``: the labels it paid for.

``data`` is a :class:`LabelledData`, what the optimizer knows: round 0's GA archive in the order
the GA met its sequences (the public start sequence among them, or first when the GA never met
it), then every label paid since, in the order paid. The optimizer never sees the
objective; labels come only through the base's :class:`~llome_jax.oracle.Oracle`.

The base, written once for every method: round 0 (the shared GA archive:
``ga_loop.run_archive(runner.round0_key(key), ...)`` with ``round0_generations`` of
``round0_ga``, its distinct sequences paid once), labelling through the oracle (pay once, the
budget cut inside a round: ``num`` is never above the labels left), the information contract's
checks on what ``ask`` returns (:class:`ContractError`: a sequence proposed twice, one already
labelled, more than ``num``, or a malformed array), the round record (``metrics.round_metrics``
plus :meth:`AskTellOptimizer.record`'s own fields) and its progress line, stop reasons (the
optimum found, or nothing proposed), checkpoints of the pytree state (orbax) and exact resume,
``config.json`` with ``config_version`` and migrations (:class:`~llome_jax.plugin.
RoundOptimizerBase`), provenance, trackers and the plot (:func:`llome_jax.runner.run`).

Keys: round 0's GA gets ``round0_key(key)``, ``init_state`` ``fold_in(key, 2)``, round ``r``'s
``ask`` ``fold_in(fold_in(key, 3), r)``; so a resumed run asks with the keys an uninterrupted one
does. :meth:`AskTellOptimizer.numpy_rng` turns a key into a NumPy generator for host code.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

import jax
import numpy as np

from llome_jax import configs, ga_loop
from llome_jax.ga import GAConfig
from llome_jax.metrics import round_metrics
from llome_jax.objective import Objective
from llome_jax.oracle import check_contract_settings
from llome_jax.plugin import RoundOptimizerBase
from llome_jax.runner import RoundResult, optimum_stop_reason, progress_text, round0_key

__all__ = [
    "AskTellOptimizer",
    "AskTellState",
    "BenchmarkSettings",
    "ContractError",
    "LabelledData",
]


@dataclasses.dataclass(frozen=True)
class BenchmarkSettings:
    """The settings every optimizer of a comparison shares, one name each (an optimizer's
    configuration extends this dataclass with its own fields).

    Attributes:
      function: the problem, a paper function (``"f2"``) or ``"Ehr(v,L)-c-k-q"``.
      instance_seed: the Ehrlich instance of a configuration name (``None``: the paper's, or 0).
      seed: the run seed (round 0's GA, every ``ask``).
      rounds: rounds after round 0 (a cap under ``--budget``).
      labels_per_round: at most this many labels a round (``j``).
      round0_generations: ``n0``, round 0's GA generations (the paper: 10).
      round0_ga: round 0's GA (the paper's: 1000 particles, mutation 0.005).
      accounting / constraint_queries: the information contract (:mod:`llome_jax.oracle`).
    """

    function: str = "f2"
    instance_seed: int | None = None
    seed: int = 0
    rounds: int = 10
    labels_per_round: int = 2000
    round0_generations: int = 10
    round0_ga: GAConfig = dataclasses.field(default_factory=GAConfig)
    accounting: str = "pay_once"
    constraint_queries: str = "off"

    def __post_init__(self) -> None:
        check_contract_settings(self.accounting, self.constraint_queries)
        for name in ("rounds", "labels_per_round", "round0_generations"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}")

    def replace(self, **overrides: Any) -> Any:
        """This configuration with settings replaced (dotted keys or nested dicts, checked:
        :func:`llome_jax.configs.override`)."""
        return configs.override(self, overrides)

    def to_dict(self) -> dict[str, Any]:
        """``config.json``'s nested dict."""
        return configs.to_dict(self)


class LabelledData(NamedTuple):
    """What an optimizer knows when it asks: round 0's GA archive in the order the GA met its
    sequences (the public start sequence among them, or first), then every label paid since in
    the order paid. Read-only arrays.

    Attributes:
      sequences: int32 ``[N, L]``.
      values: float64 ``[N]`` (``-inf``: infeasible).
      num_states: ``v``, the alphabet size (states ``0 .. v - 1``).
    """

    sequences: np.ndarray
    values: np.ndarray
    num_states: int

    @property
    def best(self) -> tuple[np.ndarray, float]:
        """The best labelled sequence and its value (the first of ties)."""
        i = int(np.argmax(self.values))
        return self.sequences[i], float(self.values[i])


def _extended(data: LabelledData, x: np.ndarray, v: np.ndarray) -> LabelledData:
    """``data`` with the rows ``x`` (values ``v``) appended, read-only."""
    sequences = np.concatenate([data.sequences, np.asarray(x, np.int32)])
    values = np.concatenate([data.values, np.asarray(v, np.float64)])
    sequences.setflags(write=False)
    values.setflags(write=False)
    return LabelledData(sequences, values, data.num_states)


class ContractError(ValueError):
    """What ``ask`` returned breaks the information contract (a sequence proposed twice, one
    already labelled, more than asked for, or not an ``int [m, L]`` array of valid states)."""


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["key", "inner"],
    meta_fields=["round", "stop", "best", "start_at"],
)
@dataclasses.dataclass(frozen=True)
class AskTellState:
    """What the base carries between rounds (checkpointed whole): the rounds' ``key``, the
    optimizer's own ``inner`` state, rounds done, why the run stopped (``""``: it did not), the
    best label so far and where round 0's archive holds the start sequence (its row in
    :class:`LabelledData`)."""

    key: Any
    inner: Any
    round: int = 0
    stop: str = ""
    best: float = float("-inf")
    start_at: int = 0


class AskTellOptimizer(RoundOptimizerBase):
    """The base of an ask/tell optimizer (module docstring): a subclass sets ``name`` (and
    ``config_class``, ``migrations``) and implements :meth:`ask`; :meth:`init_state`,
    :meth:`tell` and :meth:`record` are optional.

    Args:
      cfg: the configuration (a :class:`BenchmarkSettings` or an extension of it).
      objective: an :class:`~llome_jax.objective.Objective` to optimise instead of
        ``cfg.function``.
    """

    #: the configuration dataclass (a :class:`BenchmarkSettings` extension)
    config_class: ClassVar[type] = BenchmarkSettings

    def __init__(self, cfg: Any, objective: Objective | None = None) -> None:
        if not isinstance(cfg, BenchmarkSettings):
            raise ValueError(
                f"{type(self).__name__} needs a BenchmarkSettings configuration; got {type(cfg)}"
            )
        checked = self.checked_objective(cfg, objective, check_ehrlich=True)
        super().__init__(cfg, checked, custom_objective=objective is not None)
        self.x0 = ga_loop.validate_ga_inputs(checked, checked.x0, cfg.round0_ga)

    # ------------------------------------------------------------------ what a method supplies
    def init_state(self, key: jax.Array, data: LabelledData) -> Any:
        """The optimizer's state after round 0 (default: none, ``()``)."""
        return ()

    def ask(
        self, key: jax.Array, state: Any, data: LabelledData, num: int
    ) -> tuple[np.ndarray, Any]:
        """At most ``num`` new distinct sequences (int ``[m, L]``) to label, and the state."""
        raise NotImplementedError(f"{type(self).__name__} must implement ask")

    def tell(
        self, state: Any, sequences: np.ndarray, values: np.ndarray, data: LabelledData
    ) -> Any:
        """The state after the labels it paid for (``data`` already holds them); default:
        unchanged."""
        return state

    def record(
        self, state: Any, sequences: np.ndarray, values: np.ndarray, data: LabelledData
    ) -> dict[str, Any]:
        """Fields of its own for the round's ``rounds.jsonl`` record (default: none)."""
        return {}

    # ------------------------------------------------------------------ helpers for methods
    @staticmethod
    def numpy_rng(key: jax.Array) -> np.random.Generator:
        """A NumPy generator seeded from ``key`` (for an ``ask`` written with NumPy)."""
        return np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())

    def data(self, start_at: int = 0) -> LabelledData:
        """What the optimizer knows now (:class:`LabelledData`), from the oracle's labels (the
        start sequence, public under ``pay_once``, put at row ``start_at``)."""
        x, v = self.oracle.known()
        if self.oracle.pay_once and start_at > 0 and len(x) > start_at:
            order = np.r_[1 : start_at + 1, 0, start_at + 1 : len(x)]
            x, v = x[order], v[order]
        x.setflags(write=False)
        v.setflags(write=False)
        return LabelledData(x, v, int(self.objective.num_states))

    # ------------------------------------------------------------------ the round protocol
    def init(self, key: jax.Array) -> tuple[AskTellState, RoundResult]:
        """Round 0: the shared GA archive, paid once (its distinct sequences, the public start
        sequence excluded; ``every_evaluation``: ``n0 n``), then :meth:`init_state`."""
        cfg, oracle = self.cfg, self.oracle
        archive = ga_loop.run_archive(
            round0_key(key),
            oracle.cached_objective(),
            self.x0,
            cfg.round0_generations,
            cfg.round0_ga,
        )
        x, v, _ = archive.to_numpy()
        x, v = np.asarray(x, np.int32), np.asarray(v, np.float64)
        num_particles = cfg.round0_generations * cfg.round0_ga.num_particles
        oracle.record_labels(x, v, num_paid=num_particles)
        paid_x, paid_v = oracle.take_paid(self.objective.length)
        if not oracle.pay_once:
            paid_x, paid_v = x, v
        best = float(np.max(v)) if v.size else float("-inf")
        record = round_metrics(
            0,
            x,
            v,
            v,
            num_generated=num_particles,
            optimal_value=self.objective.optimal_value,
            worst_value=self.objective.worst_value,
            num_evaluations=oracle.num_paid,
            num_proposals=num_particles,
            best_value=best,
        )
        record["frac_unique"] = len(x) / num_particles  # over the GA's proposals
        at = np.flatnonzero((x == np.asarray(self.x0, np.int32)[None]).all(axis=1))
        start_at = int(at[0]) if at.size else 0
        inner = self.init_state(jax.random.fold_in(key, 2), self.data(start_at))
        state = AskTellState(jax.random.fold_in(key, 3), inner, 0, "", best, start_at)
        return state, RoundResult(paid_x, paid_v, record)

    def round(
        self, state: AskTellState, *, progress: bool = False
    ) -> tuple[AskTellState, RoundResult | None]:
        """One round: ``ask`` for at most ``labels_per_round`` (and the labels left under the
        budget), check and label the proposals, ``tell`` the optimizer, record the round."""
        r = state.round + 1
        oracle, length = self.oracle, self.objective.length
        num = self.cfg.labels_per_round
        if (left := oracle.remaining()) is not None:
            num = min(num, left)
        data = self.data(state.start_at)
        proposals, inner = self.ask(jax.random.fold_in(state.key, r), state.inner, data, num)
        proposals = self._checked(proposals, num)
        if not len(proposals):
            stop = f"{self.name} proposed no new sequence"
            new = dataclasses.replace(state, round=r, inner=inner, stop=stop)
            return new, None
        labels = oracle.label(proposals)
        x, v = oracle.take_paid(length)
        # what it knows now: the labels before, then this round's paid ones in the order paid
        # (what the oracle's known() gives; not read from it a second time)
        after = _extended(data, x, v)
        inner = self.tell(inner, x, v, after)
        best = max(state.best, float(np.max(v)) if v.size else float("-inf"))
        values = np.asarray(labels.values, np.float64)
        record = round_metrics(
            r,
            proposals,
            values,
            after.values,
            num_generated=len(proposals),
            optimal_value=self.objective.optimal_value,
            worst_value=self.objective.worst_value,
            num_evaluations=oracle.num_paid,
            num_proposals=len(proposals),
            best_value=best,
            **self.record(inner, x, v, after),
        )
        new = AskTellState(state.key, inner, r, "", best, state.start_at)
        return new, RoundResult(x, v, record)

    def _checked(self, proposals: Any, num: int) -> np.ndarray:
        """``proposals`` as int32 ``[m, L]`` after the contract's checks.

        Raises:
          ContractError: not an ``[m, L]`` array of valid states, more than ``num`` rows, a row
            twice, or a row already labelled.
        """
        name = self.name or type(self).__name__
        try:
            x = self.objective.check_sequences(np.asarray(proposals))
        except ValueError as error:
            raise ContractError(f"{name}'s ask returned {error}") from None
        x = np.asarray(x, np.int32)
        if len(x) > num:
            raise ContractError(f"{name}'s ask returned {len(x)} sequences; it may ask {num}")
        if len(np.unique(x, axis=0)) < len(x):
            raise ContractError(f"{name}'s ask returned a sequence twice")
        if known := int(self.oracle.is_labelled(x).sum()):  # the public start included
            raise ContractError(
                f"{name}'s ask returned {known} sequence(s) already labelled (the labelled set "
                "is in data: propose new ones)"
            )
        return x

    def round_index(self, state: AskTellState) -> int:
        return int(state.round)

    def stop_reason(self, state: AskTellState) -> str:
        return optimum_stop_reason(state.best, self.objective.optimal_value) or state.stop

    def save(self, manager: Any, state: AskTellState) -> None:
        r = self.round_index(state)
        metadata = {"round": r, "stop": state.stop, "best": state.best, "start_at": state.start_at}
        manager.save(r, state, metadata)

    def restore(self, manager: Any) -> AskTellState | None:
        """The newest readable checkpoint, restored into the shapes :meth:`init_state` gives
        (called on the start sequence alone: the shapes must not depend on the data)."""
        from llome_jax.checkpoint import abstract_like

        x0 = np.asarray(self.x0, np.int32)[None]
        start = LabelledData(x0, np.zeros(1), int(self.objective.num_states))
        key = jax.random.key(0)
        abstract = abstract_like(AskTellState(key, self.init_state(key, start)))
        restored = manager.restore_latest_good(abstract)
        if restored is None:
            return None
        step, state, metadata = restored
        return dataclasses.replace(
            state,
            round=int(step),
            stop=str(metadata.get("stop", "")),
            best=float(metadata.get("best", float("-inf"))),
            start_at=int(metadata.get("start_at", 0)),
        )

    def round0_description(self) -> str:
        return (
            f"GA, {self.cfg.round0_generations} generations of {self.cfg.round0_ga.num_particles}"
        )

    def round_line(self, record: Mapping[str, Any]) -> str:
        return (
            f"round {record['round']}: {record['num_evaluations']} labels paid, "
            f"{progress_text(record)}, {record['num_generated']} proposed"
        )

    # ------------------------------------------------------------------ the contract tests
    @classmethod
    def test_config(cls, **overrides: Any) -> Any:
        """A configuration of a few seconds for the registry's contract tests
        (``tests/test_registry_contract.py``): ``Ehr(8,8)-2-2-2`` instance 1, 2 rounds of 16
        labels after a 3-generation GA of 32 particles; an optimizer whose own settings need
        other small values overrides this."""
        small = {
            "function": "Ehr(8,8)-2-2-2",
            "instance_seed": 1,
            "seed": 0,
            "rounds": 2,
            "labels_per_round": 16,
            "round0_generations": 3,
            "round0_ga": GAConfig(num_particles=32, mutation_prob=0.05),
        }
        return cls.config_class(**{**small, **overrides})
