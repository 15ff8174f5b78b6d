"""Training LaMBO-2's model: absorbing-mask corruption, three losses, one Adam step per leaf.

cortex v0.0.4 semantics (paper App. "LaMBO-2 Model and Training Details"; departures in
``docs/design/lambo2_port.md``).

* **Corruption** (cortex ``MaskCorruptionProcess``): cosine schedule with ``T = 1000`` steps, mask
  rate ``rho(t) = sqrt(abar_t)``; one ``t ~ U{1..T}`` per minibatch (per leaf update); each alphabet
  position is replaced by ``<mask>`` with probability ``rho``.
* **Losses**: MLM cross-entropy over masked positions only; classifier cross-entropy with
  label smoothing ``eps = rho``; regressor KL between the moment-matched smoothed label
  ``N((1-rho) y, rho + (1-rho) s0^2 + rho (1-rho) y^2)`` and the predicted Gaussian.
* **Update scheme** (cortex's manual optimisation): one training step visits the ``2 E_ens + 1``
  leaves in the fixed order classifier members, regressor members, MLM; each leaf draws its own
  minibatch, back-propagates its own loss through the encoder and its head, and takes one Adam step.
  Adam states are kept **per group**: the encoder's state advances ``2 E_ens + 1`` times per
  training step, each member's (and the generative head's) once, and idle heads' parameters and
  moments are untouched (a zero-gradient update would decay their moments and keep moving them).
  The updates are **sequential**: leaf ``k`` sees the encoder after leaf ``k - 1``'s step
  (:func:`train_step`, the default).
* **Fused step** (``TrainConfig.fused``, off by default; not cortex): the same ``2 E_ens + 1``
  minibatches and corruption draws, but every leaf's loss is taken at the parameters of the start
  of the step, in one batched encoder pass and one vmapped pass of the stacked heads, and
  ``sum_k L_k`` is minimised by **one** Adam step of every group (simultaneous updates:
  :func:`fused_train_step`; the encoder's Adam state advances once per training step).
* **Schedule** (transformers' cosine-with-warm-up, stepped per epoch): the learning rate is set once
  per epoch, ``lr * lambda(j + 1)`` for epoch ``j`` with a 2-epoch linear warm-up and cosine decay
  to 0 at the last epoch.
* **Data** (poli-baselines' tables, cortex's sampler): classifier on all rows (groups = label x
  recency partition), regressor on feasible rows (groups = recency partition), MLM on unique
  feasible rows; a fixed-seed ``train_fraction`` subset of each table; round-robin rebalancing
  sampler; an epoch has ``ceil(#MLM rows / batch)`` steps.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from llome_jax.lambo2.model import (
    ModelConfig,
    Params,
    encoder_module,
    gaussian_from_natural,
    gen_apply,
    member_apply,
)

__all__ = [
    "OptState",
    "StepBatch",
    "TrainConfig",
    "TrainingData",
    "balanced_stream",
    "classification_loss",
    "corrupt",
    "epoch_batches",
    "epoch_learning_rates",
    "fit",
    "fused_train_step",
    "init_opt_state",
    "mask_rates",
    "mlm_loss",
    "prepare_training_data",
    "recency_partition",
    "regression_loss",
    "train_step",
]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Static training settings (defaults = the port's recommended defaults, docs/design/lambo2_port.md).

    Attributes:
      epochs: ``E`` epochs per fit (paper 100; bbo-bench 16); the same for the initial fit and
        every retrain.
      batch_size: minibatch size of every leaf (128).
      learning_rate, b1, b2, eps: Adam (5e-3, 0.9, 0.99, 1e-8); no weight decay, no clipping.
      warmup_epochs: linear warm-up units of the per-epoch cosine schedule (2).
      train_fraction: fraction of each task's table used for training (cortex keeps a fixed-seed
        80 %); ``None`` or 1.0 uses everything.
      split_seed: seed of that split (cortex: 0xDEADBEEF).
      num_timesteps: corruption steps ``T`` (1000).
      nominal_label_var: ``s0^2`` of the regressor's moment matching (0.01).
      fused: ``False`` (default, cortex): :func:`train_step`, ``2 E_ens + 1`` sequential leaf
        updates of the shared encoder. ``True``: :func:`fused_train_step`, one Adam step on the
        sum of the leaves' losses at the step's starting parameters (simultaneous updates; a
        different algorithm, see ``docs/design/lambo2_port.md`` decision 15).
    """

    epochs: int = 100
    batch_size: int = 128
    learning_rate: float = 5e-3
    b1: float = 0.9
    b2: float = 0.99
    eps: float = 1e-8
    warmup_epochs: int = 2
    train_fraction: float | None = 0.8
    split_seed: int = 0xDEADBEEF
    num_timesteps: int = 1000
    nominal_label_var: float = 0.01
    fused: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.fused, bool):
            raise ValueError(f"TrainConfig.fused must be a bool, got {self.fused!r}.")
        for name in ("epochs", "batch_size", "num_timesteps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name} must be a positive int, got {value!r}.")
        if self.train_fraction is not None and not 0.0 < self.train_fraction <= 1.0:
            raise ValueError(f"train_fraction must lie in (0, 1], got {self.train_fraction!r}.")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate!r}.")


