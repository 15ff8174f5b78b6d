"""lm.logprobs against a direct numpy computation."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from llome_jax.lm.logprobs import (
    sequence_logprobs,
    target_positions,
    target_window,
    token_logprobs,
    window_logprobs,
)
from llome_jax.lm.pythia import Pythia, PythiaConfig
from llome_jax.testing import toy_token_batch
from llome_jax.training.dataset_logprobs import compute_logprobs
from llome_jax.training.step import position_ids_from_mask


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


#: ``logit_positions`` shapes the spy model was traced with (``None``: the head on every position)
_head_calls: list[tuple[int, ...] | None] = []


class _HeadSpy(nnx.Module):
    """Pythia with a record of where its output head is applied (at trace time)."""

    def __init__(self, inner: Pythia) -> None:
        self.inner = inner

    def __call__(self, input_ids, attention_mask=None, position_ids=None, logit_positions=None):
        _head_calls.append(None if logit_positions is None else tuple(logit_positions.shape))
        return self.inner(input_ids, attention_mask, position_ids, logit_positions)


def test_compute_logprobs_applies_the_head_on_its_window_only():
    """``compute_logprobs(..., target_window=W)`` asks the model for ``[B, W]`` logits (the head
    is skipped at the other ``T - 1 - W`` positions), ``None`` for all ``T`` positions; each gives
    the log-probs of a direct numpy computation from the full logits. (The numbers alone cannot
    tell: a window only saves work.)"""
    config = PythiaConfig(
        vocab_size=97,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=48,
    )
    inner = Pythia(config, rngs=nnx.Rngs(11))
    # rows of 40 tokens: prompts of 24-26 tokens, then <= 16 targets, then 0-2 padding tokens
    ids, tmask, amask = toy_token_batch(3, batch_size=8, seq_len=40, vocab_size=97, min_prompt=24)
    logits = np.asarray(inner(ids, amask, position_ids_from_mask(amask)), np.float64)
    top = logits.max(-1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    picked = np.take_along_axis(logp[:, :-1], ids[:, 1:, None], axis=-1)[..., 0]
    expected = (picked * tmask[:, 1:]).sum(1)
    counts = tmask[:, 1:].sum(1)
    assert counts.max() == 16 and counts.min() > 0

    spy = _HeadSpy(inner)
    for window, head in ((None, None), ("auto", (8, 16)), (20, (8, 20))):
        _head_calls.clear()
        out = compute_logprobs(spy, None, ids, tmask, amask, batch_size=8, target_window=window)
        assert _head_calls == [head], window  # one trace per window, with the head's positions
        np.testing.assert_allclose(out.sum_logp, expected, rtol=1e-5)
        np.testing.assert_array_equal(out.num_tokens, counts)
