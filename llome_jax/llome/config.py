"""LLOME's static configuration: :class:`LoopConfig`, the loss schedule and input validation.

``LoopConfig`` is a frozen, hashable dataclass that fixes every shape and setting of a run
(``llome_jax.llome.presets`` names the usual ones). The loss schedule says which loss trains each
round (``"sft:1,marge:9"``); the losses themselves live in :mod:`llome_jax.training.losses`.
:func:`validate_config` checks everything user input can get wrong before any work is done.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from collections.abc import Mapping
from typing import Any, ClassVar

from llome_jax import configs, ehrlich, priors
from llome_jax.llome.data import PropEnConfig
from llome_jax.llome.filter import FilterConfig
from llome_jax.llome.refine import RefineConfig
from llome_jax.llome.temperature import DEFAULT_TEMPERATURES
from llome_jax.lm.pythia import PythiaConfig
from llome_jax.optimizers.base import BenchmarkSettings
from llome_jax.training.loss_registry import LOSS_SPECS

#: Outputs one round of the paper's refinement generates: n_s = 200 seeds x n_i = 10 iterations x
#: (greedy + 6 temperatures x n_o = 10 samples), the size its stop rule's n_s = 200 was set for.
PAPER_OUTPUTS_PER_ROUND = 200 * 10 * (1 + 6 * 10)

__all__ = [
    "FLAT_KEYS",
    "LOSS_NAMES",
    "PAPER_OUTPUTS_PER_ROUND",
    "FinetuneConfig",
    "LoopConfig",
    "check_prior_fits",
    "check_weights_dir",
    "loss_for_round",
    "parse_schedule",
    "schedule_for_loss",
    "validate_config",
]

#: Losses a round can train with: the registry ``llome_jax.training.loss_registry.LOSS_SPECS`` (read at
#: each check, so a loss registered with ``loss_registry.register_loss`` is accepted everywhere).
LOSS_NAMES: Mapping[str, Any] = LOSS_SPECS


# --------------------------------------------------------------------------------------------
# Loss schedule
# --------------------------------------------------------------------------------------------
def parse_schedule(text: str) -> tuple[tuple[str, int], ...]:
    """Parse ``"sft:1,marge:9"`` into ``(("sft", 1), ("marge", 9))``.

    Raises:
      ValueError: unknown loss, missing/non-positive count, or empty text.

    Example:
      >>> parse_schedule("sft:1, marge:9")
      (('sft', 1), ('marge', 9))
    """
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ValueError("empty --schedule; write e.g. 'sft:1,marge:9'")
    out = []
    for part in parts:
        name, sep, count = part.partition(":")
        name = name.strip().lower()
        if name not in LOSS_NAMES:
            raise ValueError(
                f"unknown loss {name!r} in --schedule; choose from {sorted(LOSS_NAMES)}"
            )
        try:
            rounds = int(count) if sep else -1
        except ValueError:
            rounds = -1
        if rounds < 1:
            raise ValueError(
                f"--schedule entry {part!r} needs a positive round count, e.g. '{name}:3'"
            )
        out.append((name, rounds))
    return tuple(out)


def schedule_for_loss(loss: str, rounds: int | None = None) -> tuple[tuple[str, int], ...]:
    """The paper's schedule for ``--loss``: SFT for round 1, then ``loss`` for every later round.

    Returned in a canonical form that does not depend on the number of rounds (the last entry
    repeats), so that a run resumed with more ``--rounds`` keeps the same configuration:
    ``(("sft", 1), (loss, 1))``; ``(("sft", 1),)`` for SFT. ``rounds`` is accepted for
    backwards compatibility and ignored.
    """
    del rounds
    loss = str(loss).lower()
    if loss not in LOSS_NAMES:
        raise ValueError(f"unknown loss {loss!r}; choose one of {sorted(LOSS_NAMES)}")
    if loss == "sft":
        return (("sft", 1),)
    return (("sft", 1), (loss, 1))


def loss_for_round(schedule: tuple[tuple[str, int], ...], round_index: int) -> str:
    """Loss of round ``round_index`` (1-based); rounds past the schedule repeat its last loss.

    Example:
      >>> [loss_for_round((("sft", 1), ("marge", 1)), r) for r in (1, 2, 10)]
      ['sft', 'marge', 'marge']
    """
    if round_index < 1:
        raise ValueError(f"rounds are numbered from 1; got {round_index}")
    done = 0
    for name, count in schedule:
        done += count
        if round_index <= done:
            return name
    return schedule[-1][0]


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """How each round trains the policy (paper values in brackets).

    Attributes:
      learning_rate / dpo_learning_rate, weight_decay, warmup_steps / dpo_warmup_steps, epochs,
        batch_size (loss units per optimizer step: pairs, DPO triples), num_microbatches,
        max_grad_norm: training [1e-6 / 1e-7, 0.01, 0 / 150, 1, 64, -, 1.0]. AdamW for
        SFT/MargE/REINFORCE, torch-RMSprop for DPO (``train_optimizer.paper_optimizer``),
        linear decay, fresh optimizer every round (the reference re-initialises it with each
        trainer).
      sft_batch_size: batch size of SFT rounds (``None``: ``batch_size``) [128: the appendix's
        SFT search picked 128, MargE and DPO 64].
      dpo_compute_dtype: matmul dtype of DPO training and its reference log-probs ("float32" /
        "bfloat16"; parameters and optimizer state stay float32) [bfloat16: "Due to
        computational constraints, we train with bf16"].
      first_round_epochs: epochs of round 1 (SFT on the GA data; ``None``: ``epochs``). A
        from-scratch model must first learn the output format there.
      first_round_learning_rate: learning rate of round 1 (``None``: ``learning_rate``).
      first_round_min_steps: round 1 trains for at least this many optimizer steps (more epochs
        when the GA data gives few pairs: f2's GA data gives only ~500 after the infeasible cap).
      max_train_examples: random subset of the round's pairs/triples (``None``: all), a CPU knob.
      marge_group_size: self-normalisation group (``None``: the whole batch, paper; 1: reference).
      kl_weight: MargE/REINFORCE ``lambda`` override (``None``: 10).
      reward_beta: MargE/REINFORCE rationality ``beta`` override, the factor on the reward in
        the target ``pi* ∝ exp(beta r)`` (``None``: the loss's 1, the authors' value).
      marge_weight_norm: MargE's self-normalised weights ``w~`` "sum" to 1 over the batch (the
        appendix "Self-Normalization" read literally: reward term ``(1/B) sum w~ c``) or have
        "mean" 1 (``sum w~ c``, the self-normalised importance-sampling estimate, B times larger
        relative to the lambda term). Identical for groups of one.
      logprob_batch_size: rows per reference log-prob pass.
      head_on_targets: apply the policy's output head only at the positions that score a
        completion token (``TrainBatch.target_window``; about half of each row), for training and
        the reference log-probs. Same values up to float summation order. It pays with a wide
        vocabulary (Pythia's 50K: the Pythia-70M SFT step is 1.2-1.4x faster); the ``cpu`` and ``smoke``
        presets turn it off (a 40-token head saves nothing measurable, and off keeps their runs
        identical to the documented ones).
      select_checkpoint: keep the best checkpoint of a round instead of the last
        (``llome_jax.llome.selection``) [off; the authors' code: on for MargE and DPO, the paper
        applies the same gate to its hyper-parameter search]. The round's units are split 95 % /
        at most 100 (``data.train_val_split``); at every 20 % of the steps the validation loss
        and the greedy generations of ``selection_num_prompts`` validation prompts are computed;
        the kept checkpoint has the lowest validation loss among those whose outputs are >=
        ``selection_threshold`` valid (parsable, length ``L``, in range) and feasible; if none
        passes, the last. Off, nothing changes.
      selection_threshold: the gate's fraction [0.9: "correct format >90% of the time"].
      selection_losses: the losses whose rounds select [("marge", "dpo"); SFT keeps the last].
      selection_num_prompts: validation prompts generated per candidate [reference: the first
        ~16 of the <= 100 validation rows].
    """

    learning_rate: float = 1e-6
    dpo_learning_rate: float = 1e-7
    weight_decay: float = 0.01
    warmup_steps: int = 0
    dpo_warmup_steps: int = 150
    epochs: int = 1
    first_round_epochs: int | None = None
    first_round_learning_rate: float | None = None
    first_round_min_steps: int = 0
    batch_size: int = 64
    sft_batch_size: int | None = None
    dpo_compute_dtype: str = "float32"
    num_microbatches: int = 1
    max_grad_norm: float | None = 1.0
    max_train_examples: int | None = None
    marge_group_size: int | None = None
    kl_weight: float | None = None
    reward_beta: float | None = None
    marge_weight_norm: str = "mean"
    logprob_batch_size: int = 64
    head_on_targets: bool = True
    select_checkpoint: bool = False
    selection_threshold: float = 0.9
    selection_losses: tuple[str, ...] = ("marge", "dpo")
    selection_num_prompts: int = 64

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "num_microbatches", "logprob_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}")
        for name, allowed in (
            ("marge_weight_norm", ("sum", "mean")),
            ("dpo_compute_dtype", ("float32", "bfloat16")),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}; got {getattr(self, name)!r}")
        if self.learning_rate < 0 or self.dpo_learning_rate < 0:
            raise ValueError("learning rates must be non-negative")
        if self.sft_batch_size is not None and (
            isinstance(self.sft_batch_size, bool)
            or not isinstance(self.sft_batch_size, int)
            or self.sft_batch_size < 1
        ):
            raise ValueError(
                f"sft_batch_size must be a positive integer or None; got {self.sft_batch_size!r}"
            )
        if self.max_train_examples is not None and self.max_train_examples < 1:
            raise ValueError("max_train_examples must be >= 1 or None")
        beta = self.reward_beta
        if beta is not None and (
            isinstance(beta, bool) or not isinstance(beta, int | float) or not 0 < beta < math.inf
        ):
            raise ValueError(f"reward_beta must be a positive number or None; got {beta!r}")
        self._check_selection()

    def _check_selection(self) -> None:
        if not isinstance(self.select_checkpoint, bool):
            raise ValueError(
                f"select_checkpoint must be True or False; got {self.select_checkpoint!r}"
            )
        t = self.selection_threshold
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0.0 <= t <= 1.0:
            raise ValueError(f"selection_threshold must be a fraction in [0, 1]; got {t!r}")
        losses = self.selection_losses
        if (
            not isinstance(losses, tuple)
            or not losses
            or any(name not in LOSS_NAMES for name in losses)
            or len(set(losses)) != len(losses)
        ):
            raise ValueError(
                f"selection_losses must be a non-empty tuple of distinct losses from "
                f"{sorted(LOSS_NAMES)}; got {losses!r}"
            )
        n = self.selection_num_prompts
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"selection_num_prompts must be a positive integer; got {n!r}")

    def batch_size_for(self, loss: str) -> int:
        """Loss units per optimizer step of a round trained with ``loss``."""
        if loss == "sft" and self.sft_batch_size is not None:
            return self.sft_batch_size
        return self.batch_size


@dataclasses.dataclass(frozen=True)
class LoopConfig(BenchmarkSettings):
    """Static configuration of a LLOME run (hashable; see ``llome_jax.llome.presets``): the
    shared settings (:class:`~llome_jax.optimizers.base.BenchmarkSettings`) and LLOME's own.

    The phases of a round have their own configurations, the ones their functions take:
    ``round0_ga`` (:class:`~llome_jax.ga.GAConfig`, round 0), ``propen``
    (:class:`~llome_jax.llome.data.PropEnConfig`, DatasetFormatting), ``finetune``
    (:class:`FinetuneConfig`), ``refine`` (:class:`~llome_jax.llome.refine.RefineConfig`,
    IterativeRefinement) and ``filter`` (:class:`~llome_jax.llome.filter.FilterConfig`). Replace
    settings with :meth:`replace` (dotted keys, nested dicts, or the flat names of
    :data:`FLAT_KEYS`).

    Attributes (paper values in brackets):
      function / instance_seed: the Ehrlich function (``ehrlich.resolve_function``) [f2].
      schedule: loss per round, ``(("sft", 1), ("marge", 9))``; past its end the last loss repeats
        (``replace`` also accepts the string ``"sft:1,marge:9"``).
      rounds: LLOME rounds ``T`` [10]. seed: run seed (GA, init, every sampling step).
      labels_per_round: ``j`` [2000], the sequences the Filter labels a round. It is the one
        name of ``j``: ``filter.num_selected``, which the Filter step reads, is derived from it
        (never written to ``config.json``; given as a setting it sets ``labels_per_round``).
      round0_generations: ``n0`` [10]; ``round0_ga``: round 0's GA [1000 particles, mutation
        0.005].
      model: ``PythiaConfig`` preset name for a from-scratch model, with ``model_overrides``;
        ``weights``: a GPT-NeoX directory for ``from_pretrained`` (its tokenizer too) instead.
      text_format: how sequences are written for the model: "list", the paper's JSON list
        ``[3, 1, 5]``, or "compact", ``[3 1 5]`` without the comma tokens (a model on the
        Ehrlich tokenizer only: from scratch, or ``--weights`` from ``llome-jax pretrain``; half
        the tokens to train on and to generate, see ``lm.text_format``).
      training_data: what a round trains on and takes its seeds from: "latest" = ``S_i``, the
        sequences labelled in the previous round (Algorithm 1 of the appendix, the authors' code);
        "cumulative" = every labelled sequence so far, ``D^(i)`` of the main text (Sec. 4: "the
        cumulative dataset ... containing all previously evaluated sequences"; seeds are "the
        top-scoring historical sequences").
      num_seeds, seed_rule: ``n_s`` [200] seeds of IterativeRefinement, "paper" = TopK(S_i) or
        "reference" = the top training rows.
      temperatures [0.6..1.6]; adaptive_temperature / reset_temperature_at_phase: offsets
        +0.6/+0.4/+0.2 from the previous round's mean Hamming distance; the reference resets it
        when the loss changes.
      filter_likelihood: likelihood the Filter thresholds ("raw" pi_theta(x), paper /
        "processed", reference).
      exclude_labelled: the Filter drops candidates that are already labelled (GA data, earlier
        rounds, seeds) before it draws j, so no sequence is labelled twice (paper: the labelled
        set is a set); ``False`` is the authors' code, which can relabel earlier sequences.
      min_unique_candidates / min_unique_rule: a round that produced fewer unique valid
        candidates than :attr:`LoopConfig.min_candidates` stops the run (the paper: "we stop
        when fewer than n_s unique candidates are generated"). ``min_unique_candidates``, when
        set, is that number; otherwise ``min_unique_rule`` says: "scaled" (default) keeps the
        paper's ratio of ``n_s`` to the outputs a round generates, ``ceil(n_s * outputs /
        122,000)`` with ``outputs = n_s n_i (g + |T| n_o)`` (the paper's 200 x 10 x 61 =
        122,000; :data:`PAPER_OUTPUTS_PER_ROUND`): 200 under the ``paper`` preset, 33 under
        ``cpu``'s 20,000 outputs; "paper" is ``n_s`` whatever the round generates (200 of 20,000
        under ``cpu``: six times stricter than the paper's rule).
      data_parallel: shard training/log-prob/generation batches over all devices.
      accounting: "pay_once" (default: a label is paid once per distinct sequence; round 0 pays
        the GA's distinct sequences) or "every_evaluation" (the paper's: round 0 pays
        ``n0 n``); ``llome_jax.oracle``.
      constraint_queries: "off" (default: the Filter knows feasibility only from labels, so its
        infeasible cap acts on labelled rows only, and the checkpoint gate's check, as in the
        authors' code, is the only ``is_feasible`` call, counted) or "free" (refinement and the
        Filter ask ``is_feasible`` about every candidate, counted).
      preset: the preset the configuration came from (recorded).
    """

    #: old names (``config_version`` 7 and before) -> today's
    RENAMED_SETTINGS: ClassVar[Mapping[str, str]] = {
        "ga_generations": "round0_generations",
        "ga": "round0_ga",
        "filter.num_selected": "labels_per_round",
    }
    DERIVED_SETTINGS: ClassVar[tuple[str, ...]] = ("filter.num_selected",)

    schedule: tuple[tuple[str, int], ...] = (("sft", 1), ("marge", 9))
    model: str = "small"
    model_overrides: tuple[tuple[str, Any], ...] = ()
    weights: str | None = None
    text_format: str = "list"
    training_data: str = "latest"
    propen: PropEnConfig = dataclasses.field(default_factory=PropEnConfig)
    finetune: FinetuneConfig = dataclasses.field(default_factory=FinetuneConfig)
    num_seeds: int = 200
    seed_rule: str = "paper"
    temperatures: tuple[float, ...] = DEFAULT_TEMPERATURES
    adaptive_temperature: bool = True
    reset_temperature_at_phase: bool = False
    refine: RefineConfig = dataclasses.field(default_factory=RefineConfig)
    filter: FilterConfig = dataclasses.field(default_factory=FilterConfig)
    filter_likelihood: str = "raw"
    exclude_labelled: bool = True
    min_unique_candidates: int | None = None
    min_unique_rule: str = "scaled"
    data_parallel: bool = False
    preset: str = "custom"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.filter.num_selected != self.labels_per_round:  # derived: labels_per_round's copy
            synced = dataclasses.replace(self.filter, num_selected=self.labels_per_round)
            object.__setattr__(self, "filter", synced)
        value = self.num_seeds
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"num_seeds must be a positive integer; got {value!r}")
        if not self.schedule:
            raise ValueError("the loss schedule is empty")
        for name, count in self.schedule:
            if name not in LOSS_NAMES or not isinstance(count, int) or count < 1:
                raise ValueError(f"bad schedule entry {(name, count)!r}")
        for name, allowed in (
            ("seed_rule", ("paper", "reference")),
            ("filter_likelihood", ("raw", "processed")),
            ("training_data", ("latest", "cumulative")),
            ("text_format", ("list", "compact")),
            ("min_unique_rule", ("scaled", "paper")),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}; got {getattr(self, name)!r}")
        if not self.temperatures or any(t <= 0 for t in self.temperatures):
            raise ValueError(f"temperatures must be positive; got {self.temperatures}")
        if self.weights is None and not self.model:
            raise ValueError("set a model preset name or --weights")

    # ------------------------------------------------------------------ helpers
    def loss(self, round_index: int) -> str:
        """Loss of round ``round_index`` (1-based)."""
        return loss_for_round(self.schedule, round_index)

    @property
    def outputs_per_round(self) -> int:
        """Outputs a round's refinement generates, ``n_s n_i (g + |T| n_o)`` (before any
        filter; the paper's 200 x 10 x (1 + 6 x 10) = 122,000)."""
        per_seed = int(self.refine.greedy) + len(self.temperatures) * self.refine.num_samples
        return self.num_seeds * self.refine.num_iterations * per_seed

    @property
    def min_candidates(self) -> int:
        """The fewest unique valid candidates a round may generate and the run go on
        (``min_unique_candidates`` / ``min_unique_rule``)."""
        if self.min_unique_candidates is not None:
            return self.min_unique_candidates
        if self.min_unique_rule == "paper":
            return self.num_seeds
        return math.ceil(self.num_seeds * self.outputs_per_round / PAPER_OUTPUTS_PER_ROUND)

    def replace(self, **overrides: Any) -> LoopConfig:
        """This configuration with settings replaced: dotted keys (``**{"finetune.epochs": 4}``),
        nested dicts (``finetune={"epochs": 4}``) or the flat names of :data:`FLAT_KEYS`
        (``epochs=4``; ``filter_rule="reference"`` sets the authors' Filter).

        Raises:
          ValueError: an unknown key, a value of the wrong type, or an invalid combination.
        """
        return configs.override(self, _expand_flat_keys(overrides))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly nested dict (``config.json``)."""
        out = configs.to_dict(self)
        out["schedule"] = ",".join(f"{n}:{c}" for n, c in self.schedule)
        out["model_overrides"] = {k: v for k, v in self.model_overrides}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoopConfig:
        """The configuration :meth:`to_dict` wrote (or a flat one from before the nesting)."""
        return cls().replace(**data)


#: The flat setting names of LoopConfig before its phases had their own configurations, and
#: where each lives now: ``LoopConfig.replace`` and ``presets.preset`` accept them (an old run
#: directory's flat ``config.json`` is read by ``llome_jax.run.migrations``).
FLAT_KEYS: dict[str, str] = {
    "ga_particles": "round0_ga.num_particles",
    "ga_mutation_prob": "round0_ga.mutation_prob",
    **{f.name: f"finetune.{f.name}" for f in dataclasses.fields(FinetuneConfig)},
    "num_neighbours": "propen.num_neighbours",
    "max_distance": "propen.max_distance",
    "symmetric_pairs": "propen.symmetric",
    "max_infeasible_fraction": "propen.max_infeasible_fraction",
    "num_iterations": "refine.num_iterations",
    "num_samples": "refine.num_samples",
    "greedy": "refine.greedy",
    "top_k": "refine.top_k",
    "generation_batch_size": "refine.batch_size",
    "next_input": "refine.next_input",
    "selection_likelihood": "refine.selection_likelihood",
    "num_selected": "labels_per_round",
}


def _expand_flat_keys(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Flat names as dotted keys; ``filter_rule`` ("paper"/"reference") as the Filter's fields
    (before any explicit ``filter.*`` key, which then wins)."""
    expanded: dict[str, Any] = {}
    rule = overrides.get("filter_rule")
    if rule is not None:
        if rule not in ("paper", "reference"):
            raise ValueError(f"filter_rule must be 'paper' or 'reference'; got {rule!r}")
        rule_cfg = FilterConfig.paper() if rule == "paper" else FilterConfig.reference()
        for f in dataclasses.fields(FilterConfig):
            if f.name != "num_selected":
                expanded[f"filter.{f.name}"] = getattr(rule_cfg, f.name)
    for key, value in overrides.items():
        if key == "schedule" and isinstance(value, str):
            value = parse_schedule(value)
        if key != "filter_rule":
            expanded[FLAT_KEYS.get(key, key)] = value
    return expanded


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------
def check_weights_dir(path: str) -> pathlib.Path:
    """A GPT-NeoX checkpoint directory (HF ``config.json`` with ``model_type == "gpt_neox"``);
    ``"prior:NAME"`` is a prior shipped with the package (``llome_jax.priors``).

    Raises:
      FileNotFoundError: the directory or its ``config.json`` is missing.
      ValueError: it is not a GPT-NeoX checkpoint, or an unknown prior.
    """
    directory = priors.resolve(path) if priors.is_prior(path) else pathlib.Path(path)
    if not directory.is_dir():
        raise FileNotFoundError(f"--weights {directory}: no such directory")
    config = directory / "config.json"
    if not config.is_file():
        raise FileNotFoundError(
            f"--weights {directory}: no config.json; expected a Hugging Face GPT-NeoX (Pythia) "
            "checkpoint directory (config.json, *.safetensors, tokenizer files)"
        )
    try:
        model_type = json.loads(config.read_text()).get("model_type")
    except (json.JSONDecodeError, AttributeError) as err:
        raise ValueError(f"--weights {directory}: unreadable config.json ({err})") from None
    if model_type != "gpt_neox":
        raise ValueError(
            f"--weights {directory}: model_type is {model_type!r}, not 'gpt_neox' (Pythia)"
        )
    return directory


def check_prior_fits(
    weights: str,
    configuration: str,
    instance_seed: int | None,
    text_format: str,
    *,
    function: Any = None,
) -> None:
    """Refuse a checkpoint of ``llome-jax pretrain`` (one with a ``pretrain.json``) that does not
    fit the run: pretrained on another Ehrlich configuration (``configuration``, e.g.
    ``"Ehr(32,32)-4-4-4"``), in another text format, or on the very instance being optimized
    (labels of that function nobody paid for: the information contract), by seed or, given the
    run's Ehrlich instance ``function``, by label digest (an instance file too;
    ``llome_jax.priors.pretrained_instance``). Checkpoints without ``pretrain.json`` (a Pythia
    download) pass.

    Raises:
      ValueError: one line saying what does not fit and what to use instead.
    """
    made = priors.provenance(check_weights_dir(weights))
    if not made:
        return
    if made.get("function") != configuration:
        shipped = priors.shipped_for(configuration)
        hint = (
            f"use --weights {priors.PREFIX}{shipped[0]}"
            if shipped
            else f"pretrain one with `llome-jax pretrain --function '{configuration}' --out DIR` "
            "and pass --weights DIR/weights"
        )
        raise ValueError(
            f"--weights {weights} was pretrained on {made.get('function')} instances, but this run "
            f"optimizes an instance of {configuration}; {hint}"
        )
    if made.get("text_format", text_format) != text_format:
        raise ValueError(
            f"--weights {weights} was pretrained on the {made['text_format']!r} text format, but "
            f"this run writes {text_format!r}; --set text_format={made['text_format']}"
        )
    seeds = made.get("instance_seeds", {})
    try:
        seen = priors.pretrained_instance(made, function, instance_seed)
    except ValueError as error:
        raise ValueError(f"--weights {weights}: {error}") from None
    if seen is not None:
        if seen == instance_seed:
            given = ""
        elif instance_seed is None:
            given = " (the same labels, given without a seed, e.g. as an instance file)"
        else:
            given = f" (the same labels as instance seed {instance_seed:,})"
        raise ValueError(
            f"--weights {weights} was pretrained on instance seeds {seeds['first']:,}-"
            f"{seeds['last']:,}, which include this run's instance {seen:,}{given}; optimize an "
            "instance it did not see (pretraining uses seeds >= 1,000,000 only)"
        )


def validate_config(cfg: LoopConfig, *, check_function: bool = True) -> None:
    """Eager checks of everything that can be wrong in user input (before any work or writes);
    ``check_function=False`` when an objective replaces ``cfg.function``."""
    function = ehrlich.resolve_function(cfg.function, cfg.instance_seed) if check_function else None
    if cfg.weights is not None:
        check_weights_dir(cfg.weights)
        if function is not None:
            check_prior_fits(
                cfg.weights, function.name, cfg.instance_seed, cfg.text_format, function=function
            )
    else:
        PythiaConfig.preset(cfg.model, vocab_size=64, **dict(cfg.model_overrides))
