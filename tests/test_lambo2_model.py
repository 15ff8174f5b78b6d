"""LaMBO-2 model and training against cortex v0.0.4's semantics (docs/design/lambo2_port.md)."""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import spearmanr

from llome_jax.lambo2 import data as lambo_data
from llome_jax.lambo2 import losses as lambo_losses
from llome_jax.lambo2 import model as M  # noqa: N812
from llome_jax.lambo2 import train as T  # noqa: N812

TINY = M.ModelConfig.preset("tiny", 4, 8)


# ------------------------------------------------------------------------------------ model
@pytest.mark.parametrize(
    ("preset", "overrides", "trainable", "with_table"),
    [
        ("paper", {}, 447_271, 480_167),
        ("paper_314k", {}, 281_383, 314_279),
        ("bbo_bench", {}, 170_919, 179_143),
    ],
)
def test_parameter_counts(preset, overrides, trainable, with_table):
    # the paper's "314K" comparison (V = 39, cortex pads to max_len = 256 -> 257-row sinusoids)
    config = M.ModelConfig.preset(preset, 32, 32, max_len=256, **overrides)
    shapes = jax.eval_shape(lambda k: M.init_params(k, config), jax.random.key(0))
    assert M.num_parameters(shapes) == trainable
    assert M.num_parameters(shapes) + M.pe_table_size(config) == with_table


def test_ensemble_parameters_are_stacked_and_distinct():
    params = M.init_params(jax.random.key(0), TINY)
    kernel = params["reg"]["members"]["branch"]["conv1"]["kernel"]
    assert kernel.shape[0] == TINY.ensemble_size
    assert not np.allclose(kernel[0], kernel[1])
    assert not np.allclose(kernel[0], params["cls"]["members"]["branch"]["conv1"]["kernel"][0])


def test_embeddings_positions_and_norm():
    table = M.positional_table(5, 6)
    p, j = 3, 1
    assert table[p, 2 * j] == pytest.approx(math.sin(p * 10000 ** (-2 * j / 6)), abs=1e-6)
    assert table[p, 2 * j + 1] == pytest.approx(math.cos(p * 10000 ** (-2 * j / 6)), abs=1e-6)
    config = M.ModelConfig.preset("tiny", 4, 6, max_len=8)
    params = M.init_params(jax.random.key(1), config)
    encoder = M.encoder_module(config, params["encoder"])
    tokens = jnp.array([[0, 1, 2, 3, config.mask_id, 0, config.pad_id, config.pad_id]])
    e = np.asarray(encoder.embed(tokens))
    norms = np.linalg.norm(e, axis=-1)[0]
    np.testing.assert_allclose(norms[:6], math.sqrt(config.embed_dim), rtol=1e-5)
    np.testing.assert_array_equal(norms[6:], 0.0)
    # channel LayerNorm: per-position mean 0, variance 1 before the affine (scale 1, bias 0)
    ln = encoder.blocks[0].norm1
    x = jax.random.normal(jax.random.key(2), (3, 5, config.embed_dim)) * 3 + 1
    y = np.asarray(ln(x))
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(y.var(-1), 1.0, rtol=1e-4)


def _perturbed_params(config, seed):
    """Initial parameters plus N(0, 0.3^2) noise on every leaf: LayerNorm scales and biases are
    then not 1 and 0, so the features a pad position carries through each block are non-zero."""
    rng = np.random.default_rng(seed)
    params = M.init_params(jax.random.key(seed), config)
    return jax.tree.map(lambda a: a + 0.3 * rng.standard_normal(a.shape, np.float32), params)


@functools.partial(jax.jit, static_argnums=0)
def _forward(config, params, tokens):
    return M.to_model(config, params)(tokens)


