"""The LLOME bilevel loop (paper Alg. 1 "LLOME"; App. "Algorithms"): state, one round, the driver.

One round ``i -> i + 1`` (:func:`llome_round`), for the latest labelled set ``S_i`` (round 0: the
deduplicated archive of ``n0`` GA generations)::

    D_i       = DatasetFormatting(S_i)               # PropEn pairs (SFT/MargE/REINFORCE) or triples (DPO)
    theta_i+1 = Train(theta_i, D_i; loss_i)          # reference = theta_i (the previous round's policy)
    X_i+1     = IterativeRefinement(pi, TopK(S_i))   # temperatures T + offset(mean Hamming of round i)
    X_i+1     = Filter(X_i+1 minus S, j)             # new only; likelihood quantile, infeasible cap
    S_i+1     = {(x, f(x)) : x in X_i+1}             # the only oracle calls of the round
    S         = S u S_i+1                            # the archive (every labelled sequence)

With ``LoopConfig.training_data = "cumulative"`` the round trains on, and takes its seeds from,
the whole archive ``S`` (the main text's ``D^(i)``) instead of ``S_i``.

``loss_i`` comes from the loss schedule (``--schedule sft:1,marge:9``; ``--loss marge`` means SFT
for the first round, MargE afterwards, as the paper). Everything a round needs is in
:class:`LoopState` (a pytree) and the static :class:`LoopConfig`; :func:`llome_round` is a
deterministic function of the two, so a run resumed from the checkpoint of round ``r`` produces
the same numbers as an uninterrupted one.

The driver :func:`run` adds the run directory (``rounds.jsonl``, ``evaluated.csv``,
``regret.png``, ``config.json``) and one orbax checkpoint per round. Order per round: compute,
append the labelled sequences and the round record, then checkpoint; a resume rolls the logs back
to the newest readable checkpoint and recomputes the rest (identically), so no labelled sequence is
lost or duplicated.

Oracle accounting (paper Fig. 3: "the first 10K test function evaluations ... correspond to the
solutions produced by the GA pre-solver"): ``num_evaluations = n0 * n_GA + sum_i |S_i|``.
``evaluated.csv`` holds the GA's *distinct* sequences (round 0) and every sequence labelled by a
round. Feasibility checks of candidates inside refinement/Filter (``ehrlich.is_feasible``, the
constraint check, not the objective) are not counted as oracle calls.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import pathlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llome_jax.llome.schedule import DEFAULT_TEMPERATURES

__all__ = [
    "LOSS_NAMES",
    "STOP_REASONS",
    "LoopConfig",
    "LoopState",
    "RunResult",
    "abstract_state",
    "init_state",
    "llome_round",
    "loss_for_round",
    "parse_schedule",
    "run",
    "schedule_for_loss",
]

#: Losses a round can train with (``llome_jax.losses.LOSSES``).
LOSS_NAMES: tuple[str, ...] = ("sft", "marge", "dpo", "reinforce")

#: Settings added after the first LLOME runs, with the value that reproduces the earlier behaviour:
#: a run directory whose ``config.json`` lacks one resumes only with that value.
LEGACY_VALUES: dict[str, Any] = {
    "exclude_labelled": False,
    "marge_weight_norm": "mean",
    "training_data": "latest",
    "sft_batch_size": None,
    "dpo_compute_dtype": "float32",
}

#: ``LoopState.stop_code`` -> message.
STOP_REASONS: dict[int, str] = {
    0: "",
    1: "the optimum (f = 1) was found",
    2: "too few unique valid candidates were generated to continue",
    3: "the labelled set yields no training pairs",
}


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
            raise ValueError(f"unknown loss {name!r} in --schedule; choose from {list(LOSS_NAMES)}")
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
        raise ValueError(f"unknown loss {loss!r}; choose one of {list(LOSS_NAMES)}")
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
class LoopConfig:
    """Static configuration of a LLOME run (hashable; see ``llome_jax.llome.presets``).

    Attributes (paper values in brackets):
      function / instance_seed: the Ehrlich function (``ehrlich.resolve_function``) [f2].
      schedule: loss per round, ``(("sft", 1), ("marge", 9))``; past its end the last loss repeats.
      rounds: LLOME rounds ``T`` [10]. seed: run seed (GA, init, every sampling step).
      ga_generations / ga_particles / ga_mutation_prob: ``n0`` [10], the GA population [1000]
        and its mutation probability [0.005].
      model: ``PythiaConfig`` preset name for a from-scratch model, with ``model_overrides``;
        ``weights``: a GPT-NeoX directory for ``from_pretrained`` (its tokenizer too) instead.
      learning_rate / dpo_learning_rate, weight_decay, warmup_steps / dpo_warmup_steps, epochs,
        batch_size (loss units per optimizer step: pairs, DPO triples), num_microbatches,
        max_grad_norm: training [1e-6 / 1e-7, 0.01, 0 / 150, 1, 64, -, 1.0]. AdamW for
        SFT/MargE/REINFORCE, torch-RMSprop for DPO (``train.paper_optimizer``), linear decay,
        fresh optimizer every round (the reference re-initialises it with each trainer).
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
      max_train_examples: random subset of the round's pairs/triples (``None``: all) - a CPU knob.
      training_data: what a round trains on and takes its seeds from: "latest" = ``S_i``, the
        sequences labelled in the previous round (Algorithm 1 of the appendix, the authors' code);
        "cumulative" = every labelled sequence so far, ``D^(i)`` of the main text (Sec. 4: "the
        cumulative dataset ... containing all previously evaluated sequences"; seeds are "the
        top-scoring historical sequences").
      marge_group_size: self-normalisation group (``None``: the whole batch, paper; 1: reference).
      kl_weight: MargE/REINFORCE ``lambda`` override (``None``: 10).
      marge_weight_norm: MargE's self-normalised weights ``w~`` "sum" to 1 over the batch (the
        appendix "Self-Normalization" read literally: reward term ``(1/B) sum w~ c``) or have
        "mean" 1 (``sum w~ c``, the self-normalised importance-sampling estimate, B times larger
        relative to the lambda term). Identical for groups of one.
      num_seeds, seed_rule ("paper": TopK(S_i) / "reference": top training rows), num_iterations,
        num_samples, temperatures, greedy, top_k, next_input ("paper" / "reference"),
        selection_likelihood ("raw" pi_theta, paper / "processed" temperature+top-k log-probs,
        reference), generation_batch_size: IterativeRefinement [200, 10, 10, 0.6..1.6, yes, 50].
      filter_likelihood: likelihood the Filter thresholds ("raw" pi_theta(x), paper /
        "processed", reference).
      adaptive_temperature / reset_temperature_at_phase: offsets +0.6/+0.4/+0.2 from the previous
        round's mean Hamming distance; the reference resets it when the loss changes.
      num_selected (j), filter_rule ("paper" / "reference"): Filter [2000].
      exclude_labelled: the Filter drops candidates that are already labelled (GA data, earlier
        rounds, seeds) before it draws j, so no sequence is labelled twice (paper: the labelled
        set is a set); ``False`` is the authors' code, which can relabel earlier sequences.
      num_neighbours, max_distance, symmetric_pairs, max_infeasible_fraction: PropEn [30, 0.25,
        paper: directed, 0.1].
      min_unique_candidates: stop when a round produced fewer unique valid candidates (``None``:
        ``num_seeds``).
      data_parallel: shard training/log-prob/generation batches over all devices.
      select_checkpoint: keep the best checkpoint of a round instead of the last
        (``llome_jax.llome.selection``) [off; the authors' code: on for MargE and DPO, the paper
        applies the same gate to its hyper-parameter search]. The round's units are split 95 % /
        at most 100 (``data.train_val_split``); at every 20 % of the steps the validation loss
        and the greedy generations of ``selection_num_prompts`` validation prompts are computed;
        the kept checkpoint has the lowest validation loss among those whose outputs are >=
        ``selection_threshold`` valid (parsable, length ``L``, in range) and feasible; if none
        passes, the last. Off, nothing changes (records and ``config.json`` included).
      selection_threshold: the gate's fraction [0.9: "correct format >90% of the time"].
      selection_losses: the losses whose rounds select [("marge", "dpo"); SFT keeps the last].
      selection_num_prompts: validation prompts generated per candidate [reference: the first
        ~16 of the <= 100 validation rows].
      preset: the preset the configuration came from (recorded).
    """

    function: str = "f2"
    instance_seed: int | None = None
    schedule: tuple[tuple[str, int], ...] = (("sft", 1), ("marge", 9))
    rounds: int = 10
    seed: int = 0
    ga_generations: int = 10
    ga_particles: int = 1000
    ga_mutation_prob: float = 0.005
    model: str = "small"
    model_overrides: tuple[tuple[str, Any], ...] = ()
    weights: str | None = None
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
    training_data: str = "latest"
    marge_group_size: int | None = None
    kl_weight: float | None = None
    marge_weight_norm: str = "mean"
    logprob_batch_size: int = 64
    num_seeds: int = 200
    seed_rule: str = "paper"
    num_iterations: int = 10
    num_samples: int = 10
    temperatures: tuple[float, ...] = DEFAULT_TEMPERATURES
    adaptive_temperature: bool = True
    reset_temperature_at_phase: bool = False
    greedy: bool = True
    top_k: int | None = 50
    next_input: str = "paper"
    selection_likelihood: str = "raw"
    filter_likelihood: str = "raw"
    generation_batch_size: int = 1024
    num_selected: int = 2000
    filter_rule: str = "paper"
    exclude_labelled: bool = True
    num_neighbours: int = 30
    max_distance: float = 0.25
    symmetric_pairs: bool = False
    max_infeasible_fraction: float | None = 0.1
    min_unique_candidates: int | None = None
    data_parallel: bool = False
    select_checkpoint: bool = False
    selection_threshold: float = 0.9
    selection_losses: tuple[str, ...] = ("marge", "dpo")
    selection_num_prompts: int = 64
    preset: str = "custom"

    def __post_init__(self) -> None:
        positive = (
            "rounds", "ga_generations", "ga_particles", "epochs", "batch_size",
            "num_microbatches", "logprob_batch_size", "num_seeds", "num_iterations",
            "num_samples", "generation_batch_size", "num_selected",
        )  # fmt: skip
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}")
        if not self.schedule:
            raise ValueError("the loss schedule is empty")
        for name, count in self.schedule:
            if name not in LOSS_NAMES or not isinstance(count, int) or count < 1:
                raise ValueError(f"bad schedule entry {(name, count)!r}")
        for name, allowed in (
            ("seed_rule", ("paper", "reference")),
            ("next_input", ("paper", "reference")),
            ("filter_rule", ("paper", "reference")),
            ("selection_likelihood", ("raw", "processed")),
            ("filter_likelihood", ("raw", "processed")),
            ("marge_weight_norm", ("sum", "mean")),
            ("training_data", ("latest", "cumulative")),
            ("dpo_compute_dtype", ("float32", "bfloat16")),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}; got {getattr(self, name)!r}")
        if self.learning_rate < 0 or self.dpo_learning_rate < 0:
            raise ValueError("learning rates must be non-negative")
        if not self.temperatures or any(t <= 0 for t in self.temperatures):
            raise ValueError(f"temperatures must be positive; got {self.temperatures}")
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
        if self.weights is None and not self.model:
            raise ValueError("set a model preset name or --weights")
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
                f"selection_losses must be a non-empty tuple of distinct losses from {LOSS_NAMES}; "
                f"got {losses!r}"
            )
        n = self.selection_num_prompts
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"selection_num_prompts must be a positive integer; got {n!r}")

    # ------------------------------------------------------------------ helpers
    def loss(self, round_index: int) -> str:
        """Loss of round ``round_index`` (1-based)."""
        return loss_for_round(self.schedule, round_index)

    def batch_size_for(self, loss: str) -> int:
        """Loss units per optimizer step of a round trained with ``loss``."""
        if loss == "sft" and self.sft_batch_size is not None:
            return self.sft_batch_size
        return self.batch_size

    @property
    def min_candidates(self) -> int:
        return self.num_seeds if self.min_unique_candidates is None else self.min_unique_candidates

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (``config.json``)."""
        out = dataclasses.asdict(self)
        out["schedule"] = ",".join(f"{n}:{c}" for n, c in self.schedule)
        out["model_overrides"] = {k: v for k, v in self.model_overrides}
        out["temperatures"] = list(self.temperatures)
        out["selection_losses"] = list(self.selection_losses)
        if not self.select_checkpoint:  # runs without the option keep their config.json
            del out["select_checkpoint"], out["selection_threshold"]
            del out["selection_losses"], out["selection_num_prompts"]
        return out


# --------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------
_ARRAY_FIELDS = (
    "round",
    "key",
    "params",
    "reference_params",
    "opt_state",
    "num_evaluations",
    "mean_hamming",
    "temperature_offset",
    "stop_code",
)
_ARCHIVE_FIELDS = ("archive_sequences", "archive_values", "archive_rounds")


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=[*_ARRAY_FIELDS, *_ARCHIVE_FIELDS],
    meta_fields=[],
)
@dataclasses.dataclass(frozen=True)
class LoopState:
    """Everything carried between LLOME rounds (a pytree; checkpointed after each round).

    Attributes:
      round: int32 ``[]`` completed rounds (0 = only the GA seed data).
      key: typed PRNG key of the *next* round (split once per round).
      params: policy parameters (pure dict) after the last round's training.
      reference_params: the reference the last round trained against (the previous policy; at
        round 0 a copy of the initial parameters). The next round's reference is ``params``.
      opt_state: optimizer state at the end of the last round's training (diagnostic: every
        round starts a fresh optimizer, as the reference).
      num_evaluations: int32 ``[]`` oracle calls so far (``n0 * n_GA + sum |S_i|``).
      mean_hamming: float32 ``[]`` mean fractional Hamming distance of the last round's valid
        generations to their inputs (NaN: none yet) - drives the temperature offset.
      temperature_offset: float32 ``[]`` the offset the last round sampled with.
      stop_code: int32 ``[]`` 0 = continue, else a key of ``STOP_REASONS``.
      archive_sequences: int32 ``[N, L]`` every labelled sequence (host numpy, grows per round).
      archive_values: float32 ``[N]`` their values (``-inf`` infeasible).
      archive_rounds: int32 ``[N]`` round of labelling (0 = GA). ``S_i`` = rows of round ``i``.
    """

    round: Any
    key: Any
    params: Any
    reference_params: Any
    opt_state: Any
    num_evaluations: Any
    mean_hamming: Any
    temperature_offset: Any
    stop_code: Any
    archive_sequences: Any
    archive_values: Any
    archive_rounds: Any

    @property
    def round_index(self) -> int:
        return int(self.round)

    def latest(self) -> tuple[np.ndarray, np.ndarray]:
        """``S_i``: ``(sequences [m, L], values [m])`` labelled in the newest round."""
        rows = np.asarray(self.archive_rounds) == int(self.round)
        return np.asarray(self.archive_sequences)[rows], np.asarray(self.archive_values)[rows]