# ---------------------------------------------------------------------------------------------
# Schedules
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def mask_rates(num_timesteps: int = 1000) -> np.ndarray:
    """``rho(t) = sqrt(abar_t)`` for ``t = 0..T`` (float64 ``[T + 1]``; cortex's cosine schedule).

    ``abar(u) = cos^2((u + 0.008) / 1.008 * pi / 2)``, ``beta_i = min(1 - abar((i+1)/T) / abar(i/T),
    0.999)``, ``abar_t = prod_{i<t} (1 - beta_i)``.
    """
    u = np.arange(num_timesteps + 1, dtype=np.float64) / num_timesteps
    f = np.cos((u + 0.008) / 1.008 * np.pi / 2) ** 2
    betas = np.minimum(1.0 - f[1:] / f[:-1], 0.999)
    abar = np.concatenate([[1.0], np.cumprod(1.0 - betas)])
    rates = np.sqrt(abar)
    rates.setflags(write=False)
    return rates


def epoch_learning_rates(config: TrainConfig) -> np.ndarray:
    """Learning rate of each epoch ``j``: ``lr * lambda(j + 1)`` (float64 ``[E]``).

    ``lambda(s) = s / w`` for ``s < w`` (``w`` warm-up epochs), else
    ``max(0, (1 + cos(pi (s - w) / max(1, E - w))) / 2)`` (transformers' cosine-with-warm-up,
    advanced once at the start of every epoch). ``E = 4`` gives ``[2.5e-3, 5e-3, 2.5e-3, 0]``.
    """
    e, w = config.epochs, config.warmup_epochs
    s = np.arange(1, e + 1, dtype=np.float64)
    progress = (s - w) / max(1, e - w)
    decay = np.maximum(0.0, 0.5 * (1.0 + np.cos(np.pi * progress)))
    factor = np.where(s < w, s / max(w, 1), decay)
    return config.learning_rate * factor


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
# Corruption and losses
# ---------------------------------------------------------------------------------------------
def corrupt(
    key: jax.Array, tokens: jax.Array, rho: jax.Array, mask_id: int, num_states: int
) -> tuple[jax.Array, jax.Array]:
    """Replace each alphabet token by ``mask_id`` with probability ``rho``.

    Returns ``(corrupted tokens, masked bool)`` with the shape of ``tokens``; utility tokens
    (padding) are never masked.
    """
    masked = (jax.random.uniform(key, tokens.shape) < rho) & (tokens < num_states)
    return jnp.where(masked, mask_id, tokens), masked


def mlm_loss(
    logits: jax.Array, targets: jax.Array, masked: jax.Array, valid: jax.Array | None = None
) -> jax.Array:
    """Mean cross-entropy over masked positions of valid rows (0 if none is masked).

    Args:
      logits: ``[B, N, V]``; targets: int ``[B, N]``; masked: bool ``[B, N]``; valid: bool ``[B]``.
    """
    weight = masked.astype(jnp.float32)
    if valid is not None:
        weight = weight * valid[:, None]
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1)[..., 0]
    return (nll * weight).sum() / jnp.maximum(weight.sum(), 1.0)


def classification_loss(
    logits: jax.Array, labels: jax.Array, rho: jax.Array, valid: jax.Array | None = None
) -> jax.Array:
    """Smoothed 2-class cross-entropy, target ``(1 - rho) onehot + rho / 2``; mean over valid rows."""
    target = (1.0 - rho) * jax.nn.one_hot(labels, 2) + rho / 2.0
    ce = -(target * jax.nn.log_softmax(logits)).sum(-1)
    weight = jnp.ones_like(ce) if valid is None else valid.astype(ce.dtype)
    return (ce * weight).sum() / jnp.maximum(weight.sum(), 1.0)


