"""The Ehrlich evaluation kernel: jitted values, motif presence and feasibility of a batch.

Layout (see BUILD.md, "Fast Ehrlich evaluation", and docs/design/ehrlich.md): the batch is moved
to the minor (lane) axis as ``[L, n]`` unsigned bytes (out-of-range tokens become the sentinel
``v``; uint8 input is never widened), so each window compare is a contiguous vector compare of a
row slice with a scalar and windows are reduced with an elementwise max; feasibility is one
lookup per transition in a packed bit table; large batches are processed in L1-sized chunks
(:func:`default_chunk_size`) inside one ``lax.fori_loop``. The jitted entry points
(``_evaluate``, ``_motif_presence``, ``_is_feasible``: ``(fn, x [..., L], chunk_size)``) assume
validated input; the public, validating functions are :mod:`llome_jax.ehrlich.dispatch`.
Values are bit-identical float32 to pytorch-holo 0.0.5 (left-to-right product in float32).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp

from llome_jax.ehrlich.config import EhrlichConfig
from llome_jax.ehrlich.function import Ehrlich

__all__ = [
    "ACCELERATOR_BLOCK_BYTES",
    "ACCELERATOR_CHUNK",
    "default_chunk_size",
]


# ---------------------------------------------------------------------------------------------
# Lane kernels (batch on the minor axis)
# ---------------------------------------------------------------------------------------------
#: XLA's CPU compiler rewrites a reduction over more than 32 elements into reduce-windows, several
#: times slower than a plain reduce; ``_reduce_rows`` therefore reduces at most this many rows at
#: a time.
_REDUCE_BLOCK = 32


def _token_dtype(config: EhrlichConfig) -> jnp.dtype:
    """Unsigned lane dtype holding every state and the sentinel ``v``."""
    v = config.num_states
    return jnp.dtype(jnp.uint8 if v <= 0xFF else jnp.uint16 if v <= 0xFFFF else jnp.uint32)


def _count_dtype(config: EhrlichConfig) -> jnp.dtype:
    return jnp.dtype(jnp.uint8 if config.motif_length <= 0xFF else jnp.uint16)


def _narrow(fn: Ehrlich, x: jax.Array) -> jax.Array:
    """Integer tokens -> :func:`_token_dtype` tokens (same shape); tokens outside ``[0, v)`` become
    the sentinel ``v``.

    ``x`` is reinterpreted as unsigned at its own width (two's complement: negative tokens become
    large) and clamped with one ``min(x, v)``, then narrowed; uint8 input is never widened.
    """
    v = fn.config.num_states
    unsigned = jnp.dtype(f"uint{jnp.iinfo(x.dtype).bits}")
    narrow = x.astype(unsigned) if x.dtype != unsigned else x
    if v <= jnp.iinfo(unsigned).max:
        narrow = jnp.minimum(narrow, jnp.asarray(v, unsigned))
    return narrow.astype(_token_dtype(fn.config))


def _to_lanes(fn: Ehrlich, x: jax.Array) -> jax.Array:
    """``[n, L]`` integer tokens -> ``[L, n]`` narrow unsigned tokens (:func:`_narrow`), narrowed
    before the transpose so that one byte per token is moved (for ``v <= 255``)."""
    return _narrow(fn, x).T


def _padded_lanes(fn: Ehrlich, x: jax.Array) -> jax.Array:
    """``[n, L]`` tokens -> ``[2L, n]``: :func:`_to_lanes` followed by ``L`` rows of the sentinel
    ``v`` (which equals no motif state), so a window that overhangs the end reads sentinels.

    An optimisation barrier materialises the block once; without it XLA re-transposes the input
    inside every consumer fusion.
    """
    xt = _to_lanes(fn, x)
    sentinel = jnp.full(xt.shape, fn.config.num_states, xt.dtype)
    return jax.lax.optimization_barrier(jnp.concatenate([xt, sentinel], axis=0))


def _reduce_rows(x: jax.Array, op: Any, init: Any) -> jax.Array:
    """``op``-reduce ``x`` ``[R, ...]`` over axis 0 in blocks of at most ``_REDUCE_BLOCK`` rows
    (same result as one reduce for the associative, commutative, exact ops used here)."""
    init = jnp.asarray(init, x.dtype)
    while x.shape[0] > _REDUCE_BLOCK:
        full = x.shape[0] // _REDUCE_BLOCK * _REDUCE_BLOCK
        blocks = x[:full].reshape(full // _REDUCE_BLOCK, _REDUCE_BLOCK, *x.shape[1:])
        head = jax.lax.reduce(blocks, init, op, (1,))
        if full < x.shape[0]:
            tail = jax.lax.reduce(x[full:], init, op, (0,))
            head = jnp.concatenate([head, tail[None]], axis=0)
        x = head
    return jax.lax.reduce(x, init, op, (0,))


def _lane_levels(fn: Ehrlich, padded: jax.Array) -> jax.Array:
    """Integer quantised motif levels ``max_l count_l // qf1`` for ``padded`` ``[2L, n]``
    (:func:`_padded_lanes`): ``[c, n]``.

    ``count_l = sum_j [x_{l + s_j} = m_j]`` for every window start ``l < L`` at once: row slice
    ``padded[s_j : s_j + L]`` compared with the scalar ``m_j`` (offsets stay traced data). Windows
    with ``l > L-1-s_k`` (never considered by holo) are masked to 0 before the max.
    """
    cfg = fn.config
    length, n = padded.shape[0] // 2, padded.shape[1]
    count_dtype = _count_dtype(cfg)
    window_start = jnp.arange(length, dtype=jnp.int32)[:, None]
    motifs = fn.motifs.astype(padded.dtype)
    counts = []
    for i in range(cfg.num_motifs):
        count = jnp.zeros((length, n), count_dtype)
        for j in range(cfg.motif_length):
            rows = jax.lax.dynamic_slice_in_dim(padded, fn.offsets[i, j], length, axis=0)
            count = count + (rows == motifs[i, j]).astype(count_dtype)
        in_range = window_start <= (length - 1 - fn.offsets[i, -1])
        counts.append(jnp.where(in_range, count, jnp.zeros((), count_dtype)))
    best = _reduce_rows(jnp.stack(counts, axis=1), jax.lax.max, 0)  # [L, c, n] -> [c, n]
    return best // jnp.asarray(cfg.quant_divisor, count_dtype)


def _transition_bits(fn: Ehrlich) -> tuple[jax.Array, int]:
    """The feasible transitions as a bit table: uint32 ``[(v + 1) W + 1]`` and ``W = ceil(v/32)``.

    Bit ``b % 32`` of word ``a W + b // 32`` is ``A[a, b] > 0``; row ``v`` (the sentinel) and the
    trailing word are 0, so a sentinel predecessor is never feasible and every index formed from
    tokens in ``[0, v]`` is in bounds.
    """
    v = fn.config.num_states
    words = -(-v // 32)
    allowed = fn.transition_matrix > 0
    allowed = jnp.pad(allowed, ((0, 1), (0, words * 32 - v))).reshape(v + 1, words, 32)
    weights = jnp.left_shift(jnp.uint32(1), jnp.arange(32, dtype=jnp.uint32))
    table = jnp.sum(jnp.where(allowed, weights, jnp.uint32(0)), axis=-1, dtype=jnp.uint32)
    return jnp.concatenate([table.reshape(-1), jnp.zeros((1,), jnp.uint32)]), words


def _lane_feasible(fn: Ehrlich, padded: jax.Array) -> jax.Array:
    """``A[x_{t-1}, x_t] > 0`` for all t, and every token in range: bool ``[n]``.

    One table lookup per transition, ``word = T[x_{t-1} W + x_t // 32]``, then bit ``x_t % 32``
    (:func:`_transition_bits`; one 132-byte table for ``v = 32``); the bits are AND-reduced over
    ``t``. A sentinel (out-of-range) token at ``t < L-1`` is the predecessor of the next
    transition, whose table row is 0; the last token is checked explicitly.
    """
    v = fn.config.num_states
    length = padded.shape[0] // 2
    last_in_range = padded[length - 1] < v
    if length == 1:
        return last_in_range
    table, words = _transition_bits(fn)
    prev, nxt = padded[: length - 1], padded[1:length]
    index = prev.astype(jnp.int32)
    if words > 1:
        index = index * words + (nxt >> 5).astype(jnp.int32)
    bits = table.at[index].get(mode="promise_in_bounds") >> (nxt & 31).astype(jnp.uint32)
    ok = _reduce_rows(bits, jax.lax.bitwise_and, 0xFFFFFFFF) & jnp.uint32(1)
    return (ok != 0) & last_in_range


def _levels_to_presence(cfg: EhrlichConfig, levels: jax.Array) -> jax.Array:
    return levels.astype(jnp.float32) / jnp.float32(cfg.quant_scale)


def _response(cfg: EhrlichConfig, h: jax.Array) -> jax.Array:
    """holo's ``_cubic_response``: ``((a h)(h - 1) + 1) h`` in float32."""
    a = jnp.float32(cfg.epistasis_factor)
    return ((a * h) * (h - jnp.float32(1.0)) + jnp.float32(1.0)) * h


def _lane_values(fn: Ehrlich, padded: jax.Array) -> jax.Array:
    cfg = fn.config
    responses = _response(cfg, _levels_to_presence(cfg, _lane_levels(fn, padded)))
    product = responses[0]
    for i in range(1, cfg.num_motifs):  # left to right, float32, as the reference
        product = product * responses[i]
    return jnp.where(_lane_feasible(fn, padded), product, -jnp.inf)


#: Accelerator (GPU/TPU) chunk: at most this many sequences per chunk ...
ACCELERATOR_CHUNK = 1 << 16

#: ... and at most this many bytes in one padded ``[2L, chunk]`` uint8 block (16 MiB: f4's block,
#: ``L = 128``, at 65,536 sequences, the largest measured).
ACCELERATOR_BLOCK_BYTES = 1 << 24


def default_chunk_size(config: EhrlichConfig, backend: str | None = None) -> int:
    """The ``chunk_size`` used when none is given, for the backend that runs the kernel.

    * ``"cpu"``: sequences per chunk so that one ``[L, chunk]`` uint8 block is ~16 KiB (half an
      L1 cache): 512 for ``L = 32``, 128 for ``L = 128``. On the 2-core EPYC 16 and 32 KiB were
      equally fast and 64 KiB about 2x slower, so the smaller size keeps a margin below that cliff.
    * any other backend (``"gpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``): the largest power of two
      ``<= min(ACCELERATOR_CHUNK, ACCELERATOR_BLOCK_BYTES / (2 L))``, at least 1024: 65,536 for
      every paper instance (``L <= 128``). On an H100 at batch 1e7 the CPU default (512 / 128)
      reached 6.4e7 seq/s on f2 (~2e4 sequential loop steps over tiny blocks); 65,536
      reached 1.36e9 (f2) and 1.39e8 (f4); the whole batch as one block 1.55e9 on f2 but only
      6.4e7 on f4, whose whole-batch intermediates are huge (the stacked ``[L, c, N]`` byte
      counts alone are 10 GB at ``N = 1e7``). A fixed 65,536 keeps 88 % of the one-block speed
      on f2 and is 2.2x faster than one block on f4, with a working set independent of ``N``;
      the block cap keeps a longer ``L``'s padded block at f4's measured 16 MiB (an unmeasured
      extrapolation).

    Values never depend on the chunk size (bit for bit), only speed and peak memory do.

    Args:
      config: the instance's configuration (only ``dim`` = ``L`` is used).
      backend: a JAX platform name; default ``jax.default_backend()``.

    Example:
      >>> cfg = EhrlichConfig(num_states=32, dim=128, num_motifs=8, motif_length=8)
      >>> default_chunk_size(cfg, "cpu"), default_chunk_size(cfg, "gpu")
      (128, 65536)
    """
    backend = jax.default_backend() if backend is None else backend
    if backend == "cpu":
        target = max(64, min(16384, (1 << 14) // config.dim))
    else:
        target = max(1024, min(ACCELERATOR_CHUNK, ACCELERATOR_BLOCK_BYTES // (2 * config.dim)))
    return 1 << int(math.log2(target))


# ---------------------------------------------------------------------------------------------
# Chunked, jitted entry points
# ---------------------------------------------------------------------------------------------
def _chunked(lane_fn, fn: Ehrlich, x2d: jax.Array, out_shape: tuple[int, ...], dtype, chunk: int):
    """Apply ``lane_fn(fn, [2L, n]) -> [..., n]`` (:func:`_padded_lanes` blocks) to ``x2d``
    ``[N, L]`` in chunks; returns ``[..., N]``.

    The last chunk is clamped to end at ``N`` (overlapping its predecessor; overlapping entries are
    recomputed identically), so no padded copy of the input is ever made.
    """
    total = x2d.shape[0]
    if x2d.dtype != _token_dtype(fn.config):
        # Wider input (e.g. int32) is narrowed once, row-major, before the loop: inside it XLA
        # fuses the conversion into the transpose, which then reads the wide input with a stride
        # of L elements (measured 2-4x slower on f2/f4). Costs N*L bytes for the narrow copy.
        x2d = jax.lax.optimization_barrier(_narrow(fn, x2d))
    if total <= chunk:
        return lane_fn(fn, _padded_lanes(fn, x2d))
    num_chunks = -(-total // chunk)

    def body(index: jax.Array, out: jax.Array) -> jax.Array:
        start = jnp.minimum(index * chunk, total - chunk)
        block = jax.lax.dynamic_slice_in_dim(x2d, start, chunk, axis=0)
        result = lane_fn(fn, _padded_lanes(fn, block))
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


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def _motif_presence(fn: Ehrlich, x: jax.Array, chunk_size: int) -> jax.Array:
    cfg = fn.config
    batch_shape = x.shape[:-1]
    x2d = x.reshape(-1, cfg.dim)

    def lane_fn(f: Ehrlich, padded: jax.Array) -> jax.Array:
        return _levels_to_presence(f.config, _lane_levels(f, padded))

    presence = _chunked(lane_fn, fn, x2d, (cfg.num_motifs,), jnp.float32, chunk_size)
    return presence.T.reshape(*batch_shape, cfg.num_motifs)


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def _is_feasible(fn: Ehrlich, x: jax.Array, chunk_size: int) -> jax.Array:
    batch_shape = x.shape[:-1]
    x2d = x.reshape(-1, fn.config.dim)
    return _chunked(_lane_feasible, fn, x2d, (), jnp.bool_, chunk_size).reshape(batch_shape)
