"""What each leaf of LaMBO-2's training minimises: absorbing-mask corruption and three losses.

cortex v0.0.4 semantics (paper App. "LaMBO-2 Model and Training Details"; departures in
``docs/design/lambo2_port.md``); ``llome_jax.lambo2.train`` takes the steps.

* **Corruption** (cortex ``MaskCorruptionProcess``): cosine schedule with ``T = 1000`` steps, mask
  rate ``rho(t) = sqrt(abar_t)`` (:func:`mask_rates`); one ``t ~ U{1..T}`` per minibatch (per
  leaf update); each alphabet position is replaced by ``<mask>`` with probability ``rho``
  (:func:`corrupt`).
* **Losses**: MLM cross-entropy over masked positions only (:func:`mlm_loss`); classifier
  cross-entropy with label smoothing ``eps = rho`` (:func:`classification_loss`); regressor KL
  between the moment-matched smoothed label ``N((1-rho) y, rho + (1-rho) s0^2 + rho (1-rho) y^2)``
  and the predicted Gaussian (:func:`regression_loss`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax.lambo2.model import gaussian_from_natural

__all__ = ["classification_loss", "corrupt", "mask_rates", "mlm_loss", "regression_loss"]


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
