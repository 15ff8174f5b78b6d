"""Run directories made by an older llome_jax still load and resume.

``fixtures/old_runs/{ga,llome,lambo2}`` are one-round runs written before configurations had a
version (``config.json`` without ``config_version``), by commit 4500c4b:
``llome-jax ga --function f2 --particles 32 --initial-generations 1 --generations-per-round 1
--rounds 1``, ``llome-jax llome --preset smoke --rounds 1 --set model_overrides=<a 16-wide,
one-layer Pythia> --set training_data=cumulative`` and ``llome-jax lambo2 --preset smoke
--function 'Ehr(8,16)-2-4-4' --instance-seed 1 --num-samples 16 --rounds 1``; the last two under
this suite's ``XLA_FLAGS`` (``conftest.py``), because a sampled instance's transition matrix
differs by one float32 ulp at XLA's default optimisation level, so its ``function_digest``
differs and a resume would be refused as "another Ehrlich instance" (``f2`` is shipped data).
Each resumes one more round from the command line (``--resume --rounds 2``) through the
migrations, keeps what it had, and then records the latest ``config_version``.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from llome_jax import cli
from llome_jax.run.migrations import (
    CONFIG_VERSION,
    GA_MIGRATIONS,
    LAMBO2_MIGRATIONS,
    LLOME_MIGRATIONS,
)

OLD_RUNS = pathlib.Path(__file__).parent / "fixtures" / "old_runs"

LATEST = {"ga": GA_MIGRATIONS, "llome": LLOME_MIGRATIONS, "lambo2": LAMBO2_MIGRATIONS}

#: a GA configuration's settings (``ga.GAConfig``)
_GA_KEYS = ("num_particles", "survival_quantile", "mutation_prob", "recombine_prob")


@pytest.mark.parametrize(
    "optimizer",
    [
        "ga",
        pytest.param("llome", marks=pytest.mark.slow),
        pytest.param("lambo2", marks=pytest.mark.slow),
    ],
)
def test_an_old_run_directory_resumes_one_more_round(
    tmp_path: pathlib.Path, optimizer: str
) -> None:
    out = tmp_path / optimizer
    shutil.copytree(OLD_RUNS / optimizer, out)
    before_config = json.loads((out / "config.json").read_text())
    before_rows = (out / "evaluated.csv").read_text()
    before_rounds = (out / "rounds.jsonl").read_text()
    argv = [optimizer, "--resume", "--rounds", "2", "--no-progress", "--out", str(out)]
    assert cli.main(argv) == 0
    records = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [0, 1, 2]
    # the rounds it had are kept as they were; round 2 paid new labels
    assert (out / "rounds.jsonl").read_text().startswith(before_rounds)
    assert (out / "evaluated.csv").read_text().startswith(before_rows)
    assert records[2]["num_evaluations"] > records[1]["num_evaluations"]
    config = json.loads((out / "config.json").read_text())
    assert config[CONFIG_VERSION] == len(LATEST[optimizer])
    assert config["rounds"] == 2 and len(config["provenance"]) == 2
    # every setting it was made with has its value, under its new name where it was renamed
    # (the old name is gone); the others are unchanged (a migration may add settings)
    renamed = RENAMED[optimizer]
    for key, value in _leaves(before_config).items():
        if key.split(".")[0] in ("rounds", "provenance"):
            continue
        if key in renamed:
            assert _get(config, renamed[key]) == value, (key, renamed[key])
            assert _get(config, key, None) is None, f"{key} is still in config.json"
        else:
            assert _get(config, key) == value, key
    assert set(renamed) <= set(_leaves(before_config)), "a rename the fixture cannot check"


#: the settings renamed since the fixtures were made (one name per shared setting,
#: ``optimizers.base.BenchmarkSettings``): old dotted key -> new, written out by hand
RENAMED = {
    "ga": {
        "initial_generations": "round0_generations",
        **{f"ga.{k}": f"round0_ga.{k}" for k in _GA_KEYS},
    },
    "llome": {
        "ga_generations": "round0_generations",
        "filter.num_selected": "labels_per_round",
        **{f"ga.{k}": f"round0_ga.{k}" for k in _GA_KEYS},
    },
    "lambo2": {
        "num_samples": "labels_per_round",
        "ga_generations": "round0_generations",
        "ga_particles": "round0_ga.num_particles",
        "ga_mutation_prob": "round0_ga.mutation_prob",
    },
}


def _leaves(config: dict, prefix: str = "") -> dict:
    """``config`` as dotted key -> value (nested dicts spelled out)."""
    out = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def _get(config: dict, dotted: str, *default):
    for name in dotted.split("."):
        if not isinstance(config, dict) or name not in config:
            if default:
                return default[0]
            raise KeyError(dotted)
        config = config[name]
    return config
