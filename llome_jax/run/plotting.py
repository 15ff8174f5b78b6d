"""Figures of progress curves: a run directory's ``regret.png`` and the plots of many runs.

* :func:`plot_run`: a run directory's ``regret.png`` (the round driver redraws it every round),
  named as ``llome-jax compare`` names the run (:func:`llome_jax.compare.method_label`);
* :func:`plot_options`: its keywords for an objective (regret, or the best value when the
  optimum is unknown);
* :func:`draw_regret_curves` / :func:`plot_regret_curves`: median and spread over seeds of one
  or more methods, on a matplotlib axis or as a PNG (``llome-jax compare``, the many-seeds GA,
  the experiments).

matplotlib is imported only when a figure is drawn. Curves come from
:meth:`llome_jax.run.rundir.RunDirectory.regret_curve`.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from llome_jax.run.labels import method_label, problem_text

__all__ = [
    "BANDS",
    "draw_regret_curves",
    "mark_stopped",
    "plot_options",
    "plot_regret_curves",
    "plot_run",
]


def plot_run(
    run_dir: Any,
    label: str | None = None,
    title: str | None = None,
    *,
    log_x: bool = True,
    metric: str = "min_regret",
    ylim: tuple[float, float] | None = (-0.02, 1.02),
) -> pathlib.Path:
    """Write ``regret.png`` of ``run_dir`` (a :class:`~llome_jax.run.rundir.RunDirectory`): its
    :meth:`~llome_jax.run.rundir.RunDirectory.regret_curve` (min simple regret, or with
    ``metric="best_value"`` the best value, vs labels; ``ylim=None``: automatic).

    Legend and heading come from ``config.json`` whenever it names the optimizer, so every
    optimizer's plot reads alike and matches ``llome-jax compare``: the legend is the method
    as compare names it (:func:`~llome_jax.compare.method_label`, e.g. ``LLOME-MargE``), the
    heading ``"<method> on <problem>, run seed <s>"`` with the problem's instance seed where it
    has one. ``label`` and ``title`` serve a directory whose ``config.json`` names no optimizer.
    Returns the path written.
    """
    config = run_dir.config() if (run_dir.path / run_dir.CONFIG).is_file() else {}
    name, heading = label or "run", title or str(run_dir.path.name)
    if config.get("optimizer"):
        name = method_label(config)
        heading = f"{name} on {problem_text(config)}"
        if config.get("seed") is not None:
            heading += f", run seed {config['seed']}"
    target = run_dir.path / run_dir.REGRET_PLOT
    plot_regret_curves(
        {name: [run_dir.regret_curve(metric)]},
        target,
        title=heading,
        log_x=log_x,
        ylabel="min simple regret" if metric == "min_regret" else "best value",
        ylim=ylim,
        unit=None,
    )
    return target


def plot_options(objective: Any) -> dict[str, Any]:
    """:func:`plot_run` keywords for an :class:`~llome_jax.objective.Objective`: none for an
    Ehrlich function (regret in ``[0, 1]``), automatic y limits for another known optimum, and
    the best value instead of the regret when the optimum is unknown."""
    if objective is None or getattr(objective, "is_ehrlich", False):
        return {}
    if objective.optimal_value is None:
        return {"metric": "best_value", "ylim": None}
    return {"ylim": None}


def mark_stopped(
    axis: Any, stopped: Mapping[str, Sequence[tuple[float, float]]], label: str
) -> None:
    """An ``x`` in each curve's colour (the lines :func:`draw_regret_curves` drew) at every
    ``(labels, value)`` of ``stopped`` (curve name -> where each of its early-stopped runs
    ended); ``label`` once in the legend."""
    colours = {line.get_label().split(",")[0]: line.get_color() for line in axis.lines}
    marked = False
    for name, ends in stopped.items():
        if ends:
            axis.plot(
                [e[0] for e in ends],
                [e[1] for e in ends],
                "x",
                color=colours.get(name),
                markersize=7,
                label=None if marked else label,
            )
            marked = True


#: the legend's note on what a group's line and bands are
BANDS = "line: median over runs; bands: interquartile range, range"


def draw_regret_curves(
    axis: Any, curves: Mapping[str, Sequence[tuple[Any, Any]]], *, unit: str | None = "run"
) -> None:
    """Draw median and spread (min-max and interquartile bands) over seeds on a matplotlib axis.

    Args:
      axis: a matplotlib ``Axes``.
      curves: method name -> list of ``(evaluations [T], min_regret [T])`` per seed; seeds may have
        different lengths (each curve is a step function that ends where its run ended). The
        median and bands start where every seed has its first point (its round 0: runs whose
        round 0 paid more join later, and a median over the few that had joined could rise
        when the others join) and go on while at least half of the seeds are still running.
      unit: what one curve is, for the legend (``"GA, 3 runs"``; ``"seed"``: ``"GA, 3 seeds"``);
        ``None``: the name alone (a plot of one run).
    """
    import warnings

    for name, runs in curves.items():
        runs = [(np.asarray(x, float), np.asarray(y, float)) for x, y in runs if len(x)]
        if not runs:
            continue
        grid = np.unique(np.concatenate([x for x, _ in runs]))
        stacked = np.full((len(runs), len(grid)), np.nan)
        for i, (x, y) in enumerate(runs):
            index = np.searchsorted(x, grid, side="right") - 1
            valid = (index >= 0) & (grid <= x[-1])
            stacked[i, valid] = y[index[valid]]
        alive = np.sum(~np.isnan(stacked), axis=0) >= max(1, (len(runs) + 1) // 2)
        alive &= grid >= max(x[0] for x, _ in runs)  # every seed's round 0 is in
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            median = np.nanmedian(stacked, axis=0)
            low, high = np.nanmin(stacked, axis=0), np.nanmax(stacked, axis=0)
            q25, q75 = np.nanpercentile(stacked, [25, 75], axis=0)
        count = "" if unit is None else f", {len(runs)} {unit}{'' if len(runs) == 1 else 's'}"
        (line,) = axis.step(grid[alive], median[alive], where="post", label=f"{name}{count}")
        if len(runs) > 1:
            color = line.get_color()
            axis.fill_between(
                grid[alive], low[alive], high[alive], step="post", alpha=0.12, color=color
            )
            axis.fill_between(
                grid[alive], q25[alive], q75[alive], step="post", alpha=0.25, color=color
            )


def plot_regret_curves(
    curves: Mapping[str, Sequence[tuple[Any, Any]]],
    path: str | os.PathLike,
    *,
    title: str = "",
    ylabel: str = "min simple regret",
    xlabel: str = "labels paid",
    log_x: bool = True,
    ylim: tuple[float, float] | None = (-0.02, 1.02),
    unit: str | None = "run",
    stopped: Mapping[str, Sequence[tuple[float, float]]] | None = None,
) -> pathlib.Path:
    """One regret-vs-evaluations figure (see :func:`draw_regret_curves`, ``unit`` included)
    saved as a PNG (``ylim=None``: automatic y limits). ``stopped``: per curve name, the
    ``(labels, value)`` where each of its runs that stopped early really ended (its curve may
    be carried on flat after it, as a table reads it): each is marked with an ``x`` in the
    name's colour, so a reader sees where the data end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    draw_regret_curves(axis, curves, unit=unit)
    if stopped:
        mark_stopped(axis, stopped, "run stopped early (carried flat after)")
    if log_x:
        axis.set_xscale("log")
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    if ylim is not None:
        axis.set_ylim(*ylim)
    axis.grid(alpha=0.3)
    axis.set_title(title)
    axis.legend(loc="best", fontsize=8, title=BANDS, title_fontsize=7)
    figure.tight_layout()
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
