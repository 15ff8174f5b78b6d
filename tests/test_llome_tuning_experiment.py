"""``experiments/llome_tuning.py``: a rerun skips a run that stopped early, wherever the stop was
recorded (a round's ``stop_reason`` or ``stopped.json`` after round 0), and resumes one that did not."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "experiments"))

import llome_tuning

from llome_jax.llome import loop
from llome_jax.rundir import RunDirectory

ROUND_0 = {"round": 0, "num_evaluations": 10_000, "min_regret": 0.9, "seconds": 1.0}


def _run_dir(out: pathlib.Path) -> pathlib.Path:
    run_dir = out / "base" / "inst1_seed0"
    run_dir.mkdir(parents=True)
    (run_dir / "rounds.jsonl").write_text(json.dumps(ROUND_0) + "\n")
    (run_dir / "config.json").write_text("{}")
    return run_dir


def _main(out: pathlib.Path) -> int:
    args = ["--variants", "base", "--instances", "1", "--seeds", "0", "--rounds", "3"]
    return llome_tuning.main([*args, "--out", str(out), "--no-progress"])


@pytest.fixture
def runs_started(monkeypatch) -> list[pathlib.Path]:
    started: list[pathlib.Path] = []
    monkeypatch.setattr(loop, "run", lambda cfg, run_dir, **kw: started.append(run_dir))
    return started


def test_a_run_stopped_after_round_0_is_not_resumed(tmp_path, runs_started) -> None:
    run_dir = _run_dir(tmp_path)
    RunDirectory(run_dir).log_stop(0, "no training pairs")
    assert _main(tmp_path) == 0
    assert runs_started == []


def test_a_run_short_of_its_rounds_is_resumed(tmp_path, runs_started) -> None:
    run_dir = _run_dir(tmp_path)
    assert _main(tmp_path) == 0
    assert runs_started == [run_dir]