def test_outputs_are_invariant_to_the_padded_length():
    """Padding (docs/design/lambo2_port.md decision 3): with padding, a sequence's pooled head outputs
    and its real positions' logits do not depend on how far it is padded, nor on the lengths of the
    other rows.

    A pad position's embedding is 0 and every block zeroes its convolution branch there, so
    what it carries is position-only (PE through the residuals); a real position sees the same
    pad features whether N = 9 or N = 12, as long as at least ``k // 2 = 1`` pad follows it.
    Checked on rows of real lengths 8, 5 and 3 at N = 9 and N = 12 and in another batch; the
    pads do reach the real positions (the same row with no pad after it, N = L = 8, gives other
    outputs: zero 'same' padding instead of pad features), so this is not invariance by absence.
    Dropping the mask after a block's convolutions, or pooling over the pads, breaks it.
    """
    config9 = M.ModelConfig.preset("tiny", 4, 8, max_len=9)
    config12 = dataclasses.replace(config9, max_len=12)
    params = _perturbed_params(config9, 4)
    pad = config9.pad_id
    rows = [[0, 1, 2, 3, 3, 2, 1, 0], [3, 3, 2, 1, 0], [2, 0, 1]]

    def batch(selected, length):
        return jnp.array([row + [pad] * (length - len(row)) for row in selected])

    out12 = _forward(config12, params, batch(rows, 12))
    out9 = _forward(config9, params, batch(rows, 9))
    other = _forward(config12, params, batch(rows[::-1][:2], 12))  # other batch, other order
    for out, index in ((out9, [0, 1, 2]), (other, [2, 1])):
        for j, i in enumerate(index):
            for head in ("reg", "cls"):
                np.testing.assert_allclose(out[head][:, j], out12[head][:, i], rtol=1e-5, atol=1e-5)
            real = len(rows[i])
            np.testing.assert_allclose(
                out["logits"][j, :real], out12["logits"][i, :real], rtol=1e-5, atol=1e-5
            )
    unpadded = _forward(M.ModelConfig.preset("tiny", 4, 8), params, batch(rows[:1], 8))
    assert np.abs(np.asarray(unpadded["reg"][:, 0] - out12["reg"][:, 0])).max() > 1e-2


def test_batch_composition_and_ensemble_application():
    config = M.ModelConfig.preset("tiny", 4, 6, max_len=9)
    params = M.init_params(jax.random.key(3), config)
    model = M.to_model(config, params)
    pad = config.pad_id
    a = jnp.array([[0, 1, 2, 3, 0, 1, pad, pad, pad]])
    b = jnp.array([[3, 3, 2, 1, 0, 1, pad, pad, pad]])
    out_a = model(a)
    out_ab = model(jnp.concatenate([a, b]))
    np.testing.assert_allclose(out_ab["reg"][:, :1], out_a["reg"], rtol=1e-5, atol=1e-6)
    # the nnx.vmap ensemble equals the functional vmap over stacked parameters
    h = M.encoder_module(config, params["encoder"])(a)
    functional = M.ensemble_apply(config, params["cls"], h, a != pad)
    np.testing.assert_allclose(functional, out_a["cls"], rtol=1e-5, atol=1e-6)
    # members applied one after another (the CPU default) equal the vmapped application
    for unroll in (False, True):
        np.testing.assert_allclose(
            M.ensemble_apply(config, params["reg"], h, a != pad, unroll=unroll),
            out_a["reg"],
            rtol=1e-5,
            atol=1e-6,
        )
    # convolutions keep the length; padded positions of the trunk are zero except the residual
    assert h.shape == (1, 9, config.out_dim)


def test_regressor_parameterisation():
    out = jnp.array([[2.0, -30.0], [0.5, 0.0], [-1.0, 3.0]])
    loc, var = M.gaussian_from_natural(out)
    u = np.array([-30.0, 0.0, 3.0])
    eta2 = -2 * np.log1p(np.exp(u / 2))
    expected_var = np.maximum(-1 / (2 * eta2), 1e-4)
    np.testing.assert_allclose(var, expected_var, rtol=1e-5)
    np.testing.assert_allclose(loc, np.array([2.0, 0.5, -1.0]) * expected_var, rtol=1e-5)
    assert float(var.min()) >= 1e-4


