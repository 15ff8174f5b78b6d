"""LaMBO-2's CNN: shared encoder, generative (MLM) head, ensembles of regressors and classifiers.

Ports cortex v0.0.4's ``Conv1dRoot`` / ``Conv1dBranch`` / ``RegressorLeaf`` / ``ClassifierLeaf`` /
``DenoisingLanguageModelLeaf`` (paper App. "LaMBO-2 Model and Training Details"; departures in
``docs/design/lambo2_port.md``). Layout is channels-last ``[B, N, C]`` throughout (the reference is
channels-first; the maths is the same).

Forward (``B`` batch, ``N`` positions, ``m`` the real-position mask)::

    e   = sqrt(d_e) * E[tok] / max(|E[tok]|, 1e-6)           # pad rows stay 0      [B, N, d_e]
    h   = Block(d_c -> d_o)(Block(d_e -> d_c)(e + PE, m), m)  # trunk features      [B, N, d_o]
    gen : Linear(d_o -> 32, no bias) -> Linear(32 -> V)       # MLM logits          [B, N, V]
    reg / cls member e : Block(d_o -> 8) -> masked mean -> Linear(8 -> 2)           [B, 2]

with ``Block(x) = Conv(swish(LN(Conv(swish(LN(x))) * m))) * m + (x or Conv1x1(x))`` (pre-norm,
bias-free ``k``-wide 'same' convolutions, LN over channels with ``sigma = sqrt(max(var, 1e-5))``).

The ``E_ens`` members of each discriminative head are **one** module whose parameters carry a
leading ensemble axis (created and applied with ``nnx.vmap``); functional code vmaps the member
over that axis (``jax.vmap``), never a Python loop over copies.

Token ids: the Ehrlich alphabet ``0..v-1`` then the 7 utility tokens
``<cls> <pad> <eos> <unk> . - <mask>`` (``V = v + 7``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

__all__ = [
    "UTILITY_TOKENS",
    "Lambo2Model",
    "ModelConfig",
    "ensemble_apply",
    "gaussian_from_natural",
    "graphdefs",
    "init_params",
    "member_apply",
    "num_parameters",
    "positional_table",
]

UTILITY_TOKENS = ("<cls>", "<pad>", "<eos>", "<unk>", ".", "-", "<mask>")
_LN_VAR_MIN = 1e-5
_NORM_MIN = 1e-6

Params = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Static model shape (cortex v0.0.4's CNN). Defaults = the paper text (128/128/128, k 5).

    Attributes:
      num_states: Ehrlich alphabet size ``v`` (``V = v + 7`` tokens).
      length: sequence length ``L``; also the padded length ``N`` unless ``max_len`` is set.
      embed_dim, channel_dim, out_dim: ``d_e``, ``d_c``, ``d_o``.
      kernel_size: convolution width ``k``.
      num_blocks: encoder blocks (``d_e -> d_c``, ``d_c -> d_c`` ..., last ``-> d_o``); 2 in the paper.
      head_dim: branch width of every discriminative member (8).
      gen_dim: rank of the generative head (32; identity projection when ``d_o == gen_dim``).
      ensemble_size: members per discriminative head (8).
      max_len: padded length ``N >= L`` (``None``: no padding, the port's default; cortex pads
        to 256, see ``docs/design/lambo2_port.md`` decision 3); the sinusoid table has ``N + 1`` rows
        either way.
    """

    num_states: int
    length: int
    embed_dim: int = 128
    channel_dim: int = 128
    out_dim: int = 128
    kernel_size: int = 5
    num_blocks: int = 2
    head_dim: int = 8
    gen_dim: int = 32
    ensemble_size: int = 8
    max_len: int | None = None

    def __post_init__(self) -> None:
        for name in (
            "num_states",
            "length",
            "embed_dim",
            "channel_dim",
            "out_dim",
            "kernel_size",
            "num_blocks",
            "head_dim",
            "gen_dim",
            "ensemble_size",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}.")
        if self.embed_dim % 2:
            raise ValueError(f"embed_dim must be even (sinusoids), got {self.embed_dim}.")
        if self.max_len is not None and self.max_len < self.length:
            raise ValueError(f"max_len={self.max_len} must be >= length={self.length}.")

    # token ids -----------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.num_states + len(UTILITY_TOKENS)

    @property
    def pad_id(self) -> int:
        return self.num_states + UTILITY_TOKENS.index("<pad>")

    @property
    def mask_id(self) -> int:
        return self.num_states + UTILITY_TOKENS.index("<mask>")

    @property
    def padded_length(self) -> int:
        return self.length if self.max_len is None else self.max_len

    # presets -------------------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str, num_states: int, length: int, **overrides: Any) -> ModelConfig:
        """Named sizes: ``paper`` (128/128/128, k 5: 447,271 trainable for v 32),
        ``paper_314k`` (k 3: 281,383 + 257x128 table = 314,279 with ``max_len`` 256),
        ``bbo_bench`` (32/128/32, k 5), ``cpu`` (32/32/32, k 5; docs/design/lambo2_port.md says why),
        ``tiny`` (8/8/8, k 3, 2 members)."""
        presets = {
            "paper": {},
            "paper_314k": {"kernel_size": 3},
            "bbo_bench": {"embed_dim": 32, "channel_dim": 128, "out_dim": 32},
            "cpu": {"embed_dim": 32, "channel_dim": 32, "out_dim": 32},
            "tiny": {
                "embed_dim": 8,
                "channel_dim": 8,
                "out_dim": 8,
                "kernel_size": 3,
                "head_dim": 4,
                "gen_dim": 8,
                "ensemble_size": 2,
            },
        }
        if name not in presets:
            raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(presets)}.")
        return cls(num_states=num_states, length=length, **{**presets[name], **overrides})


