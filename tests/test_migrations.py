"""The versioned migrations of saved configurations (``llome_jax.run.migrations``): each step by
hand (an input and the hand-written output), the version bookkeeping, and the plug-ins' use."""

from __future__ import annotations

import copy
import json
import pathlib

import pytest

from llome_jax.run.migrations import (
    CONFIG_VERSION,
    GA_MIGRATIONS,
    LAMBO2_MIGRATIONS,
    LLOME_MIGRATIONS,
    MIGRATIONS,
    migrate,
)

OLD_RUNS = pathlib.Path(__file__).parent / "fixtures" / "old_runs"

#: ``(steps, index, input, expected)``: migration ``steps[index]`` (version ``index`` ->
#: ``index + 1``) maps the input to the expected dict; a key already present is kept.
CASES = [
    # the GA
    (
        GA_MIGRATIONS,
        0,
        {"optimizer": "ga", "rounds": 3},
        {
            "optimizer": "ga",
            "rounds": 3,
            "accounting": "every_evaluation",
            "constraint_queries": "off",
        },
    ),
    (
        GA_MIGRATIONS,
        0,
        {"accounting": "pay_once"},
        {"accounting": "pay_once", "constraint_queries": "off"},
    ),
    (GA_MIGRATIONS, 1, {"rounds": 3}, {"rounds": 3, "labels_per_round": None}),
    (GA_MIGRATIONS, 1, {"labels_per_round": 7}, {"labels_per_round": 7}),
    # one name per shared setting: the old key's value under the new key
    (
        GA_MIGRATIONS,
        2,
        {"initial_generations": 3, "ga": {"num_particles": 32}, "rounds": 2},
        {"round0_generations": 3, "round0_ga": {"num_particles": 32}, "rounds": 2},
    ),
    (GA_MIGRATIONS, 2, {"round0_generations": 4}, {"round0_generations": 4}),
    # LaMBO-2
    (
        LAMBO2_MIGRATIONS,
        0,
        {"design": {"num_steps": 4}},
        {"design": {"num_steps": 4, "kl_weight": 0.0}},
    ),
    (LAMBO2_MIGRATIONS, 0, {"rounds": 2}, {"rounds": 2}),  # no design section: unchanged
    (LAMBO2_MIGRATIONS, 1, {"rounds": 2}, {"rounds": 2, "warm_start": False}),
    (LAMBO2_MIGRATIONS, 1, {"warm_start": True}, {"warm_start": True}),
    (
        LAMBO2_MIGRATIONS,
        2,
        {"design": {"kl_weight": 0.25}},
        {"design": {"kl_weight": 0.25, "decode_temperature": 1.0}},
    ),
    (
        LAMBO2_MIGRATIONS,
        3,
        {"seed": 1},
        {"seed": 1, "accounting": "every_evaluation", "constraint_queries": "off"},
    ),
    (
        LAMBO2_MIGRATIONS,
        4,
        {"train": {"epochs": 2}},
        {"train": {"epochs": 2, "fused": False}},
    ),
    (LAMBO2_MIGRATIONS, 4, {"train": {"fused": True}}, {"train": {"fused": True}}),
    (LAMBO2_MIGRATIONS, 5, {"seed": 1}, {"seed": 1, "ga_mutation_prob": 0.005, "keys": "v1"}),
    (
        LAMBO2_MIGRATIONS,
        5,
        {"keys": "shared", "ga_mutation_prob": 0.1},
        {"keys": "shared", "ga_mutation_prob": 0.1},
    ),
    (
        LAMBO2_MIGRATIONS,
        6,
        {"num_samples": 16, "ga_generations": 2, "ga_particles": 200, "ga_mutation_prob": 0.1},
        {
            "labels_per_round": 16,
            "round0_generations": 2,
            "round0_ga": {
                "num_particles": 200,
                "mutation_prob": 0.1,
                "survival_quantile": 0.1,
                "recombine_prob": 0.0882,
            },
        },
    ),
    (LAMBO2_MIGRATIONS, 6, {"seed": 1}, {"seed": 1}),  # no round 0 keys: nothing to move
    # LLOME (step 0, the nesting, has its own tests below)
    (
        LLOME_MIGRATIONS,
        1,
        {"refine": {"num_samples": 4}},
        {"refine": {"num_samples": 4, "share_prompts": True}},
    ),
    (
        LLOME_MIGRATIONS,
        2,
        {"finetune": {"epochs": 1}},
        {"finetune": {"epochs": 1, "reward_beta": None}},
    ),
    (
        LLOME_MIGRATIONS,
        3,
        {"finetune": {"epochs": 1}},
        {"finetune": {"epochs": 1, "head_on_targets": False}},
    ),
    (
        LLOME_MIGRATIONS,
        3,
        {"finetune": {"head_on_targets": True}},
        {"finetune": {"head_on_targets": True}},
    ),
    (
        LLOME_MIGRATIONS,
        4,
        {"seed": 2},
        {"seed": 2, "accounting": "every_evaluation", "constraint_queries": "free"},
    ),
    (LLOME_MIGRATIONS, 5, {"refine": {}}, {"refine": {"generate_dtype": "float32"}}),
    # a run from before the sized stop rule stopped below num_seeds unique candidates
    (LLOME_MIGRATIONS, 6, {"num_seeds": 200}, {"num_seeds": 200, "min_unique_rule": "paper"}),
    (LLOME_MIGRATIONS, 6, {"min_unique_rule": "scaled"}, {"min_unique_rule": "scaled"}),
    (
        LLOME_MIGRATIONS,
        7,
        {
            "ga_generations": 2,
            "ga": {"num_particles": 200},
            "filter": {"num_selected": 32, "deduplicate": True},
        },
        {
            "round0_generations": 2,
            "round0_ga": {"num_particles": 200},
            "filter": {"deduplicate": True},
            "labels_per_round": 32,
        },
    ),
]


