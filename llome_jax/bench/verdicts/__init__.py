"""The paper-figure report's verdicts: one pure function per claim of the paper (issues 34, 53).

This package is the one place the verdicts of the paper driver's ``report.md`` come from
(``llome-jax paper``). The driver measures (:mod:`llome_jax.bench.figures` reads run directories,
collects per-seed values, correlations, fractions) and calls these functions; each gets plain
Python / NumPy data and returns a :class:`Verdict` ``(claim, verdict, reason, test, n, p)``.
Every sub-claim of a figure is its own verdict and its own line of the report: a figure's
verdicts are listed, never combined, so no disagreement hides behind an "inconclusive"
neighbour.

The four verdicts:

* ``agree`` -- a like-for-like measurement points the paper's way by the claim's rule *and* by
  its test (below).
* ``disagree`` -- the rule and the test both point the other way.
* ``not comparable`` -- what we ran does not measure what the paper measured: a method that never
  trained, a run or candidate log that is missing, a budget that stops before the paper's point,
  a quantity measured on other sequences (after the Filter, over a de-duplicated archive), or
  runs that count labels differently (:func:`comparable_accounting`).
* ``inconclusive`` -- a like-for-like measurement too small or too noisy to decide: the rule and
  the test do not both say so, a tie, a difference inside one level, or too few seeds for the
  test to reach :data:`ALPHA` at all. The reason then says which way the numbers point, with p.

Every comparison of methods (or of one method at two points) over seeds is decided on the
*per-seed values* by a rule and a test together (issue 53):

* *The rule* (on the medians the report's tables show): for min regret, the *one-level rule*
  (:func:`one_level`): an Ehrlich value is ``f = prod_i phi_i`` over the ``c`` motifs, ``phi_i``
  in ``{0, 1/q, ..., 1}``; one level more or less in motif ``i`` moves ``f`` by
  ``f / (q phi_i) >= f / q``. So two median regrets closer than ``(1 - r) / q`` (``r`` the lower
  one) are less than one level apart: within a level is a tie, a level or more is a difference.
  On f2 (``q = 4``) at regret 0.789 a level is 0.053. Two distinct values can still be closer
  than a level when they differ in several motifs (one a level up, another a level down):
  0.789 and 0.8125 on f2 are 0.023 apart; the rule reads such medians as a tie. Quantities
  without levels (fractions, hypervolumes, regret ranges) use the strict order of the medians
  (means for hypervolumes).
* *The test*: two methods' per-seed values, the exact two-sided permutation test of the
  difference of means (``llome_jax.stats.permutation_test``; within functions for the
  hypervolumes, ``stratified_permutation_test``), significant at ``p <`` :data:`ALPHA`; one
  method's per-run changes (e.g. round 0 to the last round), the exact sign-flip test
  (``stats.sign_flip_test``). A claim over several pairs ("X performs the best": X below each
  other method) agrees only when every pair does, each at :data:`ALPHA` (an intersection-union
  test); it disagrees when one pair goes the other way at :data:`ALPHA` / pairs (Bonferroni).
  A claim of likeness ("comparably", "plateaus") agrees by two one-sided shifted tests (TOST):
  the difference of means is significantly inside the rule's margin on both sides.
* With ``n_a`` vs ``n_b`` seeds the smallest reachable two-sided p is ``2 / C(n_a + n_b, n_a)``
  (``stats.smallest_p``): 3 vs 3 gives 0.1, so no 3-vs-3 comparison can agree or disagree; the
  reason says so. 4 vs 4 reaches 0.029, 5 vs 5 0.0079.

Other rules: a sign test (:func:`~.rules.majority`, one-sided, at :data:`ALPHA`) over rounds or runs,
and a correlation band ``Z_95 / sqrt(n - 1)`` (the null standard error of Spearman's rho; the
reported p is its normal approximation). Candidates of one round are not independent, so the
band is optimistic; a verdict inside it is ``inconclusive``. Existence claims ("reaches the
optimum") and the "often" fraction are rules on counts without a test (``test``: "no test").

A claim about "the other methods" is decided over the paper's methods (:data:`PAPER_METHODS`);
arms the paper does not have (blind local search, LLOME-MargE from our prior, a user's
optimizer) are compared in the same way and reported beside the claim, never deciding it
(:attr:`Verdict.methods`, :attr:`Verdict.beside`). Every pair in a reason says which side is
lower and by how much, and a verdict's reason opens with the pairs that decided it.

Each :class:`Verdict` carries its ``test`` (what was tested, on which values), ``n`` (e.g.
``"4 vs 4"``) and ``p`` (the deciding comparison's; ``None`` without a test), which the report
lists beside the verdict.

Modules: :mod:`.rules` (the record, the thresholds, the comparisons every claim uses, and what
applies across figures), :mod:`.regret` (claims on min regret, figures 1, 4, 5, 8, 9, 10) and
:mod:`.generation` (claims on what is generated, figures 2, 3, 4, 6, 7). Import the claims from
here: ``from llome_jax.bench import verdicts as vd``.
"""

