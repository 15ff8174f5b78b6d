"""Pretraining the LLOME policy on many Ehrlich instances of one configuration (issue 37).

LLOME's policy is trained, round by round, on PropEn pairs of the labels of *one* instance. A
prior trained beforehand on the same kind of data from *other* instances of the same
configuration (``Ehr(v,L)-c-k-q``) starts the loop with a model that already writes the output
format and knows what an improving edit looks like. ``llome-jax pretrain`` is the command line;
the modules of a run:

* ``pretrain_config``: :class:`~llome_jax.llome.pretrain_config.PretrainConfig`, the presets,
  the information contract (instance seeds >= 1,000,000 only);
* ``pretrain_data``: the pool of PropEn pairs of every instance's GA archive (``data.npz``);
* this module: the batches and the training loop, the run directory, resume;
* ``pretrain_loss_log``: ``losses.csv`` and ``loss.png``;
* ``pretrain_weights``: the exported weights and their ``pretrain.json``.

Training: ``finetune.train_step`` (the LLOME round's jitted step, ``train.make_train_step``)
with ``finetune.optimizer_config`` (AdamW, linear decay over all steps) on batches of the pool;
the loss is SFT (LLOME's round 1) or another pairs loss (MargE: the reference is the initial
model). Checkpoints every ``checkpoint_every`` steps make the run resumable exactly: a run
interrupted after ``k`` steps and resumed ends with the same weights as one that was not.

Run directory::

    config.json       the configuration, ``instance_seeds`` {first, last, count}, ``seconds``
                      (wall clock of every invocation so far), ``seconds_data``, provenance
    data.npz          the pool (inputs, targets, rewards, values, instance) and per-instance stats
    losses.csv        step,loss (one row per optimizer step; rolled back on resume)
    loss.png          the loss curve
    checkpoints/      orbax TrainState checkpoints (step = optimizer steps)
    weights/          the final model for ``llome-jax llome --weights OUT/weights``: config.json
                      (Hugging Face GPT-NeoX), llome_pythia.json + params/ (the orbax checkpoint
                      ``from_pretrained`` loads), model.safetensors, tokenizer files,
                      pretrain.json (``pretrain_weights.weights_info``, written by :func:`run`
                      alone)
    summary.json      pairs, steps, last losses, seconds
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax import ehrlich
from llome_jax.llome import finetune
from llome_jax.llome.finetune import batch_of_units, padded_units
from llome_jax.llome.pretrain_config import PretrainConfig, loop_config, run_config
from llome_jax.llome.pretrain_data import PretrainData, generate_data
from llome_jax.llome.pretrain_loss_log import (
    append_losses,
    plot_losses,
    read_losses,
    write_losses,
)
from llome_jax.llome.pretrain_weights import export_weights, label_digests, weights_info
from llome_jax.llome.runtime import Runtime, initial_params, named_key
from llome_jax.objective import Objective
from llome_jax.run.checkpoint import CheckpointManager, abstract_like
from llome_jax.run.files import atomic_write_text, read_config
from llome_jax.run.provenance import provenance
from llome_jax.run.rundir import RunDirectory
from llome_jax.run.runner import progress_bar
from llome_jax.training.dataset_logprobs import compute_logprobs
from llome_jax.training.loss_registry import loss_spec
from llome_jax.training.optimizer import make_optimizer
from llome_jax.training.step import TrainState
from llome_jax.types import SeqLogProbs

__all__ = [
    "DATA_FILE",
    "LOSSES_FILE",
    "LOSS_PLOT",
    "SUMMARY_FILE",
    "WEIGHTS_DIR",
    "PretrainResult",
    "run",
]


# --------------------------------------------------------------------------------------------
# Batches of the pool
# --------------------------------------------------------------------------------------------
def _schedule(cfg: PretrainConfig, num_pairs: int) -> tuple[int, int]:
    """``(steps_per_epoch, total_steps)``."""
    per_epoch = math.ceil(num_pairs / cfg.finetune.batch_size_for(cfg.loss))
    total = cfg.max_steps if cfg.max_steps is not None else per_epoch * cfg.finetune.epochs
    return per_epoch, total


class _Batches:
    """Batch ``s`` of the pool: epoch ``e = s // per_epoch`` is a random order of the pairs drawn
    from ``fold_in(key, e)`` (so any step can be rebuilt after a resume); each batch is padded
    and assembled by fine-tuning's own ``finetune.padded_units`` and ``finetune.batch_of_units``.

    What differs from ``finetune.train``, and why: fine-tuning takes epoch ``e``'s order from
    ``split(key, epochs)[e]`` and encodes and scores the reference of its whole data set at once;
    here the pool is up to ``num_instances * max_pairs_per_instance`` pairs and ``max_steps`` may
    cycle it any number of times, so a batch is encoded (and, for MargE, scored) when it is used,
    and its order depends on its epoch alone. The numbers of a run, and of the shipped priors,
    are these batches'."""

    def __init__(self, key: jax.Array, rt: Any, cfg: PretrainConfig, data: PretrainData) -> None:
        self.key, self.rt, self.cfg, self.data = key, rt, cfg, data
        self.size = cfg.finetune.batch_size_for(cfg.loss)
        self.per_epoch, _ = _schedule(cfg, len(data))
        self._epoch: tuple[int, np.ndarray] | None = None

    def units(self, step: int) -> np.ndarray:
        epoch, offset = divmod(step, self.per_epoch)
        if self._epoch is None or self._epoch[0] != epoch:
            bits = jax.random.bits(jax.random.fold_in(self.key, epoch), (len(self.data),))
            self._epoch = (epoch, np.argsort(np.asarray(bits), kind="stable"))
        return self._epoch[1][offset * self.size : (offset + 1) * self.size]

    def __call__(self, step: int, reference_params: Any = None) -> Any:
        units, weight = padded_units(self.units(step), self.size)
        ids, tmask, amask = self.rt.codec.encode_pairs(
            self.data.inputs[units], self.data.targets[units]
        )
        if reference_params is None:
            reference = SeqLogProbs(jnp.zeros(self.size), jnp.zeros(self.size))
        else:  # the initial model, scored on this batch
            reference = compute_logprobs(
                self.rt.model,
                reference_params,
                ids,
                tmask,
                amask,
                batch_size=min(self.cfg.finetune.logprob_batch_size, self.size),
                target_window="auto" if self.cfg.finetune.head_on_targets else None,
            )
        return batch_of_units(
            self.cfg, ids, tmask, amask, reference, self.data.reward[units], weight
        )


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class PretrainResult:
    """What :func:`run` returns: the run directory, the final parameters (host numpy), the
    optimizer steps done, the weights directory (``None`` if the run was stopped early)."""

    path: pathlib.Path
    params: Any
    steps: int
    total_steps: int
    weights: pathlib.Path | None


