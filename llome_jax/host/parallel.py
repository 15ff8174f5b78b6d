"""Data parallelism with ``jax.jit`` + ``Mesh`` + ``NamedSharding`` (never ``pmap``).

The model and optimizer state are replicated (``P()``); batches are split along their leading
axis over the mesh's ``"data"`` axis (``P("data")``). The train step is an ordinary jitted
function of *global* arrays, so every reduction in it (loss means, MargE's self-normalisation
over the batch) is global automatically: XLA inserts the all-reduces. Nothing in user code calls
a collective.

Single host::

    mesh = make_mesh()                        # all local devices on one "data" axis
    state = replicate(state, mesh)
    batch = shard_batch(batch, mesh)          # leading dim must divide evenly
    state, metrics = step(state, batch, hparams)

Multi-host (one process per host; e.g. 2 nodes x 8 GPUs): call :func:`initialize_distributed`
first in every process, build the same mesh over ``jax.devices()`` (all processes' devices), and
give each process its own slice of the global batch with :func:`global_batch_from_local`. Tested
on CPU with two processes over loopback using gloo collectives (``tests/test_train.py``).

Axis types are spelled out (``jax.make_mesh`` defaults to ``Explicit`` since JAX 0.9, the raw
``Mesh`` constructor to ``Auto``). We use ``Auto`` by default: the compiler propagates shardings
from the inputs, so model code needs no sharding annotations (BUILD.md §3.1).
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

__all__ = [
    "DATA_AXIS",
    "batch_sharding",
    "check_batch_divisible",
    "global_batch_from_local",
    "initialize_distributed",
    "make_mesh",
    "replicate",
    "replicated_sharding",
    "shard_batch",
]

#: Name of the data-parallel mesh axis.
DATA_AXIS = "data"


def make_mesh(
    num_devices: int | None = None,
    *,
    axis_name: str = DATA_AXIS,
    axis_type: AxisType = AxisType.Auto,
    devices: list[jax.Device] | None = None,
) -> Mesh:
    """A 1-D data-parallel mesh over ``num_devices`` devices (default: all, across processes).

    Args:
      num_devices: how many devices to use (the first ones of ``devices``/``jax.devices()``).
      axis_name: mesh axis name (default ``"data"``).
      axis_type: ``AxisType.Auto`` (compiler-propagated shardings, default) or ``Explicit``.
      devices: explicit device list (default ``jax.devices()``, which spans all processes).

    Raises:
      ValueError: if more devices are requested than exist.
    """
    available = list(devices) if devices is not None else jax.devices()
    n = len(available) if num_devices is None else int(num_devices)
    if not 1 <= n <= len(available):
        raise ValueError(
            f"num_devices={num_devices} but {len(available)} devices are available "
            "(on CPU, set XLA_FLAGS=--xla_force_host_platform_device_count=N before importing jax)"
        )
    return jax.make_mesh((n,), (axis_name,), axis_types=(axis_type,), devices=available[:n])


def batch_sharding(mesh: Mesh, axis_name: str = DATA_AXIS) -> NamedSharding:
    """Split the leading axis over ``axis_name``: ``NamedSharding(mesh, P("data"))``."""
    return NamedSharding(mesh, P(axis_name))


def replicated_sharding(mesh: Mesh) -> NamedSharding:
    """Full replication: ``NamedSharding(mesh, P())``."""
    return NamedSharding(mesh, P())


def check_batch_divisible(tree: Any, mesh: Mesh, axis_name: str = DATA_AXIS) -> None:
    """Raise ``ValueError`` unless every leaf's leading dimension divides over the data axis."""
    size = mesh.shape[axis_name]
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        shape = np.shape(leaf)
        if not shape:
            raise ValueError(
                f"batch leaf {jax.tree_util.keystr(path)} is a scalar; batches need a leading axis"
            )
        if shape[0] % size:
            raise ValueError(
                f"batch leaf {jax.tree_util.keystr(path)} has leading dimension {shape[0]}, "
                f"not divisible by the {size} devices of mesh axis {axis_name!r}: pad the batch "
                "(weight 0 rows) or change the batch size"
            )


def _place(tree: Any, sharding: NamedSharding) -> Any:
    """``device_put``, or (multi-process) build each global array from this host's full copy."""
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)

    def build(x: Any) -> jax.Array:
        is_key = jax.dtypes.issubdtype(getattr(x, "dtype", np.float32), jax.dtypes.prng_key)
        data = np.asarray(jax.random.key_data(x) if is_key else x)
        spec = sharding.spec if data.ndim else P()
        out = jax.make_array_from_callback(
            data.shape, NamedSharding(sharding.mesh, spec), lambda index: data[index]
        )
        return jax.random.wrap_key_data(out, impl=jax.random.key_impl(x)) if is_key else out

    return jax.tree.map(build, tree)


def shard_batch(tree: Any, mesh: Mesh, axis_name: str = DATA_AXIS) -> Any:
    """Place every leaf of a batch pytree split along its leading axis.

    Every process must hold the same full global batch (use :func:`global_batch_from_local` when
    each process loads only its own rows).
    """
    check_batch_divisible(tree, mesh, axis_name)
    return _place(tree, batch_sharding(mesh, axis_name))


def replicate(tree: Any, mesh: Mesh) -> Any:
    """Place every leaf of a pytree (params, optimizer state, hyper-parameters) on all devices.

    Multi-process: every process passes the same values. Note: with a donating step the
    replicated copy may alias the caller's buffers; do not reuse the originals afterwards.
    """
    return _place(tree, replicated_sharding(mesh))


def global_batch_from_local(local_tree: Any, mesh: Mesh, axis_name: str = DATA_AXIS) -> Any:
    """Assemble global batch arrays from each process's slice (multi-host data loading).

    Every process passes its own ``[B_local, ...]`` rows (the same ``B_local`` everywhere);
    the result is a global ``[B_local * num_processes, ...]`` array split over ``axis_name``,
    with process ``p``'s rows at ``p * B_local ...``. With one process this equals
    :func:`shard_batch`.
    """
    sharding = batch_sharding(mesh, axis_name)
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), local_tree
    )


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    cpu_collectives: str | None = None,
    local_device_ids: list[int] | None = None,
) -> None:
    """Start multi-process JAX (call once per process, before any other JAX call).

    Thin wrapper over ``jax.distributed.initialize``. On TPU pods, Slurm and Open MPI, all
    arguments are discovered automatically; elsewhere pass the coordinator's ``host:port``, the
    number of processes and this process's id (0 is the coordinator). Afterwards
    ``jax.devices()`` lists every process's devices, :func:`make_mesh` spans them, and each
    process feeds its slice of the batch via :func:`global_batch_from_local`.

    Args:
      coordinator_address: e.g. ``"10.0.0.1:1234"`` (``"127.0.0.1:port"`` for a local test).
      num_processes: total number of processes.
      process_id: this process's rank.
      cpu_collectives: for CPU-only multi-process runs, the collectives backend (``"gloo"``);
        sets ``jax_cpu_collectives_implementation`` (also read from the environment variable
        ``LLOME_JAX_CPU_COLLECTIVES``).
      local_device_ids: restrict this process to some local devices (e.g. one GPU per process).
    """
    cpu_collectives = cpu_collectives or os.environ.get("LLOME_JAX_CPU_COLLECTIVES")
    if cpu_collectives:
        jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        local_device_ids=local_device_ids,
    )
