"""The loss log of a pretraining run: ``losses.csv`` (``step,loss``, one row per optimizer step)
and its plot ``loss.png``.

Losses are written with ``repr`` (the float read back is the one written); a resume rolls the
file back to its checkpoint's step (:func:`write_losses`) and appends from there.
"""

from __future__ import annotations

import csv
import os
import pathlib

import numpy as np

from llome_jax.run.files import atomic_write_text

__all__ = ["append_losses", "plot_losses", "read_losses", "write_losses"]


def read_losses(path: pathlib.Path) -> list[tuple[int, float]]:
    """The ``(step, loss)`` rows of ``losses.csv`` (none if it does not exist)."""
    if not path.is_file():
        return []
    with open(path, newline="") as stream:
        rows = list(csv.reader(stream))[1:]
    return [(int(step), float(loss)) for step, loss in rows]


def write_losses(path: pathlib.Path, rows: list[tuple[int, float]]) -> None:
    """Write ``losses.csv`` with exactly ``rows`` (atomically; a resume's rollback)."""
    text = "step,loss\n" + "".join(f"{step},{loss!r}\n" for step, loss in rows)
    atomic_write_text(path, text)


def append_losses(path: pathlib.Path, rows: list[tuple[int, float]]) -> None:
    """Append ``rows`` to ``losses.csv`` (its header first if it is new), flushed and fsynced."""
    new = not path.is_file()
    with open(path, "a", newline="") as stream:
        if new:
            stream.write("step,loss\n")
        stream.write("".join(f"{step},{loss!r}\n" for step, loss in rows))
        stream.flush()
        os.fsync(stream.fileno())


def plot_losses(rows: list[tuple[int, float]], path: pathlib.Path, title: str) -> None:
    """``loss.png``: the loss per step and its running mean over ~1 % of the steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.asarray([s for s, _ in rows], float)
    losses = np.asarray([v for _, v in rows], float)
    figure, axis = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    axis.plot(steps, losses, lw=0.6, alpha=0.5, label="loss per step")
    width = max(1, len(losses) // 100)
    if width > 1:
        smooth = np.convolve(losses, np.ones(width) / width, mode="valid")
        axis.plot(steps[width - 1 :], smooth, lw=1.5, label=f"mean of {width} steps")
    axis.set_xlabel("optimizer step")
    axis.set_ylabel("training loss")
    axis.set_yscale("log" if losses.size and losses.min() > 0 else "linear")
    axis.grid(alpha=0.3)
    axis.set_title(title)
    axis.legend(loc="best", fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
