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
    # every setting it was made with is unchanged (migrations only add settings)
    for key, value in before_config.items():
        if key not in ("rounds", "provenance"):
            assert _contains(config[key], value), key


def _contains(now, saved) -> bool:
    """``now`` equals ``saved``, sections compared key by key (a migration may add keys)."""
    if isinstance(saved, dict) and isinstance(now, dict):
        return all(k in now and _contains(now[k], v) for k, v in saved.items())
    return now == saved
