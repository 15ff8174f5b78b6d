"""Pretraining the LLOME policy on many Ehrlich instances of one configuration (issue 37).

LLOME's policy is trained, round by round, on PropEn pairs of the labels of *one* instance. A
prior trained beforehand on the same kind of data from *other* instances of the same
configuration (``Ehr(v,L)-c-k-q``) starts the loop with a model that already writes the output
format and knows what an improving edit looks like. This module makes that data and trains on it
with the LLOME train step; ``llome-jax pretrain`` is its command line.

Data (what LLOME trains on in a run, for ``n`` instances at once)::

    seeds    s_i = first_instance_seed + i,  i < num_instances,  s_i >= 1,000,000
    f_i, x0_i    = ehrlich.resolve_function(name, s_i), resolve_initial_solution(name, s_i)
                   (the instance ``llome --function NAME --instance-seed s_i`` would optimise)
    A_i          = GA archive of n0 generations from x0_i       (ga_archives: jit(vmap) over i)
    P_i          = propen_pairs(A_i)  capped at max_pairs_per_instance (uniform or balanced over
                   the target's value level)
    D            = concat_i P_i        every instance's pairs in one shuffled pool per epoch

**Information contract** (the fair-benchmark issue): instance seeds below
:data:`MIN_INSTANCE_SEED` are kept for evaluation and refused here, so pretraining never sees a
label of an instance a benchmark optimises (the paper's f1-f4 are shipped instances, not seeded
ones). The run directory records the seeds and the wall-clock ``seconds`` of data generation and
training, to be reported beside any run that uses the weights.

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
                      pretrain.json (:func:`weights_info`, written by :func:`run` alone)
    summary.json      pairs, steps, last losses, seconds

``pretrain.json`` (every field from the code, nothing by hand): ``function``, ``text_format``,
``model``, ``loss``, ``seed``, ``instance_seeds`` {first, last, count}, ``label_digests`` (the
first 16 hex digits of ``ehrlich.instances.label_digest`` of each instance, in seed order: what
the prior guard ``llome_jax.priors.pretrained_instance`` compares), ``num_pairs`` (the pool's
PropEn pairs), ``steps``, ``final_loss_mean`` (mean loss over the last epoch's steps),
``seconds`` / ``seconds_data``, ``command`` / ``commit`` / ``dirty`` / ``versions`` / ``device``
(the invocation that exported the weights, ``llome_jax.provenance``), ``provenance`` (every
invocation of the run), ``run_directory`` and ``sha256`` ``{"model.safetensors": hex}``
(:func:`export_weights`; ``llome_jax.priors.verify_weights`` checks it).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
import os
import pathlib
import shutil
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax import configs, ga
from llome_jax.ehrlich.instances import MAX_INSTANCE_SEED
from llome_jax.llome.config import FinetuneConfig, LoopConfig
from llome_jax.llome.data import PropEnConfig

__all__ = [
    "MIN_INSTANCE_SEED",
    "PRESETS",
    "PretrainConfig",
    "PretrainData",
    "PretrainResult",
    "balanced_subset",
    "export_weights",
    "ga_archives",
    "generate_data",
    "instance_keys",
    "label_digests",
    "loop_config",
    "make_instances",
    "preset",
    "run",
    "weights_info",
]

#: Instance seeds below this are kept for evaluation: pretraining refuses them.
MIN_INSTANCE_SEED = 1_000_000
#: ``jax.random.fold_in`` takes 32-bit data; seeds stay below this
#: (``ehrlich.instances.MAX_INSTANCE_SEED``, the bound of every instance seed).
_MAX_INSTANCE_SEED = MAX_INSTANCE_SEED

#: The ``cpu`` LLOME preset's round-1 training (``llome.presets``): lr 1e-2, batch 64, no head
#: window; ``logprob_batch_size`` serves MargE's reference.
_FINETUNE_DEFAULTS = {
    "learning_rate": 1e-2,
    "weight_decay": 0.01,
    "epochs": 4,
    "batch_size": 64,
    "logprob_batch_size": 256,
    "head_on_targets": False,
}


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
    """Static configuration of a pretraining run (hashable; ``replace`` / ``to_dict`` as every
    configuration, ``llome_jax.configs``).

    Attributes:
      function: the Ehrlich configuration ``"Ehr(v,L)-c-k-q"`` (or ``f1``..``f4``, read as their
        configuration); stored as its ``Ehr`` name.
      first_instance_seed / num_instances: the instances ``first, first + 1, ...``; every seed
        must be ``>= MIN_INSTANCE_SEED`` (below are kept for evaluation).
      seed: run seed (GA keys, pair keys, model initialisation, batch order).
      ga_generations / ga: the GA run per instance (LLOME's round 0: ``n0 = 10`` generations of
        the paper's GA; more generations = longer GA runs, higher values in the data).
      instances_per_call: instances per jitted, vmapped GA call (memory
        ``~ instances_per_call * n0 * n * L * 4`` bytes).
      propen: PropEn pairing (``llome.data.PropEnConfig``, the paper's defaults).
      max_pairs_per_instance: at most this many pairs of one instance (``None``: all), so that no
        instance dominates the pool.
      pair_sampling: how the cap picks pairs: ``"uniform"`` (``finetune.subset``) or
        ``"balanced"`` (equal shares per distinct target value, i.e. per combination of
        quantisation levels; :func:`balanced_subset`), which keeps the rarer high-value targets.
      model / model_overrides / text_format: the policy, as ``LoopConfig``'s (default: the ``cpu``
        preset's ``tiny`` Pythia on the Ehrlich tokenizer, compact format).
      loss: a pairs loss (``sft``, LLOME's round 1; ``marge`` / ``reinforce`` against the
        initial model as reference).
      finetune: learning rate, weight decay, warm-up, epochs, batch size, micro-batches, clipping,
        MargE settings (``llome.config.FinetuneConfig``; checkpoint selection is a LLOME
        round's and is refused here).
      max_steps: total optimizer steps (``None``: ``finetune.epochs`` passes over the pool; else
        the pool is cycled in fresh random orders until ``max_steps``).
      checkpoint_every: optimizer steps between checkpoints (and ``losses.csv`` flushes).
      preset: the preset the configuration came from (recorded).
    """

    function: str = "Ehr(32,32)-4-4-4"
    first_instance_seed: int = MIN_INSTANCE_SEED
    num_instances: int = 256
    seed: int = 0
    ga_generations: int = 10
    ga: ga.GAConfig = dataclasses.field(default_factory=ga.GAConfig)
    instances_per_call: int = 16
    propen: PropEnConfig = dataclasses.field(default_factory=PropEnConfig)
    max_pairs_per_instance: int | None = 2048
    pair_sampling: str = "uniform"
    model: str = "tiny"
    model_overrides: tuple[tuple[str, Any], ...] = ()
    text_format: str = "compact"
    loss: str = "sft"
    finetune: FinetuneConfig = dataclasses.field(
        default_factory=lambda: FinetuneConfig(**_FINETUNE_DEFAULTS)
    )
    max_steps: int | None = None
    checkpoint_every: int = 500
    preset: str = "custom"

    def __post_init__(self) -> None:
        from llome_jax.ehrlich.instances import configuration_name
        from llome_jax.losses import loss_spec

        name = str(self.function).strip()
        if name.endswith(".json"):
            raise ValueError(
                f"function {name!r} is one instance; pretraining samples many instances of a "
                "configuration: give its name, e.g. 'Ehr(32,32)-4-4-4'"
            )
        object.__setattr__(self, "function", configuration_name(name))
        for field in ("num_instances", "ga_generations", "instances_per_call", "checkpoint_every"):
            _check_int(field, getattr(self, field), 1)
        _check_int("seed", self.seed, 0)
        _check_int("first_instance_seed", self.first_instance_seed, -(2**63))
        if self.first_instance_seed < MIN_INSTANCE_SEED:
            raise ValueError(
                f"first_instance_seed {self.first_instance_seed} < {MIN_INSTANCE_SEED:,}: "
                f"instance seeds below {MIN_INSTANCE_SEED:,} are kept for evaluation (the "
                "information contract); pretrain on seeds >= 1,000,000"
            )
        last = self.first_instance_seed + self.num_instances - 1
        if last > _MAX_INSTANCE_SEED:
            raise ValueError(
                f"the last instance seed {last} exceeds {_MAX_INSTANCE_SEED} (32-bit keys); "
                "lower first_instance_seed or num_instances"
            )
        for field in ("max_pairs_per_instance", "max_steps"):
            if getattr(self, field) is not None:
                _check_int(field, getattr(self, field), 1)
        for field, allowed in (
            ("pair_sampling", ("uniform", "balanced")),
            ("text_format", ("list", "compact")),
        ):
            if getattr(self, field) not in allowed:
                raise ValueError(f"{field} must be one of {allowed}; got {getattr(self, field)!r}")
        if not self.model:
            raise ValueError("set a model preset name (e.g. tiny, small, 70m)")
        if loss_spec(self.loss).data != "pairs":
            raise ValueError(
                f"loss {self.loss!r} trains on preference triples; pretraining builds PropEn "
                "pairs: use sft, marge or reinforce"
            )
        if self.finetune.select_checkpoint:
            raise ValueError(
                "finetune.select_checkpoint is a LLOME round's checkpoint gate; pretraining keeps "
                "the last step"
            )

    @property
    def instance_seeds(self) -> list[int]:
        """``[first_instance_seed, ..., first_instance_seed + num_instances - 1]``."""
        return list(range(self.first_instance_seed, self.first_instance_seed + self.num_instances))

    def replace(self, **overrides: Any) -> PretrainConfig:
        """This configuration with settings replaced (dotted keys such as ``finetune.epochs``
        or nested dicts; ``llome_jax.configs.override``)."""
        return configs.override(self, overrides)

    def to_dict(self) -> dict[str, Any]:
        out = configs.to_dict(self)
        out["model_overrides"] = {k: v for k, v in self.model_overrides}
        return out


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}; got {value!r}")


#: name -> PretrainConfig overrides. ``smoke``: seconds, for tests and trying the command
#: (Ehr(8,8)-2-2-2, 3 instances, the ``smoke`` LLOME preset's GA and list format, 12 steps).
#: ``cpu``: the defaults (the ``cpu`` LLOME preset's model, text format and round-1 training).
PRESETS: dict[str, dict[str, Any]] = {
    "smoke": {
        "function": "Ehr(8,8)-2-2-2",
        "num_instances": 3,
        "ga_generations": 2,
        "ga": {"num_particles": 100, "mutation_prob": 0.1},
        "instances_per_call": 4,
        "max_pairs_per_instance": 256,
        "text_format": "list",
        "finetune": {"batch_size": 16, "epochs": 1, "logprob_batch_size": 16},
        "max_steps": 12,
        "checkpoint_every": 5,
    },
    "cpu": {},
}


def preset(name: str, **overrides: Any) -> PretrainConfig:
    """The :class:`PretrainConfig` of preset ``name`` with ``overrides`` (dotted keys).

    Raises:
      ValueError: unknown preset or setting.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return PretrainConfig().replace(**PRESETS[name]).replace(**overrides, preset=name)


def loop_config(cfg: PretrainConfig) -> LoopConfig:
    """The LLOME configuration whose model, codec and train step pretraining uses (one round of
    ``cfg.loss`` on the first instance's configuration, from scratch)."""
    return LoopConfig(
        function=cfg.function,
        instance_seed=cfg.first_instance_seed,
        schedule=((cfg.loss, 1),),
        rounds=1,
        seed=cfg.seed,
        ga_generations=cfg.ga_generations,
        ga=cfg.ga,
        model=cfg.model,
        model_overrides=cfg.model_overrides,
        text_format=cfg.text_format,
        propen=cfg.propen,
        finetune=cfg.finetune,
        preset="custom",
    )


# --------------------------------------------------------------------------------------------
# Data: instances, GA archives (vmapped), PropEn pairs
# --------------------------------------------------------------------------------------------
def make_instances(cfg: PretrainConfig, progress: bool = False) -> tuple[list[Any], np.ndarray]:
    """The instances and start sequences of ``cfg.instance_seeds``: ``([Ehrlich] * n,
    int32 [n, L])``, each exactly what ``--function cfg.function --instance-seed s`` resolves.

    Host code (``ehrlich.make`` checks ergodicity and solves for the stationary law in NumPy),
    one instance at a time; the GA that follows runs vmapped over them (:func:`ga_archives`).
    """
    from llome_jax import ehrlich
    from llome_jax.runner import progress_bar

    fns, x0s = [], []
    with progress_bar(progress, total=cfg.num_instances, desc="instances", unit="inst") as bar:
        for seed in cfg.instance_seeds:
            try:
                fns.append(ehrlich.resolve_function(cfg.function, seed))
            except ValueError as error:
                raise ValueError(f"instance seed {seed} of {cfg.function}: {error}") from None
            x0s.append(np.asarray(ehrlich.resolve_initial_solution(cfg.function, seed)))
            bar.update(1)
    return fns, np.stack(x0s).astype(np.int32)


def label_digests(cfg: PretrainConfig, progress: bool = False) -> list[str]:
    """``pretrain.json``'s ``label_digests``: for each instance seed in order, the first
    ``priors.DIGEST_DIGITS`` (16) hex digits of ``ehrlich.instances.label_digest`` of its
    instance (what decides its labels), so that the prior guard recognises a pretraining
    instance however it is given (seed or ``.json`` file). Resolves every instance again
    (host code, about a second each on a CPU, as :func:`make_instances`)."""
    from llome_jax import ehrlich
    from llome_jax.ehrlich.instances import label_digest
    from llome_jax.priors import DIGEST_DIGITS
    from llome_jax.runner import progress_bar

    out = []
    with progress_bar(progress, total=cfg.num_instances, desc="digests", unit="inst") as bar:
        for seed in cfg.instance_seeds:
            fn = ehrlich.resolve_function(cfg.function, seed)
            out.append(label_digest(fn).removeprefix("sha256:")[:DIGEST_DIGITS])
            bar.update(1)
    return out


def instance_keys(key: jax.Array, seeds: Any) -> jax.Array:
    """One key per instance, ``fold_in(key, s)``: an instance's data depend on the run seed and
    its own seed only (not on how many instances there are): typed keys ``[n]``."""
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.asarray(seeds, jnp.uint32))


@functools.partial(jax.jit, static_argnames=("num_generations", "config"))
def ga_archives(
    keys: jax.Array, fns: Any, x0s: jax.Array, num_generations: int, config: ga.GAConfig
) -> ga.GAArchive:
    """``ga.run_archive`` of every instance in one jitted call, vmapped over instances.

    Args:
      keys: typed keys ``[m]``.
      fns: ``m`` Ehrlich instances of one configuration stacked leaf by leaf (``[m, ...]``).
      x0s: int32 ``[m, L]`` start sequences.
      num_generations: ``n0`` (static).
      config: the GA (static).

    Returns:
      a ``GAArchive`` with leaves ``[m, n0 n, ...]`` and ``count [m]``; row ``i`` equals
      ``ga.run_archive(keys[i], fn_i, x0s[i], n0, config)`` (tested).
    """

    def one(key: jax.Array, fn: Any, x0: jax.Array) -> ga.GAArchive:
        state, key_run = ga.start(key, fn, x0, config)
        keys_run = jax.random.split(key_run, num_generations)
        _, (_, populations, values) = ga.advance(state, keys_run, fn, config, keep_populations=True)
        return ga.archive_from_trajectory(populations, values, fn.config.num_states)

    return jax.vmap(one)(keys, fns, x0s)


def _stack(items: list[Any]) -> Any:
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *items)


def balanced_subset(key: jax.Array, values: Any, limit: int | None) -> np.ndarray:
    """``min(n, limit)`` indices with equal shares per distinct value (sorted).

    Rows are ranked within their value group in a random order, then taken by rank (all rank-0
    rows first, then rank 1, ...; ties of rank in random order): a group smaller than its share
    is taken whole and the rest is shared by the others. All rows, in order, if within
    ``limit``.

    Example: 90 rows of value a and 10 of b, limit 20: 10 of each.
    """
    values = np.asarray(values)
    n = values.shape[0]
    if limit is None or n <= limit:
        return np.arange(n, dtype=np.int64)
    bits = np.asarray(jax.random.bits(key, (n,), jnp.uint32))
    order = np.argsort(bits, kind="stable")  # a random order of the rows
    _, group = np.unique(values[order], return_inverse=True)
    by_group = np.argsort(group, kind="stable")  # grouped, random order within each group
    starts = np.searchsorted(group[by_group], group[by_group], side="left")
    rank = np.empty(n, np.int64)
    rank[by_group] = np.arange(n) - starts
    taken = order[np.argsort(rank, kind="stable")[:limit]]
    return np.sort(taken).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class PretrainData:
    """The training pool (numpy; ``P`` pairs) and per-instance statistics (``n`` instances).

    Attributes:
      inputs / targets: int32 ``[P, L]`` the worse and the better sequence of each pair.
      reward: float32 ``[P]`` margin reward ``max(f(y) - f(x), 0)``.
      input_value / target_value: float32 ``[P]`` (``-inf``: infeasible input).
      instance: int32 ``[P]`` index of the pair's instance in ``seeds``.
      seeds: int64 ``[n]`` instance seeds.
      archive_size: int64 ``[n]`` distinct GA sequences per instance.
      best_value: float32 ``[n]`` best GA value per instance.
      num_candidates: int64 ``[n]`` PropEn pairs before the cap; num_pairs: kept.
    """

    inputs: np.ndarray
    targets: np.ndarray
    reward: np.ndarray
    input_value: np.ndarray
    target_value: np.ndarray
    instance: np.ndarray
    seeds: np.ndarray
    archive_size: np.ndarray
    best_value: np.ndarray
    num_candidates: np.ndarray
    num_pairs: np.ndarray

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    def save(self, path: str | os.PathLike) -> None:
        """Write ``.npz`` atomically (temporary file + rename)."""
        path = pathlib.Path(path)
        temporary = path.with_name(f".{path.name}.tmp.npz")
        small = np.uint8 if int(self.inputs.max(initial=0)) < 256 else np.int16
        arrays = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        arrays["inputs"] = self.inputs.astype(small)
        arrays["targets"] = self.targets.astype(small)
        np.savez(temporary, **arrays)
        os.replace(temporary, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> PretrainData:
        with np.load(path) as data:
            arrays = {f.name: data[f.name] for f in dataclasses.fields(cls)}
        arrays["inputs"] = arrays["inputs"].astype(np.int32)
        arrays["targets"] = arrays["targets"].astype(np.int32)
        return cls(**arrays)

    def stats(self) -> dict[str, Any]:
        """Summary numbers (``summary.json``)."""
        return {
            "num_pairs": len(self),
            "pairs_per_instance": {
                "min": int(self.num_pairs.min()),
                "median": float(np.median(self.num_pairs)),
                "max": int(self.num_pairs.max()),
            },
            "archive_size_median": float(np.median(self.archive_size)),
            "best_ga_value_median": float(np.median(self.best_value)),
            "instances_without_pairs": int(np.sum(self.num_pairs == 0)),
        }


def generate_data(key: jax.Array, cfg: PretrainConfig, progress: bool = False) -> PretrainData:
    """The pool of ``cfg``: GA archives of every instance (:func:`ga_archives`, in chunks of
    ``instances_per_call``; the last chunk padded with copies so that one shape compiles), then
    PropEn pairs per instance, capped (``max_pairs_per_instance``, ``pair_sampling``).

    ``key`` is the run key ``jax.random.key(cfg.seed)``; instance ``s`` uses
    ``fold_in(named_key(key, "ga"), s)`` for its GA and ``fold_in(named_key(key, "loop"), s)``
    for its pairs (:func:`instance_keys`).

    Raises:
      ValueError: no instance yields a pair.
    """
    from llome_jax.llome.data import propen_pairs
    from llome_jax.llome.finetune import subset
    from llome_jax.llome.runtime import named_key
    from llome_jax.runner import progress_bar

    fns, x0s = make_instances(cfg, progress)
    seeds = np.asarray(cfg.instance_seeds, np.int64)
    ga_keys = instance_keys(named_key(key, "ga"), seeds)
    pair_keys = instance_keys(named_key(key, "loop"), seeds)
    num_states = fns[0].config.num_states
    n, chunk = len(fns), min(cfg.instances_per_call, len(fns))
    inputs, targets, reward, v_in, v_out, owner = [], [], [], [], [], []
    stats = {k: np.zeros(n, t) for k, t in _STATS.items()}
    with progress_bar(progress, total=n, desc="GA + pairs", unit="inst") as bar:
        for start in range(0, n, chunk):
            rows = [min(i, n - 1) for i in range(start, start + chunk)]  # pad with the last
            archives = ga_archives(
                ga_keys[np.asarray(rows)],
                _stack([fns[i] for i in rows]),
                jnp.asarray(x0s[rows]),
                cfg.ga_generations,
                cfg.ga,
            )
            counts = np.asarray(archives.count)
            sequences, values = np.asarray(archives.sequences), np.asarray(archives.values)
            for j, i in enumerate(range(start, min(start + chunk, n))):
                x, v = sequences[j, : counts[j]], values[j, : counts[j]]
                k_pairs, k_cap = jax.random.split(pair_keys[i])
                pairs = propen_pairs(k_pairs, x, v, cfg.propen, num_states=num_states)
                limit = cfg.max_pairs_per_instance
                if cfg.pair_sampling == "balanced":
                    kept = balanced_subset(k_cap, pairs.target_value, limit)
                else:
                    kept = subset(k_cap, len(pairs), limit)
                pairs = pairs.select(kept)
                a, b = pairs.gather(x)
                inputs.append(a)
                targets.append(b)
                reward.append(pairs.reward)
                v_in.append(pairs.input_value)
                v_out.append(pairs.target_value)
                owner.append(np.full(len(pairs), i, np.int32))
                stats["archive_size"][i] = x.shape[0]
                stats["best_value"][i] = v.max() if v.size else -np.inf
                stats["num_candidates"][i] = pairs.num_candidates
                stats["num_pairs"][i] = len(pairs)
                bar.update(1)
    data = PretrainData(
        inputs=np.concatenate(inputs).astype(np.int32),
        targets=np.concatenate(targets).astype(np.int32),
        reward=np.concatenate(reward).astype(np.float32),
        input_value=np.concatenate(v_in).astype(np.float32),
        target_value=np.concatenate(v_out).astype(np.float32),
        instance=np.concatenate(owner),
        seeds=seeds,
        **stats,
    )
    if len(data) == 0:
        raise ValueError(
            f"no PropEn pairs in the GA data of {n} instance(s): run more GA generations or "
            "particles, or more instances"
        )
    return data


_STATS = {
    "archive_size": np.int64,
    "best_value": np.float32,
    "num_candidates": np.int64,
    "num_pairs": np.int64,
}


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------
def _schedule(cfg: PretrainConfig, num_pairs: int) -> tuple[int, int]:
    """``(steps_per_epoch, total_steps)``."""
    per_epoch = math.ceil(num_pairs / cfg.finetune.batch_size_for(cfg.loss))
    total = cfg.max_steps if cfg.max_steps is not None else per_epoch * cfg.finetune.epochs
    return per_epoch, total


class _Batches:
    """Batch ``s`` of the pool: epoch ``e = s // per_epoch`` is a random order of the pairs drawn
    from ``fold_in(key, e)`` (so any step can be rebuilt after a resume); the last batch of an
    epoch is padded with weight-0 copies, as ``finetune.train`` pads."""

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
        from llome_jax.losses import LossBatch
        from llome_jax.train import TrainBatch, compute_logprobs
        from llome_jax.types import SeqLogProbs

        units = self.units(step)
        weight = np.ones(self.size, np.float32)
        if units.size < self.size:
            weight[units.size :] = 0.0
            units = np.concatenate([units, np.full(self.size - units.size, units[0])])
        ids, tmask, amask = self.rt.codec.encode_pairs(
            self.data.inputs[units], self.data.targets[units]
        )
        window = "auto" if self.cfg.finetune.head_on_targets else None
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
                target_window=window,
            )
            reference = SeqLogProbs(
                jnp.asarray(reference.sum_logp), jnp.asarray(reference.num_tokens)
            )
        return TrainBatch.create(
            ids,
            tmask,
            amask,
            reference=reference,
            loss=LossBatch.create(
                reward=self.data.reward[units],
                weight=weight,
                group_size=self.cfg.finetune.marge_group_size,
            ),
            target_window=window,
        )


def _read_losses(path: pathlib.Path) -> list[tuple[int, float]]:
    if not path.is_file():
        return []
    with open(path, newline="") as stream:
        rows = list(csv.reader(stream))[1:]
    return [(int(step), float(loss)) for step, loss in rows]


def _write_losses(path: pathlib.Path, rows: list[tuple[int, float]]) -> None:
    from llome_jax.rundir import atomic_write_text

    text = "step,loss\n" + "".join(f"{step},{loss!r}\n" for step, loss in rows)
    atomic_write_text(path, text)


def _append_losses(path: pathlib.Path, rows: list[tuple[int, float]]) -> None:
    new = not path.is_file()
    with open(path, "a", newline="") as stream:
        if new:
            stream.write("step,loss\n")
        stream.write("".join(f"{step},{loss!r}\n" for step, loss in rows))
        stream.flush()
        os.fsync(stream.fileno())


def plot_losses(rows: list[tuple[int, float]], path: pathlib.Path, title: str) -> None:
    """``loss.png``: the loss per step and its running mean over ~1 % of the steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.asarray([s for s, _ in rows], float)
    losses = np.asarray([v for _, v in rows], float)
    figure, axis = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    axis.plot(steps, losses, lw=0.6, alpha=0.5, label="loss per step")
    width = max(1, len(losses) // 100)
    if width > 1:
        smooth = np.convolve(losses, np.ones(width) / width, mode="valid")
        axis.plot(steps[width - 1 :], smooth, lw=1.5, label=f"mean of {width} steps")
    axis.set_xlabel("optimizer step")
    axis.set_ylabel("training loss")
    axis.set_yscale("log" if losses.size and losses.min() > 0 else "linear")
    axis.grid(alpha=0.3)
    axis.set_title(title)
    axis.legend(loc="best", fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def export_weights(
    rt: Any, params: Any, directory: str | os.PathLike, info: Mapping[str, Any]
) -> pathlib.Path:
    """Write the model with ``params`` where ``llome-jax llome --weights DIR`` loads it.

    ``DIR`` holds ``config.json`` (Hugging Face GPT-NeoX, what ``--weights`` checks),
    ``llome_pythia.json`` + ``params/`` (the orbax checkpoint ``lm.pythia.from_pretrained``
    loads), ``model.safetensors`` (the same weights for ``transformers``), the tokenizer files and
    ``pretrain.json``: ``info`` plus ``"sha256": {"model.safetensors": hex}`` of the bytes written
    (``llome_jax.priors.verify_weights`` checks it). Written to a temporary directory and renamed.
    """
    import hashlib

    from safetensors.numpy import save

    from llome_jax.llome.runtime import model_with
    from llome_jax.lm import convert
    from llome_jax.rundir import atomic_write_text

    directory = pathlib.Path(directory)
    temporary = directory.with_name(f".{directory.name}.tmp")
    if temporary.exists():
        shutil.rmtree(temporary)
    model = model_with(rt.model, jax.device_get(params))
    convert.save_converted(model, temporary)
    tokenizer = rt.codec.tokenizer
    hf = convert.hf_config_dict(model.config)
    hf.update(
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    atomic_write_text(temporary / "config.json", json.dumps(hf, indent=2) + "\n")
    # serialised here and written as an ordinary new file: safetensors' save_file makes it 0o600
    blob = save(convert.hf_tensors(model))
    (temporary / "model.safetensors").write_bytes(blob)
    tokenizer.save_pretrained(str(temporary))
    info = {**info, "sha256": {"model.safetensors": hashlib.sha256(blob).hexdigest()}}
    atomic_write_text(temporary / "pretrain.json", json.dumps(info, indent=1) + "\n")
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(temporary, directory)
    return directory


#: ``versions`` of ``pretrain.json``: these entries of the exporting invocation's provenance.
_VERSION_KEYS = (
    "llome_jax",
    "python",
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "orbax-checkpoint",
    "numpy",
)


def weights_info(
    cfg: PretrainConfig,
    config: Mapping[str, Any],
    *,
    digests: list[str],
    num_pairs: int,
    steps: int,
    final_loss_mean: float | None,
    seconds: float,
    run_directory: str | os.PathLike,
) -> dict[str, Any]:
    """``pretrain.json`` (module docstring) but its ``sha256`` (:func:`export_weights` adds it):
    the configuration, seeds and ``label_digests``, the pool's pair count, steps, final loss and
    seconds, and the provenance of the run directory's ``config`` (its last invocation, the one
    that exports, gives ``command``, ``commit``, ``dirty``, ``versions`` and ``device``)."""
    import shlex

    invocations = list(config.get("provenance") or [])
    last = invocations[-1] if invocations else {}
    argv = list(last.get("command") or [])
    command = shlex.join([pathlib.Path(argv[0]).name, *argv[1:]]) if argv else None
    device = (
        f"{last['devices']} x {last['device_kind']} ({last['backend']})"
        if {"devices", "device_kind", "backend"} <= last.keys()
        else None
    )
    seconds_data = config.get("seconds_data")
    return {
        "function": cfg.function,
        "text_format": cfg.text_format,
        "model": cfg.model,
        "loss": cfg.loss,
        "seed": cfg.seed,
        "instance_seeds": run_config(cfg)["instance_seeds"],
        "label_digests": list(digests),
        "num_pairs": int(num_pairs),
        "steps": int(steps),
        "final_loss_mean": final_loss_mean,
        "seconds": round(float(seconds), 3),
        "seconds_data": None if seconds_data is None else round(float(seconds_data), 3),
        "command": command,
        "commit": last.get("commit"),
        "dirty": last.get("dirty"),
        "versions": {key: last.get(key) for key in _VERSION_KEYS},
        "device": device,
        "provenance": invocations,
        "run_directory": str(pathlib.Path(run_directory).absolute()),
    }


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


def run_config(cfg: PretrainConfig) -> dict[str, Any]:
    """What ``config.json`` records (before ``seconds`` and provenance)."""
    return {
        "optimizer": "pretrain",
        **cfg.to_dict(),
        "instance_seeds": {
            "first": cfg.first_instance_seed,
            "last": cfg.first_instance_seed + cfg.num_instances - 1,
            "count": cfg.num_instances,
        },
    }


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
    from llome_jax import ehrlich
    from llome_jax.checkpoint import CheckpointManager, abstract_like
    from llome_jax.llome import finetune
    from llome_jax.llome.runtime import Runtime, initial_params, named_key
    from llome_jax.losses import loss_spec
    from llome_jax.objective import Objective
    from llome_jax.provenance import provenance
    from llome_jax.rundir import RunDirectory, atomic_write_text, read_config
    from llome_jax.runner import progress_bar
    from llome_jax.train import TrainState, make_optimizer

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
            kept = [row for row in _read_losses(losses_path) if row[0] <= done]
            _write_losses(losses_path, kept)
            pending: list[tuple[int, Any]] = []

            def flush() -> None:
                values = jax.device_get([loss for _, loss in pending])
                rows = [(s, float(v)) for (s, _), v in zip(pending, values)]
                _append_losses(losses_path, rows)
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
