"""Nested configurations: overrides by dotted key, dict round trips, flat legacy names, and the
``--set`` / ``--config`` / ``--print-config`` flags of every optimizer command."""

from __future__ import annotations

import dataclasses
import json

import pytest

from llome_jax import cli, configs
from llome_jax.ga import GAConfig
from llome_jax.ga.optimizer import GARunConfig
from llome_jax.lambo2 import optimizer as lambo2
from llome_jax.llome.config import FLAT_KEYS, LoopConfig
from llome_jax.llome.filter import FilterConfig
from llome_jax.llome.presets import preset


@dataclasses.dataclass(frozen=True)
class _Inner:
    rate: float = 0.1
    steps: int = 3
    sizes: tuple[int, ...] = (1, 2)
    mode: str | None = None

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError("steps must be >= 1")


@dataclasses.dataclass(frozen=True)
class _Outer:
    name: str = "a"
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    pairs: tuple[tuple[str, int], ...] = ()


def test_override_dotted_nested_and_keywords_together():
    got = configs.override(
        _Outer(), {"inner.rate": 0.5, "inner": {"sizes": [3, 4]}, "pairs": {"x": 1}}, name="b"
    )
    assert got == _Outer("b", _Inner(0.5, 3, (3, 4), None), (("x", 1),))
    assert configs.override(got, {"inner.rate": 2}).inner.rate == 2.0  # int accepted for float
    assert configs.leaf_keys(_Outer) == [
        "name", "inner.rate", "inner.steps", "inner.sizes", "inner.mode", "pairs",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"inner.rat": 1.0}, r"unknown setting 'inner.rat'.*inner\.rate, inner\.steps"),
        ({"nme": "x"}, r"unknown setting 'nme'.*valid keys: name, inner\.rate"),
        ({"name.x": 1}, r"'name' has no sub-settings"),
        ({"inner": 3}, r"'inner' is a group of settings"),
        ({"inner.steps": "4"}, r"'inner.steps' must be int; got '4'"),
        ({"inner.steps": True}, r"'inner.steps' must be int"),
        ({"inner.rate": "fast"}, r"'inner.rate' must be float"),
        ({"inner.sizes": [1, "a"]}, r"'inner.sizes' must be"),
        ({"inner.steps": 0}, r"bad settings in 'inner': steps must be >= 1"),
    ],
)
def test_override_refuses_bad_keys_and_values_clearly(overrides, message):
    with pytest.raises(ValueError, match=message):
        configs.override(_Outer(), overrides)


def test_parse_assignment_reads_json_else_text():
    assert configs.parse_assignment("a.b=4") == ("a.b", 4)
    assert configs.parse_assignment("a=1e-3") == ("a", 1e-3)
    assert configs.parse_assignment("a = null") == ("a", None)
    assert configs.parse_assignment("t=[0.6, 0.8]") == ("t", [0.6, 0.8])
    assert configs.parse_assignment("mode=reference") == ("mode", "reference")
    assert configs.parse_assignment("flag=true") == ("flag", True)
    with pytest.raises(ValueError, match="KEY=VALUE"):
        configs.parse_assignment("finetune.epochs")


@pytest.mark.parametrize("name", ["smoke", "cpu", "paper"])
def test_llome_config_round_trips_through_its_dict(name):
    cfg = preset(name, weights="/w") if name == "paper" else preset(name)
    text = json.dumps(cfg.to_dict())
    assert LoopConfig.from_dict(json.loads(text)) == cfg
    assert hash(LoopConfig.from_dict(json.loads(text))) == hash(cfg)


def test_llome_flat_names_are_aliases_of_the_nested_keys():
    for flat, dotted in FLAT_KEYS.items():
        default = _get(LoopConfig(), dotted)
        value = _another_value(flat, default)
        by_flat = LoopConfig().replace(**{flat: value})
        assert _get(by_flat, dotted) == value, flat
        assert by_flat == LoopConfig().replace(**{dotted: value}), flat
    reference = LoopConfig().replace(filter_rule="reference", num_selected=7)
    assert reference.filter == FilterConfig.reference(7)
    # an explicit filter key after the rule wins over the rule's value
    mixed = LoopConfig().replace(filter_rule="reference", **{"filter.deduplicate": False})
    assert mixed.filter == FilterConfig.reference(2000, deduplicate=False)
    assert LoopConfig().replace(schedule="sft:2,dpo:1").schedule == (("sft", 2), ("dpo", 1))


def _get(config, dotted: str):
    for name in dotted.split("."):
        config = getattr(config, name)
    return config


