"""LaMBO-2's design step: seed selection, acquisition, saliency, guided latent optimisation.

Spec: ``../shared/spec/lambo2.md`` §7-§9 (cortex v0.0.4 ``LaMBO.step`` by default; v0.0.3 as an
option). One round runs ``S`` design steps on the whole population of ``n`` sequences as one batch under
``jit``: either one ``lax.scan`` over the steps (``use_scan=True``, for accelerators) or a Python
loop over one jitted step (default; XLA:CPU executes convolutions inside ``while`` loops ~25x slower
than straight-line code, measured on this machine). The ``K_g`` guidance updates are unrolled.
Per step ``s`` (§9):

1. score the population ``A = a(X)`` (carried; ``-inf`` at ``s = 0`` with
   ``exclude_initial_solution``);
2. edit positions: first-order occlusion saliency ``score_p = <grad_{E_x} sum_i a(x_i), e_null -
   E_{x,p}>``, v0.0.4 ``softmax(score / (sum |score| + 1e-6) / temp)``, ``M`` distinct positions per
   sequence by Gumbel-top-``M``;
3. mask each edit position with probability ``1 / sqrt(1 + s)`` (set ``C``) and encode: ``h0``;
4. ``delta = 0``, fresh Adam(``eta``, betas (0.09, 0.0999)); decode-and-accept ``h0``; ``K_g`` times:
   Adam step on ``-mean_i a(h0 + delta 1[C])``, decode-and-accept.

Decode-and-accept samples tokens (utility tokens excluded) at ``C`` from the generative head,
re-scores the discrete proposal with a clean forward and accepts per sequence iff the acquisition
does not decrease. The acquisition (§7) is the ensemble mean of ``log fatplus_tau(mu_e(x) -
best_e)`` with ``best_e = max_j mu_e(seed_j)``.

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

from llome_jax import parallel
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
    "design_round",
    "farthest_first_traversal",
    "guidance_optimizer",
    "guidance_update",
    "log_fatplus",
    "member_means",
    "select_seeds",
]


@dataclasses.dataclass(frozen=True)
class DesignConfig:
    """Static design settings (defaults = the spec's recommended port defaults, §10.4).

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
    data_fields=["acquisition", "accepted", "changes", "num_masked"],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class DesignTrace:
    """Per design step (leading axis ``S``): acquisition after the step f32 ``[S, n]``, accepted
    proposals int32 ``[S, n]`` (of ``K_g + 1``), Hamming change of the step int32 ``[S, n]``,
    masked positions ``|C|`` int32 ``[S, n]``."""

    acquisition: jax.Array
    accepted: jax.Array
    changes: jax.Array
    num_masked: jax.Array


# ---------------------------------------------------------------------------------------------
# Acquisition (spec §7)
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
# Seed selection (spec §8)
# ---------------------------------------------------------------------------------------------
def farthest_first_traversal(sequences: Any, scores: Any, num: int) -> np.ndarray:
    """Greedy max-min Hamming selection of ``num`` row indices.

    Starts with the best-scored row; then repeatedly adds the row whose minimum distance to the
    selected set is largest, ties broken by higher score, then lower index (beignet's order).
    Already selected rows are never re-selected. Returns int64 ``[num]``.
    """
    x = np.asarray(sequences)
    s = np.asarray(scores, dtype=np.float64)
    k = len(x)
    if not 1 <= num <= k:
        raise ValueError(f"cannot pick {num} of {k} sequences.")
    s_key = np.where(np.isfinite(s), s, -np.inf)
    order = np.lexsort((np.arange(k), -s_key))  # best score first, then index
    rank = np.empty(k, np.int64)
    rank[order] = np.arange(k)  # lower rank = preferred on ties
    first = int(order[0])
    chosen = [first]
    distance = (x != x[first]).sum(1).astype(np.int64)
    distance[first] = -1
    for _ in range(num - 1):
        best = distance.max()
        candidates = np.flatnonzero(distance == best)
        pick = int(candidates[np.argmin(rank[candidates])])
        chosen.append(pick)
        distance = np.minimum(distance, (x != x[pick]).sum(1))
        distance[chosen] = -1
    return np.asarray(chosen, np.int64)


def select_seeds(sequences: Any, values: Any, rounds: Any, num: int, alpha: float) -> np.ndarray:
    """Indices of the ``num`` seed sequences of a round (spec §8; duplicates allowed).

    Rows are ranked by observed value (infeasible last; ties: most recent round first, then lower
    index); ``K = min(N, round(alpha num))`` top rows are kept. ``alpha <= 1``: the top ``K`` are
    tiled (whole list repeated) to exactly ``num``; ``alpha > 1``: farthest-first traversal picks
    ``num`` of them.
    """
    x = np.asarray(sequences)
    y = np.asarray(values, dtype=np.float64)
    t = np.asarray(rounds, dtype=np.int64)
    if not (len(x) == len(y) == len(t)) or len(x) == 0:
        raise ValueError("select_seeds needs a non-empty history of matching lengths.")
    if num < 1 or not alpha > 0:
        raise ValueError(f"num must be >= 1 and alpha > 0, got {num!r}, {alpha!r}.")
    y_key = np.where(np.isfinite(y), y, -np.inf)
    order = np.lexsort((np.arange(len(y)), -t, -y_key))
    top = order[: max(1, min(len(x), round(alpha * num)))]
    if alpha <= 1 or len(top) < num:
        return np.resize(top, num)
    picked = farthest_first_traversal(x[top], y_key[top], num)
    return top[picked]


# ---------------------------------------------------------------------------------------------
# The design round (spec §9)
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
    """One Adam step on ``delta`` for ``loss = -mean_i a(h0_i + delta_i 1[C_i])`` (spec §9.4).

    Shapes: ``h0``/``delta`` ``[n, N, d_o]``, ``chosen`` (the set C) and ``mask`` bool ``[n, N]``.
    ``delta`` stays 0 outside ``C`` (its gradient is 0 there, so Adam's update is 0).
    """
    cmask = chosen[..., None].astype(h0.dtype)

    def loss(delta):
        mu = _means_from_features(
            model_config, params, stats, h0 + delta * cmask, mask, design_config.use_constraints
        )
        return -acquisition(mu, best, design_config.tau).mean()

    g = jax.grad(loss)(delta)
    updates, opt_state = guidance_optimizer(design_config).update(g, opt_state, delta)
    return optax.apply_updates(delta, updates), opt_state


def _design_step_fn(mc: ModelConfig, dc: DesignConfig, params, stats, best):
    v = mc.num_states
    encoder = encoder_module(mc, params["encoder"])

    def acq_features(h, mask):
        mu = _means_from_features(mc, params, stats, h, mask, dc.use_constraints)
        return acquisition(mu, best, dc.tau)

    def acq_tokens(tokens):
        return acq_features(encoder(tokens), tokens != mc.pad_id)

    def step(carry, s):
        x, a_cur, key = carry
        key, k_pos, k_mask, k_dec = jax.random.split(key, 4)
        mask = x != mc.pad_id
        real = x < v
        n, length = x.shape
        if dc.exclude_initial_solution:
            a_cur = jnp.where(s == 0, -jnp.inf, a_cur)

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
            x, a_cur, accepted = state
            logits = gen_apply(mc, params["gen"], h)
            logits = jnp.where(jnp.arange(mc.vocab_size) < v, logits, -jnp.inf)
            sample = jax.random.categorical(key, logits, axis=-1).astype(x.dtype)
            proposal = jnp.where(chosen, sample, x)
            a_new = acq_tokens(proposal)
            accept = a_new >= a_cur
            x = jnp.where(accept[:, None], proposal, x)
            return x, jnp.where(accept, a_new, a_cur), accepted + accept.astype(jnp.int32)

        adam = guidance_optimizer(dc)
        dec_keys = jax.random.split(k_dec, dc.guidance_updates + 1)
        x_start = x
        state = decode_and_accept((x, a_cur, jnp.zeros(n, jnp.int32)), h0, dec_keys[0])
        delta = jnp.zeros_like(h0)

        opt_state = adam.init(delta)
        for g in range(dc.guidance_updates):  # K_g is small and static: unrolled (see train.py)
            delta, opt_state = guidance_update(
                mc, dc, params, stats, best, h0, chosen, mask, delta, opt_state
            )
            state = decode_and_accept(state, h0 + delta * cmask, dec_keys[g + 1])
        x, a_cur, accepted = state
        changes = (x != x_start).sum(-1).astype(jnp.int32)
        out = (a_cur, accepted, changes, chosen.sum(-1).astype(jnp.int32))
        return (x, a_cur, key), out

    return step, acq_tokens


@functools.partial(jax.jit, static_argnames=("model_config", "design_config"))
def _design_round(key, params, stats, best, x0, *, model_config, design_config):
    """All ``S`` steps in one ``lax.scan`` (for accelerators; slow on XLA:CPU, see module doc)."""
    x0 = _pad(x0, model_config)
    step, acq_tokens = _design_step_fn(model_config, design_config, params, stats, best)
    a0 = acq_tokens(x0)
    steps = jnp.arange(design_config.num_steps)
    (x, a, _), (acq, accepted, changes, masked) = jax.lax.scan(step, (x0, a0, key), steps)
    return x[:, : model_config.length], a, DesignTrace(acq, accepted, changes, masked)


@functools.partial(jax.jit, static_argnames=("model_config", "design_config"))
def _design_start(params, stats, best, x0, *, model_config, design_config):
    x0 = _pad(x0, model_config)
    _, acq_tokens = _design_step_fn(model_config, design_config, params, stats, best)
    return x0, acq_tokens(x0)


@functools.partial(jax.jit, static_argnames=("model_config", "design_config"))
def _design_step(carry, s, params, stats, best, *, model_config, design_config):
    step, _ = _design_step_fn(model_config, design_config, params, stats, best)
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
    """Run ``S`` design steps on the seed population (spec §9).

    Args:
      key: PRNG key of the round.
      params: trained parameters.
      stats: regression target statistics of the fit.
      best: ``[E]`` per-member incumbents (:func:`best_values` on ``seeds``).
      seeds: int ``[n, L]`` starting population (alphabet tokens).
      mesh: optional 1-D data mesh; ``n`` must be divisible by its size.
      use_scan: run the ``S`` steps as one jitted ``lax.scan`` (accelerators) instead of a
        Python loop over one jitted step (default: XLA:CPU runs convolutions inside ``while``
        loops ~25x slower). Both give identical results.

    Returns:
      ``(proposals int32 [n, L], acquisition f32 [n], DesignTrace)``.
    """
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
    x, a = _design_start(params, stats, best, x0, **static)
    carry, outputs = (x, a, key), []
    for s in range(design_config.num_steps):
        carry, out = _design_step(carry, jnp.int32(s), params, stats, best, **static)
        outputs.append(out)
    x, a, _ = carry
    acq, accepted, changes, masked = (jnp.stack(v) for v in zip(*outputs))
    return x[:, : model_config.length], a, DesignTrace(acq, accepted, changes, masked)
