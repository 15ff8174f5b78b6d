"""Losses: hand-computed values, gradients, MargE semantics and the Strong Interpolation Criteria."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.test_util import check_grads

from llome_jax.lm.logprobs import sequence_logprobs
from llome_jax.testing import TinyCausalLM, TinyLMConfig
from llome_jax.training import loss_inputs, loss_registry, losses
from llome_jax.training.loss_inputs import LossBatch, LossParams, margin_reward
from llome_jax.training.loss_registry import LOSSES, default_params
from llome_jax.training.losses import dpo_loss, marge_loss, reinforce_loss, sft_loss, weighted_mean
from llome_jax.types import SeqLogProbs

# A small batch: 4 sequences with different lengths, one padding row (weight 0).
POLICY = np.array([-3.0, -5.5, -2.0, -7.0])
REFERENCE = np.array([-3.5, -5.0, -2.5, -6.0])
TOKENS = np.array([3.0, 5.0, 2.0, 4.0])
REWARD = np.array([0.25, 0.0, 0.5, 0.125])
WEIGHT = np.array([1.0, 1.0, 1.0, 0.0])


def _lp(sum_logp, num_tokens=TOKENS) -> SeqLogProbs:
    return SeqLogProbs(jnp.asarray(sum_logp), jnp.asarray(num_tokens, jnp.float32))


def _batch(group_size=None, reward=REWARD, weight=WEIGHT) -> LossBatch:
    return LossBatch.create(reward=reward, weight=weight, group_size=group_size)


def _reduce(loss_fn, policy, reference, batch, hparams):
    per_unit, _ = loss_fn(policy, reference, batch, hparams)
    return weighted_mean(per_unit, batch.weight)


# ---------------------------------------------------------------------------------------------
# Values against hand computation (float64 numpy)
# ---------------------------------------------------------------------------------------------


def test_margin_reward_counts_infeasible_as_zero():
    f_x = np.array([0.2, 0.7, -np.inf, 0.5, np.nan, 0.3])
    f_y = np.array([0.6, 0.4, 0.25, -np.inf, 0.75, 0.3])
    expected = [0.4, 0.0, 0.25, 0.0, 0.75, 0.0]
    np.testing.assert_allclose(margin_reward(f_x, f_y), expected, rtol=1e-6)


def test_sft_values():
    batch = _batch()
    pooled, _ = sft_loss(_lp(POLICY), _lp(REFERENCE), batch, LossParams(token_mean=1.0))
    mean_tokens = (3 + 5 + 2) / 3
    np.testing.assert_allclose(pooled, -POLICY / mean_tokens, rtol=1e-6)
    # The reduced pooled loss is total NLL over total tokens of the non-padding rows.
    np.testing.assert_allclose(
        weighted_mean(pooled, batch.weight), (3 + 5.5 + 2) / (3 + 5 + 2), rtol=1e-6
    )
    per_seq, _ = sft_loss(_lp(POLICY), _lp(REFERENCE), batch, LossParams(token_mean=0.0))
    np.testing.assert_allclose(per_seq, -POLICY / TOKENS, rtol=1e-6)


def _marge_by_hand(group, alpha, beta, lam, self_normalize=True):
    w = np.exp(POLICY - REFERENCE)
    omega = np.ones(4)
    for i in range(4):
        members = [j for j in range(4) if group[j] == group[i] and WEIGHT[j] > 0]
        if not members:  # a padding row alone in its group: weight 1 by convention
            continue
        norm = sum(WEIGHT[j] * w[j] for j in members) / sum(WEIGHT[j] for j in members)
        omega[i] = w[i] / norm if self_normalize else w[i]
    lbar = POLICY / TOKENS
    return alpha * omega * (lbar - beta * REWARD) - lam * lbar


@pytest.mark.parametrize(
    "group_size, group", [(None, [0, 0, 0, 0]), (1, [0, 1, 2, 3]), (2, [0, 0, 1, 1])]
)
def test_marge_values(group_size, group):
    hp = LossParams(beta=2.0, kl_weight=10.0, target_weight=0.5)
    loss, metrics = marge_loss(_lp(POLICY), _lp(REFERENCE), _batch(group_size), hp)
    expected = _marge_by_hand(group, alpha=0.5, beta=2.0, lam=10.0)
    np.testing.assert_allclose(loss[:3], expected[:3], rtol=1e-5)
    assert np.isfinite(loss).all()
    assert float(metrics["reward_mean"]) == pytest.approx(0.25)


def test_marge_without_self_normalisation():
    hp = LossParams(beta=1.0, kl_weight=3.0, self_normalize=0.0)
    loss, _ = marge_loss(_lp(POLICY), _lp(REFERENCE), _batch(), hp)
    expected = _marge_by_hand([0] * 4, alpha=1.0, beta=1.0, lam=3.0, self_normalize=False)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_self_normalisation_is_overflow_safe():
    # Log-ratios of +-300 overflow exp() in float32; the log-space softmax does not.
    policy = _lp(np.array([0.0, -1.0, -2.0, -3.0]))
    reference = _lp(np.array([-300.0, -1.0, 298.0, -3.0]))
    loss, _ = marge_loss(policy, reference, _batch(), LossParams())
    assert np.isfinite(loss).all()
    grad = jax.jit(
        jax.grad(lambda s: _reduce(marge_loss, _lp(s), reference, _batch(), LossParams()))
    )(jnp.asarray(policy.sum_logp))
    assert np.isfinite(grad).all()


def test_reinforce_values():
    hp = LossParams(beta=2.0, kl_weight=0.5, baseline=0.25, stop_weight_gradient=1.0)
    loss, _ = reinforce_loss(_lp(POLICY), _lp(REFERENCE), _batch(), hp)
    w = np.exp(POLICY - REFERENCE)
    omega = w / (w[:3].sum() / 3)
    expected = omega * (-(2.0 * REWARD - 0.25) * POLICY) - 0.5 * POLICY / TOKENS
    np.testing.assert_allclose(loss[:3], expected[:3], rtol=1e-5)


def test_dpo_values():
    # Two pairs: rows [chosen_0, chosen_1, rejected_0, rejected_1].
    pol = np.array([-4.0, -6.0, -5.0, -5.5])
    ref = np.array([-4.5, -6.0, -4.0, -6.5])
    batch = LossBatch.create(2)
    beta, eps = 0.4, 0.1
    loss, metrics = dpo_loss(
        _lp(pol, np.ones(4)),
        _lp(ref, np.ones(4)),
        batch,
        LossParams(beta=beta, label_smoothing=eps),
    )
    z = beta * ((pol[:2] - ref[:2]) - (pol[2:] - ref[2:]))  # [0.6, -0.4]
    log_sig = lambda v: -np.log1p(np.exp(-v))  # noqa: E731
    expected = -(1 - eps) * log_sig(z) - eps * log_sig(-z)
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    assert float(metrics["reward_accuracy"]) == pytest.approx(0.5)
    assert float(metrics["ranking_accuracy"]) == pytest.approx(0.5)  # -4 > -5, -6 < -5.5
    with pytest.raises(ValueError, match="chosen; rejected"):
        dpo_loss(_lp(pol, np.ones(4)), _lp(ref, np.ones(4)), LossBatch.create(3), LossParams())


def test_padding_rows_change_nothing():
    """Weight-0 rows with arbitrary values leave every loss's reduced value and gradient alone."""
    base_n = 4
    rng = np.random.default_rng(0)
    pol = rng.normal(-5, 1, base_n)
    ref = rng.normal(-5, 1, base_n)
    tok = rng.integers(2, 6, base_n).astype(float)
    rew = rng.uniform(0, 1, base_n)
    junk = np.array([50.0, -80.0])
    for name, loss_fn in LOSSES.items():
        hp = default_params(name)
        if name == "dpo":
            # pairs: pad one extra pair at the end of each half
            pol_p = np.concatenate([pol[:2], [junk[0]], pol[2:], [junk[1]]])
            ref_p = np.concatenate([ref[:2], [junk[1]], ref[2:], [junk[0]]])
            tok_p = np.concatenate([tok[:2], [1.0], tok[2:], [1.0]])
            small = LossBatch.create(2)
            padded = LossBatch.create(3, weight=np.array([1.0, 1.0, 0.0]))
        else:
            pol_p, ref_p = np.append(pol, junk), np.append(ref, junk[::-1])
            tok_p = np.append(tok, [1.0, 7.0])
            small = LossBatch.create(reward=rew)
            padded = LossBatch.create(reward=np.append(rew, [5.0, 5.0]), weight=[1] * 4 + [0, 0])

        def f(s, ref, tok, batch, loss_fn=loss_fn, hp=hp):
            return _reduce(loss_fn, _lp(s, tok), _lp(ref, tok), batch, hp)

        value_and_grad = jax.jit(jax.value_and_grad(f))
        v_small, g_small = value_and_grad(jnp.asarray(pol), ref, tok, small)
        v_pad, g_pad = value_and_grad(jnp.asarray(pol_p), ref_p, tok_p, padded)
        keep = [0, 1, 3, 4] if name == "dpo" else [0, 1, 2, 3]
        np.testing.assert_allclose(v_pad, v_small, rtol=1e-5, err_msg=name)
        np.testing.assert_allclose(np.asarray(g_pad)[keep], g_small, rtol=1e-5, err_msg=name)
        dropped = np.setdiff1d(np.arange(len(pol_p)), keep)
        np.testing.assert_array_equal(np.asarray(g_pad)[dropped], 0.0)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_check_grads(name):
    """Reverse-mode gradients (first and second order) against finite differences, float64."""
    with jax.enable_x64(True):
        pol = jnp.array([-3.0, -5.5, -2.0, -7.0], jnp.float64)
        ref = jnp.array([-3.5, -5.0, -2.5, -6.0], jnp.float64)
        tok = jnp.array([3.0, 5.0, 2.0, 4.0], jnp.float64)
        if name == "dpo":
            batch = LossBatch.create(2, weight=np.array([1.0, 0.5]))
        else:
            batch = LossBatch.create(reward=REWARD, weight=np.array([1.0, 0.5, 2.0, 1.0]))
        hp = default_params(name).replace(stop_weight_gradient=0.0, label_smoothing=0.1)

        def f(policy_sum, reference_sum):
            return _reduce(LOSSES[name], _lp(policy_sum, tok), _lp(reference_sum, tok), batch, hp)

        check_grads(jax.jit(f), (pol, ref), order=2, modes=("rev",), atol=1e-6, rtol=1e-6)


