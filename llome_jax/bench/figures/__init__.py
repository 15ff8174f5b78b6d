"""The paper's ten figures, one function each: ``figure_<key>(ctx) -> (markdown body, verdicts)``.

:data:`FIGURE_FUNCTIONS` maps each key of :data:`llome_jax.bench.plan.FIGURES` to its function,
in the report's order. Each function reads the finished runs through the
:class:`~llome_jax.bench.results.Context`, writes ``OUT/<key>.png`` and ``OUT/<key>.csv`` and
returns its report section's body with one verdict per sub-claim. By what they read:

* :mod:`.regret`: min-regret curves at the label budget (figures 1, 4, 5, 8, 9);
* :mod:`.generation`: what LLOME generated, from records and candidate logs (2, 3, 6, 7);
* :mod:`.pareto`: the GA difficulty sweep and the Pareto frontier over every run (10);
* :mod:`.plots`: the drawing helpers they share.
"""

from __future__ import annotations

from collections.abc import Callable

from llome_jax.bench.figures.generation import (
    figure_calibration,
    figure_diversity,
    figure_refinement,
    figure_selection,
)
from llome_jax.bench.figures.pareto import figure_difficulty_pareto
from llome_jax.bench.figures.regret import (
    figure_half_quant,
    figure_model_size,
    figure_reinforce,
    figure_sft_marge,
    figure_solver,
)
from llome_jax.bench.results import Context
from llome_jax.bench.verdicts import Verdict

__all__ = [
    "FIGURE_FUNCTIONS",
    "figure_calibration",
    "figure_difficulty_pareto",
    "figure_diversity",
    "figure_half_quant",
    "figure_model_size",
    "figure_refinement",
    "figure_reinforce",
    "figure_selection",
    "figure_sft_marge",
    "figure_solver",
]

#: figure key -> its function, in the report's order
FIGURE_FUNCTIONS: dict[str, Callable[[Context], tuple[str, list[Verdict]]]] = {
    "solver": figure_solver,
    "diversity": figure_diversity,
    "calibration": figure_calibration,
    "sft_marge": figure_sft_marge,
    "reinforce": figure_reinforce,
    "refinement": figure_refinement,
    "selection": figure_selection,
    "half_quant": figure_half_quant,
    "model_size": figure_model_size,
    "difficulty_pareto": figure_difficulty_pareto,
}
