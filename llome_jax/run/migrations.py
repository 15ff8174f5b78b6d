"""One versioned path from an older run's ``config.json`` to today's configuration.

Every run's ``config.json`` records ``config_version``: how many of its optimizer's migrations
its configuration already includes. One written before versions existed is version 0. When a
run is loaded (a resume: the round driver compares the saved configuration with the requested
one, and ``--resume`` on the command line reads its settings), :func:`migrate` applies the
optimizer's migrations from the saved version on, in order, and records the latest version.

A migration is a small pure function from version ``k`` to ``k + 1`` of one optimizer's
``config.json`` (a dict in, a new dict out); its docstring says what changed and why. Most fill a
setting added to the configuration with the value that reproduces the runs made before it, so
that such a run resumes with the behaviour it ran with and refuses another one; a key already
present is never changed (files of every age are version 0, so each step leaves a file that
already has its change as it is). Values are written out here, not read from today's defaults,
so a later change of a default does not change what an old run resumes with.

**A new setting** (BUILD.md §4): give it a default in the optimizer's configuration, append a
migration to that optimizer's list below (also when the default is the old behaviour, or the
setting changes only speed: without one an older run lacks the key and is refused) and a test
of it (``tests/test_migrations.py``: an input dict and the hand-written output). A setting every
optimizer shares is a field of ``optimizers.base.BenchmarkSettings`` and a migration in each
list below.

**A renamed setting** moves the old key's value to the new key (:func:`_renamed`; a file that
already has the new key keeps it) and names the old key in the configuration class's
``RENAMED_SETTINGS``, so that presets, ``--config`` files and ``--set`` accept it too.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "CONFIG_VERSION",
    "GA_MIGRATIONS",
    "LAMBO2_MIGRATIONS",
    "LLOME_MIGRATIONS",
    "MIGRATIONS",
    "Migration",
    "migrate",
]

#: The ``config.json`` key of the configuration's version.
CONFIG_VERSION = "config_version"

#: One step: ``config.json`` of version ``k`` -> version ``k + 1``.
Migration = Callable[[dict[str, Any]], dict[str, Any]]


def migrate(saved: Mapping[str, Any], steps: Sequence[Migration]) -> dict[str, Any]:
    """``saved`` (a run's ``config.json``) in today's form: ``steps[version:]`` applied in order
    to a copy, then ``config_version = len(steps)``. Keys that are not settings (``optimizer``,
    ``provenance``, the digests, an experiment's records) pass through unchanged.

    Raises:
      ValueError: ``config_version`` is not a non-negative integer, or is newer than
        ``len(steps)`` (a later llome_jax wrote the run: upgrade to resume it).
    """
    version = saved.get(CONFIG_VERSION, 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"config.json's {CONFIG_VERSION} must be an integer >= 0; got {version!r}")
    if version > len(steps):
        raise ValueError(
            f"config.json has {CONFIG_VERSION} {version}, newer than this llome_jax reads "
            f"({len(steps)}): the run was made by a later version; upgrade llome_jax to resume it"
        )
    config = copy.deepcopy(dict(saved))
    for step in steps[version:]:
        config = step(config)
    config[CONFIG_VERSION] = len(steps)
    return config


def _with(config: dict[str, Any], **values: Any) -> dict[str, Any]:
    """``config`` with the top-level ``values`` it lacks."""
    return {**values, **config}


def _renamed(config: dict[str, Any], renames: Mapping[str, str]) -> dict[str, Any]:
    """``config`` with each old dotted key of ``renames`` moved to its new dotted key (same
    value; a new key already present is kept and the old one dropped; an old key the file lacks
    is skipped)."""
    out = copy.deepcopy(config)
    for old, new in renames.items():
        *groups, name = old.split(".")
        section = out
        for group in groups:
            section = section.get(group) if isinstance(section, dict) else None
        if not isinstance(section, dict) or name not in section:
            continue
        value = section.pop(name)
        *new_groups, new_name = new.split(".")
        target = out
        for group in new_groups:
            target = target.setdefault(group, {})
        target.setdefault(new_name, value)
    return out


def _with_in(config: dict[str, Any], section: str, **values: Any) -> dict[str, Any]:
    """``config`` with the ``values`` its ``section`` (a nested dict) lacks; unchanged when it
    has no such section."""
    if not isinstance(config.get(section), dict):
        return config
    return {**config, section: {**values, **config[section]}}


# ---------------------------------------------------------------------------------------------
# The GA (ga_optimizer.GARunConfig)
# ---------------------------------------------------------------------------------------------
def _ga_1_information_contract(config: dict[str, Any]) -> dict[str, Any]:
    """v0 -> v1: the information contract (``llome_jax.oracle``) added ``accounting`` and
    ``constraint_queries``; a run from before it paid every evaluation (``"every_evaluation"``)
    and asked no constraint query (``"off"``)."""
    return _with(config, accounting="every_evaluation", constraint_queries="off")


def _ga_2_labels_per_round(config: dict[str, Any]) -> dict[str, Any]:
    """v1 -> v2: exact label budgets added ``labels_per_round``; before it a ``pay_once`` round
    ran whole generations until it had paid ``G n`` labels (``None``)."""
    return _with(config, labels_per_round=None)


def _ga_3_shared_names(config: dict[str, Any]) -> dict[str, Any]:
    """v2 -> v3: one name for each setting every optimizer shares
    (``optimizers.base.BenchmarkSettings``): ``initial_generations`` is ``round0_generations``
    and ``ga`` is ``round0_ga`` (same values)."""
    return _renamed(config, {"initial_generations": "round0_generations", "ga": "round0_ga"})


GA_MIGRATIONS: tuple[Migration, ...] = (
    _ga_1_information_contract,
    _ga_2_labels_per_round,
    _ga_3_shared_names,
)


# ---------------------------------------------------------------------------------------------
# LaMBO-2 (lambo2.optimizer.Lambo2Config)
# ---------------------------------------------------------------------------------------------
def _lambo2_1_kl_weight(config: dict[str, Any]) -> dict[str, Any]:
    """v0 -> v1: ``design.kl_weight`` (cortex's KL term of the design step) was added; before it
    the design step had none (0, the paper's value). ``config.json`` left the default out until
    versions existed, so it is missing from every older file written with it."""
    return _with_in(config, "design", kl_weight=0.0)


def _lambo2_2_warm_start(config: dict[str, Any]) -> dict[str, Any]:
    """v1 -> v2: ``warm_start`` was added; before it every round's fit started from ``θ0``
    (``False``; left out of ``config.json`` when false until versions existed)."""
    return _with(config, warm_start=False)


def _lambo2_3_decode_temperature(config: dict[str, Any]) -> dict[str, Any]:
    """v2 -> v3: ``design.decode_temperature`` was added; before it the MLM head's logits were
    not scaled (1; left out of ``config.json`` at 1 until versions existed)."""
    return _with_in(config, "design", decode_temperature=1.0)


def _lambo2_4_information_contract(config: dict[str, Any]) -> dict[str, Any]:
    """v3 -> v4: the information contract added ``accounting`` and ``constraint_queries``; a run
    from before it paid every evaluation and screened no proposal (``"off"``)."""
    return _with(config, accounting="every_evaluation", constraint_queries="off")


def _lambo2_5_fused(config: dict[str, Any]) -> dict[str, Any]:
    """v4 -> v5: ``train.fused`` (one Adam step on the summed losses) was added; before it every
    leaf took its own step (``False``; left out of ``config.json`` when false until versions
    existed)."""
    return _with_in(config, "train", fused=False)


def _lambo2_6_one_round0(config: dict[str, Any]) -> dict[str, Any]:
    """v5 -> v6: one round 0 for every optimizer added ``ga_mutation_prob`` (the GA pre-solver's
    ``p_m``, fixed at 0.005 before) and ``keys``; before it the run key was split the ``"v1"``
    way (``Lambo2Config.keys``), so such a run resumes with the keys it drew."""
    return _with(config, ga_mutation_prob=0.005, keys="v1")


def _lambo2_7_shared_names(config: dict[str, Any]) -> dict[str, Any]:
    """v6 -> v7: one name for each setting every optimizer shares
    (``optimizers.base.BenchmarkSettings``): ``num_samples`` is ``labels_per_round``,
    ``ga_generations`` ``round0_generations``, and ``ga_particles`` / ``ga_mutation_prob`` are
    ``round0_ga``'s ``num_particles`` / ``mutation_prob``, beside the GA settings LaMBO-2's round
    0 always ran with (``survival_quantile`` 0.1, ``recombine_prob`` 0.0882)."""
    config = _renamed(
        config,
        {
            "num_samples": "labels_per_round",
            "ga_generations": "round0_generations",
            "ga_particles": "round0_ga.num_particles",
            "ga_mutation_prob": "round0_ga.mutation_prob",
        },
    )
    return _with_in(config, "round0_ga", survival_quantile=0.1, recombine_prob=0.0882)


LAMBO2_MIGRATIONS: tuple[Migration, ...] = (
    _lambo2_1_kl_weight,
    _lambo2_2_warm_start,
    _lambo2_3_decode_temperature,
    _lambo2_4_information_contract,
    _lambo2_5_fused,
    _lambo2_6_one_round0,
    _lambo2_7_shared_names,
)


# ---------------------------------------------------------------------------------------------
# LLOME (llome.config.LoopConfig)
# ---------------------------------------------------------------------------------------------
#: Where each flat name of the first ``LoopConfig`` moved when it was nested (as of the nesting;
#: ``llome.config.FLAT_KEYS``, the flat names ``replace`` still accepts, may grow independently).
_FLAT_NAMES: dict[str, tuple[str, str]] = {
    "ga_particles": ("ga", "num_particles"),
    "ga_mutation_prob": ("ga", "mutation_prob"),
    "num_neighbours": ("propen", "num_neighbours"),
    "max_distance": ("propen", "max_distance"),
    "symmetric_pairs": ("propen", "symmetric"),
    "max_infeasible_fraction": ("propen", "max_infeasible_fraction"),
    "num_iterations": ("refine", "num_iterations"),
    "num_samples": ("refine", "num_samples"),
    "greedy": ("refine", "greedy"),
    "top_k": ("refine", "top_k"),
    "generation_batch_size": ("refine", "batch_size"),
    "next_input": ("refine", "next_input"),
    "selection_likelihood": ("refine", "selection_likelihood"),
    "num_selected": ("filter", "num_selected"),
}

#: The nested configuration's settings at the nesting, each with the value a flat configuration
#: that lacks it ran with: its default then, except ``exclude_labelled`` (added to the flat
#: configuration, the authors' Filter relabelled: ``False``).
_NESTED_V1: dict[str, Any] = {
    "function": "f2",
    "instance_seed": None,
    "schedule": "sft:1,marge:9",
    "rounds": 10,
    "seed": 0,
    "ga_generations": 10,
    "model": "small",
    "model_overrides": {},
    "weights": None,
    "text_format": "list",
    "training_data": "latest",
    "num_seeds": 200,
    "seed_rule": "paper",
    "temperatures": [0.6, 0.8, 1.0, 1.2, 1.4, 1.6],
    "adaptive_temperature": True,
    "reset_temperature_at_phase": False,
    "filter_likelihood": "raw",
    "exclude_labelled": False,
    "min_unique_candidates": None,
    "data_parallel": False,
    "preset": "custom",
    "ga": {
        "num_particles": 1000,
        "survival_quantile": 0.1,
        "mutation_prob": 0.005,
        "recombine_prob": 0.0882,
    },
    "propen": {
        "num_neighbours": 30,
        "max_distance": 0.25,
        "max_infeasible_fraction": 0.1,
        "symmetric": False,
    },
    "finetune": {
        "learning_rate": 1e-6,
        "dpo_learning_rate": 1e-7,
        "weight_decay": 0.01,
        "warmup_steps": 0,
        "dpo_warmup_steps": 150,
        "epochs": 1,
        "first_round_epochs": None,
        "first_round_learning_rate": None,
        "first_round_min_steps": 0,
        "batch_size": 64,
        "sft_batch_size": None,
        "dpo_compute_dtype": "float32",
        "num_microbatches": 1,
        "max_grad_norm": 1.0,
        "max_train_examples": None,
        "marge_group_size": None,
        "kl_weight": None,
        "marge_weight_norm": "mean",
        "logprob_batch_size": 64,
        "select_checkpoint": False,
        "selection_threshold": 0.9,
        "selection_losses": ["marge", "dpo"],
        "selection_num_prompts": 64,
    },
    "refine": {
        "num_iterations": 10,
        "num_samples": 10,
        "greedy": True,
        "top_k": 50,
        "batch_size": 1024,
        "next_input": "paper",
        "selection_likelihood": "raw",
    },
    "filter": {
        "num_selected": 2000,
        "likelihood_quantile": 0.6,
        "likelihood_threshold": None,
        "strict_threshold": True,
        "threshold_only_over_budget": False,
        "max_infeasible_fraction": 0.1,
        "deduplicate": True,
    },
}

#: ``filter_rule="reference"`` of a flat configuration: the authors' Filter (``"paper"`` is the
#: default Filter of :data:`_NESTED_V1`).
_REFERENCE_FILTER = {
    "likelihood_quantile": 0.6,
    "likelihood_threshold": None,
    "strict_threshold": False,
    "threshold_only_over_budget": True,
    "max_infeasible_fraction": None,
    "deduplicate": True,
}


def _llome_1_nested(config: dict[str, Any]) -> dict[str, Any]:
    """v0 -> v1: ``LoopConfig`` was nested into the configurations of its phases (``ga``,
    ``propen``, ``finetune``, ``refine``, ``filter``). A flat configuration (no ``finetune``
    section) is nested: every ``FinetuneConfig`` name moves into ``finetune``, the other flat
    names as :data:`_FLAT_NAMES` says, ``filter_rule`` (``"paper"`` / ``"reference"``) becomes
    the Filter's fields, and a setting it lacks takes the value its run had
    (:data:`_NESTED_V1`). A nested configuration is returned unchanged."""
    if "finetune" in config:
        return config
    out: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {
        name: {} for name, value in _NESTED_V1.items() if isinstance(value, dict)
    }
    rule = config.get("filter_rule")
    if rule == "reference":
        sections["filter"].update(_REFERENCE_FILTER)
    for key, value in config.items():
        if key == "filter_rule" and rule in ("paper", "reference"):
            continue
        if key in _NESTED_V1["finetune"] or key in ("reward_beta", "head_on_targets"):
            sections["finetune"][key] = value
        elif key in _FLAT_NAMES:
            section, name = _FLAT_NAMES[key]
            sections[section][name] = value
        else:
            out[key] = value
    for key, value in copy.deepcopy(_NESTED_V1).items():
        if isinstance(value, dict):
            out[key] = {**value, **sections[key]}
        else:
            out.setdefault(key, value)
    return out


def _llome_2_share_prompts(config: dict[str, Any]) -> dict[str, Any]:
    """v1 -> v2: ``refine.share_prompts`` (one prompt encoding for a seed's samples) was added;
    it changes only the speed, never the numbers (tested against the code before it), so an
    older run resumes with it on (``True``)."""
    return _with_in(config, "refine", share_prompts=True)


def _llome_3_reward_beta(config: dict[str, Any]) -> dict[str, Any]:
    """v2 -> v3: ``finetune.reward_beta`` (an override of the reward's factor in MargE and
    REINFORCE) was added, off by default (``None``: the loss's own 1, as before)."""
    return _with_in(config, "finetune", reward_beta=None)


def _llome_4_head_on_targets(config: dict[str, Any]) -> dict[str, Any]:
    """v3 -> v4: ``finetune.head_on_targets`` (the output head at target positions only) was
    added, on by default; a run from before it scored every position (``False``)."""
    return _with_in(config, "finetune", head_on_targets=False)


def _llome_5_information_contract(config: dict[str, Any]) -> dict[str, Any]:
    """v4 -> v5: the information contract added ``accounting`` and ``constraint_queries``; a run
    from before it paid every evaluation, and its refinement and Filter asked ``is_feasible``
    about every candidate without counting it (``"free"``)."""
    return _with(config, accounting="every_evaluation", constraint_queries="free")


def _llome_6_generate_dtype(config: dict[str, Any]) -> dict[str, Any]:
    """v5 -> v6: ``refine.generate_dtype`` (bf16 generation) was added; before it generation
    ran in float32 (``"float32"``, the default)."""
    return _with_in(config, "refine", generate_dtype="float32")


def _llome_7_min_unique_rule(config: dict[str, Any]) -> dict[str, Any]:
    """v6 -> v7: ``min_unique_rule`` was added, "scaled" by default (the stop rule's threshold
    keeps the paper's ratio to the outputs a round generates); a run from before it stopped below
    ``num_seeds`` unique valid candidates whatever a round generated (``"paper"``)."""
    return _with(config, min_unique_rule="paper")


def _llome_8_shared_names(config: dict[str, Any]) -> dict[str, Any]:
    """v7 -> v8: one name for each setting every optimizer shares
    (``optimizers.base.BenchmarkSettings``): ``ga_generations`` is ``round0_generations``, ``ga``
    is ``round0_ga`` and ``filter.num_selected`` (``j``) is ``labels_per_round`` (the Filter's
    ``num_selected`` is derived from it and no longer written)."""
    return _renamed(
        config,
        {
            "ga_generations": "round0_generations",
            "ga": "round0_ga",
            "filter.num_selected": "labels_per_round",
        },
    )


LLOME_MIGRATIONS: tuple[Migration, ...] = (
    _llome_1_nested,
    _llome_2_share_prompts,
    _llome_3_reward_beta,
    _llome_4_head_on_targets,
    _llome_5_information_contract,
    _llome_6_generate_dtype,
    _llome_7_min_unique_rule,
    _llome_8_shared_names,
)


#: Each optimizer's migrations by its ``config.json`` name (``"optimizer"``): the plug-ins'
#: ``migrations``, and the ``config_version`` that ``--print-config`` shows.
MIGRATIONS: dict[str, tuple[Migration, ...]] = {
    "ga": GA_MIGRATIONS,
    "lambo2": LAMBO2_MIGRATIONS,
    "llome": LLOME_MIGRATIONS,
}