def test_marge_gradient_matches_closed_form():
    """d loss / d l_i for a global group (the authors' MargE formula, mean-1 weights)."""
    alpha, beta, lam = 1.0, 1.5, 10.0
    hp = LossParams(beta=beta, kl_weight=lam, target_weight=alpha)
    batch = _batch(weight=np.ones(4))
    grad = jax.grad(lambda s: _reduce(marge_loss, _lp(s), _lp(REFERENCE), batch, hp))(
        jnp.asarray(POLICY)
    )
    w = np.exp(POLICY - REFERENCE)
    omega = w / w.mean()
    c = POLICY / TOKENS - beta * REWARD
    c_bar = (omega * c).mean()
    expected = (alpha * omega / TOKENS + alpha * omega * (c - c_bar) - lam / TOKENS) / 4
    np.testing.assert_allclose(grad, expected, rtol=1e-5)


@pytest.mark.parametrize("norm", ["sum", "mean"])
def test_marge_weight_normalisation_by_hand(norm):
    """Both readings of the appendix's self-normalised MargE on a 3-example batch, by hand.

    ``L = (1/3) sum_i [w~_i (lbar_i - r_i) - lam lbar_i]`` with ``w_i = exp(l_i - l_ref_i)``;
    "sum": ``w~_i = w_i / sum_j w_j`` (literal), "mean": ``w~_i = 3 w_i / sum_j w_j``.
    Gradient w.r.t. ``l_k`` (sum-normalised ``s_k = w_k / sum w``, ``m`` = 1 or 3):
    ``dL/dl_k = (1/3) [m s_k (c_k - sum_i s_i c_i) + m s_k / n_k - lam / n_k]``, ``c = lbar - r``.
    Written out term by term in float64, without the library's helpers.
    """
    l = [-4.0, -6.0, -3.0]
    l_ref = [-4.5, -5.0, -3.5]
    n = [4.0, 6.0, 3.0]
    r = [0.25, 0.0, 0.5]
    lam = 10.0
    m = 1.0 if norm == "sum" else 3.0
    w = [math.exp(l[i] - l_ref[i]) for i in range(3)]
    s = [w[i] / (w[0] + w[1] + w[2]) for i in range(3)]
    lbar = [l[i] / n[i] for i in range(3)]
    c = [lbar[i] - r[i] for i in range(3)]
    loss_hand = sum(m * s[i] * c[i] - lam * lbar[i] for i in range(3)) / 3
    sc = s[0] * c[0] + s[1] * c[1] + s[2] * c[2]
    grad_hand = [(m * s[k] * (c[k] - sc) + m * s[k] / n[k] - lam / n[k]) / 3 for k in range(3)]

    hp = LossParams(beta=1.0, kl_weight=lam, weights_sum_to_one=float(norm == "sum"))
    batch = LossBatch.create(reward=jnp.asarray(r), weight=jnp.ones(3))

    def total(sum_logp):
        per_unit, _ = marge_loss(_lp(sum_logp, n), _lp(jnp.asarray(l_ref), n), batch, hp)
        return per_unit.mean()

    value, grad = jax.value_and_grad(total)(jnp.asarray(l, jnp.float32))
    np.testing.assert_allclose(float(value), loss_hand, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), grad_hand, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("norm", ["sum", "mean"])
