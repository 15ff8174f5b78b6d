"""The LLOME optimizer (paper Alg. 1 "LLOME"): the round-driver plug-in and :func:`run`.

The phases live in their own modules; this one joins them into a
:class:`~llome_jax.runner.RoundOptimizer` that the shared driver (:func:`llome_jax.runner.run`)
runs:

* :mod:`~llome_jax.llome.config`: :class:`LoopConfig`, the loss schedule, input validation;
* :mod:`~llome_jax.llome.runtime`: the explicit :class:`Runtime` (function, codec, model, mesh);
* :mod:`~llome_jax.llome.state`: :class:`LoopState`, round 0 (the GA seed data), checkpoints;
* :mod:`~llome_jax.llome.finetune`: the training data ``D_i`` and ``Train(theta_i, D_i)``;
* :mod:`~llome_jax.llome.round`: one round (train, refine, filter, label).

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
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax.llome.config import (
    LoopConfig,
    validate_config,
)
from llome_jax.llome.round import llome_round
from llome_jax.llome.runtime import Runtime
from llome_jax.llome.state import (
    LoopState,
    init_state,
    restore_checkpoint,
    save_checkpoint,
    stop_message,
)
from llome_jax.migrations import LLOME_MIGRATIONS
from llome_jax.objective import Objective
from llome_jax.plugin import RoundOptimizerBase
from llome_jax.runner import RoundResult, RunResult
from llome_jax.runner import run as run_rounds

__all__ = ["Llome", "run"]


def _fmt(value: Any, spec: str) -> str:
    return (
        "n/a"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else format(value, spec)
    )


class Llome(RoundOptimizerBase):
    """LLOME as a :class:`~llome_jax.runner.RoundOptimizer` over :class:`LoopState`.

    Construction validates ``cfg`` and ``objective`` (an :class:`~llome_jax.objective.Objective`
    to optimise instead of ``cfg.function``: one checked call on its start sequence), clear errors
    before anything runs, then builds the runtime unless one is given (a given runtime carries its
    own objective; ``objective`` must then be that one or ``None``).
    """

    name = "llome"
    migrations = LLOME_MIGRATIONS

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
        custom = self.runtime.custom_objective
        super().__init__(cfg, self.runtime.objective, custom_objective=custom)
        self.candidates_dir = None if candidates_dir is None else pathlib.Path(candidates_dir)

    def init(self, key: jax.Array) -> tuple[LoopState, RoundResult]:
        from llome_jax.metrics import round_metrics

        cfg, oracle = self.cfg, self.oracle
        runtime = self.runtime
        if oracle.cached_objective() is not runtime.objective:  # a host objective: pay once
            runtime = dataclasses.replace(runtime, objective=oracle.cached_objective())
        state = init_state(key, runtime, cfg)
        x, v = state.latest()
        num_particles = cfg.ga_generations * cfg.ga.num_particles
        oracle.record_labels(x, v, num_paid=num_particles)
        paid_x, paid_v = oracle.take_paid(self.objective.length)
        if not oracle.pay_once:
            paid_x, paid_v = x, v
        state = dataclasses.replace(state, num_evaluations=jnp.asarray(oracle.num_paid, jnp.int32))
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
            loss="ga",
            best_value=float(np.max(v)) if v.size else float("nan"),
        )
        record["frac_unique"] = len(x) / num_particles  # over the GA's proposals, as the GA's
        return state, RoundResult(paid_x, paid_v, record)

    def round(
        self, state: LoopState, *, progress: bool = False
    ) -> tuple[LoopState, RoundResult | None]:
        on_candidates = None if self.candidates_dir is None else self._write_candidates
        if self.oracle.num_paid != int(state.num_evaluations):  # a state from elsewhere
            self.oracle.restore(
                state.archive_sequences,
                state.archive_values,
                num_paid=int(state.num_evaluations),
                num_constraint_queries=self.oracle.num_constraint_queries,
            )
        new_state, metrics = llome_round(
            state,
            self.runtime,
            self.cfg,
            progress=progress,
            on_candidates=on_candidates,
            oracle=self.oracle,
        )
        if metrics["round"] is None:
            return new_state, None
        x, v = self.oracle.take_paid(self.objective.length)
        if not self.oracle.pay_once:
            x, v = new_state.latest()
        return new_state, RoundResult(x, v, metrics)

    def _write_candidates(self, log: Mapping[str, Any]) -> None:
        """``candidates_dir/round_NNNN.npz`` (written to a temporary file, then renamed)."""
        assert self.candidates_dir is not None
        self.candidates_dir.mkdir(parents=True, exist_ok=True)
        path = self.candidates_dir / f"round_{int(log['round']):04d}.npz"
        partial = path.with_suffix(".partial.npz")
        arrays = {k: np.asarray(v) for k, v in log.items() if k != "loss"}
        np.savez_compressed(partial, loss=np.asarray(str(log["loss"])), **arrays)
        partial.replace(path)

    def round_index(self, state: LoopState) -> int:
        return state.round_index

    def stop_reason(self, state: LoopState) -> str:
        return stop_message(int(state.stop_code), self.objective.optimal_value)

    def save(self, manager: Any, state: LoopState) -> None:
        save_checkpoint(manager, state)

    def restore(self, manager: Any) -> LoopState | None:
        return restore_checkpoint(manager, self.runtime, self.cfg)

    def round0_description(self) -> str:
        return f"GA, {self.cfg.ga_generations} generations"

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
) -> RunResult[LoopState]:
    """Run (or resume) LLOME into the run directory ``out``: :func:`llome_jax.runner.run` (its
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
