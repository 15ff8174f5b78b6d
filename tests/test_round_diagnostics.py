"""A LLOME round's diagnostics never reach the optimizer (issue 53; ``llome_jax.llome.round``).

The ``_diagnostic_*`` helpers compute, for an Ehrlich function, values and feasibility of
unlabelled sequences with its kernel, uncounted. The test runs one round twice from the same
state, once with every diagnostic helper replaced by garbage, and finds the same next state
(policy, optimizer state, archive, key, counters), the same paid labels and the same oracle
counters; only the fields named as diagnostics differ."""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
import pytest

from llome_jax.llome import round as llome_round_module
from llome_jax.llome.loop import Llome
from llome_jax.llome.presets import preset
from llome_jax.llome.round import (
    CANDIDATE_FIELDS,
    DIAGNOSTIC_CANDIDATE_FIELDS,
    DIAGNOSTIC_FIELDS,
    llome_round,
)
from llome_jax.llome.runtime import Runtime
from llome_jax.oracle import Oracle


def _garbage_feasible(objective: Any, candidates: np.ndarray, known: Any) -> np.ndarray:
    return np.zeros(candidates.shape[0], bool)  # "nothing generated is feasible"


def _garbage_values(objective: Any, candidates: np.ndarray, chosen: Any, new_v: Any) -> np.ndarray:
    return np.full(candidates.shape[0], 123.0, np.float32)


def _garbage_rewards(objective: Any, inputs: np.ndarray, new_v: Any, state: Any) -> np.ndarray:
    return np.full(len(new_v), 7.0)


def _one_round(state0, runtime, cfg) -> tuple[Any, dict, dict, Oracle]:
    oracle = Oracle(runtime.objective, cfg.accounting, cfg.constraint_queries)
    oracle.restore(
        state0.archive_sequences, state0.archive_values, num_paid=int(state0.num_evaluations)
    )
    logs: list[dict] = []
    state, metrics = llome_round(state0, runtime, cfg, on_candidates=logs.append, oracle=oracle)
    (log,) = logs
    return state, metrics, log, oracle


def _same(a: Any, b: Any) -> bool:
    """Equal values: arrays element by element (NaN equal to NaN), anything else by ``==``."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    a, b = np.asarray(a), np.asarray(b)
    numeric = a.dtype.kind in "fc" and b.dtype.kind in "fc"
    return bool(np.array_equal(a, b, equal_nan=numeric))


@pytest.mark.slow
def test_diagnostics_never_reach_the_optimizer(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = preset(
        "smoke",
        schedule="sft:1",
        rounds=1,
        constraint_queries="free",  # refinement/Filter ask is_feasible through the view, counted
        select_checkpoint=True,  # the checkpoint gate asks through the constraint view, counted
        selection_losses=("sft",),
    )
    runtime = Runtime.build(cfg)
    state0 = Llome(cfg, runtime).init(jax.random.key(cfg.seed))[0].inner  # LLOME's LoopState

    state_a, metrics_a, log_a, oracle_a = _one_round(state0, runtime, cfg)
    monkeypatch.setattr(llome_round_module, "_diagnostic_feasible", _garbage_feasible)
    monkeypatch.setattr(llome_round_module, "_diagnostic_candidate_values", _garbage_values)
    monkeypatch.setattr(llome_round_module, "_diagnostic_edit_rewards", _garbage_rewards)
    state_b, metrics_b, log_b, oracle_b = _one_round(state0, runtime, cfg)

    # the next state, leaf by leaf (policy, reference, optimizer state, archive, key, counters)
    leaves_a, tree_a = jax.tree.flatten(state_a)
    leaves_b, tree_b = jax.tree.flatten(state_b)
    assert tree_a == tree_b
    keys = (jax.random.key_data(state_a.key), jax.random.key_data(state_b.key))
    assert np.array_equal(*keys)
    leaves = [
        (a, b)
        for a, b in zip(leaves_a, leaves_b)
        if not jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)
    ]
    assert len(leaves) == len(leaves_a) - 1 > 10  # every leaf but the key
    assert all(_same(a, b) for a, b in leaves)
    # the labels paid, and the oracle's counters (labels and constraint queries)
    paid_a, paid_b = (
        oracle_a.take_paid(runtime.objective.length),
        oracle_b.take_paid(runtime.objective.length),
    )
    assert paid_a[0].shape[0] == metrics_a["num_selected"] > 0
    np.testing.assert_array_equal(paid_a[0], paid_b[0])
    np.testing.assert_array_equal(paid_a[1], paid_b[1])
    assert oracle_a.num_paid == oracle_b.num_paid == int(state_a.num_evaluations)
    assert oracle_a.num_constraint_queries == oracle_b.num_constraint_queries > 0

    # only the diagnostics differ, and all of them did (the garbage reached the records)
    timings = {k for k in metrics_a if k.startswith("time_")}
    differ = {k for k in metrics_a.keys() - timings if not _same(metrics_a[k], metrics_b[k])}
    assert differ == set(DIAGNOSTIC_FIELDS)
    assert metrics_b["frac_feasible_generated"] == 0.0 and metrics_b["mean_reward"] == 7.0
    differ_log = {k for k in CANDIDATE_FIELDS if not _same(log_a[k], log_b[k])}
    assert differ_log == set(DIAGNOSTIC_CANDIDATE_FIELDS)
