"""Shared type aliases and small pytrees that cross module boundaries.

``SeqLogProbs`` is produced only by :mod:`llome_jax.lm.logprobs` (the one place that turns logits
into log-probabilities) and consumed by every loss in :mod:`llome_jax.training.losses`.
"""

from __future__ import annotations

import dataclasses
import functools

import jax

__all__ = ["Key", "SeqLogProbs", "Tokens"]

#: A typed PRNG key (``jax.random.key``).
Key = jax.Array
#: Integer token ids ``[..., L]``.
Tokens = jax.Array


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["sum_logp", "num_tokens"], meta_fields=[]
)
@dataclasses.dataclass(frozen=True)
class SeqLogProbs:
    """Per-sequence log-likelihood of the target tokens of a (prompt, target) batch.

    Attributes:
      sum_logp: float32 ``[B]``: ``sum_t log pi(y_t | x, y_<t)`` over target tokens.
      num_tokens: float32 ``[B]``: number of target tokens (for length normalisation).
    """

    sum_logp: jax.Array
    num_tokens: jax.Array

    @property
    def mean_logp(self) -> jax.Array:
        """Length-normalised log-likelihood ``sum_logp / max(num_tokens, 1)``."""
        return self.sum_logp / jax.numpy.maximum(self.num_tokens, 1.0)