@pytest.mark.parametrize(("steps", "index", "given", "expected"), CASES)
def test_each_migration_by_hand(steps, index, given, expected) -> None:
    before = copy.deepcopy(given)
    assert steps[index](given) == expected
    assert given == before  # pure: the input is not changed


@pytest.mark.parametrize("steps", [GA_MIGRATIONS, LAMBO2_MIGRATIONS, LLOME_MIGRATIONS])
def test_every_migration_says_what_changed_and_is_covered(steps) -> None:
    for index, step in enumerate(steps):
        assert step.__doc__ and f"v{index} -> v{index + 1}" in step.__doc__, step.__name__
        covered = any(s is steps and i == index for s, i, *_ in CASES)
        assert covered or (steps is LLOME_MIGRATIONS and index == 0), step.__name__


def test_the_flat_llome_configuration_is_nested() -> None:
    """The first LoopConfig's flat names move into their sections; ``filter_rule`` becomes the
    Filter's fields; settings the file lacks take the values its run had; records are kept."""
    flat = {
        "optimizer": "llome",
        "provenance": [],
        "function": "Ehr(8,8)-2-2-2",
        "seed": 3,
        "schedule": "sft:1,marge:1",
        "epochs": 4,
        "learning_rate": 0.005,
        "ga_particles": 200,
        "symmetric_pairs": True,
        "generation_batch_size": 256,
        "num_selected": 32,
        "filter_rule": "reference",
    }
    expected = {
        "optimizer": "llome",
        "provenance": [],
        "function": "Ehr(8,8)-2-2-2",
        "instance_seed": None,
        "schedule": "sft:1,marge:1",
        "rounds": 10,
        "seed": 3,
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
            "num_particles": 200,
            "survival_quantile": 0.1,
            "mutation_prob": 0.005,
            "recombine_prob": 0.0882,
        },
        "propen": {
            "num_neighbours": 30,
            "max_distance": 0.25,
            "max_infeasible_fraction": 0.1,
            "symmetric": True,
        },
        "finetune": {
            "learning_rate": 0.005,
            "dpo_learning_rate": 1e-7,
            "weight_decay": 0.01,
            "warmup_steps": 0,
            "dpo_warmup_steps": 150,
            "epochs": 4,
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
            "batch_size": 256,
            "next_input": "paper",
            "selection_likelihood": "raw",
        },
        "filter": {
            "num_selected": 32,
            "likelihood_quantile": 0.6,
            "likelihood_threshold": None,
            "strict_threshold": False,
            "threshold_only_over_budget": True,
            "max_infeasible_fraction": None,
            "deduplicate": True,
        },
    }
    assert LLOME_MIGRATIONS[0](copy.deepcopy(flat)) == expected
    # the paper's Filter is the default one; a nested configuration is left as it is
    paper = LLOME_MIGRATIONS[0]({**flat, "filter_rule": "paper"})["filter"]
    assert paper["strict_threshold"] is True and paper["max_infeasible_fraction"] == 0.1
    assert LLOME_MIGRATIONS[0](expected) == expected


