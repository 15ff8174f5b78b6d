"""JAX's persistent compilation cache for long-running commands (the paper driver, pretraining).

Programs compiled by one run are read back by the next instead of being compiled again (an
LLOME run compiles for tens of seconds; ``ehrlich.make`` compiles a chain sampler per instance).
:func:`enable` turns it on in a directory unless the caller already set one, or the environment
says ``LLOME_JAX_COMPILATION_CACHE=off``: jaxlib 0.10.2 has crashed (a segfault in
``executable.serialize()`` while writing an entry) in our test suite on a cold cache, so the
suite turns it off, and a user who meets that crash can too.

:func:`release_if_crowded` frees the compiled programs a process holds in memory when they come
near the kernel's limit; the shared round driver (:mod:`llome_jax.run.runner`) calls it after every
round. JAX keeps each program it compiled until its caches are cleared, each XLA:CPU executable
holds several memory mappings (3-9 measured), and Linux allows ``vm.max_map_count`` (65,530 by
default) per process: a test process crashed inside XLA's compiler at 65,414 mappings (a
segfault, or an abort, in whatever compiled next). A process that runs many runs one after
another can get there (the paper driver's smoke plan in one process ended at 23,607); freed
programs compile again when next called (or are read back from the persistent cache).
"""

from __future__ import annotations

import os
import pathlib

__all__ = ["ENV", "enable", "release_if_crowded", "release_programs"]

#: ``off`` (or ``0``, ``false``, ``no``) disables :func:`enable`.
ENV = "LLOME_JAX_COMPILATION_CACHE"


def enable(directory: str | os.PathLike, min_compile_time_secs: float | None = None) -> bool:
    """Use ``directory`` as JAX's persistent compilation cache; whether it is now on.

    Keeps a cache directory the caller configured (``jax_compilation_cache_dir``), and does
    nothing when :data:`ENV` is off. ``min_compile_time_secs``: cache programs that took at least
    this long to compile (JAX's default, 1 s, when ``None``).
    """
    import jax

    if os.environ.get(ENV, "").strip().lower() in ("off", "0", "false", "no"):
        return False
    if jax.config.jax_compilation_cache_dir:
        return True
    jax.config.update("jax_compilation_cache_dir", str(pathlib.Path(directory)))
    if min_compile_time_secs is not None:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_time_secs)
    return True


def release_programs() -> None:
    """Free every compiled program JAX holds in this process (``jax.clear_caches()``).

    Jitted functions stay usable: their next call compiles again (or reads the persistent
    cache), with the same values. Call it between runs or between rounds (the round driver
    does), not to save time: a freed program costs its compile again.
    """
    import jax

    jax.clear_caches()


def release_if_crowded(fraction: float = 0.5, limit: int | None = None) -> int | None:
    """:func:`release_programs` if this process holds more than ``fraction`` of ``limit`` memory
    mappings; returns the mappings it held then, or ``None`` when it released nothing.

    ``limit``: the kernel's ``vm.max_map_count`` by default (65,530 where it cannot be read).
    Where ``/proc/self/maps`` does not exist (not Linux) nothing is released.
    """
    held = _memory_mappings()
    if held is None:
        return None
    if limit is None:
        try:
            limit = int(pathlib.Path("/proc/sys/vm/max_map_count").read_text())
        except (OSError, ValueError):
            limit = 65_530
    if held <= fraction * limit:
        return None
    release_programs()
    return held


def _memory_mappings() -> int | None:
    """Lines of ``/proc/self/maps`` (this process's memory mappings); ``None`` without it."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return None
