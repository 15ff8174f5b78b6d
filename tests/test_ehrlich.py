"""Properties, construction and input checking of Ehrlich functions."""

from __future__ import annotations

import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import llome_jax.ehrlich as eh
from llome_jax.compat.holo import Ehrlich as HoloEhrlich

SMALL = eh.EhrlichConfig(num_states=8, dim=16, num_motifs=2, motif_length=4, quantization=4)


@pytest.fixture(scope="module")
def fn():
    return eh.make(jax.random.key(3), SMALL)


# ------------------------------------------------------------------ naming and config
def test_name_round_trip():
    cfg = eh.EhrlichConfig(32, 32, 4, 4)
    assert cfg.name == "Ehr(32,32)-4-4-4"
    assert eh.EhrlichConfig.from_name("Ehr(32,32)-4-4-4") == cfg.__class__(32, 32, 4, 4, 4)
    assert eh.EhrlichConfig.from_name("Ehr(32, 128)-8-8-8").dim == 128
    assert eh.EhrlichConfig.from_name("Ehr(32,32)-4-4-4-a2").epistasis_factor == 2.0
    hash(cfg)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_states=32, dim=15, num_motifs=4, motif_length=4), "dim=15"),
        (dict(num_states=32, dim=32, num_motifs=4, motif_length=4, quantization=5), "quantization"),
        (dict(num_states=32, dim=32, num_motifs=4, motif_length=4, quantization=0), "quantization"),
        (dict(num_states=1, dim=32, num_motifs=4, motif_length=4), "num_states"),
        (dict(num_states=32, dim=32, num_motifs=0, motif_length=4), "num_motifs"),
        (dict(num_states=32, dim=32, num_motifs=4, motif_length=0), "motif_length"),
        (dict(num_states=32.0, dim=32, num_motifs=4, motif_length=4), "num_states"),
    ],
)
def test_impossible_configurations_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        eh.EhrlichConfig(**kwargs)


def test_bad_names_raise():
    with pytest.raises(ValueError, match="cannot parse"):
        eh.EhrlichConfig.from_name("Ehrlich-32-32")
    with pytest.raises(ValueError, match="unknown paper function"):
        eh.paper_function("f9")
    with pytest.raises(ValueError, match="instance-seed"):
        eh.resolve_function("Ehr(16,16)-2-2-2")


# ------------------------------------------------------------------ make
def test_make_is_deterministic_per_key(fn):
    again = eh.make(jax.random.key(3), SMALL)
    chex.assert_trees_all_equal(fn, again)
    other = eh.make(jax.random.key(4), SMALL)
    assert not np.array_equal(np.asarray(fn.transition_matrix), np.asarray(other.transition_matrix))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("v", [4, 20, 32])
def test_make_transition_matrix_structure(seed, v):
    cfg = eh.EhrlichConfig(num_states=v, dim=16, num_motifs=2, motif_length=4)
    inst = eh.make(jax.random.key(seed), cfg)
    matrix = np.asarray(inst.transition_matrix)
    np.testing.assert_allclose(matrix.sum(-1), 1.0, atol=1e-6)
    assert eh.is_ergodic(matrix)
    assert np.all(np.diag(matrix) > 0)
    # The support is a row-permuted wrapping band of half-width int(0.4 v) with the diagonal on:
    # every row equals some band row (plus its own diagonal entry), and the matched band rows are
    # all distinct (a permutation), so the number of zeros is the band's up to the diagonal fixes.
    band = eh.banded_mask(v, int(0.4 * v))
    eye = np.eye(v, dtype=bool)
    support = matrix > 0
    matched = [
        [r for r in range(v) if np.array_equal(support[i], band[r] | eye[i])] for i in range(v)
    ]
    assert all(matched), "a row's zero pattern is not a band row"
    assert _has_permutation(matched)
    pi = np.asarray(inst.stationary_dist)
    np.testing.assert_allclose(pi @ matrix, pi, atol=1e-5)


def _has_permutation(candidates: list[list[int]]) -> bool:
    """Whether one candidate per row can be chosen with all choices distinct (tiny backtracking)."""

    def assign(row: int, used: frozenset) -> bool:
        if row == len(candidates):
            return True
        return any(assign(row + 1, used | {c}) for c in candidates[row] if c not in used)

    return assign(0, frozenset())


