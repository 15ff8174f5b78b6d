"""Temperature schedule, seeds and next-input rule (docs/design/llome_data.md), round metrics."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from llome_jax.llome import (
    DEFAULT_TEMPERATURES,
    TemperatureSchedule,
    frac_improved,
    frac_novel,
    frac_unique,
    generation_metrics,
    hamming_distance,
    mean_hamming_distance,
    mean_reward,
    next_refinement_inputs,
    select_seeds,
    select_seeds_reference,
    temperature_offset,
    temperatures,
)


# ---------------------------------------------------------------------------------------------
# Temperature schedule
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("hd", "offset"),
    [
        (0.0, 0.6),
        (0.0749999, 0.6),
        (0.075, 0.4),  # thresholds are strict: hd < 0.075
        (0.0750001, 0.4),
        (0.0999999, 0.4),
        (0.1, 0.2),
        (0.1499999, 0.2),
        (0.15, 0.0),
        (0.5, 0.0),
        (None, 0.0),  # first round / phase reset
        (math.nan, 0.0),  # no valid generations
    ],
)
def test_offset_at_and_around_thresholds(hd, offset):
    assert temperature_offset(hd) == offset


def test_temperature_grids():
    assert temperatures() == DEFAULT_TEMPERATURES == (0.6, 0.8, 1.0, 1.2, 1.4, 1.6)
    assert temperatures(0.6) == (1.2, 1.4, 1.6, 1.8, 2.0, 2.2)
    assert temperatures(0.4) == (1.0, 1.2, 1.4, 1.6, 1.8, 2.0)
    assert temperatures(0.2) == (0.8, 1.0, 1.2, 1.4, 1.6, 1.8)
    fixed = TemperatureSchedule(adaptive=False)
    assert temperature_offset(0.01, fixed) == 0.0
    custom = TemperatureSchedule(base=(1.0,), thresholds=(0.2,), offsets=(0.5,))
    assert temperatures(temperature_offset(0.1, custom), custom) == (1.5,)
    with pytest.raises(ValueError, match="increasing"):
        TemperatureSchedule(thresholds=(0.1, 0.075, 0.15))
    with pytest.raises(ValueError, match="pair up"):
        TemperatureSchedule(offsets=(0.6, 0.4))
    with pytest.raises(ValueError, match="> 0"):
        TemperatureSchedule(offsets=(-0.6, 0.4, 0.2))


# ---------------------------------------------------------------------------------------------
# Seeds
# ---------------------------------------------------------------------------------------------
def test_select_seeds_top_values_random_ties():
    values = np.array([0.5, 1.0, -np.inf, 0.5, 0.75, np.nan, 0.5, 0.5, 0.25])
    seeds = select_seeds(jax.random.key(0), values, 4)
    assert seeds[:2].tolist() == [1, 4]
    assert set(seeds[2:].tolist()) <= {0, 3, 6, 7}  # two of the four tied 0.5s
    np.testing.assert_array_equal(seeds, select_seeds(jax.random.key(0), values, 4))
    ties = {tuple(select_seeds(jax.random.key(k), values, 4)[2:].tolist()) for k in range(20)}
    assert len(ties) > 1  # ties broken by the key, not by position
    everything = select_seeds(jax.random.key(0), values, 200)
    assert everything.size == 9 and set(everything[-2:].tolist()) == {2, 5}  # infeasible last


def test_select_seeds_reference_keeps_duplicates_in_row_order():
    target_index = np.array([7, 3, 7, 9, 7, 3])
    target_value = np.array([0.5, 0.25, 0.5, 1.0, 0.5, 0.25])
    assert select_seeds_reference(target_index, target_value, 4).tolist() == [9, 7, 7, 7]
    assert select_seeds_reference(target_index, target_value, 200).tolist() == [9, 7, 7, 7, 3, 3]


def test_next_inputs_paper_and_reference_rules():
    inputs = jnp.array([[0, 0], [1, 1], [2, 2]])
    outputs = jnp.array(
        [
            [[10, 10], [11, 11], [12, 12]],
            [[20, 20], [21, 21], [22, 22]],
            [[30, 30], [31, 31], [32, 32]],
        ]
    )
    logp = jnp.array([[-1.0, -0.5, -0.5], [-0.1, -2.0, jnp.nan], [-3.0, -1.0, -2.0]])
    valid = jnp.array([[True, True, True], [False, True, True], [False, False, False]])
    best = jnp.array([-0.7, -0.3, -0.2])

    nxt, new_best = next_refinement_inputs(inputs, best, outputs, logp, valid)
    # paper: argmax of this iteration's valid outputs (first of ties); keep input if none valid
    assert nxt.tolist() == [[11, 11], [21, 21], [2, 2]]
    np.testing.assert_allclose(new_best, [-0.5, -2.0, -0.2])

    nxt, new_best = next_refinement_inputs(inputs, best, outputs, logp, valid, best_so_far=True)
    # reference: switch only when beating the trajectory's best so far
    assert nxt.tolist() == [[11, 11], [1, 1], [2, 2]]
    np.testing.assert_allclose(new_best, [-0.5, -0.3, -0.2])

    # valid outputs whose likelihood is unknown still beat invalid ones
    nxt, _ = next_refinement_inputs(
        inputs[:1],
        best[:1],
        outputs[:1],
        jnp.full((1, 3), jnp.nan),
        jnp.array([[False, True, True]]),
    )
    assert nxt.tolist() == [[11, 11]]


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------
def test_generation_metrics_by_hand():
    inputs = np.array([[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]])
    outputs = np.array([[0, 0, 0, 1], [0, 0, 0, 1], [2, 2, 1, 1], [1, 1, 1, 1]])
    fx = np.array([0.25, 0.25, -np.inf, 0.5])
    fy = np.array([0.5, 0.5, 0.75, -np.inf])
    np.testing.assert_allclose(hamming_distance(inputs, outputs), [0.25, 0.25, 0.5, 0.0])
    assert mean_hamming_distance(inputs, outputs) == pytest.approx(0.25)
    assert frac_unique(outputs) == 0.75
    assert mean_reward(fx, fy) == pytest.approx((0.25 + 0.25 + 0.75 + 0.0) / 4)
    assert frac_improved(fx, fy) == 0.75
    assert frac_novel(outputs, inputs) == 0.75
    assert frac_novel(outputs, np.zeros((0, 4), int)) == 1.0
    m = generation_metrics(inputs, outputs, fx, fy)
    assert m == {
        "num_generated": 4,
        "mean_hamming": pytest.approx(0.25),
        "frac_unique": 0.75,
        "frac_feasible": 0.75,
        "mean_reward": pytest.approx(0.3125),
        "frac_improved": 0.75,
    }
    empty = generation_metrics(np.zeros((0, 4), int), np.zeros((0, 4), int), [], [])
    assert empty["num_generated"] == 0 and math.isnan(empty["mean_hamming"])
    with pytest.raises(ValueError, match="same shape"):
        hamming_distance(inputs, outputs[:, :3])


@pytest.mark.parametrize(
    "module",
    [
        "llome.neighbours",
        "llome.data",
        "llome.filter",
        "llome.temperature",
        "llome.seeds",
        "metrics",
    ],
)
def test_docstring_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"llome_jax.{module}"))
    assert result.attempted >= 2 and result.failed == 0
