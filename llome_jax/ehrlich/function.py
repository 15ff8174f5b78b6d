"""Ehrlich functions: instance pytree, sampling (``make``), import (``from_holo``) and evaluation.

For a sequence ``x`` in ``V^L`` (paper Sec. 4.1 and App. A; semantics of pytorch-holo 0.0.5):

    f(x) = prod_{i=1..c} r(h_i(x))   if x is feasible,   -inf otherwise,

    h_i(x) = floor(max_{l=0..L-1-s_k} sum_j [x_{l+s_j} = m_j] / qf1) / qf2,
    qf1 = ceil(k/q),  qf2 = k/qf1,   r(h) = (a h (h-1) + 1) h,

and ``x`` is feasible iff ``A[x_{t-1}, x_t] > 0`` for all ``t`` (first state free).
When ``q`` divides ``k`` the quantisation equals the paper's ``floor(q * count / k) / q``.
Values are bit-identical float32 to the reference (left-to-right product in float32).

Evaluation layout (see BUILD.md, "Fast Ehrlich evaluation", and docs/design/ehrlich.md): the
batch is moved to the minor (lane) axis as ``[L, n]`` unsigned bytes (out-of-range tokens become
the sentinel ``v``; uint8 input is never widened), so each window compare is a contiguous vector
compare of a row slice with a scalar and windows are reduced with an elementwise max;
feasibility is one lookup per transition in a packed bit table; large batches are processed in
L1-sized chunks inside one ``lax.fori_loop``. A large host batch is split into equal parts that
run concurrently, one per CPU core the process may use (:func:`host_parts`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax import host_threads
from llome_jax.ehrlich.config import EhrlichConfig
from llome_jax.ehrlich.dmp import sample_chain, sample_transition_matrix, stationary_distribution

__all__ = [
    "Ehrlich",
    "bucket_size",
    "evaluate",
    "from_holo",
    "host_parts",
    "initial_solution",
    "is_feasible",
    "make",
    "motif_presence",
    "optimal_solution",
    "random_solution",
    "validate_tokens",
]


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["transition_matrix", "stationary_dist", "motifs", "offsets"],
    meta_fields=["config"],
)
@dataclasses.dataclass(frozen=True)
class Ehrlich:
    """One Ehrlich function instance (a pytree: arrays are leaves, ``config`` is static).

    Attributes:
      config: the static :class:`EhrlichConfig` (shapes, quantisation, epistasis).
      transition_matrix: float32 ``[v, v]``; zeros mark infeasible transitions.
      stationary_dist: float32 ``[v]``; law of motif and initial-solution chains.
      motifs: int32 ``[c, k]`` motif elements ``m^(i)``.
      offsets: int32 ``[c, k]`` the paper's spacing vectors ``s^(i)`` (``s_1 = 0``, increasing).
    """

    config: EhrlichConfig
    transition_matrix: jax.Array
    stationary_dist: jax.Array
    motifs: jax.Array
    offsets: jax.Array

    @property
    def spacings(self) -> jax.Array:
        """holo's representation: int32 ``[c, k-1]`` gaps between consecutive motif elements."""
        return jnp.diff(self.offsets, axis=-1)

    @property
    def name(self) -> str:
        """The paper's name of the configuration, e.g. ``"Ehr(32,32)-4-4-4"``."""
        return self.config.name

    @property
    def optimal_value(self) -> float:
        """The global maximum, always 1.0."""
        return 1.0

    #: ``to_json``'s format tag (a loadable instance, the transition matrix included).
    JSON_SCHEMA = "llome_jax.ehrlich/1"

    def to_json(self) -> dict[str, Any]:
        """The whole instance as JSON-ready data; :meth:`from_json` rebuilds it bit for bit
        (float32 values are written as exact decimal floats)."""
        cfg = self.config
        return {
            "schema": self.JSON_SCHEMA,
            "config": {
                "num_states": cfg.num_states,
                "dim": cfg.dim,
                "num_motifs": cfg.num_motifs,
                "motif_length": cfg.motif_length,
                "quantization": cfg.quantization,
                "epistasis_factor": cfg.epistasis_factor,
            },
            "transition_matrix": np.asarray(self.transition_matrix, np.float32).tolist(),
            "stationary_dist": np.asarray(self.stationary_dist, np.float32).tolist(),
            "motifs": np.asarray(self.motifs).tolist(),
            "offsets": np.asarray(self.offsets).tolist(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ehrlich:
        """An instance from :meth:`to_json`'s data (other keys, e.g. a description, are ignored).

        Raises:
          ValueError: another schema, or arrays inconsistent with the configuration.
        """
        if data.get("schema") != cls.JSON_SCHEMA:
            raise ValueError(
                f"not an Ehrlich instance file: schema {data.get('schema')!r}, expected "
                f"{cls.JSON_SCHEMA!r} (write one with Ehrlich.to_json or `llome-jax ehrlich "
                "describe --json`)"
            )
        config = EhrlichConfig(**data["config"])
        config.validate()
        v, c, k = config.num_states, config.num_motifs, config.motif_length
        matrix = np.asarray(data["transition_matrix"], np.float32)
        stationary = np.asarray(data["stationary_dist"], np.float32)
        motifs = np.asarray(data["motifs"], np.int32)
        offsets = np.asarray(data["offsets"], np.int32)
        expected = {"transition_matrix": (v, v), "stationary_dist": (v,), "motifs": (c, k)}
        for name, array in zip(expected, (matrix, stationary, motifs), strict=True):
            if array.shape != expected[name]:
                raise ValueError(f"{name} has shape {array.shape}, expected {expected[name]}")
        if offsets.shape != (c, k) or np.any(offsets[:, 0] != 0) or offsets.max() >= config.dim:
            raise ValueError(f"offsets must be [c, k] = {(c, k)}, start at 0 and fit in L")
        if motifs.min() < 0 or motifs.max() >= v:
            raise ValueError(f"motif states must lie in [0, {v})")
        return _build(config, matrix, stationary, motifs, offsets)

    def __repr__(self) -> str:
        try:
            motifs = np.asarray(self.motifs).tolist()
            spacings = np.asarray(self.spacings).tolist()
        except Exception:  # traced inside a transformation
            return f"Ehrlich({self.config.name}, <traced>)"
        return f"Ehrlich({self.config.name}, motifs={motifs}, spacings={spacings})"


# ---------------------------------------------------------------------------------------------
# Construction
# ---------------------------------------------------------------------------------------------
def make(key: jax.Array, config: EhrlichConfig) -> Ehrlich:
    """Sample an instance by the paper's procedure (App. A.3-A.4), as pytorch-holo does it.

    1. Transition matrix: banded mask (half-width ``int(0.4 v)``, wrapping), rows permuted,
       diagonal forced feasible, ``softmax(N(0,1) / 0.5)`` masked and renormalised; ergodicity
       checked (Perron-Frobenius).
    2. Motifs: one chain of length ``c k`` from the stationary distribution, chunked into ``c``.
    3. Spacings: per motif, ``w ~ U(0,1)^{k-1}`` normalised to sum 1 and
       ``gap_j = 1 + floor((L - c k) // c * w_j)`` (holo's formula); ``s = [0, cumsum(gap)]``.

    The instance is a deterministic function of ``key`` (not of holo's torch seed: the paper's own
    instances ship as data, see :func:`llome_jax.ehrlich.paper_function`).

    Raises:
      ValueError: for an impossible configuration (see :meth:`EhrlichConfig.validate`).
    """
    config.validate()
    v, c, k = config.num_states, config.num_motifs, config.motif_length
    key_matrix, key_motifs, key_spacings = jax.random.split(key, 3)
    matrix = sample_transition_matrix(key_matrix, v, config.bandwidth, softmax_temp=0.5)
    stationary = stationary_distribution(matrix)
    chain = np.asarray(sample_chain(key_motifs, matrix, stationary, c * k, 1))[0]
    motifs = chain.reshape(c, k)
    weights = np.asarray(jax.random.uniform(key_spacings, (c, k - 1), dtype=jnp.float32))
    weights = weights / weights.sum(axis=-1, keepdims=True) if k > 1 else weights
    gaps = 1 + np.floor(np.float32(config.slack // c) * weights).astype(np.int32)
    offsets = np.concatenate([np.zeros((c, 1), np.int32), np.cumsum(gaps, axis=-1)], axis=-1)
    return _build(config, matrix, stationary, motifs, offsets)


def from_holo(
    transition_matrix: Any,
    motifs: Any,
    spacings: Any,
    quantization: int | None = None,
    epistasis_factor: float = 0.0,
    *,
    dim: int | None = None,
    stationary_dist: Any = None,
) -> Ehrlich:
    """Import an explicit instance in pytorch-holo's representation.

    Args:
      transition_matrix: ``[v, v]`` row-stochastic matrix (numpy, torch or list).
      motifs: ``[c, k]`` (or a list of ``c`` length-``k`` tensors) of states.
      spacings: ``[c, k-1]``: holo's gaps between consecutive motif elements (each >= 1, no
        leading 0).
      quantization: ``q`` (``None`` means ``k``).
      epistasis_factor: ``a`` of the cubic response.
      dim: sequence length ``L``; default: the shortest length holding every motif end to end,
        ``sum_i (1 + sum(spacings_i))``.
      stationary_dist: optional ``[v]``; computed from the matrix if omitted.

    Raises:
      ValueError: for inconsistent shapes, states out of range or gaps < 1.
    """
    matrix = np.asarray(_to_numpy(transition_matrix), dtype=np.float32)
    motif_arr = np.asarray([_to_numpy(m) for m in motifs], dtype=np.int64)
    gap_arr = np.asarray([_to_numpy(s) for s in spacings], dtype=np.int64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"transition_matrix must be square [v, v], got shape {matrix.shape}.")
    if motif_arr.ndim != 2:
        raise ValueError(f"motifs must be [num_motifs, motif_length], got shape {motif_arr.shape}.")
    c, k = motif_arr.shape
    gap_arr = gap_arr.reshape(c, -1) if gap_arr.size else np.zeros((c, 0), np.int64)
    if gap_arr.shape != (c, k - 1):
        raise ValueError(
            f"spacings must be [num_motifs, motif_length - 1] = {(c, k - 1)} (holo's gaps, no "
            f"leading 0), got shape {gap_arr.shape}."
        )
    if np.any(gap_arr < 1):
        raise ValueError("every spacing gap must be >= 1.")
    v = matrix.shape[0]
    if motif_arr.min() < 0 or motif_arr.max() >= v:
        raise ValueError(f"motif states must lie in [0, {v}).")
    if np.any(matrix < 0) or not np.allclose(matrix.sum(-1), 1.0, atol=1e-4):
        raise ValueError("transition_matrix must be non-negative with rows summing to 1.")
    offsets = np.concatenate([np.zeros((c, 1), np.int64), np.cumsum(gap_arr, axis=-1)], axis=-1)
    if dim is None:
        dim = int(np.sum(offsets[:, -1] + 1))
    config = EhrlichConfig(
        num_states=v,
        dim=int(dim),
        num_motifs=c,
        motif_length=k,
        quantization=quantization,
        epistasis_factor=float(epistasis_factor),
    )
    if offsets[:, -1].max() >= config.dim:
        raise ValueError(f"a motif spans {offsets[:, -1].max() + 1} positions > dim={config.dim}.")
    stationary = (
        stationary_distribution(matrix)
        if stationary_dist is None
        else np.asarray(_to_numpy(stationary_dist), np.float32).reshape(-1)
    )
    return _build(config, matrix, stationary, motif_arr, offsets)


def _build(
    config: EhrlichConfig,
    matrix: np.ndarray,
    stationary: np.ndarray,
    motifs: np.ndarray,
    offsets: np.ndarray,
) -> Ehrlich:
    return Ehrlich(
        config=config,
        transition_matrix=jnp.asarray(matrix, jnp.float32),
        stationary_dist=jnp.asarray(stationary, jnp.float32),
        motifs=jnp.asarray(motifs, jnp.int32),
        offsets=jnp.asarray(offsets, jnp.int32),
    )


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor, without importing torch
        value = value.detach().cpu().numpy()
    return np.asarray(value)


# ---------------------------------------------------------------------------------------------
# Input validation (eager, before any jitted code)
# ---------------------------------------------------------------------------------------------
def validate_tokens(fn: Ehrlich, x: Any, *, what: str = "x") -> jax.Array:
    """Check that ``x`` is an integer array ``[..., L]`` of states in ``[0, v)``; return it.

    Shape and dtype are checked always (also for tracers); values only for concrete arrays.

    Raises:
      ValueError: naming the problem (float or one-hot input, wrong length, token out of range).
    """
    x = _checked_tokens(fn, x, what)
    # host data goes to the device with device_put: jnp.asarray compiles a conversion per shape
    return jax.device_put(x) if isinstance(x, np.ndarray) else x


def _checked_tokens(fn: Ehrlich, x: Any, what: str = "x") -> Any:
    """The checks of :func:`validate_tokens`; host data stays a NumPy array (no copy)."""
    cfg = fn.config
    if isinstance(x, list | tuple):
        x = np.asarray(x)
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        raise ValueError(
            f"{what} must be an integer array [..., {cfg.dim}], got {type(x).__name__}."
        )
    shape, dtype = tuple(x.shape), np.dtype(x.dtype)
    onehot_hint = ""
    if len(shape) >= 2 and shape[-2:] == (cfg.dim, cfg.num_states):
        onehot_hint = " It looks one-hot encoded [..., L, v]: pass x.argmax(-1) instead."
    if dtype == np.bool_ or not np.issubdtype(dtype, np.integer):
        raise ValueError(
            f"{what} must hold integer token ids in [0, {cfg.num_states}), got dtype {dtype}."
            + (onehot_hint or " Convert with x.astype(int) only if the values are exact integers.")
        )
    if len(shape) == 0 or shape[-1] != cfg.dim:
        raise ValueError(
            f"{what} must have shape [..., {cfg.dim}] for {cfg.name}, got {shape}." + onehot_hint
        )
    if isinstance(x, jax.core.Tracer):
        return x
    if isinstance(x, np.ndarray):
        if x.size:
            low, high = int(x.min()), int(x.max())
            _check_range(cfg, what, low, high)
        return x
    if x.size:
        try:
            low, high = (int(b) for b in _min_max(x))
        except jax.errors.ConcretizationTypeError:  # a concrete array closed over inside a trace
            host = np.asarray(x)
            low, high = int(host.min()), int(host.max())
        _check_range(cfg, what, low, high)
    return x


@jax.jit
def _min_max(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jnp.min(x), jnp.max(x)


def _check_range(cfg: EhrlichConfig, what: str, low: int, high: int) -> None:
    if low < 0 or high >= cfg.num_states:
        bad = low if low < 0 else high
        raise ValueError(f"{what} holds token {bad} outside [0, {cfg.num_states}) for {cfg.name}.")


# ---------------------------------------------------------------------------------------------
# Evaluation kernels (batch on the minor axis)
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


def _backend_of(x: Any) -> str:
    """The platform that will run the kernel on ``x``: that of a committed device array's
    devices, else (host data, tracers) ``jax.default_backend()``."""
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        try:
            return next(iter(x.devices())).platform
        except Exception:  # e.g. a deleted or abstract array: fall back to the default
            pass
    return jax.default_backend()


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


def bucket_size(n: int) -> int:
    """The padded batch size for ``n`` sequences: the smallest ``m * 2^k >= n`` with
    ``m in {4, 5, 6, 7}`` (``n`` itself below 8). At most 25 % padding, and ~4 compiled shapes
    per doubling of the batch instead of one per size.

    Example:
      >>> [bucket_size(n) for n in (1, 7, 8, 9, 1000, 1024, 1025, 1099)]
      [1, 7, 8, 10, 1024, 1024, 1280, 1280]
    """
    if n < 8:
        return max(int(n), 0)
    k = (int(n) - 1).bit_length() - 3  # 2^(k+2) < n <= 2^(k+3)
    step = 1 << k
    return -(-int(n) // step) * step


def _on_host(x: Any) -> bool:
    """NumPy data, or a jax array held by one CPU device (readable without a transfer)."""
    if isinstance(x, np.ndarray | list | tuple):
        return True
    if isinstance(x, jax.core.Tracer) or not isinstance(x, jax.Array):
        return False
    devices = x.devices()
    return len(devices) == 1 and next(iter(devices)).platform == "cpu"


def _prepare(fn: Ehrlich, x: Any) -> tuple[Any, int | None, tuple[int, ...]]:
    """Validate ``x``; host inputs ``[..., L]`` come back as NumPy ``[bucket_size(N), L]`` (the
    padding rows repeat the last real row) with ``N`` and the batch shape, so that a new batch
    size compiles nothing. Tracers and device arrays (e.g. sharded over a mesh) are only
    validated (``N = None``)."""
    if not _on_host(x):
        return validate_tokens(fn, x), None, ()
    host = _checked_tokens(fn, np.asarray(x))
    batch_shape = host.shape[:-1]
    n = int(np.prod(batch_shape, dtype=np.int64))
    flat = host.reshape(n, fn.config.dim)
    padded = bucket_size(n)
    if padded > n:
        flat = np.concatenate([flat, np.broadcast_to(flat[-1:], (padded - n, fn.config.dim))])
    return flat, n, batch_shape


def _finish(out: Any, n: int | None, batch_shape: tuple[int, ...]) -> jax.Array:
    """Drop the padding rows (on the host: slicing a device array would compile per size)."""
    if n is None:
        return out
    if isinstance(out, jax.core.Tracer):  # the instance is traced (e.g. vmapped over instances)
        return out[:n].reshape(batch_shape + out.shape[1:])
    host = np.asarray(out)[:n]
    return jax.device_put(host.reshape(batch_shape + host.shape[1:]))


#: A host batch is split only when every part has at least this many tokens (``rows * L``):
#: below it the threads' start-up and the extra dispatch cost more than the second core gives.
MIN_TOKENS_PER_PART = 1 << 18


def host_parts(n: int, length: int, cores: int | None = None) -> int:
    """Equal parts a padded host batch of ``n`` rows of ``length`` tokens is evaluated in,
    concurrently: the largest power of two ``p <= cores`` (default: the CPU cores this process
    may run on) that divides ``n`` and leaves each part :data:`MIN_TOKENS_PER_PART` tokens.

    One XLA:CPU computation works through its chunks on one thread (docs/design/ehrlich.md), but
    computations launched from different threads run at the same time, so ``p`` parts use ``p``
    cores. Every sequence is evaluated by the same kernel either way: results are identical.

    Example:
      >>> [host_parts(n, 32, cores=2) for n in (1024, 8192, 16384, 114688)]
      [1, 1, 2, 2]
      >>> host_parts(114688, 32, cores=1), host_parts(114688, 32, cores=8)
      (1, 8)
    """
    cores = host_threads.usable_cores() if cores is None else cores
    parts = 1
    while (
        parts * 2 <= cores
        and n % (parts * 2) == 0
        and (n // (parts * 2)) * length >= MIN_TOKENS_PER_PART
    ):
        parts *= 2
    return parts


def _run_host(
    kernel: Any, fn: Ehrlich, x: np.ndarray, chunk: int, threads: int | None = None
) -> Any:
    """``kernel(fn, x, chunk)`` on a padded NumPy batch, split over :func:`host_parts` threads
    (equal parts, so one compiled shape); the parts' results are joined on the host."""
    # the kernel runs on the default device: only XLA:CPU calls gain from threads
    parts = host_parts(x.shape[0], fn.config.dim, threads) if jax.default_backend() == "cpu" else 1
    if parts == 1:
        return kernel(fn, x, chunk)
    size = x.shape[0] // parts
    blocks = [jax.device_put(x[i * size : (i + 1) * size]) for i in range(parts)]
    results = host_threads.map_ordered(lambda b: np.asarray(kernel(fn, b, chunk)), blocks)
    return np.concatenate(results, axis=0)


def _dispatch(
    kernel: Any, fn: Ehrlich, x: Any, chunk_size: int | None, threads: int | None
) -> jax.Array:
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1 (or None: the usable cores), got {threads}.")
    x, n, batch_shape = _prepare(fn, x)
    chunk = chunk_size or default_chunk_size(fn.config, _backend_of(x))
    if n is None or isinstance(fn.transition_matrix, jax.core.Tracer):
        out = kernel(fn, x, chunk)
    else:
        out = _run_host(kernel, fn, x, chunk, threads)
    return _finish(out, n, batch_shape)


def evaluate(
    fn: Ehrlich, x: Any, *, chunk_size: int | None = None, threads: int | None = None
) -> jax.Array:
    """Ehrlich values ``f(x)`` (higher is better; ``-inf`` where infeasible).

    Jittable, vmappable and shardable over batch axes; inputs are validated eagerly (dtype,
    length, token range) when concrete. Inside a trace, out-of-range tokens count as infeasible.
    Host inputs (NumPy, or an array on one CPU device) are padded to :func:`bucket_size` rows
    (the padding's results are discarded), so calls with many batch sizes reuse a few compiled
    shapes, and a large one is split over the CPU cores (:func:`host_parts`). Inside ``jit`` one
    call runs on one core: shard the batch over a mesh of CPU devices to use more.

    Args:
      fn: the instance.
      x: integer ``[..., L]`` token ids in ``[0, v)``, any integer dtype (uint8 is transposed as
        it is, never widened; wider dtypes are narrowed to bytes first when ``v <= 255``).
      chunk_size: sequences per block (static; default :func:`default_chunk_size` for ``L`` and
        the backend that runs the kernel: L1-sized on CPU, 65,536 on a GPU/TPU).
      threads: at most this many concurrent parts for a host batch (default: the CPU cores this
        process may use; 1 evaluates it in one call). Results never depend on it.

    Returns:
      float32 ``[...]``.

    Example:
      >>> import jax, llome_jax.ehrlich as eh
      >>> fn = eh.paper_function("f2")
      >>> float(eh.evaluate(fn, eh.optimal_solution(fn)))
      1.0
    """
    return _dispatch(_evaluate, fn, x, chunk_size, threads)


def motif_presence(
    fn: Ehrlich, x: Any, *, chunk_size: int | None = None, threads: int | None = None
) -> jax.Array:
    """Quantised motif presence ``h_q(x, m^(i), s^(i))`` before the response: float32 ``[..., c]``.

    Computed for infeasible sequences too (as the reference does). Arguments as :func:`evaluate`.
    """
    return _dispatch(_motif_presence, fn, x, chunk_size, threads)


def is_feasible(
    fn: Ehrlich, x: Any, *, chunk_size: int | None = None, threads: int | None = None
) -> jax.Array:
    """Whether each sequence has non-zero probability under the DMP: bool ``[...]``. Arguments
    as :func:`evaluate`."""
    return _dispatch(_is_feasible, fn, x, chunk_size, threads)


# ---------------------------------------------------------------------------------------------
# Special solutions
# ---------------------------------------------------------------------------------------------
def optimal_solution(fn: Ehrlich) -> jax.Array:
    """holo's constructive optimum: motifs placed end to end, gaps filled with repeats.

    Each motif occupies ``s_k + 1`` positions (element ``j`` at offset ``s_j``, every other
    position repeats the previous element); the tail repeats the last state. Transitions are then
    chain transitions of the motif sample or self-transitions, so the sequence is feasible.

    Returns:
      int32 ``[L]`` with ``evaluate(fn, x) == 1.0``.
    """
    motifs = np.asarray(fn.motifs)
    offsets = np.asarray(fn.offsets)
    length = fn.config.dim
    solution = []
    for motif, offset in zip(motifs, offsets):
        element = -1
        for position in range(int(offset[-1]) + 1):
            hits = np.nonzero(offset == position)[0]
            if hits.size:
                element = int(motif[hits[0]])
            solution.append(element)
    if len(solution) > length:
        raise ValueError(f"motifs end to end need {len(solution)} positions > dim={length}.")
    solution += [solution[-1]] * (length - len(solution))
    result = jnp.asarray(solution, jnp.int32)
    value = float(evaluate(fn, result))
    if value != 1.0:
        raise RuntimeError(
            f"the constructed optimum scores {value}, not 1.0: the instance is invalid."
        )
    return result


def initial_solution(key: jax.Array, fn: Ehrlich, n: int = 1) -> jax.Array:
    """``n`` chain samples of length ``L`` from the stationary law (feasible): int32 ``[n, L]``."""
    return sample_chain(key, fn.transition_matrix, fn.stationary_dist, fn.config.dim, n)


def random_solution(key: jax.Array, fn: Ehrlich, n: int = 1) -> jax.Array:
    """``n`` uniform random sequences (almost always infeasible for large ``v``): int32 ``[n, L]``."""
    return jax.random.randint(key, (n, fn.config.dim), 0, fn.config.num_states, dtype=jnp.int32)
