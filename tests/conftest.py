"""Test configuration: 8 fake CPU devices and a persistent compilation cache, set before JAX starts."""

from __future__ import annotations

import os
import pathlib

# Must run before jax initialises its backends (conftest is imported before test modules).
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402
import pytest  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
FIXTURES = SHARED / "fixtures"

_cache_root = os.environ.get(
    "LLOME_JAX_TEST_CACHE", str(pathlib.Path.home() / ".cache" / "llome-jax" / "jax-test-cache")
)
# One directory per pytest-xdist worker: JAX writes a cache entry in place, without a lock unless
# eviction is on, so a worker reading an entry that another is still writing deserialises a
# truncated executable and crashes (seen in CI on a cold cache).
_cache_dir = str(pathlib.Path(_cache_root) / os.environ.get("PYTEST_XDIST_WORKER", "main"))
jax.config.update("jax_compilation_cache_dir", _cache_dir)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


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