def test_make_motifs_and_spacings_follow_reference_formula(fn):
    cfg = fn.config
    offsets = np.asarray(fn.offsets)
    # gap_j = 1 + floor(s w_j) with sum_j w_j = 1 (s = slack // c): each motif spans at most
    # (k - 1) + s positions beyond its first, and all motifs fit in L together
    span = offsets[:, -1]
    assert np.all(span <= (cfg.motif_length - 1) + cfg.slack // cfg.num_motifs), span
    assert np.sum(span + 1) <= cfg.dim
    # motifs are one feasible chain, chunked
    chain = np.asarray(fn.motifs).reshape(-1)
    matrix = np.asarray(fn.transition_matrix)
    assert all(matrix[a, b] > 0 for a, b in itertools.pairwise(chain))


def test_is_ergodic_detects_reducible_chain():
    assert not eh.is_ergodic(np.eye(3))
    assert eh.is_ergodic(np.full((3, 3), 1 / 3))


# ------------------------------------------------------------------ values
def test_optimum_scores_one(fn):
    assert float(eh.evaluate(fn, eh.optimal_solution(fn))) == 1.0
    for name in ("f1", "f2", "f3", "f4"):
        f = eh.paper_function(name)
        assert float(eh.evaluate(f, eh.optimal_solution(f))) == 1.0


@pytest.mark.parametrize("q", [1, 2, 4])
def test_feasible_values_on_quantisation_grid(q):
    cfg = eh.EhrlichConfig(num_states=8, dim=16, num_motifs=2, motif_length=4, quantization=q)
    inst = eh.make(jax.random.key(q), cfg)
    chains = np.asarray(eh.initial_solution(jax.random.key(10), inst, 512))
    # each row keeps a random share of the optimum's positions, so that every level occurs
    rng = np.random.default_rng(q)
    keep = rng.random((512, cfg.dim)) < rng.random((512, 1))
    x = np.where(keep, np.asarray(eh.optimal_solution(inst))[None], chains)
    values = np.asarray(eh.evaluate(inst, x))
    feasible = np.isfinite(values)
    assert feasible.sum() >= 100
    values = values[feasible]
    presence = np.asarray(eh.motif_presence(inst, x))
    np.testing.assert_array_equal(presence * q, np.round(presence * q))
    grid = {np.float32(a * b / q / q) for a in range(q + 1) for b in range(q + 1)}
    assert set(values.tolist()) <= {float(g) for g in grid}
    # levels 0 ... q of both motifs occur (q + 1 values at least, 0 and 1 among them)
    assert len(set(values.tolist())) >= q + 1 and {0.0, 1.0} <= set(values.tolist())


def test_uniform_random_sequences_are_infeasible():
    f = eh.paper_function("f4")
    x = eh.random_solution(jax.random.key(0), f, 2000)
    assert np.all(np.isneginf(np.asarray(eh.evaluate(f, x))))


def test_initial_solutions_are_feasible(fn):
    x = eh.initial_solution(jax.random.key(1), fn, 100)
    chex.assert_shape(x, (100, SMALL.dim))
    assert np.all(np.asarray(eh.is_feasible(fn, x)))


def test_epistasis_response_matches_formula():
    cfg = eh.EhrlichConfig(num_states=8, dim=16, num_motifs=1, motif_length=4, epistasis_factor=2.0)
    inst = eh.make(jax.random.key(0), cfg)
    x = eh.initial_solution(jax.random.key(2), inst, 256)
    h = np.asarray(eh.motif_presence(inst, x))[:, 0]
    # Exact whatever the evaluation order or FMA contraction: h is a multiple of 1/4 in [0, 1],
    # so every intermediate is a multiple of 1/32 of magnitude <= 2 (exact in float32).
    expected = ((np.float32(2.0) * h) * (h - np.float32(1)) + np.float32(1)) * h
    np.testing.assert_array_equal(np.asarray(eh.evaluate(inst, x)), expected.astype(np.float32))


# ------------------------------------------------------------------ transformations
def _mixed_batch(f: eh.Ehrlich, n: int, key: jax.Array) -> jax.Array:
    k1, k2, k3 = jax.random.split(key, 3)
    feasible = eh.initial_solution(k1, f, n)
    opt = jnp.broadcast_to(eh.optimal_solution(f), feasible.shape)
    mask = jax.random.bernoulli(k2, 0.5, feasible.shape)
    mixed = jnp.where(mask, opt, feasible)
    noise = jax.random.randint(k3, feasible.shape, 0, f.config.num_states)
    return jnp.where(jax.random.bernoulli(k3, 0.02, feasible.shape), noise, mixed)


# Exact equality across transformations, chunkings and shardings holds by construction: motif
# presence is integer match counts floor-divided to an integer level, a level / q is a multiple of
# 1/q = 1/4 here, and without epistasis the value is a product of <= 4 such numbers, exact in
# float32 in any order (only -inf marks infeasibility, an integer/boolean check).
def test_jit_equals_nojit_and_vmap_equals_loop(fn):
    x = _mixed_batch(fn, 64, jax.random.key(5))
    reference = np.asarray(eh.evaluate(fn, x))
    with jax.disable_jit():
        nojit = np.asarray(eh.evaluate(fn, x))
    np.testing.assert_array_equal(reference, nojit)
    vmapped = jax.vmap(lambda row: eh.evaluate(fn, row))(x)
    np.testing.assert_array_equal(np.asarray(vmapped), reference)
    looped = np.array([float(eh.evaluate(fn, row)) for row in x])
    np.testing.assert_array_equal(looped.astype(np.float32), reference)
    jitted = jax.jit(eh.evaluate)(fn, x)
    np.testing.assert_array_equal(np.asarray(jitted), reference)


def test_vmap_over_instances():
    keys = jax.random.split(jax.random.key(0), 3)
    instances = [eh.make(k, SMALL) for k in keys]
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *instances)
    x = _mixed_batch(instances[0], 32, jax.random.key(1))
    batched = jax.vmap(eh.evaluate, in_axes=(0, None))(stacked, x)
    for i, inst in enumerate(instances):
        np.testing.assert_array_equal(np.asarray(batched[i]), np.asarray(eh.evaluate(inst, x)))


