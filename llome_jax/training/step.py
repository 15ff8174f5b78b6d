"""The jitted, donating, data-parallel train step shared by every loss.

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
    params, opt_state = optimizer.update(...)   # llome_jax.training.optimizer

Reference log-probs are *data*: computed once per round with the frozen round-start parameters
(``llome_jax.training.dataset_logprobs.compute_logprobs``) and stored in :class:`TrainBatch` (the
authors' code recomputed them every step: ``precompute_ref_log_probs=False``).

Gradient accumulation is **exact**: MargE/REINFORCE normalise importance weights over the whole
batch and DPO pairs rows, so the loss does not split into independent micro-batch losses. With
``num_microbatches = M > 1`` the step (1) runs the forward pass over the M micro-batches to get
``policy`` for the full batch, (2) differentiates the loss with respect to ``policy.sum_logp``
(cheap, ``[B]``), and (3) back-propagates these per-sequence cotangents through each micro-batch
with ``jax.vjp``. Cost: one extra forward pass (~ +30 %) in exchange for a gradient equal to the
full-batch one. Losses linear in the policy log-probs (SFT) skip step (1)
(``loss_registry.LINEAR_IN_POLICY``).
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

from llome_jax.host import parallel
from llome_jax.lm.logprobs import (
    max_target_count,
    sequence_logprobs,
    target_positions,
    window_logprobs,
)
from llome_jax.lm.logprobs import target_window as auto_target_window
from llome_jax.training.loss_inputs import LossBatch, LossParams
from llome_jax.training.loss_registry import LINEAR_IN_POLICY
from llome_jax.training.losses import LossFn, weighted_mean
from llome_jax.training.optimizer import (
    OptimizerConfig,
    make_optimizer,
    optimizer_with_schedule,
    schedule_from_values,
    without_schedule,
)
from llome_jax.types import SeqLogProbs

__all__ = [
    "TrainBatch",
    "TrainState",
    "TrainStep",
    "checked_target_window",
    "clip_by_global_norm",
    "forward_logprobs",
    "init_train_state",
    "make_eval_step",
    "make_train_step",
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
        window = checked_target_window(target_window, tmask)
        return cls(
            input_ids=jnp.asarray(ids, jnp.int32),
            attention_mask=jnp.asarray(amask, jnp.int32),
            target_mask=jnp.asarray(tmask, jnp.int32),
            reference=reference,
            loss=loss,
            target_window=window,
        )


def checked_target_window(target_window: int | str | None, target_mask: np.ndarray) -> int | None:
    """Resolve ``"auto"`` and check that an explicit window holds every row's targets
    (``TrainBatch.create``, ``dataset_logprobs.compute_logprobs``).

    Raises:
      ValueError: a window that is not ``"auto"``, an int or ``None``, or outside
        ``[most targets of a row, T - 1]``.
    """
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
# Model plumbing
# --------------------------------------------------------------------------------------------


def split_params(model: nnx.Module) -> tuple[nnx.GraphDef, Params, nnx.State]:
    """``(graphdef, params, rest)``: params as a pure nested dict of arrays, rest = non-Param state."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    return graphdef, nnx.to_pure_dict(params), rest


def position_ids_from_mask(attention_mask: jax.Array) -> jax.Array:
    """``cumsum(mask) - 1`` clipped at 0: correct positions for left- and right-padded rows."""
    return jnp.maximum(jnp.cumsum(attention_mask, axis=-1) - 1, 0).astype(jnp.int32)


def forward_logprobs(
    graphdef: nnx.GraphDef,
    params: Params,
    rest: nnx.State,
    input_ids: jax.Array,
    attention_mask: jax.Array,
    target_mask: jax.Array,
    window: int | None = None,
) -> SeqLogProbs:
    """Sequence log-probs ``[B]`` of the model ``merge(graphdef, params, rest)`` on int32
    ``[B, T]`` tokens and 0/1 masks: every position's logits (``window=None``), or the output head
    at the ``W = window`` target positions only (``llome_jax.lm.logprobs.target_positions``).
    The forward pass of the train and eval steps and of ``dataset_logprobs.compute_logprobs``."""
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
    """Build the jitted train step for one loss (any entry of ``loss_registry.LOSSES``).

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
        optimizer = without_schedule(optimizer)
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
    forward = functools.partial(forward_logprobs, graphdef)

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
            tx = optimizer_with_schedule(optimizer, schedule_from_values(optimizer, *schedule))
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
    forward = functools.partial(forward_logprobs, graphdef)

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
