"""One LLOME round ``i -> i + 1`` (paper Alg. 1 "LLOME"; App. "Algorithms")::

    D_i       = DatasetFormatting(S_i)               # PropEn pairs (SFT/MargE/REINFORCE) or triples (DPO)
    theta_i+1 = Train(theta_i, D_i; loss_i)          # reference = theta_i (the previous round's policy)
    X_i+1     = IterativeRefinement(pi, TopK(S_i))   # temperatures T + offset(mean Hamming of round i)
    X_i+1     = Filter(X_i+1 minus S, j)             # new only; likelihood quantile, infeasible cap
    S_i+1     = {(x, f(x)) : x in X_i+1}             # the only oracle calls of the round
    S         = S u S_i+1                            # the archive (every labelled sequence)

Information contract (``llome_jax.oracle``): labels come from the run's :class:`Oracle` (paid
once per sequence). Refinement and the Filter know a candidate's feasibility from labels only,
unless ``cfg.constraint_queries == "free"`` (then ``is_feasible`` is asked, counted): the paper's
Filter splits by ``f(x)``, which an unlabelled candidate does not have, and the authors' code caps
infeasible sequences only among labelled data (PropEn pairs). The checkpoint gate keeps its
constraint check (the authors' code), counted.

Diagnostics (:data:`DIAGNOSTIC_FIELDS` of the record, :data:`DIAGNOSTIC_CANDIDATE_FIELDS` of the
candidate log) are computed for the records after the round's labels are paid, by the
``_diagnostic_*`` helpers: for an Ehrlich function they evaluate its kernel on unlabelled
sequences (every candidate's ``f(x)`` and feasibility, each labelled edit's input), uncounted,
because they never reach the optimizer: the next state, the labels and the oracle's counters do
not depend on them (``tests/test_round_diagnostics.py``). For another objective they use only
what the optimizer knew (labels, the Filter's feasibility) and are NaN where that is nothing.

With ``LoopConfig.training_data = "cumulative"`` the round trains on, and takes its seeds from,
the whole archive ``S`` (the main text's ``D^(i)``) instead of ``S_i``. :func:`llome_round` is a
deterministic function of ``(state, cfg)`` (and the runtime), so a run resumed from the checkpoint
of round ``r`` produces the same numbers as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax import ehrlich
from llome_jax.llome import finetune
from llome_jax.llome.config import LoopConfig
from llome_jax.llome.filter import filter_candidates
from llome_jax.llome.refine import iterative_refinement
from llome_jax.llome.runtime import Runtime, model_with
from llome_jax.llome.seeds import select_seeds, select_seeds_reference
from llome_jax.llome.state import STOP_REASONS, LoopState, found_optimum, stop_message
from llome_jax.llome.temperature import TemperatureSchedule, temperature_offset, temperatures
from llome_jax.metrics import round_metrics, rows_in
from llome_jax.oracle import Oracle
from llome_jax.run.runner import progress_bar
from llome_jax.training.loss_inputs import margin_reward

__all__ = [
    "CANDIDATE_FIELDS",
    "DIAGNOSTIC_CANDIDATE_FIELDS",
    "DIAGNOSTIC_FIELDS",
    "Proposal",
    "llome_round",
    "next_state",
    "propose",
    "round_record",
]

#: The record fields (``rounds.jsonl``) that are diagnostics (module docstring): for an Ehrlich
#: function computed from values of unlabelled sequences, uncounted, never fed back.
#: ``frac_feasible_generated``: feasible fraction of the round's candidates (its kernel);
#: ``mean_reward``: mean margin reward ``max(f(y) - f(x), 0)`` of the labelled edits ``x -> y``
#: (``f(x)`` of the inputs by its kernel; another objective: the edits whose input was labelled).
DIAGNOSTIC_FIELDS = ("frac_feasible_generated", "mean_reward")
#: The candidate-log fields (:data:`CANDIDATE_FIELDS`) that are diagnostics, as above.
DIAGNOSTIC_CANDIDATE_FIELDS = ("feasible", "values")

#: The arrays of one round's candidate log (``on_candidates``), ``M`` = the round's unique valid
#: candidates (before the Filter): ``sequences`` / ``inputs`` int32 ``[M, L]``,
#: ``log_likelihood`` / ``log_likelihood_raw`` float32 ``[M]`` (mean per-token log-prob, processed
#: and raw), ``iteration`` int32 ``[M]`` (1-based refinement iteration), ``temperature`` float32
#: ``[M]`` (0 = greedy), ``seed_index`` int32 ``[M]``, ``feasible`` bool ``[M]`` (diagnostic:
#: Ehrlich's kernel, uncounted, never fed back; for another objective what the Filter knew),
#: ``selected`` bool ``[M]`` (chosen by the Filter, i.e. labelled), ``values`` float32 ``[M]``
#: (diagnostic: ``f(x)``; for an Ehrlich function every candidate by its kernel, uncounted, never
#: fed back; for another objective only the selected rows' labels, NaN elsewhere), plus the
#: scalars ``round`` and ``loss``.
CANDIDATE_FIELDS = (
    "sequences",
    "inputs",
    "log_likelihood",
    "log_likelihood_raw",
    "iteration",
    "temperature",
    "seed_index",
    "feasible",
    "selected",
    "values",
)


class Proposal(NamedTuple):
    """What a LLOME round has decided before its labels are paid (:func:`propose`), and what
    :func:`finish` needs after: the round's training, refinement and Filter.

    Attributes:
      state: the state the round started from (``S_i`` is its newest rows).
      round: ``i + 1``. loss: the round's loss.
      next_key: the next round's key. params / opt_state / reference_params: after training.
      offset: the temperature offset sampled with. refined: the refinement's output.
      candidates: int ``[M, L]`` the unique valid candidates. chosen: int64 ``[m]`` the rows the
        Filter chose, cut at the labels the round may pay. new_x: int32 ``[m, L]`` those rows.
      num_pairs / num_pair_candidates: the training data's units and candidates.
      train_loss / train_info: the training's loss and its extra fields.
      num_novel: candidates not labelled before. times: per-phase seconds so far.
      asked_at: ``time.perf_counter()`` when the labels were asked for (``time_oracle``).
    """

    state: LoopState
    round: int
    loss: str
    next_key: Any
    params: Any
    opt_state: Any
    reference_params: Any
    offset: float
    refined: Any
    candidates: np.ndarray
    chosen: np.ndarray
    new_x: np.ndarray
    num_pairs: int
    num_pair_candidates: int
    train_loss: Any
    train_info: dict[str, Any]
    num_novel: int
    times: dict[str, float]
    asked_at: float = 0.0


def propose(
    state: LoopState,
    rt: Runtime,
    cfg: LoopConfig,
    oracle: Any,
    affordable: Callable[[np.ndarray], int],
    *,
    progress: bool = False,
) -> Proposal | None:
    """The round's first half (module docstring): ``D_i``, ``Train``, ``IterativeRefinement``
    and the ``Filter``, its choice cut at ``affordable(rows)`` leading rows (the labels the round
    may pay). ``oracle`` answers the constraint checks (a view of it: it labels nothing here).

    Returns:
      the :class:`Proposal`, or ``None`` when ``S_i`` yields no training pairs.
    """

    r = state.round_index + 1
    loss = cfg.loss(r)
    next_key, round_key = jax.random.split(state.key)
    k_data, k_train, k_seeds, k_refine, k_filter = jax.random.split(round_key, 5)
    if cfg.training_data == "cumulative":
        x_i, v_i = np.asarray(state.archive_sequences), np.asarray(state.archive_values)
    else:
        x_i, v_i = state.latest()
    times: dict[str, float] = {}

    t = time.perf_counter()
    data = finetune.training_data(k_data, rt, cfg, loss, x_i, v_i)
    times["time_pairs"] = time.perf_counter() - t
    if data["units"] == 0:
        return None

    t = time.perf_counter()
    ft = cfg.finetune
    epochs = ft.first_round_epochs if r == 1 and ft.first_round_epochs else ft.epochs
    params, opt_state, train_loss, train_info = finetune.train(
        k_train, rt, cfg, loss, data, state.params, progress, epochs, r, oracle.constraint_view()
    )
    times["time_train"] = time.perf_counter() - t

    # Seeds: TopK(S_i, n_s) (paper) or the top training rows by target value (reference).
    if cfg.seed_rule == "paper":
        seed_rows = select_seeds(k_seeds, v_i, cfg.num_seeds)
    else:
        seed_rows = select_seeds_reference(data["seed_index"], data["seed_value"], cfg.num_seeds)
    seeds = x_i[seed_rows]

    schedule = TemperatureSchedule(base=tuple(cfg.temperatures), adaptive=cfg.adaptive_temperature)
    hd = float(state.mean_hamming)
    if cfg.reset_temperature_at_phase and r > 1 and cfg.loss(r - 1) != loss:
        hd = float("nan")
    offset = temperature_offset(None if math.isnan(hd) else hd, schedule)
    temps = temperatures(offset, schedule)

    t = time.perf_counter()
    policy = model_with(rt.model, params)
    with progress_bar(progress, total=cfg.refine.num_iterations, desc="refine", unit="iter") as bar:

        def report(info: dict[str, Any]) -> None:
            bar.set_postfix(generated=info["num_generated"], valid=info["num_valid"])
            bar.update(1)

        refined = iterative_refinement(
            k_refine,
            policy,
            rt.codec,
            oracle.candidate_view(),  # its constraint check only: labels, or counted queries
            seeds,
            temps,
            cfg.refine,
            mesh=rt.mesh,
            progress=report,
        )
    times["time_generate"] = time.perf_counter() - t
    candidates = np.asarray(refined.sequences)
    archive = np.asarray(state.archive_sequences)

    t = time.perf_counter()
    chosen = filter_candidates(
        k_filter,
        candidates,
        np.asarray(
            refined.log_likelihood_raw if cfg.filter_likelihood == "raw" else refined.log_likelihood
        ),
        np.asarray(refined.feasible),
        cfg.filter,
        exclude=archive if cfg.exclude_labelled else None,
    )
    times["time_filter"] = time.perf_counter() - t
    # candidates not labelled before (GA data, earlier rounds, seeds); the Filter counted them
    # when it excluded the archive (the candidates are distinct, so its count after dedup is it)
    num_novel = (
        chosen.num_novel if cfg.exclude_labelled else int(np.sum(~rows_in(candidates, archive)))
    )
    # under a label budget the last round labels only what is left (the Filter's order)
    chosen_rows = np.asarray(chosen.indices)
    chosen_rows = chosen_rows[: affordable(candidates[chosen_rows])]
    return Proposal(
        state=state,
        round=r,
        loss=loss,
        next_key=next_key,
        params=params,
        opt_state=opt_state,
        reference_params=state.params,
        offset=float(offset),
        refined=refined,
        candidates=candidates,
        chosen=chosen_rows,
        new_x=candidates[chosen_rows].astype(np.int32),
        num_pairs=int(data["units"]),
        num_pair_candidates=int(data["num_candidates"]),
        train_loss=train_loss,
        train_info=dict(train_info),
        num_novel=int(num_novel),
        times=times,
    )


def next_state(
    p: Proposal, new_v: np.ndarray, num_evaluations: int, cfg: LoopConfig, rt: Runtime
) -> LoopState:
    """The state after the round of ``p`` with its labels ``new_v`` (float32 ``[m]``, one per
    ``p.new_x`` row), ``num_evaluations`` labels paid so far: ``S = S u S_i+1`` and the stop
    code (the optimum found; too few unique valid candidates, or nothing new to label)."""
    archive_x = np.concatenate([np.asarray(p.state.archive_sequences), p.new_x])
    archive_v = np.concatenate([np.asarray(p.state.archive_values), new_v])
    archive_r = np.concatenate(
        [np.asarray(p.state.archive_rounds), np.full(new_v.shape, p.round, np.int32)]
    )
    stop = 0
    if found_optimum(archive_v, rt.objective.optimal_value):
        stop = 1
    elif p.candidates.shape[0] < cfg.min_candidates or new_v.size == 0:
        stop = 2
    return LoopState(
        round=jnp.asarray(p.round, jnp.int32),
        key=p.next_key,
        params=p.params,
        reference_params=p.reference_params,
        opt_state=p.opt_state,
        num_evaluations=jnp.asarray(num_evaluations, jnp.int32),
        mean_hamming=jnp.asarray(float(p.refined.mean_hamming), jnp.float32),
        temperature_offset=jnp.asarray(p.offset, jnp.float32),
        stop_code=jnp.asarray(stop, jnp.int32),
        archive_sequences=archive_x,
        archive_values=archive_v,
        archive_rounds=archive_r,
    )


def round_record(
    p: Proposal,
    new_state: LoopState,
    rt: Runtime,
    *,
    on_candidates: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """The ``rounds.jsonl`` fields of the round of ``p`` ending in ``new_state`` (except
    ``seconds``; plus ``loss``, ``num_pairs``, ``num_valid``, ``num_unique``, per-phase ``time_*``
    seconds and ``stop_reason``), its diagnostics computed here (module docstring), and the
    candidate log passed to ``on_candidates``."""

    objective = rt.objective
    r, refined, candidates = p.round, p.refined, p.candidates
    new_v = np.asarray(new_state.archive_values)[len(np.asarray(p.state.archive_values)) :]
    archive_v = np.asarray(new_state.archive_values)
    num_unique = int(candidates.shape[0])
    generated_feasible = _diagnostic_feasible(objective, candidates, refined.feasible)
    if on_candidates is not None:
        on_candidates(
            _candidate_log(
                r, p.loss, objective, refined, candidates, p.chosen, new_v, generated_feasible
            )
        )
    # Diagnostic only (not oracle budget, never fed back): reward of each labelled edit.
    inputs = np.asarray(refined.inputs)[p.chosen]
    rewards = _diagnostic_edit_rewards(objective, inputs, new_v, p.state)
    num_generated = int(refined.num_generated)
    stop = int(new_state.stop_code)
    metrics = round_metrics(
        r,
        p.new_x,
        new_v,
        archive_v,
        num_generated=num_generated,
        optimal_value=objective.optimal_value,
        worst_value=objective.worst_value,
        num_evaluations=int(new_state.num_evaluations),
        frac_unique=num_unique / num_generated if num_generated else float("nan"),
        mean_hamming=float(refined.mean_hamming),
        mean_reward=float(np.mean(rewards)) if rewards.size else float("nan"),
        train_loss=p.train_loss,
        temperature_offset=p.offset,
    )
    metrics.update(
        loss=p.loss,
        **p.train_info,
        num_pairs=p.num_pairs,
        num_pair_candidates=p.num_pair_candidates,
        num_valid=int(refined.num_valid),
        num_unique=num_unique,
        num_novel=p.num_novel,
        frac_novel=p.num_novel / num_unique if num_unique else float("nan"),
        num_selected=int(new_v.size),
        num_proposals=int(new_v.size),
        frac_feasible_generated=float(np.mean(generated_feasible))
        if num_unique and objective.is_ehrlich
        else float("nan"),
        best_value=float(np.max(archive_v)) if archive_v.size else float("nan"),
        stop_reason=stop_message(stop, objective.optimal_value),
        **p.times,
    )
    return metrics


def llome_round(
    state: LoopState,
    rt: Runtime,
    cfg: LoopConfig,
    *,
    progress: bool = False,
    on_candidates: Callable[[dict[str, Any]], None] | None = None,
    oracle: Any = None,
) -> tuple[LoopState, dict[str, Any]]:
    """One LLOME round on its own (module docstring): :func:`propose`, the labels from
    ``oracle``, :func:`next_state` and :func:`round_record`. Deterministic in ``(state, cfg)``;
    ``state`` is kept. (:class:`~llome_jax.llome.loop.Llome` runs the same steps on the ask/tell
    base, which owns the labelling.)

    ``on_candidates`` (optional, off by default) is called once, after the round's oracle calls,
    with the round's candidates before the Filter (:data:`CANDIDATE_FIELDS`: likelihoods,
    refinement iteration, Filter choice, values); it changes nothing else in the round (the
    paper's Figs. "calibration", "iterative refinement" and "candidate selection" need it).

    ``oracle``: the run's :class:`~llome_jax.oracle.Oracle` (labels and constraint queries,
    counted); ``None``: a fresh one holding the state's archive, with ``cfg``'s settings.

    Returns:
      ``(new_state, metrics)``; ``metrics`` holds the ``rounds.jsonl`` fields (except
      ``seconds``) plus ``loss``, ``num_pairs``, ``num_valid``, ``num_unique``, per-phase
      ``time_*`` seconds and ``stop_reason``. If ``S_i`` yields no training pairs, the state is
      returned unchanged except ``stop_code = 3`` and ``metrics["round"]`` is ``None``.
    """
    if oracle is None:
        oracle = Oracle(rt.objective, cfg.accounting, cfg.constraint_queries)
        oracle.restore(
            state.archive_sequences,
            state.archive_values,
            num_paid=int(state.num_evaluations),
        )
    p = propose(state, rt, cfg, oracle, oracle.affordable, progress=progress)
    if p is None:
        return dataclasses.replace(state, stop_code=jnp.asarray(3, jnp.int32)), {
            "round": None,
            "loss": cfg.loss(state.round_index + 1),
            "stop_reason": STOP_REASONS[3],
        }
    t = time.perf_counter()
    if p.new_x.shape[0]:
        new_v = oracle.label(p.new_x).values  # the round's oracle calls (checked: float32 [j])
    else:
        new_v = np.zeros((0,), np.float32)
    p.times["time_oracle"] = time.perf_counter() - t
    new_state = next_state(p, new_v, int(oracle.num_paid), cfg, rt)
    return new_state, round_record(p, new_state, rt, on_candidates=on_candidates)


def _diagnostic_feasible(objective: Any, candidates: np.ndarray, known: Any) -> np.ndarray:
    """Diagnostic (:data:`DIAGNOSTIC_FIELDS` ``frac_feasible_generated``, the candidate log's
    ``feasible``; never fed back): feasibility of the round's candidates. An Ehrlich function's
    own kernel on every candidate, labelled or not (not a constraint query the optimizer made,
    not counted), else what the Filter knew (``known``). bool ``[M]``."""
    if objective.is_ehrlich and candidates.shape[0]:
        return np.asarray(ehrlich.is_feasible(objective.ehrlich, candidates), bool)
    return np.asarray(known, bool)


def _candidate_log(
    r: int,
    loss: str,
    objective: Any,
    refined: Any,
    candidates: np.ndarray,
    chosen: np.ndarray,
    new_v: np.ndarray,
    feasible: np.ndarray,
) -> dict[str, Any]:
    """The ``on_candidates`` record of round ``r`` (:data:`CANDIDATE_FIELDS`); its
    :data:`DIAGNOSTIC_CANDIDATE_FIELDS` come from :func:`_diagnostic_feasible` (``feasible``)
    and :func:`_diagnostic_candidate_values`."""
    m = candidates.shape[0]
    selected = np.zeros(m, bool)
    selected[np.asarray(chosen, np.int64)] = True
    values = _diagnostic_candidate_values(objective, candidates, chosen, new_v)
    return {
        "round": r,
        "loss": loss,
        "sequences": candidates.astype(np.int32),
        "inputs": np.asarray(refined.inputs, np.int32),
        "log_likelihood": np.asarray(refined.log_likelihood, np.float32),
        "log_likelihood_raw": np.asarray(refined.log_likelihood_raw, np.float32),
        "iteration": np.asarray(refined.iteration, np.int32),
        "temperature": np.asarray(refined.temperature, np.float32),
        "seed_index": np.asarray(refined.seed_index, np.int32),
        "feasible": np.asarray(feasible, bool),
        "selected": selected,
        "values": values,
    }


def _diagnostic_candidate_values(
    objective: Any, candidates: np.ndarray, chosen: np.ndarray, new_v: np.ndarray
) -> np.ndarray:
    """Diagnostic (the candidate log's ``values``; never fed back): ``f(x)`` of the round's
    candidates ``[M, L]``. For an Ehrlich function its kernel on every candidate, labelled or
    not (uncounted); for another objective no call: the labels ``new_v`` of the ``chosen`` rows,
    NaN elsewhere. float32 ``[M]``."""
    m = candidates.shape[0]
    if objective.is_ehrlich and m:
        return np.asarray(objective(candidates.astype(np.int32)), np.float32)
    values = np.full(m, np.nan, np.float32)
    values[np.asarray(chosen, np.int64)] = new_v
    return values


def _diagnostic_edit_rewards(
    objective: Any, inputs: np.ndarray, new_v: np.ndarray, state: LoopState
) -> np.ndarray:
    """Diagnostic (:data:`DIAGNOSTIC_FIELDS` ``mean_reward``; never fed back): margin rewards
    ``max(f(y) - f(x), 0)`` of the labelled edits ``x -> y``.

    For an Ehrlich function ``f(x)`` of every input is evaluated (cheap, not counted as oracle
    budget, as before objectives existed). For another objective no extra call is made: only the
    edits whose input was labelled before (GA data, earlier rounds; the seeds of the round) count,
    with that label. float32 ``[m]`` (possibly empty).
    """

    if not len(new_v):
        return np.zeros(0)
    if objective.is_ehrlich:
        return np.asarray(margin_reward(objective(inputs), new_v))

    archive_x = np.asarray(state.archive_sequences)
    known = rows_in(inputs, archive_x)
    if not known.any():
        return np.zeros(0)
    lookup = {row.tobytes(): value for row, value in zip(archive_x, state.archive_values)}
    input_v = np.asarray([lookup[row.tobytes()] for row in inputs[known]], np.float32)
    return np.asarray(margin_reward(input_v, new_v[known]))
