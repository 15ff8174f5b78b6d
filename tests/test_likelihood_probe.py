"""``experiments/llome_likelihood_probe.py``: the preference statistic (hand-derived values) and
the configuration it rebuilds from a run directory."""

from __future__ import annotations

import json
import math
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "experiments"))

import llome_likelihood_probe as probe


def test_preference_counts_pairs_and_ties_half() -> None:
    assert probe.prefers([3.0], [1.0, 2.0]) == 1.0
    assert probe.prefers([0.0], [1.0, 2.0]) == 0.0
    assert probe.prefers([1.0], [1.0]) == 0.5
    # pairs (1,2) no, (3,2) yes, (1,1) tie, (3,1) yes -> (0 + 1 + 0.5 + 1) / 4
    assert probe.prefers([1.0, 3.0], [2.0, 1.0]) == 0.625
    assert math.isnan(probe.prefers([], [1.0]))


def test_the_configuration_comes_from_the_run(tmp_path: pathlib.Path) -> None:
    from llome_jax.llome.presets import preset

    cfg = preset("cpu-pretrained", function="Ehr(32,32)-4-4-4", instance_seed=3, seed=2)
    run = tmp_path / "pretrained_seed2"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({**cfg.to_dict(), "optimizer": "llome"}))
    assert probe.run_config(run, "f2", 1) == cfg


def test_each_runs_csv_row_is_written_before_the_next_run_is_probed(
    tmp_path: pathlib.Path, monkeypatch
) -> None:
    """A long probe that stops (a timeout, a crash) keeps the rows of the runs it finished."""
    import csv

    import pytest

    def fake_probe(run_dir, *args):
        if run_dir.name == "b":
            raise RuntimeError("stopped")
        return {"run": str(run_dir), "p_improving_over_neutral": 0.25}

    monkeypatch.setattr(probe, "probe", fake_probe)
    out = tmp_path / "probe.csv"
    with pytest.raises(RuntimeError, match="stopped"):
        probe.main([str(tmp_path / "a"), str(tmp_path / "b"), "--csv", str(out)])
    with open(out, newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert rows == [{"run": str(tmp_path / "a"), "p_improving_over_neutral": "0.25"}]
