"""Ehrlich evaluation across the devices of a mesh (``evaluate(fn, x, mesh=...)``): on the 8 fake
CPU devices of the test session, the values of one device, bit for bit, with every device used."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import llome_jax.ehrlich as eh
from llome_jax.host import parallel


@pytest.fixture(scope="module")
def batch() -> tuple[eh.Ehrlich, np.ndarray]:
    """f2 and 1,001 sequences near its optimum (feasible and infeasible ones, all levels)."""
    fn = eh.paper_function("f2")
    rng = np.random.default_rng(0)
    best = np.asarray(eh.optimal_solution(fn))
    x = np.tile(best, (1001, 1))
    flips = rng.random(x.shape) < 0.1
    x[flips] = rng.integers(0, fn.config.num_states, size=int(flips.sum()))
    return fn, x.astype(np.int32)


def _bits(values) -> np.ndarray:
    return np.asarray(values).view(np.int32)


def test_eight_devices_give_one_devices_values(batch) -> None:
    fn, x = batch
    assert len(jax.devices()) == 8
    mesh = parallel.make_mesh()
    one = eh.evaluate(fn, x, threads=1)
    got = eh.evaluate(fn, x, mesh=mesh)
    assert got.shape == (1001,) and np.isfinite(np.asarray(one)).any()
    assert not np.isfinite(np.asarray(one)).all()
    np.testing.assert_array_equal(_bits(got), _bits(one))
    # batch axes, and the other two functions
    np.testing.assert_array_equal(
        _bits(eh.evaluate(fn, x[:1000].reshape(10, 100, -1), mesh=mesh)),
        _bits(one)[:1000].reshape(10, 100),
    )
    np.testing.assert_array_equal(
        np.asarray(eh.motif_presence(fn, x, mesh=mesh)), np.asarray(eh.motif_presence(fn, x))
    )
    np.testing.assert_array_equal(
        np.asarray(eh.is_feasible(fn, x, mesh=mesh)), np.asarray(eh.is_feasible(fn, x))
    )


def test_a_device_array_stays_sharded_over_every_device(batch) -> None:
    """A device array (here 1,000 rows sharded over 2 devices) is split over all 8 devices and
    its values come back sharded over them; a 2 x 4 mesh uses both axes; under ``jit`` too (a
    CPU array on one device is host data: its values come back on the default device)."""
    fn, x = batch
    one = _bits(eh.evaluate(fn, x[:1000], threads=1))
    mesh = parallel.make_mesh()
    pair = parallel.make_mesh(2)
    got = eh.evaluate(fn, jax.device_put(x[:1000], NamedSharding(pair, P("data"))), mesh=mesh)
    assert len(got.sharding.device_set) == 8
    assert {shard.data.shape for shard in got.addressable_shards} == {(125,)}
    np.testing.assert_array_equal(_bits(got), one)
    grid = jax.make_mesh((2, 4), ("a", "b"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    placed = jax.device_put(x[:1000], NamedSharding(grid, P("a")))  # rows on 2 of 8 devices
    got = eh.evaluate(fn, placed, mesh=grid)
    assert len(got.sharding.device_set) == 8
    np.testing.assert_array_equal(_bits(got), one)
    jitted = jax.jit(lambda f, xs: eh.evaluate(f, xs, mesh=mesh))(fn, jnp.asarray(x[:999]))
    np.testing.assert_array_equal(_bits(jitted), one[:999])


def test_a_mesh_is_checked_and_empty_batches_pass(batch) -> None:
    fn, x = batch
    with pytest.raises(ValueError, match=r"mesh must be a jax\.sharding\.Mesh"):
        eh.evaluate(fn, x, mesh="all")
    with pytest.raises(ValueError, match="outside"):
        eh.evaluate(fn, np.full((3, fn.config.dim), 99), mesh=parallel.make_mesh())
    assert eh.evaluate(fn, x[:0], mesh=parallel.make_mesh()).shape == (0,)
