"""Exact k nearest neighbours under the Hamming distance: bit-packed, blocked, in JAX.

PropEn dataset formatting (paper App. "Algorithms", Alg. DatasetFormatting) needs, for every
sequence ``x_i`` of a set of ``N`` sequences of length ``L``, its ``k_n`` nearest neighbours under
the fractional Hamming distance ``d(x, y) = |{l : x_l != y_l}| / L``, restricted to
``d <= Delta_x``. The reference uses PyNNDescent (approximate, unseeded); we compute the **exact**
answer with a deterministic order:

* slot 0 is always the row itself (distance 0), as PyNNDescent's query of a fitted set returns it;
* slots ``1 .. k-1`` hold the nearest *other* rows ordered by ``(distance, index)``: ties at the
  ``k``-th boundary go to the lower row index (reorder the rows to change that);
* rows farther than ``Delta_x`` are never listed; unused slots hold index ``-1``.

Because distances are sorted, "k nearest, then keep those within ``Delta_x``" and "within
``Delta_x``, then the k nearest" give the same set; we do the latter.

Algorithm (all of it in one jitted function per block of query rows):

1. **Bit planes.** Tokens ``< 2**b`` are split into ``b`` bit planes, each packed into
   ``W = ceil(L / 32)`` uint32 words per sequence. Two sequences differ at position ``l`` iff any
   plane differs there, so ``d(x, y) = sum_w popcount(OR_p (x_pw XOR y_pw))``: ``b * W`` XORs for
   ``L`` positions (``5`` words for f2, ``20`` for ``L = 128``).
2. **Unique sort keys.** For query ``i`` and candidate ``j``, ``key = d * N + j + 1`` (``0`` for
   ``j = i``, a sentinel for ``d > Delta_x``); keys are unique per row, so "the k smallest keys" is
   exactly the neighbour list above.
3. **Two-stage top-k.** Candidates are split into ``G`` groups of ``C`` rows
   (group ``g = {t * G + g}``). Stage 1 streams over the ``C`` members of every group and keeps the
   per-group minimum key, ``[B, G]`` (never materialising the ``[B, N]`` distance matrix). Stage 2
   takes the ``k`` groups with the smallest minima. Since keys are unique, the ``k`` smallest keys of
   a row all lie in those ``k`` groups (if one lay in another group, the ``k`` chosen groups would
   each hold a smaller key). Stage 3 recomputes the ``k * C`` candidates of the chosen groups and
   takes the exact top ``k``. Both top-k calls run on float32 bit patterns of the integer keys
   (order preserving), which XLA:CPU serves with its fast partial-sort kernel.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

__all__ = ["HammingNeighbours", "hamming_neighbours", "max_differences"]

#: Upper bound on candidates per group in the two-stage top-k (see module docstring).
_MAX_GROUP_SIZE = 32
#: Plane words loaded per element of the stage-1 loop; beyond ~160 XLA:CPU's LLVM stops
#: vectorising it (measured: 5 planes x 32 members and 20 x 8 vectorise, 8 x 32 does not).
_MAX_LOADS_PER_ELEMENT = 160
#: Sentinel key for "no neighbour"; ``_SENTINEL + _KEY_OFFSET`` is the bit pattern of +inf.
_SENTINEL = 0x7F000000
#: Added before bit-casting keys to float32 so that every key is a normal (not denormal) float.
_KEY_OFFSET = 1 << 23


@dataclasses.dataclass(frozen=True)
class HammingNeighbours:
    """Fixed-capacity neighbour table (numpy arrays).

    Attributes:
      index: int32 ``[N, k]``; ``index[i, 0] == i``; ``-1`` marks an empty slot (fewer than
        ``k - 1`` other rows within the distance threshold).
      distance: int32 ``[N, k]`` number of differing positions (``-1`` on empty slots).
      length: the sequence length ``L`` (``distance / L`` is the fractional Hamming distance).
    """

    index: np.ndarray
    distance: np.ndarray
    length: int

    @property
    def valid(self) -> np.ndarray:
        """bool ``[N, k]``: slot holds a neighbour (slot 0, the row itself, always does)."""
        return self.index >= 0

    @property
    def fraction(self) -> np.ndarray:
        """float32 ``[N, k]`` fractional Hamming distance (NaN on empty slots)."""
        out = self.distance.astype(np.float32) / np.float32(self.length)
        return np.where(self.valid, out, np.float32(np.nan))


def max_differences(length: int, max_distance: float) -> int:
    """Largest number of differing positions ``c`` with ``c / L <= max_distance``.

    Evaluated with the same float division as scipy / PyNNDescent's fractional Hamming distance,
    so the threshold is inclusive exactly as in the reference (``8 / 32 <= 0.25``).
    """
    if not 0.0 <= max_distance <= 1.0:
        raise ValueError(
            f"max_distance is a fraction of the length, in [0, 1]; got {max_distance}."
        )
    return max(c for c in range(length + 1) if c / length <= max_distance)


def _validate_sequences(sequences: Any, num_states: int | None) -> tuple[np.ndarray, int]:
    x = np.asarray(sequences)
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(
            f"sequences must be an integer array [N, L] with L >= 1; got shape {x.shape}."
        )
    if x.dtype == np.bool_ or not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"sequences must hold integer token ids; got dtype {x.dtype}.")
    if x.size and int(x.min()) < 0:
        raise ValueError("sequences must hold non-negative token ids.")
    observed = int(x.max()) + 1 if x.size else 1
    if num_states is None:
        num_states = observed
    elif observed > num_states:
        raise ValueError(f"sequences hold token {observed - 1} >= num_states={num_states}.")
    return x, max(int(num_states), 1)


def _pack_bitplanes(x: np.ndarray, num_bits: int) -> np.ndarray:
    """int ``[N, L]`` -> uint32 ``[N, num_bits, W]``: bit ``p`` of every token, 32 positions a word."""
    n, length = x.shape
    words = -(-length // 32)
    planes = (x[:, None, :].astype(np.int64) >> np.arange(num_bits)[None, :, None]) & 1
    padded = np.zeros((n, num_bits, words * 32), np.uint8)
    padded[:, :, :length] = planes
    packed = np.packbits(padded, axis=-1, bitorder="little")  # [N, bits, 4 W] uint8
    return np.ascontiguousarray(packed).view("<u4").astype(np.uint32)


def _group_size(words_per_sequence: int) -> int:
    """Members per group: the largest power of two with ``words * C <= 160`` (at most 32)."""
    size = _MAX_GROUP_SIZE
    while size > 1 and size * words_per_sequence > _MAX_LOADS_PER_ELEMENT:
        size //= 2
    return size


def padded_size(count: int) -> int:
    """``count`` rounded up to a number with at most four significant bits (``1, ..., 16, 18,
    ..., 32, 36, ..., 64, 72, ...``): at most 12.5 % padding, and about 8 compiled shapes per
    doubling instead of one per size (a pretraining pool of 1,000 GA archives of different
    sizes otherwise compiles a block per archive, past the kernel's memory-mapping limit)."""
    if count <= 16:
        return max(count, 1)
    step = 1 << (count.bit_length() - 4)
    return -(-count // step) * step


def _ordered_float(key: jax.Array) -> jax.Array:
    """Order-preserving map of non-negative int32 keys to float32 (exact, via the bit pattern)."""
    return jax.lax.bitcast_convert_type(key + _KEY_OFFSET, jnp.float32)


def _ordered_int(value: jax.Array) -> jax.Array:
    return jax.lax.bitcast_convert_type(value, jnp.int32) - _KEY_OFFSET


def _neighbour_block(
    queries: jax.Array,
    candidates: jax.Array,
    rows: jax.Array,
    row_ids: jax.Array,
    num_rows: jax.Array,
    *,
    num_groups: int,
    group_size: int,
    k: int,
    max_diff: int,
) -> tuple[jax.Array, jax.Array]:
    """k smallest keys of one block of query rows.

    Args:
      queries: uint32 ``[bits, W, B]`` bit planes of the block's query rows.
      candidates: uint32 ``[C, bits, W, G]``; candidate ``j = t * G + g`` sits at ``[t, :, :, g]``.
      rows: uint32 ``[G * C, bits, W]`` the same planes, one row per candidate (for stage 3).
      row_ids: int32 ``[B]`` global index of each query row (to recognise itself).
      num_rows: int32 scalar ``N``, the real rows (traced: candidates ``>= N`` are padding, so
        one compiled block serves every ``N`` of a shape bucket, :func:`padded_size`).

    Returns:
      ``(index, distance)`` int32 ``[B, k]`` (``-1`` on empty slots).
    """
    num_bits, num_words, block = queries.shape
    n = num_rows.astype(jnp.int32)
    group_ids = jnp.arange(num_groups, dtype=jnp.int32)[None, :]
    self_ids = row_ids[:, None]

    def keys(dist: jax.Array, cand: jax.Array, me: jax.Array) -> jax.Array:
        key = jnp.where((dist > max_diff) | (cand >= n), _SENTINEL, dist * n + cand + 1)
        return jnp.where(cand == me, 0, key)

    # Stage 1: per-group minimum key over the C members, statically unrolled so that XLA emits
    # one elementwise loop over [B, G] (static slices only: a fused dynamic-slice, or more than
    # ~160 plane loads per element, stops LLVM from vectorising it; see _group_size).
    group_min = None
    for t in range(group_size):
        dist = None
        for w in range(num_words):
            diff = None
            for p in range(num_bits):
                x = queries[p, w][:, None] ^ candidates[t, p, w][None, :]
                diff = x if diff is None else diff | x
            count = jax.lax.population_count(diff).astype(jnp.int32)
            dist = count if dist is None else dist + count
        key = keys(dist, t * num_groups + group_ids, self_ids)
        group_min = key if group_min is None else jnp.minimum(group_min, key)

    # Stage 2: the k groups with the smallest minima.
    k_groups = min(k, num_groups)
    _, groups = jax.lax.top_k(-_ordered_float(group_min), k_groups)  # [B, kg]

    # Stage 3: exact keys of the chosen groups' members, then the exact top k.
    members = (
        jnp.arange(group_size, dtype=jnp.int32)[None, None, :] * num_groups + groups[:, :, None]
    )  # [B, kg, C]
    planes = rows[members]  # [B, kg, C, bits, W]
    q = jnp.transpose(queries, (2, 0, 1))[:, None, None]  # [B, 1, 1, bits, W]
    diff = planes[:, :, :, 0] ^ q[:, :, :, 0]
    for p in range(1, num_bits):
        diff = diff | (planes[:, :, :, p] ^ q[:, :, :, p])
    dist = jnp.sum(jax.lax.population_count(diff).astype(jnp.int32), axis=-1)  # [B, kg, C]
    member_key = keys(dist, members, self_ids[:, :, None]).reshape(block, -1)
    k_out = min(k, member_key.shape[1])
    neg, _ = jax.lax.top_k(-_ordered_float(member_key), k_out)
    best = _ordered_int(-neg)  # [B, k_out] ascending keys
    empty = best >= _SENTINEL
    is_self = best == 0
    index = jnp.where(is_self, self_ids, (best - 1) % n)
    distance = jnp.where(is_self, 0, (best - 1) // n)
    index = jnp.where(empty, -1, index)
    distance = jnp.where(empty, -1, distance)
    if k_out < k:
        pad = ((0, 0), (0, k - k_out))
        index = jnp.pad(index, pad, constant_values=-1)
        distance = jnp.pad(distance, pad, constant_values=-1)
    return index, distance


@functools.lru_cache(maxsize=64)
def _compiled_block(mesh: Mesh | None, **static: int):
    """The jitted block function; with a mesh, query rows are split over all its devices by
    ``shard_map`` (candidates replicated), which works for Auto and Explicit axis types alike."""
    fn = functools.partial(_neighbour_block, **static)
    if mesh is not None:
        axes = tuple(mesh.axis_names)
        fn = jax.shard_map(
            fn,
            mesh=mesh,
            in_specs=(P(None, None, axes), P(), P(), P(axes), P()),
            out_specs=(P(axes), P(axes)),
        )
    return jax.jit(fn)


def hamming_neighbours(
    sequences: Any,
    num_neighbours: int = 30,
    max_distance: float = 0.25,
    *,
    num_states: int | None = None,
    block_size: int = 256,
    mesh: Mesh | None = None,
    progress: bool = False,
) -> HammingNeighbours:
    """Exact within-threshold k nearest neighbours (self included) under the Hamming distance.

    Args:
      sequences: int ``[N, L]`` token ids (any vocabulary; ``num_states`` defaults to max + 1).
      num_neighbours: ``k_n``, the number of slots **including the row itself** (the reference's
        PyNNDescent with ``n_neighbors=30`` returns the point plus 29 others).
      max_distance: ``Delta_x``, inclusive threshold on the fractional Hamming distance.
      num_states: vocabulary size (only sets the number of bit planes; validated if given).
      block_size: query rows per jitted call (memory ``~ 4 * block_size * N / 32`` bytes).
      mesh: optional device mesh; each block's query rows are sharded over all its axes (the
        block is rounded up to a multiple of the device count). Results equal the unsharded ones.
      progress: show a tqdm bar over blocks.

    Returns:
      :class:`HammingNeighbours` with ``index``/``distance`` int32 ``[N, num_neighbours]``.

    Raises:
      ValueError: bad shapes/dtypes, ``num_neighbours < 1``, ``max_distance`` outside ``[0, 1]``,
        or more rows than the int32 sort keys can index.

    Example:
      >>> import numpy as np
      >>> x = np.array([[0, 0, 0, 0], [0, 0, 0, 1], [1, 1, 1, 1], [0, 0, 1, 1]])
      >>> nb = hamming_neighbours(x, num_neighbours=3, max_distance=0.5)
      >>> nb.index.tolist()
      [[0, 1, 3], [1, 0, 3], [2, 3, -1], [3, 1, 0]]
      >>> nb.distance.tolist()
      [[0, 1, 2], [0, 1, 1], [0, 2, -1], [0, 1, 2]]
    """
    x, num_states = _validate_sequences(sequences, num_states)
    if num_neighbours < 1:
        raise ValueError(
            f"num_neighbours counts the row itself and must be >= 1; got {num_neighbours}."
        )
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1; got {block_size}.")
    n, length = x.shape
    max_diff = max_differences(length, max_distance)
    k = int(num_neighbours)
    if n == 0:
        empty = np.zeros((0, k), np.int32)
        return HammingNeighbours(empty, empty.copy(), length)
    if (max_diff + 1) * n + 1 >= _SENTINEL:
        raise ValueError(
            f"{n} sequences are too many for int32 neighbour keys at this threshold; "
            "split the set or lower max_distance."
        )

    num_bits = max(1, math.ceil(math.log2(num_states)))
    bitplanes = _pack_bitplanes(x, num_bits)  # [N, bits, W]
    num_words = bitplanes.shape[2]
    group_size = _group_size(num_bits * num_words)
    num_groups = padded_size(-(-n // group_size))
    padded = np.zeros((num_groups * group_size, num_bits, num_words), np.uint32)
    padded[:n] = bitplanes
    candidates = np.ascontiguousarray(
        padded.reshape(group_size, num_groups, num_bits, num_words).transpose(0, 2, 3, 1)
    )
    num_devices = 1 if mesh is None else int(np.prod(list(mesh.shape.values())))
    block = min(block_size, padded_size(n))
    block = -(-block // num_devices) * num_devices
    num_blocks = -(-n // block)
    queries = np.zeros((num_bits, num_words, num_blocks * block), np.uint32)
    queries[:, :, :n] = bitplanes.transpose(1, 2, 0)
    row_ids = np.arange(num_blocks * block, dtype=np.int32)

    if mesh is None:
        candidates_dev, rows_dev = jnp.asarray(candidates), jnp.asarray(padded)
        query_sharding = id_sharding = None
    else:
        axes = tuple(mesh.axis_names)
        replicated = NamedSharding(mesh, P())
        candidates_dev = jax.device_put(candidates, replicated)
        rows_dev = jax.device_put(padded, replicated)
        query_sharding = NamedSharding(mesh, P(None, None, axes))
        id_sharding = NamedSharding(mesh, P(axes))

    static = dict(
        num_groups=num_groups,
        group_size=group_size,
        k=k,
        max_diff=max_diff,
    )
    starts = range(0, num_blocks * block, block)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="Hamming kNN", unit="block")
    block_fn = _compiled_block(mesh, **static)
    num_rows = np.int32(n)
    outputs = []
    for start in starts:
        outputs.append(
            block_fn(
                jax.device_put(queries[:, :, start : start + block], query_sharding),
                candidates_dev,
                rows_dev,
                jax.device_put(row_ids[start : start + block], id_sharding),
                num_rows,
            )
        )
    index = np.concatenate([np.asarray(i) for i, _ in outputs])[:n]
    distance = np.concatenate([np.asarray(d) for _, d in outputs])[:n]
    return HammingNeighbours(index.astype(np.int32), distance.astype(np.int32), length)
