"""The optimizer the LLOME train step applies: the paper's AdamW / RMSprop and the HF schedule.

LLOME appendix "LLM Training Details" and the authors' HF ``Trainer`` setup
(``docs/design/losses.md``): :class:`OptimizerConfig` (static hyper-parameters),
:func:`paper_optimizer` (the paper's settings for a loss), :func:`learning_rate_schedule` (HF
``get_linear_schedule_with_warmup``) and :func:`make_optimizer` (the optax transformation).
Gradient clipping is not here: it lives in the train step (``llome_jax.training.step``), which also
takes the schedule's values at run time (:func:`schedule_from_values`,
:func:`optimizer_with_schedule`, :func:`without_schedule`) so that phases differing only in
``lr``, warm-up or length share one compiled program.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax

from llome_jax.training.loss_registry import loss_spec

__all__ = [
    "OptimizerConfig",
    "learning_rate_schedule",
    "make_optimizer",
    "optimizer_with_schedule",
    "paper_optimizer",
    "schedule_from_values",
    "without_schedule",
]


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """Optimizer hyper-parameters (static; the LR schedule needs ``total_steps``).

    Attributes:
      name: ``"adamw"`` (torch ``AdamW`` semantics) or ``"rmsprop"`` (torch ``RMSprop``: smoothing
        ``alpha``, ``eps`` added outside the square root, no momentum, no centring).
      learning_rate: peak learning rate.
      total_steps: number of optimizer steps in the phase (for the linear decay).
      warmup_steps: linear warm-up steps from 0 (HF ``get_linear_schedule_with_warmup``).
      schedule: ``"linear"`` (decay to 0 at ``total_steps``, as HF) or ``"constant"``.
      weight_decay: AdamW decoupled decay (torch ``p *= 1 - lr * wd``) / RMSprop L2 (torch adds
        ``wd * p`` to the gradient). Applied only to parameters with ``ndim >= 2`` (kernels,
        embeddings), not to biases and LayerNorm scales, as the HF ``Trainer`` does.
      b1, b2, eps: AdamW moments and epsilon (torch defaults 0.9, 0.999, 1e-8).
      rms_decay: RMSprop ``alpha`` (torch default 0.99; optax's default ``decay`` is 0.9).
      rms_eps: RMSprop epsilon (torch 1e-8, outside the sqrt; optax's default is inside).
    """

    name: str = "adamw"
    learning_rate: float = 1e-6
    total_steps: int = 1000
    warmup_steps: int = 0
    schedule: str = "linear"
    weight_decay: float = 0.01
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    rms_decay: float = 0.99
    rms_eps: float = 1e-8

    def __post_init__(self) -> None:
        if self.name not in ("adamw", "rmsprop"):
            raise ValueError(f"optimizer name must be 'adamw' or 'rmsprop', got {self.name!r}")
        if self.schedule not in ("linear", "constant"):
            raise ValueError(f"schedule must be 'linear' or 'constant', got {self.schedule!r}")
        if self.total_steps < 1 or self.warmup_steps < 0:
            raise ValueError("total_steps must be >= 1 and warmup_steps >= 0")
        if self.learning_rate < 0 or self.weight_decay < 0:
            raise ValueError("learning_rate and weight_decay must be non-negative")


#: ``LossSpec.optimizer`` -> the paper's settings of that optimizer family.
_PAPER_OPTIMIZERS: dict[str, OptimizerConfig] = {
    "adamw": OptimizerConfig(name="adamw", learning_rate=1e-6, weight_decay=0.01),
    "rmsprop": OptimizerConfig(
        name="rmsprop", learning_rate=1e-7, warmup_steps=150, weight_decay=0.0
    ),
}


def paper_optimizer(loss_name: str, total_steps: int, **overrides: Any) -> OptimizerConfig:
    """The optimizer the paper/reference used for a loss, for a phase of ``total_steps`` steps.

    The loss's ``LossSpec.optimizer`` picks the family:

    * ``"adamw"`` (SFT, MargE, REINFORCE): AdamW(0.9, 0.999, eps 1e-8, weight decay 0.01 as the
      paper states; the authors' HF default was 0: pass ``weight_decay=0.0`` to match it), lr
      1e-6, linear decay to 0, no warm-up.
    * ``"rmsprop"`` (DPO): RMSprop(alpha 0.99, eps 1e-8, no momentum, no weight decay), lr 1e-7,
      linear decay with 150 warm-up steps (the authors' DPO configuration).
    """
    family = loss_spec(loss_name).optimizer  # ValueError for an unknown loss
    base = _PAPER_OPTIMIZERS[family]
    return dataclasses.replace(base, total_steps=total_steps, **overrides)


def learning_rate_schedule(config: OptimizerConfig) -> optax.Schedule:
    """HF ``get_linear_schedule_with_warmup``: ``lr * s / W`` for ``s < W``, then
    ``lr * max(0, (T - s) / max(1, T - W))`` (or constant after warm-up)."""
    return schedule_from_values(
        config, config.learning_rate, config.warmup_steps, config.total_steps
    )


def schedule_from_values(
    config: OptimizerConfig, peak: Any, warmup: Any, total: Any
) -> optax.Schedule:
    """:func:`learning_rate_schedule` with ``lr``, ``W`` and ``T`` given apart from ``config``:
    Python numbers, or traced scalars (the train step's run-time schedule values). The same
    operations on the same dtypes either way, but inside ``jit`` XLA rewrites a division by a
    constant as a multiplication by its reciprocal, so only the traced form is the float32
    formula exactly (``x / c`` compiled in can be 1 ulp off)."""
    linear = config.schedule == "linear"

    def schedule(count: jax.Array) -> jax.Array:
        s = jnp.asarray(count, float)  # float64 under x64 (exact comparisons in tests)
        warm = s / jnp.maximum(1, warmup)
        decay = jnp.maximum(0.0, (total - s) / jnp.maximum(1, total - warmup)) if linear else 1.0
        return peak * jnp.where(s < warmup, warm, decay)

    return schedule


def _decay_mask(params: Any) -> Any:
    """``True`` on the leaves weight decay applies to: ``ndim >= 2`` (kernels, embeddings)."""
    return jax.tree.map(lambda x: jnp.ndim(x) >= 2, params)


def make_optimizer(config: OptimizerConfig) -> optax.GradientTransformation:
    """Build the optax transformation (gradient clipping lives in the train step)."""
    return optimizer_with_schedule(config, learning_rate_schedule(config))


def optimizer_with_schedule(
    config: OptimizerConfig, schedule: optax.Schedule
) -> optax.GradientTransformation:
    """:func:`make_optimizer` with the learning-rate ``schedule`` given apart from ``config``
    (the train step passes :func:`schedule_from_values` of its run-time values)."""
    if config.name == "adamw":
        return optax.adamw(
            schedule,
            b1=config.b1,
            b2=config.b2,
            eps=config.eps,
            weight_decay=config.weight_decay,
            mask=_decay_mask,
        )
    parts = []
    if config.weight_decay:
        parts.append(optax.add_decayed_weights(config.weight_decay, mask=_decay_mask))
    parts.append(
        optax.rmsprop(
            schedule, decay=config.rms_decay, eps=config.rms_eps, eps_in_sqrt=False, momentum=None
        )
    )
    return optax.chain(*parts)


def without_schedule(config: OptimizerConfig) -> OptimizerConfig:
    """``config`` without its schedule values (``lr``, ``W``, ``T``): what a compiled step that
    takes them at run time depends on."""
    return dataclasses.replace(config, learning_rate=0.0, warmup_steps=0, total_steps=1)
