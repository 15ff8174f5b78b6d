"""Training losses for LLOME as swappable pure functions: SFT, DPO, MargE and REINFORCE.

Every loss has the same signature (optax/tunix conventions; BUILD.md §3.6)::

    loss_fn(policy: SeqLogProbs, reference: SeqLogProbs, batch: LossBatch, hparams: LossParams)
        -> (per_unit_loss [N], metrics: dict[str, scalar])

* ``policy`` / ``reference``: per-sequence summed target log-probs and token counts
  (:class:`llome_jax.types.SeqLogProbs`, produced only by :mod:`llome_jax.lm.logprobs`).
  ``reference`` is computed once per round by the frozen reference model; SFT ignores it.
* ``batch``: a :class:`LossBatch` pytree of per-unit ``reward``, ``weight`` and self-normalisation
  ``group`` ids. A *unit* is a sequence (SFT, MargE, REINFORCE: ``N = B``) or a preference pair
  (DPO: ``N = B / 2``, sequences laid out as ``[chosen_0..chosen_{N-1}; rejected_0..rejected_{N-1}]``
  so that one forward pass serves both halves).
* ``hparams``: a :class:`LossParams` pytree of numeric hyper-parameters, so sweeping ``beta`` or the
  KL weight (or flipping a 0/1 switch) never recompiles.

The loss is returned per unit and is **not** reduced: the train step reduces it as
``sum_i weight_i * loss_i / sum_i weight_i`` (:func:`weighted_mean`). The weights are therefore
part of every estimator below: weight 0 marks padding (excluded everywhere, including from the
self-normalisation), and fractional weights turn a batch that enumerates a finite output space
into an exact expectation (used by the Strong-Interpolation tests).

Paper: Chen, Stanton et al., "Generalists vs. Specialists: Evaluating LLMs on Highly-Constrained
Biophysical Sequence Optimization Tasks", ICML 2025 ("LLOME"): §3.2 (FReKL/MargE), §3.3 (margin
reward), appendix "Derivations" and "LLM Training Details / Self-Normalization".
DPO: Rafailov et al., "Direct Preference Optimization", NeurIPS 2023.

The batch and hyper-parameter pytrees and the margin reward are :mod:`llome_jax.training.loss_inputs`;
the registry that names the losses (``LossSpec``, ``register_loss``) is
:mod:`llome_jax.training.loss_registry`.
"""

from __future__ import annotations

from typing import Protocol

import jax
import jax.numpy as jnp

from llome_jax.training.loss_inputs import LossBatch, LossParams
from llome_jax.types import SeqLogProbs

__all__ = [
    "LossFn",
    "dpo_loss",
    "group_total_weight",
    "marge_loss",
    "reinforce_loss",
    "self_normalized_log_weights",
    "sft_loss",
    "weighted_mean",
]

Metrics = dict[str, jax.Array]


# --------------------------------------------------------------------------------------------
# Shared estimator pieces
# --------------------------------------------------------------------------------------------


def weighted_mean(values: jax.Array, weight: jax.Array) -> jax.Array:
    """``sum_i weight_i values_i / sum_i weight_i`` (0 when all weights are 0)."""
    total = jnp.sum(weight)
    return jnp.sum(weight * values) / jnp.where(total > 0, total, 1.0)


def self_normalized_log_weights(
    log_ratio: jax.Array, weight: jax.Array, group: jax.Array
) -> jax.Array:
    """Log of importance weights self-normalised to weighted mean 1 within each group.

    With ``w_i = exp(log_ratio_i) = pi_theta(y_i|x_i) / pi_ref(y_i|x_i)`` and example weights
    ``a_i``, returns ``log omega_i`` where

        omega_i = w_i / ( sum_{j in G(i)} a_j w_j / sum_{j in G(i)} a_j ),

    computed in log space (a masked log-sum-exp), so no ratio overflows. ``omega`` is the
    paper's ``w~`` (normalised to sum 1 over the batch) times the group's total weight: the
    weighted mean of ``omega * c`` is then the self-normalised importance-sampling estimate
    ``sum_j w_j c_j / sum_j w_j`` of ``E_{pi_theta}[c]``. A group of one gives ``omega = 1``
    exactly. Padding units (``a_i = 0``) are excluded from every group and get ``omega_i = 1``.

    The ``[N, N]`` same-group mask costs ``O(N^2)`` memory; N is a global batch (<= a few
    thousand), so this is negligible next to the model.

    Args:
      log_ratio: float ``[N]``: ``log pi_theta - log pi_ref`` (sequence sums).
      weight: float ``[N]`` non-negative example weights.
      group: int ``[N]`` group ids.

    Returns:
      float32 ``[N]``: ``log omega``.
    """
    valid = weight > 0
    same = (group[:, None] == group[None, :]) & valid[None, :]
    eye = jnp.eye(group.shape[0], dtype=bool)
    # Padding rows normalise by themselves alone (result 0) so that nothing is -inf or NaN.
    same = jnp.where(valid[:, None], same, eye)
    safe_weight = jnp.where(valid, weight, 1.0)
    safe_ratio = jnp.where(valid, log_ratio, 0.0)
    terms = jnp.where(same, (safe_ratio + jnp.log(safe_weight))[None, :], -jnp.inf)
    log_numer = jax.nn.logsumexp(terms, axis=1)
    log_total = jnp.log(jnp.sum(jnp.where(same, safe_weight[None, :], 0.0), axis=1))
    return jnp.where(valid, log_ratio - (log_numer - log_total), 0.0)