def test_reinforce_follows_marge_weight_norm_by_hand(norm):
    """REINFORCE's ``w~`` follows ``finetune.marge_weight_norm`` as MargE's does (the appendix:
    "For both MargE and REINFORCE, we applied self-normalization"), on a 3-example batch by hand.

    ``L = (1/3) sum_i [w~_i (-r_i l_i) - lam lbar_i]``; "sum": ``w~_i = s_i = w_i / sum_j w_j``,
    "mean": ``w~_i = 3 s_i``. The weights are detached (REINFORCE's ``stop_weight_gradient = 1``),
    so ``dL/dl_k = (1/3) [-m s_k r_k - lam / n_k]`` (``m`` = 1 or 3). The hyper-parameters come
    from ``finetune.loss_params`` of a configuration, the path a LLOME round takes.
    """
    from llome_jax.llome import finetune
    from llome_jax.llome.presets import preset

    cfg = preset("smoke").replace(**{"finetune.marge_weight_norm": norm})
    hp = finetune.loss_params(cfg, "reinforce")
    assert float(hp.weights_sum_to_one) == float(
        finetune.loss_params(cfg, "marge").weights_sum_to_one
    )
    l = [-4.0, -6.0, -3.0]
    l_ref = [-4.5, -5.0, -3.5]
    n = [4.0, 6.0, 3.0]
    r = [0.25, 0.0, 0.5]
    lam = float(hp.kl_weight)
    assert lam == 10.0 and float(hp.beta) == 1.0 and float(hp.stop_weight_gradient) == 1.0
    m = 1.0 if norm == "sum" else 3.0
    w = [math.exp(l[i] - l_ref[i]) for i in range(3)]
    s = [w[i] / (w[0] + w[1] + w[2]) for i in range(3)]
    loss_hand = sum(m * s[i] * (-r[i] * l[i]) - lam * l[i] / n[i] for i in range(3)) / 3
    grad_hand = [(-m * s[k] * r[k] - lam / n[k]) / 3 for k in range(3)]
    batch = LossBatch.create(reward=jnp.asarray(r), weight=jnp.ones(3))

    def total(sum_logp):
        per_unit, _ = reinforce_loss(_lp(sum_logp, n), _lp(jnp.asarray(l_ref), n), batch, hp)
        return per_unit.mean()

    value, grad = jax.value_and_grad(total)(jnp.asarray(l, jnp.float32))
    np.testing.assert_allclose(float(value), loss_hand, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), grad_hand, rtol=1e-5, atol=1e-7)


