"""PropEn pairs / triples / kNN against brute-force pure-Python versions (authors' code, paper Alg.
DatasetFormatting), including ties at the k-NN boundary, duplicates, NaN and -inf values."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from llome_jax.llome import (
    PropEnConfig,
    cap_infeasible_inputs,
    first_occurrences,
    hamming_neighbours,
    max_differences,
    preference_triples,
    propen_pairs,
    train_val_split,
)
from llome_jax.training.loss_inputs import margin_reward


# ---------------------------------------------------------------------------------------------
# Independent brute-force references (plain Python loops, no shared code with the library)
# ---------------------------------------------------------------------------------------------
def brute_unique(x: np.ndarray) -> list[int]:
    seen: set[tuple[int, ...]] = set()
    keep = []
    for i, row in enumerate(map(tuple, x.tolist())):
        if row not in seen:
            seen.add(row)
            keep.append(i)
    return keep


def brute_neighbours(
    x: list[list[int]], k: int, max_distance: float
) -> list[list[tuple[int, int]]]:
    """Per row: [(itself, 0)] + the k-1 nearest others within the threshold, by (distance, index)."""
    n, length = len(x), len(x[0])
    out = []
    for i in range(n):
        others = []
        for j in range(n):
            d = sum(a != b for a, b in zip(x[i], x[j]))
            if j != i and d / length <= max_distance:
                others.append((d, j))
        others.sort()
        out.append([(i, 0)] + [(j, d) for d, j in others[: k - 1]])
    return out


def clean(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def brute_pairs(x, f, k, max_distance, symmetric):
    uniq = brute_unique(x)
    xs = [x[i].tolist() for i in uniq]
    fs = [clean(float(f[i])) for i in uniq]
    nb = brute_neighbours(xs, k, max_distance)
    pairs = {}
    for a in range(len(xs)):
        for b, d in nb[a][1:]:
            if fs[b] > fs[a]:
                pairs[(uniq[a], uniq[b])] = d
            if symmetric and fs[a] > fs[b]:
                pairs[(uniq[b], uniq[a])] = d
    return pairs


def brute_triples(x, f, k, max_distance):
    uniq = brute_unique(x)
    xs = [x[i].tolist() for i in uniq]
    fs = [clean(float(f[i])) for i in uniq]
    nb = brute_neighbours(xs, k, max_distance)
    out = set()
    for a in range(len(xs)):
        for j, _ in nb[a]:
            if fs[j] > fs[a]:
                for r, _ in nb[a]:
                    if fs[r] <= fs[a]:
                        out.add((uniq[a], uniq[j], uniq[r]))
    return out


def clustered_set(seed: int, n: int, length: int, vocab: int, mutation: float):
    """GA-like data: mutants of a few parents (many equal distances), duplicates, tied values,
    NaN and -inf (infeasible) values."""
    rng = np.random.default_rng(seed)
    parents = rng.integers(0, vocab, (3, length))
    x = parents[rng.integers(0, 3, n)]
    flips = rng.random((n, length)) < mutation
    x = np.where(flips, rng.integers(0, vocab, (n, length)), x)
    dup = rng.integers(0, n, n // 8)
    x[rng.integers(0, n, n // 8)] = x[dup]
    f = rng.choice(np.array([0.0, 0.25, 0.5, 0.75, 1.0, -np.inf, np.nan], np.float32), n)
    return x.astype(np.int32), f


CASES = [  # (seed, n, L, vocab, mutation, k, max_distance)
    (0, 60, 8, 4, 0.2, 5, 0.25),
    (1, 90, 12, 3, 0.15, 30, 0.25),
    (2, 40, 5, 2, 0.3, 4, 0.4),
    (3, 120, 32, 32, 0.05, 30, 0.25),
]


# ---------------------------------------------------------------------------------------------
# Neighbours
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES)
def test_neighbours_match_brute_force(case):
    seed, n, length, vocab, mutation, k, max_distance = case
    x, _ = clustered_set(seed, n, length, vocab, mutation)
    x = x[first_occurrences(x)]
    nb = hamming_neighbours(x, k, max_distance, block_size=16)
    expected = brute_neighbours(x.tolist(), k, max_distance)
    for i, row in enumerate(expected):
        got = [(int(j), int(d)) for j, d in zip(nb.index[i], nb.distance[i]) if j >= 0]
        assert got == row, f"row {i}"
    assert np.all(nb.index[:, 0] == np.arange(len(x)))
    assert np.all((nb.index >= 0) == (nb.distance >= 0))


def test_neighbours_of_sizes_in_one_bucket_share_one_compiled_block():
    # 120 and 127 rows (L = 32, v = 32: 32 rows a group, 4 groups either way; blocks of 120
    # and 127 both round up to 128): one compiled block, padding masked, brute force exact
    from llome_jax.llome import neighbours as nb_module

    x, _ = clustered_set(3, 160, 32, 32, 0.05)
    x = x[first_occurrences(x)]
    nb_module._compiled_block.cache_clear()
    for n in (120, 127):
        nb = hamming_neighbours(x[:n], 30, 0.25)
        expected = brute_neighbours(x[:n].tolist(), 30, 0.25)
        for i, row in enumerate(expected):
            got = [(int(j), int(d)) for j, d in zip(nb.index[i], nb.distance[i]) if j >= 0]
            assert got == row, f"{n} rows: row {i}"
    assert nb_module._compiled_block.cache_info().currsize == 1
    assert [nb_module.padded_size(c) for c in (1, 8, 9, 15, 16, 17, 120, 127, 129)] == [
        1,
        8,
        9,
        15,
        16,
        18,
        120,
        128,
        144,
    ]


def test_neighbours_boundary_ties_go_to_lower_index():
    # Row 0 has 6 others at distance 1: with k=3 it keeps the two lowest indices.
    base = np.zeros(6, np.int32)
    x = np.stack([base] + [np.eye(6, dtype=np.int32)[i] for i in (3, 1, 5, 0, 4, 2)])
    nb = hamming_neighbours(x, 3, 0.5)
    assert nb.index[0].tolist() == [0, 1, 2]
    assert nb.distance[0].tolist() == [0, 1, 1]


def test_neighbours_duplicates_and_long_sequences():
    rng = np.random.default_rng(7)
    x = rng.integers(0, 20, (50, 70)).astype(np.int32)  # 3 words per bit plane, 5 planes
    x[10] = x[3]
    x[11] = x[3]
    x[20:30] = np.where(rng.random((10, 70)) < 0.1, 0, x[3])
    nb = hamming_neighbours(x, 6, 0.3, num_states=20)
    expected = brute_neighbours(x.tolist(), 6, 0.3)
    assert nb.index[3, :3].tolist() == [3, 10, 11]  # itself first, then duplicates by index
    for i, row in enumerate(expected):
        assert [(int(j), int(d)) for j, d in zip(nb.index[i], nb.distance[i]) if j >= 0] == row


def test_neighbours_fewer_rows_than_slots():
    x = np.array([[0, 1], [0, 2], [3, 3]])
    nb = hamming_neighbours(x, 30, 1.0)
    assert nb.index.shape == (3, 30)
    assert nb.index[0, :3].tolist() == [0, 1, 2] and np.all(nb.index[:, 3:] == -1)
    assert nb.fraction[0, :3].tolist() == [0.0, 0.5, 1.0] and np.isnan(nb.fraction[0, 3])


def test_neighbours_sharded_equals_single_device():
    # Exact by construction: distances are integer popcounts and the neighbour order comes from
    # unique integer keys (top_k on their order-preserving float32 bit patterns, no arithmetic).
    mesh = jax.make_mesh((8,), ("data",))
    x, _ = clustered_set(4, 100, 16, 8, 0.2)
    single = hamming_neighbours(x, 7, 0.25, block_size=32)
    sharded = hamming_neighbours(x, 7, 0.25, block_size=32, mesh=mesh)
    np.testing.assert_array_equal(single.index, sharded.index)
    np.testing.assert_array_equal(single.distance, sharded.distance)


def test_max_differences_is_inclusive_like_scipy():
    assert max_differences(32, 0.25) == 8
    assert max_differences(128, 0.25) == 32
    assert max_differences(30, 0.25) == 7
    assert max_differences(100, 0.29) == 29  # 0.29 * 100 = 28.999... in float; 29 / 100 <= 0.29
    with pytest.raises(ValueError, match="fraction"):
        max_differences(10, 1.5)


# ---------------------------------------------------------------------------------------------
# Pairs
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_pairs_match_brute_force(case, symmetric):
    seed, n, length, vocab, mutation, k, max_distance = case
    x, f = clustered_set(seed, n, length, vocab, mutation)
    cfg = PropEnConfig(k, max_distance, max_infeasible_fraction=None, symmetric=symmetric)
    pairs = propen_pairs(jax.random.key(seed), x, f, cfg, block_size=16)
    expected = brute_pairs(x, f, k, max_distance, symmetric)
    got = list(zip(pairs.input_index.tolist(), pairs.target_index.tolist()))
    assert len(got) == len(set(got)) == len(expected) == pairs.num_candidates
    assert set(got) == set(expected)
    fc = np.where(np.isnan(f), -np.inf, f)
    np.testing.assert_array_equal(pairs.input_value, fc[pairs.input_index])
    np.testing.assert_array_equal(pairs.target_value, fc[pairs.target_index])
    assert np.all(np.isfinite(pairs.target_value)) and np.all(
        pairs.target_value > pairs.input_value
    )
    np.testing.assert_allclose(pairs.distance, [expected[p] / length for p in got])
    # reward computed by hand: infeasible counts as 0
    hand = [
        max((b if np.isfinite(b) else 0.0) - (a if np.isfinite(a) else 0.0), 0.0)
        for a, b in zip(pairs.input_value, pairs.target_value)
    ]
    np.testing.assert_allclose(pairs.reward, hand, rtol=0, atol=1e-7)
    assert pairs.num_infeasible_candidates == sum(1 for p in expected if np.isneginf(fc[p[0]]))


def test_symmetric_pairs_are_a_superset_of_directed():
    x, f = clustered_set(5, 80, 10, 3, 0.2)
    base = dict(num_neighbours=4, max_distance=0.3, max_infeasible_fraction=None)
    directed = propen_pairs(jax.random.key(0), x, f, PropEnConfig(**base))
    union = propen_pairs(jax.random.key(0), x, f, PropEnConfig(**base, symmetric=True))
    d = set(zip(directed.input_index.tolist(), directed.target_index.tolist()))
    u = set(zip(union.input_index.tolist(), union.target_index.tolist()))
    assert d < u  # small k: some pairs are only in the other point's neighbour list


@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.0])
def test_pairs_infeasible_cap(fraction):
    x, f = clustered_set(1, 90, 12, 3, 0.15)
    f = np.where(np.arange(90) % 3 == 0, -np.inf, f)  # many infeasible inputs
    cfg = PropEnConfig(30, 0.25, max_infeasible_fraction=fraction)
    pairs = propen_pairs(jax.random.key(3), x, f, cfg)
    expected = brute_pairs(x, f, 30, 0.25, False)
    fc = np.where(np.isnan(f), -np.inf, f)
    feasible = {p for p in expected if np.isfinite(fc[p[0]])}
    infeasible = set(expected) - feasible
    limit = round(len(feasible) * fraction / (1 - fraction))
    assert len(infeasible) > limit  # the cap binds in this set
    got = set(zip(pairs.input_index.tolist(), pairs.target_index.tolist()))
    assert feasible <= got and got <= set(expected)
    assert len(got - feasible) == pairs.num_infeasible_inputs == limit
    assert pairs.num_candidates == len(expected)


def test_cap_rounding_follows_reference():
    # F = 14 feasible: round(14 * 0.1 / 0.9) = round(1.56) = 2 infeasible kept
    infeasible = np.array([False] * 14 + [True] * 5)
    kept = cap_infeasible_inputs(jax.random.key(0), infeasible, 0.1)
    assert kept.size == 16 and infeasible[kept].sum() == 2
    assert np.array_equal(np.sort(kept[~infeasible[kept]]), np.arange(14))
    everything = cap_infeasible_inputs(jax.random.key(0), infeasible, None)
    assert sorted(everything.tolist()) == list(range(19))


def test_pairs_deterministic_per_key():
    x, f = clustered_set(2, 60, 8, 3, 0.2)
    a = propen_pairs(jax.random.key(1), x, f)
    b = propen_pairs(jax.random.key(1), x, f)
    c = propen_pairs(jax.random.key(2), x, f)
    np.testing.assert_array_equal(a.input_index, b.input_index)
    np.testing.assert_array_equal(a.target_index, b.target_index)
    assert not np.array_equal(a.input_index, c.input_index)  # shuffled differently

    def feasible_pairs(p):
        ok = np.isfinite(p.input_value)
        return sorted(zip(p.input_index[ok].tolist(), p.target_index[ok].tolist()))

    assert feasible_pairs(a) == feasible_pairs(c)  # only the infeasible subsample depends on it


def test_pairs_gather_and_select():
    x, f = clustered_set(0, 60, 8, 4, 0.2)
    pairs = propen_pairs(jax.random.key(0), x, f, PropEnConfig(5, 0.25))
    inputs, targets = pairs.gather(x)
    assert inputs.shape == targets.shape == (len(pairs), 8)
    np.testing.assert_allclose(np.mean(inputs != targets, axis=1), pairs.distance)
    sub = pairs.select(np.arange(3))
    assert len(sub) == 3 and sub.target_index.tolist() == pairs.target_index[:3].tolist()


def test_pairs_reject_bad_input():
    x = np.zeros((4, 3), np.int32)
    with pytest.raises(ValueError, match=r"\+inf"):
        propen_pairs(jax.random.key(0), x, np.array([0.0, np.inf, 0.0, 0.0]))
    with pytest.raises(ValueError, match="shape"):
        propen_pairs(jax.random.key(0), x, np.zeros(3))
    with pytest.raises(ValueError, match="integer"):
        propen_pairs(jax.random.key(0), x.astype(float), np.zeros(4))
    with pytest.raises(ValueError, match="max_infeasible_fraction"):
        PropEnConfig(max_infeasible_fraction=1.0)
    with pytest.raises(ValueError, match="num_neighbours"):
        PropEnConfig(num_neighbours=1)


# ---------------------------------------------------------------------------------------------
# Triples
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES[:3])
def test_triples_match_brute_force(case):
    seed, n, length, vocab, mutation, k, max_distance = case
    x, f = clustered_set(seed, n, length, vocab, mutation)
    cfg = PropEnConfig(k, max_distance, max_infeasible_fraction=None)
    triples = preference_triples(jax.random.key(seed), x, f, cfg)
    expected = brute_triples(x, f, k, max_distance)
    got = list(
        zip(
            triples.prompt_index.tolist(),
            triples.chosen_index.tolist(),
            triples.rejected_index.tolist(),
        )
    )
    assert len(got) == len(set(got)) == len(expected) == triples.num_candidates
    assert set(got) == expected
    assert any(p == r for p, _, r in got)  # the prompt can be its own rejected sequence
    assert np.all(triples.chosen_value > triples.prompt_value)
    assert np.all(triples.prompt_value >= triples.rejected_value)
    assert np.all(np.isfinite(triples.chosen_value))
    np.testing.assert_allclose(
        triples.chosen_reward, np.asarray(margin_reward(triples.prompt_value, triples.chosen_value))
    )


def test_triples_caps():
    x, f = clustered_set(1, 90, 12, 3, 0.15)
    f = np.where(np.arange(90) % 4 == 0, -np.inf, f)
    expected = brute_triples(x, f, 30, 0.25)
    per_prompt = {}
    for p, c, r in expected:
        per_prompt.setdefault(p, set()).add((c, r))
    t = preference_triples(
        jax.random.key(0), x, f, PropEnConfig(max_infeasible_fraction=None), max_per_prompt=3
    )
    got = list(zip(t.prompt_index.tolist(), t.chosen_index.tolist(), t.rejected_index.tolist()))
    assert set(got) <= expected
    counts = {p: sum(1 for q, _, _ in got if q == p) for p in per_prompt}
    assert counts == {p: min(3, len(s)) for p, s in per_prompt.items()}

    capped = preference_triples(jax.random.key(0), x, f, PropEnConfig(max_infeasible_fraction=0.1))
    again = preference_triples(jax.random.key(0), x, f, PropEnConfig(max_infeasible_fraction=0.1))
    other = preference_triples(jax.random.key(1), x, f, PropEnConfig(max_infeasible_fraction=0.1))
    np.testing.assert_array_equal(capped.prompt_index, again.prompt_index)
    np.testing.assert_array_equal(capped.rejected_index, again.rejected_index)
    assert not np.array_equal(capped.prompt_index, other.prompt_index)
    fc = np.where(np.isnan(f), -np.inf, f)
    feasible = sum(1 for p, _, _ in expected if np.isfinite(fc[p]))
    assert capped.num_infeasible_prompts == round(feasible * 0.1 / 0.9)
    assert len(capped) == feasible + capped.num_infeasible_prompts
    with pytest.raises(ValueError, match="pairs only"):
        preference_triples(jax.random.key(0), x, f, PropEnConfig(symmetric=True))


def test_triples_share_a_neighbour_table():
    x, f = clustered_set(0, 60, 8, 4, 0.2)
    cfg = PropEnConfig(5, 0.25, max_infeasible_fraction=None)
    nb = hamming_neighbours(x[first_occurrences(x)], 5, 0.25)
    a = preference_triples(jax.random.key(0), x, f, cfg, neighbours=nb)
    b = preference_triples(jax.random.key(0), x, f, cfg)
    np.testing.assert_array_equal(a.prompt_index, b.prompt_index)
    with pytest.raises(ValueError, match="deduplicated"):
        propen_pairs(jax.random.key(0), x, f, PropEnConfig(6, 0.25), neighbours=nb)


# ---------------------------------------------------------------------------------------------
# Split, reward, dedup
# ---------------------------------------------------------------------------------------------
def test_train_val_split_sizes_and_determinism():
    train, val = train_val_split(jax.random.key(0), 3000)
    assert train.size == 2850 and val.size == 100  # floor(0.95 n); eval capped at 100
    assert len(set(train.tolist()) | set(val.tolist())) == 2950
    assert not set(train.tolist()) & set(val.tolist())
    train2, val2 = train_val_split(jax.random.key(0), 3000)
    np.testing.assert_array_equal(train, train2)
    np.testing.assert_array_equal(val, val2)
    t, v = train_val_split(jax.random.key(0), 30, max_val_examples=None)
    assert (t.size, v.size) == (28, 2) and sorted(np.concatenate([t, v]).tolist()) == list(
        range(30)
    )
    with pytest.raises(ValueError, match="at least one"):
        train_val_split(jax.random.key(0), 1)


def test_margin_reward_infeasible_is_zero():
    fx = np.array([0.25, -np.inf, 0.5, 0.5, np.nan])
    fy = np.array([0.75, 0.5, 0.25, -np.inf, 1.0])
    np.testing.assert_allclose(np.asarray(margin_reward(fx, fy)), [0.5, 0.5, 0.0, 0.0, 1.0])


def test_first_occurrences_keeps_first():
    x = np.array([[1, 2], [3, 4], [1, 2], [0, 0], [3, 4]])
    assert first_occurrences(x).tolist() == [0, 1, 3]


def test_random_bits_are_jax_random_bits_drawn_at_fewer_sizes():
    # drawn at a padded size and cut: the same bits as jax.random.bits at the exact size (row
    # i depends on i alone under partitionable threefry), for 1-D and [n, 2] draws
    from llome_jax.llome.data import random_bits

    key = jax.random.key(11)
    for n in (0, 1, 7, 16, 17, 129, 1000, 1234):
        np.testing.assert_array_equal(
            random_bits(key, n), np.asarray(jax.random.bits(key, (n,), jnp.uint32))
        )
        np.testing.assert_array_equal(
            random_bits(key, n, 2), np.asarray(jax.random.bits(key, (n, 2), jnp.uint32))
        )
