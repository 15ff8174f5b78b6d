"""LaMBO-2's training data: the three task tables of a fit and the epochs of minibatches.

poli-baselines' tables, cortex's sampler (paper App. "LaMBO-2 Model and Training Details";
``docs/design/lambo2_port.md``): classifier on all rows (groups = label x recency partition),
regressor on feasible rows (groups = recency partition), MLM on unique feasible rows; a
fixed-seed ``train_fraction`` subset of each table (:func:`prepare_training_data`); round-robin
rebalancing sampler (:func:`balanced_stream`); an epoch has ``ceil(#MLM rows / batch)`` steps of
``2 E + 1`` minibatches each (:func:`epoch_batches`, one :class:`StepBatch` per step).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import numpy as np

from llome_jax.lambo2.model import ModelConfig
from llome_jax.lambo2.train_config import TrainConfig

__all__ = [
    "StepBatch",
    "TrainingData",
    "balanced_stream",
    "epoch_batches",
    "prepare_training_data",
    "recency_partition",
]


# ---------------------------------------------------------------------------------------------
# Recency partitions and the rebalancing sampler (cortex's round-robin sampler)
# ---------------------------------------------------------------------------------------------
def recency_partition(rounds: Any, newest: int | None = None) -> np.ndarray:
    """Geometric recency partition of each round index: ``floor(log2(T - i + 1))``.

    Partition 0 is the newest round ``T`` (default ``max(rounds)``), 1 the two before, 2 the four
    before those, ... (``T = 3``: ``{3} -> 0, {1, 2} -> 1, {0} -> 2``).
    """
    rounds = np.asarray(rounds, dtype=np.int64)
    if rounds.size == 0:
        return rounds.copy()
    newest = int(rounds.max()) if newest is None else int(newest)
    age = newest - rounds
    if np.any(age < 0):
        raise ValueError("a round index is newer than `newest`.")
    return np.floor(np.log2(age + 1.0) + 1e-9).astype(np.int64)


def balanced_stream(rng: np.random.Generator, groups: Any) -> np.ndarray:
    """cortex's rebalancing sampler: one epoch of row indices (``[P * max group size]``).

    The group order is shuffled once and each group's rows once; indices are emitted round-robin,
    one per group in that order; smaller groups are cycled in their shuffled order; the stream
    stops when the largest group is exhausted.
    """
    groups = np.asarray(groups)
    labels = rng.permutation(np.unique(groups))
    members = [rng.permutation(np.flatnonzero(groups == g)) for g in labels]
    if not members:
        return np.zeros(0, np.int64)
    longest = max(len(m) for m in members)
    columns = [np.resize(m, longest) for m in members]
    return np.stack(columns, axis=1).reshape(-1)


# ---------------------------------------------------------------------------------------------
# Data per task and the minibatches of a step
# ---------------------------------------------------------------------------------------------
@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=[
        "cls_tokens",
        "cls_labels",
        "cls_valid",
        "reg_tokens",
        "reg_targets",
        "reg_valid",
        "mlm_tokens",
        "mlm_valid",
    ],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class StepBatch:
    """The ``2 E + 1`` minibatches of one training step (rows with ``valid = False`` are padding).

    Shapes: ``cls_tokens``/``reg_tokens`` int32 ``[E, B, N]``, ``cls_labels`` int32 ``[E, B]``,
    ``reg_targets`` f32 ``[E, B]`` (standardised), ``*_valid`` bool ``[E, B]``, ``mlm_tokens``
    ``[B, N]``, ``mlm_valid`` ``[B]``.
    """

    cls_tokens: jax.Array
    cls_labels: jax.Array
    cls_valid: jax.Array
    reg_tokens: jax.Array
    reg_targets: jax.Array
    reg_valid: jax.Array
    mlm_tokens: jax.Array
    mlm_valid: jax.Array


@dataclasses.dataclass(frozen=True)
class TrainingData:
    """Host-side tables of one fit (poli-baselines' per-task data), restricted to the train split.

    Attributes:
      cls_tokens / cls_labels / cls_groups: every history row (duplicates kept), label
        ``1[feasible]``, group ``label * P + partition``.
      reg_tokens / reg_targets / reg_groups: feasible rows, standardised targets, partition.
      mlm_tokens: unique feasible rows (first occurrence).
      y_mean, y_std: regression target statistics (unbiased std; 1 if < 1e-8).
    """

    cls_tokens: np.ndarray
    cls_labels: np.ndarray
    cls_groups: np.ndarray
    reg_tokens: np.ndarray
    reg_targets: np.ndarray
    reg_groups: np.ndarray
    mlm_tokens: np.ndarray
    y_mean: float
    y_std: float

    def steps_per_epoch(self, batch_size: int) -> int:
        """``ceil(#MLM rows / batch)``: the MLM loader is the shortest of the zipped loaders."""
        return max(1, math.ceil(len(self.mlm_tokens) / batch_size))


def _train_subset(n: int, config: TrainConfig) -> np.ndarray:
    fraction = config.train_fraction
    if fraction is None or fraction >= 1.0:
        return np.arange(n)
    keep = math.floor(fraction * n)
    keep = max(keep, 1) if n else 0
    return np.sort(np.random.default_rng(config.split_seed).permutation(n)[:keep])


def prepare_training_data(
    sequences: Any,
    values: Any,
    rounds: Any,
    model_config: ModelConfig,
    train_config: TrainConfig,
) -> TrainingData:
    """Build the three task tables from the history ``(x [N, L], y [N], t [N])``.

    ``y = -inf`` (or NaN) marks infeasible rows. Padding to ``max_len`` is applied here.

    Raises:
      ValueError: on shape mismatches, out-of-range tokens or a history without feasible rows.
    """
    x = np.asarray(sequences)
    y = np.asarray(values, dtype=np.float64)
    t = np.asarray(rounds, dtype=np.int64)
    if x.ndim != 2 or x.shape[1] != model_config.length or not (len(x) == len(y) == len(t)):
        raise ValueError(
            f"history shapes x {x.shape}, y {y.shape}, t {t.shape} do not match length "
            f"{model_config.length}."
        )
    if x.size and (x.min() < 0 or x.max() >= model_config.num_states):
        raise ValueError(f"tokens must lie in [0, {model_config.num_states}).")
    feasible = np.isfinite(y)
    if not feasible.any():
        raise ValueError("the history holds no feasible sequence; LaMBO-2 cannot be trained.")
    pad = model_config.padded_length - model_config.length
    if pad:
        x = np.concatenate([x, np.full((len(x), pad), model_config.pad_id, x.dtype)], axis=1)
    x = x.astype(np.int32)
    partition = recency_partition(t)

    cls_rows = _train_subset(len(x), train_config)
    labels = feasible.astype(np.int32)
    num_partitions = int(partition.max()) + 1
    feasible_rows = np.flatnonzero(feasible)
    reg_rows = feasible_rows[_train_subset(len(feasible_rows), train_config)]
    _, first = np.unique(x[feasible_rows], axis=0, return_index=True)
    unique_rows = feasible_rows[np.sort(first)]
    mlm_rows = unique_rows[_train_subset(len(unique_rows), train_config)]

    targets = y[reg_rows]
    mean = float(targets.mean())
    std = float(targets.std(ddof=1)) if len(targets) > 1 else 0.0
    if not np.isfinite(std) or std < 1e-8:
        std = 1.0
    return TrainingData(
        cls_tokens=x[cls_rows],
        cls_labels=labels[cls_rows],
        cls_groups=labels[cls_rows] * num_partitions + partition[cls_rows],
        reg_tokens=x[reg_rows],
        reg_targets=((targets - mean) / std).astype(np.float32),
        reg_groups=partition[reg_rows],
        mlm_tokens=x[mlm_rows],
        y_mean=mean,
        y_std=std,
    )


def epoch_batches(
    rng: np.random.Generator, data: TrainingData, model_config: ModelConfig, batch_size: int
) -> list[StepBatch]:
    """One epoch of :class:`StepBatch` es (host numpy): independent sampler per member."""
    steps = data.steps_per_epoch(batch_size)
    total = steps * batch_size
    ens = model_config.ensemble_size

    def balanced(groups: np.ndarray) -> np.ndarray:
        stream = balanced_stream(rng, groups)
        return np.resize(stream, total).reshape(steps, batch_size)

    cls_index = np.stack([balanced(data.cls_groups) for _ in range(ens)], axis=1)  # [S, E, B]
    reg_index = np.stack([balanced(data.reg_groups) for _ in range(ens)], axis=1)
    order = rng.permutation(len(data.mlm_tokens))
    mlm_valid = np.arange(total) < len(order)
    mlm_index = np.resize(order, total).reshape(steps, batch_size)
    mlm_valid = mlm_valid.reshape(steps, batch_size)
    ones = np.ones((ens, batch_size), bool)
    return [
        StepBatch(
            cls_tokens=data.cls_tokens[cls_index[s]],
            cls_labels=data.cls_labels[cls_index[s]],
            cls_valid=ones,
            reg_tokens=data.reg_tokens[reg_index[s]],
            reg_targets=data.reg_targets[reg_index[s]],
            reg_valid=ones,
            mlm_tokens=data.mlm_tokens[mlm_index[s]],
            mlm_valid=mlm_valid[s],
        )
        for s in range(steps)
    ]