# ------------------------------------------------------------------------------------ corruption
def test_mask_rate_table():
    rates = lambo_losses.mask_rates(1000)
    expected = {1: 0.99998, 250: 0.920, 500: 0.703, 750: 0.380, 900: 0.155, 1000: 5e-5}
    for t, value in expected.items():
        assert rates[t] == pytest.approx(value, abs=6e-4 if t < 1000 else 1e-5), t
    assert np.all(np.diff(rates) <= 0)
    assert rates[1:].mean() == pytest.approx(0.633, abs=2e-3)


def test_corruption_rate_and_scope():
    tokens = jnp.tile(jnp.array([0, 1, 2, 3, TINY.pad_id]), (4000, 1))
    noisy, masked = lambo_losses.corrupt(
        jax.random.key(0), tokens, 0.3, TINY.mask_id, TINY.num_states
    )
    assert not bool(masked[:, -1].any())  # padding is never corrupted
    assert float(masked[:, :4].mean()) == pytest.approx(0.3, abs=0.01)
    np.testing.assert_array_equal(np.where(masked, TINY.mask_id, tokens), noisy)
    same, none = lambo_losses.corrupt(jax.random.key(1), tokens, 0.0, TINY.mask_id, TINY.num_states)
    np.testing.assert_array_equal(same, tokens)
    assert not bool(none.any())


# ------------------------------------------------------------------------------------ losses
def test_mlm_loss_masked_only_and_by_hand():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype(np.float32)
    targets = np.array([[1, 2, 3], [0, 4, 1]])
    masked = np.array([[True, False, True], [False, False, True]])
    loss = float(lambo_losses.mlm_loss(logits, targets, masked))
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    hand = -np.mean([logp[0, 0, 1], logp[0, 2, 3], logp[1, 2, 1]])
    assert loss == pytest.approx(hand, rel=1e-5)
    changed = logits.copy()
    changed[~masked] += rng.normal(size=changed[~masked].shape).astype(np.float32) * 5
    assert float(lambo_losses.mlm_loss(changed, targets, masked)) == pytest.approx(loss, rel=1e-6)
    assert float(lambo_losses.mlm_loss(logits, targets, np.zeros_like(masked))) == 0.0  # guarded


def test_classification_and_regression_losses_by_hand():
    logits = np.array([[0.3, -0.2], [1.0, 2.0]], np.float32)
    labels = np.array([1, 0])
    rho = 0.25
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    target = (1 - rho) * np.eye(2)[labels] + rho / 2
    hand = -(target * logp).sum(-1).mean()
    assert float(lambo_losses.classification_loss(logits, labels, rho)) == pytest.approx(
        hand, rel=1e-5
    )

    out = np.array([[0.4, 0.1], [-1.0, 1.5]], np.float32)
    y = np.array([0.7, -1.2])
    s0 = 0.01
    u = out[:, 1]
    var = 1 / (4 * np.log1p(np.exp(u / 2)))
    loc = out[:, 0] * var
    m_star, v_star = (1 - rho) * y, rho + (1 - rho) * s0 + rho * (1 - rho) * y**2
    kl = 0.5 * (np.log(var / v_star) + (v_star + (m_star - loc) ** 2) / var - 1)
    assert float(lambo_losses.regression_loss(out, y, rho, s0)) == pytest.approx(
        kl.mean(), rel=1e-5
    )
    # rho = 0: KL to N(y, s0^2) = Gaussian NLL + const + s0^2 / (2 var)
    nll = 0.5 * (np.log(2 * np.pi * var) + (y - loc) ** 2 / var)
    kl0 = float(lambo_losses.regression_loss(out, y, 0.0, s0))
    const = -0.5 * np.log(2 * np.pi * s0) - 0.5
    assert kl0 == pytest.approx(float(np.mean(nll + const + s0 / (2 * var))), rel=1e-5)


