"""``llome_jax.compile_cache.enable``: on by default, off by the environment, and never over a
cache directory the caller configured."""

from __future__ import annotations

import pathlib

import jax
import pytest

from llome_jax import compile_cache


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
