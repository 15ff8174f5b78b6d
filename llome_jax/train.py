"""The jitted, donating, data-parallel train step shared by every loss, plus the paper's optimizers.

Model contract: an NNX module called as
``model(input_ids [B, T], attention_mask=None, position_ids=None) -> logits [B, T, V]``
(``llome_jax.lm.pythia.Pythia``, or any causal LM with that signature). A model whose call also
takes ``logit_positions`` (int ``[B, W]``, returning ``[B, W, V]``) gets its output head applied
only where a target token is scored (the batch's static ``target_window``, see
``llome_jax.lm.logprobs``); other models compute every position's logits and the step picks.
The module is split once into a static ``graphdef`` and a ``params`` pytree (a pure nested dict
of arrays, see :func:`split_params`), so the step is a pure function of
``(TrainState, TrainBatch, LossParams)``.

Pipeline of one step (:func:`make_train_step`)::

    policy = sequence_logprobs(model(params, tokens))        # SeqLogProbs [B], the only logits use
    loss   = weighted_mean(loss_fn(policy, batch.reference, batch.loss, hparams))
    grads  = d loss / d params   (exact, also with gradient accumulation; see below)
    grads  = clip to global norm (torch ``clip_grad_norm_`` formula)
    params, opt_state = optimizer.update(...)

Reference log-probs are *data*: computed once per round by :func:`compute_logprobs` with the frozen
round-start parameters and stored in :class:`TrainBatch` (the authors' code recomputed them every
step: ``precompute_ref_log_probs=False``).

Gradient accumulation is **exact**: MargE/REINFORCE normalise importance weights over the whole
batch and DPO pairs rows, so the loss does not split into independent micro-batch losses. With
``num_microbatches = M > 1`` the step (1) runs the forward pass over the M micro-batches to get
``policy`` for the full batch, (2) differentiates the loss with respect to ``policy.sum_logp``
(cheap, ``[B]``), and (3) back-propagates these per-sequence cotangents through each micro-batch
with ``jax.vjp``. Cost: one extra forward pass (~ +30 %) in exchange for a gradient equal to the
full-batch one. Losses linear in the policy log-probs (SFT) skip step (1)
(``losses.LINEAR_IN_POLICY``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from llome_jax import parallel
from llome_jax.lm.logprobs import (
    max_target_count,
    sequence_logprobs,
    target_positions,
    window_logprobs,
)
from llome_jax.lm.logprobs import target_window as auto_target_window
from llome_jax.losses import (
    LINEAR_IN_POLICY,
    LossBatch,
    LossFn,
    LossParams,
    loss_spec,
    weighted_mean,
)
from llome_jax.types import SeqLogProbs

__all__ = [
    "OptimizerConfig",
    "TrainBatch",
    "TrainState",
    "TrainStep",
    "clip_by_global_norm",
    "compute_logprobs",
    "init_train_state",
    "learning_rate_schedule",
    "make_eval_step",
    "make_optimizer",
    "make_train_step",
    "paper_optimizer",
    "position_ids_from_mask",
    "split_params",
]

Params = Any  # a nested dict of arrays (nnx.to_pure_dict of the model's nnx.Param state)


# --------------------------------------------------------------------------------------------
# Pytrees
# --------------------------------------------------------------------------------------------


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["input_ids", "attention_mask", "target_mask", "reference", "loss"],
    meta_fields=["target_window"],
)
@dataclasses.dataclass(frozen=True)
class TrainBatch:
    """One global batch of (prompt, target) token sequences and everything a loss needs.

    Attributes:
      input_ids: int32 ``[B, T]`` prompt and target tokens, concatenated, padded.
      attention_mask: int32 ``[B, T]`` 1 on real tokens, 0 on padding.
      target_mask: int32 ``[B, T]`` 1 on the target tokens the loss scores.
      reference: ``SeqLogProbs`` ``[B]`` of the frozen reference model (zeros for SFT).
      loss: ``LossBatch`` ``[N]`` (rewards, weights, groups); ``N = B`` or, for DPO, ``B / 2``
        with rows ordered ``[chosen; rejected]``.
      target_window: static ``W``: every row has at most ``W`` target tokens after position 0,
        so the output head runs on ``[B, W]`` positions only (``None``: all ``T``).
    """

    input_ids: jax.Array
    attention_mask: jax.Array
    target_mask: jax.Array
    reference: SeqLogProbs
    loss: LossBatch
    target_window: int | None = None

    @classmethod
    def create(
        cls,
        input_ids: Any,
        target_mask: Any,
        attention_mask: Any = None,
        *,
        reference: SeqLogProbs | None = None,
        loss: LossBatch | None = None,
        target_window: int | str | None = "auto",
    ) -> TrainBatch:
        """Validate (eagerly, before any jit) and build a batch.

        Args:
          input_ids: int ``[B, T]``.
          target_mask: 0/1 ``[B, T]``; every row with positive loss weight needs >= 1 target token
            after position 0.
          attention_mask: 0/1 ``[B, T]`` (default: all ones).
          reference: reference ``SeqLogProbs`` ``[B]`` (default zeros; fine for SFT only).
          loss: ``LossBatch`` (default: ``LossBatch.create(B)``, unit weights, one group).
          target_window: ``"auto"`` (default: the largest target count rounded up to 16,
            ``llome_jax.lm.logprobs.target_window``), an int ``W`` (fixed across batches), or
            ``None`` (the head runs on every position).

        Raises:
          ValueError: on bad shapes/dtypes, empty target masks, or rows with more than an
            explicit ``target_window`` target tokens.
        """
        ids = np.asarray(input_ids)
        if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"input_ids must be an int [B, T] array, got {ids.dtype}{ids.shape}")
        b, t = ids.shape
        tmask = np.asarray(target_mask)
        amask = np.ones_like(ids) if attention_mask is None else np.asarray(attention_mask)
        for name, arr in (("target_mask", tmask), ("attention_mask", amask)):
            if arr.shape != (b, t):
                raise ValueError(f"{name} must have shape {(b, t)}, got {arr.shape}")
            if not np.isin(arr, (0, 1)).all():
                raise ValueError(f"{name} must contain only 0/1")
        if reference is None:
            reference = SeqLogProbs(jnp.zeros((b,), jnp.float32), jnp.zeros((b,), jnp.float32))
        if np.shape(reference.sum_logp) != (b,):
            raise ValueError(f"reference log-probs must have shape ({b},)")
        loss = LossBatch.create(b) if loss is None else loss
        n = int(np.shape(loss.weight)[0])
        if n not in (b, b // 2) or (n == b // 2 and b % 2):
            raise ValueError(
                f"loss batch has {n} units for {b} sequences: use N = B (one unit per sequence) "
                "or N = B / 2 (DPO pairs, rows [chosen; rejected])"
            )
        counts = tmask[:, 1:].sum(axis=1)
        unit_weight = np.asarray(loss.weight)
        seq_weight = unit_weight if n == b else np.concatenate([unit_weight, unit_weight])
        empty = np.nonzero((counts == 0) & (seq_weight > 0))[0]
        if empty.size:
            raise ValueError(
                f"rows {empty[:10].tolist()} have no target tokens after position 0 but positive "
                "weight: check the prompt/target boundary (or give padding rows weight 0)"
            )
        window = _checked_window(target_window, tmask)
        return cls(
            input_ids=jnp.asarray(ids, jnp.int32),
            attention_mask=jnp.asarray(amask, jnp.int32),
            target_mask=jnp.asarray(tmask, jnp.int32),
            reference=reference,
            loss=loss,
            target_window=window,
        )


def _checked_window(target_window: int | str | None, target_mask: np.ndarray) -> int | None:
    """Resolve ``"auto"`` and check that an explicit window holds every row's targets."""
    if target_window == "auto":
        return auto_target_window(target_mask)
    if target_window is None:
        return None
    if not isinstance(target_window, int) or isinstance(target_window, bool):
        raise ValueError(f"target_window must be 'auto', an int or None, got {target_window!r}")
    most = max_target_count(target_mask)
    if not most <= target_window <= target_mask.shape[1] - 1:
        raise ValueError(
            f"target_window={target_window} must lie in [{most}, {target_mask.shape[1] - 1}]: "
            f"a row has {most} target tokens after position 0 and rows have "
            f"{target_mask.shape[1] - 1} predicting positions"
        )
    return target_window


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["params", "opt_state", "step", "key"],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class TrainState:
    """Everything that changes during fine-tuning (checkpointed as one pytree).

    Attributes:
      params: model parameters, a nested dict of arrays (:func:`split_params`).
      opt_state: the optax optimizer state.
      step: int32 scalar, number of optimizer updates applied.
      key: typed PRNG key. The step derives ``fold_in(key, step)`` for stochastic models
        (dropout); the LLOME losses and deterministic Pythia do not consume randomness, but the key
        is carried and checkpointed so that restarts stay reproducible when they do.
    """

    params: Params
    opt_state: optax.OptState
    step: jax.Array
    key: jax.Array


