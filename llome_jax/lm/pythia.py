"""Pythia (GPT-NeoX) in Flax NNX, numerically equal to ``transformers.GPTNeoXForCausalLM``.

Architecture (transformers' GPT-NeoX; Biderman et al. 2023; LLOME paper §5 uses Pythia-2.8B). For
each of the ``num_hidden_layers`` blocks, with hidden states ``x [B, T, H]``::

    a = Attention(LN_1(x))                 # fused QKV, partial NeoX rotary, causal softmax in f32
    x = x + a + MLP(LN_2(x))               # parallel residual (use_parallel_residual=True)
    x = (x + a) + MLP(LN_2(x + a))         # sequential residual (use_parallel_residual=False)
    MLP(h) = W_out gelu_erf(W_in h + b_in) + b_out

then ``logits = LN_f(x) @ W_head`` (untied from the input embedding, no bias). Details that matter
for exact parity (each one tested against transformers, docs/design/pythia.md):

* LayerNorm with ``eps = layer_norm_eps`` (1e-5) and the exact two-pass variance
  (``use_fast_variance=False``; Flax's defaults are eps 1e-6 and ``E[x^2] - E[x]^2``).
* GELU is the exact erf form (``approximate=False``; JAX's default is the tanh approximation).
* The fused QKV projection is laid out per head: the ``3H`` outputs reshape to
  ``[n_heads, 3, head_dim]`` (q | k | v *within* each head), exactly the HF weight layout, so the
  converter only transposes kernels.
* Rotary embeddings on the first ``rotary_ndims = int(head_dim * rotary_pct)`` channels of q and
  k, ``inv_freq = base^(-2i / rotary_ndims)``, ``[cos | cos]`` / ``[sin | sin]`` halves and
  ``rotate_half(x) = [-x2, x1]`` (NeoX layout, not GPT-J's even/odd interleave); angles in f32.
* Attention scale ``head_dim^-0.5``; scores and softmax in float32.

The vocabulary of released checkpoints is padded (50304 rows for 50277 tokenizer entries); the
model returns logits over all rows and :mod:`llome_jax.lm.sample` masks ids at or above
``SampleConfig.vocab_limit`` when sampling.

Parameters are float32 by default (``param_dtype``); ``compute_dtype="bfloat16"`` runs the
matmuls in bf16 (LayerNorm statistics, attention softmax and the returned logits stay float32).

Model contract (shared with :class:`llome_jax.testing.TinyCausalLM` and
:func:`llome_jax.training.step.make_train_step`)::

    model(input_ids [B, T], attention_mask=None, position_ids=None) -> logits f32 [B, T, V]

Decoding uses the KV-cache entry points :meth:`Pythia.init_cache`, :meth:`Pythia.hidden` and
:meth:`Pythia.logits` (see :mod:`llome_jax.lm.sample`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from llome_jax.moved import moved_names

__all__ = [
    "PRESETS",
    "KVCache",
    "Pythia",
    "PythiaConfig",
    "attention_mask_for",
    "cast_floats",
    "graphdef_in_dtype",
    "num_parameters",
]

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}

#: Published hyper-parameters of the released Pythia suite (Biderman et al. 2023, Table 1; HF
#: config.json of ``EleutherAI/pythia-*``): hidden size, layers, heads. Intermediate = 4 x hidden,
#: padded vocabulary 50304, rotary_pct 0.25, base 10000, 2048 positions.
_RELEASED = {
    "70m": (512, 6, 8),
    "160m": (768, 12, 12),
    "410m": (1024, 24, 16),
    "1b": (2048, 16, 8),
    "1.4b": (2048, 24, 16),
    "2.8b": (2560, 32, 32),
    "6.9b": (4096, 32, 32),
    "12b": (5120, 36, 40),
}
_RELEASED_VOCAB = {"6.9b": 50432, "12b": 50688}

#: Small from-scratch presets for CPU experiments (``vocab_size`` must be given):
#: ``tiny`` ~0.2M + 128 V parameters, ``small`` ~3.2M + 512 V.
_SCRATCH = {
    "tiny": {
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "intermediate_size": 256,
    },
    "small": {
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "intermediate_size": 1024,
    },
}

PRESETS: tuple[str, ...] = (*_RELEASED, *_SCRATCH)


@dataclasses.dataclass(frozen=True)
class PythiaConfig:
    """Static shape and numerics of a Pythia model (hashable; fixes every array shape).

    Attributes:
      vocab_size: rows of the embedding / head (the *padded* vocabulary of a checkpoint).
      hidden_size: model width ``H``.
      num_hidden_layers: number of blocks.
      num_attention_heads: heads (``H % heads == 0``).
      intermediate_size: MLP width (4 H in Pythia).
      rotary_pct: fraction of each head's channels that get rotary embeddings (0.25).
      rotary_emb_base: rotary base ``theta`` (10000).
      max_position_embeddings: longest sequence the checkpoint was trained for (2048); positions
        beyond it are refused by the sampler.
      layer_norm_eps: LayerNorm epsilon (1e-5).
      use_parallel_residual: Pythia's parallel attention/MLP residual (True) or sequential.
      hidden_act: only ``"gelu"`` (exact erf GELU) is implemented.
      param_dtype: ``"float32"`` (default), ``"bfloat16"`` or ``"float16"``.
      compute_dtype: matmul dtype, ``"float32"`` (default) or ``"bfloat16"``.
      remat: recompute each block's activations in the backward pass (``nnx.remat``): activation
        memory of one block instead of all of them, for ~1/3 more compute. Same values.
    """

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    rotary_pct: float = 0.25
    rotary_emb_base: float = 10000.0
    max_position_embeddings: int = 2048
    layer_norm_eps: float = 1e-5
    use_parallel_residual: bool = True
    hidden_act: str = "gelu"
    param_dtype: str = "float32"
    compute_dtype: str = "float32"
    remat: bool = False

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"PythiaConfig.{name} must be a positive int, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads})"
            )
        if not 0.0 <= self.rotary_pct <= 1.0:
            raise ValueError(f"rotary_pct must be in [0, 1], got {self.rotary_pct}")
        if self.rotary_ndims % 2:
            raise ValueError(
                f"rotary_ndims = int(head_dim * rotary_pct) = {self.rotary_ndims} must be even "
                "(rotate_half splits it in two halves)"
            )
        if self.rotary_emb_base <= 0:
            raise ValueError(f"rotary_emb_base must be positive, got {self.rotary_emb_base}")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"layer_norm_eps must be positive, got {self.layer_norm_eps}")
        if self.hidden_act != "gelu":
            raise ValueError(
                f"hidden_act={self.hidden_act!r} is not implemented (only 'gelu', the exact erf "
                "GELU that Pythia uses)"
            )
        if self.param_dtype not in _DTYPES:
            raise ValueError(
                f"param_dtype must be one of {sorted(_DTYPES)}, got {self.param_dtype!r}"
            )
        if self.compute_dtype not in ("float32", "bfloat16"):
            raise ValueError(
                f"compute_dtype must be 'float32' or 'bfloat16', got {self.compute_dtype!r}"
            )

    @property
    def head_dim(self) -> int:
        """Channels per head, ``H / heads``."""
        return self.hidden_size // self.num_attention_heads

    @property
    def rotary_ndims(self) -> int:
        """Rotary channels per head, ``int(head_dim * rotary_pct)`` (HF's truncation)."""
        return int(self.head_dim * self.rotary_pct)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> PythiaConfig:
        """A released size (``"70m"`` ... ``"2.8b"``, also ``"6.9b"``, ``"12b"``) or a CPU preset.

        ``tiny`` (H 64, 4 layers, 4 heads) and ``small`` (H 256, 4 layers, 8 heads) are for
        from-scratch runs and need ``vocab_size=`` (the tokenizer's size). Any field can be
        overridden, e.g. ``PythiaConfig.preset("410m", compute_dtype="bfloat16")``.
        """
        key = name.lower().removeprefix("pythia-")
        if key in _RELEASED:
            hidden, layers, heads = _RELEASED[key]
            base: dict[str, Any] = {
                "vocab_size": _RELEASED_VOCAB.get(key, 50304),
                "hidden_size": hidden,
                "num_hidden_layers": layers,
                "num_attention_heads": heads,
                "intermediate_size": 4 * hidden,
            }
        elif key in _SCRATCH:
            if "vocab_size" not in overrides:
                raise ValueError(
                    f"preset {name!r} needs vocab_size= (the tokenizer's size), e.g. "
                    f"PythiaConfig.preset({name!r}, vocab_size=codec.vocab_size)"
                )
            base = dict(_SCRATCH[key])
        else:
            raise ValueError(f"unknown Pythia preset {name!r}; choose one of {list(PRESETS)}")
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown PythiaConfig fields in overrides: {sorted(unknown)}")
        return cls(**{**base, **overrides})

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable field dict (inverse: ``PythiaConfig(**d)``)."""
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------------------------
# KV cache
# --------------------------------------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
    """Keys and values of every layer for ``S`` slots.

    Attributes:
      key: one ``[B, heads, S, head_dim]`` array per layer (compute dtype), rotary applied.
      value: same shapes.

    Per-layer arrays (not one stacked array) so that the decoding loop updates each in place.
    """

    key: tuple[jax.Array, ...]
    value: tuple[jax.Array, ...]


def attention_mask_for(slot_valid: jax.Array, query_slots: jax.Array) -> jax.Array:
    """Boolean attention mask ``[B, T, S]`` for queries at cache slots ``query_slots``.

    Query ``t`` (at slot ``q_t``) sees slot ``s`` iff ``slot_valid[b, s]`` and ``s <= q_t``; it
    always sees itself, so that a query on a padding token never has an empty softmax (its
    output is garbage either way and is never used).

    Args:
      slot_valid: bool/0-1 ``[B, S]``; 0 on padding slots.
      query_slots: int ``[T]`` slot index of each query.
    """
    s = jnp.arange(slot_valid.shape[-1])
    causal = s[None, :] <= query_slots[:, None]  # [T, S]
    own = s[None, :] == query_slots[:, None]
    return (causal[None] & (slot_valid[:, None, :] > 0)) | own[None]


# --------------------------------------------------------------------------------------------
# Modules (attribute names follow the HF state dict, see convert.py)
# --------------------------------------------------------------------------------------------


def _linear(cfg: PythiaConfig, d_in: int, d_out: int, rngs: nnx.Rngs, *, bias: bool = True):
    return nnx.Linear(
        d_in,
        d_out,
        use_bias=bias,
        dtype=_DTYPES[cfg.compute_dtype],
        param_dtype=_DTYPES[cfg.param_dtype],
        kernel_init=nnx.initializers.normal(0.02),
        bias_init=nnx.initializers.zeros_init(),
        rngs=rngs,
    )


def _layer_norm(cfg: PythiaConfig, rngs: nnx.Rngs) -> nnx.LayerNorm:
    return nnx.LayerNorm(
        cfg.hidden_size,
        epsilon=cfg.layer_norm_eps,
        use_fast_variance=False,
        dtype=_DTYPES[cfg.compute_dtype],
        param_dtype=_DTYPES[cfg.param_dtype],
        rngs=rngs,
    )


def _rotary(config: PythiaConfig, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``cos, sin`` of shape ``[B, T, rotary_ndims]`` (float32), HF's ``[f | f]`` layout."""
    rot = config.rotary_ndims
    inv_freq = 1.0 / (config.rotary_emb_base ** (jnp.arange(0, rot, 2, dtype=jnp.float32) / rot))
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def _apply_rotary(x: jax.Array, cos: jax.Array, sin: jax.Array, rot: int) -> jax.Array:
    """NeoX rotary on the first ``rot`` channels of ``x [B, T, heads, head_dim]``."""
    if rot == 0:
        return x
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    half = rot // 2
    rotated = jnp.concatenate([-x_rot[..., half:], x_rot[..., :half]], axis=-1)
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    out = (x_rot.astype(jnp.float32) * cos + rotated.astype(jnp.float32) * sin).astype(x.dtype)
    return jnp.concatenate([out, x_pass], axis=-1)


class Attention(nnx.Module):
    """Causal self-attention with fused per-head QKV and partial rotary embeddings."""

    def __init__(self, config: PythiaConfig, *, rngs: nnx.Rngs) -> None:
        self.config = config
        h = config.hidden_size
        self.query_key_value = _linear(config, h, 3 * h, rngs)
        self.dense = _linear(config, h, h, rngs)

    def __call__(
        self,
        x: jax.Array,
        cos: jax.Array,
        sin: jax.Array,
        mask: jax.Array,
        cache: tuple[jax.Array, jax.Array] | None = None,
        index: jax.Array | int = 0,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        """``x [B, T, H]``, mask ``[B, T, S]`` -> ``([B, T, H], updated (k, v) cache or None)``.

        Without a cache ``S = T``; with a cache ``(k, v) [B, heads, S, head_dim]`` the new keys
        and values are written at slots ``index .. index + T - 1`` first.
        """
        cfg = self.config
        b, t, _ = x.shape
        nh, hd = cfg.num_attention_heads, cfg.head_dim
        qkv = self.query_key_value(x).reshape(b, t, nh, 3 * hd)
        q, k, v = qkv[..., :hd], qkv[..., hd : 2 * hd], qkv[..., 2 * hd :]
        q = _apply_rotary(q, cos, sin, cfg.rotary_ndims)
        k = _apply_rotary(k, cos, sin, cfg.rotary_ndims)
        k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B, heads, T, head_dim]
        new_cache = None
        if cache is not None:
            k_cache, v_cache = cache
            zero = jnp.zeros((), jnp.int32)
            start = (zero, zero, jnp.asarray(index, jnp.int32), zero)
            k = jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), start)
            v = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), start)
            new_cache = (k, v)
        scores = jnp.einsum("bthd,bhsd->bhts", q, k, preferred_element_type=jnp.float32)
        scores = scores * jnp.float32(hd**-0.5)
        scores = jnp.where(mask[:, None], scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        y = jnp.einsum("bhts,bhsd->bthd", probs, v).reshape(b, t, nh * hd)
        return self.dense(y), new_cache


class MLP(nnx.Module):
    """``dense_4h_to_h(gelu_erf(dense_h_to_4h(x)))``."""

    def __init__(self, config: PythiaConfig, *, rngs: nnx.Rngs) -> None:
        self.dense_h_to_4h = _linear(config, config.hidden_size, config.intermediate_size, rngs)
        self.dense_4h_to_h = _linear(config, config.intermediate_size, config.hidden_size, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.dense_4h_to_h(jax.nn.gelu(self.dense_h_to_4h(x), approximate=False))


class Layer(nnx.Module):
    """One GPT-NeoX block (parallel or sequential residual)."""

    def __init__(self, config: PythiaConfig, *, rngs: nnx.Rngs) -> None:
        self.parallel = config.use_parallel_residual
        self.input_layernorm = _layer_norm(config, rngs)
        self.post_attention_layernorm = _layer_norm(config, rngs)
        self.attention = Attention(config, rngs=rngs)
        self.mlp = MLP(config, rngs=rngs)

    def __call__(self, x, cos, sin, mask, cache=None, index=0):
        a, cache = self.attention(self.input_layernorm(x), cos, sin, mask, cache, index)
        if self.parallel:
            x = x + a + self.mlp(self.post_attention_layernorm(x))
        else:
            x = x + a
            x = x + self.mlp(self.post_attention_layernorm(x))
        return x, cache


@nnx.remat
def _remat_layer(layer: Layer, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array):
    return layer(x, cos, sin, mask)[0]


class Pythia(nnx.Module):
    """GPT-NeoX causal LM (``GPTNeoXForCausalLM``): embed -> blocks -> final LN -> untied head.

    Attribute names mirror the HF state dict (``embed_in``, ``layers[i].attention.
    query_key_value``, ..., ``final_layer_norm``, ``embed_out``), kernels are ``[in, out]``.
    """

    def __init__(self, config: PythiaConfig, *, rngs: nnx.Rngs) -> None:
        self.config = config
        self.embed_in = nnx.Embed(
            config.vocab_size,
            config.hidden_size,
            dtype=_DTYPES[config.compute_dtype],
            param_dtype=_DTYPES[config.param_dtype],
            embedding_init=nnx.initializers.normal(0.02),
            rngs=rngs,
        )
        self.layers = nnx.List([Layer(config, rngs=rngs) for _ in range(config.num_hidden_layers)])
        self.final_layer_norm = _layer_norm(config, rngs)
        self.embed_out = _linear(config, config.hidden_size, config.vocab_size, rngs, bias=False)

    def __call__(
        self,
        input_ids: jax.Array,
        attention_mask: jax.Array | None = None,
        position_ids: jax.Array | None = None,
        logit_positions: jax.Array | None = None,
    ) -> jax.Array:
        """Next-token logits.

        Args:
          input_ids: int ``[B, T]``.
          attention_mask: 0/1 ``[B, T]`` (1 = real token; default all ones). Padding keys are
            never attended to; outputs at padding positions are meaningless.
          position_ids: int ``[B, T]`` rotary positions. Default ``arange(T)`` as in HF; pass
            ``cumsum(mask) - 1`` (``llome_jax.training.step.position_ids_from_mask``) for left padding.
          logit_positions: optional int ``[B, W]``: apply the output head at these positions
            only (``llome_jax.lm.logprobs.target_positions``; the head is the widest matmul).

        Returns:
          float32 ``[B, T, V]`` (``[B, W, V]`` with ``logit_positions``); position ``t`` predicts
          token ``t + 1``.
        """
        b, t = input_ids.shape
        if attention_mask is None:
            attention_mask = jnp.ones((b, t), jnp.int32)
        if position_ids is None:
            position_ids = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
        mask = attention_mask_for(attention_mask, jnp.arange(t))
        h, _ = self.hidden(input_ids, mask, position_ids)
        if logit_positions is not None:
            h = jnp.take_along_axis(h, logit_positions[..., None], axis=1)
        return self.logits(h)

    def hidden(
        self,
        input_ids: jax.Array,
        mask: jax.Array,
        position_ids: jax.Array,
        cache: KVCache | None = None,
        index: jax.Array | int = 0,
    ) -> tuple[jax.Array, KVCache | None]:
        """Final-LayerNorm hidden states ``[B, T, H]`` and the updated cache.

        Args:
          input_ids: int ``[B, T]``.
          mask: bool ``[B, T, S]`` (:func:`attention_mask_for`); ``S = T`` without a cache.
          position_ids: int ``[B, T]``.
          cache: a :class:`KVCache` with ``S`` slots, or ``None``.
          index: first cache slot written (the queries sit at ``index .. index + T - 1``).
        """
        cos, sin = _rotary(self.config, position_ids)
        x = self.embed_in(input_ids)
        keys, values = [], []
        for i, layer in enumerate(self.layers):
            if cache is None and self.config.remat:
                x = _remat_layer(layer, x, cos, sin, mask)
                continue
            layer_cache = None if cache is None else (cache.key[i], cache.value[i])
            x, new = layer(x, cos, sin, mask, layer_cache, index)
            if new is not None:
                keys.append(new[0])
                values.append(new[1])
        out_cache = None if cache is None else KVCache(tuple(keys), tuple(values))
        return self.final_layer_norm(x), out_cache

    def logits(self, hidden: jax.Array) -> jax.Array:
        """Untied output head: ``hidden @ embed_out`` as float32 ``[..., V]``."""
        return self.embed_out(hidden).astype(jnp.float32)

    def init_cache(self, batch_size: int, num_slots: int) -> KVCache:
        """An all-zero :class:`KVCache` with ``num_slots`` slots in the compute dtype."""
        cfg = self.config
        shape = (batch_size, cfg.num_attention_heads, num_slots, cfg.head_dim)
        dtype = _DTYPES[cfg.compute_dtype]
        n = cfg.num_hidden_layers
        return KVCache(
            tuple(jnp.zeros(shape, dtype) for _ in range(n)),
            tuple(jnp.zeros(shape, dtype) for _ in range(n)),
        )


# --------------------------------------------------------------------------------------------
# Utilities
# --------------------------------------------------------------------------------------------


def num_parameters(model_or_state: Any) -> int:
    """Number of scalar parameters of a model, an ``nnx.State`` or a pytree of arrays/shapes.

    Works on abstract models (``nnx.eval_shape``): only shapes are read. For the released
    configurations it reproduces the published totals (e.g. Pythia-2.8B: 2,775,208,960).
    """
    tree = model_or_state
    if isinstance(tree, nnx.Module):
        tree = nnx.state(tree, nnx.Param)
    leaves = jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, nnx.Variable))
    total = 0
    for leaf in leaves:
        if isinstance(leaf, nnx.Variable):
            leaf = leaf.get_value()
        total += int(np.prod(np.shape(leaf), dtype=np.int64))
    return total