# --------------------------------------------------------------------------------------------
# Resources (built once per configuration)
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Resources:
    fn: Any
    x0: Any
    codec: Any
    model: Any  # an NNX module: graph structure + initial parameters
    mesh: Any


def check_weights_dir(path: str) -> pathlib.Path:
    """A GPT-NeoX checkpoint directory (HF ``config.json`` with ``model_type == "gpt_neox"``).

    Raises:
      FileNotFoundError: the directory or its ``config.json`` is missing.
      ValueError: it is not a GPT-NeoX checkpoint.
    """
    directory = pathlib.Path(path)
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


def validate_config(cfg: LoopConfig) -> None:
    """Eager checks of everything that can be wrong in user input (before any work or writes)."""
    from llome_jax import ehrlich

    ehrlich.resolve_function(cfg.function, cfg.instance_seed)
    if cfg.weights is not None:
        check_weights_dir(cfg.weights)
    else:
        from llome_jax.lm.pythia import PythiaConfig

        PythiaConfig.preset(cfg.model, vocab_size=64, **dict(cfg.model_overrides))
    from llome_jax.ga import GAConfig

    GAConfig(num_particles=cfg.ga_particles, mutation_prob=cfg.ga_mutation_prob)


@functools.lru_cache(maxsize=4)
def _resources(cfg: LoopConfig) -> _Resources:
    from flax import nnx

    from llome_jax import ehrlich, parallel
    from llome_jax.lm.tokenizer import SequenceCodec, load_tokenizer, make_ehrlich_tokenizer

    fn = ehrlich.resolve_function(cfg.function, cfg.instance_seed)
    x0 = ehrlich.resolve_initial_solution(cfg.function, cfg.instance_seed)
    num_states, length = fn.config.num_states, fn.config.dim
    if cfg.weights is not None:
        from llome_jax.lm.pythia import from_pretrained

        directory = check_weights_dir(cfg.weights)
        tokenizer = load_tokenizer(directory)
        model = from_pretrained(directory)
    else:
        from llome_jax.lm.pythia import Pythia, PythiaConfig

        tokenizer = make_ehrlich_tokenizer(num_states)
        codec = SequenceCodec(tokenizer, num_states, length)
        config = PythiaConfig.preset(
            cfg.model, vocab_size=codec.vocab_size, **dict(cfg.model_overrides)
        )
        init_seed = int(jax.random.randint(_named_key(cfg, "init"), (), 0, 2**31 - 1))
        model = Pythia(config, rngs=nnx.Rngs(init_seed))
    codec = SequenceCodec(tokenizer, num_states, length)
    mesh = parallel.make_mesh() if cfg.data_parallel and jax.device_count() > 1 else None
    return _Resources(fn=fn, x0=x0, codec=codec, model=model, mesh=mesh)


