"""The LLOME optimizer (paper Alg. 1 "LLOME"): the ask/tell plug-in and :func:`run`.

The phases live in their own modules; this one joins them into an
:class:`~llome_jax.optimizers.AskTellOptimizer`, whose base owns round 0 (the shared GA), the
labelling, the records and the checkpoints, and which the shared driver
(:func:`llome_jax.run.runner.run`) runs:

* :mod:`~llome_jax.llome.config`: :class:`LoopConfig`, the loss schedule, input validation;
* :mod:`~llome_jax.llome.runtime`: the explicit :class:`Runtime` (function, codec, model, mesh);
* :mod:`~llome_jax.llome.state`: :class:`LoopState`, round 0 (the GA seed data), checkpoints;
* :mod:`~llome_jax.llome.finetune`: the training data ``D_i`` and ``Train(theta_i, D_i)``;
* :mod:`~llome_jax.llome.round`: one round (``propose``: train, refine, filter; the labels;
  ``next_state`` and ``round_record``).

Oracle accounting (``llome_jax.oracle``, the information contract every optimizer follows):
``num_evaluations`` counts paid labels. With ``accounting="pay_once"`` (default) round 0 pays the
GA seed data's distinct sequences, and each round its ``j`` new ones; ``"every_evaluation"`` is
the paper's (Fig. 3: "the first 10K test function evaluations ... correspond to the solutions
produced by the GA pre-solver"): ``n0 * n_GA + sum_i |S_i|``. ``evaluated.csv`` holds each paid
sequence once. Refinement and the Filter ask no constraint query unless
``constraint_queries="free"``; the checkpoint gate's check (the authors' code) is counted
(``num_constraint_queries`` in ``rounds.jsonl``).

**Objectives.** ``Llome(cfg, objective=...)`` (and :func:`run`) optimises an
:class:`~llome_jax.objective.Objective` instead of ``cfg.function``: its checked calls label the
GA seed data and each round's ``j`` sequences, its ``is_feasible`` (or "everything is feasible"
without one) serves the constraint checks of refinement, the Filter and the checkpoint gate, and
its ``optimal_value`` the regret fields and the early stop (none when unknown). The edit-reward
diagnostic (``mean_reward``) calls no objective other than an Ehrlich function: it then covers the
edits whose input was labelled before.

**Candidate log** (optional, off by default): ``Llome(cfg, candidates_dir=DIR)`` or
``run(..., log_candidates=True)`` (``DIR = out/candidates``; CLI ``--log-candidates``) writes every
round's candidates before the Filter to ``DIR/round_NNNN.npz`` (``round.CANDIDATE_FIELDS``: the
sequences, their likelihoods, refinement iteration, the Filter's choice and ``f(x)``), for the
paper's calibration, refinement and candidate-selection figures. It is not part of the
configuration and changes no other output; a resumed round rewrites its file identically.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax.llome import presets
from llome_jax.llome.config import (
    LoopConfig,
    validate_config,
)
from llome_jax.llome.finetune import optimizer_config
from llome_jax.llome.round import Proposal, next_state, propose, round_record
from llome_jax.llome.runtime import Runtime, initial_params, named_key
from llome_jax.llome.state import (
    LoopState,
    found_optimum,
    restore_checkpoint,
    save_checkpoint,
    stop_message,
)
from llome_jax.objective import Objective
from llome_jax.optimizers.base import AskTellOptimizer, AskTellState, LabelledData
from llome_jax.run.migrations import LLOME_MIGRATIONS
from llome_jax.run.runner import RunResult
from llome_jax.run.runner import run as run_rounds
from llome_jax.training.optimizer import make_optimizer

__all__ = ["Llome", "run"]


def _fmt(value: Any, spec: str) -> str:
    return (
        "n/a"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else format(value, spec)
    )


def _affordable(rows: np.ndarray, lookup: Any, num: int, pay_once: bool) -> int:
    """How many leading ``rows`` the round may label with ``num`` labels left: the longest
    prefix holding at most ``num`` sequences not labelled yet (``pay_once``), else ``num`` rows."""
    if not pay_once:
        return min(len(rows), num)
    new = np.flatnonzero(np.isnan(lookup(rows))) if len(rows) else np.zeros(0, np.int64)
    return len(rows) if len(new) <= num else int(new[num])


class Llome(AskTellOptimizer):
    """LLOME on the ask/tell base (:class:`~llome_jax.optimizers.AskTellOptimizer`), over
    :class:`LoopState`: round 0 is the base's shared GA; ``ask`` trains, refines and filters
    (:func:`~llome_jax.llome.round.propose`), ``tell`` adds the labels to ``S``
    (:func:`~llome_jax.llome.round.next_state`) and ``record`` writes the round's fields
    (:func:`~llome_jax.llome.round.round_record`). The base labels, counts and records.

    ``S`` (``LoopState.archive_*``, with the round of each label) is LLOME's own training data:
    the sequences the Filter chose each round, a chosen sequence that was labelled before
    included (``exclude_labelled=False``; it is not paid again), in the checkpoint's metadata as
    before, so old run directories resume.

    Construction validates ``cfg`` and ``objective`` (an :class:`~llome_jax.objective.Objective`
    to optimise instead of ``cfg.function``: one checked call on its start sequence), clear errors
    before anything runs, then builds the runtime unless one is given (a given runtime carries its
    own objective; ``objective`` must then be that one or ``None``).
    """

    name = "llome"
    migrations = LLOME_MIGRATIONS
    config_class = LoopConfig
    #: a round whose Filter chose nothing new is recorded, and stops the run (stop code 2)
    stops_when_nothing_new = False

    @classmethod
    def test_config(cls, **overrides: Any) -> LoopConfig:
        """The contract tests' configuration: the ``smoke`` preset with a 2-layer model, 2
        rounds, run seed 1 (seed 0 stops after one round: no training pairs)."""
        small = presets.preset(
            "smoke", seed=1, rounds=2, model_overrides=(("num_hidden_layers", 2),)
        )
        return small.replace(**overrides)

    def __init__(
        self,
        cfg: LoopConfig,
        runtime: Runtime | None = None,
        objective: Objective | None = None,
        *,
        candidates_dir: str | pathlib.Path | None = None,
    ) -> None:
        self.require_objective(objective)
        if runtime is not None and objective is not None and runtime.objective is not objective:
            raise ValueError("the runtime was built for another objective: pass one of the two.")
        validate_config(cfg, check_function=objective is None and runtime is None)
        if objective is not None and not objective.is_ehrlich:
            objective.validate()
        self.runtime = Runtime.build(cfg, objective) if runtime is None else runtime
        super().__init__(cfg, objective)
        self.custom_objective = self.runtime.custom_objective
        self.candidates_dir = None if candidates_dir is None else pathlib.Path(candidates_dir)

    def objective_for(self, cfg: Any, objective: Objective | None) -> Objective:
        """The runtime's objective (checked when the runtime was built)."""
        return self.runtime.objective

    # ------------------------------------------------------------------ ask / tell
    def state_key(self, key: jax.Array) -> jax.Array:
        """The rounds' key chain starts at ``named_key(run_key, "loop")`` (``LoopState.key``)."""
        return named_key(key, "loop")

    def init_state(self, key: jax.Array, data: LabelledData) -> LoopState:
        """The initial model and ``S_0``: round 0's distinct sequences in the order the GA met
        them (``data.round0``)."""
        assert data.round0 is not None  # restore overrides the base's shapes-only call
        particles, values = data.round0.particles, data.round0.values
        _, first = np.unique(particles, axis=0, return_index=True)
        first = np.sort(first)
        sequences, values = particles[first].astype(np.int32), values[first].astype(np.float32)
        params = initial_params(self.runtime.model)
        optimizer = make_optimizer(optimizer_config(self.cfg, self.cfg.loss(1), 1))
        return LoopState(
            round=jnp.zeros((), jnp.int32),
            key=key,
            params=params,
            reference_params=jax.tree.map(jnp.copy, params),
            opt_state=optimizer.init(params),
            num_evaluations=jnp.asarray(self.oracle.num_paid, jnp.int32),
            mean_hamming=jnp.asarray(np.nan, jnp.float32),
            temperature_offset=jnp.zeros((), jnp.float32),
            stop_code=jnp.asarray(
                1 if found_optimum(values, self.objective.optimal_value) else 0, jnp.int32
            ),
            archive_sequences=sequences,
            archive_values=values,
            archive_rounds=np.zeros(values.shape, np.int32),
        )

    def ask(self, key: jax.Array, state: LoopState, data: LabelledData, num: int) -> tuple:
        """Train, refine and filter (the rounds' keys are ``LoopState.key``'s chain): the Filter's
        choice cut at ``num`` new sequences, those not labelled yet to pay; ``None`` (stop code
        3) when ``S_i`` yields no training pairs."""
        pay_once = self.oracle.pay_once

        def affordable(rows: np.ndarray) -> int:
            return _affordable(rows, data.lookup, num, pay_once)

        p = propose(state, self.runtime, self.cfg, self.oracle, affordable, progress=self.progress)
        if p is None:
            return None, dataclasses.replace(state, stop_code=jnp.asarray(3, jnp.int32))
        pay = p.new_x[np.isnan(data.lookup(p.new_x))] if pay_once else p.new_x
        p = p._replace(asked_at=time.perf_counter())
        return pay, p, p

    def tell(
        self, state: Proposal, sequences: np.ndarray, values: np.ndarray, data: LabelledData
    ) -> LoopState:
        """``S = S u S_i+1`` with every chosen sequence's label (paid now or before)."""
        assert data.lookup is not None
        state.times["time_oracle"] = time.perf_counter() - state.asked_at
        new_v = data.lookup(state.new_x).astype(np.float32)
        return next_state(state, new_v, self.oracle.num_paid, self.cfg, self.runtime)

    def record(
        self,
        state: LoopState,
        sequences: np.ndarray,
        values: np.ndarray,
        data: LabelledData,
        *,
        asked: Sequence[Any] = (),
    ) -> dict[str, Any]:
        (p,) = asked
        on_candidates = None if self.candidates_dir is None else self._write_candidates
        return round_record(p, state, self.runtime, on_candidates=on_candidates)

    def record0(self, state: LoopState, data: LabelledData) -> dict[str, Any]:
        return {"loss": "ga"}

    def method_stop(self, state: Any) -> str:
        code = getattr(state, "stop_code", None)
        return "" if code is None else stop_message(int(code), self.objective.optimal_value)

    def _write_candidates(self, log: Mapping[str, Any]) -> None:
        """``candidates_dir/round_NNNN.npz`` (written to a temporary file, then renamed)."""
        assert self.candidates_dir is not None
        self.candidates_dir.mkdir(parents=True, exist_ok=True)
        path = self.candidates_dir / f"round_{int(log['round']):04d}.npz"
        partial = path.with_suffix(".partial.npz")
        arrays = {k: np.asarray(v) for k, v in log.items() if k != "loss"}
        np.savez_compressed(partial, loss=np.asarray(str(log["loss"])), **arrays)
        partial.replace(path)

    # ------------------------------------------------------------------ checkpoints
    def save(self, manager: Any, state: AskTellState) -> None:
        """The device arrays through orbax, ``S`` and the base's fields in the metadata (the
        layout of every LLOME checkpoint so far)."""
        save_checkpoint(manager, state.inner, self.metadata(state))

    def restore(self, manager: Any) -> AskTellState | None:
        inner = restore_checkpoint(manager, self.runtime, self.cfg)
        if inner is None:
            return None
        round0 = np.asarray(inner.archive_sequences)[np.asarray(inner.archive_rounds) == 0]
        at = np.flatnonzero((round0 == np.asarray(self.x0, np.int32)[None]).all(axis=1))
        return self.restored_state(
            inner.round_index, inner, {"start_at": int(at[0]) if at.size else 0}
        )

    def best_of(self, state: LoopState) -> float:
        values = np.asarray(state.archive_values)
        return float(values.max()) if values.size else float("-inf")

    # ------------------------------------------------------------------ log lines
    def round0_description(self) -> str:
        return f"GA, {self.cfg.round0_generations} generations"

    def round_line(self, m: Mapping[str, Any]) -> str:
        """One human-readable summary line of a round record."""
        return (
            f"round {m['round']} [{m['loss']}]: {m['num_evaluations']} labels paid, "
            + (
                f"min regret {_fmt(m['min_regret'], '.4f')}, mean regret "
                f"{_fmt(m['mean_regret'], '.4f')}, "
                if m["min_regret"] is not None
                else f"best value {_fmt(m.get('best_value'), '.6g')}, "
            )
            + f"generated {m['num_generated']}, unique valid {m.get('num_unique')} "
            f"(novel {m.get('num_novel')}), feasible {_fmt(m['frac_feasible'], '.2f')}, "
            f"hamming {_fmt(m['mean_hamming'], '.3f')}, train loss "
            f"{_fmt(m['train_loss'], '.4f')}, T+{_fmt(m['temperature_offset'], '.1f')}, "
            f"{_fmt(m.get('seconds'), '.0f')} s"
        )


def run(
    cfg: LoopConfig,
    out: str | pathlib.Path,
    *,
    runtime: Runtime | None = None,
    objective: Objective | None = None,
    log_candidates: bool = False,
    **options: Any,
) -> RunResult[AskTellState]:
    """Run (or resume) LLOME into the run directory ``out``: :func:`llome_jax.run.runner.run` (its
    ``options``: ``resume``, ``progress``, ``max_rounds_this_call``, ``log``, ``extra_config``,
    ``trackers``) with the :class:`Llome` plug-in, on ``runtime`` if given (else one built for
    ``cfg``), on ``objective`` if given (else ``cfg.function``); ``log_candidates`` writes each
    round's candidates to ``out/candidates/round_NNNN.npz`` (module docstring).

    Raises:
      ValueError / FileNotFoundError: bad configuration or objective, or ``resume`` on a
        directory holding a different configuration; nothing is written then.
    """
    candidates = pathlib.Path(out) / "candidates" if log_candidates else None
    return run_rounds(Llome(cfg, runtime, objective, candidates_dir=candidates), out, **options)