# --------------------------------------------------------------------------------------------
# Optimizers (LLOME appendix "LLM Training Details"; the authors' HF Trainer setup;
# docs/design/losses.md)
# --------------------------------------------------------------------------------------------


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
    return _schedule(config, config.learning_rate, config.warmup_steps, config.total_steps)


def _schedule(config: OptimizerConfig, peak: Any, warmup: Any, total: Any) -> optax.Schedule:
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


def _decay_mask(params: Params) -> Any:
    return jax.tree.map(lambda x: jnp.ndim(x) >= 2, params)


def make_optimizer(config: OptimizerConfig) -> optax.GradientTransformation:
    """Build the optax transformation (gradient clipping lives in the train step)."""
    return _optimizer(config, learning_rate_schedule(config))


def _optimizer(config: OptimizerConfig, schedule: optax.Schedule) -> optax.GradientTransformation:
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


def _schedule_free(config: OptimizerConfig) -> OptimizerConfig:
    """``config`` without its schedule values (``lr``, ``W``, ``T``): what a compiled step that
    takes them at run time depends on."""
    return dataclasses.replace(config, learning_rate=0.0, warmup_steps=0, total_steps=1)


# --------------------------------------------------------------------------------------------
# Model plumbing
# --------------------------------------------------------------------------------------------