def _named_key(cfg: LoopConfig, name: str) -> jax.Array:
    """A key for one-off uses (GA, model init, the loop) derived from the run seed and a name."""
    salt = {"ga": 1, "init": 2, "loop": 3}[name]
    return jax.random.fold_in(jax.random.key(cfg.seed), salt)


def _split(model: Any) -> tuple[Any, Any, Any]:
    from flax import nnx

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    return graphdef, params, rest


def _model_with(model: Any, params: Any) -> Any:
    """A copy of ``model`` carrying ``params`` (a pure dict)."""
    from flax import nnx

    graphdef, state, rest = _split(model)
    nnx.replace_by_pure_dict(state, params)
    return nnx.merge(graphdef, state, rest)


def _initial_params(model: Any) -> Any:
    from llome_jax.train import split_params

    _, params, _ = split_params(model)
    return jax.tree.map(jnp.copy, params)


# --------------------------------------------------------------------------------------------
# Optimizers and train steps (cached: a new optimizer config means a new compilation)
# --------------------------------------------------------------------------------------------
def _optimizer_config(cfg: LoopConfig, loss: str, total_steps: int, round_index: int = 2) -> Any:
    from llome_jax.train import paper_optimizer

    learning_rate = cfg.learning_rate
    if round_index == 1 and cfg.first_round_learning_rate is not None:
        learning_rate = cfg.first_round_learning_rate
    if loss == "dpo":
        return paper_optimizer(
            "dpo",
            max(total_steps, 1),
            learning_rate=cfg.dpo_learning_rate,
            warmup_steps=cfg.dpo_warmup_steps,
        )
    return paper_optimizer(
        loss,
        max(total_steps, 1),
        learning_rate=learning_rate,
        weight_decay=cfg.weight_decay,
        warmup_steps=cfg.warmup_steps,
    )