def test_migrate_applies_the_steps_after_the_saved_version() -> None:
    saved = {"optimizer": "ga", "rounds": 3}
    assert migrate(saved, GA_MIGRATIONS) == {
        "optimizer": "ga",
        "rounds": 3,
        "accounting": "every_evaluation",
        "constraint_queries": "off",
        "labels_per_round": None,
        CONFIG_VERSION: 3,
    }
    assert saved == {"optimizer": "ga", "rounds": 3}  # a copy is migrated
    # version 1 already has the information contract's settings: only steps 2 and 3 run
    assert migrate({**saved, CONFIG_VERSION: 1}, GA_MIGRATIONS) == {
        **saved,
        "labels_per_round": None,
        CONFIG_VERSION: 3,
    }
    assert migrate({**saved, CONFIG_VERSION: 3}, GA_MIGRATIONS) == {**saved, CONFIG_VERSION: 3}
    # version 2 has the old names of the shared settings: only step 3 (the renames) runs
    old = {**saved, "initial_generations": 2, CONFIG_VERSION: 2}
    assert migrate(old, GA_MIGRATIONS) == {**saved, "round0_generations": 2, CONFIG_VERSION: 3}


@pytest.mark.parametrize("version", [4, -1, "2", True, 1.0])
def test_a_newer_or_malformed_version_is_refused(version) -> None:
    message = "newer than this llome_jax" if version == 4 else "must be an integer"
    with pytest.raises(ValueError, match=message):
        migrate({CONFIG_VERSION: version}, GA_MIGRATIONS)


def test_the_plugins_record_their_version_and_read_their_own_config_unchanged() -> None:
    """A new run's ``config.json`` records the latest version, and migrating it changes
    nothing; the plug-ins' migrations are the lists of ``llome_jax.run.migrations``."""
    from llome_jax.ga.optimizer import GARunConfig, GeneticAlgorithm
    from llome_jax.lambo2 import optimizer as lambo2
    from llome_jax.llome.loop import Llome
    from llome_jax.llome.presets import preset

    for plugin, steps, cfg in (
        (GeneticAlgorithm, GA_MIGRATIONS, GARunConfig()),
        (lambo2.Lambo2, LAMBO2_MIGRATIONS, lambo2.preset("smoke")),
        (Llome, LLOME_MIGRATIONS, preset("smoke")),
    ):
        assert plugin.migrations is steps is MIGRATIONS[plugin.name]
        assert plugin.version() == len(steps)
        saved = {"optimizer": plugin.name, **cfg.to_dict(), CONFIG_VERSION: len(steps)}
        assert plugin.upgrade_config(copy.deepcopy(saved)) == saved
        # written before versions (version 0) by code of today's settings: the same
        assert plugin.upgrade_config({k: v for k, v in saved.items() if k != CONFIG_VERSION}) == (
            saved
        )
    config = GeneticAlgorithm(GARunConfig(function="Ehr(8,8)-2-2-2", instance_seed=1))
    assert config.config_dict()[CONFIG_VERSION] == len(GA_MIGRATIONS)


def test_lambo2_configs_written_with_defaults_left_out_read_as_today() -> None:
    """Until versions existed ``Lambo2Config.to_dict`` left four defaults out of
    ``config.json``; such a file (version 0) reads as today's configuration."""
    from llome_jax.lambo2 import optimizer as lambo2

    today = lambo2.preset("smoke").to_dict()
    old = copy.deepcopy(today)
    del old["design"]["kl_weight"], old["design"]["decode_temperature"]
    del old["warm_start"], old["train"]["fused"]
    assert lambo2.Lambo2.upgrade_config(old) == {**today, CONFIG_VERSION: len(LAMBO2_MIGRATIONS)}


@pytest.mark.parametrize("optimizer", ["ga", "llome", "lambo2"])
def test_the_old_run_fixtures_are_version_0(optimizer) -> None:
    """The fixtures of ``test_old_runs.py`` were written before versions (no
    ``config_version``)."""
    saved = json.loads((OLD_RUNS / optimizer / "config.json").read_text())
    assert saved["optimizer"] == optimizer and CONFIG_VERSION not in saved
