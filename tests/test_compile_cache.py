"""``llome_jax.host.compile_cache.enable``: on by default, off by the environment, and never over a
cache directory the caller configured."""

from __future__ import annotations

import pathlib

import jax
import numpy as np
import pytest

from llome_jax.host import compile_cache


@pytest.fixture
def no_cache_dir():
    before = jax.config.jax_compilation_cache_dir
    before_time = jax.config.jax_persistent_cache_min_compile_time_secs
    jax.config.update("jax_compilation_cache_dir", None)
    yield
    jax.config.update("jax_compilation_cache_dir", before)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before_time)


def test_enable_sets_the_directory_unless_the_environment_says_off(
    tmp_path: pathlib.Path, monkeypatch, no_cache_dir
) -> None:
    monkeypatch.setenv(compile_cache.ENV, "OFF")
    assert compile_cache.enable(tmp_path / "c") is False
    assert not jax.config.jax_compilation_cache_dir
    monkeypatch.setenv(compile_cache.ENV, "on")
    assert compile_cache.enable(tmp_path / "c", min_compile_time_secs=0.0) is True
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "c")
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
    # a directory already configured (by the caller) is kept
    assert compile_cache.enable(tmp_path / "other") is True
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "c")


def _memory_mappings() -> int:
    with open("/proc/self/maps", "rb") as maps:
        return sum(1 for _ in maps)


@pytest.mark.skipif(not pathlib.Path("/proc/self/maps").exists(), reason="needs Linux /proc")
def test_release_if_crowded_frees_the_memory_mappings_of_compiled_programs() -> None:
    """30 distinct programs add several mappings each (what exhausted ``vm.max_map_count`` in a
    long test worker). Below half the limit nothing is freed; above it they are returned, and
    the jitted functions, still alive, compile again and give the same values."""
    programs = [jax.jit(lambda x, i=i: jax.numpy.cumsum(x * i) + i) for i in range(30)]
    x = np.arange(8, dtype=np.float32)
    np.asarray(jax.jit(lambda x: x - 1)(x))  # the first call's one-off allocations
    compile_cache.release_programs()
    before = _memory_mappings()
    values = [np.asarray(program(x)) for program in programs]
    added = _memory_mappings() - before
    assert added >= 4 * len(programs)  # 9 per program measured on jaxlib 0.10.2
    held = before + added
    assert compile_cache.release_if_crowded(limit=2 * held + 100) is None  # under half
    assert programs[0]._cache_size() == 1
    assert abs(compile_cache.release_if_crowded(limit=2 * held - 100) - held) < 50  # over half
    assert _memory_mappings() - before <= added // 10
    assert programs[0]._cache_size() == 0
    for i in (0, 7, 29):
        np.testing.assert_array_equal(np.asarray(programs[i](x)), values[i])
        np.testing.assert_array_equal(values[i], np.cumsum(x * i) + i)