_MUTABLE = ("seconds", "seconds_data", "provenance", "resume", "out")
DATA_FILE = "data.npz"
LOSSES_FILE = "losses.csv"
LOSS_PLOT = "loss.png"
WEIGHTS_DIR = "weights"
SUMMARY_FILE = "summary.json"


def run(
    cfg: PretrainConfig,
    out: str | os.PathLike,
    *,
    resume: bool = False,
    progress: bool = True,
    on_step: Callable[[int], None] | None = None,
    log: Callable[[str], None] = print,
) -> PretrainResult:
    """Pretrain into the run directory ``out`` (module docstring), or continue it (``resume``).

    A resume restores the newest readable checkpoint, rolls ``losses.csv`` back to it, reloads
    ``data.npz`` (or rebuilds it, identically) and continues; the final weights equal those of
    an uninterrupted run. ``on_step(step)`` is called after every optimizer step (after that
    step's checkpoint, if any); an exception it raises stops the run like a crash (tests).

    Raises:
      ValueError: a non-empty ``out`` without ``resume``, a resume with another configuration
        (``RunDirectory.create``); nothing is written then.
    """
    started = time.perf_counter()
    out = pathlib.Path(out)
    saved: dict[str, Any] = {}
    if resume and (out / RunDirectory.CONFIG).is_file():
        saved = read_config(out / RunDirectory.CONFIG)
    config = {
        **run_config(cfg),
        "seconds": float(saved.get("seconds", 0.0)),
        "seconds_data": saved.get("seconds_data"),
        "provenance": [provenance()],
    }
    run_dir = RunDirectory.create(out, config, resume=resume, mutable_keys=_MUTABLE, lock=True)
    base_seconds = float(saved.get("seconds", 0.0))

    def record_seconds(**extra: Any) -> float:
        total = base_seconds + time.perf_counter() - started
        current = run_dir.config()
        current.update(seconds=round(total, 3), **extra)
        text = json.dumps(current, indent=1, sort_keys=True) + "\n"
        atomic_write_text(run_dir.path / RunDirectory.CONFIG, text)
        return total

    try:
        key = jax.random.key(cfg.seed)
        data_path = run_dir.path / DATA_FILE
        if resume and data_path.is_file():
            data = PretrainData.load(data_path)
        else:
            t0 = time.perf_counter()
            data = generate_data(key, cfg, progress)
            data.save(data_path)
            record_seconds(seconds_data=round(time.perf_counter() - t0, 3))
        stats = data.stats()
        log(
            f"pretrain data: {stats['num_pairs']} pairs from {cfg.num_instances} instances of "
            f"{cfg.function} (seeds {cfg.first_instance_seed}..{cfg.instance_seeds[-1]})"
        )
        first = cfg.first_instance_seed
        objective = Objective.from_ehrlich(
            ehrlich.resolve_function(cfg.function, first),
            ehrlich.resolve_initial_solution(cfg.function, first),
        )
        lcfg = loop_config(cfg)
        rt = Runtime.build(lcfg, objective=objective)
        per_epoch, total = _schedule(cfg, len(data))
        opt_config = finetune.optimizer_config(lcfg, cfg.loss, total, round_index=2)
        step_fn = finetune.train_step(rt, lcfg, cfg.loss, opt_config)
        hparams = finetune.loss_params(lcfg, cfg.loss)
        params0 = initial_params(rt.model)
        k_shuffle, k_state = jax.random.split(jax.random.fold_in(named_key(key, "loop"), 0x9E7))
        state = TrainState(
            params=jax.tree.map(jnp.copy, params0),
            opt_state=make_optimizer(opt_config).init(params0),
            step=jnp.zeros((), jnp.int32),
            key=k_state,
        )
        reference_params = params0 if loss_spec(cfg.loss).uses_reference else None
        batches = _Batches(k_shuffle, rt, cfg, data)
        losses_path = run_dir.path / LOSSES_FILE
        with CheckpointManager(run_dir.checkpoint_dir) as ckpt:
            done = 0
            if resume:
                restored = ckpt.restore_latest_good(abstract_like(state))
                if restored is not None:
                    done, state, _ = restored
            kept = [row for row in read_losses(losses_path) if row[0] <= done]
            write_losses(losses_path, kept)
            pending: list[tuple[int, Any]] = []

            def flush() -> None:
                values = jax.device_get([loss for _, loss in pending])
                rows = [(s, float(v)) for (s, _), v in zip(pending, values)]
                append_losses(losses_path, rows)
                kept.extend(rows)
                pending.clear()

            desc = f"pretrain {cfg.loss}"
            with progress_bar(progress, total=total, initial=done, desc=desc, unit="step") as bar:
                for step in range(done, total):
                    batch = batches(step, reference_params)
                    state, metrics = step_fn(state, batch, hparams)
                    pending.append((step + 1, metrics["loss"]))
                    bar.update(1)
                    if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == total:
                        flush()
                        bar.set_postfix(loss=f"{kept[-1][1]:.4f}")
                        ckpt.save(step + 1, state, {"step": step + 1, "total_steps": total})
                        record_seconds()
                    if on_step is not None:
                        on_step(step + 1)
        params = jax.device_get(state.params)
        title = f"pretrain {cfg.loss} on {cfg.num_instances} x {cfg.function}"
        if kept:
            plot_losses(kept, run_dir.path / LOSS_PLOT, title)
        digests = label_digests(cfg)
        seconds = record_seconds()
        tail = [v for _, v in kept[-max(1, per_epoch) :]]
        final_loss_mean = float(np.mean(tail)) if tail else None
        info = weights_info(
            cfg,
            run_dir.config(),
            digests=digests,
            num_pairs=len(data),
            steps=total,
            final_loss_mean=final_loss_mean,
            seconds=seconds,
            run_directory=run_dir.path,
        )
        weights = export_weights(rt, params, run_dir.path / WEIGHTS_DIR, info)
        summary = {
            **stats,
            "steps": total,
            "steps_per_epoch": per_epoch,
            "final_loss_mean": final_loss_mean,
            "seconds": round(record_seconds(), 3),
            "seconds_data": run_dir.config().get("seconds_data"),
        }
        atomic_write_text(run_dir.path / SUMMARY_FILE, json.dumps(summary, indent=1) + "\n")
        return PretrainResult(run_dir.path, params, total, total, weights)
    finally:
        run_dir.release()