def group_total_weight(weight: jax.Array, group: jax.Array) -> jax.Array:
    """``sum_{j in G(i)} a_j`` for every unit ``i`` (1 for padding units, ``a_i = 0``).

    Args:
      weight: float ``[N]`` non-negative example weights ``a``.
      group: int ``[N]`` group ids.

    Returns:
      float32 ``[N]``.
    """
    same = group[:, None] == group[None, :]
    total = jnp.sum(jnp.where(same, weight[None, :], 0.0), axis=1)
    return jnp.where(weight > 0, total, 1.0)


def _importance_weights(
    policy: SeqLogProbs, reference: SeqLogProbs, batch: LossBatch, hparams: LossParams
) -> tuple[jax.Array, Metrics]:
    """``omega`` for MargE/REINFORCE: self-normalised (or raw), with or without gradient."""
    log_ratio = policy.sum_logp - reference.sum_logp
    log_normalised = self_normalized_log_weights(log_ratio, batch.weight, batch.group)
    s = hparams.self_normalize
    # Raw ratios are clipped at exp(80) to avoid inf (the authors' ``exp`` overflows there).
    # "sum": divide by the group's total example weight (omega then sums to 1 over the group)
    log_normalised = log_normalised - hparams.weights_sum_to_one * jnp.log(
        group_total_weight(batch.weight, batch.group)
    )
    log_omega = s * log_normalised + (1.0 - s) * jnp.minimum(log_ratio, 80.0)
    g = hparams.stop_weight_gradient
    log_omega = g * jax.lax.stop_gradient(log_omega) + (1.0 - g) * log_omega
    omega = jnp.exp(log_omega)
    a = batch.weight
    ess = jnp.square(jnp.sum(a * omega)) / jnp.maximum(jnp.sum(a * jnp.square(omega)), 1e-30)
    metrics = {
        "log_ratio_mean": weighted_mean(log_ratio, a),
        "importance_weight_max": jnp.max(jnp.where(a > 0, omega, 0.0)),
        "effective_sample_size": ess,
    }
    return omega, metrics


class LossFn(Protocol):
    """The one signature every loss has (see the module docstring)."""

    def __call__(
        self,
        policy: SeqLogProbs,
        reference: SeqLogProbs,
        batch: LossBatch,
        hparams: LossParams,
    ) -> tuple[jax.Array, Metrics]: ...


# --------------------------------------------------------------------------------------------
# The losses
# --------------------------------------------------------------------------------------------


def sft_loss(
    policy: SeqLogProbs, reference: SeqLogProbs, batch: LossBatch, hparams: LossParams
) -> tuple[jax.Array, Metrics]:
    """Supervised fine-tuning: negative log-likelihood of the target (LLOME §2, "SFT").

    Per sequence ``i`` (``l_i = log pi_theta(y_i|x_i)``, ``n_i = |y_i|``)::

        loss_i = -l_i / d_i,   d_i = token_mean * n_bar + (1 - token_mean) * n_i,
        n_bar  = sum_j a_j n_j / sum_j a_j,

    so the weighted batch mean is ``-sum_i a_i l_i / sum_j a_j n_j`` (tokens pooled over the
    batch, the reference ``SFTTrainer``) for ``token_mean = 1``, and the mean per-sequence NLL
    ``-mean_i l_i / n_i`` for ``token_mean = 0``. The two coincide when all targets have the same
    length (always, in the f2 pipeline). ``reference`` is ignored. The loss is linear in
    ``policy.sum_logp`` (see :data:`~llome_jax.training.loss_registry.LINEAR_IN_POLICY`).

    Args:
      policy: ``SeqLogProbs`` ``[B]``.
      reference: unused.
      batch: ``LossBatch`` ``[B]`` (only ``weight``).
      hparams: uses ``token_mean``.

    Returns:
      ``(loss [B], metrics)``.

    Example:
      >>> import jax.numpy as jnp
      >>> lp = SeqLogProbs(jnp.array([-2.0, -6.0]), jnp.array([2.0, 2.0]))
      >>> loss, _ = sft_loss(lp, lp, LossBatch.create(2), LossParams())
      >>> loss.tolist()
      [1.0, 3.0]
    """
    del reference
    a = batch.weight
    n = jnp.maximum(policy.num_tokens, 1.0)
    pooled = weighted_mean(n, a)
    denom = hparams.token_mean * pooled + (1.0 - hparams.token_mean) * n
    loss = -policy.sum_logp / denom
    metrics = {
        "nll_per_token": -jnp.sum(a * policy.sum_logp) / jnp.maximum(jnp.sum(a * n), 1.0),
        "logp_policy": weighted_mean(policy.sum_logp, a),
    }
    return loss, metrics