@pytest.mark.parametrize(
    ("make", "old", "new", "value"),
    [
        (GARunConfig, "initial_generations", "round0_generations", 4),
        (GARunConfig, "ga.num_particles", "round0_ga.num_particles", 64),
        (LoopConfig, "ga_generations", "round0_generations", 4),
        (LoopConfig, "ga.mutation_prob", "round0_ga.mutation_prob", 0.05),
        (LoopConfig, "filter.num_selected", "labels_per_round", 64),
        (LoopConfig, "num_selected", "labels_per_round", 64),
        (lambo2.Lambo2Config, "num_samples", "labels_per_round", 64),
        (lambo2.Lambo2Config, "ga_generations", "round0_generations", 4),
        (lambo2.Lambo2Config, "ga_particles", "round0_ga.num_particles", 64),
        (lambo2.Lambo2Config, "ga_mutation_prob", "round0_ga.mutation_prob", 0.05),
    ],
)
def test_the_old_names_of_the_shared_settings_set_the_new_ones(make, old, new, value):
    """One name per shared setting (``BenchmarkSettings``): an old one, dotted or nested, sets
    the new one; only the new one is written."""
    by_old = make().replace(**{old: value})
    assert by_old == make().replace(**{new: value}) and _get(by_old, new) == value
    group, _, leaf = old.rpartition(".")
    if group:
        assert make().replace(**{group: {leaf: value}}) == by_old
    written = json.dumps(by_old.to_dict())
    if leaf not in new:
        assert f'"{leaf}"' not in written
    assert make().replace(**json.loads(written)) == by_old


def test_the_shared_settings_are_one_field_of_every_optimizer():
    from llome_jax.optimizers.base import BenchmarkSettings

    shared = [f.name for f in dataclasses.fields(BenchmarkSettings)]
    for cls in (GARunConfig, LoopConfig, lambo2.Lambo2Config):
        assert issubclass(cls, BenchmarkSettings)
        assert [f.name for f in dataclasses.fields(cls)][: len(shared)] == shared
    # LLOME's Filter reads j from labels_per_round (derived, never written nor listed)
    cfg = LoopConfig().replace(labels_per_round=48)
    assert cfg.filter.num_selected == 48 and "num_selected" not in cfg.to_dict()["filter"]
    assert "filter.num_selected" not in configs.leaf_keys(LoopConfig)


def test_an_old_name_on_the_command_line_is_accepted_with_a_note(capsys):
    shown = _printed(
        capsys, ["ga", "--rounds", "2", "--print-config", "--set", "initial_generations=5"]
    )
    assert shown["round0_generations"] == 5 and "initial_generations" not in shown
    lam = _printed(capsys, ["lambo2", "--preset", "smoke", "--print-config", "--num-samples", "8"])
    assert lam["labels_per_round"] == 8 and "num_samples" not in lam
    llome = _printed(
        capsys, ["llome", "--preset", "smoke", "--print-config", "--num-selected", "9"]
    )
    assert llome["labels_per_round"] == 9 and "num_selected" not in llome["filter"]


def _another_value(name: str, default):
    """A valid value different from ``default`` for the flat setting ``name``."""
    special = {
        "dpo_compute_dtype": "bfloat16",
        "marge_weight_norm": "sum",
        "next_input": "reference",
        "selection_likelihood": "processed",
        "selection_losses": ("dpo",),
        "selection_threshold": 0.5,
        "max_infeasible_fraction": 0.2,
        "max_distance": 0.5,
        "ga_mutation_prob": 0.25,
    }
    if name in special:
        return special[name]
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 3
    if isinstance(default, float):
        return default * 2
    return 5  # None defaults: all are positive ints or floats here


def test_presets_are_one_format_for_llome_and_lambo2():
    """Both optimizers' presets are nested dicts applied by the same override function."""
    cfg = preset("cpu", **{"finetune.epochs": 7}, refine={"num_iterations": 2})
    assert (cfg.finetune.epochs, cfg.refine.num_iterations) == (7, 2)
    assert cfg.finetune.learning_rate == 3e-3  # the rest of the preset's finetune is kept
    lam = lambo2.preset("cpu", **{"train.epochs": 5}, design={"num_steps": 2})
    assert (lam.train.epochs, lam.design.num_steps, lam.model_preset) == (5, 2, "cpu")
    assert lam == lambo2.Lambo2Config.replace(lambo2.preset("cpu"), train={"epochs": 5}).replace(
        **{"design.num_steps": 2}
    )
    with pytest.raises(ValueError, match=r"unknown setting 'train\.epoch'"):
        lambo2.preset("smoke", **{"train.epoch": 3})
    ga_cfg = GARunConfig().replace(**{"round0_ga.num_particles": 50})
    assert ga_cfg.round0_ga == GAConfig(num_particles=50)
    assert configs.from_dict(GARunConfig, json.loads(json.dumps(ga_cfg.to_dict()))) == ga_cfg


