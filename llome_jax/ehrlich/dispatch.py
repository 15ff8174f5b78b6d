"""Ehrlich evaluation from the host: eager validation, batch buckets, concurrent parts.

The public ``evaluate`` / ``motif_presence`` / ``is_feasible`` validate their input
(:func:`validate_tokens`) and call the jitted kernel of :mod:`llome_jax.ehrlich.kernel`. Host
batches (NumPy, or an array on one CPU device) are padded to :func:`bucket_size` rows so that
many batch sizes share a few compiled shapes, and a large one is split into equal parts that run
concurrently, one per CPU core the process may use (:func:`host_parts`). Tracers and device
arrays (e.g. sharded over a mesh) go to the kernel as they are. With ``mesh=`` the batch is split
over every device of the mesh (``shard_map``: each device evaluates its rows with the same
kernel, so the values are those of one device, bit for bit).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax.ehrlich import kernel
from llome_jax.ehrlich.config import EhrlichConfig
from llome_jax.ehrlich.function import Ehrlich
from llome_jax.host import threads as host_threads

__all__ = [
    "bucket_size",
    "evaluate",
    "host_parts",
    "is_feasible",
    "motif_presence",
    "validate_tokens",
]


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
# Host dispatch
# ---------------------------------------------------------------------------------------------
def _backend_of(x: Any) -> str:
    """The platform that will run the kernel on ``x``: that of a committed device array's
    devices, else (host data, tracers) ``jax.default_backend()``."""
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        try:
            return next(iter(x.devices())).platform
        except Exception:  # e.g. a deleted or abstract array: fall back to the default
            pass
    return jax.default_backend()


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
    kernel_fn: Any, fn: Ehrlich, x: np.ndarray, chunk: int, threads: int | None = None
) -> Any:
    """``kernel_fn(fn, x, chunk)`` on a padded NumPy batch, split over :func:`host_parts` threads
    (equal parts, so one compiled shape); the parts' results are joined on the host."""
    # the kernel runs on the default device: only XLA:CPU calls gain from threads
    parts = host_parts(x.shape[0], fn.config.dim, threads) if jax.default_backend() == "cpu" else 1
    if parts == 1:
        return kernel_fn(fn, x, chunk)
    size = x.shape[0] // parts
    blocks = [jax.device_put(x[i * size : (i + 1) * size]) for i in range(parts)]
    results = host_threads.map_ordered(lambda b: np.asarray(kernel_fn(fn, b, chunk)), blocks)
    return np.concatenate(results, axis=0)


@functools.lru_cache(maxsize=64)
def _sharded(kernel_fn: Any, mesh: Any, chunk: int) -> Any:
    """``kernel_fn`` with the batch's rows split over every device of ``mesh`` (all its axes),
    the instance replicated: each device runs the kernel on its own rows."""
    from jax.sharding import PartitionSpec as P

    rows = P(tuple(mesh.axis_names))
    return jax.jit(
        jax.shard_map(
            lambda f, xs: kernel_fn(f, xs, chunk),
            mesh=mesh,
            in_specs=(P(), rows),
            out_specs=rows,
        )
    )