def marge_loss(
    policy: SeqLogProbs, reference: SeqLogProbs, batch: LossBatch, hparams: LossParams
) -> tuple[jax.Array, Metrics]:
    """MargE / self-normalised FReKL loss (LLOME §3.2 Eq. 2 and Eq. "MargE self-normalized").

    The paper's objective ``KL(pi_theta || pi*) + lambda KL(pi_ref || pi_theta)`` with
    ``pi* ∝ exp(beta r)``, estimated on samples ``y ~ pi_ref``. Per sequence ``i``::

        lbar_i  = log pi_theta(y_i|x_i) / |y_i|                     (length-normalised)
        c_i     = lbar_i - beta * r_i
        loss_i  = alpha * omega_i * c_i - lambda * lbar_i,

    with ``omega`` the importance weights ``pi_theta(y|x) / pi_ref(y|x)`` (sequence-level,
    not length-normalised), self-normalised to weighted mean 1 over the unit's group
    (:func:`self_normalized_log_weights`). Reduced with the batch weights, the data term is the
    self-normalised estimate ``sum_j w_j c_j / sum_j w_j`` of ``E_{pi_theta}[lbar - beta r]``.

    * ``group`` all equal (default of :meth:`LossBatch.create`): normalised over the global batch
      (the paper's intent; global under data parallelism because the batch is a global array).
    * Groups of one reproduce the authors' code (per-device micro-batch 1): ``omega = 1``,
      ``loss = (alpha - lambda) lbar - alpha beta r``: a scaled per-sequence SFT loss with no
      dependence on the reward or the reference (the authors' ``MargeTrainer.marge_loss``).
    * ``stop_weight_gradient`` must stay 0 for the paper's objective; 1 makes the data term inert.

    Args:
      policy: ``SeqLogProbs`` ``[B]`` under pi_theta (differentiated).
      reference: ``SeqLogProbs`` ``[B]`` under the frozen pi_ref.
      batch: ``LossBatch`` ``[B]``: ``reward`` (e.g.
        :func:`~llome_jax.training.loss_inputs.margin_reward`), ``weight``, ``group``.
      hparams: ``beta``, ``kl_weight`` (lambda), ``target_weight`` (alpha), ``self_normalize``,
        ``stop_weight_gradient``.

    Returns:
      ``(loss [B], metrics)`` with ``kl_to_target`` (weighted mean of ``omega c``),
      ``kl_to_reference`` (mean ``-lbar``), ``reward_mean``, importance-weight diagnostics.

    Example:
      >>> import jax.numpy as jnp
      >>> pol = SeqLogProbs(jnp.array([-2.0, -4.0]), jnp.array([2.0, 2.0]))
      >>> batch = LossBatch.create(reward=jnp.array([0.5, 0.0]), group_size=1)
      >>> loss, _ = marge_loss(pol, pol, batch, LossParams(kl_weight=10.0))
      >>> loss.tolist()    # (1 - 10) * lbar - r with lbar = [-1, -2]
      [8.5, 18.0]
    """
    lbar = policy.mean_logp
    omega, metrics = _importance_weights(policy, reference, batch, hparams)
    target_term = omega * (lbar - hparams.beta * batch.reward)
    loss = hparams.target_weight * target_term - hparams.kl_weight * lbar
    a = batch.weight
    metrics |= {
        "kl_to_target": weighted_mean(target_term, a),
        "kl_to_reference": weighted_mean(-lbar, a),
        "reward_mean": weighted_mean(batch.reward, a),
        "logp_policy": weighted_mean(policy.sum_logp, a),
    }
    return loss, metrics


