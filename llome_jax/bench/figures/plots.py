"""Drawing helpers shared by the figures (matplotlib's ``Agg`` backend, no GUI)."""

from __future__ import annotations

import pathlib
from typing import Any

from llome_jax.run.plotting import BANDS, draw_regret_curves, mark_stopped

__all__ = ["plot_calibration", "plot_curves", "pyplot", "save_figure"]


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the ``Agg`` backend (imported on first use: the plan and the
    command line's ``--help`` never load matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure: Any, path: pathlib.Path) -> None:
    """Lay out, write (no software tag, so reruns are byte-identical) and close a figure."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)


def plot_curves(
    path: pathlib.Path,
    panels: dict[str, dict[str, list]],
    xlabel: str = "oracle labels",
    stopped_before: float | None = None,
) -> None:
    """One panel of min-regret curves per ``title -> {method: [(labels, regret) per run]}``.
    Each curve ends at its run's last label (a method's median where fewer than half its runs
    go on); with ``stopped_before`` (the budget after round 0), the last point of every run
    that stopped before it is marked with an ``x`` in its method's colour."""
    plt = pyplot()
    n = max(1, len(panels))
    figure, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), dpi=100, squeeze=False)
    for axis, (title, curves) in zip(axes[0], panels.items()):
        if curves:
            draw_regret_curves(axis, curves)
            if stopped_before is not None:
                ends = {
                    method: [(x[-1], y[-1]) for x, y in runs if x[-1] - x[0] < stopped_before]
                    for method, runs in curves.items()
                }
                mark_stopped(axis, ends, "a run stopped early")
            axis.legend(fontsize=7, title=BANDS, title_fontsize=6)
        axis.set_title(title, fontsize=9)
        axis.set_xlabel(xlabel)
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("min simple regret")
    save_figure(figure, path)


def plot_calibration(path: pathlib.Path, rows: list) -> None:
    """Mean regret of the feasible candidates against the likelihood, per likelihood bin
    (``rows`` of :func:`llome_jax.bench.figures.generation.calibration_rows`)."""
    figure, axis = pyplot().subplots(figsize=(4.5, 3.4), dpi=100)
    for method in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == method and r[4] is not None]
        axis.plot([r[2] for r in mine], [r[4] for r in mine], marker="o", label=method)
    axis.set_xlabel("likelihood exp(mean log-prob), bin mean")
    axis.set_ylabel("mean regret of feasible candidates")
    axis.grid(alpha=0.3)
    if rows:
        axis.legend(fontsize=7)
    save_figure(figure, path)