def test_chunked_path_equals_single_block():
    f = eh.paper_function("f2")
    x = _mixed_batch(f, 1000, jax.random.key(2))
    whole = np.asarray(eh.evaluate(f, x, chunk_size=4096))
    for chunk in (64, 300, 999):  # uneven chunking: last block overlaps its predecessor
        np.testing.assert_array_equal(np.asarray(eh.evaluate(f, x, chunk_size=chunk)), whole)
    np.testing.assert_array_equal(
        np.asarray(eh.motif_presence(f, x, chunk_size=300)), np.asarray(eh.motif_presence(f, x))
    )


def test_batch_sizes_share_compiled_buckets():
    """Host inputs are padded to ``bucket_size`` rows: 100 batch sizes 1000..1099 reuse two
    compiled shapes (1024, 1280), and every value equals the one computed without padding."""
    from llome_jax.ehrlich import kernel

    f = eh.paper_function("f2")
    x = np.asarray(_mixed_batch(f, 1100, jax.random.key(5)))
    reference = np.asarray(kernel._evaluate(f, jnp.asarray(x), kernel.default_chunk_size(f.config)))
    before = kernel._evaluate._cache_size()
    for n in range(1000, 1100):
        got = eh.evaluate(f, x[:n])
        assert got.shape == (n,)
        np.testing.assert_array_equal(np.asarray(got), reference[:n])
    assert kernel._evaluate._cache_size() - before <= 2
    assert [eh.bucket_size(n) for n in (5, 8, 9, 33, 1000, 1025, 4097)] == [
        5, 8, 10, 40, 1024, 1280, 5120,
    ]  # fmt: skip
    sizes = np.arange(1, 5000)
    buckets = np.array([eh.bucket_size(int(n)) for n in sizes])
    assert np.all(buckets >= sizes) and np.all(buckets <= np.maximum(1.25 * sizes, 8))
    # motif presence and feasibility take the same path (batch-first outputs)
    np.testing.assert_array_equal(
        np.asarray(eh.motif_presence(f, x[:1001])), np.asarray(eh.motif_presence(f, x))[:1001]
    )
    np.testing.assert_array_equal(np.asarray(eh.is_feasible(f, x[:7])), np.isfinite(reference[:7]))


