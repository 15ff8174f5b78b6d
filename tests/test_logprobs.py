"""lm.logprobs against a direct numpy computation."""

from __future__ import annotations

import jax
import numpy as np

from llome_jax.lm.logprobs import sequence_logprobs, token_logprobs


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
