"""A label above the objective's declared optimum is a contradiction: the run stops with an error
naming the objective and the value, instead of reporting a negative regret as the optimum."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from llome_jax import ga
from llome_jax.ga.optimizer import GARunConfig
from llome_jax.ga.optimizer import run as ga_run
from llome_jax.objective import Objective
from llome_jax.oracle import LabelAboveOptimumError, Oracle


def _sum(optimal_value: float) -> Objective:
    return Objective(
        "sum-of-states",
        4,
        3,
        lambda x: np.asarray(x, np.float32).sum(axis=1),
        initial_solution=[0, 0, 0],
        optimal_value=optimal_value,
    )


def test_the_oracle_refuses_a_label_above_the_optimum() -> None:
    oracle = Oracle(_sum(optimal_value=5.0))
    oracle.label(np.asarray([[1, 2, 2]]))  # 5: at the optimum, fine
    with pytest.raises(
        LabelAboveOptimumError, match=r"'sum-of-states' returned 6.*optimal_value 5"
    ):
        oracle.label(np.asarray([[3, 3, 0]]))
    with pytest.raises(LabelAboveOptimumError):
        oracle.record_labels(np.asarray([[3, 3, 1]]), np.asarray([7.0]))


def test_a_run_on_a_wrong_optimum_stops_with_the_error(tmp_path: pathlib.Path) -> None:
    cfg = GARunConfig(rounds=3, round0_generations=2, round0_ga=ga.GAConfig(num_particles=32))
    with pytest.raises(LabelAboveOptimumError, match="sum-of-states"):
        ga_run(cfg, tmp_path / "run", objective=_sum(optimal_value=2.0), progress=False)
