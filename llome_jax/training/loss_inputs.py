"""What every loss receives besides the log-probs: the :class:`LossBatch` and
:class:`LossParams` pytrees, and the paper's margin reward that fills ``LossBatch.reward``.

``LossBatch`` holds per-unit data (reward, weight, self-normalisation group; a unit is a sequence
or a DPO pair), ``LossParams`` every numeric hyper-parameter of every loss as floats, so a sweep
never recompiles (BUILD.md §3.6). The losses themselves are :mod:`llome_jax.training.losses`.

Paper: Chen, Stanton et al., ICML 2025 ("LLOME"), §3.3 (margin reward), appendix "LLM Training
Details / Self-Normalization".
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "LossBatch",
    "LossParams",
    "margin_reward",
]

# --------------------------------------------------------------------------------------------
# Batch and hyper-parameter pytrees
# --------------------------------------------------------------------------------------------


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["reward", "weight", "group"],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class LossBatch:
    """Per-unit data a loss needs besides the log-probs (one row per sequence, or per DPO pair).

    Attributes:
      reward: float32 ``[N]``: the reward ``r(x, y)`` (e.g. :func:`margin_reward`); unused by SFT
        and DPO (kept for metrics).
      weight: float32 ``[N]``: non-negative example weight; 0 marks padding. The train step's
        reduction and MargE/REINFORCE's self-normalisation both use it.
      group: int32 ``[N]``: self-normalisation group id. Importance weights are normalised over
        all units sharing an id: all zeros = the whole (global) batch, the paper's intent;
        ``arange(N)`` = groups of one, the authors' code (per-device micro-batch of 1).
    """

    reward: jax.Array
    weight: jax.Array
    group: jax.Array

    @classmethod
    def create(
        cls,
        num_units: int | None = None,
        *,
        reward: jax.Array | np.ndarray | None = None,
        weight: jax.Array | np.ndarray | None = None,
        group_size: int | None = None,
    ) -> LossBatch:
        """Build a batch with checked shapes.

        Args:
          num_units: N; inferred from ``reward`` or ``weight`` when omitted.
          reward: ``[N]`` rewards (default 0).
          weight: ``[N]`` weights (default 1).
          group_size: self-normalisation group size: ``None`` = one group (the whole batch),
            ``1`` = reference behaviour, ``g`` = consecutive blocks of ``g`` units (N % g == 0).

        Raises:
          ValueError: on inconsistent shapes, negative weights or a group size not dividing N.
        """
        if num_units is None:
            source = reward if reward is not None else weight
            if source is None:
                raise ValueError("LossBatch.create needs num_units, reward or weight")
            num_units = int(np.shape(source)[0])
        n = int(num_units)
        reward_arr = jnp.zeros((n,), jnp.float32) if reward is None else jnp.asarray(reward)
        weight_arr = jnp.ones((n,), jnp.float32) if weight is None else jnp.asarray(weight)
        for name, arr in (("reward", reward_arr), ("weight", weight_arr)):
            if arr.shape != (n,):
                raise ValueError(f"{name} must have shape ({n},), got {arr.shape}")
        if not isinstance(weight_arr, jax.core.Tracer) and bool(jnp.any(weight_arr < 0)):
            raise ValueError("weights must be non-negative (0 marks padding)")
        if group_size is None:
            group = jnp.zeros((n,), jnp.int32)
        else:
            if group_size < 1 or n % group_size:
                raise ValueError(
                    f"group_size={group_size} must be >= 1 and divide the number of units {n}"
                )
            group = jnp.arange(n, dtype=jnp.int32) // group_size
        return cls(
            reward=reward_arr.astype(jnp.float32),
            weight=weight_arr.astype(jnp.float32),
            group=group,
        )


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=[
        "beta",
        "kl_weight",
        "target_weight",
        "self_normalize",
        "weights_sum_to_one",
        "stop_weight_gradient",
        "label_smoothing",
        "token_mean",
        "baseline",
    ],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class LossParams:
    """Numeric hyper-parameters shared by all losses (a pytree: new values never recompile).

    0/1 "switches" are floats and act by exact blending (``s * a + (1 - s) * b``), so they too
    can be swept or vmapped. Use :func:`~llome_jax.training.loss_registry.default_params` for each loss's
    paper/reference defaults.

    Attributes:
      beta: MargE/REINFORCE: rationality ``beta`` of the target ``pi* ∝ exp(beta r)`` (the reward
        is multiplied by it; the authors' code uses 1). DPO: inverse temperature ``beta`` on the
        summed log-ratio (reference f2: 0.4).
      kl_weight: ``lambda``, weight of the reverse KL ``KL(pi_ref || pi_theta)`` term, i.e. of the
        length-normalised NLL ``-log pi_theta(y|x) / |y|`` (paper and f2 config: 10).
      target_weight: weight of the data term ``KL(pi_theta || pi*)`` (the authors' ``alpha``, 1).
      self_normalize: 1 = self-normalise the importance weights within each group (paper
        "Self-Normalization"; reference default), 0 = raw ratios ``pi_theta / pi_ref``.
      weights_sum_to_one: how self-normalised weights are scaled (with ``self_normalize = 1``).
        0 ("mean"): they average 1 over their group, so the batch mean of ``omega c`` is the
        self-normalised importance-sampling estimate ``sum_j w_j c_j / sum_j w_j``. 1 ("sum"):
        they sum to 1 over their group, the paper's ``w~`` read literally, so the batch mean of
        ``w~ c`` is ``(1/B) sum_j w~_j c_j``, ``B`` (the group's total weight) times smaller
        relative to the lambda term. Groups of one: identical.
      stop_weight_gradient: 1 = the importance weights carry no gradient (``stop_gradient``),
        0 = gradients flow through them. MargE needs 0: its data term ``E_pi_theta[log pi - r]``
        is an expectation under pi_theta, and with detached weights its gradient is exactly zero
        in expectation (tested). REINFORCE defaults to 1: then its gradient is the off-policy
        policy gradient ``-E_pi_theta[r grad log pi_theta]``.
      label_smoothing: DPO conservative label smoothing ``eps`` (0 = standard DPO).
      token_mean: SFT normalisation. 1 = tokens pooled over the batch (``sum NLL / sum |y|``, the
        reference's ``SFTTrainer``), 0 = each sequence's own mean ``-log pi(y|x) / |y|``.
      baseline: REINFORCE reward baseline ``b`` (reward used is ``r - b``; the reference logs a
        running mean but never subtracts it: 0).
    """

    beta: jax.Array | float = 1.0
    kl_weight: jax.Array | float = 10.0
    target_weight: jax.Array | float = 1.0
    self_normalize: jax.Array | float = 1.0
    weights_sum_to_one: jax.Array | float = 0.0
    stop_weight_gradient: jax.Array | float = 0.0
    label_smoothing: jax.Array | float = 0.0
    token_mean: jax.Array | float = 1.0
    baseline: jax.Array | float = 0.0

    def replace(self, **changes: float) -> LossParams:
        """``dataclasses.replace`` with a check that the names exist."""
        return dataclasses.replace(self, **changes)

    def as_arrays(self) -> LossParams:
        """All fields as float32 scalars (what the jitted step receives)."""
        return jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), self)


# --------------------------------------------------------------------------------------------
# The paper's reward
# --------------------------------------------------------------------------------------------


def margin_reward(f_x: jax.Array, f_y: jax.Array) -> jax.Array:
    """The paper's margin reward ``r(x, y) = max(f(y) - f(x), 0)`` (LLOME §3.3, Eq. 3).

    Infeasible values (``-inf``, ``nan``, ``+inf``) count as ``f = 0`` before the difference, as the
    paper states ("we set f(x)=0 for all infeasible x") and the authors' code does
    (``get_ehrlich_rewards``). Higher ``f`` is better (Ehrlich convention).

    Args:
      f_x: ``[...]`` objective value of the prompt ``x``.
      f_y: ``[...]`` objective value of the response ``y``.

    Returns:
      float32 ``[...]`` non-negative rewards.

    Example:
      >>> import jax.numpy as jnp
      >>> margin_reward(jnp.array([0.25, 0.5, -jnp.inf]), jnp.array([0.75, 0.25, 0.5])).tolist()
      [0.5, 0.0, 0.5]
    """
    f_x = jnp.asarray(f_x, jnp.float32)
    f_y = jnp.asarray(f_y, jnp.float32)
    f_x = jnp.where(jnp.isfinite(f_x), f_x, 0.0)
    f_y = jnp.where(jnp.isfinite(f_y), f_y, 0.0)
    return jnp.maximum(f_y - f_x, 0.0)