from __future__ import annotations

from llome_jax.bench.verdicts.generation import (
    calibration_higher_likelihood_lower_regret,
    calibration_overconfident,
    diversity_dpo_does_not_improve,
    diversity_lambo2_most_feasible,
    diversity_lambo2_most_unique,
    diversity_more_unique_than_ga,
    refinement_first_edits_help_most,
    refinement_reduces_regret,
    selection_high_scoring,
    selection_misses_best_often,
    sft_marge_best_calibration,
    spearman_feasible,
)
from llome_jax.bench.verdicts.regret import (
    ga_difficulty_q_strongest,
    half_quant_marge_best,
    model_size_comparable,
    model_size_plateaus,
    pareto_llome_variant_below,
    prior_reaches_lambo2,
    reinforce_decreases_regret,
    reinforce_marge_ends_lower,
    reinforce_never_optimal,
    reinforce_plateaus_early,
    sft_marge_intermediate_worst,
    sft_marge_sole_optimum,
    solver_all_comparable,
    solver_best,
    solver_medium_pair_outperforms,
)
from llome_jax.bench.verdicts.rules import (
    ALPHA,
    EASY_HARD_SPREAD,
    HIGH_LIKELIHOOD,
    IMPROVEMENT_MIN,
    MIN_ROUNDS,
    MIN_SEEDS,
    OFTEN,
    OUTCOMES,
    PAPER_22K_AFTER_ROUND0,
    PAPER_METHODS,
    PLATEAU_EARLY,
    Z_95,
    SelectionRound,
    Verdict,
    at_smoke_scale,
    comparable_accounting,
    one_level,
    stated_test,
    summary_line,
)

__all__ = [
    "ALPHA",
    "EASY_HARD_SPREAD",
    "HIGH_LIKELIHOOD",
    "IMPROVEMENT_MIN",
    "MIN_ROUNDS",
    "MIN_SEEDS",
    "OFTEN",
    "OUTCOMES",
    "PAPER_22K_AFTER_ROUND0",
    "PAPER_METHODS",
    "PLATEAU_EARLY",
    "Z_95",
    "SelectionRound",
    "Verdict",
    "at_smoke_scale",
    "calibration_higher_likelihood_lower_regret",
    "calibration_overconfident",
    "comparable_accounting",
    "diversity_dpo_does_not_improve",
    "diversity_lambo2_most_feasible",
    "diversity_lambo2_most_unique",
    "diversity_more_unique_than_ga",
    "ga_difficulty_q_strongest",
    "half_quant_marge_best",
    "model_size_comparable",
    "model_size_plateaus",
    "one_level",
    "pareto_llome_variant_below",
    "prior_reaches_lambo2",
    "refinement_first_edits_help_most",
    "refinement_reduces_regret",
    "reinforce_decreases_regret",
    "reinforce_marge_ends_lower",
    "reinforce_never_optimal",
    "reinforce_plateaus_early",
    "selection_high_scoring",
    "selection_misses_best_often",
    "sft_marge_best_calibration",
    "sft_marge_intermediate_worst",
    "sft_marge_sole_optimum",
    "solver_all_comparable",
    "solver_best",
    "solver_medium_pair_outperforms",
    "spearman_feasible",
    "stated_test",
    "summary_line",
]
