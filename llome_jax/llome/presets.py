"""Named LLOME configurations: ``smoke`` (tests), ``cpu`` (the laptop default), ``paper`` (GPUs).

``preset(name, **overrides) -> LoopConfig``. A preset is a nested dict of settings applied to the
defaults (the format of LaMBO-2's presets); ``overrides`` are applied after it with
``LoopConfig.replace`` (dotted keys, nested dicts or the flat names of ``config.FLAT_KEYS``; the
CLI passes ``function``, ``schedule``, ``rounds``, ``seed``, ``weights`` and its ``--set`` keys).

* ``smoke``: a pipeline check of about a minute on 2 cores, most of it compiling, for tests and
  trying the command (not for results; LaMBO-2's ``smoke`` runs the same problem): a
  short function ``Ehr(8,8)-2-2-2`` (instance seed 1) unless ``--function`` is given, the
  ``tiny`` Pythia (H 64, 4 layers) with the Ehrlich tokenizer, a 2-generation GA of 200
  particles with mutation 0.1 (diverse seed data), lr 1e-2 (later rounds 5e-3) for 4 epochs on
  <= 512 pairs (enough to learn the output format), j = 32, 8 seeds x 2 iterations x (greedy
  + 2 temperatures x 4).
* ``cpu``: the embedded default. A from-scratch ``tiny`` Pythia (~0.2M parameters, the size of
  the paper's 226K-parameter small model) with the Ehrlich tokenizer, the paper's f2, n0 = 10 GA
  generations of 1000, j = 2000, 10 rounds, the paper's PropEn / Filter / temperature settings.
  Training and generation sizes are reduced for 2 CPU cores and the learning rate is a
  from-scratch one (the paper's 1e-6 is for a pretrained 2.8B model); 4 epochs per round (median
  min regret 0.72 vs 0.81 with 2 epochs over 3 seeds of a training instance); the compact text
  format ``[3 1 5]`` (same median over five paired runs on two training instances, in a third
  of the time); docs/experiments.md records how
  they were chosen (on training functions, never on f2).
* ``cpu-pretrained``: ``cpu`` from a prior shipped with the package (``llome_jax.priors``:
  the ``tiny`` Pythia pretrained by ``llome-jax pretrain`` on PropEn pairs of GA data of other
  instances of the run's configuration, instance seeds >= 1,000,000; f2's ``Ehr(32,32)-4-4-4``
  unless the function's configuration has its own prior, :func:`prior_for_function`), with
  round 1 trained as the later rounds (lr 3e-3, 4 epochs) instead of from scratch. A run on
  a configuration no prior was made for, in another text format or on an instance the prior
  saw is refused (:func:`llome_jax.llome.config.check_prior_fits`).
* ``paper``: Pythia-2.8B from ``--weights DIR`` (its own tokenizer), the paper's
  hyper-parameters (appendix "LLM Training Details", bold values, and the algorithm captions):
  AdamW lr 1e-6 with batch 128 for SFT and 64 for MargE (lambda 10), RMSprop lr 1e-7 with batch
  64 in bf16 for DPO, one epoch, 200 seeds, 10 iterations, greedy + 6 temperatures x 10 samples,
  j = 2000; MargE's self-normalised weights sum to 1 over the batch (the appendix's formula
  read literally); each MargE/DPO round keeps its best validation-loss checkpoint among those
  whose greedy outputs are >= 90 % well-formed and feasible (the appendix's format gate); data
  parallel over all devices. ``tests/test_llome_presets.py`` checks every
  value against the appendix.
"""

from __future__ import annotations

from typing import Any

from llome_jax import priors
from llome_jax.ehrlich.instances import configuration_name
from llome_jax.llome.config import LoopConfig

__all__ = ["PRESETS", "check_weights_given", "preset", "prior_for_function"]

_SMOKE: dict[str, Any] = {
    "function": "Ehr(8,8)-2-2-2",
    "instance_seed": 1,
    "model": "tiny",
    "rounds": 2,
    "round0_generations": 2,
    "round0_ga": {"num_particles": 200, "mutation_prob": 0.1},
    "finetune": {
        "first_round_learning_rate": 1e-2,
        "learning_rate": 5e-3,
        "dpo_learning_rate": 1e-3,
        "dpo_warmup_steps": 0,
        "epochs": 4,
        "batch_size": 32,
        "max_train_examples": 512,
        "logprob_batch_size": 128,
        "head_on_targets": False,
    },
    "num_seeds": 8,
    "temperatures": (0.8, 1.2),
    "refine": {"num_iterations": 2, "num_samples": 4, "batch_size": 256},
    "labels_per_round": 32,
    "min_unique_candidates": 1,
}

