"""``llome-jax paper``: every experiment behind the paper's figures, and the report
(:mod:`llome_jax.bench`; ``python experiments/paper.py`` takes the same flags)."""

from __future__ import annotations

import argparse

NAME = "paper"
HELP = (
    "Run every experiment behind the paper's figures (resumable run directories) and write "
    "OUT/report.md with one verdict per claim, a PNG and CSV per figure, and curves.csv "
    "(python experiments/paper.py takes the same flags)."
)
ORDER = 70


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from llome_jax.bench.cli import add_arguments as add  # the plan only: no JAX

    add(parser)


def run(args: argparse.Namespace) -> int:
    from llome_jax.bench.cli import run as run_paper

    return run_paper(args)