def regression_loss(
    out: jax.Array,
    targets: jax.Array,
    rho: jax.Array,
    nominal_label_var: float = 0.01,
    valid: jax.Array | None = None,
) -> jax.Array:
    """Moment-matched KL ``KL(N(m*, v*) || N(loc, v))``, mean over valid rows (cortex).

    ``m* = (1 - rho) y``, ``v* = rho + (1 - rho) s0^2 + rho (1 - rho) y^2`` for standardised
    targets ``y``; ``(loc, v)`` from the natural parameters without the 1e-4 floor.
    """
    loc, var = gaussian_from_natural(out, floor=False)
    m_star = (1.0 - rho) * targets
    v_star = rho + (1.0 - rho) * nominal_label_var + rho * (1.0 - rho) * jnp.square(targets)
    kl = 0.5 * (jnp.log(var / v_star) + (v_star + jnp.square(m_star - loc)) / var - 1.0)
    weight = jnp.ones_like(kl) if valid is None else valid.astype(kl.dtype)
    return (kl * weight).sum() / jnp.maximum(weight.sum(), 1.0)


# ---------------------------------------------------------------------------------------------
# Optimiser state per group and the per-leaf training step
# ---------------------------------------------------------------------------------------------
@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["encoder", "gen", "reg", "cls"],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class OptState:
    """Adam states per parameter group; ``reg``/``cls`` carry the ensemble axis (count ``[E]``)."""

    encoder: Any
    gen: Any
    reg: Any
    cls: Any


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


def _adam(config: TrainConfig) -> optax.GradientTransformation:
    return optax.scale_by_adam(b1=config.b1, b2=config.b2, eps=config.eps)


def init_opt_state(params: Params, config: TrainConfig) -> OptState:
    """Fresh Adam states: one for the encoder, one for the MLM head, one per ensemble member."""
    adam = _adam(config)
    return OptState(
        encoder=adam.init(params["encoder"]),
        gen=adam.init(params["gen"]),
        reg=jax.vmap(adam.init)(params["reg"]),
        cls=jax.vmap(adam.init)(params["cls"]),
    )


def _adam_step(adam, params, state, grads, lr):
    updates, state = adam.update(grads, state, params)
    return jax.tree.map(lambda p, u: p - lr * u, params, updates), state


def _take(tree, i):
    return jax.tree.map(lambda a: a[i], tree)


def _put(tree, i, value):
    return jax.tree.map(lambda a, v: a.at[i].set(v), tree, value)


def _member_sweep(model_config, train_config, loss_fn, enc_p, enc_s, ens_p, ens_s, xs, lr, rates):
    """One Adam step per listed member, in order (shared encoder + member ``e``).

    ``xs = (members, keys, tokens, targets, valid)`` with ``members`` a sequence of Python ints and
    the other entries stacked in the same order. The loop is unrolled on purpose: XLA:CPU runs
    convolutions inside a ``while`` loop (``lax.scan``) far slower than straight-line code
    (``docs/design/lambo2_port.md`` decision 2), and the member count is small and static.
    """
    adam = _adam(train_config)
    members, keys, all_tokens, all_targets, all_valid = xs
    values = []
    for i, e in enumerate(members):
        key, tokens, targets, valid = keys[i], all_tokens[i], all_targets[i], all_valid[i]
        member_p, member_s = _take(ens_p, e), _take(ens_s, e)
        t_key, m_key = jax.random.split(key)
        rho = rates[jax.random.randint(t_key, (), 1, train_config.num_timesteps + 1)]
        noisy, _ = corrupt(m_key, tokens, rho, model_config.mask_id, model_config.num_states)
        mask = tokens != model_config.pad_id

        def loss(enc_p, member_p, noisy=noisy, mask=mask, targets=targets, rho=rho, valid=valid):
            h = encoder_module(model_config, enc_p)(noisy)
            return loss_fn(member_apply(model_config, member_p, h, mask), targets, rho, valid)

        value, (g_enc, g_mem) = jax.value_and_grad(loss, argnums=(0, 1))(enc_p, member_p)
        enc_p, enc_s = _adam_step(adam, enc_p, enc_s, g_enc, lr)
        member_p, member_s = _adam_step(adam, member_p, member_s, g_mem, lr)
        ens_p, ens_s = _put(ens_p, e, member_p), _put(ens_s, e, member_s)
        values.append(value)
    return (enc_p, enc_s, ens_p, ens_s), jnp.stack(values)


