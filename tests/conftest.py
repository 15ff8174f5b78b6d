"""Test configuration: 8 fake CPU devices (and, when asked for, a persistent compilation cache), set
before JAX starts."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

# Must run before jax initialises its backends (conftest is imported before test modules).
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    _flags += " --xla_force_host_platform_device_count=8"
# Most of the suite's time is XLA compiling small programs once each: without LLVM's optimisation
# passes the whole suite ran in 1,610 s instead of 2,525 s (pytest -n 2, 2 free cores, 2026-11-28;
# docs/benchmarks.md). The suite's equalities must hold at either level, as on any x86 CPU. Speed
# is measured by benchmarks/, at XLA's defaults. XLA_FLAGS=--xla_backend_optimization_level=2
# runs the suite at the defaults.
if "xla_backend_optimization_level" not in _flags:
    _flags += " --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
# XLA:CPU's older elemental emitters compile a program in about half the time of its fusion
# emitters (420 small eager programs: 7.5-8.6 s against 15.0-15.8 s; LaMBO-2's training step
# 36 s against 50 s with the programs around it; docs/benchmarks.md, "Test-suite run times").
if "xla_cpu_use_fusion_emitters" not in _flags:
    _flags += " --xla_cpu_use_fusion_emitters=false"
os.environ["XLA_FLAGS"] = _flags.strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402
import pytest  # noqa: E402

# A test whose xdist worker segfaulted runs once more (jaxlib's compiler crashes now and then; an
# assertion is never retried): tests/crash_retry.py. The crash we reproduced, a worker out of
# memory mappings, is prevented by _release_compiled_programs below.
pytest_plugins = ["crash_retry", "suite_timing"]

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
FIXTURES = SHARED / "fixtures"

# A persistent compilation cache only when asked for (LLOME_JAX_TEST_CACHE=DIR, for repeated
# local runs): on a cold cache, writing entries crashed a test worker twice (jaxlib 0.10.2, a
# segfault inside executable.serialize() when the entry was written), and CI always starts cold,
# so it gains nothing from one. One directory per pytest-xdist worker: JAX writes an entry in
# place, without a lock unless eviction is on, so workers must not read each other's entries.
_cache_root = os.environ.get("LLOME_JAX_TEST_CACHE")
if not _cache_root:  # the commands that turn one on (llome_jax.host.compile_cache) leave it off too
    os.environ["LLOME_JAX_COMPILATION_CACHE"] = "off"
else:
    _cache_dir = pathlib.Path(_cache_root) / os.environ.get("PYTEST_XDIST_WORKER", "main")
    jax.config.update("jax_compilation_cache_dir", str(_cache_dir))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def subprocess_cache_env() -> dict[str, str]:
    """Environment for a test's subprocess: this worker's persistent cache, if there is one."""
    directory = jax.config.jax_compilation_cache_dir
    if not directory:
        return {}
    return {
        "JAX_COMPILATION_CACHE_DIR": str(directory),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.5",
    }


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules holding a ``slow`` test run first, each in pytest's order. Under ``pytest -n 2``
    xdist's load scheduler hands tests out in collection order, so long end-to-end tests at the
    end left one worker idle while the other finished them. Six recorded full runs replayed
    through that scheduler with noisy durations end a median 35 s sooner in this order (10th-90th
    percentile -15 to +84 s; docs/benchmarks.md, "Test-suite run times"). The replay was
    ``benchmarks/suite_order.py``, since retired: docs/reference/scripts.md names the commit that
    last held it."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: the order within each group


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs() -> Iterator[None]:
    """After each test module, free every compiled program if the worker holds over half of
    ``vm.max_map_count`` memory mappings (``compile_cache.release_if_crowded``).

    JAX keeps each compiled program until its caches are cleared, each XLA:CPU executable holds
    several memory mappings, and Linux allows 65,530 per process: a worker that had run ~450
    tests crashed inside XLA's compiler at 65,414 mappings (a segfault or an abort, in whichever
    test compiled next). Freeing after every module took 3,078 s of summed test time against
    2,911 s past half the limit only (one full run each, 2026-11-29): later modules share
    programs (LaMBO-2's model and optimizer files 40-47 s less).
    """
    yield
    from llome_jax.host import compile_cache

    compile_cache.release_if_crowded()


@pytest.fixture
def key() -> jax.Array:
    """A fresh typed PRNG key."""
    return jax.random.key(0)


@pytest.fixture(scope="session")
def fixtures_dir() -> pathlib.Path:
    """``../shared/fixtures`` relative to the repository root (must exist)."""
    if not FIXTURES.is_dir():
        raise RuntimeError(
            f"test fixtures not found at {FIXTURES}: shared/ must sit beside the repo"
        )
    return FIXTURES