def split_params(model: nnx.Module) -> tuple[nnx.GraphDef, Params, nnx.State]:
    """``(graphdef, params, rest)``: params as a pure nested dict of arrays, rest = non-Param state."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    return graphdef, nnx.to_pure_dict(params), rest


def position_ids_from_mask(attention_mask: jax.Array) -> jax.Array:
    """``cumsum(mask) - 1`` clipped at 0: correct positions for left- and right-padded rows."""
    return jnp.maximum(jnp.cumsum(attention_mask, axis=-1) - 1, 0).astype(jnp.int32)


def _forward_logprobs(
    graphdef: nnx.GraphDef,
    params: Params,
    rest: nnx.State,
    input_ids: jax.Array,
    attention_mask: jax.Array,
    target_mask: jax.Array,
    window: int | None = None,
) -> SeqLogProbs:
    model = nnx.merge(graphdef, params, rest)
    position_ids = position_ids_from_mask(attention_mask)
    if window is None:
        logits = model(input_ids, attention_mask=attention_mask, position_ids=position_ids)
        return sequence_logprobs(logits, input_ids, target_mask)
    positions, valid = target_positions(target_mask, window)
    if "logit_positions" in inspect.signature(model.__call__).parameters:
        logits = model(
            input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            logit_positions=positions,
        )
    else:
        logits = model(input_ids, attention_mask=attention_mask, position_ids=position_ids)
        logits = jnp.take_along_axis(logits, positions[..., None], axis=1)
    return window_logprobs(logits, input_ids, positions, valid)


def init_train_state(
    key: jax.Array,
    model: nnx.Module,
    optimizer: optax.GradientTransformation | OptimizerConfig,
) -> TrainState:
    """Initial state: a *copy* of the model's current parameters, a fresh optimizer state, step 0
    (``optimizer``: a transformation, or an :class:`OptimizerConfig` for :func:`make_optimizer`).

    The copy matters because the train step donates its state: without it, the first step would
    delete the arrays the ``model`` object itself still refers to.
    """
    if isinstance(optimizer, OptimizerConfig):
        optimizer = make_optimizer(optimizer)
    _, params, _ = split_params(model)
    params = jax.tree.map(jnp.copy, params)
    return TrainState(
        params=params,
        opt_state=optimizer.init(params),
        step=jnp.zeros((), jnp.int32),
        key=key,
    )


def _to_microbatches(x: jax.Array, num: int) -> jax.Array:
    """``[B, ...] -> [M, B/M, ...]`` with micro-batch ``m`` = rows ``m, m + M, m + 2M, ...``.

    The strided split keeps every micro-batch spread over all devices when the batch is sharded
    in contiguous blocks (B / devices divisible by M): no data moves between devices.
    """
    return x.reshape(x.shape[0] // num, num, *x.shape[1:]).swapaxes(0, 1)


def _from_microbatches(x: jax.Array) -> jax.Array:
    return x.swapaxes(0, 1).reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def clip_by_global_norm(grads: Any, max_norm: float | None) -> tuple[Any, jax.Array]:
    """torch ``clip_grad_norm_``: scale by ``min(1, max_norm / (norm + 1e-6))``."""
    norm = optax.tree.norm(grads)
    if max_norm is None:
        return grads, norm
    scale = jnp.minimum(1.0, max_norm / (norm + 1e-6))
    return jax.tree.map(lambda g: (g * scale).astype(g.dtype), grads), norm


# --------------------------------------------------------------------------------------------
# The steps
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TrainStep:
    """A validated, jitted train step: ``step(state, batch, hparams) -> (state, metrics)``.

    ``state`` is donated (its buffers are reused): do not use it after the call.

    Attributes:
      jitted: the underlying ``jax.jit`` function of ``(state, batch, hparams, rest, *schedule)``.
      rest: the model's non-Param state (empty for Pythia), passed along on every call.
      num_microbatches: gradient-accumulation factor.
      mesh: the mesh the step is sharded over, or ``None``.
      schedule: the learning-rate schedule's ``(lr, warmup_steps, total_steps)``, passed on every
        call, when the step was built from an :class:`OptimizerConfig`; ``()`` when from an optax
        transformation (whose schedule is compiled in).
    """

    jitted: Callable[..., tuple[TrainState, dict[str, jax.Array]]]
    rest: nnx.State
    num_microbatches: int
    mesh: Mesh | None
    schedule: tuple[float, int, int] | tuple[()] = ()

    def __call__(
        self, state: TrainState, batch: TrainBatch, hparams: LossParams
    ) -> tuple[TrainState, dict[str, jax.Array]]:
        _check_step_shapes(batch, self.num_microbatches, self.mesh)
        return self.jitted(state, batch, hparams.as_arrays(), self.rest, *self.schedule)


def _check_step_shapes(batch: TrainBatch, num_microbatches: int, mesh: Mesh | None) -> None:
    b = batch.input_ids.shape[0]
    devices = 1 if mesh is None else mesh.shape[parallel.DATA_AXIS]
    if b % (num_microbatches * devices):
        raise ValueError(
            f"batch size {b} must be divisible by num_microbatches ({num_microbatches}) x "
            f"data-parallel devices ({devices})"
        )
    if batch.loss.weight.shape[0] % devices:
        raise ValueError(
            f"{batch.loss.weight.shape[0]} loss units do not divide over {devices} devices"
        )


def make_train_step(
    loss_fn: LossFn,
    model: nnx.Module,
    optimizer: optax.GradientTransformation | OptimizerConfig,
    *,
    num_microbatches: int = 1,
    max_grad_norm: float | None = 1.0,
    mesh: Mesh | None = None,
    donate: bool = True,
) -> TrainStep:
    """Build the jitted train step for one loss (any entry of ``losses.LOSSES``).

    The compiled program depends only on the structure: two calls with equal arguments (the
    same loss function and optax transformation, an equal model graph, mesh and settings) share
    one ``jax.jit`` function, so a second run in the same process (the paper driver, the tests)
    does not compile its step again. Given an :class:`OptimizerConfig`, the learning-rate
    schedule's values are run-time inputs, so phases that differ only in ``lr``, warm-up or
    length (LLOME rounds with more or fewer steps) share the program too.

    Args:
      loss_fn: ``(policy, reference, LossBatch, LossParams) -> (per_unit_loss, metrics)``.
      model: the NNX policy model (only its graph structure is used; parameters come from the
        ``TrainState``).
      optimizer: an :class:`OptimizerConfig` (the optimizer of :func:`make_optimizer`, with the
        schedule's values passed at run time), or any optax transformation, e.g.
        ``make_optimizer(paper_optimizer("marge", n))`` (compiled in as it is).
      num_microbatches: gradient accumulation factor M (exact, see module docstring); the global
        batch must divide by ``M`` x devices.
      max_grad_norm: global-norm clipping threshold (reference: 1.0); ``None`` disables it.
      mesh: data-parallel mesh; the state is replicated and batch leaves split along ``"data"``
        (in/out shardings are pinned). ``None``: arrays stay where they are.
      donate: donate the ``TrainState`` buffers to the output (saves a parameter-sized copy).

    Returns:
      A :class:`TrainStep`; ``step(state, batch, hparams) -> (state, metrics)`` with metrics
      ``loss``, ``grad_norm`` (before clipping), ``num_target_tokens`` and the loss's own metrics.
    """
    if num_microbatches < 1:
        raise ValueError("num_microbatches must be >= 1")
    graphdef, _, rest = split_params(model)
    schedule: tuple[float, int, int] | tuple[()] = ()
    if isinstance(optimizer, OptimizerConfig):
        schedule = (
            float(optimizer.learning_rate),
            int(optimizer.warmup_steps),
            int(optimizer.total_steps),
        )
        optimizer = _schedule_free(optimizer)
    jitted = _jitted_train_step(
        loss_fn, graphdef, optimizer, num_microbatches, max_grad_norm, mesh, donate
    )
    return TrainStep(
        jitted=jitted,
        rest=rest,
        num_microbatches=num_microbatches,
        mesh=mesh,
        schedule=schedule,
    )


@functools.lru_cache(maxsize=16)
def _jitted_train_step(
    loss_fn: LossFn,
    graphdef: nnx.GraphDef,
    optimizer: optax.GradientTransformation | OptimizerConfig,
    num_microbatches: int,
    max_grad_norm: float | None,
    mesh: Mesh | None,
    donate: bool,
) -> Callable[..., tuple[TrainState, dict[str, jax.Array]]]:
    """The ``jax.jit`` function of :func:`make_train_step`, one per structure (the key holds the
    model's graph, never its parameters). ``optimizer``: a transformation, or a schedule-free
    :class:`OptimizerConfig` whose schedule values come as the last three arguments."""
    linear = loss_fn in LINEAR_IN_POLICY
    forward = functools.partial(_forward_logprobs, graphdef)

    def constrain(x: jax.Array, spec: P) -> jax.Array:
        if mesh is None:
            return x
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))

    def objective(
        policy: SeqLogProbs, batch: TrainBatch, hparams: LossParams
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        per_unit, metrics = loss_fn(policy, batch.reference, batch.loss, hparams)
        return weighted_mean(per_unit, batch.loss.weight), metrics

    def gradients(
        params: Params, batch: TrainBatch, hparams: LossParams, rest: nnx.State
    ) -> tuple[jax.Array, dict[str, jax.Array], Any]:
        tokens = (batch.input_ids, batch.attention_mask, batch.target_mask)
        window = batch.target_window
        if num_microbatches == 1:

            def full(p: Params) -> tuple[jax.Array, dict[str, jax.Array]]:
                return objective(forward(p, rest, *tokens, window), batch, hparams)

            (loss, metrics), grads = jax.value_and_grad(full, has_aux=True)(params)
            return loss, metrics, grads

        micro = tuple(
            constrain(_to_microbatches(x, num_microbatches), P(None, parallel.DATA_AXIS))
            for x in tokens
        )
        num_tokens = jnp.sum(batch.target_mask[:, 1:], axis=-1).astype(jnp.float32)

        def policy_from(sum_logp: jax.Array) -> SeqLogProbs:
            return SeqLogProbs(sum_logp=sum_logp, num_tokens=num_tokens)

        def cotangent_of(sum_logp: jax.Array) -> jax.Array:
            grad_policy = jax.grad(lambda s: objective(policy_from(s), batch, hparams)[0])
            return grad_policy(sum_logp)

        def backward(acc: Any, xs: tuple[Any, jax.Array]) -> tuple[Any, jax.Array]:
            mb, cot = xs
            sum_logp, vjp = jax.vjp(lambda p: forward(p, rest, *mb, window).sum_logp, params)
            (g,) = vjp(cot)
            return jax.tree.map(jnp.add, acc, g), sum_logp

        zeros = jax.tree.map(jnp.zeros_like, params)
        if linear:
            # The cotangent does not depend on the policy: one fused forward/backward pass.
            cot = cotangent_of(jnp.zeros_like(num_tokens))
            grads, sum_logp = jax.lax.scan(
                backward, zeros, (micro, _to_microbatches(cot, num_microbatches))
            )
            sum_logp = _from_microbatches(sum_logp)
        else:
            sum_logp = _from_microbatches(
                jax.lax.map(lambda mb: forward(params, rest, *mb, window).sum_logp, micro)
            )
            cot = cotangent_of(sum_logp)
            grads, _ = jax.lax.scan(
                backward, zeros, (micro, _to_microbatches(cot, num_microbatches))
            )
        loss, metrics = objective(policy_from(sum_logp), batch, hparams)
        return loss, metrics, grads

    def step(
        state: TrainState, batch: TrainBatch, hparams: LossParams, rest: nnx.State, *schedule: Any
    ) -> tuple[TrainState, dict[str, jax.Array]]:
        if isinstance(optimizer, OptimizerConfig):
            tx = _optimizer(optimizer, _schedule(optimizer, *schedule))
        else:
            tx = optimizer
        loss, metrics, grads = gradients(state.params, batch, hparams, rest)
        grads, grad_norm = clip_by_global_norm(grads, max_grad_norm)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        new_state = TrainState(
            params=params, opt_state=opt_state, step=state.step + 1, key=state.key
        )
        metrics = {
            "loss": loss,
            "grad_norm": grad_norm,
            "num_target_tokens": jnp.sum(batch.target_mask[:, 1:]).astype(jnp.float32),
            **metrics,
        }
        return new_state, metrics

    jit_kwargs: dict[str, Any] = {"donate_argnums": (0,) if donate else ()}
    if mesh is not None:
        repl = parallel.replicated_sharding(mesh)
        num_schedule = 3 if isinstance(optimizer, OptimizerConfig) else 0
        jit_kwargs["in_shardings"] = (repl, parallel.batch_sharding(mesh), repl, repl) + (
            repl,
        ) * num_schedule
        jit_kwargs["out_shardings"] = (repl, repl)
    return jax.jit(step, **jit_kwargs)


def make_eval_step(
    loss_fn: LossFn,
    model: nnx.Module,
    *,
    num_microbatches: int = 1,
    mesh: Mesh | None = None,
) -> Callable[[Params, TrainBatch, LossParams], dict[str, jax.Array]]:
    """A jitted ``eval(params, batch, hparams) -> metrics`` (validation loss; no update).

    The forward pass runs over ``num_microbatches`` slices (to bound activation memory); the
    loss sees the whole batch, so self-normalisation and DPO pairing match the train step. As
    with :func:`make_train_step`, equal arguments share one compiled program.
    """
    graphdef, _, rest = split_params(model)
    jitted = _jitted_eval_step(loss_fn, graphdef, num_microbatches, mesh)

    def run(params: Params, batch: TrainBatch, hparams: LossParams) -> dict[str, jax.Array]:
        _check_step_shapes(batch, num_microbatches, mesh)
        return jitted(params, batch, hparams.as_arrays(), rest)

    return run


@functools.lru_cache(maxsize=16)
def _jitted_eval_step(
    loss_fn: LossFn, graphdef: nnx.GraphDef, num_microbatches: int, mesh: Mesh | None
) -> Callable[..., dict[str, jax.Array]]:
    """The ``jax.jit`` function of :func:`make_eval_step`, one per structure."""
    forward = functools.partial(_forward_logprobs, graphdef)

    def evaluate(
        params: Params, batch: TrainBatch, hparams: LossParams, rest: nnx.State
    ) -> dict[str, jax.Array]:
        tokens = (batch.input_ids, batch.attention_mask, batch.target_mask)
        window = batch.target_window
        micro = tuple(_to_microbatches(x, num_microbatches) for x in tokens)
        per_mb = jax.lax.map(lambda mb: forward(params, rest, *mb, window), micro)
        policy = jax.tree.map(_from_microbatches, per_mb)
        per_unit, metrics = loss_fn(policy, batch.reference, batch.loss, hparams)
        return {"loss": weighted_mean(per_unit, batch.loss.weight), **metrics}

    jit_kwargs: dict[str, Any] = {}
    if mesh is not None:
        repl = parallel.replicated_sharding(mesh)
        jit_kwargs["in_shardings"] = (repl, parallel.batch_sharding(mesh), repl, repl)
        jit_kwargs["out_shardings"] = repl
    return jax.jit(evaluate, **jit_kwargs)


@functools.partial(jax.jit, static_argnums=(0, 6))
def _jitted_logprobs(
    graphdef: nnx.GraphDef,
    params: Params,
    rest: nnx.State,
    input_ids: jax.Array,
    attention_mask: jax.Array,
    target_mask: jax.Array,
    window: int | None,
) -> SeqLogProbs:
    return _forward_logprobs(graphdef, params, rest, input_ids, attention_mask, target_mask, window)


def compute_logprobs(
    model: nnx.Module,
    params: Params | None,
    input_ids: Any,
    target_mask: Any,
    attention_mask: Any = None,
    *,
    batch_size: int = 32,
    mesh: Mesh | None = None,
    progress: bool = False,
    target_window: int | str | None = "auto",
) -> SeqLogProbs:
    """Sequence log-probs of a whole dataset under fixed parameters (e.g. the round's reference).

    Run once per round with the frozen round-start parameters; store the result in each
    :class:`TrainBatch` (``reference=``). Chunks of ``batch_size`` rows go through one compiled
    forward pass (the last chunk is padded by repeating rows, then trimmed), placed on ``mesh``
    if given.

    Args:
      model: NNX model (graph structure; its own parameters are used when ``params`` is None).
      params: parameters to evaluate (a pure dict as in ``TrainState.params``) or ``None``.
      input_ids: int ``[N, T]``; target_mask / attention_mask: 0/1 ``[N, T]``.
      batch_size: rows per forward pass (a multiple of the mesh size when sharded).
      mesh: optional data-parallel mesh.
      progress: show a tqdm progress bar.
      target_window: as in :meth:`TrainBatch.create` (``"auto"``: from the whole dataset).

    Returns:
      ``SeqLogProbs`` of numpy float32 ``[N]`` arrays.
    """
    graphdef, own_params, rest = split_params(model)
    params = own_params if params is None else params
    ids = np.asarray(input_ids, np.int32)
    tmask = np.asarray(target_mask, np.int32)
    amask = np.ones_like(ids) if attention_mask is None else np.asarray(attention_mask, np.int32)
    if ids.ndim != 2 or tmask.shape != ids.shape or amask.shape != ids.shape:
        raise ValueError("input_ids, target_mask and attention_mask must all be [N, T]")
    window = _checked_window(target_window, tmask)
    n = ids.shape[0]
    if n == 0:
        raise ValueError("no sequences to score")
    if mesh is not None and batch_size % mesh.shape[parallel.DATA_AXIS]:
        raise ValueError(f"batch_size {batch_size} must divide over the mesh's data axis")
    batch_size = min(batch_size, n) if mesh is None else batch_size
    if mesh is not None:
        params = parallel.replicate(params, mesh)
        rest = parallel.replicate(rest, mesh)
    starts = range(0, n, batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="log-probs", unit="batch")
    sums, counts = [], []
    for start in starts:
        rows = np.arange(start, start + batch_size) % n if start + batch_size > n else None
        sl = slice(start, start + batch_size)
        chunk = tuple(a[rows] if rows is not None else a[sl] for a in (ids, amask, tmask))
        if mesh is not None:
            chunk = parallel.shard_batch(chunk, mesh)
        out = _jitted_logprobs(graphdef, params, rest, *chunk, window)
        keep = min(batch_size, n - start)
        sums.append(np.asarray(out.sum_logp)[:keep])
        counts.append(np.asarray(out.num_tokens)[:keep])
    return SeqLogProbs(sum_logp=np.concatenate(sums), num_tokens=np.concatenate(counts))