@functools.lru_cache(maxsize=8)
def _train_step(cfg: LoopConfig, loss: str, opt_config: Any) -> Any:
    from llome_jax.losses import get_loss
    from llome_jax.train import make_optimizer, make_train_step

    res = _resources(cfg)
    return make_train_step(
        get_loss(loss),
        _training_model(cfg, loss),
        make_optimizer(opt_config),
        num_microbatches=_microbatches(cfg, res.mesh, cfg.batch_size_for(loss)),
        max_grad_norm=cfg.max_grad_norm,
        mesh=res.mesh,
    )


def _microbatches(cfg: LoopConfig, mesh: Any, batch_size: int | None = None) -> int:
    """The largest ``M <= cfg.num_microbatches`` with ``batch_size % (M * devices) == 0``.

    (Paper: 64 = 32 accumulation steps x 2 GPUs x 1; on 8 devices that becomes 8 x 8 x 1.)
    """
    batch_size = cfg.batch_size if batch_size is None else batch_size
    devices = 1 if mesh is None else int(mesh.devices.size)
    if batch_size % devices:
        raise ValueError(
            f"batch_size {batch_size} must be divisible by the {devices} data-parallel devices"
        )
    m = max(1, min(cfg.num_microbatches, batch_size // devices))
    while batch_size % (m * devices):
        m -= 1
    return m


def _training_model(cfg: LoopConfig, loss: str) -> Any:
    """The model whose graph a round trains (parameters always come from the state): the run's
    model, or for DPO with ``dpo_compute_dtype`` another matmul dtype, an abstract copy in it."""
    model = _resources(cfg).model
    if loss != "dpo" or cfg.dpo_compute_dtype == model.config.compute_dtype:
        return model
    return _model_in_dtype(cfg, cfg.dpo_compute_dtype)


@functools.lru_cache(maxsize=2)
def _model_in_dtype(cfg: LoopConfig, compute_dtype: str) -> Any:
    from flax import nnx

    from llome_jax.lm.pythia import Pythia

    config = dataclasses.replace(_resources(cfg).model.config, compute_dtype=compute_dtype)
    return nnx.eval_shape(lambda: Pythia(config, rngs=nnx.Rngs(0)))


def _loss_params(cfg: LoopConfig, loss: str) -> Any:
    from llome_jax.losses import default_params

    params = default_params(loss)
    if cfg.kl_weight is not None and loss in ("marge", "reinforce"):
        params = params.replace(kl_weight=float(cfg.kl_weight))
    if loss == "marge":
        params = params.replace(weights_sum_to_one=float(cfg.marge_weight_norm == "sum"))
    return params


# --------------------------------------------------------------------------------------------
# Initial state (round 0: GA seed data, initial model)
# --------------------------------------------------------------------------------------------
def init_state(cfg: LoopConfig) -> LoopState:
    """Round 0: ``n0`` GA generations from the function's start sequence and the initial model."""
    from llome_jax import ga
    from llome_jax.train import make_optimizer

    res = _resources(cfg)
    archive = ga.run_archive(
        _named_key(cfg, "ga"),
        res.fn,
        res.x0,
        cfg.ga_generations,
        ga.GAConfig(num_particles=cfg.ga_particles, mutation_prob=cfg.ga_mutation_prob),
    )
    sequences, values, _ = archive.to_numpy()
    params = _initial_params(res.model)
    optimizer = make_optimizer(_optimizer_config(cfg, cfg.loss(1), 1))
    return LoopState(
        round=jnp.zeros((), jnp.int32),
        key=_named_key(cfg, "loop"),
        params=params,
        reference_params=jax.tree.map(jnp.copy, params),
        opt_state=optimizer.init(params),
        num_evaluations=jnp.asarray(cfg.ga_generations * cfg.ga_particles, jnp.int32),
        mean_hamming=jnp.asarray(np.nan, jnp.float32),
        temperature_offset=jnp.zeros((), jnp.float32),
        stop_code=jnp.asarray(1 if values.size and values.max() >= 1.0 else 0, jnp.int32),
        archive_sequences=sequences.astype(np.int32),
        archive_values=values.astype(np.float32),
        archive_rounds=np.zeros(values.shape, np.int32),
    )


def abstract_state(cfg: LoopConfig, round_index: int) -> LoopState:
    """Shapes/dtypes of the device part of the state saved at ``round_index`` (archive empty)."""
    from llome_jax.train import make_optimizer

    res = _resources(cfg)
    params = jax.eval_shape(lambda: _initial_params(res.model))
    loss = cfg.loss(max(round_index, 1))
    optimizer = make_optimizer(_optimizer_config(cfg, loss, 1))
    scalar_i = jax.ShapeDtypeStruct((), jnp.int32)
    scalar_f = jax.ShapeDtypeStruct((), jnp.float32)
    return LoopState(
        round=scalar_i,
        key=jax.eval_shape(lambda: jax.random.key(0)),
        params=params,
        reference_params=params,
        opt_state=jax.eval_shape(optimizer.init, params),
        num_evaluations=scalar_i,
        mean_hamming=scalar_f,
        temperature_offset=scalar_f,
        stop_code=scalar_i,
        archive_sequences=None,
        archive_values=None,
        archive_rounds=None,
    )


# --------------------------------------------------------------------------------------------
# One round
# --------------------------------------------------------------------------------------------
def _progress(enabled: bool, **kwargs: Any) -> Any:
    from tqdm.auto import tqdm

    return tqdm(disable=not enabled, leave=False, dynamic_ncols=True, **kwargs)


def _training_data(
    key: jax.Array, cfg: LoopConfig, loss: str, x: np.ndarray, v: np.ndarray
) -> dict[str, Any]:
    """Pairs (or triples) of ``S_i``, tokenised; ``None``-free dict of numpy arrays."""
    from llome_jax.llome.data import PropEnConfig, preference_triples, propen_pairs

    res = _resources(cfg)
    k_pairs, k_subset = jax.random.split(key)
    propen = PropEnConfig(
        num_neighbours=cfg.num_neighbours,
        max_distance=cfg.max_distance,
        max_infeasible_fraction=cfg.max_infeasible_fraction,
        symmetric=cfg.symmetric_pairs and loss != "dpo",
    )
    knn = {"num_states": res.fn.config.num_states}
    if loss == "dpo":
        triples = preference_triples(k_pairs, x, v, propen, **knn)
        n_candidates = len(triples)
        rows = _subset(k_subset, n_candidates, cfg.max_train_examples)
        triples = triples.select(rows)
        prompt, chosen, rejected = triples.gather(x)
        n = len(triples)
        ids, tmask, amask = res.codec.encode_pairs(
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
    pairs = pairs.select(_subset(k_subset, n_candidates, cfg.max_train_examples))
    inputs, targets = pairs.gather(x)
    ids, tmask, amask = res.codec.encode_pairs(inputs, targets)
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


def _subset(key: jax.Array, n: int, limit: int | None) -> np.ndarray:
    """``min(n, limit)`` of ``range(n)`` uniformly at random (all, in order, if within budget)."""
    if limit is None or n <= limit:
        return np.arange(n, dtype=np.int64)
    bits = np.asarray(jax.random.bits(key, (n,), jnp.uint32))
    return np.sort(np.argsort(bits, kind="stable")[:limit]).astype(np.int64)


#: ``fold_in`` salt of the train/validation split key (derived from the round's train key).
_SPLIT_SALT = 0x5E1EC7


@functools.lru_cache(maxsize=8)
def _eval_step(cfg: LoopConfig, loss: str) -> Any:
    from llome_jax.losses import get_loss
    from llome_jax.train import make_eval_step

    res = _resources(cfg)
    return make_eval_step(
        get_loss(loss),
        _training_model(cfg, loss),
        num_microbatches=_microbatches(cfg, res.mesh, cfg.batch_size_for(loss)),
        mesh=res.mesh,
    )


def _selection_candidate(
    cfg: LoopConfig, loss: str, step: int, params: Any, val: Any, prompts: Any, hparams: Any
) -> Any:
    """``selection.Candidate`` of ``params`` after ``step`` updates: the validation loss (mean
    over the units of the ``val`` batches ``[(batch, real units)]``) and the greedy gate."""
    from llome_jax.llome import selection

    res = _resources(cfg)
    evaluate = _eval_step(cfg, loss)
    summed = [evaluate(params, batch, hparams)["loss"] * count for batch, count in val]
    val_loss = float(np.sum(jax.device_get(summed))) / sum(count for _, count in val)
    policy = _model_with(res.model, params)
    gate = selection.greedy_gate(
        policy, res.codec, res.fn, prompts, batch_size=cfg.generation_batch_size, mesh=res.mesh
    )
    return selection.Candidate(step, val_loss, gate)


def _train(
    key: jax.Array,
    cfg: LoopConfig,
    loss: str,
    data: dict[str, Any],
    params: Any,
    progress: bool,
    epochs: int | None = None,
    round_index: int = 2,
) -> tuple[Any, Any, float, dict[str, Any]]:
    """Train ``params`` on ``data``: ``(params, opt_state, mean loss, info)``.

    ``info``: ``train_steps``, ``learning_rate``. With checkpoint selection for ``loss``
    (``cfg.select_checkpoint``, ``llome_jax.llome.selection``) training uses the 95 % split of the
    units, the returned params are the kept checkpoint's (``opt_state`` stays the last step's),
    and ``info`` adds ``selected_step``, ``selection_passed``, ``val_loss``, ``gate_valid``,
    ``gate_feasible``, ``selection_history``, ``num_val_units`` and ``time_selection``.
    """
    from llome_jax import parallel
    from llome_jax.llome import selection
    from llome_jax.losses import LossBatch
    from llome_jax.train import (
        TrainBatch,
        TrainState,
        compute_logprobs,
        make_optimizer,
    )
    from llome_jax.types import SeqLogProbs

    res = _resources(cfg)
    n = int(data["units"])
    bsz = cfg.batch_size_for(loss)
    epochs = cfg.epochs if epochs is None else epochs
    select = cfg.select_checkpoint and loss in cfg.selection_losses
    split = selection.split_units(jax.random.fold_in(key, _SPLIT_SALT), n) if select else None
    train_units, val_units = split if split is not None else (np.arange(n), None)
    n_train = len(train_units)
    steps_per_epoch = math.ceil(n_train / bsz)
    if round_index == 1 and cfg.first_round_min_steps:
        epochs = max(epochs, math.ceil(cfg.first_round_min_steps / steps_per_epoch))
    total = steps_per_epoch * epochs
    opt_config = _optimizer_config(cfg, loss, total, round_index)
    step = _train_step(cfg, loss, opt_config)
    optimizer = make_optimizer(opt_config)
    ids = np.concatenate(data["ids"])  # [R, T] with R = n (pairs) or 2n (DPO: chosen; rejected)
    tmask = np.concatenate(data["tmask"])
    amask = np.concatenate(data["amask"])
    if loss == "sft":
        reference = SeqLogProbs(np.zeros(len(ids), np.float32), np.zeros(len(ids), np.float32))
    else:
        # The reference is the round-start policy (the previous round's model), scored once.
        reference = compute_logprobs(
            _training_model(cfg, loss),
            params,
            ids,
            tmask,
            amask,
            batch_size=cfg.logprob_batch_size,
            mesh=res.mesh,
            progress=progress,
        )
    copies = len(data["ids"])  # 1, or 2 for DPO
    state = TrainState(
        params=jax.tree.map(jnp.copy, params),
        opt_state=optimizer.init(params),
        step=jnp.zeros((), jnp.int32),
        key=key,
    )
    hparams = _loss_params(cfg, loss)

    def make_batch(units: np.ndarray) -> Any:
        weight = np.ones(bsz, np.float32)
        if units.size < bsz:  # pad the last batch with weight-0 copies
            weight[units.size :] = 0.0
            units = np.concatenate([units, np.full(bsz - units.size, units[0])])
        rows = np.concatenate([units + c * n for c in range(copies)])
        batch = TrainBatch.create(
            ids[rows],
            tmask[rows],
            amask[rows],
            reference=SeqLogProbs(
                jnp.asarray(reference.sum_logp[rows]), jnp.asarray(reference.num_tokens[rows])
            ),
            loss=LossBatch.create(
                reward=np.asarray(data["reward"], np.float32)[units],
                weight=weight,
                group_size=cfg.marge_group_size,
            ),
        )
        return batch if res.mesh is None else parallel.shard_batch(batch, res.mesh)

    chosen = selection.Selection(cfg.selection_threshold)
    saves, val, prompts, best_params, time_selection = frozenset(), [], None, None, 0.0
    if val_units is not None:
        saves = frozenset(selection.save_steps(total))
        val = [
            (make_batch(u), u.size) for u in np.split(val_units, range(bsz, val_units.size, bsz))
        ]
        shown = val_units[: cfg.selection_num_prompts]
        prompts = selection.prompt_sequences(
            res.codec, data["ids"][0][shown], data["amask"][0][shown]
        )
    losses: list[jax.Array] = []
    epoch_keys = jax.random.split(key, epochs)
    with _progress(progress, total=total, desc=f"train {loss}", unit="step") as bar:
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
                    candidate = _selection_candidate(
                        cfg, loss, done, state.params, val, prompts, hparams
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
                if res.mesh is None
                else parallel.replicate(best_params, res.mesh)
            )
    return params_out, state.opt_state, train_loss, info


def llome_round(
    state: LoopState, cfg: LoopConfig, *, progress: bool = False
) -> tuple[LoopState, dict[str, Any]]:
    """One LLOME round (module docstring). Deterministic in ``(state, cfg)``; ``state`` is kept.

    Returns:
      ``(new_state, metrics)``; ``metrics`` holds the ``rounds.jsonl`` fields (except
      ``seconds``) plus ``loss``, ``num_pairs``, ``num_valid``, ``num_unique``, per-phase
      ``time_*`` seconds and ``stop_reason``. If ``S_i`` yields no training pairs, the state is
      returned unchanged except ``stop_code = 3`` and ``metrics["round"]`` is ``None``.
    """
    from llome_jax import ehrlich
    from llome_jax.llome.data import margin_reward, rows_in
    from llome_jax.llome.filter import FilterConfig, filter_candidates
    from llome_jax.llome.refine import RefineConfig, iterative_refinement
    from llome_jax.llome.schedule import TemperatureSchedule, temperature_offset, temperatures
    from llome_jax.llome.seeds import select_seeds, select_seeds_reference
    from llome_jax.rundir import round_metrics

    res = _resources(cfg)
    r = state.round_index + 1
    loss = cfg.loss(r)
    next_key, round_key = jax.random.split(state.key)
    k_data, k_train, k_seeds, k_refine, k_filter = jax.random.split(round_key, 5)
    if cfg.training_data == "cumulative":
        x_i, v_i = np.asarray(state.archive_sequences), np.asarray(state.archive_values)
    else:
        x_i, v_i = state.latest()
    times: dict[str, float] = {}

    t = time.perf_counter()
    data = _training_data(k_data, cfg, loss, x_i, v_i)
    times["time_pairs"] = time.perf_counter() - t
    if data["units"] == 0:
        return dataclasses.replace(state, stop_code=jnp.asarray(3, jnp.int32)), {
            "round": None,
            "loss": loss,
            "stop_reason": STOP_REASONS[3],
        }

    t = time.perf_counter()
    reference_params = state.params
    epochs = cfg.first_round_epochs if r == 1 and cfg.first_round_epochs else cfg.epochs
    params, opt_state, train_loss, train_info = _train(
        k_train, cfg, loss, data, state.params, progress, epochs, r
    )
    times["time_train"] = time.perf_counter() - t

    # Seeds: TopK(S_i, n_s) (paper) or the top training rows by target value (reference).
    if cfg.seed_rule == "paper":
        seed_rows = select_seeds(k_seeds, v_i, cfg.num_seeds)
    else:
        seed_rows = select_seeds_reference(data["seed_index"], data["seed_value"], cfg.num_seeds)
    seeds = x_i[seed_rows]

    schedule = TemperatureSchedule(base=tuple(cfg.temperatures), adaptive=cfg.adaptive_temperature)
    hd = float(state.mean_hamming)
    if cfg.reset_temperature_at_phase and r > 1 and cfg.loss(r - 1) != loss:
        hd = float("nan")
    offset = temperature_offset(None if math.isnan(hd) else hd, schedule)
    temps = temperatures(offset, schedule)

    t = time.perf_counter()
    refine_cfg = RefineConfig(
        num_iterations=cfg.num_iterations,
        num_samples=cfg.num_samples,
        greedy=cfg.greedy,
        top_k=cfg.top_k,
        batch_size=cfg.generation_batch_size,
        next_input=cfg.next_input,
        selection_likelihood=cfg.selection_likelihood,
    )
    policy = _model_with(res.model, params)
    with _progress(progress, total=cfg.num_iterations, desc="refine", unit="iter") as bar:

        def report(info: dict[str, Any]) -> None:
            bar.set_postfix(generated=info["num_generated"], valid=info["num_valid"])
            bar.update(1)

        refined = iterative_refinement(
            k_refine,
            policy,
            res.codec,
            res.fn,
            seeds,
            temps,
            refine_cfg,
            mesh=res.mesh,
            progress=report,
        )
    times["time_generate"] = time.perf_counter() - t
    candidates = np.asarray(refined.sequences)
    num_unique = int(candidates.shape[0])
    archive = np.asarray(state.archive_sequences)

    t = time.perf_counter()
    filter_cfg = (
        FilterConfig.paper(cfg.num_selected)
        if cfg.filter_rule == "paper"
        else FilterConfig.reference(cfg.num_selected)
    )
    chosen = filter_candidates(
        k_filter,
        candidates,
        np.asarray(
            refined.log_likelihood_raw if cfg.filter_likelihood == "raw" else refined.log_likelihood
        ),
        np.asarray(refined.feasible),
        filter_cfg,
        exclude=archive if cfg.exclude_labelled else None,
    )
    times["time_filter"] = time.perf_counter() - t
    # candidates not labelled before (GA data, earlier rounds, seeds); the Filter counted them
    # when it excluded the archive (the candidates are distinct, so its count after dedup is it)
    num_novel = (
        chosen.num_novel if cfg.exclude_labelled else int(np.sum(~rows_in(candidates, archive)))
    )

    t = time.perf_counter()
    new_x = candidates[chosen.indices].astype(np.int32)
    if new_x.shape[0]:
        new_v = np.asarray(ehrlich.evaluate(res.fn, new_x), np.float32)
    else:
        new_v = np.zeros((0,), np.float32)
    times["time_oracle"] = time.perf_counter() - t

    # Diagnostic only (not oracle budget, never fed back): reward of each labelled edit.
    inputs = np.asarray(refined.inputs)[chosen.indices]
    input_v = np.asarray(ehrlich.evaluate(res.fn, inputs), np.float32) if len(inputs) else new_v
    rewards = margin_reward(input_v, new_v) if len(new_v) else np.zeros(0)

    archive_x = np.concatenate([np.asarray(state.archive_sequences), new_x])
    archive_v = np.concatenate([np.asarray(state.archive_values), new_v])
    archive_r = np.concatenate(
        [np.asarray(state.archive_rounds), np.full(new_v.shape, r, np.int32)]
    )
    num_evaluations = int(state.num_evaluations) + int(new_v.size)
    stop = 0
    if archive_v.size and float(np.max(archive_v)) >= 1.0:
        stop = 1
    elif num_unique < cfg.min_candidates or new_v.size == 0:
        stop = 2
    mean_hamming = float(refined.mean_hamming)
    new_state = LoopState(
        round=jnp.asarray(r, jnp.int32),
        key=next_key,
        params=params,
        reference_params=reference_params,
        opt_state=opt_state,
        num_evaluations=jnp.asarray(num_evaluations, jnp.int32),
        mean_hamming=jnp.asarray(mean_hamming, jnp.float32),
        temperature_offset=jnp.asarray(offset, jnp.float32),
        stop_code=jnp.asarray(stop, jnp.int32),
        archive_sequences=archive_x,
        archive_values=archive_v,
        archive_rounds=archive_r,
    )
    num_generated = int(refined.num_generated)
    metrics = round_metrics(
        r,
        new_x,
        new_v,
        archive_v,
        num_generated=num_generated,
        num_evaluations=num_evaluations,
        frac_unique=num_unique / num_generated if num_generated else float("nan"),
        mean_hamming=mean_hamming,
        mean_reward=float(np.mean(rewards)) if rewards.size else float("nan"),
        train_loss=train_loss,
        temperature_offset=offset,
    )
    metrics.update(
        loss=loss,
        **train_info,
        num_pairs=int(data["units"]),
        num_pair_candidates=int(data["num_candidates"]),
        num_valid=int(refined.num_valid),
        num_unique=num_unique,
        num_novel=num_novel,
        frac_novel=num_novel / num_unique if num_unique else float("nan"),
        num_selected=int(new_v.size),
        frac_feasible_generated=float(np.mean(np.asarray(refined.feasible)))
        if num_unique
        else float("nan"),
        best_value=float(np.max(archive_v)) if archive_v.size else float("nan"),
        stop_reason=STOP_REASONS[stop],
        **times,
    )
    return new_state, metrics


# --------------------------------------------------------------------------------------------
# Checkpoints: device arrays through orbax, the (growing) archive as JSON metadata
# --------------------------------------------------------------------------------------------
def _device_part(state: LoopState) -> LoopState:
    return dataclasses.replace(
        state, archive_sequences=None, archive_values=None, archive_rounds=None
    )


def _archive_metadata(state: LoopState) -> dict[str, Any]:
    values = np.asarray(state.archive_values, np.float32)
    return {
        "archive_sequences": np.asarray(state.archive_sequences).astype(int).tolist(),
        # float32 -> Python float is exact; -inf is written as a string (strict JSON).
        "archive_values": [repr(float(x)) for x in values],
        "archive_rounds": np.asarray(state.archive_rounds).astype(int).tolist(),
    }


def _state_from_checkpoint(device: LoopState, metadata: Mapping[str, Any]) -> LoopState:
    sequences = np.asarray(metadata["archive_sequences"], np.int32)
    values = np.asarray([float(x) for x in metadata["archive_values"]], np.float32)
    rounds = np.asarray(metadata["archive_rounds"], np.int32)
    if sequences.ndim != 2:
        sequences = sequences.reshape(len(values), -1)
    return dataclasses.replace(
        device, archive_sequences=sequences, archive_values=values, archive_rounds=rounds
    )


def save_checkpoint(manager: Any, state: LoopState, extra: Mapping[str, Any] | None = None) -> None:
    """Save ``state`` as step ``state.round`` (archive in the JSON metadata)."""
    metadata = {"round": state.round_index, **_archive_metadata(state), **(extra or {})}
    manager.save(state.round_index, _device_part(state), metadata)


def restore_checkpoint(manager: Any, cfg: LoopConfig) -> LoopState | None:
    """The newest readable checkpoint as a :class:`LoopState` (``None`` if there is none)."""
    from llome_jax.checkpoint import CheckpointError

    last_error: Exception | None = None
    for step in reversed(manager.all_steps()):
        try:
            device, metadata = manager.restore(step, abstract_state(cfg, step))
            return _state_from_checkpoint(device, metadata)
        except (CheckpointError, KeyError, ValueError) as err:
            last_error = err
    if last_error is not None:
        raise last_error
    return None


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class RunResult:
    """Outcome of :func:`run`."""

    state: LoopState
    records: list[dict[str, Any]]
    stop_reason: str
    path: pathlib.Path


def _round0_record(state: LoopState) -> dict[str, Any]:
    from llome_jax.rundir import round_metrics

    x, v = state.latest()
    return round_metrics(
        0,
        x,
        v,
        v,
        num_generated=int(state.num_evaluations),
        num_evaluations=int(state.num_evaluations),
        loss="ga",
        best_value=float(np.max(v)) if v.size else float("nan"),
    )


def _fmt(value: Any, spec: str) -> str:
    return (
        "n/a"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else format(value, spec)
    )


def _round_line(m: Mapping[str, Any]) -> str:
    """One human-readable summary line of a round record."""
    return (
        f"round {m['round']} [{m['loss']}]: {m['num_evaluations']} evaluations, min regret "
        f"{_fmt(m['min_regret'], '.4f')}, mean regret {_fmt(m['mean_regret'], '.4f')}, "
        f"generated {m['num_generated']}, unique valid {m.get('num_unique')} "
        f"(novel {m.get('num_novel')}), feasible {_fmt(m['frac_feasible'], '.2f')}, "
        f"hamming {_fmt(m['mean_hamming'], '.3f')}, train loss "
        f"{_fmt(m['train_loss'], '.4f')}, T+{_fmt(m['temperature_offset'], '.1f')}, "
        f"{_fmt(m.get('seconds'), '.0f')} s"
    )


def _plot(run_dir: Any, cfg: LoopConfig) -> None:
    name = "LLOME-" + "/".join(
        dict.fromkeys(n.upper() if n != "marge" else "MargE" for n, _ in cfg.schedule)
    )
    run_dir.plot_regret(name, f"LLOME on {cfg.function} (seed {cfg.seed})", log_x=False)


def run(
    cfg: LoopConfig,
    out: str | pathlib.Path,
    *,
    resume: bool = False,
    progress: bool = True,
    max_rounds_this_call: int | None = None,
    log: Callable[[str], None] = print,
    extra_config: Mapping[str, Any] | None = None,
) -> RunResult:
    """Run (or resume) a LLOME optimisation into the run directory ``out``.

    Args:
      cfg: the configuration.
      out: run directory (``config.json``, ``rounds.jsonl``, ``evaluated.csv``, ``regret.png``,
        ``checkpoints/``).
      resume: continue from the newest readable checkpoint (configuration must match except
        ``rounds``).
      progress: tqdm bars per phase and one summary line per round.
      max_rounds_this_call: stop after this many rounds in this call (tests, interruptions).
      log: where the per-round lines go.
      extra_config: additional keys recorded in ``config.json`` (e.g. the CLI's ``loss``).

    Raises:
      ValueError / FileNotFoundError: bad configuration, or ``resume`` on a directory holding a
        different configuration; nothing is written then.
    """
    from llome_jax.checkpoint import CheckpointManager
    from llome_jax.rundir import RunDirectory

    validate_config(cfg)
    config = {"optimizer": "llome", **cfg.to_dict(), **dict(extra_config or {})}
    run_dir = RunDirectory.create(
        out,
        config,
        resume=resume,
        mutable_keys=("rounds", "resume", "out"),
        legacy_values=LEGACY_VALUES,
    )
    records: list[dict[str, Any]] = []
    with CheckpointManager(run_dir.checkpoint_dir, max_to_keep=2) as manager:
        state = restore_checkpoint(manager, cfg) if resume else None
        if state is None:
            run_dir.rollback(-1)
            t0 = time.perf_counter()
            state = init_state(cfg)
            x, v = state.latest()
            run_dir.log_evaluated(0, x, v)
            record = _round0_record(state)
            record["seconds"] = time.perf_counter() - t0
            records.append(run_dir.log_round(record))
            save_checkpoint(manager, state)
            if progress:
                log(
                    f"round 0 (GA, {cfg.ga_generations} generations): {len(v)} distinct "
                    f"sequences, min regret {record['min_regret']:.4f}"
                )
        else:
            run_dir.rollback(state.round_index)
            if progress:
                log(f"resuming {run_dir.path} after round {state.round_index}")
        done_here = 0
        while state.round_index < cfg.rounds and int(state.stop_code) == 0:
            if max_rounds_this_call is not None and done_here >= max_rounds_this_call:
                break
            t0 = time.perf_counter()
            new_state, metrics = llome_round(state, cfg, progress=progress)
            if metrics["round"] is None:
                state = new_state
                break
            seconds = time.perf_counter() - t0
            x, v = new_state.latest()
            run_dir.log_evaluated(new_state.round_index, x, v)
            metrics["seconds"] = seconds
            records.append(run_dir.log_round(metrics))
            _plot(run_dir, cfg)
            save_checkpoint(manager, new_state)
            state = new_state
            done_here += 1
            if progress:
                log(_round_line(metrics))
        _plot(run_dir, cfg)
    reason = STOP_REASONS.get(int(state.stop_code), "")
    if reason and progress:
        log(f"stopped early after round {state.round_index}: {reason}")
    return RunResult(state=state, records=records, stop_reason=reason, path=run_dir.path)
