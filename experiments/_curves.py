"""Shared pieces of the optimizer-comparison experiments (``llome_f2.py``, ``lambo2_f2.py``):
the GA baseline at an equal oracle budget and the ``curves.csv`` / final-regret output."""

from __future__ import annotations

import csv
import pathlib

CURVE_FIELDS = ["method", "seed", "round", "num_evaluations", "min_regret"]


def run_ga(seed: int, budget: int, function: str) -> list[tuple[int, float]]:
    """The paper-setting GA on ``function`` for ``budget // n`` generations:
    ``[(num_evaluations, min_regret)]`` per generation."""
    import jax
    import numpy as np

    from llome_jax import ehrlich, ga

    fn = ehrlich.resolve_function(function)
    x0 = ehrlich.resolve_initial_solution(function)
    config = ga.GAConfig()
    generations = max(1, budget // config.num_particles)
    _, trace = ga.run(jax.random.key(10_000 + seed), fn, x0, generations, config)
    evaluations = np.asarray(trace.num_evaluations)
    regret = 1.0 - np.asarray(trace.best_value, np.float64)
    return list(zip(evaluations.tolist(), regret.tolist()))


def write_curves(path: pathlib.Path, rows: list[list]) -> None:
    """``curves.csv``: one row per (method, seed, round) with :data:`CURVE_FIELDS`."""
    with open(path, "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(CURVE_FIELDS)
        writer.writerows(rows)


def print_finals(curves: dict[str, list]) -> None:
    """Final min regret and evaluations of every run, one line per method."""
    for name, runs in curves.items():
        finals = [y[-1] for _, y in runs]
        print(f"{name:>12}: final min regret {finals} at {[x[-1] for x, _ in runs]} evaluations")
