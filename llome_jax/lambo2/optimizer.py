"""LaMBO-2 rounds and the resumable driver (poli-baselines' ``LaMBO2`` loop; docs/design/lambo2_port.md).

Run (``n`` sequences per round, ``R`` rounds)::

    S   = GA archive of n0 generations (round 0, all t = 0)        # ga_loop.run_archive
    θ0  = fit(fresh model, S)                                        # the initial fit, kept
    for r in 1..R:
        θ      = fit(θ0, S)                  # retrain from θ0: fresh Adam, fresh schedule, E epochs
        seeds  = select_design_seeds(S, n, alpha)  # top alpha n tiled (alpha <= 1) or FFT (alpha > 1)
        best_e = max_j mu_e(seed_j)
        X      = design_round(θ, seeds)      # S design steps, n proposals, no de-duplication
        S      = S u {(x, f(x), r) : x in X} # the only oracle calls of the round

The shared driver (:func:`llome_jax.run.runner.run`, with the :class:`Lambo2` plug-in) writes the run
directory (:mod:`llome_jax.run.rundir`, the same layout as ``llome-jax llome``): ``config.json``,
``rounds.jsonl`` (``ROUND_FIELDS`` plus LaMBO-2 extras), ``evaluated.csv`` (the GA's distinct
sequences as round 0, then every proposal), ``regret.png``, ``checkpoints/`` (one orbax step per
round: ``θ0`` as arrays, the history in the JSON metadata). Oracle accounting as LLOME:
``num_evaluations = n0 * n_GA + r n``.

Determinism: every random draw of round ``r`` comes from ``fold_in(key(seed), r)``, so a run
resumed from the checkpoint of round ``r`` reproduces an uninterrupted run exactly.

**Objectives.** ``Lambo2(cfg, objective)`` (and :func:`run`) optimises an
:class:`~llome_jax.objective.Objective` instead of ``cfg.function``: its checked calls label the
GA seed data and every round's proposals; the regret fields follow its ``optimal_value`` (null
when unknown, ``best_value`` is always recorded); ``config.json`` records ``objective`` /
``objective_info`` instead of ``function`` / ``instance_seed``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax.lambo2 import data as lambo_data
from llome_jax.lambo2 import design as lambo_design
from llome_jax.lambo2 import model as lambo_model
from llome_jax.lambo2 import seeds as lambo_seeds
from llome_jax.lambo2 import train as lambo_train
from llome_jax.lambo2.config import PRESETS, Lambo2Config, preset
from llome_jax.metrics import round_metrics
from llome_jax.objective import Objective, as_objective
from llome_jax.optimizers.base import (
    AskTellOptimizer,
    AskTellState,
    LabelledData,
    first_unlabelled,
)
from llome_jax.run.migrations import LAMBO2_MIGRATIONS
from llome_jax.run.runner import RunResult, progress_bar, progress_text, round0_key
from llome_jax.run.runner import run as run_rounds

__all__ = [
    "PRESETS",
    "History",
    "Lambo2",
    "Lambo2Config",
    "Lambo2State",
    "RunResult",
    "expected_oracle_calls",
    "initial_fit",
    "lambo2_round",
    "preset",
    "propose",
    "run",
]


# ---------------------------------------------------------------------------------------------
# History
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class History:
    """Every labelled sequence: ``x`` int32 ``[N, L]``, ``y`` float64 ``[N]`` (-inf infeasible),
    ``t`` int64 ``[N]`` (round; the GA seed data is round 0)."""

    x: np.ndarray
    y: np.ndarray
    t: np.ndarray

    def append(self, x: Any, y: Any, round_index: int) -> History:
        x, y = np.asarray(x, np.int32), np.asarray(y, np.float64)
        return History(
            np.concatenate([self.x, x]),
            np.concatenate([self.y, y]),
            np.concatenate([self.t, np.full(len(y), round_index, np.int64)]),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "x": self.x.tolist(),
            "y": [float(v) if np.isfinite(v) else None for v in self.y],
            "t": self.t.tolist(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> History:
        y = np.asarray([-np.inf if v is None else v for v in data["y"]], np.float64)
        return cls(np.asarray(data["x"], np.int32), y, np.asarray(data["t"], np.int64))


# ---------------------------------------------------------------------------------------------
# One round
# ---------------------------------------------------------------------------------------------
def _round_key(cfg: Lambo2Config, round_index: int) -> jax.Array:
    """Round ``r``'s key (round 0: the initial fit's), by ``cfg.keys``."""
    key = jax.random.key(cfg.seed)
    if cfg.keys == "shared":
        key = jax.random.fold_in(key, 4)  # apart from round 0's GA (1), as LLOME's own keys
    return jax.random.fold_in(key, round_index)


def initial_fit(
    cfg: Lambo2Config, mc: lambo_model.ModelConfig, history: History
) -> tuple[Any, np.ndarray]:
    """``θ0``: a fresh model trained ``E`` epochs on the seed history (round-0 key)."""
    k_init, k_fit = jax.random.split(jax.random.fold_in(_round_key(cfg, 0), 1))
    data = lambo_data.prepare_training_data(history.x, history.y, history.t, mc, cfg.train)
    return lambo_train.fit(k_fit, lambo_model.init_params(k_init, mc), data, mc, cfg.train)


def lambo2_round(
    cfg: Lambo2Config,
    fn: Any,
    theta_init: Any,
    history: History,
    round_index: int,
    *,
    mesh: Any = None,
    oracle: Any = None,
    progress: bool = False,
) -> tuple[History, Any, dict[str, Any]]:
    """Round ``round_index``: retrain from ``theta_init`` (``θ0``, or the previous round's
    weights with ``cfg.warm_start``), choose seeds, design, label (poli-baselines).

    ``fn`` is the Ehrlich instance or an :class:`~llome_jax.objective.Objective`. ``oracle`` (the
    run's :class:`~llome_jax.oracle.Oracle`) labels the proposals: with ``pay_once`` only the
    paid (new) ones join the history; with ``constraint_queries="free"`` proposals found
    infeasible by ``is_feasible`` are not labelled (value ``-inf``, not in the history). Without
    an oracle, the objective's checked call labels every proposal and all join the history (the
    paper's accounting).

    Returns ``(new history, fitted params, metrics)``; ``metrics`` holds the proposals (``"x"``,
    ``"y"``) and the round's statistics (timings by phase, last-epoch losses, acquisition,
    acceptance).
    """
    objective = as_objective(fn)
    proposals, seeds, params, metrics = propose(
        cfg, objective, theta_init, history, round_index, mesh=mesh, progress=progress
    )
    screened = np.zeros(len(proposals), bool)
    if oracle is None:
        values = np.asarray(objective(proposals), np.float64)
        new_x, new_y = proposals, values
    else:
        if oracle.constraint_queries == "free":
            screened = ~oracle.feasibility(proposals)
        # under a label budget the last round labels only what is left (the proposals' order)
        labelled = np.flatnonzero(~screened)
        cut = oracle.affordable(proposals[labelled])
        if cut < len(labelled):
            keep = int(labelled[cut])
            proposals, seeds, screened = proposals[:keep], seeds[:keep], screened[:keep]
        values = np.full(len(proposals), -np.inf)
        if (~screened).any():
            values[~screened] = oracle.label(proposals[~screened]).values
        if oracle.pay_once:
            new_x, new_y = oracle.take_paid(objective.length)
        else:
            oracle.take_paid(objective.length)
            new_x, new_y = proposals[~screened], values[~screened]
    metrics = _proposal_metrics(cfg, objective, params, metrics, proposals, seeds, screened)
    metrics = {"x": proposals, "y": values, "new_x": new_x, "new_y": new_y, **metrics}
    return history.append(new_x, new_y, round_index), params, metrics


def propose(
    cfg: Lambo2Config,
    objective: Objective,
    theta_init: Any,
    history: History,
    round_index: int,
    *,
    mesh: Any = None,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray, Any, dict[str, Any]]:
    """Round ``round_index``'s proposals, before any label: retrain from ``theta_init``, choose
    the design seeds, design (poli-baselines).

    Returns ``(proposals int [n, L], their seeds int [n, L], fitted params, metrics)``; the
    metrics hold the round's fit and design statistics and what the record needs to finish
    them (``"_stats"``, the regressor's standardisation).
    """
    mc = cfg.model_config(objective.num_states, objective.length)
    k_fit, k_design = jax.random.split(_round_key(cfg, round_index))
    t0 = time.perf_counter()
    data = lambo_data.prepare_training_data(history.x, history.y, history.t, mc, cfg.train)
    with progress_bar(progress, total=cfg.train.epochs, desc="fit", unit="epoch") as bar:

        def report(epoch: int, losses: np.ndarray) -> None:
            bar.set_postfix(loss=f"{float(np.mean(losses)):.3f}")
            bar.update(1)

        params, losses = lambo_train.fit(k_fit, theta_init, data, mc, cfg.train, progress=report)
    jax.block_until_ready(params)
    t1 = time.perf_counter()
    stats = lambo_design.RegressorStats(jnp.float32(data.y_mean), jnp.float32(data.y_std))
    seed_index = lambo_seeds.select_design_seeds(
        history.x, history.y, history.t, cfg.labels_per_round, cfg.alpha
    )
    seeds = history.x[seed_index]
    best = lambo_design.best_values(mc, params, stats, seeds, cfg.design.use_constraints)
    with progress_bar(progress, total=1, desc="design", unit="round") as bar:
        proposals, acq, trace = lambo_design.design_round(
            k_design, params, stats, best, seeds, mc, cfg.design, mesh=mesh
        )
        proposals = np.asarray(proposals)
        bar.update(1)
    t2 = time.perf_counter()
    last = losses[-1]
    ens = mc.ensemble_size
    metrics = {
        "_stats": stats,
        "train_loss": float(last.mean()),
        "train_loss_cls": float(last[:ens].mean()),
        "train_loss_reg": float(last[ens : 2 * ens].mean()),
        "train_loss_mlm": float(last[-1]),
        "mean_acquisition": float(np.mean(np.asarray(acq))),
        "acceptance_rate": float(
            np.asarray(trace.accepted).mean() / (cfg.design.guidance_updates + 1)
        ),
        "num_unique_seeds": len(np.unique(seed_index)),
        "steps_per_epoch": data.steps_per_epoch(cfg.train.batch_size),
        "seconds_train": t1 - t0,
        "seconds_design": t2 - t1,
    }
    return proposals, seeds, params, metrics


def _proposal_metrics(
    cfg: Lambo2Config,
    objective: Objective,
    params: Any,
    metrics: dict[str, Any],
    proposals: np.ndarray,
    seeds: np.ndarray,
    screened: np.ndarray,
) -> dict[str, Any]:
    """:func:`propose`'s metrics finished over the proposals kept (after the budget's cut):
    screened count, mean Hamming distance to the seeds, mean predicted reward."""
    mc = cfg.model_config(objective.num_states, objective.length)
    metrics = dict(metrics)
    stats = metrics.pop("_stats")
    predicted = lambo_design.member_means(mc, params, stats, proposals).mean(0)
    return {
        "num_screened_infeasible": int(screened.sum()),
        "mean_hamming": float((proposals != seeds).mean()),
        "mean_reward": float(np.mean(np.asarray(predicted))),
        **metrics,
    }


# ---------------------------------------------------------------------------------------------
# The round-driver plug-in
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Lambo2State:
    """What LaMBO-2 carries between rounds: rounds done, ``theta_init`` (the weights the next
    round's fit starts from: ``θ0``, or with ``warm_start`` the last round's fitted weights) and
    the labelled history (under ``every_evaluation`` every labelled proposal, repeats
    included, as poli-baselines appends them). ``pending`` (between an ask and its tell) and
    ``train_loss`` (round 0's fit) are never checkpointed."""

    round: int
    theta_init: Any
    history: History
    pending: Any = None
    train_loss: float | None = None


class Lambo2(AskTellOptimizer):
    """LaMBO-2 as an ask/tell optimizer (:class:`~llome_jax.optimizers.base.AskTellOptimizer`)
    over :class:`Lambo2State`: round 0 is the base's GA archive (``keys="v1"``: its own key),
    ``init_state`` the initial fit, ``ask`` fit + design (the round's proposals not labelled
    yet, at most the labels left), ``tell`` the history; checkpoints hold ``θ`` as arrays and
    the history in the metadata, as before the base.

    Construction validates the configuration and ``objective`` (an
    :class:`~llome_jax.objective.Objective` to optimise instead of ``cfg.function``: one checked
    call on its start sequence), clear errors before anything runs or is written.
    """

    name = "lambo2"
    migrations = LAMBO2_MIGRATIONS
    config_class = Lambo2Config
    stops_when_nothing_new = False

    @classmethod
    def test_config(cls, **overrides: Any) -> Lambo2Config:
        """The contract tests' configuration: the ``smoke`` preset with one network of one
        block, 2 rounds of 16 samples, a 32-particle round 0, one epoch and one design step."""
        small = preset(
            "smoke",
            rounds=2,
            labels_per_round=16,
            round0_ga={"num_particles": 32},
            model_overrides=(("ensemble_size", 1), ("num_blocks", 1)),
            **{"train.epochs": 1, "design.num_steps": 1, "design.guidance_updates": 1},
        )
        return small.replace(**overrides)

    def __init__(
        self, cfg: Lambo2Config, objective: Objective | None = None, *, mesh: Any = None
    ) -> None:
        super().__init__(cfg, objective)
        self.mesh = mesh
        self.mc = cfg.model_config(self.objective.num_states, self.objective.length)
        if cfg.design.num_mutations > self.mc.length:
            raise ValueError(
                f"design.num_mutations={cfg.design.num_mutations} edit positions per step exceed "
                f"the sequence length L={self.mc.length} of {self.problem}."
            )
        if mesh is not None and cfg.labels_per_round % mesh.size:
            raise ValueError(
                f"labels_per_round={cfg.labels_per_round} is not divisible by the {mesh.size} mesh devices."
            )
        self.abstract = jax.eval_shape(
            lambda k: lambo_model.init_params(k, self.mc), jax.random.key(0)
        )

    def describe(self) -> str:
        mc = self.mc
        return (
            f"LaMBO-2 on {self.objective.name}: CNN {mc.embed_dim}/{mc.channel_dim}/{mc.out_dim} "
            f"k{mc.kernel_size}, {lambo_model.num_parameters(self.abstract):,} trainable "
            f"parameters (+{lambo_model.pe_table_size(mc):,} in the reference's frozen sinusoid "
            f"table), {mc.ensemble_size}+{mc.ensemble_size} ensemble members"
        )

    def round0_ga_key(self, key: jax.Array) -> jax.Array:
        if self.cfg.keys == "shared":
            return round0_key(key)
        return jax.random.fold_in(_round_key(self.cfg, 0), 0)

    def best_of(self, state: Lambo2State) -> float:
        return float(np.max(state.history.y))

    def init_state(self, key: jax.Array, data: LabelledData) -> Lambo2State:
        """The GA archive as the history (all ``t = 0``; the public start sequence only if the
        GA met it) and the initial fit ``θ0``."""
        x, y = np.asarray(data.sequences), np.asarray(data.values)
        if self.oracle.pay_once:
            x0 = np.asarray(self.x0, np.int32)
            met = bool((data.round0.particles == x0[None]).all(axis=1).any())
            if not met:  # the public start sequence is row 0: not the GA's
                x, y = x[1:], y[1:]
        history = History(x.astype(np.int32), y.astype(np.float64), np.zeros(len(y), np.int64))
        theta_init, losses = initial_fit(self.cfg, self.mc, history)
        return Lambo2State(0, theta_init, history, train_loss=float(losses[-1].mean()))

    def record0(self, state: Lambo2State, data: LabelledData) -> dict[str, Any]:
        return {"train_loss": state.train_loss}

    def ask(
        self, key: jax.Array, state: Lambo2State, data: LabelledData, num: int
    ) -> tuple[np.ndarray, Lambo2State, dict[str, Any]]:
        """Fit and design (:func:`propose`); ``constraint_queries="free"``: infeasible
        proposals screened out by a counted constraint query; under a label budget the
        proposals are kept up to the one that would pay past ``num`` (their order). Returns
        the ones to label: under ``pay_once`` each unlabelled one once, else every one."""
        cfg, r = self.cfg, state.round + 1
        proposals, seeds, params, metrics = propose(
            cfg, self.objective, state.theta_init, state.history, r, mesh=self.mesh
        )
        proposals = np.asarray(proposals, np.int32)
        screened = np.zeros(len(proposals), bool)
        if self.oracle.constraint_queries == "free":
            screened = ~self.oracle.feasibility(proposals)
        labelled = np.flatnonzero(~screened)
        if self.oracle.pay_once:
            new = first_unlabelled(proposals[labelled], data.lookup)
            if len(new) > num:  # the labels left end here: keep the proposals before
                keep = int(labelled[new[num]])
                proposals, seeds, screened = proposals[:keep], seeds[:keep], screened[:keep]
                new = new[:num]
            to_label = proposals[labelled[new]]
        else:
            if len(labelled) > num:
                keep = int(labelled[num])
                proposals, seeds, screened = proposals[:keep], seeds[:keep], screened[:keep]
            to_label = proposals[~screened]
        metrics = _proposal_metrics(
            cfg, self.objective, params, metrics, proposals, seeds, screened
        )
        pending = (proposals, screened, params)
        return to_label, dataclasses.replace(state, pending=pending), metrics

    def tell(
        self, state: Lambo2State, sequences: np.ndarray, values: np.ndarray, data: LabelledData
    ) -> Lambo2State:
        """The history grows by the labels paid (``every_evaluation``: every labelled
        proposal); the next fit starts from ``θ0`` (or these weights, ``warm_start``)."""
        proposals, screened, params = state.pending
        r = state.round + 1
        if self.oracle.pay_once:
            history = state.history.append(sequences, values, r)
        else:
            kept = proposals[~screened]
            history = state.history.append(kept, data.lookup(kept), r)
        start_next = params if self.cfg.warm_start else state.theta_init
        return Lambo2State(r, start_next, history, pending=(proposals, screened))

    def record(
        self,
        state: Lambo2State,
        sequences: np.ndarray,
        values: np.ndarray,
        data: LabelledData,
        *,
        asked: Sequence[Any] = (),
    ) -> dict[str, Any]:
        """The common fields over every proposal kept (screened ones at ``-inf``), the history's
        best, the fit and design statistics."""
        proposals, screened = state.pending
        y = np.full(len(proposals), -np.inf)
        y[~screened] = data.lookup(proposals[~screened])
        history = state.history
        common = round_metrics(
            state.round,
            proposals,
            y,
            history.y,
            num_generated=self.cfg.labels_per_round,
            optimal_value=self.objective.optimal_value,
            worst_value=self.objective.worst_value,
        )
        common.pop("round")
        common.pop("num_evaluations")
        return {
            **common,
            "num_proposals": len(proposals),
            "best_value": float(np.max(history.y)),
            **asked[0],
        }

    def save(self, manager: Any, state: AskTellState) -> None:
        """``θ`` as arrays, the history (and the base's fields) in the metadata."""
        inner = state.inner
        metadata = {**self.metadata(state), "history": inner.history.to_json()}
        manager.save(self.round_index(state), inner.theta_init, metadata)

    def restore(self, manager: Any) -> AskTellState | None:
        restored = manager.restore_latest_good(self.abstract)
        if restored is None:
            return None
        done, theta_init, metadata = restored
        inner = Lambo2State(int(done), theta_init, History.from_json(metadata["history"]))
        return self.restored_state(done, inner, metadata)

    def round0_description(self) -> str:
        cfg = self.cfg
        return f"GA {cfg.round0_generations}x{cfg.round0_ga.num_particles}, initial fit"

    def round_line(self, record: Mapping[str, Any]) -> str:
        return (
            f"round {record['round']}: {progress_text(record)}, feasible "
            f"{record['frac_feasible']:.2f}, unique {record['frac_unique']:.2f}, "
            f"train {record['seconds_train']:.1f}s, design {record['seconds_design']:.1f}s"
        )


def run(
    cfg: Lambo2Config,
    out: str | pathlib.Path,
    *,
    objective: Objective | None = None,
    mesh: Any = None,
    **options: Any,
) -> RunResult[AskTellState]:
    """Run (or resume) LaMBO-2 into the run directory ``out``: :func:`llome_jax.run.runner.run` (its
    ``options``: ``resume``, ``progress``, ``max_rounds_this_call``, ``log``, ``extra_config``,
    ``trackers``) with the :class:`Lambo2` plug-in, on ``objective`` if given (else
    ``cfg.function``), the design population sharded over ``mesh`` if given.

    Raises:
      ValueError: unknown function, a malformed objective, bad configuration, or a resume whose
        configuration differs (except ``rounds``); nothing is written then.
    """
    optimizer = Lambo2(cfg, objective, mesh=mesh)
    if options.get("progress", True):
        options.get("log", print)(optimizer.describe())
    return run_rounds(optimizer, out, **options)


def expected_oracle_calls(cfg: Lambo2Config) -> int:
    """``n0 * n_GA + R n``: the run's total oracle budget under the paper's accounting
    (``every_evaluation``; paper: 10K + 20K on f2); ``pay_once`` pays at most this."""
    return cfg.round0_generations * cfg.round0_ga.num_particles + cfg.rounds * cfg.labels_per_round
