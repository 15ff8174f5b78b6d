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
it), then every label paid since, in the order paid, and a ``lookup`` of labels by sequence (a
view of the oracle that cannot label). The optimizer never sees the objective; labels come only
through the base's :class:`~llome_jax.oracle.Oracle`. ``init_state``'s data also holds
``round0`` (:class:`Round0`: round 0's last GA state, its generation key and every particle it
evaluated), for a method that continues round 0's GA.

A method that proposes in steps (the GA's generations) sets ``asks_until_paid``: the base then
asks again within a round, and tells after each ask, until the round's labels are paid
(``round_labels``), the optimizer returns ``None`` or ``max_asks`` asks are spent (the run then
stops: it proposes little new). ``ask`` may return a third element, anything it wants
:meth:`AskTellOptimizer.record` to see (``asked``: one per ask of the round).

The base, written once for every method: round 0 (the shared GA archive:
``ga_loop.run_archive(runner.round0_key(key), ...)`` with ``round0_generations`` of
``round0_ga``, its distinct sequences paid once), labelling through the oracle (pay once, the
budget cut inside a round: ``num`` is never above the labels left), the information contract's
checks on what ``ask`` returns (:class:`ContractError`: a sequence proposed twice, one already
labelled, more than ``num``, or a malformed array), the round record (``metrics.round_metrics``
plus :meth:`AskTellOptimizer.record`'s own fields) and its progress line, stop reasons (the
optimum found, or nothing proposed), checkpoints of the pytree state (orbax) and exact resume,
``config.json`` with ``config_version`` and migrations (:class:`~llome_jax.optimizers.plugin.
RoundOptimizerBase`), provenance, trackers and the plot (:func:`llome_jax.run.runner.run`).

Keys: round 0's GA gets ``round0_key(key)``, ``init_state`` ``fold_in(key, 2)`` (``state_key``),
round ``r``'s first ``ask`` ``k_r = fold_in(fold_in(key, 3), r)`` and its ask ``i > 0``
``fold_in(k_r, i)``; so a resumed run asks with the keys an uninterrupted one does.
:meth:`AskTellOptimizer.numpy_rng` turns a key into a NumPy generator for host code.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import jax
import numpy as np

from llome_jax import configs
from llome_jax.ga import GAConfig
from llome_jax.ga import loop as ga_loop
from llome_jax.metrics import round_metrics
from llome_jax.objective import Objective
from llome_jax.optimizers.plugin import RoundOptimizerBase
from llome_jax.oracle import check_contract_settings
from llome_jax.run.checkpoint import abstract_like
from llome_jax.run.runner import RoundResult, optimum_stop_reason, progress_text, round0_key

__all__ = [
    "AskTellOptimizer",
    "AskTellState",
    "BenchmarkSettings",
    "ContractError",
    "LabelledData",
    "Round0",
    "first_unlabelled",
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

    The GA's, LLOME's and LaMBO-2's configurations extend this class, so these are real fields
    of each, under these names in ``config.json``, presets, ``--set`` and the docs; a new shared
    setting is a field here and, per optimizer, a migration (``llome_jax.run.migrations``). A
    subclass may redefine a field's default (the GA's ``labels_per_round`` is ``None``: whole
    generations; a setting whose default is ``None`` may be ``None``). Class attributes:
    ``RENAMED_SETTINGS`` (old dotted key -> today's: presets, ``--config`` and ``--set`` accept
    the old name with a note, :func:`llome_jax.configs.upgrade_keys`) and ``DERIVED_SETTINGS``
    (nested settings that copy a shared one, never written: LLOME's ``filter.num_selected``).
    """

    RENAMED_SETTINGS: ClassVar[Mapping[str, str]] = {}
    DERIVED_SETTINGS: ClassVar[tuple[str, ...]] = ()

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
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name in ("rounds", "labels_per_round", "round0_generations"):
            value = getattr(self, name)
            if value is None and defaults[name] is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}")

    def replace(self, **overrides: Any) -> Any:
        """This configuration with settings replaced (dotted keys or nested dicts, checked:
        :func:`llome_jax.configs.override`)."""
        return configs.override(self, overrides)

    def to_dict(self) -> dict[str, Any]:
        """``config.json``'s nested dict."""
        return configs.to_dict(self)


class Round0(NamedTuple):
    """Round 0's GA, for a method that continues it (``init_state``'s ``data.round0``).

    Attributes:
      ga_state: the ``ga.GAState`` after its ``n0`` generations.
      run_key: the key whose split gives every generation its key (``ga_loop.start``).
      particles: int32 ``[n0 n, L]`` every particle it evaluated, in evaluation order.
      values: float64 ``[n0 n]`` their labels.
    """

    ga_state: Any
    run_key: Any
    particles: np.ndarray
    values: np.ndarray


class LabelledData(NamedTuple):
    """What an optimizer knows when it asks: round 0's GA archive in the order the GA met its
    sequences (the public start sequence among them, or first), then every label paid since in
    the order paid. Read-only arrays.

    Attributes:
      sequences: int32 ``[N, L]``.
      values: float64 ``[N]`` (``-inf``: infeasible).
      num_states: ``v``, the alphabet size (states ``0 .. v - 1``).
      lookup: ``lookup(x int [n, L]) -> float64 [n]``, the labels of ``x``'s rows (NaN where
        unlabelled; the oracle's cache, O(n), labels nothing).
      round0: :class:`Round0` in ``init_state``'s data (``None`` elsewhere, and when the base
        asks ``init_state`` for the state's shapes only).
    """

    sequences: np.ndarray
    values: np.ndarray
    num_states: int
    lookup: Callable[[Any], np.ndarray] | None = None
    round0: Round0 | None = None

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
    return LabelledData(sequences, values, data.num_states, data.lookup)


def first_unlabelled(x: np.ndarray, lookup: Callable[[Any], np.ndarray]) -> np.ndarray:
    """int64 indices of the rows of ``x`` whose sequence is unlabelled (``lookup`` NaN), each
    sequence's first occurrence, in row order: what a ``pay_once`` ask may propose of a batch
    with repeats and known rows (the GA's generation, LaMBO-2's design)."""
    unknown = np.flatnonzero(np.isnan(lookup(x)))
    seen: set[bytes] = set()
    first = []
    for i in unknown:
        row = x[i].tobytes()
        if row not in seen:
            seen.add(row)
            first.append(int(i))
    return np.asarray(first, np.int64)


def _payload(inner: Any) -> Any:
    """What a checkpoint holds: the optimizer's state, or a placeholder when it has no arrays."""
    return inner if jax.tree.leaves(inner) else np.zeros((), np.int32)


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

    def __getattr__(self, name: str) -> Any:
        """The optimizer's own state's attributes (``result.state.history`` of LaMBO-2)."""
        if name.startswith("__") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class AskTellOptimizer(RoundOptimizerBase):
    """The base of an ask/tell optimizer (module docstring): a subclass sets ``name`` (and
    ``config_class``, ``migrations``) and implements :meth:`ask`; :meth:`init_state`,
    :meth:`tell`, :meth:`record` and :meth:`record0` are optional.

    Args:
      cfg: the configuration (a :class:`BenchmarkSettings`, an extension of it, or any frozen
        dataclass with its fields).
      objective: an :class:`~llome_jax.objective.Objective` to optimise instead of
        ``cfg.function``.
    """

    #: the configuration dataclass (a :class:`BenchmarkSettings` extension)
    config_class: ClassVar[type] = BenchmarkSettings
    #: ask again within a round until its labels are paid (a method that proposes in steps)
    asks_until_paid: ClassVar[bool] = False
    #: what the stop reason calls its asks (``"generations"`` for the GA)
    ask_unit: ClassVar[str] = "asks"
    #: a round whose ``ask`` returns no sequence ends the run (``False``: the round is recorded
    #: with no label and the next one asks again, as LaMBO-2's stochastic design may)
    stops_when_nothing_new: ClassVar[bool] = True

    def __init__(self, cfg: Any, objective: Objective | None = None) -> None:
        missing = [
            f.name for f in dataclasses.fields(BenchmarkSettings) if not hasattr(cfg, f.name)
        ]
        if missing:
            raise ValueError(
                f"{type(self).__name__} needs a BenchmarkSettings configuration; {type(cfg)} has "
                f"no {', '.join(missing)}"
            )
        checked = self.objective_for(cfg, objective)
        super().__init__(cfg, checked, custom_objective=objective is not None)
        self.x0 = ga_loop.validate_ga_inputs(checked, checked.x0, cfg.round0_ga)
        #: whether the driver shows progress bars this round (for an ``ask`` that draws its own)
        self.progress = False

    def objective_for(self, cfg: Any, objective: Objective | None) -> Objective:
        """The objective the run optimises: ``objective`` after one checked call, or the Ehrlich
        function of ``cfg.function`` (:meth:`checked_objective`); a method that builds its own
        (LLOME's runtime) returns that one."""
        return self.checked_objective(cfg, objective, check_ehrlich=True)

    # ------------------------------------------------------------------ what a method supplies
    def init_state(self, key: jax.Array, data: LabelledData) -> Any:
        """The optimizer's state after round 0 (default: none, ``()``). Its shapes must not
        depend on ``data`` (``data.round0`` is ``None`` when only the shapes are asked for)."""
        return ()

    def ask(self, key: jax.Array, state: Any, data: LabelledData, num: int) -> tuple[Any, ...]:
        """``(proposals, state)`` or ``(proposals, state, asked)``: at most ``num`` new distinct
        sequences (int ``[m, L]``) to label (``None``: nothing more this round, with
        ``asks_until_paid``), the state, and optionally anything :meth:`record` should see."""
        raise NotImplementedError(f"{type(self).__name__} must implement ask")

    def tell(
        self, state: Any, sequences: np.ndarray, values: np.ndarray, data: LabelledData
    ) -> Any:
        """The state after the labels it paid for (``data`` already holds them); default:
        unchanged."""
        return state

    def record(
        self,
        state: Any,
        sequences: np.ndarray,
        values: np.ndarray,
        data: LabelledData,
        *,
        asked: Sequence[Any] = (),
    ) -> dict[str, Any]:
        """Fields of its own for the round's ``rounds.jsonl`` record (default: none); they are
        applied last, so a method may restate a common field over what it generated (the GA's
        ``mean_regret`` over its particles). ``asked`` (one per ask) is passed only when its
        asks returned a third element, so a ``record`` without it still works."""
        return {}

    def record0(self, state: Any, data: LabelledData) -> dict[str, Any]:
        """Fields of its own for round 0's record (``data.round0`` holds round 0's GA)."""
        return {}

    def round_labels(self) -> tuple[int, bool]:
        """The labels a round pays and whether its last ask may pay past them (whole steps);
        default ``(labels_per_round, False)``."""
        return int(self.cfg.labels_per_round), False

    def max_asks(self) -> int:
        """Asks a round may make with ``asks_until_paid`` before the run stops (default 100)."""
        return 100

    def round0_ga_key(self, key: jax.Array) -> jax.Array:
        """Round 0's GA key from the run key (default ``runner.round0_key``, shared by every
        method of a seed)."""
        return round0_key(key)

    def state_key(self, key: jax.Array) -> jax.Array:
        """:meth:`init_state`'s key from the run key (default ``fold_in(key, 2)``)."""
        return jax.random.fold_in(key, 2)

    def method_stop(self, state: Any) -> str:
        """Why the method itself ends the run, read from its own ``state`` (default ``""``: it
        does not). A single-ask method whose ``ask`` returns ``None`` proposals with a reason
        here ends the run before the round: no record, the reason in ``stopped.json``."""
        return ""

    def best_of(self, state: Any) -> float:
        """The best label a restored ``state`` knows, for a checkpoint whose metadata has none
        (default ``-inf``)."""
        return float("-inf")

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
        return LabelledData(x, v, int(self.objective.num_states), self.oracle.lookup)

    @property
    def display_name(self) -> str:
        """How stop reasons name the method (``"the GA"``; default its ``name``)."""
        return self.name or type(self).__name__

    # ------------------------------------------------------------------ the round protocol
    def init(self, key: jax.Array) -> tuple[AskTellState, RoundResult]:
        """Round 0: the shared GA (``ga_loop.start`` and ``n0`` generations, what
        ``ga_loop.run_archive`` computes), its distinct sequences paid once (the public start
        sequence excluded; ``every_evaluation``: ``n0 n``), then :meth:`init_state`."""
        cfg, oracle = self.cfg, self.oracle
        fn = oracle.cached_objective()
        ga_state, run_key = ga_loop.start(self.round0_ga_key(key), fn, self.x0, cfg.round0_ga)
        keys = ga_loop.generation_keys(run_key, 0, cfg.round0_generations)
        ga_state, (_, populations, pvalues) = ga_loop.advance(
            ga_state, keys, fn, cfg.round0_ga, keep_populations=True
        )
        particles = np.asarray(populations, np.int32).reshape(-1, self.objective.length)
        pv = np.asarray(pvalues, np.float64).reshape(-1)
        pv = np.where(np.isfinite(pv), pv, -np.inf)
        _, first = np.unique(particles, axis=0, return_index=True)
        first = np.sort(first)  # the archive: first occurrences in evaluation order
        x, v = particles[first], pv[first]
        num_particles = len(particles)
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
        particles.setflags(write=False)
        pv.setflags(write=False)
        data = self.data(start_at)._replace(round0=Round0(ga_state, run_key, particles, pv))
        inner = self.init_state(self.state_key(key), data)
        record.update(self.record0(inner, data))
        state = AskTellState(jax.random.fold_in(key, 3), inner, 0, "", best, start_at)
        return state, RoundResult(paid_x, paid_v, record)

    def round(
        self, state: AskTellState, *, progress: bool = False
    ) -> tuple[AskTellState, RoundResult | None]:
        """One round: ``ask`` for at most the round's labels (and the labels left under the
        budget), check and label the proposals, ``tell`` the optimizer; with
        ``asks_until_paid`` again until the round's labels are paid; then record the round."""
        r = state.round + 1
        self.progress = progress
        oracle, length = self.oracle, self.objective.length
        target, whole = self.round_labels()
        round_key = jax.random.fold_in(state.key, r)
        data, inner = self.data(state.start_at), state.inner
        paid_before = oracle.num_paid
        proposed: list[tuple[np.ndarray, np.ndarray]] = []
        paid: list[tuple[np.ndarray, np.ndarray]] = []
        asked: list[Any] = []
        stop = ""
        steps = self.max_asks() if self.asks_until_paid else 1
        for step in range(steps):
            left, budget_left = target - (oracle.num_paid - paid_before), oracle.remaining()
            if left <= 0 or budget_left == 0:
                break
            num = sys.maxsize if whole else left
            if budget_left is not None:
                num = min(num, budget_left)
            key = round_key if step == 0 else jax.random.fold_in(round_key, step)
            out = self.ask(key, inner, data, num)
            proposals, inner = out[0], out[1]
            if len(out) > 2:
                asked.append(out[2])
            if proposals is None:
                if not self.asks_until_paid and self.method_stop(inner):
                    return dataclasses.replace(state, inner=inner), None
                break
            proposals = self._checked(proposals, num)
            if not len(proposals) and not self.asks_until_paid and self.stops_when_nothing_new:
                stop = f"{self.display_name} proposed no new sequence"
                new = dataclasses.replace(state, round=r, inner=inner, stop=stop)
                return new, None
            labels = oracle.label(proposals)
            x, v = oracle.take_paid(length)
            # what it knows now: the labels before, then these paid ones in the order paid
            # (what the oracle's known() gives; not read from it a second time)
            data = _extended(data, x, v)
            inner = self.tell(inner, x, v, data)
            proposed.append((proposals, np.asarray(labels.values, np.float64)))
            paid.append((x, v))
        else:
            spent = oracle.num_paid - paid_before
            if self.asks_until_paid and spent < target and oracle.remaining() != 0:
                stop = (
                    f"{self.display_name} paid {spent} of {target} labels in {steps} "
                    f"{self.ask_unit} (it proposes little new)"
                )
        x = np.concatenate([p[0] for p in paid]) if paid else np.zeros((0, length), np.int32)
        v = np.concatenate([p[1] for p in paid]) if paid else np.zeros(0)
        px = np.concatenate([p[0] for p in proposed]) if proposed else x
        pv = np.concatenate([p[1] for p in proposed]) if proposed else v
        best = max(state.best, float(np.max(v)) if v.size else float("-inf"))
        record = round_metrics(
            r,
            px,
            pv,
            data.values,
            num_generated=len(px),
            optimal_value=self.objective.optimal_value,
            worst_value=self.objective.worst_value,
            num_evaluations=oracle.num_paid,
            num_proposals=len(px),
            best_value=best,
        )
        record.update(self.record(inner, x, v, data, **({"asked": asked} if asked else {})))
        new = AskTellState(state.key, inner, r, stop, best, state.start_at)
        return new, RoundResult(x, v, record)

    def _checked(self, proposals: Any, num: int) -> np.ndarray:
        """``proposals`` as int32 ``[m, L]`` after the contract's checks.

        Raises:
          ContractError: not an ``[m, L]`` array of valid states, more than ``num`` rows, or,
            under ``pay_once``, a row twice or a row already labelled (``every_evaluation``
            pays every row, repeats included).
        """
        name = self.name or type(self).__name__
        try:
            x = self.objective.check_sequences(np.asarray(proposals))
        except ValueError as error:
            raise ContractError(f"{name}'s ask returned {error}") from None
        x = np.asarray(x, np.int32)
        if len(x) > num:
            raise ContractError(f"{name}'s ask returned {len(x)} sequences; it may ask {num}")
        if not self.oracle.pay_once:
            return x
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
        return (
            optimum_stop_reason(state.best, self.objective.optimal_value)
            or state.stop
            or self.method_stop(state.inner)
        )

    def save(self, manager: Any, state: AskTellState) -> None:
        """A checkpoint of the optimizer's own state (the rounds' key is the seed's: not
        saved), the base's fields as metadata."""
        manager.save(self.round_index(state), _payload(state.inner), self.metadata(state))

    def restore(self, manager: Any) -> AskTellState | None:
        """The newest readable checkpoint, restored into the shapes :meth:`init_state` gives
        (called on the start sequence alone, ``data.round0`` ``None``: the shapes must not
        depend on the data)."""
        x0 = np.asarray(self.x0, np.int32)[None]
        start = LabelledData(x0, np.zeros(1), int(self.objective.num_states), self.oracle.lookup)
        inner = self.init_state(jax.random.key(0), start)
        restored = manager.restore_latest_good(abstract_like(_payload(inner)))
        if restored is None:
            return None
        step, payload, metadata = restored
        return self.restored_state(step, payload if jax.tree.leaves(inner) else inner, metadata)

    def restored_state(self, step: int, inner: Any, metadata: Mapping[str, Any]) -> AskTellState:
        """The base's state around a restored ``inner`` (for a method that overrides
        :meth:`save` / :meth:`restore`): the rounds' key from the seed, the rest from the
        checkpoint's ``metadata`` (``best`` by :meth:`best_of` when it has none)."""
        best = metadata.get("best")
        return AskTellState(
            jax.random.fold_in(jax.random.key(self.seed), 3),
            inner,
            int(step),
            str(metadata.get("stop", "")),
            self.best_of(inner) if best is None else float(best),
            int(metadata.get("start_at", 0)),
        )

    def metadata(self, state: AskTellState) -> dict[str, Any]:
        """A checkpoint's metadata: the base's fields."""
        return {
            "round": self.round_index(state),
            "stop": state.stop,
            "best": state.best,
            "start_at": state.start_at,
        }

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
