"""The GA difficulty sweep records its settings (``settings.json``) and re-runs when the
scale's seeds or generations changed, instead of reusing an old ``curves.csv`` (issue 62).

``run_setting`` (the jitted GA) is replaced by a deterministic stand-in, so the test checks the
reuse rule and the files, not the GA (``tests/test_ga.py`` checks that)."""

from __future__ import annotations

import csv
import dataclasses
import json
import pathlib

import numpy as np

from llome_jax.bench import difficulty
from llome_jax.bench.plan import SCALES


def _fake_setting(config, seeds, generations) -> np.ndarray:
    """Best value per generation: seed s reaches (s + 1) / 100 per generation."""
    return np.array([[(s + 1) * (g + 1) / 100.0 for g in range(generations)] for s in seeds])


def _seeds(path: pathlib.Path) -> set[int]:
    with open(path / "curves.csv", newline="") as stream:
        return {int(row["seed"]) for row in csv.DictReader(stream)}


def test_the_sweep_reruns_when_its_seeds_change(tmp_path, monkeypatch) -> None:
    calls: list[tuple[int, ...]] = []

    def fake(config, seeds, generations):
        calls.append(tuple(seeds))
        return _fake_setting(config, seeds, generations)

    monkeypatch.setattr(difficulty, "run_setting", fake)
    small = dataclasses.replace(SCALES["smoke"], difficulty_seeds=2, difficulty_generations=3)
    path = tmp_path / "ga_difficulty"
    assert difficulty.run_difficulty(small, path) == "new"
    assert _seeds(path) == {0, 1}
    saved = json.loads((path / "settings.json").read_text())
    assert (saved["seeds"], saved["generations"]) == ([0, 1], 3)
    # 15 settings, 11 distinct: the reference (v 32, L 32, c 2, k = q 4, q 4) recurs in each
    first = len(calls)
    assert first == 11
    # the same settings: nothing runs
    assert difficulty.run_difficulty(small, path) == "skipped" and len(calls) == first
    # eight seeds: the old curves are not reused
    more = dataclasses.replace(small, difficulty_seeds=8)
    assert difficulty.run_difficulty(more, path) == "re-run: seeds 0-1 -> 0-7"
    assert _seeds(path) == set(range(8)) and calls[-1] == tuple(range(8))
    # a sweep from before settings.json: re-run, saying so
    (path / "settings.json").unlink()
    assert difficulty.run_difficulty(more, path) == "re-run: the sweep recorded no settings"
    assert json.loads((path / "settings.json").read_text())["seeds"] == list(range(8))