def test_large_host_batches_split_over_cores_with_identical_results(monkeypatch):
    """A host batch of 40,000 f2 rows (bucket 40,960) on 4 usable cores runs as 4 parts of
    10,240 rows (each >= 2^18 tokens), one per worker thread; values, motif presence and
    feasibility equal the unsplit kernel's bit for bit."""
    from concurrent.futures import ThreadPoolExecutor

    from llome_jax.ehrlich import dispatch, kernel
    from llome_jax.host import threads as host_threads

    assert dispatch.host_parts(40_960, 32, cores=4) == 4
    assert dispatch.host_parts(40_960, 32, cores=1) == 1
    assert (
        dispatch.host_parts(16_384, 32, cores=2) == 2
        and dispatch.host_parts(8_192, 32, cores=2) == 1
    )
    assert dispatch.host_parts(40_960, 32, cores=3) == 2  # a power of two that divides the bucket

    shapes = []

    class Counting(ThreadPoolExecutor):
        def submit(self, function, block):
            shapes.append(block.shape)
            return super().submit(function, block)

    pool = Counting(4)
    monkeypatch.setattr(host_threads, "usable_cores", lambda: 4)
    monkeypatch.setattr(host_threads, "pool", lambda: (pool, 4))
    f = eh.paper_function("f2")
    x = np.asarray(_mixed_batch(f, 40_000, jax.random.key(6)))
    chunk = kernel.default_chunk_size(f.config)
    reference = np.asarray(kernel._evaluate(f, jnp.asarray(x), chunk))
    assert np.isfinite(reference).any() and not np.isfinite(reference).all()
    got = np.asarray(eh.evaluate(f, x))
    assert shapes == [(10_240, 32)] * 4
    np.testing.assert_array_equal(got.view(np.int32), reference.view(np.int32))
    presence = np.asarray(kernel._motif_presence(f, jnp.asarray(x), chunk))
    np.testing.assert_array_equal(np.asarray(eh.motif_presence(f, x)), presence)
    np.testing.assert_array_equal(np.asarray(eh.is_feasible(f, x)), np.isfinite(reference))
    assert len(shapes) == 12
    # threads=1: one call, no part submitted; threads=2: two parts of 20,480 rows
    np.testing.assert_array_equal(np.asarray(eh.evaluate(f, x, threads=1)), got)
    assert len(shapes) == 12
    np.testing.assert_array_equal(np.asarray(eh.evaluate(f, x, threads=2)), got)
    assert shapes[12:] == [(20_480, 32)] * 2
    with pytest.raises(ValueError, match="threads must be >= 1"):
        eh.evaluate(f, x, threads=0)
    pool.shutdown()


def test_batch_shapes_are_preserved():
    f = eh.paper_function("f2")
    x = _mixed_batch(f, 24, jax.random.key(3)).reshape(2, 3, 4, 32)
    chex.assert_shape(eh.evaluate(f, x), (2, 3, 4))
    chex.assert_shape(eh.motif_presence(f, x), (2, 3, 4, 4))
    chex.assert_shape(eh.is_feasible(f, x), (2, 3, 4))
    chex.assert_shape(eh.evaluate(f, x[0, 0, 0]), ())


def test_sharded_evaluation_equals_single_device():
    assert jax.device_count() == 8
    f = eh.paper_function("f2")
    # exact by construction (see above): q = 4 and no epistasis, values are multiples of 1/256
    assert f.config.q == 4 and not f.config.epistasis_factor
    x = _mixed_batch(f, 8 * 512, jax.random.key(4))
    single = np.asarray(eh.evaluate(f, x))
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    xs = jax.device_put(x, NamedSharding(mesh, P("data")))
    sharded = jax.jit(eh.evaluate)(f, xs)
    np.testing.assert_array_equal(np.asarray(sharded), single)
    sharded_chunked = jax.jit(lambda f, x: eh.evaluate(f, x, chunk_size=256))(f, xs)
    np.testing.assert_array_equal(np.asarray(sharded_chunked), single)


def test_out_of_range_tokens_inside_jit_are_infeasible():
    f = eh.paper_function("f2")
    x = eh.optimal_solution(f).at[5].set(40)
    assert float(jax.jit(eh.evaluate)(f, x)) == -np.inf
    x = eh.optimal_solution(f).at[5].set(-3)
    assert float(jax.jit(eh.evaluate)(f, x)) == -np.inf


# ------------------------------------------------------------------ input errors
@pytest.mark.parametrize(
    "bad, message",
    [
        (np.zeros((3, 31), np.int32), r"shape \[\.\.\., 32\]"),
        (np.zeros((3, 32), np.float32), "integer token ids"),
        (np.zeros((3, 32, 32), np.float32), "one-hot"),
        (np.zeros((3, 32), bool), "integer token ids"),
        (np.full((3, 32), 32, np.int32), "token 32 outside"),
        (np.full((3, 32), -1, np.int64), "token -1 outside"),
        (jnp.full((3, 32), 99, jnp.int32), "token 99 outside"),
        ("3,1,0", "integer array"),
    ],
)
@pytest.mark.parametrize("function", [eh.evaluate, eh.motif_presence, eh.is_feasible])
def test_bad_inputs_raise_before_jit(bad, message, function):
    f = eh.paper_function("f2")
    with pytest.raises(ValueError, match=message):
        function(f, bad)