# ------------------------------------------------------------------------------------ schedules, data
def test_learning_rate_schedule():
    rates = T.epoch_learning_rates(T.TrainConfig(epochs=4))
    np.testing.assert_allclose(rates, [2.5e-3, 5e-3, 2.5e-3, 0.0], atol=1e-12)
    assert T.epoch_learning_rates(T.TrainConfig(epochs=100))[-1] == pytest.approx(0.0, abs=1e-12)


def test_recency_partitions_match_the_interval_formula():
    for newest in range(11):
        rounds = np.arange(newest + 1)
        expected = []
        for i in rounds:
            if i == newest:
                expected.append(0)
                continue
            k = next(k for k in range(1, 10) if newest - 2 ** (k + 1) + 2 <= i <= newest - 2**k + 1)
            expected.append(k)
        np.testing.assert_array_equal(lambo_data.recency_partition(rounds, newest), expected)
    np.testing.assert_array_equal(lambo_data.recency_partition([0, 1, 2, 3]), [2, 1, 1, 0])


def test_balanced_sampler_and_epoch_batches():
    rng = np.random.default_rng(0)
    groups = np.array([0] * 300 + [1] * 30 + [2] * 6)
    stream = lambo_data.balanced_stream(rng, groups)
    assert len(stream) == 3 * 300
    counts = np.bincount(groups[stream[:128]], minlength=3)
    assert np.all(np.abs(counts - 128 / 3) <= 1)
    assert set(stream[groups[stream] == 0]) == set(range(300))  # the largest group once

    # history: 3 rounds, infeasible rows, duplicates
    x = rng.integers(0, 4, (250, 8))
    x[200:210] = x[0]
    y = rng.random(250)
    y[::7] = -np.inf
    t = np.repeat([0, 1, 2], [150, 50, 50])
    config = T.TrainConfig(batch_size=32)
    data = lambo_data.prepare_training_data(x, y, t, TINY, config)
    feasible = np.isfinite(y)
    unique = len(np.unique(x[feasible], axis=0))
    assert len(data.mlm_tokens) == math.floor(0.8 * unique)
    assert data.steps_per_epoch(32) == math.ceil(math.floor(0.8 * unique) / 32)
    assert len(data.cls_tokens) == math.floor(0.8 * 250)
    assert len(data.reg_tokens) == math.floor(0.8 * feasible.sum())
    assert set(np.unique(data.cls_groups)) <= set(range(2 * 3))
    # classifier groups split by label
    for g in np.unique(data.cls_groups):
        assert len(np.unique(data.cls_labels[data.cls_groups == g])) == 1
    assert abs(float(data.reg_targets.mean())) < 1e-5
    batches = lambo_data.epoch_batches(rng, data, TINY, 32)
    assert len(batches) == data.steps_per_epoch(32)
    seen = np.concatenate([b.mlm_tokens[b.mlm_valid] for b in batches])
    assert len(seen) == len(data.mlm_tokens)
    assert len(np.unique(seen, axis=0)) == len(data.mlm_tokens)  # each unique row once
    assert batches[0].cls_tokens.shape == (TINY.ensemble_size, 32, 8)
    # the members draw independent shuffles
    assert not np.array_equal(batches[0].reg_tokens[0], batches[0].reg_tokens[1])


