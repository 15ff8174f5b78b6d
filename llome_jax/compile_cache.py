"""JAX's persistent compilation cache for long-running commands (the paper driver, pretraining).

Programs compiled by one run are read back by the next instead of being compiled again (an
LLOME run compiles for tens of seconds; ``ehrlich.make`` compiles a chain sampler per instance).
:func:`enable` turns it on in a directory unless the caller already set one, or the environment
says ``LLOME_JAX_COMPILATION_CACHE=off``: jaxlib 0.10.2 has crashed (a segfault in
``executable.serialize()`` while writing an entry) in our test suite on a cold cache, so the
suite turns it off, and a user who meets that crash can too.
"""

from __future__ import annotations

import os
import pathlib

__all__ = ["ENV", "enable"]

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
