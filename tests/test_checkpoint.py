"""Checkpoints: exact round trips (typed keys, optax state, shardings), clear errors for missing
or corrupt steps without collateral damage, and kill -9 / restore continuing bit-identically."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from llome_jax.host import parallel
from llome_jax.run.checkpoint import CheckpointError, CheckpointManager, abstract_like
from llome_jax.training.step import TrainState, init_train_state, make_train_step
from tests import workers
from tests.conftest import subprocess_cache_env

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def problem():
    return workers.setup()


def _state(problem, seed=0) -> TrainState:
    model, tx, *_ = problem
    return init_train_state(jax.random.key(seed), model, tx)


def _assert_trees_identical(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(la, lb, strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            assert jax.random.key_impl(x) == jax.random.key_impl(y)
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_round_trip_is_exact(problem, tmp_path):
    model, tx, batches, loss_fn, hp = problem
    step = make_train_step(loss_fn, model, tx)
    state, _ = step(_state(problem), batches[0], hp)  # non-trivial Adam moments
    state = jax.block_until_ready(state)
    meta = {"round": 3, "config": {"loss": "marge", "lr": 1e-6}, "history": [0.5, float("nan")]}
    abstract = jax.eval_shape(lambda: state)
    with CheckpointManager(tmp_path / "ckpt") as ckpt:
        assert ckpt.latest_step() is None
        ckpt.save(1, state, meta)
        assert ckpt.latest_step() == 1
        restored, restored_meta = ckpt.restore(None, abstract)
    _assert_trees_identical(restored, state)
    assert restored_meta["config"] == meta["config"] and restored_meta["round"] == 3
    assert isinstance(restored, TrainState)
    # A fresh manager (new process in real life) sees the same checkpoint.
    with CheckpointManager(tmp_path / "ckpt") as ckpt:
        again, _ = ckpt.restore(1, abstract_like(state))
    _assert_trees_identical(again, state)


def test_restore_places_arrays_with_requested_sharding(problem, tmp_path):
    state = _state(problem)
    mesh = parallel.make_mesh(8)
    replicated = parallel.replicated_sharding(mesh)
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
        jax.eval_shape(lambda: state),
    )
    with CheckpointManager(tmp_path) as ckpt:
        ckpt.save(0, state)
        restored, meta = ckpt.restore(0, abstract)
    assert meta == {}
    leaf = jax.tree.leaves(restored.params)[0]
    assert leaf.sharding == replicated and len(leaf.sharding.device_set) == 8
    _assert_trees_identical(restored, state)


def test_missing_checkpoints_raise_clear_errors(problem, tmp_path):
    abstract = jax.eval_shape(lambda: _state(problem))
    with CheckpointManager(tmp_path / "empty") as ckpt:
        with pytest.raises(FileNotFoundError, match="no checkpoint"):
            ckpt.restore(None, abstract)
        ckpt.save(5, _state(problem))
        with pytest.raises(FileNotFoundError, match=r"step 4 not found.*\[5\]"):
            ckpt.restore(4, abstract)
        assert ckpt.restore_latest_good(abstract)[0] == 5


def test_corrupt_checkpoint_keeps_the_previous_good_one(problem, tmp_path):
    state = _state(problem)
    abstract = jax.eval_shape(lambda: state)
    root = tmp_path / "ckpt"
    with CheckpointManager(root) as ckpt:
        ckpt.save(1, state, {"tag": "good"})
        ckpt.save(2, state, {"tag": "doomed"})
    # Corrupt step 2: truncate every data file of its array store.
    data_files = [p for p in (root / "2" / "state").rglob("*") if p.is_file() and p.stat().st_size]
    assert data_files
    for p in data_files:
        p.write_bytes(b"\x00garbage")
    with CheckpointManager(root) as ckpt:
        assert ckpt.all_steps() == [1, 2]
        with pytest.raises(CheckpointError, match=r"step 2.*other steps available: \[1\]"):
            ckpt.restore(2, abstract)
        restored, meta = ckpt.restore(1, abstract)
        assert meta == {"tag": "good"}
        _assert_trees_identical(restored, state)
        step, _, meta = ckpt.restore_latest_good(abstract)
        assert (step, meta) == (1, {"tag": "good"})
        assert ckpt.all_steps() == [1, 2]  # nothing deleted by failed restores
    # A target with another structure is also a clear error, not a crash deep in orbax.
    with CheckpointManager(root) as ckpt, pytest.raises(CheckpointError, match="step 1"):
        ckpt.restore(1, {"params": abstract.params})


def test_interrupted_save_is_invisible(problem, tmp_path):
    state = _state(problem)
    root = tmp_path / "ckpt"
    with CheckpointManager(root) as ckpt:
        ckpt.save(1, state)
    # What a save killed half-way leaves behind: a temporary directory for step 2.
    shutil.copytree(root / "1", root / "2.orbax-checkpoint-tmp-1234")
    (root / "2.orbax-checkpoint-tmp-1234" / "commit_success.txt").unlink(missing_ok=True)
    with CheckpointManager(root) as ckpt:
        assert ckpt.latest_step() == 1
        ckpt.restore(None, jax.eval_shape(lambda: state))
        ckpt.save(2, state)  # and the step can be written properly afterwards
        assert ckpt.all_steps() == [1, 2]


def test_save_validates_before_writing(problem, tmp_path):
    state = _state(problem)
    with CheckpointManager(tmp_path, max_to_keep=None) as ckpt:
        ckpt.save(3, state)
        with pytest.raises(ValueError, match="steps must increase"):
            ckpt.save(2, state)
        with pytest.raises(ValueError, match="JSON"):
            ckpt.save(4, state, {"array": np.zeros(2)})
        assert ckpt.all_steps() == [3]
    with pytest.raises(ValueError, match="max_to_keep"):
        CheckpointManager(tmp_path, max_to_keep=0)


def test_max_to_keep_deletes_only_after_a_newer_commit(problem, tmp_path):
    state = _state(problem)
    with CheckpointManager(tmp_path, max_to_keep=2) as ckpt:
        for s in (1, 2, 3):
            ckpt.save(s, state)
        assert ckpt.all_steps() == [2, 3]


def test_kill_and_restore_continues_bit_identically(problem, tmp_path):
    """A subprocess trains 2 steps, checkpoints, and SIGKILLs itself. Restoring in this process
    and training 2 more steps gives exactly (bitwise) the parameters, optimizer state, step and
    key of an uninterrupted 4-step run."""
    model, tx, batches, loss_fn, hp = problem
    root = tmp_path / "ckpt"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        **subprocess_cache_env(),  # this worker's persistent compilation cache, if any
    }
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "workers.py"), "train_then_die", str(root), "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -9, proc.stdout + proc.stderr[-3000:]
    assert "saved" in proc.stdout

    step = make_train_step(loss_fn, model, tx)
    state = init_train_state(jax.random.key(42), model, tx)
    abstract = jax.eval_shape(lambda: state)
    trajectory = []
    for batch in batches:
        state, _ = step(state, batch, hp)
        trajectory.append(jax.tree.map(np.asarray, state.params))
    uninterrupted = state

    with CheckpointManager(root) as ckpt:
        restored, meta = ckpt.restore(ckpt.latest_step(), abstract)
    assert meta == {"loss": "marge", "steps_done": 2}
    assert int(restored.step) == 2
    _assert_trees_identical(restored.params, trajectory[1])
    for batch in batches[2:]:
        restored, _ = step(restored, batch, hp)
    _assert_trees_identical(restored, uninterrupted)
    assert jnp.asarray(restored.step) == 4