@functools.partial(jax.jit, static_argnames=("model_config", "train_config"), donate_argnums=(0, 1))
def train_step(
    params: Params,
    opt_state: OptState,
    batch: StepBatch,
    lr: jax.Array,
    key: jax.Array,
    *,
    model_config: ModelConfig,
    train_config: TrainConfig,
) -> tuple[Params, OptState, jax.Array]:
    """One training step = ``2 E + 1`` sequential leaf updates (classifiers, regressors, MLM).

    Returns ``(params, opt_state, losses f32 [2 E + 1])`` in leaf order.
    """
    mc, tc = model_config, train_config
    rates = jnp.asarray(mask_rates(tc.num_timesteps), jnp.float32)
    ens = mc.ensemble_size
    keys = jax.random.split(key, 2 * ens + 1)
    members = tuple(range(ens))
    enc_p, enc_s = params["encoder"], opt_state.encoder

    def cls_loss(out, labels, rho, valid):
        return classification_loss(out, labels, rho, valid)

    def reg_loss(out, targets, rho, valid):
        return regression_loss(out, targets, rho, tc.nominal_label_var, valid)

    (enc_p, enc_s, cls_p, cls_s), cls_losses = _member_sweep(
        mc,
        tc,
        cls_loss,
        enc_p,
        enc_s,
        params["cls"],
        opt_state.cls,
        (members, keys[:ens], batch.cls_tokens, batch.cls_labels, batch.cls_valid),
        lr,
        rates,
    )
    (enc_p, enc_s, reg_p, reg_s), reg_losses = _member_sweep(
        mc,
        tc,
        reg_loss,
        enc_p,
        enc_s,
        params["reg"],
        opt_state.reg,
        (members, keys[ens : 2 * ens], batch.reg_tokens, batch.reg_targets, batch.reg_valid),
        lr,
        rates,
    )

    # MLM leaf
    adam = _adam(tc)
    t_key, m_key = jax.random.split(keys[-1])
    rho = rates[jax.random.randint(t_key, (), 1, tc.num_timesteps + 1)]
    noisy, masked = corrupt(m_key, batch.mlm_tokens, rho, mc.mask_id, mc.num_states)

    def mlm(enc_p, gen_p):
        h = encoder_module(mc, enc_p)(noisy)
        return mlm_loss(gen_apply(mc, gen_p, h), batch.mlm_tokens, masked, batch.mlm_valid)

    mlm_value, (g_enc, g_gen) = jax.value_and_grad(mlm, argnums=(0, 1))(enc_p, params["gen"])
    enc_p, enc_s = _adam_step(adam, enc_p, enc_s, g_enc, lr)
    gen_p, gen_s = _adam_step(adam, params["gen"], opt_state.gen, g_gen, lr)
    params = {"encoder": enc_p, "gen": gen_p, "reg": reg_p, "cls": cls_p}
    losses = jnp.concatenate([cls_losses, reg_losses, mlm_value[None]])
    return params, OptState(enc_s, gen_s, reg_s, cls_s), losses


def _stack_leaves(batch: StepBatch) -> jax.Array:
    """The ``2 E + 1`` minibatches' tokens in leaf order: int32 ``[2 E + 1, B, N]``."""
    return jnp.concatenate([batch.cls_tokens, batch.reg_tokens, batch.mlm_tokens[None]])


