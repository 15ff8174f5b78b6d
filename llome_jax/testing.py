"""Small helpers for tests and benchmarks: a tiny causal NNX language model.

``TinyCausalLM`` satisfies the model contract of :mod:`llome_jax.training.step`
(``model(input_ids [B, T], attention_mask=None, position_ids=None) -> logits [B, T, V]``) with a
plain pre-LayerNorm transformer (learned positions, causal + padding mask, GELU MLP, untied head).
It is *not* Pythia (:mod:`llome_jax.lm.pythia` is); it exists so that training code can be
tested without the model package and benchmarked at Pythia-like sizes.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

__all__ = ["TinyCausalLM", "TinyLMConfig", "toy_token_batch"]


@dataclasses.dataclass(frozen=True)
class TinyLMConfig:
    """Shape of a :class:`TinyCausalLM`.

    Attributes:
      vocab_size: number of token ids.
      hidden_size: model width.
      num_layers: transformer blocks.
      num_heads: attention heads (``hidden_size % num_heads == 0``).
      intermediate_size: MLP width.
      max_position: number of learned positions.
    """

    vocab_size: int = 64
    hidden_size: int = 32
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 64
    max_position: int = 64


class _Block(nnx.Module):
    def __init__(self, config: TinyLMConfig, *, rngs: nnx.Rngs) -> None:
        d = config.hidden_size
        self.num_heads = config.num_heads
        self.ln_attn = nnx.LayerNorm(d, rngs=rngs)
        # No qkv bias: a key bias has an exactly-zero gradient (softmax shift invariance), and
        # Adam would amplify its round-off noise, which makes trajectory comparisons flaky.
        self.qkv = nnx.Linear(d, 3 * d, use_bias=False, rngs=rngs)
        self.out = nnx.Linear(d, d, rngs=rngs)
        self.ln_mlp = nnx.LayerNorm(d, rngs=rngs)
        self.up = nnx.Linear(d, config.intermediate_size, rngs=rngs)
        self.down = nnx.Linear(config.intermediate_size, d, rngs=rngs)

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        b, t, d = x.shape
        h = self.num_heads
        q, k, v = jnp.split(self.qkv(self.ln_attn(x)), 3, axis=-1)
        q, k, v = (z.reshape(b, t, h, d // h) for z in (q, k, v))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(d // h).astype(x.dtype)
        scores = jnp.where(mask[:, None], scores, jnp.finfo(scores.dtype).min)
        attn = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(x.dtype)
        y = jnp.einsum("bhqk,bkhd->bqhd", attn, v).reshape(b, t, d)
        x = x + self.out(y)
        return x + self.down(jax.nn.gelu(self.up(self.ln_mlp(x))))


class TinyCausalLM(nnx.Module):
    """A minimal causal transformer LM with the llome_jax model contract."""

    def __init__(self, config: TinyLMConfig, *, rngs: nnx.Rngs) -> None:
        self.config = config
        self.embed = nnx.Embed(config.vocab_size, config.hidden_size, rngs=rngs)
        self.positions = nnx.Embed(config.max_position, config.hidden_size, rngs=rngs)
        self.blocks = nnx.List([_Block(config, rngs=rngs) for _ in range(config.num_layers)])
        self.ln_final = nnx.LayerNorm(config.hidden_size, rngs=rngs)
        self.head = nnx.Linear(config.hidden_size, config.vocab_size, use_bias=False, rngs=rngs)

    def __call__(
        self,
        input_ids: jax.Array,
        attention_mask: jax.Array | None = None,
        position_ids: jax.Array | None = None,
    ) -> jax.Array:
        """Logits ``[B, T, V]`` (position ``t`` predicts token ``t + 1``)."""
        b, t = input_ids.shape
        if attention_mask is None:
            attention_mask = jnp.ones((b, t), jnp.int32)
        if position_ids is None:
            position_ids = jnp.broadcast_to(jnp.arange(t), (b, t))
        causal = jnp.tril(jnp.ones((t, t), bool))
        # Each query sees real keys up to itself; a query on padding still sees itself.
        mask = (causal[None] & (attention_mask[:, None, :] > 0)) | jnp.eye(t, dtype=bool)[None]
        x = self.embed(input_ids) + self.positions(position_ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_final(x))


def toy_token_batch(
    seed: int,
    *,
    batch_size: int = 8,
    seq_len: int = 12,
    vocab_size: int = 64,
    min_prompt: int = 3,
    max_pad: int = 2,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random ``(input_ids, target_mask, attention_mask)`` ``[B, T]`` with ragged prompts/padding.

    Row ``i`` has a prompt of ``min_prompt + (i % 3)`` tokens, then target tokens, then up to
    ``max_pad`` right-padding tokens (id 0, attention 0, target 0).
    """
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab_size, (batch_size, seq_len)).astype(np.int32)
    target = np.zeros((batch_size, seq_len), np.int32)
    attention = np.ones((batch_size, seq_len), np.int32)
    for i in range(batch_size):
        prompt = min_prompt + (i % 3)
        pad = int(rng.integers(0, max_pad + 1))
        end = seq_len - pad
        target[i, prompt:end] = 1
        attention[i, end:] = 0
        ids[i, end:] = 0
    return ids, target, attention