def test_stop_weight_gradient_switch():
    """With detached weights the omega-dependence of the gradient disappears (values unchanged)."""
    batch = _batch(weight=np.ones(4))
    hp_flow = LossParams(beta=1.0, kl_weight=2.0, stop_weight_gradient=0.0)
    hp_stop = hp_flow.replace(stop_weight_gradient=1.0)

    def f(s, hp):
        return _reduce(marge_loss, _lp(s), _lp(REFERENCE), batch, hp)

    s = jnp.asarray(POLICY)
    assert float(f(s, hp_flow)) == pytest.approx(float(f(s, hp_stop)))
    g_stop = jax.grad(f)(s, hp_stop)
    w = np.exp(POLICY - REFERENCE)
    omega = w / w.mean()
    np.testing.assert_allclose(g_stop, (omega / TOKENS - 2.0 / TOKENS) / 4, rtol=1e-5)
    assert not np.allclose(g_stop, jax.grad(f)(s, hp_flow))


# ---------------------------------------------------------------------------------------------
# MargE vs SFT on a real (tiny) language model
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_lm_batch():
    config = TinyLMConfig(vocab_size=16, hidden_size=16, num_layers=1, num_heads=2, max_position=12)
    model = TinyCausalLM(config, rngs=nnx.Rngs(0))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    rng = np.random.default_rng(1)
    ids = jnp.asarray(rng.integers(0, 16, (4, 10)), jnp.int32)
    tmask = np.zeros((4, 10), np.int32)
    for i, start in enumerate([4, 5, 6, 7]):  # different target lengths
        tmask[i, start:] = 1
    tmask = jnp.asarray(tmask)

    @jax.jit
    def policy_logprobs(params):
        logits = nnx.merge(graphdef, params, rest)(ids)
        return sequence_logprobs(logits, ids, tmask)

    return params, policy_logprobs