# ---------------------------------------------------------------------------------------------
# Layers (PyTorch default initialisation, as cortex gets it)
# ---------------------------------------------------------------------------------------------
def _uniform(rngs: nnx.Rngs, shape: tuple[int, ...], fan_in: int) -> nnx.Param:
    bound = 1.0 / math.sqrt(fan_in)
    return nnx.Param(jax.random.uniform(rngs.params(), shape, jnp.float32, -bound, bound))


class ChannelNorm(nnx.Module):
    """LayerNorm over channels per position, ``sigma = sqrt(max(var, 1e-5))`` (ignores masks)."""

    def __init__(self, channels: int) -> None:
        self.scale = nnx.Param(jnp.ones((channels,), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((channels,), jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        mean = x.mean(-1, keepdims=True)
        var = jnp.square(x - mean).mean(-1, keepdims=True)
        return (x - mean) / jnp.sqrt(jnp.maximum(var, _LN_VAR_MIN)) * self.scale + self.bias


class Conv(nnx.Module):
    """1-D 'same' convolution, channels-last, weight ``[k, c_in, c_out]``, optional bias."""

    def __init__(self, c_in: int, c_out: int, k: int, *, bias: bool, rngs: nnx.Rngs) -> None:
        self.kernel = _uniform(rngs, (k, c_in, c_out), c_in * k)
        self.bias = _uniform(rngs, (c_out,), c_in * k) if bias else None

    def __call__(self, x: jax.Array) -> jax.Array:
        k = self.kernel.shape[0]
        if k == 1:
            y = x @ self.kernel[0]
        else:
            y = jax.lax.conv_general_dilated(
                x,
                self.kernel[...],
                window_strides=(1,),
                padding=[((k - 1) // 2, k // 2)],
                dimension_numbers=("NWC", "WIO", "NWC"),
            )
        return y if self.bias is None else y + self.bias


class Block(nnx.Module):
    """Pre-norm residual block ``c_in -> c_out`` (cortex v0.0.4's residual conv block)."""

    def __init__(self, c_in: int, c_out: int, k: int, *, rngs: nnx.Rngs) -> None:
        self.norm1 = ChannelNorm(c_in)
        self.conv1 = Conv(c_in, c_out, k, bias=False, rngs=rngs)
        self.norm2 = ChannelNorm(c_out)
        self.conv2 = Conv(c_out, c_out, k, bias=False, rngs=rngs)
        self.proj = Conv(c_in, c_out, 1, bias=True, rngs=rngs) if c_in != c_out else None

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        m = mask[..., None].astype(x.dtype)
        h = self.conv1(jax.nn.swish(self.norm1(x))) * m
        h = self.conv2(jax.nn.swish(self.norm2(h))) * m
        return h + (x if self.proj is None else self.proj(x))


def positional_table(rows: int, dim: int) -> np.ndarray:
    """Sinusoids ``PE[p, 2j] = sin(p 10000^(-2j/d))``, ``PE[p, 2j+1] = cos(...)``: f32 ``[rows, dim]``."""
    position = np.arange(rows, dtype=np.float64)[:, None]
    frequency = np.power(10000.0, -np.arange(0, dim, 2, dtype=np.float64) / dim)
    table = np.zeros((rows, dim), np.float64)
    table[:, 0::2] = np.sin(position * frequency)
    table[:, 1::2] = np.cos(position * frequency)
    return table.astype(np.float32)


class Encoder(nnx.Module):
    """Token embedding (normalised to norm ``sqrt(d_e)``) + sinusoids + residual conv blocks."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.config = config
        table = jax.random.normal(rngs.params(), (config.vocab_size, config.embed_dim))
        self.embedding = nnx.Param(table.at[config.pad_id].set(0.0))
        widths = [config.embed_dim] + [config.channel_dim] * (config.num_blocks - 1)
        widths.append(config.out_dim)
        self.blocks = nnx.List(
            [
                Block(widths[i], widths[i + 1], config.kernel_size, rngs=rngs)
                for i in range(config.num_blocks)
            ]
        )

    def embed(self, tokens: jax.Array) -> jax.Array:
        """Normalised token embeddings before positions: f32 ``[B, N, d_e]`` (pad rows 0)."""
        cfg = self.config
        e = self.embedding[...][tokens] * (tokens != cfg.pad_id)[..., None]
        norm = jnp.linalg.norm(e, axis=-1, keepdims=True)
        return math.sqrt(cfg.embed_dim) * e / jnp.maximum(norm, _NORM_MIN)

    def from_embeddings(self, e: jax.Array, mask: jax.Array) -> jax.Array:
        """Trunk features from normalised embeddings: ``[B, N, d_e] -> [B, N, d_o]``."""
        pe = positional_table(self.config.padded_length + 1, self.config.embed_dim)
        x = e + pe[: e.shape[-2]]
        for block in self.blocks:
            x = block(x, mask)
        return x

    def __call__(self, tokens: jax.Array) -> jax.Array:
        return self.from_embeddings(self.embed(tokens), tokens != self.config.pad_id)


class GenerativeHead(nnx.Module):
    """Per-position ``Linear(d_o -> 32, no bias)`` (identity if ``d_o == 32``) then ``Linear(32 -> V)``."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs) -> None:
        d, g = config.out_dim, config.gen_dim
        self.down = Conv(d, g, 1, bias=False, rngs=rngs) if d != g else None
        self.out = Conv(g, config.vocab_size, 1, bias=True, rngs=rngs)

    def __call__(self, h: jax.Array) -> jax.Array:
        return self.out(h if self.down is None else self.down(h))


class HeadMember(nnx.Module):
    """One discriminative member: ``Block(d_o -> 8)``, masked mean pooling, ``Linear(8 -> 2)``."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.branch = Block(config.out_dim, config.head_dim, config.kernel_size, rngs=rngs)
        self.leaf = Conv(config.head_dim, 2, 1, bias=True, rngs=rngs)

    def __call__(self, h: jax.Array, mask: jax.Array) -> jax.Array:
        f = self.branch(h, mask)
        m = mask[..., None].astype(f.dtype)
        pooled = (f * m).sum(-2) / jnp.maximum(m.sum(-2), 1.0)
        return self.leaf(pooled)


class Ensemble(nnx.Module):
    """``size`` members with stacked parameters (leading axis), created and applied by ``nnx.vmap``."""

    def __init__(self, config: ModelConfig, size: int, *, rngs: nnx.Rngs) -> None:
        @nnx.split_rngs(splits=size)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def create(rngs: nnx.Rngs) -> HeadMember:
            return HeadMember(config, rngs=rngs)

        self.members = create(rngs)

    def __call__(self, h: jax.Array, mask: jax.Array) -> jax.Array:
        """``[E, B, 2]`` outputs of every member."""

        @nnx.vmap(in_axes=(0, None, None), out_axes=0)
        def apply(member: HeadMember, h: jax.Array, mask: jax.Array) -> jax.Array:
            return member(h, mask)

        return apply(self.members, h, mask)


class Lambo2Model(nnx.Module):
    """The whole tree: ``encoder``, ``gen`` head, ``reg`` and ``cls`` ensembles."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.config = config
        self.encoder = Encoder(config, rngs=rngs)
        self.gen = GenerativeHead(config, rngs=rngs)
        self.reg = Ensemble(config, config.ensemble_size, rngs=rngs)
        self.cls = Ensemble(config, config.ensemble_size, rngs=rngs)

    def __call__(self, tokens: jax.Array) -> dict[str, jax.Array]:
        """``{"logits": [B,N,V], "reg": [E,B,2], "cls": [E,B,2]}`` on clean tokens."""
        mask = tokens != self.config.pad_id
        h = self.encoder(tokens)
        return {"logits": self.gen(h), "reg": self.reg(h, mask), "cls": self.cls(h, mask)}


# ---------------------------------------------------------------------------------------------
# Functional interface (pure dicts of arrays; used by train.py, design.py and kl_term.py)
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class GraphDefs:
    """Static graph definitions: encoder, generative head, one head member."""

    encoder: Any
    gen: Any
    member: Any


@functools.lru_cache(maxsize=32)
def graphdefs(config: ModelConfig) -> GraphDefs:
    """Graph definitions of the parts (no parameters are allocated)."""
    enc = nnx.eval_shape(lambda: Encoder(config, rngs=nnx.Rngs(0)))
    gen = nnx.eval_shape(lambda: GenerativeHead(config, rngs=nnx.Rngs(0)))
    mem = nnx.eval_shape(lambda: HeadMember(config, rngs=nnx.Rngs(0)))
    return GraphDefs(nnx.graphdef(enc), nnx.graphdef(gen), nnx.graphdef(mem))


@functools.partial(jax.jit, static_argnums=1)
def init_params(key: jax.Array, config: ModelConfig) -> Params:
    """Fresh parameters ``{"encoder", "gen", "reg", "cls"}`` (pure dicts; ensembles stacked ``[E, ...]``).

    Every member gets its own PRNG stream (as in cortex, diversity comes only from init and
    minibatch order; there is no bootstrap). Deterministic per ``key``.
    """
    model = Lambo2Model(config, rngs=nnx.Rngs(params=key))
    return nnx.to_pure_dict(nnx.state(model, nnx.Param))


def to_model(config: ModelConfig, params: Params) -> Lambo2Model:
    """An NNX ``Lambo2Model`` holding ``params``."""
    model = nnx.eval_shape(lambda: Lambo2Model(config, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    nnx.replace_by_pure_dict(state, params)
    return nnx.merge(graphdef, state)


def encoder_module(config: ModelConfig, params: Params) -> Encoder:
    return nnx.merge(graphdefs(config).encoder, params)


def gen_apply(config: ModelConfig, params: Params, h: jax.Array) -> jax.Array:
    """MLM logits ``[B, N, V]`` from trunk features."""
    return nnx.merge(graphdefs(config).gen, params)(h)


def member_apply(config: ModelConfig, params: Params, h: jax.Array, mask: jax.Array) -> jax.Array:
    """One member's ``[B, 2]`` output (``params`` without the ensemble axis)."""
    return nnx.merge(graphdefs(config).member, params)(h, mask)


def ensemble_apply(
    config: ModelConfig,
    params: Params,
    h: jax.Array,
    mask: jax.Array,
    *,
    unroll: bool | None = None,
) -> jax.Array:
    """All members: ``[E, B, 2]`` from the stacked parameters (leading ensemble axis).

    ``unroll=False`` vmaps one member over that axis (batched convolutions); ``unroll=True``
    applies the members one after another inside the same traced program. ``None`` (default)
    unrolls on the CPU backend only: XLA:CPU runs the vmapped (grouped) convolutions of the
    8-channel branches markedly slower, and the design step is dominated by them (measurements
    in ``docs/design/lambo2_port.md`` decision 2). Both give the same values to float32 rounding.
    """
    if unroll is None:
        unroll = jax.default_backend() == "cpu"
    if not unroll:
        return jax.vmap(lambda p: member_apply(config, p, h, mask))(params)
    size = jax.tree.leaves(params)[0].shape[0]
    members = [jax.tree.map(operator.itemgetter(i), params) for i in range(size)]
    return jnp.stack([member_apply(config, p, h, mask) for p in members])


def gaussian_from_natural(out: jax.Array, *, floor: bool = True) -> tuple[jax.Array, jax.Array]:
    """Regressor outputs ``(eta1, u)`` -> standardised ``(loc, var)`` (cortex ``RegressorLeaf``).

    ``eta2 = -2 log(1 + exp(u / 2))`` (softplus with beta 0.5), ``var = -1 / (2 eta2)`` floored at
    1e-4 when ``floor``, ``loc = eta1 * var``.
    """
    eta1, u = out[..., 0], out[..., 1]
    eta2 = -2.0 * jax.nn.softplus(0.5 * u)
    var = -1.0 / (2.0 * eta2)
    if floor:
        var = jnp.maximum(var, 1e-4)
    return eta1 * var, var


def num_parameters(params: Params) -> int:
    """Trainable parameter count (the frozen sinusoid table is not a parameter here)."""
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))


def pe_table_size(config: ModelConfig) -> int:
    """Size of cortex's frozen sinusoid table, ``(N + 1) * d_e`` (the paper's "314K" count)."""
    return (config.padded_length + 1) * config.embed_dim