def _leaf_corruption(
    keys: jax.Array, tokens: jax.Array, rates: jax.Array, mc: ModelConfig, tc: TrainConfig
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Every leaf's corruption from its own key, drawn as :func:`train_step` draws it.

    Leaf ``k``: ``(t_key, m_key) = split(keys[k])``, ``rho_k = rates[randint(t_key, 1, T + 1)]``,
    ``corrupt(m_key, tokens[k], rho_k)`` (vmapped over ``k``; the same bits as the per-leaf calls).

    Returns ``(noisy int32 [K, B, N], masked bool [K, B, N], rho f32 [K])``.
    """

    def one(key: jax.Array, toks: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        t_key, m_key = jax.random.split(key)
        rho = rates[jax.random.randint(t_key, (), 1, tc.num_timesteps + 1)]
        noisy, masked = corrupt(m_key, toks, rho, mc.mask_id, mc.num_states)
        return noisy, masked, rho

    return jax.vmap(one)(keys, tokens)


def _leaves_apply(
    mc: ModelConfig,
    enc_p: Params,
    gen_p: Params,
    heads_p: Params,
    noisy: jax.Array,
    mask: jax.Array,
    unroll: bool,
) -> tuple[jax.Array, jax.Array]:
    """Every leaf's output at the same parameters: member ``j`` on leaf ``j``'s minibatch.

    ``noisy`` int32 / ``mask`` bool ``[K, B, N]`` (``K = J + 1``, the last leaf the MLM's),
    ``heads_p`` the ``J = 2 E`` stacked members. Returns ``(out f32 [J, B, 2], MLM logits f32
    [B, N, V])``. ``unroll=False``: one encoder pass on the ``K B`` rows and one vmapped member
    (batched, i.e. grouped, convolutions: one kernel per layer on an accelerator). ``True``: one
    encoder pass per leaf and the members one after another, independent subprograms at the same
    parameters: XLA:CPU runs batch-128 convolutions faster per row than batch-2,176 ones and
    grouped convolutions slowly (``docs/design/lambo2_port.md`` decisions 2 and 15). Same values
    to float32 rounding either way.
    """
    encoder = encoder_module(mc, enc_p)
    k, b, n = noisy.shape
    if not unroll:
        h = encoder(noisy.reshape(k * b, n)).reshape(k, b, n, -1)
        out = jax.vmap(lambda p, x, m: member_apply(mc, p, x, m))(heads_p, h[:-1], mask[:-1])
        return out, gen_apply(mc, gen_p, h[-1])
    out = [member_apply(mc, _take(heads_p, j), encoder(noisy[j]), mask[j]) for j in range(k - 1)]
    return jnp.stack(out), gen_apply(mc, gen_p, encoder(noisy[-1]))


@functools.partial(
    jax.jit,
    static_argnames=("model_config", "train_config", "unroll"),
    donate_argnums=(0, 1),
)
def fused_train_step(
    params: Params,
    opt_state: OptState,
    batch: StepBatch,
    lr: jax.Array,
    key: jax.Array,
    *,
    model_config: ModelConfig,
    train_config: TrainConfig,
    unroll: bool | None = None,
) -> tuple[Params, OptState, jax.Array]:
    """One training step as one update of the whole ensemble (``TrainConfig.fused``).

    With ``K = 2 E + 1`` leaves (classifier members, regressor members, MLM) and ``theta`` the
    parameters at the start of the step::

        noisy_k, rho_k = corruption of leaf k from keys[k]       # the keys of train_step
        h_k    = encoder(theta_enc)(noisy_k)                     # every k     [K, B, N, d_o]
        out_j  = member_j(h_j)  for j < 2 E                      # stacked     [2 E, B, 2]
        L_k    = the leaf losses of train_step on (out_k | MLM logits of h_{K-1})
        g      = grad_theta sum_k L_k                            # g_enc = sum_k dL_k/dtheta_enc
        theta  = theta - lr * Adam(g)                            # every group once

    Each head's gradient is its own leaf's (a head enters one loss only); the encoder's is the
    sum over leaves, taken at ``theta`` rather than after the previous leaves' steps. So this is
    **not** :func:`train_step`'s algorithm: the encoder takes one Adam step per training step
    instead of ``K`` sequential ones (its Adam count advances by 1). At ``lr = 0`` the losses
    and the heads' Adam states equal :func:`train_step`'s to float32 rounding (tested).

    Args:
      unroll: how the leaves' forward passes are laid out (:func:`_leaves_apply`): ``None``
        (default) per leaf on the CPU backend, one batched pass elsewhere.

    Returns ``(params, opt_state, losses f32 [K])`` in leaf order (at the starting parameters).
    """
    mc, tc = model_config, train_config
    ens = mc.ensemble_size
    unroll = jax.default_backend() == "cpu" if unroll is None else unroll
    rates = jnp.asarray(mask_rates(tc.num_timesteps), jnp.float32)
    keys = jax.random.split(key, 2 * ens + 1)
    tokens = _stack_leaves(batch)  # [K, B, N]
    noisy, masked, rho = _leaf_corruption(keys, tokens, rates, mc, tc)
    mask = tokens != mc.pad_id

    def total(enc_p, gen_p, heads_p):
        out, logits = _leaves_apply(mc, enc_p, gen_p, heads_p, noisy, mask, unroll)
        cls = jax.vmap(classification_loss)(out[:ens], batch.cls_labels, rho[:ens], batch.cls_valid)
        reg = jax.vmap(functools.partial(regression_loss, nominal_label_var=tc.nominal_label_var))(
            out[ens:], batch.reg_targets, rho[ens:-1], valid=batch.reg_valid
        )
        mlm = mlm_loss(logits, batch.mlm_tokens, masked[-1], batch.mlm_valid)
        losses = jnp.concatenate([cls, reg, mlm[None]])
        return losses.sum(), losses

    heads = jax.tree.map(lambda c, r: jnp.concatenate([c, r]), params["cls"], params["reg"])
    (_, losses), (g_enc, g_gen, g_heads) = jax.value_and_grad(
        total, argnums=(0, 1, 2), has_aux=True
    )(params["encoder"], params["gen"], heads)
    adam = _adam(tc)

    def step(p, s, g):
        return _adam_step(adam, p, s, g, lr)

    member_step = jax.vmap(step)
    enc_p, enc_s = step(params["encoder"], opt_state.encoder, g_enc)
    gen_p, gen_s = step(params["gen"], opt_state.gen, g_gen)
    cls_p, cls_s = member_step(
        params["cls"], opt_state.cls, jax.tree.map(lambda g: g[:ens], g_heads)
    )
    reg_p, reg_s = member_step(
        params["reg"], opt_state.reg, jax.tree.map(lambda g: g[ens:], g_heads)
    )
    params = {"encoder": enc_p, "gen": gen_p, "reg": reg_p, "cls": cls_p}
    return params, OptState(enc_s, gen_s, reg_s, cls_s), losses


# ---------------------------------------------------------------------------------------------
# Data per task
# ---------------------------------------------------------------------------------------------
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


def step_config_of(config: TrainConfig) -> TrainConfig:
    """``config`` with the fields :func:`train_step` does not read reset (one compilation)."""
    return TrainConfig(
        b1=config.b1,
        b2=config.b2,
        eps=config.eps,
        num_timesteps=config.num_timesteps,
        nominal_label_var=config.nominal_label_var,
    )


def fit(
    key: jax.Array,
    params: Params,
    data: TrainingData,
    model_config: ModelConfig,
    train_config: TrainConfig,
    *,
    progress: Callable[[int, np.ndarray], None] | None = None,
) -> tuple[Params, np.ndarray]:
    """Train ``params`` for ``E`` epochs with a fresh optimiser (cortex's per-leaf updates;
    ``train_config.fused`` runs :func:`fused_train_step` instead, with the same keys and batches).

    Args:
      key: PRNG key (samplers, corruption).
      params: starting parameters (``θ_init`` when retraining; not modified).
      data: :func:`prepare_training_data` output.
      progress: optional ``callback(epoch, mean leaf losses [2 E + 1])`` after each epoch.

    Returns:
      ``(params, losses f32 [E, 2 E_ens + 1])``: per-epoch mean loss of every leaf.
    """
    params = jax.tree.map(jnp.array, params)  # a copy: the step donates its inputs
    step_config = step_config_of(train_config)
    step_fn = fused_train_step if train_config.fused else train_step
    opt_state = init_opt_state(params, train_config)
    rates = epoch_learning_rates(train_config)
    sampler_key, step_key = jax.random.split(key)
    seed = int(jax.random.randint(sampler_key, (), 0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    history = []
    for epoch in range(train_config.epochs):
        lr = jnp.float32(rates[epoch])
        epoch_key = jax.random.fold_in(step_key, epoch)
        losses = []
        for s, batch in enumerate(epoch_batches(rng, data, model_config, train_config.batch_size)):
            params, opt_state, value = step_fn(
                params,
                opt_state,
                batch,
                lr,
                jax.random.fold_in(epoch_key, s),
                model_config=model_config,
                train_config=step_config,
            )
            losses.append(value)
        history.append(np.asarray(jnp.stack(losses).mean(0)))
        if progress is not None:
            progress(epoch, history[-1])
    return params, np.stack(history)