def _param_grad(params, policy_logprobs, loss_fn, batch, reference, hp):
    def f(p):
        return _reduce(loss_fn, policy_logprobs(p), reference, batch, hp)

    return jax.grad(f)(params)


def _flat(tree) -> np.ndarray:
    return np.concatenate([np.ravel(x) for x in jax.tree.leaves(tree)])


def test_marge_group_size_one_is_scaled_sft(tiny_lm_batch):
    """The authors' configuration (groups of one): grad MargE = (lambda - alpha) x grad SFT,
    independent of the reward and the reference model (docs/design/losses.md)."""
    params, policy_logprobs = tiny_lm_batch
    lam = 10.0
    hp = LossParams(kl_weight=lam, beta=1.0)
    ref_a = _lp(np.array([-20.0, -15.0, -9.0, -4.0]), np.ones(4))
    ref_b = _lp(np.array([-3.0, -30.0, -1.0, -12.0]), np.ones(4))
    reward_a = np.array([0.0, 0.5, 1.0, 0.25])
    reward_b = np.array([0.9, 0.0, 0.1, 0.7])
    g_marge = _flat(
        _param_grad(params, policy_logprobs, marge_loss, _batch(1, reward_a, np.ones(4)), ref_a, hp)
    )
    g_other = _flat(
        _param_grad(params, policy_logprobs, marge_loss, _batch(1, reward_b, np.ones(4)), ref_b, hp)
    )
    g_sft = _flat(
        _param_grad(
            params,
            policy_logprobs,
            sft_loss,
            _batch(1, reward_a, np.ones(4)),
            ref_a,
            LossParams(token_mean=0.0),
        )
    )
    scale = np.linalg.norm(g_sft)
    np.testing.assert_allclose(g_marge, (lam - 1.0) * g_sft, atol=1e-6 * scale * lam)
    np.testing.assert_allclose(g_other, g_marge, atol=1e-7 * scale * lam)


def test_marge_global_group_uses_reward(tiny_lm_batch):
    """Normalising over the whole batch (paper's intent) makes the gradient depend on the reward."""
    params, policy_logprobs = tiny_lm_batch
    hp = LossParams(kl_weight=10.0, beta=1.0)
    reference = policy_logprobs(params)  # round start: pi_ref = pi_theta, so w = 1
    g_a = _flat(
        _param_grad(
            params,
            policy_logprobs,
            marge_loss,
            _batch(None, np.array([0.0, 0.5, 1.0, 0.25]), np.ones(4)),
            reference,
            hp,
        )
    )
    g_b = _flat(
        _param_grad(
            params,
            policy_logprobs,
            marge_loss,
            _batch(None, np.array([0.9, 0.0, 0.1, 0.7]), np.ones(4)),
            reference,
            hp,
        )
    )
    assert np.linalg.norm(g_a - g_b) > 0.05 * np.linalg.norm(g_a)
    # A reward shift common to the whole group is invisible (self-normalisation), a per-example
    # difference is not:
    g_shift = _flat(
        _param_grad(
            params,
            policy_logprobs,
            marge_loss,
            _batch(None, np.array([0.0, 0.5, 1.0, 0.25]) + 0.3, np.ones(4)),
            reference,
            hp,
        )
    )
    np.testing.assert_allclose(g_shift, g_a, atol=1e-5 * np.linalg.norm(g_a))


# ---------------------------------------------------------------------------------------------
# Strong Interpolation Criteria on a tabular policy (LLOME appendix "Proof of SIC")
# ---------------------------------------------------------------------------------------------

