"""The configuration of a pretraining run (``llome-jax pretrain``, ``llome_jax.llome.pretrain``).

:class:`PretrainConfig` (which instances, the GA, the PropEn pairs, the model, the loss and its
training), its :data:`PRESETS`, :func:`run_config` (what the run directory's ``config.json``
records) and :func:`loop_config`: the LLOME configuration whose model, codec and train step
pretraining uses. The settings both configurations have (:data:`LOOP_FIELDS`) mean the same in
each and are passed on as they are.

**Information contract** (the fair-benchmark issue): instance seeds below
:data:`MIN_INSTANCE_SEED` are kept for evaluation and refused here, so pretraining never sees a
label of an instance a benchmark optimises (the paper's f1-f4 are shipped instances, not seeded
ones). The run directory records the seeds and the wall-clock ``seconds`` of data generation and
training, to be reported beside any run that uses the weights.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llome_jax import configs, ga
from llome_jax.ehrlich.instances import MAX_INSTANCE_SEED, configuration_name
from llome_jax.llome.config import FinetuneConfig, LoopConfig
from llome_jax.llome.data import PropEnConfig
from llome_jax.training.loss_registry import loss_spec

__all__ = [
    "LOOP_FIELDS",
    "LOOP_NAMES",
    "MIN_INSTANCE_SEED",
    "PRESETS",
    "PretrainConfig",
    "loop_config",
    "preset",
    "run_config",
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
        quantisation levels; :func:`~llome_jax.llome.pretrain_data.balanced_subset`), which
        keeps the rarer high-value targets.
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


#: The settings :class:`PretrainConfig` shares with ``LoopConfig``, with the same meaning, passed
#: on by :func:`loop_config` (only their defaults differ: the ``cpu`` LLOME preset's model, text
#: format and round-1 training); the GA per instance is ``LoopConfig``'s round 0
#: (:data:`LOOP_NAMES`).
LOOP_FIELDS = (
    "function",
    "seed",
    "ga_generations",
    "ga",
    "model",
    "model_overrides",
    "text_format",
    "propen",
    "finetune",
)


#: the :data:`LOOP_FIELDS` whose ``LoopConfig`` name differs (the benchmark's shared names)
LOOP_NAMES = {"ga_generations": "round0_generations", "ga": "round0_ga"}


def loop_config(cfg: PretrainConfig) -> LoopConfig:
    """The LLOME configuration whose model, codec and train step pretraining uses (one round of
    ``cfg.loss`` on the first instance's configuration, from scratch): ``cfg``'s
    :data:`LOOP_FIELDS`, ``instance_seed = first_instance_seed``, the schedule ``((loss, 1),)``."""
    return LoopConfig(
        instance_seed=cfg.first_instance_seed,
        schedule=((cfg.loss, 1),),
        rounds=1,
        preset="custom",
        **{LOOP_NAMES.get(name, name): getattr(cfg, name) for name in LOOP_FIELDS},
    )


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
