"""``experiments/pretraining.py``: function specs, the rounds that reach 30K labels, and the
table it reads from run directories (hand-written curves with known medians)."""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "experiments"))

import pretraining


def test_function_specs_split_outside_parentheses_and_refuse_pretraining_seeds() -> None:
    specs = pretraining.split_functions("f2,Ehr(32,32)-4-4-4@1, Ehr(32,64)-4-4-4@7")
    assert specs == ["f2", "Ehr(32,32)-4-4-4@1", "Ehr(32,64)-4-4-4@7"]
    assert [pretraining.parse_function(s) for s in specs] == [
        ("f2", None),
        ("Ehr(32,32)-4-4-4", 1),
        ("Ehr(32,64)-4-4-4", 7),
    ]
    with pytest.raises(ValueError, match="pretraining's"):
        pretraining.parse_function("Ehr(32,32)-4-4-4@1000000")
    assert pretraining.slug("Ehr(32,32)-4-4-4@1") == "Ehr_32_32_-4-4-4_1"


def test_rounds_reach_the_budget() -> None:
    # round 0 pays >= 1,000 labels, each round 2,000: 1,000 + 15 x 2,000 = 31,000 >= 30,000
    # while 14 rounds give 29,000
    assert pretraining.rounds_for(30_000) == 15
    assert pretraining.rounds_for(10_000) == 5  # 1,000 + 5 x 2,000 = 11,000; 4 give 9,000


def _run_dir(path: pathlib.Path, curve: list[tuple[int, float]]) -> None:
    path.mkdir(parents=True)
    config = {"optimizer": "llome", "schedule": "sft:1,marge:14", "function": "f2"}
    (path / "config.json").write_text(json.dumps({**config, "instance_seed": None}))
    lines = [
        json.dumps({"round": i, "num_evaluations": n, "min_regret": r, "best_value": 1 - r})
        for i, (n, r) in enumerate(curve)
    ]
    (path / "rounds.jsonl").write_text("\n".join(lines) + "\n")


def test_summary_medians_and_runs_short_of_a_budget(tmp_path: pathlib.Path) -> None:
    runs = tmp_path / "runs" / "f2"
    _run_dir(runs / "pretrained_seed0", [(1100, 0.95), (10500, 0.7), (20100, 0.5), (30500, 0.25)])
    _run_dir(runs / "pretrained_seed1", [(1100, 0.95), (9900, 0.6), (19900, 0.4), (30200, 0.4)])
    _run_dir(runs / "pretrained_seed2", [(1100, 0.95), (9000, 0.9), (21000, 0.8), (29000, 0.6)])
    _run_dir(runs / "scratch_seed0", [(1100, 0.95), (10000, 0.8), (20000, 0.79), (30000, 0.79)])
    args = argparse.Namespace(out=str(tmp_path))
    rows = pretraining.summarise(["f2"], args)
    cell = {(r["method"], r["budget"]): r for r in rows}
    pre = "LLOME-MargE (pretrained)"
    # 10K: seed0 0.95 (its 10,500 round is past 10K), seed1 0.6, seed2 0.9 -> median 0.9
    assert cell[(pre, 10_000)]["median"] == 0.9 and cell[(pre, 10_000)]["min"] == 0.6
    # 20K: 0.7, 0.4, 0.9 -> 0.7
    assert cell[(pre, 20_000)]["median"] == 0.7
    # 30K: seed2 ended at 29,000 and is not counted: 0.5 and 0.4 -> median 0.45
    assert cell[(pre, 30_000)]["runs_at_budget"] == 2 and cell[(pre, 30_000)]["runs"] == 3
    assert math.isclose(cell[(pre, 30_000)]["median"], 0.45)
    assert cell[("LLOME-MargE (scratch)", 30_000)]["median"] == 0.79
    assert ("blind local search", 10_000) not in cell  # no floor runs here


def test_each_function_takes_the_prior_of_its_configuration(tmp_path, capsys) -> None:
    """Repeated ``--prior``: f2 gets the shipped prior (pretrained on ``Ehr(32,32)-4-4-4``), an
    ``Ehr(32,64)-4-4-4`` instance the directory whose ``pretrain.json`` says that configuration;
    a function with no fitting prior is refused before any run (exit 2, one line)."""
    import shutil

    from llome_jax import priors

    weights = tmp_path / "prior64" / "weights"
    shutil.copytree(priors.resolve("prior:ehr32-32-4-4-4"), weights)
    info = json.loads((weights / "pretrain.json").read_text())
    (weights / "pretrain.json").write_text(json.dumps({**info, "function": "Ehr(32,64)-4-4-4"}))
    candidates = ["prior:ehr32-32-4-4-4", str(weights)]
    assert pretraining.prior_for("f2", candidates) == "prior:ehr32-32-4-4-4"
    assert pretraining.prior_for("Ehr(32,64)-4-4-4@3", candidates) == str(weights)
    assert pretraining.prior_for("Ehr(32,64)-4-4-4@3", candidates[::-1]) == str(weights)
    with pytest.raises(ValueError, match=r"pretrained on Ehr\(32,128\)-8-8-8 \(for f4\)"):
        pretraining.prior_for("f4", candidates)
    capsys.readouterr()
    argv = ["--functions", "f2,f4", "--out", str(tmp_path / "out"), "--no-progress"]
    assert pretraining.main([*argv, "--prior", str(weights)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Ehr(32,32)-4-4-4 (for f2)" in err
    assert not (tmp_path / "out").exists()


def test_a_run_that_stopped_early_counts_with_its_last_value(tmp_path: pathlib.Path) -> None:
    """A finished run (``done.json``) below a budget, e.g. stopped with no training pairs, counts
    there with its last min regret (it can pay no more) and is listed with its reason; an
    unfinished one does not count."""
    runs = tmp_path / "runs" / "f2"
    _run_dir(runs / "pretrained_seed0", [(1100, 0.95), (10500, 0.7), (20100, 0.5), (30500, 0.25)])
    _run_dir(runs / "pretrained_seed1", [(1100, 0.95), (10100, 0.6), (23124, 0.4)])
    _run_dir(runs / "pretrained_seed2", [(1100, 0.95), (10200, 0.9), (21000, 0.8)])
    reason = "the labelled set yields no training pairs"
    done = {"last_round": 2, "stop_reason": reason, "seconds_this_call": 1.0}
    (runs / "pretrained_seed1" / "done.json").write_text(json.dumps(done))
    args = argparse.Namespace(out=str(tmp_path))
    rows = pretraining.summarise(["f2"], args)
    cell = {(r["method"], r["budget"]): r for r in rows}
    at_30k = cell[("LLOME-MargE (pretrained)", 30_000)]
    # seed0 0.5 (its 30,500 round is past 30K), seed1 stopped at 23,124 with 0.4; seed2
    # unfinished at 21,000: not counted
    assert (at_30k["runs_at_budget"], at_30k["ended_before"]) == (2, 1)
    assert math.isclose(at_30k["median"], 0.45)
    assert cell[("LLOME-MargE (pretrained)", 20_000)]["ended_before"] == 0
    assert pretraining.early_stops("f2", args) == [
        f"LLOME-MargE (pretrained) seed 1: after round 2, 23,124 labels ({reason})"
    ]