SIC_REWARD = np.array([0.0, 0.2, 0.5, 1.0, 0.1, 0.7])
SIC_BETA = 3.0


def _softmax64(x: np.ndarray) -> np.ndarray:
    e = np.exp(np.asarray(x, np.float64) - np.max(x))
    return e / e.sum()


SIC_REF = _softmax64([1.0, 0.5, 0.0, -1.0, 0.3, -0.5])
SIC_STAR = _softmax64(SIC_BETA * SIC_REWARD)


def _tabular_loss(loss_fn, theta, lam, stop_weight_gradient):
    """A loss on all K outputs at once, weighted by pi_ref: the exact expectation over y ~ pi_ref.

    Each output is a 'sequence' of one token; the batch enumerates the output space, and the
    example weights pi_ref(y) turn the weighted mean into the expectation E_{y ~ pi_ref}.
    """
    k = theta.shape[0]
    policy = SeqLogProbs(jax.nn.log_softmax(theta), jnp.ones(k))
    reference = SeqLogProbs(jnp.log(jnp.asarray(SIC_REF, theta.dtype)), jnp.ones(k))
    batch = LossBatch(
        reward=jnp.asarray(SIC_REWARD, theta.dtype),
        weight=jnp.asarray(SIC_REF, theta.dtype),
        group=jnp.zeros(k, jnp.int32),
    )
    hp = LossParams(beta=SIC_BETA, kl_weight=lam, stop_weight_gradient=stop_weight_gradient)
    return _reduce(loss_fn, policy, reference, batch, hp)


def _kl(p, q):
    return float(np.sum(p * (np.log(p) - np.log(q))))


@jax.jit
def _frekl(theta, lam):
    """The paper's objective written directly: KL(pi || pi*) + lambda KL(pi_ref || pi)."""
    logp = jax.nn.log_softmax(theta)
    p = jnp.exp(logp)
    ref = jnp.asarray(SIC_REF, theta.dtype)
    star = jnp.log(jnp.asarray(SIC_STAR, theta.dtype))
    return jnp.sum(p * (logp - star)) + lam * jnp.sum(ref * (jnp.log(ref) - logp))


@functools.partial(jax.jit, static_argnums=0)
def _minimise(objective, lam):
    """L-BFGS on the K logits (converges to machine precision on these smooth objectives)."""
    solver = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(lambda t: objective(t, lam))
    theta = jnp.zeros(len(SIC_REWARD), jnp.float64)

    def body(_, carry):
        theta, state = carry
        value, grad = value_and_grad(theta, state=state)
        updates, state = solver.update(
            grad, state, theta, value=value, grad=grad, value_fn=lambda t: objective(t, lam)
        )
        return optax.apply_updates(theta, updates), state

    theta, _ = jax.lax.fori_loop(0, 300, body, (theta, solver.init(theta)))
    return jax.nn.softmax(theta)


@jax.jit
def _marge_objective(theta, lam):
    return _tabular_loss(marge_loss, theta, lam, 0.0)


def _reinforce_true_objective(theta, lam):
    """-beta E_pi[r] - lambda E_ref[log pi]: what detached-weight REINFORCE descends."""
    logp = jax.nn.log_softmax(theta)
    ref = jnp.asarray(SIC_REF, theta.dtype)
    return -SIC_BETA * jnp.sum(jnp.exp(logp) * SIC_REWARD) - lam * jnp.sum(ref * logp)


