"""lm.logprobs against a direct numpy computation."""

from __future__ import annotations

import jax
import numpy as np

from llome_jax.lm.logprobs import (
    sequence_logprobs,
    target_positions,
    target_window,
    token_logprobs,
    window_logprobs,
)


def test_sequence_logprobs_matches_numpy(key):
    k1, k2, k3 = jax.random.split(key, 3)
    logits = np.asarray(jax.random.normal(k1, (3, 6, 7))) * 3
    ids = np.asarray(jax.random.randint(k2, (3, 6), 0, 7))
    mask = np.asarray(jax.random.bernoulli(k3, 0.6, (3, 6))).astype(np.int32)
    out = sequence_logprobs(logits, ids, mask)
    expected_sum = np.zeros(3)
    expected_count = np.zeros(3)
    for b in range(3):
        for t in range(1, 6):
            if mask[b, t]:
                row = logits[b, t - 1].astype(np.float64)
                expected_sum[b] += (
                    row[ids[b, t]] - np.log(np.exp(row - row.max()).sum()) - row.max()
                )
                expected_count[b] += 1
    np.testing.assert_allclose(np.asarray(out.sum_logp), expected_sum, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(out.num_tokens), expected_count)
    per_token = np.asarray(token_logprobs(logits, ids))
    assert per_token.shape == (3, 6) and np.all(per_token[:, 0] == 0) and np.all(per_token <= 0)


def test_target_window_values():
    tmask = np.zeros((2, 100), np.int32)
    tmask[0, 60:] = 1  # 40 targets
    tmask[1, 80:] = 1  # 20
    assert target_window(tmask) == 48
    tmask[0, :] = 0
    tmask[1, 98:] = 0  # the longest row now has 18 targets
    assert target_window(tmask) == 32
    tmask[1, 82:] = 0  # 2 targets: at least one multiple of 16
    assert target_window(tmask) == 16
    tmask[1, 2:] = 1  # 98 targets: a window of 112 >= 99 predicting positions saves nothing
    assert target_window(tmask) is None


def test_target_positions_hand_example():
    tmask = np.array([[1, 0, 1, 1, 0, 1], [0, 1, 0, 0, 0, 0]], np.int32)
    positions, valid = target_positions(tmask, 3)
    # row 0: targets at t = 2, 3, 5 (t = 0 is never predicted) -> positions t - 1 = 1, 2, 4
    np.testing.assert_array_equal(np.asarray(positions[0]), [1, 2, 4])
    np.testing.assert_array_equal(np.asarray(valid), [[1, 1, 1], [1, 0, 0]])
    assert int(positions[1, 0]) == 0


def test_window_logprobs_equal_the_full_sum(key):
    k1, k2, k3 = jax.random.split(key, 3)
    logits = np.asarray(jax.random.normal(k1, (4, 10, 7))) * 3
    ids = np.asarray(jax.random.randint(k2, (4, 10), 0, 7))
    mask = np.asarray(jax.random.bernoulli(k3, 0.5, (4, 10))).astype(np.int32)
    mask[3] = 0  # a row without targets
    window = int(mask[:, 1:].sum(axis=1).max())
    positions, valid = target_positions(mask, window)
    picked = np.take_along_axis(logits, np.asarray(positions)[..., None], axis=1)
    out = window_logprobs(picked, ids, positions, valid)
    full = sequence_logprobs(logits, ids, mask)
    np.testing.assert_allclose(np.asarray(out.sum_logp), np.asarray(full.sum_logp), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(out.num_tokens), np.asarray(full.num_tokens))
    assert float(out.sum_logp[3]) == 0.0
