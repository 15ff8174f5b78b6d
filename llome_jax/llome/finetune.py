"""Fine-tuning phase of a LLOME round: the training data ``D_i`` and ``Train(theta_i, D_i)``.

* :func:`training_data`: PropEn pairs (SFT, MargE, REINFORCE) or preference triples (DPO) of the
  labelled set (``llome_jax.llome.data``), subsampled to ``max_train_examples`` and tokenised.
* :func:`train`: ``epochs`` passes over the units in random order with the loss's optimizer
  (``train_optimizer.paper_optimizer``: AdamW, RMSprop for DPO; linear decay; a fresh optimizer
  every round), the reference log-probs computed once from the round-start policy (the previous
  round's model; ``dataset_logprobs.compute_logprobs``), and optional checkpoint selection with
  the greedy validity gate (``llome_jax.llome.selection``).

Every function takes the explicit :class:`~llome_jax.llome.runtime.Runtime`; jitted steps are
compiled once per runtime and optimizer configuration.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax.host import parallel
from llome_jax.llome import selection
from llome_jax.llome.config import LoopConfig
from llome_jax.llome.data import preference_triples, propen_pairs, random_bits
from llome_jax.llome.runtime import Runtime, model_with
from llome_jax.lm.pythia import Pythia
from llome_jax.run.runner import progress_bar
from llome_jax.training.dataset_logprobs import compute_logprobs
from llome_jax.training.loss_inputs import LossBatch
from llome_jax.training.loss_registry import get_loss, loss_spec
from llome_jax.training.optimizer import make_optimizer, paper_optimizer
from llome_jax.training.step import TrainBatch, TrainState, make_eval_step, make_train_step
from llome_jax.types import SeqLogProbs

__all__ = [
    "batch_of_units",
    "eval_step",
    "loss_params",
    "microbatches",
    "optimizer_config",
    "padded_units",
    "selection_candidate",
    "subset",
    "train",
    "train_step",
    "training_data",
    "training_model",
]


def optimizer_config(cfg: LoopConfig, loss: str, total_steps: int, round_index: int = 2) -> Any:
    """The optax optimizer settings of a round of ``loss`` over ``total_steps`` steps
    (``train_optimizer.paper_optimizer``): the preference losses' ``dpo_*`` settings, else the
    learning rate (round 1's own where set), weight decay and warm-up."""
    learning_rate = cfg.finetune.learning_rate
    if round_index == 1 and cfg.finetune.first_round_learning_rate is not None:
        learning_rate = cfg.finetune.first_round_learning_rate
    if loss_spec(loss).data == "triples":  # preference losses: the dpo_* settings
        return paper_optimizer(
            loss,
            max(total_steps, 1),
            learning_rate=cfg.finetune.dpo_learning_rate,
            warmup_steps=cfg.finetune.dpo_warmup_steps,
        )
    return paper_optimizer(
        loss,
        max(total_steps, 1),
        learning_rate=learning_rate,
        weight_decay=cfg.finetune.weight_decay,
        warmup_steps=cfg.finetune.warmup_steps,
    )


def train_step(rt: Runtime, cfg: LoopConfig, loss: str, opt_config: Any) -> Any:
    """The jitted train step of ``loss`` with ``opt_config`` (compiled once per runtime)."""
    return rt.compiled(
        ("train", cfg, loss, opt_config), lambda: _make_train_step(rt, cfg, loss, opt_config)
    )


def _make_train_step(rt: Runtime, cfg: LoopConfig, loss: str, opt_config: Any) -> Any:
    return make_train_step(
        get_loss(loss),
        training_model(rt, cfg, loss),
        opt_config,
        num_microbatches=microbatches(cfg, rt.mesh, cfg.finetune.batch_size_for(loss)),
        max_grad_norm=cfg.finetune.max_grad_norm,
        mesh=rt.mesh,
    )


def microbatches(cfg: LoopConfig, mesh: Any, batch_size: int | None = None) -> int:
    """The largest ``M <= cfg.finetune.num_microbatches`` with ``batch_size % (M * devices) == 0``.

    (Paper: 64 = 32 accumulation steps x 2 GPUs x 1; on 8 devices that becomes 8 x 8 x 1.)
    """
    batch_size = cfg.finetune.batch_size if batch_size is None else batch_size
    devices = 1 if mesh is None else int(mesh.devices.size)
    if batch_size % devices:
        raise ValueError(
            f"batch_size {batch_size} must be divisible by the {devices} data-parallel devices"
        )
    m = max(1, min(cfg.finetune.num_microbatches, batch_size // devices))
    while batch_size % (m * devices):
        m -= 1
    return m


def training_model(rt: Runtime, cfg: LoopConfig, loss: str) -> Any:
    """The model whose graph a round trains (parameters always come from the state): the run's
    model, or for a preference (triples) loss with ``dpo_compute_dtype`` another matmul dtype, an
    abstract copy in it."""
    model = rt.model
    preference = loss_spec(loss).data == "triples"
    if not preference or cfg.finetune.dpo_compute_dtype == model.config.compute_dtype:
        return model
    return rt.compiled(
        ("model_dtype", cfg.finetune.dpo_compute_dtype),
        lambda: _model_in_dtype(rt, cfg.finetune.dpo_compute_dtype),
    )


def _model_in_dtype(rt: Runtime, compute_dtype: str) -> Any:
    from flax import nnx

    config = dataclasses.replace(rt.model.config, compute_dtype=compute_dtype)
    return nnx.eval_shape(lambda: Pythia(config, rngs=nnx.Rngs(0)))


def loss_params(cfg: LoopConfig, loss: str) -> Any:
    """``loss``'s ``LossParams`` with the configuration's overrides: ``kl_weight`` and
    ``reward_beta`` for the KL-weighted losses, MargE's weight normalisation."""
    spec = loss_spec(loss)
    params = spec.params
    if cfg.finetune.kl_weight is not None and spec.kl_weighted:
        params = params.replace(kl_weight=float(cfg.finetune.kl_weight))
    if cfg.finetune.reward_beta is not None and spec.kl_weighted:
        params = params.replace(beta=float(cfg.finetune.reward_beta))
    if spec.weight_norm:
        params = params.replace(weights_sum_to_one=float(cfg.finetune.marge_weight_norm == "sum"))
    return params


def training_data(
    key: jax.Array, rt: Runtime, cfg: LoopConfig, loss: str, x: np.ndarray, v: np.ndarray
) -> dict[str, Any]:
    """Pairs (or triples) of ``S_i``, tokenised; ``None``-free dict of numpy arrays."""
    k_pairs, k_subset = jax.random.split(key)
    # symmetric neighbourhoods are a pairs-only option (triples are always directed)
    propen = dataclasses.replace(
        cfg.propen, symmetric=cfg.propen.symmetric and loss_spec(loss).data == "pairs"
    )
    knn = {"num_states": rt.objective.num_states}
    if loss_spec(loss).data == "triples":
        triples = preference_triples(k_pairs, x, v, propen, **knn)
        n_candidates = len(triples)
        rows = subset(k_subset, n_candidates, cfg.finetune.max_train_examples)
        triples = triples.select(rows)
        prompt, chosen, rejected = triples.gather(x)
        n = len(triples)
        ids, tmask, amask = rt.codec.encode_pairs(
            np.concatenate([prompt, prompt]), np.concatenate([chosen, rejected])
        )
        return {
            "units": n,
            "num_candidates": n_candidates,
            "ids": (ids[:n], ids[n:]),
            "tmask": (tmask[:n], tmask[n:]),
            "amask": (amask[:n], amask[n:]),
            "reward": triples.chosen_reward,
            "seed_index": triples.chosen_index,
            "seed_value": triples.chosen_value,
        }
    pairs = propen_pairs(k_pairs, x, v, propen, **knn)
    n_candidates = len(pairs)
    pairs = pairs.select(subset(k_subset, n_candidates, cfg.finetune.max_train_examples))
    inputs, targets = pairs.gather(x)
    ids, tmask, amask = rt.codec.encode_pairs(inputs, targets)
    return {
        "units": len(pairs),
        "num_candidates": n_candidates,
        "ids": (ids,),
        "tmask": (tmask,),
        "amask": (amask,),
        "reward": pairs.reward,
        "seed_index": pairs.target_index,
        "seed_value": pairs.target_value,
    }


def subset(key: jax.Array, n: int, limit: int | None) -> np.ndarray:
    """``min(n, limit)`` of ``range(n)`` uniformly at random (all, in order, if within budget)."""
    if limit is None or n <= limit:
        return np.arange(n, dtype=np.int64)
    bits = random_bits(key, n)
    return np.sort(np.argsort(bits, kind="stable")[:limit]).astype(np.int64)


def padded_units(units: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """One batch of ``size`` units: ``units`` (at most ``size``) padded with weight-0 copies of
    its first unit. Returns ``(units int [size], weight f32 [size])``, weight 1 on real units."""
    weight = np.ones(size, np.float32)
    if units.size < size:
        weight[units.size :] = 0.0
        units = np.concatenate([units, np.full(size - units.size, units[0])])
    return units, weight


def batch_of_units(
    cfg: Any,
    ids: np.ndarray,
    tmask: np.ndarray,
    amask: np.ndarray,
    reference: Any,
    reward: np.ndarray,
    weight: np.ndarray,
) -> Any:
    """The ``TrainBatch`` of one step: token rows ``ids``/``tmask``/``amask`` ``[R, T]`` (``R``
    = units, or ``2 x`` units for DPO: chosen rows, then rejected), their reference log-probs
    (``SeqLogProbs`` ``[R]``), each unit's ``reward`` and ``weight`` ``[N]`` (0: padding), the
    MargE group size and target window of ``cfg.finetune``. Fine-tuning
    (:func:`train`) and pretraining (``llome_jax.llome.pretrain``) build their batches with it."""
    return TrainBatch.create(
        ids,
        tmask,
        amask,
        reference=SeqLogProbs(jnp.asarray(reference.sum_logp), jnp.asarray(reference.num_tokens)),
        loss=LossBatch.create(
            reward=reward, weight=weight, group_size=cfg.finetune.marge_group_size
        ),
        target_window="auto" if cfg.finetune.head_on_targets else None,
    )


#: ``fold_in`` salt of the train/validation split key (derived from the round's train key).
_SPLIT_SALT = 0x5E1EC7


def eval_step(rt: Runtime, cfg: LoopConfig, loss: str) -> Any:
    """The jitted validation-loss step of ``loss`` (compiled once per runtime)."""
    return rt.compiled(("eval", cfg, loss), lambda: _make_eval_step(rt, cfg, loss))


def _make_eval_step(rt: Runtime, cfg: LoopConfig, loss: str) -> Any:
    return make_eval_step(
        get_loss(loss),
        training_model(rt, cfg, loss),
        num_microbatches=microbatches(cfg, rt.mesh, cfg.finetune.batch_size_for(loss)),
        mesh=rt.mesh,
    )


def selection_candidate(
    rt: Runtime,
    cfg: LoopConfig,
    loss: str,
    step: int,
    params: Any,
    val: Any,
    prompts: Any,
    hparams: Any,
    constraint: Any = None,
) -> Any:
    """``selection.Candidate`` of ``params`` after ``step`` updates: the validation loss (mean
    over the units of the ``val`` batches ``[(batch, real units)]``) and the greedy gate, whose
    constraint check is ``constraint`` (the run oracle's counted view,
    ``Oracle.constraint_view``; ``None``: ``rt.fn``'s own, uncounted)."""
    evaluate = eval_step(rt, cfg, loss)
    summed = [evaluate(params, batch, hparams)["loss"] * count for batch, count in val]
    val_loss = float(np.sum(jax.device_get(summed))) / sum(count for _, count in val)
    policy = model_with(rt.model, params)
    gate = selection.greedy_gate(
        policy,
        rt.codec,
        rt.fn if constraint is None else constraint,
        prompts,
        batch_size=cfg.refine.batch_size,
        mesh=rt.mesh,
    )
    return selection.Candidate(step, val_loss, gate)


def train(
    key: jax.Array,
    rt: Runtime,
    cfg: LoopConfig,
    loss: str,
    data: dict[str, Any],
    params: Any,
    progress: bool,
    epochs: int | None = None,
    round_index: int = 2,
    constraint: Any = None,
) -> tuple[Any, Any, float, dict[str, Any]]:
    """Train ``params`` on ``data``: ``(params, opt_state, mean loss, info)``.

    ``constraint``: the checkpoint gate's constraint check (``selection_candidate``).

    ``info``: ``train_steps``, ``learning_rate``. With checkpoint selection for ``loss``
    (``cfg.finetune.select_checkpoint``, ``llome_jax.llome.selection``) training uses the 95 % split of the
    units, the returned params are the kept checkpoint's (``opt_state`` stays the last step's),
    and ``info`` adds ``selected_step``, ``selection_passed``, ``val_loss``, ``gate_valid``,
    ``gate_feasible``, ``selection_history``, ``num_val_units`` and ``time_selection``.
    """
    n = int(data["units"])
    bsz = cfg.finetune.batch_size_for(loss)
    epochs = cfg.finetune.epochs if epochs is None else epochs
    select = cfg.finetune.select_checkpoint and loss in cfg.finetune.selection_losses
    split = selection.split_units(jax.random.fold_in(key, _SPLIT_SALT), n) if select else None
    train_units, val_units = split if split is not None else (np.arange(n), None)
    n_train = len(train_units)
    steps_per_epoch = math.ceil(n_train / bsz)
    if round_index == 1 and cfg.finetune.first_round_min_steps:
        epochs = max(epochs, math.ceil(cfg.finetune.first_round_min_steps / steps_per_epoch))
    total = steps_per_epoch * epochs
    opt_config = optimizer_config(cfg, loss, total, round_index)
    step = train_step(rt, cfg, loss, opt_config)
    optimizer = make_optimizer(opt_config)
    ids = np.concatenate(data["ids"])  # [R, T] with R = n (pairs) or 2n (DPO: chosen; rejected)
    tmask = np.concatenate(data["tmask"])
    amask = np.concatenate(data["amask"])
    window = "auto" if cfg.finetune.head_on_targets else None
    if not loss_spec(loss).uses_reference:
        reference = SeqLogProbs(np.zeros(len(ids), np.float32), np.zeros(len(ids), np.float32))
    else:
        # The reference is the round-start policy (the previous round's model), scored once.
        reference = compute_logprobs(
            training_model(rt, cfg, loss),
            params,
            ids,
            tmask,
            amask,
            batch_size=cfg.finetune.logprob_batch_size,
            mesh=rt.mesh,
            progress=progress,
            target_window=window,
        )
    copies = len(data["ids"])  # 1, or 2 for DPO
    state = TrainState(
        params=jax.tree.map(jnp.copy, params),
        opt_state=optimizer.init(params),
        step=jnp.zeros((), jnp.int32),
        key=key,
    )
    hparams = loss_params(cfg, loss)

    def make_batch(units: np.ndarray) -> Any:
        units, weight = padded_units(units, bsz)
        rows = np.concatenate([units + c * n for c in range(copies)])
        batch = batch_of_units(
            cfg,
            ids[rows],
            tmask[rows],
            amask[rows],
            SeqLogProbs(reference.sum_logp[rows], reference.num_tokens[rows]),
            np.asarray(data["reward"], np.float32)[units],
            weight,
        )
        return batch if rt.mesh is None else parallel.shard_batch(batch, rt.mesh)

    chosen = selection.Selection(cfg.finetune.selection_threshold)
    saves, val, prompts, best_params, time_selection = frozenset(), [], None, None, 0.0
    if val_units is not None:
        saves = frozenset(selection.save_steps(total))
        val = [
            (make_batch(u), u.size) for u in np.split(val_units, range(bsz, val_units.size, bsz))
        ]
        shown = val_units[: cfg.finetune.selection_num_prompts]
        prompts = selection.prompt_sequences(
            rt.codec, data["ids"][0][shown], data["amask"][0][shown]
        )
    losses: list[jax.Array] = []
    epoch_keys = jax.random.split(key, epochs)
    with progress_bar(progress, total=total, desc=f"train {loss}", unit="step") as bar:
        for epoch in range(epochs):
            bits = jax.random.bits(epoch_keys[epoch], (n_train,), jnp.uint32)
            order = train_units[np.argsort(np.asarray(bits))]
            for s in range(steps_per_epoch):
                state, metrics = step(state, make_batch(order[s * bsz : (s + 1) * bsz]), hparams)
                losses.append(metrics["loss"])
                bar.update(1)
                done = epoch * steps_per_epoch + s + 1
                if done in saves:
                    t = time.perf_counter()
                    candidate = selection_candidate(
                        rt, cfg, loss, done, state.params, val, prompts, hparams, constraint
                    )
                    chosen, is_best = chosen.consider(candidate)
                    if is_best:  # a host copy: the next step donates state.params
                        best_params = jax.tree.map(lambda a: np.array(a, copy=True), state.params)
                    time_selection += time.perf_counter() - t
    train_loss = float(np.mean(jax.device_get(losses))) if losses else float("nan")
    info: dict[str, Any] = {"train_steps": total, "learning_rate": opt_config.learning_rate}
    params_out = state.params
    if select and val_units is None:
        reason = f"{n} unit(s): too few to split off validation data; trained on all, kept the last"
        info.update(selection.skipped_record(total, reason), num_val_units=0, time_selection=0.0)
    elif select:
        info.update(chosen.record(), num_val_units=len(val_units), time_selection=time_selection)
        if chosen.best is not None and chosen.best.step != total:
            params_out = (
                jax.tree.map(jnp.asarray, best_params)
                if rt.mesh is None
                else parallel.replicate(best_params, rt.mesh)
            )
    return params_out, state.opt_state, train_loss, info