def test_marge_population_loss_is_frekl():
    """With exact expectations, the (self-normalised) MargE loss equals the FReKL objective up to
    a constant, and so does its gradient (gradients flow through the importance weights)."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        for lam in (0.0, 0.7, 10.0):
            gaps = []
            for _ in range(3):
                theta = jnp.asarray(rng.normal(size=len(SIC_REWARD)) * 2)
                gaps.append(float(_marge_objective(theta, lam) - _frekl(theta, lam)))
                np.testing.assert_allclose(
                    jax.grad(_marge_objective)(theta, lam),
                    jax.grad(_frekl)(theta, lam),
                    atol=1e-12,
                )
            # The constant is -log Z(beta r) - lambda H(pi_ref) (independent of theta).
            np.testing.assert_allclose(gaps, gaps[0], atol=1e-12)


def test_strong_interpolation_criteria_marge():
    with jax.enable_x64(True):
        lams = [1e-5, 1e-3, 0.01, 0.1, 0.3, 1.0, 3.0, 10.0, 100.0, 1e5]
        policies = [np.asarray(_minimise(_marge_objective, lam)) for lam in lams]
        # SIC 1: lambda -> 0 recovers the Boltzmann target pi* ∝ exp(beta r).
        np.testing.assert_allclose(policies[0], SIC_STAR, atol=1e-4)
        # SIC 2: lambda -> infinity recovers pi_ref.
        np.testing.assert_allclose(policies[-1], SIC_REF, atol=1e-4)
        # SIC 3: in between, the optimum trades the two off monotonically.
        to_star = [_kl(p, SIC_STAR) for p in policies]
        to_ref = [_kl(SIC_REF, p) for p in policies]
        assert np.all(np.diff(to_star) > -1e-9), to_star
        assert np.all(np.diff(to_ref) < 1e-9), to_ref
        assert to_star[-1] > 0.1 and to_ref[0] > 0.1  # the endpoints really differ
        # And the optimum satisfies the paper's fixed-point equation (*):
        # log pi - log pi* - lambda pi_ref / pi = const.
        # checked for lambda = 0.01 ... 100 (lams[2:9])
        for lam, p in zip(lams[2:9], policies[2:9]):
            residual = np.log(p) - np.log(SIC_STAR) - lam * SIC_REF / p
            assert np.ptp(residual) < 1e-5, (lam, residual)


def test_marge_with_detached_weights_ignores_the_reward():
    """Switch check: detaching the importance weights kills the data term's gradient in
    expectation (sum_y pi(y) grad log pi(y) = 0), so the optimum is pi_ref at every lambda."""
    with jax.enable_x64(True):
        theta = jnp.asarray(np.random.default_rng(3).normal(size=len(SIC_REWARD)))
        detached = jax.jit(jax.grad(lambda t, lam: _tabular_loss(marge_loss, t, lam, 1.0)))
        kl_only = jax.jit(jax.grad(lambda t, lam: _frekl(t, lam) - _frekl(t, 0.0)))
        for lam in (0.01, 1.0):
            np.testing.assert_allclose(detached(theta, lam), kl_only(theta, lam), atol=1e-12)


def test_reinforce_is_policy_gradient_and_collapses_to_argmax():
    """REINFORCE (detached weights, its default) descends -beta E_pi[r] + lambda KL(pi_ref||pi);
    as lambda -> 0 its optimum is the degenerate argmax-reward policy pi^delta, unlike MargE."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(4)
        surrogate = jax.jit(jax.grad(lambda t, lam: _tabular_loss(reinforce_loss, t, lam, 1.0)))
        true = jax.jit(jax.grad(_reinforce_true_objective))
        for lam in (0.01, 1.0):
            theta = jnp.asarray(rng.normal(size=len(SIC_REWARD)))
            np.testing.assert_allclose(surrogate(theta, lam), true(theta, lam), atol=1e-12)
        best = int(np.argmax(SIC_REWARD))
        p_small = np.asarray(_minimise(_reinforce_true_objective, 1e-4))
        assert p_small[best] > 0.999, p_small
        p_marge = np.asarray(_minimise(_marge_objective, 1e-4))
        np.testing.assert_allclose(p_marge, SIC_STAR, atol=1e-3)  # MargE keeps the spread
        assert p_marge[best] < 0.6
        p_large = np.asarray(_minimise(_reinforce_true_objective, 1e5))
        np.testing.assert_allclose(p_large, SIC_REF, atol=1e-4)


def test_registry():
    assert set(LOSSES) == {"sft", "dpo", "marge", "reinforce"}
    assert loss_registry.get_loss("marge") is marge_loss
    with pytest.raises(ValueError, match="unknown loss"):
        loss_registry.get_loss("ppo")
    assert float(default_params("marge").kl_weight) == 10.0
    assert float(default_params("dpo").beta) == 0.4
    assert float(default_params("reinforce").stop_weight_gradient) == 1.0
    with pytest.raises(ValueError, match="divide"):
        LossBatch.create(5, group_size=2)
    with pytest.raises(ValueError, match="non-negative"):
        LossBatch.create(weight=np.array([1.0, -1.0]))


def test_docstring_examples():
    import doctest

    results = [doctest.testmod(module) for module in (losses, loss_inputs)]
    assert sum(r.attempted for r in results) >= 5 and sum(r.failed for r in results) == 0