def reinforce_loss(
    policy: SeqLogProbs, reference: SeqLogProbs, batch: LossBatch, hparams: LossParams
) -> tuple[jax.Array, Metrics]:
    """Off-policy REINFORCE with the MargE regulariser (LLOME "Self-Normalization", REINFORCE eq).

    Per sequence ``i`` (``l_i = log pi_theta(y_i|x_i)`` summed, ``lbar_i = l_i / |y_i|``)::

        loss_i = alpha * omega_i * (-(beta * r_i - b) * l_i) - lambda * lbar_i,

    with ``omega`` the self-normalised importance weights as in :func:`marge_loss` and ``b`` an
    optional baseline (default 0). With ``stop_weight_gradient = 1`` (the default for this loss)
    the gradient is the policy gradient ``-E_{pi_theta}[(beta r - b) grad log pi_theta]`` estimated
    with self-normalised importance sampling, plus the lambda-weighted NLL; its minimiser
    interpolates between pi_ref and the degenerate argmax-reward policy pi^delta that the paper
    contrasts MargE with (tested). Note the *unnormalised* ``l_i`` in the reward term, as in the
    paper and the authors' ``reinforce_style`` branch.

    Args / Returns: as :func:`marge_loss` (also uses ``baseline``).
    """
    lbar = policy.mean_logp
    omega, metrics = _importance_weights(policy, reference, batch, hparams)
    advantage = hparams.beta * batch.reward - hparams.baseline
    pg_term = omega * (-advantage * policy.sum_logp)
    loss = hparams.target_weight * pg_term - hparams.kl_weight * lbar
    a = batch.weight
    metrics |= {
        "policy_gradient_term": weighted_mean(pg_term, a),
        "kl_to_reference": weighted_mean(-lbar, a),
        "reward_mean": weighted_mean(batch.reward, a),
        "logp_policy": weighted_mean(policy.sum_logp, a),
    }
    return loss, metrics


def dpo_loss(
    policy: SeqLogProbs, reference: SeqLogProbs, batch: LossBatch, hparams: LossParams
) -> tuple[jax.Array, Metrics]:
    """Direct Preference Optimisation on summed log-probs (Rafailov et al. 2023; LLOME §2 Eq. 1).

    Sequences are laid out ``[chosen_0, ..., chosen_{N-1}, rejected_0, ..., rejected_{N-1}]``
    (``B = 2N``; one unit per pair)::

        z_k    = beta * [(l_theta(y_w) - l_ref(y_w)) - (l_theta(y_l) - l_ref(y_l))]
        loss_k = -(1 - eps) log sigmoid(z_k) - eps log sigmoid(-z_k)

    with summed (not length-normalised) log-probs, as the reference (TRL sigmoid DPO) and the paper
    use; ``eps = label_smoothing`` (0 in the reference).

    Args:
      policy: ``SeqLogProbs`` ``[2N]``.
      reference: ``SeqLogProbs`` ``[2N]``.
      batch: ``LossBatch`` ``[N]`` (per pair; ``reward`` is unused).
      hparams: ``beta`` (reference f2: 0.4), ``label_smoothing``.

    Returns:
      ``(loss [N], metrics)`` with ``reward_chosen/rejected/margin`` (``beta * (l_theta - l_ref)``),
      ``reward_accuracy`` and ``ranking_accuracy`` (``l_theta(y_w) > l_theta(y_l)``).

    Example:
      >>> import jax.numpy as jnp
      >>> zero = SeqLogProbs(jnp.zeros(2), jnp.ones(2))
      >>> loss, _ = dpo_loss(zero, zero, LossBatch.create(1), LossParams(beta=0.4))
      >>> round(float(loss[0]), 6)    # -log sigmoid(0) = log 2
      0.693147
    """
    num_pairs = batch.weight.shape[0]
    if policy.sum_logp.shape[0] != 2 * num_pairs:
        raise ValueError(
            f"DPO expects 2N = {2 * num_pairs} sequences ([chosen; rejected]) for N = {num_pairs} "
            f"pairs, got {policy.sum_logp.shape[0]}"
        )
    pol_w, pol_l = policy.sum_logp[:num_pairs], policy.sum_logp[num_pairs:]
    ref_w, ref_l = reference.sum_logp[:num_pairs], reference.sum_logp[num_pairs:]
    reward_w = hparams.beta * (pol_w - ref_w)
    reward_l = hparams.beta * (pol_l - ref_l)
    z = reward_w - reward_l
    eps = hparams.label_smoothing
    loss = -(1.0 - eps) * jax.nn.log_sigmoid(z) - eps * jax.nn.log_sigmoid(-z)
    a = batch.weight
    metrics = {
        "reward_chosen": weighted_mean(reward_w, a),
        "reward_rejected": weighted_mean(reward_l, a),
        "reward_margin": weighted_mean(z, a),
        "reward_accuracy": weighted_mean((z > 0).astype(jnp.float32), a),
        "ranking_accuracy": weighted_mean((pol_w > pol_l).astype(jnp.float32), a),
        "logp_chosen": weighted_mean(pol_w, a),
        "logp_rejected": weighted_mean(pol_l, a),
    }
    return loss, metrics