def _on_mesh(kernel_fn: Any, fn: Ehrlich, x: Any, chunk_size: int | None, mesh: Any) -> jax.Array:
    """``kernel_fn`` over every device of ``mesh``: the flattened batch is padded to a multiple
    of the mesh's size (host data first to :func:`bucket_size` rows, repeating the last row) and
    its rows split over the devices; the padding's results are dropped. Host input gives a
    result on the default device (as without a mesh), device arrays and tracers one sharded
    over the mesh."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    size = int(mesh.devices.size)
    sharding = NamedSharding(mesh, P(tuple(mesh.axis_names)))
    platform = next(iter(mesh.devices.flat)).platform
    chunk = chunk_size or kernel.default_chunk_size(fn.config, platform)
    length = fn.config.dim
    if _on_host(x):
        host = _checked_tokens(fn, np.asarray(x))
        batch_shape = host.shape[:-1]
        n = int(np.prod(batch_shape, dtype=np.int64))
        flat = host.reshape(n, length)
        padded = -(-bucket_size(n) // size) * size
        if padded > n:
            flat = np.concatenate([flat, np.broadcast_to(flat[-1:], (padded - n, length))])
        out = np.asarray(_sharded(kernel_fn, mesh, chunk)(fn, jax.device_put(flat, sharding)))
        out = out[:n]
        return jax.device_put(out.reshape(batch_shape + out.shape[1:]))
    x = validate_tokens(fn, x)
    batch_shape = tuple(x.shape[:-1])
    n = int(np.prod(batch_shape, dtype=np.int64))
    flat = x.reshape(n, length)
    extra = -n % size
    if extra:
        flat = jnp.concatenate([flat, jnp.broadcast_to(flat[-1:], (extra, length))])
    if isinstance(flat, jax.core.Tracer):
        flat = jax.lax.with_sharding_constraint(flat, sharding)
    else:
        flat = jax.device_put(flat, sharding)
    out = _sharded(kernel_fn, mesh, chunk)(fn, flat)
    if extra:
        out = out[:n]
    return out.reshape(batch_shape + out.shape[1:])


def _dispatch(
    kernel_fn: Any,
    fn: Ehrlich,
    x: Any,
    chunk_size: int | None,
    threads: int | None,
    mesh: Any = None,
) -> jax.Array:
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1 (or None: the usable cores), got {threads}.")
    if mesh is not None:
        if not (hasattr(mesh, "devices") and hasattr(mesh, "axis_names")):
            raise ValueError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}.")
        x_shape = getattr(x, "shape", None) or np.shape(x)
        if int(np.prod(x_shape[:-1], dtype=np.int64)) > 0:
            return _on_mesh(kernel_fn, fn, x, chunk_size, mesh)
    x, n, batch_shape = _prepare(fn, x)
    chunk = chunk_size or kernel.default_chunk_size(fn.config, _backend_of(x))
    if n is None or isinstance(fn.transition_matrix, jax.core.Tracer):
        out = kernel_fn(fn, x, chunk)
    else:
        out = _run_host(kernel_fn, fn, x, chunk, threads)
    return _finish(out, n, batch_shape)


def evaluate(
    fn: Ehrlich,
    x: Any,
    *,
    chunk_size: int | None = None,
    threads: int | None = None,
    mesh: Any = None,
) -> jax.Array:
    """Ehrlich values ``f(x)`` (higher is better; ``-inf`` where infeasible).

    Jittable, vmappable and shardable over batch axes; inputs are validated eagerly (dtype,
    length, token range) when concrete. Inside a trace, out-of-range tokens count as infeasible.
    Host inputs (NumPy, or an array on one CPU device) are padded to :func:`bucket_size` rows
    (the padding's results are discarded), so calls with many batch sizes reuse a few compiled
    shapes, and a large one is split over the CPU cores (:func:`host_parts`). Inside ``jit`` one
    call runs on one core: pass ``mesh`` (or shard the batch over a mesh) to use more.

    Args:
      fn: the instance.
      x: integer ``[..., L]`` token ids in ``[0, v)``, any integer dtype (uint8 is transposed as
        it is, never widened; wider dtypes are narrowed to bytes first when ``v <= 255``).
      chunk_size: sequences per block (static; default ``kernel.default_chunk_size`` for ``L``
        and the backend that runs the kernel: L1-sized on CPU, 65,536 on a GPU/TPU).
      threads: at most this many concurrent parts for a host batch (default: the CPU cores this
        process may use; 1 evaluates it in one call). Results never depend on it.
      mesh: a ``jax.sharding.Mesh``: the batch's rows are split over all its devices (every
        axis), each evaluating its own rows (``shard_map``); the same values as one device, bit
        for bit. Host input returns on the default device, a device array or tracer sharded over
        the mesh. E.g. ``evaluate(fn, x, mesh=llome_jax.host.parallel.make_mesh())`` on 8 GPUs.

    Returns:
      float32 ``[...]``.

    Example:
      >>> import jax, llome_jax.ehrlich as eh
      >>> fn = eh.paper_function("f2")
      >>> float(eh.evaluate(fn, eh.optimal_solution(fn)))
      1.0
    """
    return _dispatch(kernel._evaluate, fn, x, chunk_size, threads, mesh)


def motif_presence(
    fn: Ehrlich,
    x: Any,
    *,
    chunk_size: int | None = None,
    threads: int | None = None,
    mesh: Any = None,
) -> jax.Array:
    """Quantised motif presence ``h_q(x, m^(i), s^(i))`` before the response: float32 ``[..., c]``.

    Computed for infeasible sequences too (as the reference does). Arguments as :func:`evaluate`
    (with ``mesh``, the rows of ``[..., c]`` are split over the devices).
    """
    return _dispatch(kernel._motif_presence, fn, x, chunk_size, threads, mesh)


def is_feasible(
    fn: Ehrlich,
    x: Any,
    *,
    chunk_size: int | None = None,
    threads: int | None = None,
    mesh: Any = None,
) -> jax.Array:
    """Whether each sequence has non-zero probability under the DMP: bool ``[...]``. Arguments
    as :func:`evaluate`."""
    return _dispatch(kernel._is_feasible, fn, x, chunk_size, threads, mesh)
