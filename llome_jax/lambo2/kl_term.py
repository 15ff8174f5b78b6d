"""The KL term of LaMBO-2's guided design (``DesignConfig.kl_weight = lambda > 0``; cortex).

The guidance loss adds ``lambda KL`` with ``KL = mean_{(i, p in C)} KL(softmax(logits(h)) || q0)``
(:func:`mean_kl_to_reference`), where ``q0`` is the generative head's viable-token distribution
at the unguided features ``h0`` (:func:`reference_distribution`); sequences are then accepted on
``(1 - lambda) a(x) + lambda PLL(x)`` with the MLM pseudo-log-likelihood
(:func:`pseudo_log_likelihood`). ``llome_jax.lambo2.design`` traces none of this when
``lambda = 0``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from llome_jax.lambo2.model import ModelConfig, Params, encoder_module, gen_apply

__all__ = [
    "mean_kl_to_reference",
    "pseudo_log_likelihood",
    "reference_distribution",
    "viable_logits",
]


def viable_logits(config: ModelConfig, logits: jax.Array) -> jax.Array:
    """Logits with the non-viable (utility) tokens set to ``-inf``."""
    return jnp.where(jnp.arange(config.vocab_size) < config.num_states, logits, -jnp.inf)


def reference_distribution(config: ModelConfig, params: Params, h0: jax.Array) -> jax.Array:
    """``q0 = normalise(max(softmax(logits(h0) | viable), 1e-6))``: f32 ``[n, N, V]`` (cortex).

    The generative head's distribution at the unguided features ``h0`` with non-viable tokens
    at ``-inf``, clamped to ``>= 1e-6`` (so utility tokens get ``1e-6``) and renormalised, as
    cortex's ``Categorical(probs=softmax(...).clamp_min(1e-6))``. ``params`` is the full tree.
    """
    q = jax.nn.softmax(viable_logits(config, gen_apply(config, params["gen"], h0)), axis=-1)
    q = jnp.maximum(q, 1e-6)
    return q / q.sum(-1, keepdims=True)


def mean_kl_to_reference(
    config: ModelConfig, params: Params, h: jax.Array, q0: jax.Array, chosen: jax.Array
) -> jax.Array:
    """``KL = mean_{(i, p): p in C_i} sum_t p_t (log p_t - log q0_t)``, ``p = softmax(logits(h))``.

    As in cortex, the guided logits are *not* masked for non-viable tokens, so at ``h = h0`` the
    value is not exactly 0 (mass on utility tokens and the 1e-6 clamp). The mean runs over every
    masked position of the whole population (cortex's ``masked_select(...).mean()``); 0 when ``C``
    is empty everywhere (cortex would give NaN). ``h`` ``[n, N, d_o]``, ``q0`` ``[n, N, V]``,
    ``chosen`` bool ``[n, N]`` -> f32 scalar.
    """
    logp = jax.nn.log_softmax(gen_apply(config, params["gen"], h), axis=-1)
    kl = (jnp.exp(logp) * (logp - jnp.log(q0))).sum(-1)
    weight = chosen.astype(kl.dtype)
    return (kl * weight).sum() / jnp.maximum(weight.sum(), 1.0)


def pseudo_log_likelihood(config: ModelConfig, params: Params, tokens: jax.Array) -> jax.Array:
    """MLM pseudo-log-likelihood ``PLL(x) = mean_{p real} log softmax(logits(x^(p)))_{p, x_p}``.

    ``x^(p)`` is ``x`` with position ``p`` replaced by ``<mask>``; the log-softmax is over the full
    vocabulary (cortex ``mlm_pseudo_log_likelihood``). Real positions are the alphabet
    tokens (``< num_states``; pads and other utility tokens are excluded). Cost: one encoder pass
    over ``N n`` sequences (all ``N`` single-position maskings at once, so ``N`` times the
    activation memory of a plain forward); the generative head, which is per-position, only runs
    at the masked position. ``tokens`` int ``[n, N]`` (already padded) -> f32 ``[n]``.
    """
    tokens = jnp.asarray(tokens, jnp.int32)
    n, length = tokens.shape
    encoder = encoder_module(config, params["encoder"])
    diagonal = jnp.eye(length, dtype=bool)  # [p, N]
    occluded = jnp.where(diagonal[:, None, :], config.mask_id, tokens[None])  # [p, n, N]
    h = encoder(occluded.reshape(length * n, length)).reshape(length, n, length, -1)
    h_at = h[jnp.arange(length), :, jnp.arange(length)]  # [p, n, d_o]: features at p
    logp = jax.nn.log_softmax(gen_apply(config, params["gen"], h_at), axis=-1)  # [p, n, V]
    token_logp = jnp.take_along_axis(logp, tokens.T[..., None], axis=-1)[..., 0].T  # [n, p]
    real = (tokens < config.num_states).astype(token_logp.dtype)
    return (token_logp * real).sum(-1) / jnp.maximum(real.sum(-1), 1.0)
