"""LaMBO-2's design step: acquisition, saliency, guided latent optimisation.

Follows cortex v0.0.4 ``LaMBO.step`` by default (v0.0.3 as an option); design notes in
``docs/design/lambo2_port.md``; the seeds come from ``llome_jax.lambo2.seeds`` (poli-baselines'
seed selection). One round runs ``S`` design steps on the whole
population of ``n`` sequences as one batch under ``jit``: either one ``lax.scan`` over the steps
(``use_scan=True``, for accelerators) or a Python loop over one jitted step (default; XLA:CPU
executes convolutions inside ``while`` loops far slower than straight-line code,
``docs/design/lambo2_port.md`` decision 2). The ``K_g`` guidance updates are unrolled. Per step ``s``
(cortex ``LaMBO.step``):

1. score the population ``A = a(X)`` (carried; ``-inf`` at ``s = 0`` with
   ``exclude_initial_solution``);
2. edit positions: first-order occlusion saliency ``score_p = <grad_{E_x} sum_i a(x_i), e_null -
   E_{x,p}>``, v0.0.4 ``softmax(score / (sum |score| + 1e-6) / temp)``, ``M`` distinct positions per
   sequence by Gumbel-top-``M``;
3. mask each edit position with probability ``1 / sqrt(1 + s)`` (set ``C``) and encode: ``h0``;
4. ``delta = 0``, fresh Adam(``eta``, betas (0.09, 0.0999)); decode-and-accept ``h0``; ``K_g`` times:
   Adam step on ``lambda KL - (1 - lambda) mean_i a(h0 + delta 1[C])``, decode-and-accept.

Decode-and-accept samples tokens (utility tokens excluded) at ``C`` from the generative head,
re-scores the discrete proposal with a clean forward and accepts per sequence iff the acquisition
does not decrease. The acquisition (cortex's GraphNEI, one objective) is the ensemble mean of ``log
fatplus_tau(mu_e(x) - best_e)`` with ``best_e = max_j mu_e(seed_j)``.

KL term (``DesignConfig.kl_weight = lambda``, default 0 = the paper; cortex's ``kl_weight``): the
guidance loss adds ``lambda KL`` where ``KL = mean_{(i, p in C)} KL(softmax(logits(h)) || q0)`` and
``q0`` is the generative head's viable-token distribution at ``h0`` (clamped to >= 1e-6,
renormalised), and the acceptance score becomes ``(1 - lambda) a(x) + lambda PLL(x)`` with the MLM
pseudo-log-likelihood ``PLL(x) = mean_{real p} log p(x_p | x with p masked)`` (``L`` extra encoder
passes per scored batch; both in ``llome_jax.lambo2.kl_term``). With ``lambda = 0`` none of this is
traced: the compiled step is the one without the term.

Data parallelism: pass ``mesh``; the population is placed with ``NamedSharding(mesh, P("data"))``
and the model replicated. Nothing in a design step reduces over sequences except the guidance
loss' mean, whose gradient for sequence ``i`` only involves sequence ``i``, so sharded and
single-device rounds agree.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from llome_jax.host import parallel
from llome_jax.lambo2.kl_term import (
    mean_kl_to_reference,
    pseudo_log_likelihood,
    reference_distribution,
    viable_logits,
)
from llome_jax.lambo2.model import (
    ModelConfig,
    Params,
    encoder_module,
    ensemble_apply,
    gaussian_from_natural,
    gen_apply,
)

__all__ = [
    "DesignConfig",
    "DesignTrace",
    "RegressorStats",
    "acquisition",
    "best_values",
    "decode_logits",
    "design_round",
    "guidance_optimizer",
    "guidance_update",
    "log_fatplus",
    "member_means",
]


@dataclasses.dataclass(frozen=True)
class DesignConfig:
    """Static design settings (defaults = the port's recommended defaults, docs/design/lambo2_port.md).

    Attributes:
      num_steps: design steps ``S`` per round (paper 32).
      num_mutations: edit positions ``M`` per step (paper 4).
      guidance_updates: Adam updates ``K_g`` per step (reproduce sweep 2).
      guidance_step_size: ``eta`` (paper 0.05).
      exclude_initial_solution: force-accept the first proposal of a round (off).
      feature_attr_temp: saliency temperature (1.0).
      version: ``"v0.0.4"`` (L1-normalised saliency, guidance betas (0.09, 0.0999)) or
        ``"v0.0.3"`` (raw saliency softmax, betas (0.9, 0.999)).
      normalize_null: use the normalised ``<mask>`` embedding as the occlusion baseline (the
        reference uses the raw row; off for fidelity).
      tau: fat-plus temperature (1e-6).
      use_constraints: multiply each member's mean by its feasibility probability (off in the
        paper's configuration).
      kl_weight: ``lambda`` in ``[0, 1)`` (cortex's ``kl_weight``; 0 in the paper and bbo-bench).
        The guidance loss is ``lambda KL - (1 - lambda) mean_i a(h_i)`` and sequences are accepted
        on ``(1 - lambda) a(x) + lambda PLL(x)``; 0 switches both off (the compiled step is then
        exactly the one without the term).
      decode_temperature: the MLM head's logits are divided by ``T`` before each token is
        sampled (``softmax(logits / T)``; 1.0 = the reference). ``T > 1`` flattens the proposal
        distribution towards tokens the labelled data rarely shows, an exploration lever for
        neutral plateaus (not in cortex or the paper; docs/experiments.md).
    """

    num_steps: int = 32
    num_mutations: int = 4
    guidance_updates: int = 2
    guidance_step_size: float = 0.05
    exclude_initial_solution: bool = False
    feature_attr_temp: float = 1.0
    version: str = "v0.0.4"
    normalize_null: bool = False
    tau: float = 1e-6
    use_constraints: bool = False
    kl_weight: float = 0.0
    decode_temperature: float = 1.0

    def __post_init__(self) -> None:
        for name in ("num_steps", "num_mutations"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"DesignConfig.{name} must be a positive int, got {value!r}.")
        if not isinstance(self.guidance_updates, int) or self.guidance_updates < 0:
            raise ValueError(
                f"guidance_updates must be an int >= 0, got {self.guidance_updates!r}."
            )
        if self.version not in ("v0.0.4", "v0.0.3"):
            raise ValueError(f"version must be 'v0.0.4' or 'v0.0.3', got {self.version!r}.")
        if self.guidance_step_size < 0 or self.tau <= 0:
            raise ValueError("guidance_step_size must be >= 0 and tau > 0.")
        temp = self.feature_attr_temp
        if (
            isinstance(temp, bool)
            or not isinstance(temp, (int, float))
            or not 0.0 < temp < math.inf
        ):
            raise ValueError(
                f"DesignConfig.feature_attr_temp (the saliency softmax temperature) must be a "
                f"positive finite number, got {temp!r}."
            )
        kl = self.kl_weight
        if isinstance(kl, bool) or not isinstance(kl, (int, float)) or not 0.0 <= kl < 1.0:
            raise ValueError(
                f"DesignConfig.kl_weight must be a number in [0, 1) (the KL weight lambda; 1 would "
                f"drop the acquisition entirely), got {kl!r}."
            )
        dt = self.decode_temperature
        if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not 0.0 < dt < math.inf:
            raise ValueError(
                f"DesignConfig.decode_temperature (divides the MLM logits before sampling) must "
                f"be a positive finite number, got {dt!r}."
            )

    @property
    def guidance_betas(self) -> tuple[float, float]:
        return (0.09, 0.0999) if self.version == "v0.0.4" else (0.9, 0.999)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["mean", "std"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class RegressorStats:
    """Target statistics of the last fit: predictions are ``mean + std * loc`` (f32 scalars)."""

    mean: jax.Array
    std: jax.Array


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["acquisition", "accepted", "changes", "num_masked", "score"],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class DesignTrace:
    """Per design step (leading axis ``S``): acquisition after the step f32 ``[S, n]``, accepted
    proposals int32 ``[S, n]`` (of ``K_g + 1``), Hamming change of the step int32 ``[S, n]``,
    masked positions ``|C|`` int32 ``[S, n]``, acceptance score after the step f32 ``[S, n]``
    (``(1 - lambda) a + lambda PLL``; the acquisition itself when ``lambda = 0``)."""

    acquisition: jax.Array
    accepted: jax.Array
    changes: jax.Array
    num_masked: jax.Array
    score: jax.Array


# ---------------------------------------------------------------------------------------------
# Acquisition (cortex GraphNEI with one objective: log-improvement per member)
# ---------------------------------------------------------------------------------------------
def log_fatplus(z: jax.Array, tau: float = 1e-6) -> jax.Array:
    """``log(tau (softplus(z / tau) + 0.1 / (1 + (z / tau)^2)))``: finite, smooth, increasing.

    Reference values (tau 1e-6): z = -0.5 -> -42.4, 0 -> -14.05, 0.01 -> -4.61.
    """
    w = z / tau
    return jnp.log(jax.nn.softplus(w) + 0.1 / (1.0 + jnp.square(w))) + math.log(tau)


def _pad(tokens: jax.Array, config: ModelConfig) -> jax.Array:
    extra = config.padded_length - tokens.shape[-1]
    if extra <= 0:
        return tokens
    return jnp.pad(tokens, ((0, 0), (0, extra)), constant_values=config.pad_id)


def _means_from_features(
    config: ModelConfig,
    params: Params,
    stats: RegressorStats,
    h: jax.Array,
    mask: jax.Array,
    use_constraints: bool,
) -> jax.Array:
    loc, _ = gaussian_from_natural(ensemble_apply(config, params["reg"], h, mask))
    mu = stats.mean + stats.std * loc  # [E, B]
    if use_constraints:
        feasible = jax.nn.softmax(ensemble_apply(config, params["cls"], h, mask))[..., 1]
        mu = mu * feasible
    return mu


@functools.partial(jax.jit, static_argnums=(0, 4))
def member_means(
    config: ModelConfig,
    params: Params,
    stats: RegressorStats,
    tokens: jax.Array,
    use_constraints: bool = False,
) -> jax.Array:
    """Un-standardised predicted means ``mu_e(x)`` of every member on clean tokens: ``[E, B]``."""
    tokens = _pad(jnp.asarray(tokens, jnp.int32), config)
    h = encoder_module(config, params["encoder"])(tokens)
    return _means_from_features(config, params, stats, h, tokens != config.pad_id, use_constraints)


@functools.partial(jax.jit, static_argnums=(0, 4))
def best_values(
    config: ModelConfig,
    params: Params,
    stats: RegressorStats,
    seeds: jax.Array,
    use_constraints: bool = False,
) -> jax.Array:
    """``best_e = max_j mu_e(seed_j)`` per member: ``[E]`` (recomputed every round)."""
    return member_means(config, params, stats, seeds, use_constraints).max(axis=1)


def acquisition(mu: jax.Array, best: jax.Array, tau: float = 1e-6) -> jax.Array:
    """``a = mean_e log fatplus(mu_e - best_e)``: ``mu [E, B]``, ``best [E]`` -> ``[B]``."""
    return log_fatplus(mu - best[:, None], tau).mean(axis=0)


# ---------------------------------------------------------------------------------------------
# The design round (cortex ``LaMBO.step`` on the whole population)
# ---------------------------------------------------------------------------------------------
def guidance_optimizer(config: DesignConfig) -> optax.GradientTransformation:
    """Adam on the perturbation: ``lr = eta``, version-dependent betas, eps 1e-8."""
    b1, b2 = config.guidance_betas
    return optax.adam(config.guidance_step_size, b1=b1, b2=b2, eps=1e-8)


def guidance_update(
    model_config: ModelConfig,
    design_config: DesignConfig,
    params: Params,
    stats: RegressorStats,
    best: jax.Array,
    h0: jax.Array,
    chosen: jax.Array,
    mask: jax.Array,
    delta: jax.Array,
    opt_state: Any,
) -> tuple[jax.Array, Any]:
    """One Adam step on ``delta`` for cortex's guidance loss with ``h = h0 + delta 1[C]``:

    ``loss = lambda KL(h) - (1 - lambda) mean_i a(h_i)`` (:func:`mean_kl_to_reference` against
    ``q0 = reference_distribution(h0)``, fixed); with ``lambda = 0`` exactly
    ``-mean_i a(h_i)`` (the KL term is not traced).

    Shapes: ``h0``/``delta`` ``[n, N, d_o]``, ``chosen`` (the set C) and ``mask`` bool ``[n, N]``.
    ``delta`` stays 0 outside ``C`` (its gradient is 0 there, so Adam's update is 0).
    """
    cmask = chosen[..., None].astype(h0.dtype)
    kl_weight = design_config.kl_weight
    if kl_weight > 0:
        q0 = jax.lax.stop_gradient(reference_distribution(model_config, params, h0))

    def loss(delta):
        h = h0 + delta * cmask
        mu = _means_from_features(
            model_config, params, stats, h, mask, design_config.use_constraints
        )
        if kl_weight == 0:
            return -acquisition(mu, best, design_config.tau).mean()
        kl = mean_kl_to_reference(model_config, params, h, q0, chosen)
        return kl_weight * kl - (1.0 - kl_weight) * acquisition(mu, best, design_config.tau).mean()

    g = jax.grad(loss)(delta)
    updates, opt_state = guidance_optimizer(design_config).update(g, opt_state, delta)
    return optax.apply_updates(delta, updates), opt_state


def decode_logits(mc: ModelConfig, dc: DesignConfig, params: Params, h: jax.Array) -> jax.Array:
    """Logits ``[..., L, vocab]`` the design samples tokens from: the MLM head's logits divided by
    ``dc.decode_temperature``, special tokens at ``-inf`` (only the ``v`` states are drawn)."""
    logits = gen_apply(mc, params["gen"], h)
    if dc.decode_temperature != 1.0:  # 1.0 compiles exactly the reference decode
        logits = logits / dc.decode_temperature
    return viable_logits(mc, logits)


def _design_step_fn(mc: ModelConfig, dc: DesignConfig, params, stats, best):
    """``(step, acq_tokens, blend_score)`` of a design round (cortex ``LaMBO.step``).

    The carry is ``(x, a_cur, key)``; with ``kl_weight > 0`` it is ``(x, a_cur, key, score_cur)``
    where ``score_cur = (1 - lambda) a_cur + lambda PLL(x)`` is the acceptance score (cortex).
    """
    v = mc.num_states
    encoder = encoder_module(mc, params["encoder"])
    kl_weight = dc.kl_weight

    def acq_features(h, mask):
        mu = _means_from_features(mc, params, stats, h, mask, dc.use_constraints)
        return acquisition(mu, best, dc.tau)

    def acq_tokens(tokens):
        return acq_features(encoder(tokens), tokens != mc.pad_id)

    def blend_score(tokens, a):
        """Acceptance score ``(1 - lambda) a + lambda PLL(x)`` (only used for ``lambda > 0``)."""
        return (1.0 - kl_weight) * a + kl_weight * pseudo_log_likelihood(mc, params, tokens)

    def step(carry, s):
        x, a_cur, key = carry[:3]
        key, k_pos, k_mask, k_dec = jax.random.split(key, 4)
        mask = x != mc.pad_id
        real = x < v
        n, length = x.shape
        if dc.exclude_initial_solution:
            a_cur = jnp.where(s == 0, -jnp.inf, a_cur)
        if kl_weight > 0:
            score_cur = carry[3]
            if dc.exclude_initial_solution:
                score_cur = jnp.where(s == 0, -jnp.inf, score_cur)

        # 9.2 saliency and edit positions
        e_x = encoder.embed(x)

        def total(e):
            return acq_features(encoder.from_embeddings(e, mask), mask).sum()

        grad = jax.grad(total)(e_x)
        null = encoder.embedding[...][mc.mask_id]
        if dc.normalize_null:
            null = math.sqrt(mc.embed_dim) * null / jnp.maximum(jnp.linalg.norm(null), 1e-6)
        score = ((null - e_x) * grad).sum(-1)
        score = jnp.where(real, score, -jnp.inf)
        if dc.version == "v0.0.4":
            l1 = jnp.where(real, jnp.abs(score), 0.0).sum(-1, keepdims=True)
            logits = score / (l1 + 1e-6) / dc.feature_attr_temp
        else:
            logits = score * dc.feature_attr_temp
        logp = jax.nn.log_softmax(logits, axis=-1)
        gumbel = jax.random.gumbel(k_pos, logp.shape)
        _, positions = jax.lax.top_k(jnp.where(real, logp + gumbel, -jnp.inf), dc.num_mutations)
        edit = jnp.zeros((n, length), bool).at[jnp.arange(n)[:, None], positions].set(True)
        edit = edit & real

        # 9.3 mask a random subset of the edit set
        rate = 1.0 / jnp.sqrt(1.0 + s.astype(jnp.float32))
        chosen = edit & (jax.random.uniform(k_mask, (n, length)) < rate)
        h0 = encoder(jnp.where(chosen, mc.mask_id, x))
        cmask = chosen[..., None].astype(h0.dtype)

        # 9.4 guided latent optimisation with decode-and-accept
        def decode_and_accept(state, h, key):
            x, a_cur, accepted = state[:3]
            logits = decode_logits(mc, dc, params, h)
            sample = jax.random.categorical(key, logits, axis=-1).astype(x.dtype)
            proposal = jnp.where(chosen, sample, x)
            a_new = acq_tokens(proposal)
            if kl_weight > 0:  # accept on the blended score (cortex's ``_update_solution``)
                score_cur = state[3]
                score_new = blend_score(proposal, a_new)
                accept = score_new >= score_cur
                extra = (jnp.where(accept, score_new, score_cur),)
            else:
                accept = a_new >= a_cur
                extra = ()
            x = jnp.where(accept[:, None], proposal, x)
            a_cur = jnp.where(accept, a_new, a_cur)
            return (x, a_cur, accepted + accept.astype(jnp.int32), *extra)

        adam = guidance_optimizer(dc)
        dec_keys = jax.random.split(k_dec, dc.guidance_updates + 1)
        x_start = x
        extra = (score_cur,) if kl_weight > 0 else ()
        state = decode_and_accept((x, a_cur, jnp.zeros(n, jnp.int32), *extra), h0, dec_keys[0])
        delta = jnp.zeros_like(h0)

        opt_state = adam.init(delta)
        for g in range(dc.guidance_updates):  # K_g is small and static: unrolled (see train.py)
            delta, opt_state = guidance_update(
                mc, dc, params, stats, best, h0, chosen, mask, delta, opt_state
            )
            state = decode_and_accept(state, h0 + delta * cmask, dec_keys[g + 1])
        x, a_cur, accepted = state[:3]
        score_cur = state[3] if kl_weight > 0 else a_cur
        changes = (x != x_start).sum(-1).astype(jnp.int32)
        out = (a_cur, accepted, changes, chosen.sum(-1).astype(jnp.int32), score_cur)
        return (x, a_cur, key, *state[3:]), out

    return step, acq_tokens, blend_score


@functools.partial(jax.jit, static_argnames=("model_config", "design_config"))
def _design_round(key, params, stats, best, x0, *, model_config, design_config):
    """All ``S`` steps in one ``lax.scan`` (for accelerators; slow on XLA:CPU, see module doc)."""
    x0 = _pad(x0, model_config)
    step, acq_tokens, blend_score = _design_step_fn(
        model_config, design_config, params, stats, best
    )
    a0 = acq_tokens(x0)
    score0 = (blend_score(x0, a0),) if design_config.kl_weight > 0 else ()
    steps = jnp.arange(design_config.num_steps)
    (x, a, *_), outputs = jax.lax.scan(step, (x0, a0, key, *score0), steps)
    return x[:, : model_config.length], a, DesignTrace(*outputs)


@functools.partial(jax.jit, static_argnames=("model_config", "design_config"))
def _design_start(params, stats, best, x0, *, model_config, design_config):
    """``(x0 padded, a(x0))``, plus the blended score of ``x0`` when ``kl_weight > 0``."""
    x0 = _pad(x0, model_config)
    _, acq_tokens, blend_score = _design_step_fn(model_config, design_config, params, stats, best)
    a0 = acq_tokens(x0)
    if design_config.kl_weight > 0:
        return x0, a0, blend_score(x0, a0)
    return x0, a0


@functools.partial(jax.jit, static_argnames=("model_config", "design_config"))
def _design_step(carry, s, params, stats, best, *, model_config, design_config):
    step, _, _ = _design_step_fn(model_config, design_config, params, stats, best)
    return step(carry, s)


def design_round(
    key: jax.Array,
    params: Params,
    stats: RegressorStats,
    best: jax.Array,
    seeds: Any,
    model_config: ModelConfig,
    design_config: DesignConfig,
    *,
    mesh: Mesh | None = None,
    use_scan: bool = False,
) -> tuple[jax.Array, jax.Array, DesignTrace]:
    """Run ``S`` design steps (cortex ``LaMBO.step``) on the seed population.

    Args:
      key: PRNG key of the round.
      params: trained parameters.
      stats: regression target statistics of the fit.
      best: ``[E]`` per-member incumbents (:func:`best_values` on ``seeds``).
      seeds: int ``[n, L]`` starting population (alphabet tokens).
      mesh: optional 1-D data mesh; ``n`` must be divisible by its size.
      use_scan: run the ``S`` steps as one jitted ``lax.scan`` (accelerators) instead of a
        Python loop over one jitted step (default: XLA:CPU runs convolutions inside ``while``
        loops far slower, ``docs/design/lambo2_port.md`` decision 2). Both give identical results.

    Returns:
      ``(proposals int32 [n, L], acquisition f32 [n], DesignTrace)``.
    """
    if design_config.num_mutations > model_config.length:
        raise ValueError(
            f"DesignConfig.num_mutations={design_config.num_mutations} edit positions per step "
            f"exceed the sequence length L={model_config.length}."
        )
    x0 = np.asarray(seeds)
    if x0.ndim != 2 or x0.shape[1] != model_config.length:
        raise ValueError(f"seeds must be [n, {model_config.length}], got {x0.shape}.")
    if x0.min() < 0 or x0.max() >= model_config.num_states:
        raise ValueError(f"seed tokens must lie in [0, {model_config.num_states}).")
    x0 = jnp.asarray(x0, jnp.int32)
    stats = RegressorStats(jnp.float32(stats.mean), jnp.float32(stats.std))
    best = jnp.asarray(best, jnp.float32)
    if mesh is not None:
        parallel.check_batch_divisible(x0, mesh)
        x0 = jax.device_put(x0, NamedSharding(mesh, P(parallel.DATA_AXIS)))
        replicated = NamedSharding(mesh, P())
        params, stats, best = jax.device_put((params, stats, best), replicated)
    static = {"model_config": model_config, "design_config": design_config}
    if use_scan:
        return _design_round(key, params, stats, best, x0, **static)
    x, a, *score = _design_start(params, stats, best, x0, **static)
    carry, outputs = (x, a, key, *score), []
    for s in range(design_config.num_steps):
        carry, out = _design_step(carry, jnp.int32(s), params, stats, best, **static)
        outputs.append(out)
    x, a = carry[:2]
    trace = DesignTrace(*(jnp.stack(v) for v in zip(*outputs)))
    return x[:, : model_config.length], a, trace
