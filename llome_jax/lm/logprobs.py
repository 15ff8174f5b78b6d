"""Per-sequence target log-likelihoods: the only code that turns logits into training log-probs.

For a batch of concatenated (prompt, target) token sequences ``x`` with a 0/1 ``target_mask``
marking target tokens, the causal LM's log-likelihood of the target is

    log pi(y | x) = sum_{t >= 1} target_mask[t] * log softmax(logits[t - 1])[x[t]],

i.e. position ``t - 1`` predicts token ``t``; ``target_mask[0]`` is ignored (nothing predicts the
first token). Everything is computed in float32 whatever the logits' dtype.

Only the positions ``t - 1`` of target tokens need logits. :func:`target_positions` picks the
first ``W`` of them per row (``W``, the *target window*, is static: :func:`target_window` rounds the
batch's largest target count up to a multiple of 16), so a model can apply its output head to
``[B, W, H]`` hidden states instead of ``[B, T, H]`` (:func:`window_logprobs`). With half of
each row a target, as in LLOME's (prompt, completion) pairs, this halves the head's cost; the
result equals :func:`sequence_logprobs` up to float summation order.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax.types import SeqLogProbs

__all__ = [
    "max_target_count",
    "sequence_logprobs",
    "target_positions",
    "target_window",
    "token_logprobs",
    "window_logprobs",
]

#: Target windows are rounded up to a multiple of this, so that rounds whose longest target
#: differs by a few tokens share one compiled step.
WINDOW_MULTIPLE = 16


def token_logprobs(logits: jax.Array, input_ids: jax.Array) -> jax.Array:
    """Log-probability of each next token.

    Args:
      logits: ``[B, T, V]`` next-token logits (position ``t`` predicts token ``t + 1``).
      input_ids: int ``[B, T]``.

    Returns:
      float32 ``[B, T]`` where entry ``t >= 1`` is ``log p(x_t | x_<t)`` and entry 0 is 0.
    """
    logp = _logp_of(jnp.asarray(logits)[:, :-1], input_ids[:, 1:])
    return jnp.pad(logp, ((0, 0), (1, 0)))


def _logp_of(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """float32 ``log softmax(logits)[..., targets]``: logits ``[B, N, V]``, targets ``[B, N]``."""
    logits = logits.astype(jnp.float32)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return picked - jax.nn.logsumexp(logits, axis=-1)


def sequence_logprobs(
    logits: jax.Array, input_ids: jax.Array, target_mask: jax.Array
) -> SeqLogProbs:
    """Summed target log-probs and target token counts per sequence.

    Args:
      logits: ``[B, T, V]``.
      input_ids: int ``[B, T]`` prompt and target tokens, concatenated (padding anywhere).
      target_mask: ``[B, T]`` 1 on target tokens (and 0 on prompt and padding).

    Returns:
      ``SeqLogProbs(sum_logp [B], num_tokens [B])`` (float32); ``num_tokens`` excludes position 0.

    Example:
      >>> import jax.numpy as jnp
      >>> logits = jnp.zeros((1, 3, 4))             # uniform over 4 tokens
      >>> out = sequence_logprobs(logits, jnp.array([[0, 1, 2]]), jnp.array([[0, 1, 1]]))
      >>> round(float(out.sum_logp[0]), 4), float(out.num_tokens[0])   # 2 * log(1/4)
      (-2.7726, 2.0)
    """
    mask = jnp.asarray(target_mask, jnp.float32).at[:, 0].set(0.0)
    logp = token_logprobs(logits, input_ids)
    return SeqLogProbs(sum_logp=jnp.sum(logp * mask, axis=-1), num_tokens=jnp.sum(mask, axis=-1))


def target_window(target_mask: np.ndarray) -> int | None:
    """The static window for a batch: its largest target count, rounded up to 16 (host side).

    Args:
      target_mask: 0/1 ``[B, T]`` (numpy).

    Returns:
      ``W = 16 * ceil(max_b sum_{t >= 1} target_mask[b, t] / 16)``, or ``None`` when ``W`` would
      not be shorter than the ``T - 1`` predicting positions (no saving: use every position).

    Example:
      >>> import numpy as np
      >>> tmask = np.zeros((2, 100), np.int32); tmask[0, 60:] = 1; tmask[1, 80:] = 1
      >>> target_window(tmask)   # 40 targets in row 0 -> 48
      48
    """
    most = max_target_count(target_mask)
    window = max(WINDOW_MULTIPLE, -(-most // WINDOW_MULTIPLE) * WINDOW_MULTIPLE)
    return window if window < np.shape(target_mask)[1] - 1 else None


def max_target_count(target_mask: np.ndarray) -> int:
    """The most target tokens after position 0 in any row of a 0/1 ``[B, T]`` mask (host side)."""
    return int(np.asarray(target_mask)[:, 1:].sum(axis=1).max(initial=0))


def target_positions(target_mask: jax.Array, window: int) -> tuple[jax.Array, jax.Array]:
    """Positions whose logits score a target token: the first ``window`` per row.

    Position ``p`` predicts token ``p + 1``, so the predicting positions are ``{t - 1 :
    target_mask[t] = 1, t >= 1}``, taken in increasing order.

    Args:
      target_mask: 0/1 ``[B, T]``; every row has at most ``window`` targets after position 0.
      window: static ``W <= T - 1``.

    Returns:
      ``(positions, valid)``: int32 ``[B, W]`` positions in ``[0, T - 2]`` and float32 ``[B, W]``
      1 where the position predicts a target (rows with fewer than ``W`` targets are padded with
      non-predicting positions, marked 0).
    """
    predicts = jnp.asarray(target_mask)[:, 1:] > 0  # [B, T - 1]
    # A stable sort on "not predicting" puts the predicting positions first, in order.
    positions = jnp.argsort(~predicts, axis=-1, stable=True)[:, :window].astype(jnp.int32)
    valid = jnp.take_along_axis(predicts, positions, axis=-1).astype(jnp.float32)
    return positions, valid


def window_logprobs(
    logits: jax.Array, input_ids: jax.Array, positions: jax.Array, valid: jax.Array
) -> SeqLogProbs:
    """:func:`sequence_logprobs` from the logits at the :func:`target_positions` only.

    Args:
      logits: ``[B, W, V]`` logits at ``positions``.
      input_ids: int ``[B, T]``.
      positions: int ``[B, W]`` predicting positions; ``valid``: float32 ``[B, W]``.

    Returns:
      ``SeqLogProbs(sum_logp [B], num_tokens [B])``, equal to :func:`sequence_logprobs` on the
      full logits up to float summation order.
    """
    targets = jnp.take_along_axis(input_ids, positions + 1, axis=-1)
    logp = _logp_of(jnp.asarray(logits), targets)
    return SeqLogProbs(sum_logp=jnp.sum(logp * valid, axis=-1), num_tokens=jnp.sum(valid, axis=-1))
