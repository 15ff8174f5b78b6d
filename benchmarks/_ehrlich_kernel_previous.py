"""The Ehrlich evaluation kernel as of commit 1d0cbbf (before the uint8 / bit-table kernel), kept
only so that benchmarks can time old and new kernels side by side in one process.

Not part of the package API; values are bit-identical to llome_jax.ehrlich.evaluate.
"""
# ruff: noqa

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from llome_jax.ehrlich.config import EhrlichConfig
from llome_jax.ehrlich.function import Ehrlich


def _token_dtype(config: EhrlichConfig) -> jnp.dtype:
    return jnp.int8 if config.num_states <= 127 else jnp.int16


def _count_dtype(config: EhrlichConfig) -> jnp.dtype:
    return jnp.int8 if config.motif_length <= 127 else jnp.int16


def _to_lanes(fn: Ehrlich, x: jax.Array) -> jax.Array:
    """``[n, L]`` integer tokens -> ``[L, n]`` narrow ints; out-of-range tokens become -1."""
    v = fn.config.num_states
    x = jnp.where((x >= 0) & (x < v), x, -1)
    return x.T.astype(_token_dtype(fn.config))


def _lane_levels(fn: Ehrlich, xt: jax.Array) -> jax.Array:
    """Integer quantised motif levels ``max_l count_l // qf1`` for ``xt`` ``[L, n]``: ``[c, n]``."""
    cfg = fn.config
    length, n = xt.shape
    count_dtype = _count_dtype(cfg)
    # Rows past the end read a sentinel that never equals a motif state.
    padded = jnp.concatenate([xt, jnp.full((length, n), -1, xt.dtype)], axis=0)
    window_start = jnp.arange(length, dtype=jnp.int32)[:, None]
    motifs = fn.motifs.astype(xt.dtype)
    levels = []
    for i in range(cfg.num_motifs):
        count = jnp.zeros((length, n), count_dtype)
        for j in range(cfg.motif_length):
            rows = jax.lax.dynamic_slice_in_dim(padded, fn.offsets[i, j], length, axis=0)
            count = count + (rows == motifs[i, j]).astype(count_dtype)
        # Windows that would overhang the end are never considered (holo's l <= L-1-s_k).
        in_range = window_start <= (length - 1 - fn.offsets[i, -1])
        best = jnp.max(jnp.where(in_range, count, jnp.zeros((), count_dtype)), axis=0)
        levels.append(best // jnp.asarray(cfg.quant_divisor, count_dtype))
    return jnp.stack(levels)


def _lane_feasible(fn: Ehrlich, xt: jax.Array) -> jax.Array:
    """``A[x_{t-1}, x_t] > 0`` for all t, and every token in range: bool ``[n]``."""
    v = fn.config.num_states
    allowed = (fn.transition_matrix > 0).reshape(-1)
    in_range = jnp.all(xt >= 0, axis=0)
    if xt.shape[0] == 1:
        return in_range
    prev = jnp.clip(xt[:-1].astype(jnp.int32), 0, v - 1)
    nxt = jnp.clip(xt[1:].astype(jnp.int32), 0, v - 1)
    return in_range & jnp.all(allowed[prev * v + nxt], axis=0)


def _levels_to_presence(cfg: EhrlichConfig, levels: jax.Array) -> jax.Array:
    return levels.astype(jnp.float32) / jnp.float32(cfg.quant_scale)


def _response(cfg: EhrlichConfig, h: jax.Array) -> jax.Array:
    """holo's ``_cubic_response``: ``((a h)(h - 1) + 1) h`` in float32."""
    a = jnp.float32(cfg.epistasis_factor)
    return ((a * h) * (h - jnp.float32(1.0)) + jnp.float32(1.0)) * h


def _lane_values(fn: Ehrlich, xt: jax.Array) -> jax.Array:
    cfg = fn.config
    responses = _response(cfg, _levels_to_presence(cfg, _lane_levels(fn, xt)))
    product = responses[0]
    for i in range(1, cfg.num_motifs):  # left to right, float32, as the reference
        product = product * responses[i]
    return jnp.where(_lane_feasible(fn, xt), product, -jnp.inf)


def default_chunk_size(config: EhrlichConfig) -> int:
    """Sequences per chunk so that one ``[L, chunk]`` int8 block is ~128 KiB (L2-resident)."""
    target = max(256, min(16384, (1 << 17) // config.dim))
    return 1 << int(math.log2(target))


def _chunked(lane_fn, fn: Ehrlich, x2d: jax.Array, out_shape: tuple[int, ...], dtype, chunk: int):
    """Apply ``lane_fn(fn, [L, n]) -> [..., n]`` to ``x2d`` ``[N, L]`` in chunks; returns ``[..., N]``.

    The last chunk is clamped to end at ``N`` (overlapping its predecessor; overlapping entries are
    recomputed identically), so no padded copy of the input is ever made.
    """
    total = x2d.shape[0]
    if total <= chunk:
        return lane_fn(fn, _to_lanes(fn, x2d))
    num_chunks = -(-total // chunk)

    def body(index: jax.Array, out: jax.Array) -> jax.Array:
        start = jnp.minimum(index * chunk, total - chunk)
        block = jax.lax.dynamic_slice_in_dim(x2d, start, chunk, axis=0)
        result = lane_fn(fn, _to_lanes(fn, block))
        return jax.lax.dynamic_update_slice_in_dim(out, result, start, axis=out.ndim - 1)

    # Derived from the input (not jnp.zeros) so it carries the input's varying manual axes when
    # evaluated per shard under shard_map.
    out = jnp.broadcast_to(jnp.zeros_like(x2d[:, 0], dtype=dtype), (*out_shape, total))
    return jax.lax.fori_loop(0, num_chunks, body, out)


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def _evaluate(fn: Ehrlich, x: jax.Array, chunk_size: int) -> jax.Array:
    batch_shape = x.shape[:-1]
    x2d = x.reshape(-1, fn.config.dim)
    values = _chunked(_lane_values, fn, x2d, (), jnp.float32, chunk_size)
    return values.reshape(batch_shape)


def evaluate_previous(fn: Ehrlich, x: jax.Array) -> jax.Array:
    """The previous kernel with its own default chunk size (jitted; ``x`` a device array)."""
    return _evaluate(fn, x, default_chunk_size(fn.config))