def test_from_holo_rejects_bad_instances():
    good = eh.paper_function("f2")
    matrix, motifs, gaps = (
        np.asarray(good.transition_matrix),
        np.asarray(good.motifs),
        np.asarray(good.spacings),
    )
    with pytest.raises(ValueError, match="square"):
        eh.from_holo(matrix[:3], motifs, gaps)
    with pytest.raises(ValueError, match="spacings"):
        eh.from_holo(matrix, motifs, gaps[:, :2])
    with pytest.raises(ValueError, match=">= 1"):
        eh.from_holo(matrix, motifs, np.zeros_like(gaps))
    with pytest.raises(ValueError, match="motif states"):
        eh.from_holo(matrix, motifs + 40, gaps)
    with pytest.raises(ValueError, match="rows summing"):
        eh.from_holo(matrix * 2, motifs, gaps)
    with pytest.raises(ValueError, match="spans"):
        eh.from_holo(matrix, [[0, 1]], [[10]], dim=5)


# ------------------------------------------------------------------ holo facade
def test_holo_facade_matches_functional_core():
    """The facade's NumPy backend (the torch one: tests/test_compat_holo_bench.py)."""
    from llome_jax.compat.holo import HoloSeedWarning

    with pytest.warns(HoloSeedWarning, match="not the instance pytorch-holo builds"):
        facade = HoloEhrlich(
            num_states=8, dim=16, num_motifs=2, motif_length=4, random_seed=3, backend="numpy"
        )
    core = eh.make(jax.random.key(3), SMALL)
    np.testing.assert_array_equal(facade.transition_matrix, np.asarray(core.transition_matrix))
    x0 = facade.initial_solution()
    assert x0.shape == (16,)
    np.testing.assert_array_equal(facade.initial_solution(), x0)  # holo resets the seed
    assert facade.evaluate_true(facade.optimal_solution()[None])[0] == 1.0
    assert facade.optimal_value == 1.0
    xs = facade.random_solution(50)
    assert xs.shape == (50, 16)
    np.testing.assert_array_equal(facade(xs), np.asarray(eh.evaluate(core, xs)))
    negated = HoloEhrlich.from_instance(core, negate=True, backend="numpy")
    assert negated(negated.optimal_solution()[None])[0] == -1.0 and negated.optimal_value == -1.0
    assert [m.tolist() for m in facade.motifs] == np.asarray(core.motifs).tolist()


def test_instance_json_round_trip_and_cli_file(tmp_path, capsys):
    """``Ehrlich.to_json`` / ``from_json`` rebuild an instance bit for bit; ``describe --json``
    writes a file that ``--function`` loads as the same function with the same start."""
    import json

    from llome_jax.cli import main as cli_main

    for fn in (eh.paper_function("f2"), eh.resolve_function("Ehr(8,16)-2-4-4", 7)):
        back = eh.Ehrlich.from_json(json.loads(json.dumps(fn.to_json())))
        for name in ("transition_matrix", "stationary_dist", "motifs", "offsets"):
            np.testing.assert_array_equal(
                np.asarray(getattr(back, name)), np.asarray(getattr(fn, name))
            )
        assert back.config == fn.config
    assert (
        cli_main(["ehrlich", "describe", "Ehr(8,16)-2-4-4", "--instance-seed", "7", "--json"]) == 0
    )
    path = tmp_path / "instance.json"
    path.write_text(capsys.readouterr().out)
    fn = eh.resolve_function("Ehr(8,16)-2-4-4", 7)
    loaded = eh.resolve_function(str(path))
    # feasible chain samples with varied values, the optimum, and uniform (mostly infeasible) rows
    x = jnp.concatenate(
        [
            eh.initial_solution(jax.random.key(3), fn, 512),
            eh.optimal_solution(fn)[None],
            eh.random_solution(jax.random.key(4), fn, 64),
        ]
    )
    values = np.asarray(eh.evaluate(fn, x))
    assert len(np.unique(values[np.isfinite(values)])) >= 3 and values[512] == 1.0
    np.testing.assert_array_equal(np.asarray(eh.evaluate(loaded, x)), values)
    np.testing.assert_array_equal(
        np.asarray(eh.resolve_initial_solution(str(path))),
        np.asarray(eh.resolve_initial_solution("Ehr(8,16)-2-4-4", 7)),
    )
    with pytest.raises(ValueError, match="not an Ehrlich instance file"):
        eh.Ehrlich.from_json({"schema": "other"})
    with pytest.raises(FileNotFoundError):
        eh.resolve_function(str(tmp_path / "missing.json"))


def test_docstring_examples():
    """The examples in the evaluation modules (``bucket_size``, ``host_parts``, ``evaluate``,
    ``default_chunk_size``)."""
    import doctest

    from llome_jax.ehrlich import dispatch, kernel

    results = [doctest.testmod(module) for module in (dispatch, kernel)]
    assert sum(r.attempted for r in results) >= 8 and sum(r.failed for r in results) == 0
