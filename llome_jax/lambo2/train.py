"""Training LaMBO-2's model: one Adam step per leaf (or one fused step), per-epoch schedule, fit.

cortex v0.0.4 semantics (paper App. "LaMBO-2 Model and Training Details"; departures in
``docs/design/lambo2_port.md``). What each leaf minimises (absorbing-mask corruption, the
three losses) is ``llome_jax.lambo2.losses``; the tables and minibatches
``llome_jax.lambo2.data``.

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
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from llome_jax.lambo2.data import StepBatch, TrainingData, epoch_batches
from llome_jax.lambo2.losses import (
    classification_loss,
    corrupt,
    mask_rates,
    mlm_loss,
    regression_loss,
)
from llome_jax.lambo2.model import (
    ModelConfig,
    Params,
    encoder_module,
    gen_apply,
    member_apply,
)
from llome_jax.lambo2.train_config import TrainConfig  # re-exported (its home since the split)

__all__ = [
    "OptState",
    "TrainConfig",
    "epoch_learning_rates",
    "fit",
    "fused_train_step",
    "init_opt_state",
    "step_config_of",
    "train_step",
]


# ---------------------------------------------------------------------------------------------
# Schedule
# ---------------------------------------------------------------------------------------------
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
# The fit
# ---------------------------------------------------------------------------------------------
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
      data: :func:`~llome_jax.lambo2.data.prepare_training_data` output.
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