_CPU: dict[str, Any] = {
    "model": "tiny",
    "text_format": "compact",
    "rounds": 10,
    "round0_generations": 10,
    "round0_ga": {"num_particles": 1000},
    "finetune": {
        "first_round_learning_rate": 1e-2,
        "first_round_epochs": 12,
        "first_round_min_steps": 240,
        "learning_rate": 3e-3,
        "dpo_learning_rate": 3e-4,
        "dpo_warmup_steps": 10,
        "weight_decay": 0.01,
        "epochs": 4,
        "batch_size": 64,
        "max_train_examples": 2048,
        "logprob_batch_size": 256,
        # A 40-token head: the target window saves nothing measurable (119.6 vs 118.1 ms a
        # step) and off keeps the runs identical to the documented ones.
        "head_on_targets": False,
    },
    "num_seeds": 200,
    "refine": {"num_iterations": 4, "num_samples": 4, "batch_size": 1024},
    "labels_per_round": 2000,
}

_PAPER: dict[str, Any] = {
    "model": "2.8b",
    "rounds": 10,
    "finetune": {
        "learning_rate": 1e-6,
        "dpo_learning_rate": 1e-7,
        "dpo_warmup_steps": 150,
        "weight_decay": 0.01,
        "epochs": 1,
        "batch_size": 64,
        "sft_batch_size": 128,
        "dpo_compute_dtype": "bfloat16",
        "kl_weight": 10.0,
        "marge_weight_norm": "sum",
        "select_checkpoint": True,
        "num_microbatches": 32,
        "logprob_batch_size": 64,
    },
    "num_seeds": 200,
    # KV cache of 2.8B in fp32: 32 layers x 2 x 2560 x 4 B x 132 tokens = 86 MB per row.
    "refine": {"num_iterations": 10, "num_samples": 10, "batch_size": 256},
    "labels_per_round": 2000,
    "data_parallel": True,
}

# The cpu preset started from the shipped prior (llome_jax.priors): round 1 fine-tunes as every
# later round does (the prior already writes the format; 12 epochs at 1e-2 would overwrite it).
_CPU_PRETRAINED: dict[str, Any] = {
    **_CPU,
    "weights": priors.PREFIX + priors.DEFAULT,
    "finetune": {
        **_CPU["finetune"],
        "first_round_learning_rate": None,
        "first_round_epochs": None,
        "first_round_min_steps": 0,
    },
}

#: name -> LoopConfig overrides (nested dicts, as ``configs.override`` and LaMBO-2's presets).
PRESETS: dict[str, dict[str, Any]] = {
    "smoke": _SMOKE,
    "cpu": _CPU,
    "cpu-pretrained": _CPU_PRETRAINED,
    "paper": _PAPER,
}


def preset(name: str, **overrides: Any) -> LoopConfig:
    """The :class:`LoopConfig` of preset ``name`` with ``overrides`` applied.

    ``paper`` is meant to fine-tune a pretrained Pythia-2.8B (``weights``); without them the
    configuration can still be built, shown and changed, and :func:`check_weights_given` says
    what is missing before a run (the command line calls it).

    Raises:
      ValueError: unknown preset or field.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    settings = dict(PRESETS[name])
    if name == "cpu-pretrained" and "function" in overrides:
        settings["weights"] = priors.PREFIX + prior_for_function(overrides["function"])
    return LoopConfig().replace(**settings).replace(**overrides, preset=name)


def prior_for_function(function: str) -> str:
    """The shipped prior that ``cpu-pretrained`` starts from on ``function`` (a paper name or an
    ``Ehr(v,L)-c-k-q`` name): the one pretrained on its configuration, else :data:`priors.DEFAULT`
    (which :func:`llome_jax.llome.config.check_prior_fits` then refuses for a configuration it was
    not pretrained on, naming the ``pretrain`` command)."""
    try:
        configuration = configuration_name(function)
    except ValueError:  # an instance file or an invalid name: validate_config says what is wrong
        return priors.DEFAULT
    shipped = priors.shipped_for(configuration)
    return shipped[0] if shipped else priors.DEFAULT


def check_weights_given(config: LoopConfig) -> None:
    """Refuse to run the ``paper`` preset without ``weights`` (it would train a 2.8B model from
    scratch instead of fine-tuning the pretrained one).

    Raises:
      ValueError: ``config.preset == "paper"`` and no ``weights``.
    """
    if config.preset == "paper" and not config.weights:
        raise ValueError(
            "the paper preset fine-tunes a pretrained Pythia-2.8B: pass --weights DIR (a Hugging "
            "Face GPT-NeoX checkpoint directory, e.g. EleutherAI/pythia-2.8b downloaded locally)"
        )