def abstract_model(config: PythiaConfig) -> Pythia:
    """The model with ``ShapeDtypeStruct`` leaves (no memory, no computation)."""
    return nnx.eval_shape(lambda: Pythia(config, rngs=nnx.Rngs(0)))


@functools.lru_cache(maxsize=16)
def graphdef_in_dtype(config: PythiaConfig, dtype: str) -> nnx.GraphDef:
    """The graph of a Pythia whose parameters, matmuls and KV cache are all ``dtype``.

    ``config`` with ``param_dtype = compute_dtype = dtype``, built abstractly (no memory): merged
    with a state cast by :func:`cast_floats` (the same tree as ``nnx.split(model)[1]`` for
    ``Pythia(config)``) it gives that model in ``dtype``, e.g. for bf16 generation with fp32
    training parameters (``SampleConfig.compute_dtype``).

    Raises:
      ValueError: ``dtype`` other than ``"float32"`` / ``"bfloat16"`` (the compute dtypes).
    """
    in_dtype = dataclasses.replace(config, param_dtype=dtype, compute_dtype=dtype)
    return nnx.split(abstract_model(in_dtype))[0]


def cast_floats(tree: Any, dtype: str) -> Any:
    """``tree`` with every floating-point array cast to ``dtype`` (round to nearest even);
    other leaves unchanged. Works on concrete arrays and inside ``jit``."""
    target = _DTYPES[dtype]

    def cast(leaf: Any) -> Any:
        if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.floating):
            return leaf.astype(target)
        return leaf

    return jax.tree.map(cast, tree)


#: Loading Hugging Face checkpoints moved to :mod:`llome_jax.lm.convert`; the old name still
#: imports (and warns once).
__getattr__ = moved_names(__name__, {"from_pretrained": "llome_jax.lm.convert"})
