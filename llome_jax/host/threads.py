"""Host threads: run independent XLA:CPU computations at the same time.

Why. One XLA:CPU computation runs its loops on one thread (its large matrix products may use
more), and computations dispatched asynchronously from one Python thread run one after the
other. Computations launched from *different* Python threads do run concurrently (JAX releases
the GIL while one executes). So a batch that is already cut into independent, equally shaped
calls (Ehrlich evaluation of a large host batch, the refinement chunks of a LLOME round) uses
every core when its calls are made from a few worker threads. Each call computes exactly what it
computed before, so results do not change (docs/benchmarks.md has the speed-ups).

The pool is started on first use and kept: a fresh thread pays JAX's per-thread set-up on its
first call, which cost more than the second core gave (a one-off probe, Ehrlich f2 at 1e5:
1.07x with a fresh pool per call, 1.45x with a kept one). It holds threads only, never arrays
or models. Only stdlib.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["core_ids", "map_ordered", "pool", "usable_cores"]

T = TypeVar("T")

_POOL: list[tuple[ThreadPoolExecutor, int]] = []


def core_ids() -> list[int]:
    """The CPU cores this process may run on, sorted (``taskset`` and cgroup pinning respected);
    empty where the platform cannot tell."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def usable_cores() -> int:
    """How many CPU cores this process may run on."""
    return len(core_ids()) or os.cpu_count() or 1


def pool() -> tuple[ThreadPoolExecutor, int]:
    """The kept worker pool and its number of threads (:func:`usable_cores` when first used)."""
    if not _POOL:
        workers = usable_cores()
        _POOL.append((ThreadPoolExecutor(workers, thread_name_prefix="llome_jax"), workers))
    return _POOL[0]


def map_ordered(function: Callable[[Any], T], items: Iterable[Any]) -> list[T]:
    """``[function(item) for item in items]`` on the worker pool, as many at a time as it has
    threads; in the calling thread when it has one or there is one item. Results keep the order
    of ``items``; the first exception is raised. Callers decide whether concurrency helps (it
    does for XLA:CPU calls; see the module docstring)."""
    items = list(items)
    if len(items) <= 1:
        return [function(item) for item in items]
    executor, workers = pool()
    if workers <= 1:
        return [function(item) for item in items]
    return list(executor.map(function, items))