def _printed(capsys, argv: list[str]) -> dict:
    capsys.readouterr()
    assert cli.main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_set_and_config_reach_every_setting(tmp_path, capsys):
    base = ["llome", "--preset", "smoke", "--print-config"]
    shown = _printed(capsys, [*base, "--set", "finetune.epochs=3", "--set", "refine.top_k=null"])
    assert shown["finetune"]["epochs"] == 3 and shown["refine"]["top_k"] is None
    assert shown["finetune"]["learning_rate"] == 5e-3  # the smoke preset's, untouched
    # a printed configuration given back with --config reproduces itself; --set applies after it
    path = tmp_path / "run.json"
    path.write_text(json.dumps(shown))
    from_file = _printed(
        capsys, ["llome", "--preset", "cpu", "--print-config", "--config", str(path)]
    )
    assert from_file == shown
    again = _printed(capsys, [*base, "--config", str(path), "--set", "num_seeds=5"])
    assert again["num_seeds"] == 5 and again["finetune"]["epochs"] == 3
    lam = _printed(
        capsys,
        ["lambo2", "--preset", "smoke", "--print-config", "--set", "train.learning_rate=0.01"],
    )
    assert lam["train"]["learning_rate"] == 0.01
    ga = _printed(
        capsys, ["ga", "--rounds", "2", "--print-config", "--set", "round0_ga.mutation_prob=0.01"]
    )
    assert ga["round0_ga"]["mutation_prob"] == 0.01 and ga["optimizer"] == "ga"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["llome", "--set", "finetune.epoch=3"], "unknown setting 'finetune.epoch'"),
        (["llome", "--set", "finetune.epochs=many"], "'finetune.epochs' must be int"),
        (["llome", "--set", "epochs"], "KEY=VALUE"),
        (["llome", "--config", "missing.json"], "no such file"),
        (["ga", "--set", "round0_ga.num_particles=50"], "round-mode run"),
    ],
)
def test_cli_bad_settings_fail_before_any_work(tmp_path, capsys, argv, message):
    out = tmp_path / "run"
    code = cli.main([*argv, "--out", str(out), "--no-progress"])
    assert code == 2 and message in capsys.readouterr().err
    assert not out.exists()


def test_cli_config_reads_yaml_with_dotted_and_nested_keys(tmp_path, capsys):
    path = tmp_path / "settings.yaml"
    path.write_text("finetune:\n  epochs: 5\nrefine.num_samples: 2\ntemperatures: [0.5, 1.5]\n")
    shown = _printed(
        capsys, ["llome", "--preset", "smoke", "--print-config", "--config", str(path)]
    )
    assert (shown["finetune"]["epochs"], shown["refine"]["num_samples"]) == (5, 2)
    assert shown["temperatures"] == [0.5, 1.5]


def test_cli_config_from_another_optimizer_is_refused(tmp_path, capsys):
    path = tmp_path / "lambo2.json"
    path.write_text(json.dumps({"optimizer": "lambo2", "labels_per_round": 8}))
    assert cli.main(["llome", "--config", str(path), "--print-config"]) == 2
    assert "holds a 'lambo2' configuration" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["llome", "--preset", "gpu"], "invalid choice: 'gpu'"),
        (["lambo2", "--preset", "laptop"], "invalid choice: 'laptop'"),
        (
            ["llome", "--loss", "ppo"],
            "invalid choice: 'ppo' (choose from dpo, marge, reinforce, sft)",
        ),
    ],
)
def test_cli_presets_and_losses_are_choices(capsys, argv, message):
    assert cli.main([*argv, "--print-config"]) == 2
    assert message in capsys.readouterr().err


def test_layered_applies_saved_file_flags_and_assignments_in_that_order(tmp_path):
    # the library's layering (the CLI's apply_settings calls it): each later layer wins the
    # settings it names, the others come from the earlier ones
    from llome_jax.configs import layered
    from llome_jax.ga.optimizer import GARunConfig

    saved = {
        "optimizer": "ga",
        "rounds": 2,
        "seed": 5,
        "round0_ga": {"num_particles": 40},
        "loss": "x",
    }
    file = tmp_path / "settings.yaml"  # an old name (ga: round0_ga) works in a file and --set
    file.write_text("seed: 6\nga:\n  mutation_prob: 0.02\n")
    cfg, saved_settings = layered(
        GARunConfig(),
        saved=saved,
        file=str(file),
        flags={"rounds": 4},
        assignments=["ga.num_particles=64", "seed=7"],
        optimizer="ga",
        upgrade=lambda old: {**old, "round0_generations": 3},
    )
    assert (cfg.rounds, cfg.seed, cfg.round0_generations) == (4, 7, 3)
    assert (cfg.round0_ga.num_particles, cfg.round0_ga.mutation_prob) == (64, 0.02)
    assert saved_settings == {
        "rounds": 2,
        "seed": 5,
        "round0_ga": {"num_particles": 40},
        "round0_generations": 3,
    }
    with pytest.raises(ValueError, match="not 'ga'"):
        layered(GARunConfig(), file=str(_write(tmp_path, {"optimizer": "llome"})), optimizer="ga")


def _write(tmp_path, data):
    path = tmp_path / "other.json"
    path.write_text(json.dumps(data))
    return path