# ------------------------------------------------------------------------------------ updates
def _toy_history(n=160, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 4, (n, 8))
    y = (x == 0).sum(1) / 8.0
    y[:16] = -np.inf
    t = np.repeat(np.arange(4), n // 4)
    return x, y, t


def test_per_leaf_updates_leave_other_heads_and_moments_untouched():
    config = T.step_config_of(T.TrainConfig())
    params = M.init_params(jax.random.key(0), TINY)
    opt = T.init_opt_state(params, config)
    # prime the moments so that "untouched" is not trivially zero
    x, y, t = _toy_history()
    data = lambo_data.prepare_training_data(x, y, t, TINY, T.TrainConfig(batch_size=16))
    batch = lambo_data.epoch_batches(np.random.default_rng(0), data, TINY, 16)[0]
    params, opt, losses = T.train_step(
        params,
        opt,
        batch,
        jnp.float32(1e-3),
        jax.random.key(1),
        model_config=TINY,
        train_config=config,
    )
    assert np.all(np.isfinite(losses)) and losses.shape == (2 * TINY.ensemble_size + 1,)
    # step counters: encoder 2E + 1 per training step, every head once
    enc_count = np.asarray(opt.encoder.count)
    assert int(enc_count) == 2 * TINY.ensemble_size + 1
    np.testing.assert_array_equal(opt.reg.count, 1)
    np.testing.assert_array_equal(opt.cls.count, 1)
    assert int(opt.gen.count) == 1

    # one regressor-member step (member 1) through the same sweep the train step uses
    before_params = jax.tree.map(np.asarray, params)
    before_opt = jax.tree.map(np.asarray, opt)
    rates = jnp.asarray(lambo_losses.mask_rates(1000), jnp.float32)

    def reg_loss(out, targets, rho, valid):
        return lambo_losses.regression_loss(out, targets, rho, 0.01, valid)

    xs = (
        (1,),
        jax.random.split(jax.random.key(2), 1),
        batch.reg_tokens[1:2],
        batch.reg_targets[1:2],
        batch.reg_valid[1:2],
    )
    (enc_p, enc_s, reg_p, reg_s), _ = T._member_sweep(
        TINY,
        config,
        reg_loss,
        params["encoder"],
        opt.encoder,
        params["reg"],
        opt.reg,
        xs,
        jnp.float32(1e-3),
        rates,
    )
    changed = jax.tree.map(lambda a, b: not np.array_equal(a, b), before_params["encoder"], enc_p)
    assert any(jax.tree.leaves(changed))
    for tree_before, tree_after in ((before_params["reg"], reg_p), (before_opt.reg, reg_s)):
        for a, b in zip(jax.tree.leaves(tree_before), jax.tree.leaves(tree_after), strict=True):
            np.testing.assert_array_equal(a[0], np.asarray(b)[0])  # idle member: bit-identical
    kernel = before_params["reg"]["members"]["branch"]["conv1"]["kernel"]
    assert not np.array_equal(kernel[1], reg_p["members"]["branch"]["conv1"]["kernel"][1])
    assert int(np.asarray(reg_s.count)[1]) == 2 and int(np.asarray(reg_s.count)[0]) == 1
    assert int(np.asarray(enc_s.count)) == 2 * TINY.ensemble_size + 2


def test_fit_learns_a_toy_regression():
    # y = fraction of token 0: the ensemble's mean prediction ranks held-out sequences well
    x, y, t = _toy_history(200)
    config = T.TrainConfig(epochs=12, batch_size=16, train_fraction=None)
    data = lambo_data.prepare_training_data(x, y, t, TINY, config)
    params, history = T.fit(
        jax.random.key(1), M.init_params(jax.random.key(0), TINY), data, TINY, config
    )
    assert np.all(np.isfinite(history))
    assert history[-1, -1] < history[0, -1]  # MLM loss falls
    rng = np.random.default_rng(5)
    xe = rng.integers(0, 4, (300, 8))
    h = M.encoder_module(TINY, params["encoder"])(jnp.asarray(xe, jnp.int32))
    loc, _ = M.gaussian_from_natural(
        M.ensemble_apply(TINY, params["reg"], h, jnp.ones((300, 8), bool))
    )
    assert spearmanr(np.asarray(loc.mean(0)), (xe == 0).sum(1)).statistic > 0.8
