"""``llome-jax paper --methods`` takes a registered optimizer by its name
(:func:`llome_jax.bench.plan.registered_kind`): it runs with the plan's shared settings (round 0,
``j``, the budget) and is reported beside the paper's methods."""

from __future__ import annotations

import csv
import json
import pathlib

import numpy as np
import pytest

from llome_jax.bench import cli
from llome_jax.bench.plan import (
    SCALES,
    UsageError,
    budget_after_round0,
    labels_per_round,
    parse_methods,
)

HILL = '''
import numpy as np
from llome_jax.optimizers import AskTellOptimizer


class Hill(AskTellOptimizer):
    """One random substitution of the best labelled sequence per proposal."""

    name = "hill"

    def ask(self, key, state, data, num):
        rng = self.numpy_rng(key)
        best, _ = data.best
        seen = {row.tobytes() for row in data.sequences}
        out = []
        while len(out) < num:
            child = best.copy()
            child[rng.integers(len(child))] = rng.integers(data.num_states)
            if child.tobytes() not in seen:
                seen.add(child.tobytes())
                out.append(child)
        return np.asarray(out, np.int32), state
'''


@pytest.fixture
def hill(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> str:
    path = tmp_path / "hill.py"
    path.write_text(HILL)
    monkeypatch.setenv("LLOME_JAX_OPTIMIZERS", f"{path}:Hill")
    return "hill"


def test_a_registered_name_is_a_method_and_an_unknown_one_is_named(hill: str) -> None:
    assert parse_methods("GA,hill") == ["GA", "hill"]
    with pytest.raises(UsageError, match=r"unknown method 'hil'; .* or a registered optimizer"):
        parse_methods("GA,hil")


def test_paper_runs_a_registered_optimizer_with_the_plans_settings(
    hill: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    argv = ["--scale", "smoke", "--only", "1", "--functions", "f2", "--methods", "GA,hill"]
    assert cli.main([*argv, "--out", str(out), "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "f2/hill_seed0" in plan and "registry:hill" in plan
    assert cli.main([*argv, "--out", str(out), "--runs", "f2/hill_seed0", "--no-progress"]) == 0
    run = out / "runs" / "f2" / "hill_seed0"
    config = json.loads((run / "config.json").read_text())
    scale = SCALES["smoke"]
    assert config["optimizer"] == "hill"
    assert config["budget"] == budget_after_round0(scale) == 64  # 2 rounds of j = 32
    assert config["labels_per_round"] == labels_per_round(scale) == 32
    with open(run / "evaluated.csv") as stream:
        rounds = np.asarray([int(row["round"]) for row in csv.DictReader(stream)])
    assert int((rounds > 0).sum()) == 64  # exactly the budget after round 0
    with open(out / "solver.csv") as stream:
        rows = {row["method"]: row for row in csv.DictReader(stream)}
    assert rows["hill"]["labels_read"] == "64" and rows["hill"]["seeds"] == "1"
