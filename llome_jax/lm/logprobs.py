"""Per-sequence target log-likelihoods: the only code that turns logits into training log-probs.

For a batch of concatenated (prompt, target) token sequences ``x`` with a 0/1 ``target_mask``
marking target tokens, the causal LM's log-likelihood of the target is

    log pi(y | x) = sum_{t >= 1} target_mask[t] * log softmax(logits[t - 1])[x[t]],

i.e. position ``t - 1`` predicts token ``t``; ``target_mask[0]`` is ignored (nothing predicts the
first token). Everything is computed in float32 whatever the logits' dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from llome_jax.types import SeqLogProbs

__all__ = ["sequence_logprobs", "token_logprobs"]


def token_logprobs(logits: jax.Array, input_ids: jax.Array) -> jax.Array:
    """Log-probability of each next token.

    Args:
      logits: ``[B, T, V]`` next-token logits (position ``t`` predicts token ``t + 1``).
      input_ids: int ``[B, T]``.

    Returns:
      float32 ``[B, T]`` where entry ``t >= 1`` is ``log p(x_t | x_<t)`` and entry 0 is 0.
    """
    logits = jnp.asarray(logits)[:, :-1].astype(jnp.float32)
    targets = input_ids[:, 1:]
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    logp = picked - jax.nn.logsumexp(logits, axis=-1)
    return jnp.pad(logp, ((0, 0), (1, 0)))


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
