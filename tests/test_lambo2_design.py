"""LaMBO-2 acquisition, seed selection and design step (cortex ``LaMBO.step``, poli-baselines)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import binomtest

from llome_jax.host import parallel
from llome_jax.lambo2 import data as lambo_data
from llome_jax.lambo2 import design as D  # noqa: N812
from llome_jax.lambo2 import kl_term, optimizer
from llome_jax.lambo2 import model as M  # noqa: N812
from llome_jax.lambo2 import seeds as lambo_seeds
from llome_jax.lambo2 import train as T  # noqa: N812

TINY = M.ModelConfig.preset("tiny", 4, 8)
STEPS = optimizer.preset("smoke").design  # S 4, M 2, K_g 2 (shared compilation with the e2e test)


# ------------------------------------------------------------------------------------ acquisition
def test_log_fatplus_reference_values_and_gradients():
    z = jnp.array([-0.5, -0.01, 0.0, 0.01])
    np.testing.assert_allclose(D.log_fatplus(z), [-42.4, -34.5, -14.05, -4.61], atol=0.06)
    assert float(D.log_fatplus(0.0)) == pytest.approx(math.log(1e-6 * (math.log(2) + 0.1)), 1e-5)
    grid = jnp.linspace(-10.0, 10.0, 2001, dtype=jnp.float32)
    values = D.log_fatplus(grid)
    grads = jax.vmap(jax.grad(D.log_fatplus))(grid)
    assert bool(jnp.all(jnp.isfinite(values))) and bool(jnp.all(jnp.isfinite(grads)))
    assert bool(jnp.all(jnp.diff(values) > 0))


def test_acquisition_is_per_member():
    mu = jnp.array([[0.1, 0.5], [0.3, 0.2], [0.0, 0.9]])
    best = jnp.array([0.5, 0.3, 0.9])
    a = D.acquisition(mu, best)
    perm = jnp.array([2, 0, 1])
    np.testing.assert_allclose(D.acquisition(mu[perm], best[perm]), a, rtol=1e-6)
    by_hand = np.mean(np.asarray(D.log_fatplus(mu - best[:, None])), axis=0)
    np.testing.assert_allclose(a, by_hand, rtol=1e-6)
    # at each member's own best, a = log(tau (ln 2 + 0.1)) ~ -14.05
    assert float(D.acquisition(best[:, None], best)[0]) == pytest.approx(-14.047, abs=1e-3)
    changed = best.at[1].set(0.0)
    delta = D.acquisition(mu, changed) - a
    member_term = (D.log_fatplus(mu[1] - 0.0) - D.log_fatplus(mu[1] - best[1])) / 3
    np.testing.assert_allclose(delta, member_term, rtol=1e-4)


# ------------------------------------------------------------------------------------ seeds
def _brute_force_fft(x, scores, num):
    chosen = [max(range(len(x)), key=lambda i: (scores[i], -i))]
    while len(chosen) < num:
        best = None
        for i in range(len(x)):
            if i in chosen:
                continue
            d = min(int((x[i] != x[j]).sum()) for j in chosen)
            candidate = (d, scores[i], -i)
            if best is None or candidate > best[0]:
                best = (candidate, i)
        chosen.append(best[1])
    return chosen


def test_farthest_first_traversal_matches_brute_force():
    rng = np.random.default_rng(0)
    for trial in range(6):
        x = rng.integers(0, 3, (30, 5))
        scores = np.round(rng.random(30), 1)  # ties in score too
        got = lambo_seeds.farthest_first_traversal(x, scores, 12)
        assert got.tolist() == _brute_force_fft(x, scores, 12), trial
        assert got[0] == int(np.lexsort((np.arange(30), -scores))[0])


def test_seed_selection_tiling_and_fft():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 4, (50, 8))
    y = rng.random(50)
    y[:5] = -np.inf
    t = np.repeat([0, 1], 25)
    idx = lambo_seeds.select_design_seeds(x, y, t, 20, 0.25)  # K = 5, each used 4 times
    top = np.argsort(-y)[:5]
    assert len(idx) == 20 and set(idx) == set(top)
    assert np.all(np.bincount(idx, minlength=50)[top] == 4)
    idx = lambo_seeds.select_design_seeds(x, y, t, 22, 0.25)  # K = round(5.5) = 6 -> counts 3 or 4
    counts = np.bincount(idx, minlength=50)[np.argsort(-y)[:6]]
    assert len(idx) == 22 and counts.min() >= 3 and counts.max() <= 4
    idx = lambo_seeds.select_design_seeds(x[:3], y[:3], t[:3], 10, 0.5)  # K > |H|
    assert len(idx) == 10 and set(idx) <= {0, 1, 2}
    idx = lambo_seeds.select_design_seeds(x, y, t, 10, 2.0)  # FFT over the top 20
    assert len(set(idx)) == 10 and set(idx) <= set(np.argsort(-y)[:20])
    assert idx[0] == int(np.argmax(y))
    # ties: most recent round first
    tied = lambo_seeds.select_design_seeds(x[:2], np.array([0.5, 0.5]), np.array([0, 1]), 1, 0.5)
    assert tied.tolist() == [1]


# ------------------------------------------------------------------------------------ design
@pytest.fixture(scope="module")
def trained():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, (200, 8))
    y = (x == 0).sum(1) / 8.0
    y[:10] = -np.inf
    t = np.repeat(np.arange(4), 50)
    config = T.TrainConfig(epochs=6, batch_size=16, train_fraction=None)
    assert T.step_config_of(config) == T.step_config_of(optimizer.preset("smoke").train)
    data = lambo_data.prepare_training_data(x, y, t, TINY, config)
    params, _ = T.fit(jax.random.key(1), M.init_params(jax.random.key(0), TINY), data, TINY, config)
    stats = D.RegressorStats(jnp.float32(data.y_mean), jnp.float32(data.y_std))
    seeds = x[lambo_seeds.select_design_seeds(x, y, t, 32, 0.25)]
    best = D.best_values(TINY, params, stats, seeds)
    return params, stats, best, seeds


def test_one_guidance_step_raises_the_acquisition(trained):
    params, stats, best, seeds = trained
    tokens = jnp.asarray(seeds, jnp.int32)
    chosen = jnp.zeros(tokens.shape, bool).at[:, 2].set(True).at[::2, 5].set(True)
    h0 = M.encoder_module(TINY, params["encoder"])(jnp.where(chosen, TINY.mask_id, tokens))
    mask = jnp.ones(tokens.shape, bool)
    config = D.DesignConfig(guidance_step_size=0.01)
    delta = jnp.zeros_like(h0)
    opt = D.guidance_optimizer(config).init(delta)
    delta, _ = D.guidance_update(TINY, config, params, stats, best, h0, chosen, mask, delta, opt)

    def mean_acq(h):
        mu = D._means_from_features(TINY, params, stats, h, mask, False)
        return float(D.acquisition(mu, best).mean()), float(mu.mean())

    (a0, mu0), (a1, mu1) = mean_acq(h0), mean_acq(h0 + delta)
    assert a1 > a0 and mu1 > mu0
    assert float(jnp.abs(delta).max()) <= 0.01 * (1 + 1e-5)
    assert float(jnp.abs(delta).max()) > 0.001
    np.testing.assert_array_equal(np.asarray(delta)[~np.asarray(chosen)], 0.0)


def test_design_round_bounds_rescoring_and_determinism(trained):
    params, stats, best, seeds = trained
    x, a, trace = D.design_round(jax.random.key(3), params, stats, best, seeds, TINY, STEPS)
    x, trace = np.asarray(x), jax.tree.map(np.asarray, trace)
    assert x.shape == seeds.shape and x.min() >= 0 and x.max() < TINY.num_states
    # A step only rewrites its masked set C (|C| <= M): per step and sequence, changes <= |C|, so
    # the round's Hamming distance is at most sum_s |C_s|. (S M = 8 = L here, so the bound S M
    # alone would be vacuous; sum_s |C_s| is below L for most sequences, checked below.)
    assert trace.changes.sum() > 0
    assert np.all(trace.changes <= trace.num_masked)
    hamming = (x != seeds).sum(1)
    assert np.all(hamming <= trace.changes.sum(0))
    masked_total = trace.num_masked.sum(0)
    assert np.all(hamming <= masked_total)
    assert np.mean(masked_total < TINY.length) > 0.5
    # s = 0 masks all M edit positions (rate 1); the 1 / sqrt(1 + s) schedule of later steps is
    # checked statistically in test_masking_rate_follows_the_schedule
    np.testing.assert_array_equal(trace.num_masked[0], STEPS.num_mutations)
    assert trace.num_masked.min() >= 0 and trace.num_masked.max() <= STEPS.num_mutations
    # acquisition never decreases within a round (the start a0 is recomputed here by another
    # program: its last bits may differ, so step 0 is compared to the tolerance they imply)
    mu0 = np.asarray(D.member_means(TINY, params, stats, seeds))
    a0 = np.asarray(D.acquisition(jnp.asarray(mu0), best))
    a0_tol = _acquisition_tolerance(mu0, np.asarray(best), _mean_tolerance(mu0))
    assert np.all(trace.acquisition[0] >= a0 - a0_tol)
    curve = np.concatenate([a0[None], trace.acquisition])
    np.testing.assert_allclose(a, curve[-1])
    # accepted proposals really score what the trace says (clean re-scoring)
    # (another compiled program: the means may differ in their last bits, see the sharded test)
    mu = np.asarray(D.member_means(TINY, params, stats, x))
    rescored = np.asarray(D.acquisition(jnp.asarray(mu), best))
    tolerance = _acquisition_tolerance(mu, np.asarray(best), _mean_tolerance(mu))
    np.testing.assert_array_less(np.abs(rescored - np.asarray(a)), tolerance)
    assert curve[-1].mean() > curve[0].mean()
    same, _, same_trace = D.design_round(
        jax.random.key(3), params, stats, best, seeds, TINY, STEPS, use_scan=True
    )
    agree = _rows_that_agree(np.asarray(same), x)  # one lax.scan vs a loop of jitted steps
    np.testing.assert_array_equal(np.asarray(same_trace.changes)[:, agree], trace.changes[:, agree])
    other, _, _ = D.design_round(jax.random.key(4), params, stats, best, seeds, TINY, STEPS)
    assert not np.array_equal(np.asarray(other), x)


def _acquisition_tolerance(mu: np.ndarray, best: np.ndarray, mu_tol: np.ndarray) -> np.ndarray:
    """First-order bound on ``|a(mu') - a(mu)|`` when every ``|mu'_e - mu_e| <= mu_tol_e``.

    ``a = mean_e f(mu_e - best_e)`` with ``f = log_fatplus`` (tau 1e-6), so
    ``|da| <= mean_e |f'(z_e)| mu_tol_e`` at ``z = mu - best``. ``f'`` is ~6e5 near ``z = 0``
    (``a`` ~ -14, where the ensemble sits right at its incumbents) and ``2 / |z|`` in the far tail:
    a last-bit change of a mean that is harmless in ``mu`` is a visible change of ``a`` near the
    incumbent, and nowhere else. The bound is evaluated at the single-device values; a factor 2
    covers the curvature of ``f`` over the interval and float32 rounding of ``a`` itself.
    """
    slope = np.abs(
        np.asarray(jax.vmap(jax.vmap(jax.grad(D.log_fatplus)))(jnp.asarray(mu - best[:, None])))
    )
    return 2.0 * (slope * mu_tol).mean(axis=0) + 1e-6 * np.abs(
        np.asarray(D.acquisition(jnp.asarray(mu), jnp.asarray(best)))
    )


def _mean_tolerance(mu: np.ndarray) -> np.ndarray:
    """float32 tolerance of the ensemble means: a sum reordered by sharding or by another
    instruction set moves each mean by a few ulps of the largest terms. 16 ulps of the member's
    largest |mu_e|; the sharded run on an AVX-512 CPU differed by 1 ulp (3e-8 at |mu| 0.33)."""
    return np.broadcast_to(
        16 * np.finfo(np.float32).eps * np.abs(mu).max(1, keepdims=True), mu.shape
    )


def _rows_that_agree(
    x: np.ndarray, other: np.ndarray, min_share: float = 0.875, shards: list | None = None
) -> np.ndarray:
    """Mask of the designed rows two programs agree on; at least ``min_share`` of them must.

    Two programs that differ only in float reduction order (sharding, one ``lax.scan`` vs a loop
    of jitted steps, another x86 instruction set) make the same integer decisions except at a
    near-tie: near its incumbent the acquisition's slope is ~6e5 (:func:`_acquisition_tolerance`),
    so one ulp of a mean moves ``a`` by ~0.02 and can flip an accept. Rows are designed
    independently (the guidance loss averages over the population with a denominator no decision
    changes), so such a flip changes its own row only. On the CPU these tests were written on
    every row agrees; a bug that mixes or drops rows changes most of them.

    With ``shards`` (the row indices each device holds, :func:`_shard_rows`) a near-tie flip is
    tolerated, a broken shard is not: no device's rows may all differ, and at most one row may
    differ in all (``min_share`` alone would let one device's 4 rows of 32 differ on 8 devices).
    """
    agree = np.all(np.asarray(x) == np.asarray(other), axis=1)
    if shards is not None:
        broken = [d for d, rows in enumerate(shards) if not agree[rows].any()]
        assert not broken, f"every row of device shard(s) {broken} differs"
        assert (~agree).sum() <= 1, f"rows {np.flatnonzero(~agree).tolist()} differ (at most 1)"
    assert agree.mean() >= min_share, f"only {agree.sum()} of {len(agree)} rows agree"
    return agree


def _shard_rows(array: jax.Array) -> list[np.ndarray]:
    """The row indices of ``array`` held by each device of its sharding (distinct blocks)."""
    rows = np.arange(array.shape[0])
    blocks = {
        tuple(rows[index[0]]) for index in array.sharding.devices_indices_map(array.shape).values()
    }
    return [np.asarray(block) for block in sorted(blocks)]


def test_bad_design_settings_raise_before_any_computation():
    for bad in (0.0, -0.5, float("nan"), float("inf"), True, "1", None):
        with pytest.raises(ValueError, match="feature_attr_temp"):
            D.DesignConfig(feature_attr_temp=bad)
        with pytest.raises(ValueError, match="feature_attr_temp"):
            D.DesignConfig(feature_attr_temp=bad, version="v0.0.3")
    assert D.DesignConfig(feature_attr_temp=2).feature_attr_temp == 2
    # M > L: refused before anything is computed (the None model would fail any computation)
    seeds = np.ones((4, TINY.length), np.int32)
    too_many = D.DesignConfig(num_steps=1, num_mutations=TINY.length + 1)
    with pytest.raises(ValueError, match=r"num_mutations=9 .* length L=8"):
        D.design_round(jax.random.key(0), None, None, None, seeds, TINY, too_many)


def test_design_round_sharded_equals_single_device(trained):
    """Sharding the population over 8 devices changes only the order of float32 reductions.

    Checked: the designed sequences exactly, row by row, for all rows but at most one and never a
    whole device's shard (integer decisions; a near-tie may flip one row's path, see
    :func:`_rows_that_agree`), and on the rows that agree the ensemble means (the acquisition's
    inputs) to a float32 tolerance and the acquisition to the tolerance its conditioning implies
    at those means (:func:`_acquisition_tolerance`), not a blanket rtol.
    """
    params, stats, best, seeds = trained
    mesh = parallel.make_mesh(8)
    single, a1, _ = D.design_round(jax.random.key(5), params, stats, best, seeds, TINY, STEPS)
    sharded, a8, _ = D.design_round(
        jax.random.key(5), params, stats, best, seeds, TINY, STEPS, mesh=mesh
    )
    assert len(sharded.sharding.device_set) == 8
    shards = _shard_rows(sharded)
    assert [len(rows) for rows in shards] == [4] * 8  # 32 rows: 4 per device
    agree = _rows_that_agree(np.asarray(sharded), np.asarray(single), shards=shards)
    mu1 = np.asarray(D.member_means(TINY, params, stats, single))
    mu8 = np.asarray(
        D.member_means(
            TINY,
            *jax.device_put(
                (params, stats), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
            ),
            sharded,
        )
    )
    mu1, mu8 = mu1[:, agree], mu8[:, agree]
    mu_tol = _mean_tolerance(mu1)
    np.testing.assert_array_less(np.abs(mu8 - mu1), mu_tol + 1e-30)
    a_tol = _acquisition_tolerance(mu1, np.asarray(best), mu_tol)
    np.testing.assert_array_less(np.abs(np.asarray(a8) - np.asarray(a1))[agree], a_tol)
    # the bound is informative: away from the incumbents it is tight (a blanket 1e-2 would not be)
    assert np.median(a_tol) < 1e-3
    with pytest.raises(ValueError, match="divisible"):
        D.design_round(jax.random.key(5), params, stats, best, seeds[:30], TINY, STEPS, mesh=mesh)


def test_masking_rate_follows_the_schedule(trained):
    """cortex ``LaMBO.step``: each of the M edit positions is masked independently with probability
    ``rho_s = 1 / sqrt(1 + s)``. Every seed position is real and M <= L, so the edit set has
    exactly M positions, the masking uniforms are drawn per (sequence, position) from a key of
    their own, and under that schedule, exactly (no normal approximation):

    * the step's total ``T_s = sum_i |C_s,i| ~ Binomial(n M, rho_s)`` (the rate);
    * the number of sequences with all M edit positions masked ``K_s ~ Binomial(n, rho_s^M)``
      (independence across positions: masking the M positions together with probability
      ``rho_s`` has the same mean but ``K_s ~ Binomial(n, rho_s)``).

    Each of the 2 (S - 1) = 14 statistics gets an exact two-sided binomial test
    (``scipy.stats.binomtest``, whose p-value is valid: ``P(p <= a) <= a``) at level
    ``alpha / 14``; by the union bound a correct implementation fails with probability at most
    ``alpha = 1e-6`` over the choice of key, and the key is fixed, so the test is deterministic.
    On this key the smallest p-value is 0.07; the threshold is 7e-8. Power on the same key
    (n = 512, M = 4): the rate test gives p = 1e-84 at s = 1 for the schedule ``1 / (1 + s)`` and
    2e-37 for ``1 / sqrt(2 + s)``; masking the M positions together passes the rate test
    (p >= 2e-3) and fails the all-masked count, p = 3e-94 at s = 1.
    """
    alpha = 1e-6  # total false-failure probability of this test for a correct implementation
    params, stats, best, seeds = trained
    config = D.DesignConfig(num_steps=8, num_mutations=4, guidance_updates=0)
    population = np.tile(seeds, (16, 1))
    n, m = len(population), config.num_mutations
    _, _, trace = D.design_round(jax.random.key(11), params, stats, best, population, TINY, config)
    counts = np.asarray(trace.num_masked)  # [S, n]
    np.testing.assert_array_equal(counts[0], m)  # rho_0 = 1
    level = alpha / (2 * (config.num_steps - 1))
    for s in range(1, config.num_steps):
        rho = 1.0 / math.sqrt(1.0 + s)
        total = binomtest(int(counts[s].sum()), n * m, rho)
        assert total.pvalue > level, (s, counts[s].mean(), m * rho, total.pvalue)
        full = binomtest(int((counts[s] == m).sum()), n, rho**m)
        assert full.pvalue > level, (s, (counts[s] == m).mean(), rho**m, full.pvalue)


# ------------------------------------------------------------------------------------ saliency
def _forcing_token_zero(params):
    """``params`` whose generative head decodes every masked position to token 0 (bias +1e4;
    the head's other logits are O(10))."""
    out = params["gen"]["out"]
    return {**params, "gen": {**params["gen"], "out": {**out, "bias": out["bias"].at[0].set(1e4)}}}


def _revealing_step(num_mutations: int, temp: float, **kw) -> D.DesignConfig:
    """One design step whose edit positions can be read off the output: at s = 0 every edit
    position is masked (rate 1), decoded to token 0 (:func:`_forcing_token_zero`) and the
    proposal is force-accepted (``exclude_initial_solution``, no guidance update); with seeds
    free of token 0, the changed positions are exactly the edit positions."""
    return D.DesignConfig(
        num_steps=1,
        num_mutations=num_mutations,
        guidance_updates=0,
        exclude_initial_solution=True,
        feature_attr_temp=temp,
        **kw,
    )


def test_edit_positions_are_the_top_first_order_occlusion_scores(trained):
    """cortex saliency, trained (nonlinear) model: ``score_p = <grad_{e_p} a(x), e_null - e_p>``
    with the raw ``<mask>`` row as ``e_null`` (``normalize_null`` off, the default), computed here
    by forward mode (``jax.jvp`` along ``e_null - e_p``, one position at a time); the design step
    uses reverse mode over the population. At temperature 1e-5 the Gumbel-top-M draw is the
    top M of the scores: float32 Gumbel noise is bounded (two draws differ by < 22 in JAX's
    default mode, < 50 in any), so L1-normalised score gaps above 50 T = 5e-4 cannot be
    reordered; every row's gap between its 3rd and 4th score is asserted to be larger.
    (Using the normalised ``<mask>`` embedding instead gives a different top 3 in 15 of the 64
    rows, dropping ``- e_p`` in 30.)
    """
    params, stats, best, _ = trained
    params = _forcing_token_zero(params)
    seeds = np.random.default_rng(1).integers(1, TINY.num_states, (64, TINY.length))
    tokens = jnp.asarray(seeds, jnp.int32)
    mask = jnp.ones(tokens.shape, bool)
    encoder = M.encoder_module(TINY, params["encoder"])
    e = encoder.embed(tokens)
    null = encoder.embedding[...][TINY.mask_id]

    def acquisition(e):
        h = encoder.from_embeddings(e, mask)
        loc, _ = M.gaussian_from_natural(M.ensemble_apply(TINY, params["reg"], h, mask))
        return D.acquisition(stats.mean + stats.std * loc, best)

    def first_order(p):
        direction = jnp.zeros_like(e).at[:, p].set(null - e[:, p])
        return np.asarray(jax.jvp(acquisition, (e,), (direction,))[1], np.float64)

    score = np.stack([first_order(p) for p in range(TINY.length)], axis=1)
    ordered = np.sort(score / np.abs(score).sum(1, keepdims=True), axis=1)
    gap = np.min(ordered[:, -3] - ordered[:, -4])
    assert gap > 5e-4, f"precondition: a near-tie ({gap:.1e}) would let the Gumbel noise decide"
    x, _, trace = D.design_round(
        jax.random.key(0), params, stats, best, seeds, TINY, _revealing_step(3, 1e-5)
    )
    np.testing.assert_array_equal(np.asarray(trace.num_masked), 3)
    x = np.asarray(x)
    edited = x != seeds
    np.testing.assert_array_equal(x[edited], 0)
    top = np.zeros_like(edited)
    np.put_along_axis(top, np.argsort(-score, axis=1)[:, :3], True, axis=1)
    np.testing.assert_array_equal(edited, top)


def _affine_regressor_params(key):
    """``(params, w)``: encoder and regressor-branch convolutions zero (every block is then the
    identity or its 1x1 projection) and the leaves' ``u`` output constant, so member ``e``'s
    standardised mean is affine in the token embeddings, ``loc_e = b_e + w_e . mean_p e_p``;
    ``w_e = var_e P_e l_e`` (f64 ``[E, d_e]``; P the branch projection, l the leaf's ``eta1``
    column). The generative head decodes to token 0."""
    params = M.init_params(key, TINY)
    for block in params["encoder"]["blocks"].values():
        for conv in ("conv1", "conv2"):
            block[conv]["kernel"] = jnp.zeros_like(block[conv]["kernel"])
    members = params["reg"]["members"]
    for conv in ("conv1", "conv2"):
        members["branch"][conv]["kernel"] = jnp.zeros_like(members["branch"][conv]["kernel"])
    members["leaf"]["kernel"] = members["leaf"]["kernel"].at[..., 1].set(0.0)
    u = np.asarray(members["leaf"]["bias"][:, 1], np.float64)
    var = 1.0 / (4.0 * np.log1p(np.exp(u / 2.0)))  # -1 / (2 eta2), eta2 = -2 softplus(u / 2)
    proj = np.asarray(members["branch"]["proj"]["kernel"][:, 0], np.float64)  # [E, d_e, 4]
    leaf = np.asarray(members["leaf"]["kernel"][:, 0, :, 0], np.float64)  # [E, 4]
    return _forcing_token_zero(params), var[:, None] * np.einsum("edk,ek->ed", proj, leaf)


def _softmax(logits):
    z = np.exp(logits - logits.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def test_saliency_is_the_linearised_brute_force_occlusion():
    """First-order saliency vs brute-force occlusion where the first order is exact for the
    means (:func:`_affine_regressor_params`), with ``normalize_null`` on (the occlusion baseline
    is then the ``<mask>`` token's own embedding).

    Brute force: replace position ``p`` by ``<mask>``, re-run the model: ``d_e(p) = Delta mu_e``
    must equal ``s_y w_e . (e_null - e_p) / L`` (by hand from the parameters). The first-order
    score is ``mean_e f'(z_e) d_e(p)``, ``f = log_fatplus``, ``z_e = mu_e - best_e``, with the
    closed form ``f'(z) = -2 z / (tau^2 + z^2)`` (``softplus(z / tau)`` is exactly 0 in the tail
    used: incumbents 2 above every mean). The acquisition is not linear in ``mu``: brute-force
    ``Delta a_p`` matches the score to the Taylor remainder ``mean_e d_e^2 / min z^2`` over
    ``[z, z + d]`` (``|f''| <= 2 / z^2``; the actual error is ~0.97 of it, so the bound is tight)
    plus float32 rounding of ``a`` (~50), and every pair of positions whose scores differ by more
    than both tolerances is ranked the same way by brute force.

    The design step's saliency is then read off its draws: with M = 1 the edit position is a
    Gumbel-max draw from ``softmax(score / (|score|_1 + 1e-6) / T)``; 2048 copies of each of 4
    seeds give frequencies that must match those probabilities to 5 binomial standard errors
    (T = 0.05; 2T, T/2, no L1 normalisation or the v0.0.3 rule move some frequency by 10 to 23
    standard errors).
    """
    params, w = _affine_regressor_params(jax.random.key(7))
    stats = D.RegressorStats(jnp.float32(0.3), jnp.float32(2.0))
    seeds = np.random.default_rng(0).integers(1, TINY.num_states, (64, TINY.length))
    table = np.asarray(params["encoder"]["embedding"], np.float64)
    norm = np.maximum(np.linalg.norm(table, axis=1, keepdims=True), 1e-6)  # the pad row is 0
    unit = math.sqrt(TINY.embed_dim) * table / norm
    mu = np.asarray(D.member_means(TINY, params, stats, seeds), np.float64)  # [E, n]
    best = mu.max(1) + 2.0
    a0 = np.asarray(D.acquisition(jnp.asarray(mu), jnp.asarray(best)), np.float64)
    d = np.zeros((TINY.ensemble_size, *seeds.shape))  # brute force, [E, n, L]
    delta_a = np.zeros(seeds.shape)
    for p in range(TINY.length):
        occluded = seeds.copy()
        occluded[:, p] = TINY.mask_id
        mu_p = np.asarray(D.member_means(TINY, params, stats, occluded), np.float64)
        d[:, :, p] = mu_p - mu
        delta_a[:, p] = np.asarray(D.acquisition(jnp.asarray(mu_p), jnp.asarray(best))) - a0
    by_hand = (
        float(stats.std)
        * np.einsum("ed,npd->enp", w, unit[TINY.mask_id] - unit[seeds])
        / TINY.length
    )
    np.testing.assert_allclose(d, by_hand, rtol=0, atol=1e-6)
    z = mu - best[:, None]
    reach = np.minimum(-z[..., None], -(z[..., None] + d))  # min |zeta| on [z, z + d]
    assert reach.min() > 1.5
    tau = D.DesignConfig().tau
    score = ((-2.0 * z / (tau**2 + z**2))[..., None] * d).mean(0)  # [n, L]
    taylor = (d**2 / reach**2).mean(0)
    tolerance = taylor + 16 * np.finfo(np.float32).eps * np.abs(a0)[:, None]
    np.testing.assert_array_less(np.abs(delta_a - score), tolerance)
    assert np.median(tolerance) < 0.05 * np.median(np.abs(score))
    separated = (
        score[:, :, None] - score[:, None, :] > tolerance[:, :, None] + tolerance[:, None, :]
    )
    assert separated.sum() > 0.5 * (score[:, :, None] > score[:, None, :]).sum()
    assert np.all((delta_a[:, :, None] > delta_a[:, None, :])[separated])

    temp, copies = 0.05, 2048
    population = np.repeat(seeds[:4], copies, axis=0)
    config = _revealing_step(1, temp, normalize_null=True)
    x, _, _ = D.design_round(
        jax.random.key(1), params, stats, jnp.asarray(best, jnp.float32), population, TINY, config
    )
    edited = (np.asarray(x) != population).reshape(4, copies, TINY.length)
    np.testing.assert_array_equal(edited.sum(-1), 1)
    frequency = edited.mean(1)
    normalised = score[:4] / (np.abs(score[:4]).sum(1, keepdims=True) + 1e-6)
    probability = _softmax(normalised / temp)
    standard_error = np.sqrt(probability * (1.0 - probability) / copies)
    np.testing.assert_array_less(np.abs(frequency - probability), 5.0 * standard_error)


# ------------------------------------------------------------------------------------ KL term
def _masked_features(params, seeds, rows: int = 8):
    """Trunk features ``h0`` of ``rows`` seeds with a fixed masked set C (1 or 2 positions)."""
    tokens = jnp.asarray(seeds[:rows], jnp.int32)
    chosen = jnp.zeros(tokens.shape, bool).at[:, 1].set(True).at[::2, 4].set(True)
    h0 = M.encoder_module(TINY, params["encoder"])(jnp.where(chosen, TINY.mask_id, tokens))
    return tokens, chosen, h0


def _kl_by_hand(logits, chosen, num_states):
    """float64 NumPy KL(softmax(logits) || q0) averaged over the masked positions (cortex)."""
    logits = np.asarray(logits, np.float64)
    viable = np.arange(logits.shape[-1]) < num_states
    q = np.where(viable, np.exp(logits - logits.max(-1, keepdims=True)), 0.0)
    q = np.maximum(q / q.sum(-1, keepdims=True), 1e-6)
    q = q / q.sum(-1, keepdims=True)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    per_position = (p * (np.log(p) - np.log(q))).sum(-1)
    return per_position[np.asarray(chosen)].mean(), p[..., ~viable].sum(-1)


def test_design_config_kl_weight_validation():
    assert D.DesignConfig().kl_weight == 0.0
    assert hash(D.DesignConfig(kl_weight=0.5)) == hash(D.DesignConfig(kl_weight=0.5))
    assert D.DesignConfig(kl_weight=0.5) != D.DesignConfig()
    for bad in (-0.1, 1.0, 1.5, float("nan"), float("inf"), True, "0.5", None):
        with pytest.raises(ValueError, match="kl_weight"):
            D.DesignConfig(kl_weight=bad)
    assert optimizer.preset("smoke", design={"kl_weight": 0.25}).design.kl_weight == 0.25


def test_kl_at_zero_perturbation_is_near_zero(trained):
    params = trained[0]
    _, chosen, h0 = _masked_features(params, trained[3])
    q0 = kl_term.reference_distribution(TINY, params, h0)
    np.testing.assert_allclose(np.asarray(q0).sum(-1), 1.0, rtol=1e-5)
    assert float(q0.min()) >= 1e-6 * (1 - 1e-3)  # clamped (utility tokens sit at ~1e-6)
    kl = float(kl_term.mean_kl_to_reference(TINY, params, h0, q0, chosen))
    expected, non_viable = _kl_by_hand(M.gen_apply(TINY, params["gen"], h0), chosen, 4)
    assert kl == pytest.approx(expected, rel=1e-4, abs=1e-6)
    # Non-zero only through the mass m the unmasked logits put on the utility tokens u and the
    # clamp: with Z = 1 + #u 1e-6 (no viable probability is below 1e-6 here), per position
    # KL = (1 - m) log((1 - m) Z) + sum_u p_u log(p_u Z / 1e-6).
    logits = np.asarray(M.gen_apply(TINY, params["gen"], h0), np.float64)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    assert (p[..., :4] / (1 - non_viable[..., None])).min() > 1e-6
    z = 1 + (TINY.vocab_size - 4) * 1e-6
    pu = p[..., 4:]
    closed = (1 - non_viable) * np.log((1 - non_viable) * z) + (pu * np.log(pu * z / 1e-6)).sum(-1)
    assert kl == pytest.approx(closed[np.asarray(chosen)].mean(), rel=1e-4, abs=1e-6)
    # no mass on utility tokens -> only the 1e-6 clamp is left: KL ~ (#viable) 1e-6
    gen = jax.tree.map(lambda a: a, params["gen"])
    gen["out"]["bias"] = gen["out"]["bias"].at[4:].set(-1e4)
    cut = {**params, "gen": gen}
    q_cut = kl_term.reference_distribution(TINY, cut, h0)
    kl_cut = float(kl_term.mean_kl_to_reference(TINY, cut, h0, q_cut, chosen))
    assert 0.0 <= kl_cut < 1e-4 < kl
    # off C, nothing counts; an empty C gives 0 (not NaN)
    none = jnp.zeros_like(chosen)
    assert float(kl_term.mean_kl_to_reference(TINY, params, h0, q0, none)) == 0.0


def test_kl_weight_shrinks_the_perturbation(trained):
    params, stats, best, seeds = trained
    tokens, chosen, h0 = _masked_features(params, seeds, rows=32)
    mask = jnp.ones(tokens.shape, bool)
    norms, kls = {}, {}
    for kl_weight in (0.0, 0.5, 0.9):
        config = D.DesignConfig(guidance_step_size=0.5, kl_weight=kl_weight)
        delta = jnp.zeros_like(h0)
        opt = D.guidance_optimizer(config).init(delta)
        for _ in range(config.guidance_updates):  # K_g = 2
            delta, opt = D.guidance_update(
                TINY, config, params, stats, best, h0, chosen, mask, delta, opt
            )
        np.testing.assert_array_equal(np.asarray(delta)[~np.asarray(chosen)], 0.0)
        norms[kl_weight] = float(jnp.linalg.norm(delta))
        q0 = kl_term.reference_distribution(TINY, params, h0)
        kls[kl_weight] = float(kl_term.mean_kl_to_reference(TINY, params, h0 + delta, q0, chosen))
    assert norms[0.9] < norms[0.5] < norms[0.0]
    assert kls[0.9] < kls[0.0]


def test_pseudo_log_likelihood_matches_brute_force(trained):
    params = trained[0]
    tokens = jnp.asarray(trained[3][:5], jnp.int32)
    pll = np.asarray(kl_term.pseudo_log_likelihood(TINY, params, tokens))
    encoder = M.encoder_module(TINY, params["encoder"])
    by_hand = np.zeros(len(tokens))
    for p in range(TINY.length):
        logits = M.gen_apply(TINY, params["gen"], encoder(tokens.at[:, p].set(TINY.mask_id)))
        logp = np.asarray(jax.nn.log_softmax(logits[:, p], axis=-1))  # full vocabulary
        by_hand += logp[np.arange(len(tokens)), np.asarray(tokens[:, p])] / TINY.length
    np.testing.assert_allclose(pll, by_hand, rtol=1e-5, atol=1e-5)
    assert np.all(pll < 0)
    # a sequence the MLM finds likely scores higher than a scrambled one? At least: the PLL
    # depends on the sequence and is the mean of per-position terms (one masked at a time).
    other = jnp.asarray(np.roll(np.asarray(tokens), 1, axis=0))
    assert not np.allclose(np.asarray(kl_term.pseudo_log_likelihood(TINY, params, other)), pll)


def test_design_round_with_kl_weight_never_lowers_the_blended_score(trained):
    params, stats, best, seeds = trained
    kl_weight = 0.99  # large enough that the PLL, not the acquisition, decides some acceptances
    config = D.DesignConfig(num_steps=2, num_mutations=2, guidance_updates=2, kl_weight=kl_weight)

    def blended(x):
        a = D.acquisition(D.member_means(TINY, params, stats, x), best)
        pll = kl_term.pseudo_log_likelihood(TINY, params, jnp.asarray(x, jnp.int32))
        return np.asarray((1 - kl_weight) * a + kl_weight * pll), np.asarray(a)

    x, a, trace = D.design_round(jax.random.key(3), params, stats, best, seeds, TINY, config)
    x, trace = np.asarray(x), jax.tree.map(np.asarray, trace)
    score0, _ = blended(seeds)
    # accept iff the blended score does not drop (the start is recomputed here: float noise)
    assert np.all(trace.score[0] >= score0 - 1e-5)
    assert np.all(np.diff(trace.score, axis=0) >= 0)
    # ... which is not the acquisition rule: a(x) alone does drop for some sequences
    a_curve = np.concatenate([blended(seeds)[1][None], trace.acquisition])
    assert np.any(np.diff(a_curve, axis=0) < -1e-3)
    final_score, final_a = blended(x)
    np.testing.assert_allclose(trace.score[-1], final_score, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(a, final_a, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(trace.acquisition[-1], a)
    assert trace.changes.max() <= config.num_mutations and trace.accepted.sum() > 0
    same, _, same_trace = D.design_round(
        jax.random.key(3), params, stats, best, seeds, TINY, config, use_scan=True
    )
    agree = _rows_that_agree(np.asarray(same), x)
    np.testing.assert_allclose(
        np.asarray(same_trace.score)[:, agree], trace.score[:, agree], rtol=1e-5
    )
    # lambda = 0: the trace's score is the acquisition itself
    _, _, plain = D.design_round(jax.random.key(3), params, stats, best, seeds, TINY, STEPS)
    np.testing.assert_array_equal(np.asarray(plain.score), np.asarray(plain.acquisition))


# ------------------------------------------------------------------------------------ decode temperature
def test_decode_temperature_samples_from_the_tempered_mlm_head(trained):
    """``decode_logits`` = MLM logits / T over the ``v`` states (by hand from ``gen_apply`` with
    numpy's softmax); the special tokens are never drawn; the design round uses it."""
    params, stats, best, seeds = trained
    tokens = jnp.asarray(seeds, jnp.int32)
    h = M.encoder_module(TINY, params["encoder"])(tokens.at[:, 3].set(TINY.mask_id))
    raw = np.asarray(M.gen_apply(TINY, params["gen"], h), np.float64)[..., : TINY.num_states]
    for temperature in (1.0, 2.0, 0.5):
        config = D.DesignConfig(decode_temperature=temperature)
        got = np.asarray(jax.nn.softmax(D.decode_logits(TINY, config, params, h), axis=-1))
        z = raw / temperature
        want = np.exp(z - z.max(-1, keepdims=True))
        want /= want.sum(-1, keepdims=True)
        np.testing.assert_allclose(got[..., : TINY.num_states], want, rtol=2e-5, atol=1e-7)
        assert float(got[..., TINY.num_states :].max()) == 0.0
    # a hotter decode changes what the design proposes from the same key
    hot = D.DesignConfig(**{**vars(STEPS), "decode_temperature": 8.0})
    x_ref, _, _ = D.design_round(jax.random.key(3), params, stats, best, seeds, TINY, STEPS)
    x_hot, _, _ = D.design_round(jax.random.key(3), params, stats, best, seeds, TINY, hot)
    assert int((np.asarray(x_ref) != np.asarray(x_hot)).sum()) > 0
    for bad in (0.0, -1.0, float("inf"), float("nan"), True, "2"):
        with pytest.raises(ValueError, match="decode_temperature"):
            D.DesignConfig(decode_temperature=bad)
