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


def regret_at(x: list, y: list, budget: int) -> float:
    """Min regret of one run after at most ``budget`` oracle labels (1.0 before its first point)."""
    within = [g for e, g in zip(x, y) if e <= budget]
    return min(within) if within else 1.0


def write_method_table(
    path: pathlib.Path, curves: dict[str, list], budget: int, target: float = 0.25
) -> list[list]:
    """``by_method.csv``: per method, the min regret at ``budget`` over its runs (median, mean,
    min, max) and how many runs reached ``target``; also printed as a markdown table."""
    import numpy as np

    fields = ["method", "runs", "median", "mean", "min", "max", f"runs_at_or_below_{target}"]
    table = []
    for name, runs in curves.items():
        finals = np.array([regret_at(x, y, budget) for x, y in runs])
        table.append(
            [
                name,
                len(finals),
                float(np.median(finals)),
                float(finals.mean()),
                float(finals.min()),
                float(finals.max()),
                int((finals <= target).sum()),
            ]
        )
    with open(path, "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(fields)
        writer.writerows(table)
    print(f"min regret at {budget} oracle labels")
    print("| " + " | ".join(fields) + " |")
    print("|" + "---|" * len(fields))
    for row in table:
        cells = [f"{v:.4f}" if isinstance(v, float) else str(v) for v in row]
        print("| " + " | ".join(cells) + " |")
    return table


def finish(out: pathlib.Path, curves: dict[str, list], budget: int, title: str, t0: float) -> None:
    """The shared end of an experiment: ``min_regret_f2.png``, the final regrets and
    ``by_method.csv`` (the caller has written ``curves.csv`` and ``summary.csv``)."""
    import time

    from llome_jax.rundir import plot_regret_curves

    plot_regret_curves(curves, out / "min_regret_f2.png", title=title, log_x=False)
    seconds = time.perf_counter() - t0
    print(f"wrote {out}/curves.csv, summary.csv, min_regret_f2.png ({seconds:.0f} s)")
    print_finals(curves)
    write_method_table(out / "by_method.csv", curves, budget)


def run_lambo2_dir(
    cfg, path: pathlib.Path, *, progress: bool, extra_config: dict, prefix: str
) -> list[dict]:
    """Run, resume or skip (when it has all ``cfg.rounds`` rounds) the LaMBO-2 run directory
    ``path``; returns its ``rounds.jsonl`` records up to ``cfg.rounds``."""
    from llome_jax.lambo2 import optimizer
    from llome_jax.rundir import RunDirectory

    resume = (path / "config.json").exists()
    done = [r["round"] for r in RunDirectory(path).rounds()] if resume else []
    if not done or max(done) < cfg.rounds:
        optimizer.run(
            cfg,
            path,
            resume=resume,
            progress=progress,
            extra_config=extra_config,
            log=lambda line: print(f"[{prefix}] {line}", flush=True),
        )
    return [r for r in RunDirectory(path).rounds() if r["round"] <= cfg.rounds]
