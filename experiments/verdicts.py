"""The paper-figure report's verdicts: one pure function per claim of the paper (issues 34, 53).

This module is the one place the verdicts of ``experiments/paper.py``'s ``report.md`` come from.
``paper.py`` measures (reads run directories, collects per-seed values, correlations, fractions)
and calls these functions; each gets plain Python / NumPy data and returns a :class:`Verdict`
``(claim, verdict, reason, test, n, p)``. Every sub-claim of a figure is its own verdict and its
own line of the report: a figure's verdicts are listed, never combined, so no disagreement hides
behind an "inconclusive" neighbour.

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
  On f2 (``q = 4``) at regret 0.789 a level is 0.053. Quantities without levels (fractions,
  hypervolumes, regret ranges) use the strict order of the medians (means for hypervolumes).
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

Other rules: a sign test (:func:`_majority`, one-sided, at :data:`ALPHA`) over rounds or runs,
and a correlation band ``Z_95 / sqrt(n - 1)`` (the null standard error of Spearman's rho; the
reported p is its normal approximation). Candidates of one round are not independent, so the
band is optimistic; a verdict inside it is ``inconclusive``. Existence claims ("reaches the
optimum") and the "often" fraction are rules on counts without a test (``test``: "no test").

Each :class:`Verdict` carries its ``test`` (what was tested, on which values), ``n`` (e.g.
``"4 vs 4"``) and ``p`` (the deciding comparison's; ``None`` without a test), which the report
lists beside the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

from llome_jax import stats

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

Outcome = Literal["agree", "disagree", "not comparable", "inconclusive"]
#: every :data:`Outcome`, in the report's order
OUTCOMES: tuple[Outcome, ...] = ("agree", "disagree", "not comparable", "inconclusive")

#: ``{method: {"values": [per-seed values], ...}}``: one value per seed at one budget (paper.py's
#: summaries also carry ``"median"``, ``"seeds"``, ``"min"``, ``"max"``; the verdicts read
#: ``"values"`` only). The order of ``"values"`` is the runs' order, the same at every budget.
Summary = Mapping[str, Mapping[str, Any]]

# ------------------------------------------------------------------------------------------
# Thresholds (named; each says why)
# ------------------------------------------------------------------------------------------
#: Runs (seeds) below which a rule without a test (an existence claim) is ``inconclusive``:
#: with 1 or 2 runs "no run reached the optimum" says little (the cpu scale runs 3 on f2).
MIN_SEEDS = 3
#: f1 / f4 "all methods perform comparably" ("either finding the optimal solution very quickly or
#: making virtually no progress", §5): a spread of the methods' medians of at most 0.1 regret
#: (and, for agree, every pair's difference of means inside +-0.1 by TOST). The claim is coarse
#: (solved vs not, no progress vs some), so it is not held to one quantisation level.
EASY_HARD_SPREAD = 0.1
#: Significance level of every test (two-sided for differences, each one-sided test of a TOST
#: and of the sign tests).
ALPHA = 0.05
#: ~97.5 % normal quantile: a Spearman rho beyond ``Z_95 / sqrt(n - 1)`` is outside the null band.
Z_95 = 1.96
#: The paper's "high likelihoods exceeding 0.7" where SFT and MargE turn overconfident
#: (appendix Fig. calibration-reward).
HIGH_LIKELIHOOD = 0.7
#: Fig. 7 "often": likelihood selection misses the oracle's best in at least a third of the
#: rounds. The paper gives no number; a third is "often" without asking for a majority
#: ("usually"), and the report prints the fraction beside the verdict.
OFTEN = 1.0 / 3.0
#: Rounds (with a real choice, ``0 < j < candidates``) below which a fraction of rounds is too
#: coarse to compare with :data:`OFTEN`: 10 is one cpu-scale run's rounds (a resolution of 0.1).
MIN_ROUNDS = 10
#: Fig. 2 "does not improve": a fraction (unique or feasible) that rises by less than 0.05
#: (5 points of a [0, 1] fraction) from the first to the last round is not an improvement; the
#: report prints the change.
IMPROVEMENT_MIN = 0.05
#: Fig. 5 "plateaus early": a run's last improvement happens in the first half of its rounds.
PLATEAU_EARLY = 0.5
#: The paper's "up to 22K test function evaluations" (Fig. small models): 10K GA labels + 12K,
#: i.e. 12,000 labels after round 0 (6 rounds of j = 2000) in either accounting.
PAPER_22K_AFTER_ROUND0 = 12_000

_OPTIMUM_TOL = 1e-9


class Verdict(NamedTuple):
    """One sub-claim's verdict: ``claim`` (short, names the function / method), ``verdict``
    (:data:`Outcome`), ``reason`` (the numbers, the rule and the test), ``test`` (the test and
    the values it ran on; "" where none applies, e.g. a method that did not run), ``n`` (the
    sample sizes of the deciding comparison, e.g. ``"4 vs 4"``) and ``p`` (its p; ``None``
    without a test)."""

    claim: str
    verdict: Outcome
    reason: str
    test: str = ""
    n: str = ""
    p: float | None = None


class SelectionRound(NamedTuple):
    """One round's candidate selection (fig. 7): ``candidates`` before the Filter, ``selected``
    (``j``), the min and mean regret of the likelihood-selected, the min regret the oracle's top
    ``j`` reach, and the mean regret of all candidates (a random selection's expectation)."""

    candidates: int
    selected: int
    min_regret_likelihood: float
    min_regret_oracle: float
    mean_regret_likelihood: float
    mean_regret_all: float


# ------------------------------------------------------------------------------------------
# Shared pieces
# ------------------------------------------------------------------------------------------
def one_level(regret: float, quantization: int) -> float:
    """The smallest change of ``f`` one quantisation level makes at regret ``regret``:
    ``(1 - regret) / q`` (module docstring; 0 at regret 1, where only equal regrets are
    within a level)."""
    return max(0.0, 1.0 - float(regret)) / float(quantization)


def _within_level(a: float, b: float, quantization: int | None) -> tuple[bool, float, float]:
    """``(|a - b| below one level of the lower regret, gap, level)``; without ``quantization``
    (no levels) the level is 0: only equal values are within it."""
    gap = abs(a - b)
    level = one_level(min(a, b), quantization) if quantization else 0.0
    return gap == 0.0 or gap < level, gap, level


def _majority(k: int, n: int) -> tuple[float, float]:
    """One-sided sign-test p-values of ``k`` successes in ``n`` fair trials: ``P(X >= k)`` (more
    than half) and ``P(X <= k)`` (fewer than half); ``(1, 1)`` for ``n = 0``."""
    total = 2.0**n
    upper = sum(math.comb(n, i) for i in range(k, n + 1)) / total
    lower = sum(math.comb(n, i) for i in range(0, k + 1)) / total
    return upper, lower


def _values(entry: Mapping[str, Any]) -> list[float]:
    return [float(v) for v in entry["values"]]


def _median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, np.float64)))


def _fmt_p(p: float) -> str:
    return f"{p:.3g}"


def _decide(
    claim: str,
    holds: bool | None,
    why: str,
    n: int | None = None,
    minimum: int = MIN_SEEDS,
    unit: str = "seeds per method",
    test: str = "no test (a rule on counts)",
) -> Verdict:
    """A rule without a test: ``holds`` True: agree, False: disagree, None (a tie): inconclusive;
    with ``n`` below ``minimum`` (seeds, runs): inconclusive, the reason saying which way the
    numbers point."""
    direction = "a tie" if holds is None else "agree" if holds else "disagree"
    count = "" if n is None else str(n)
    if n is not None and n < minimum:
        return Verdict(
            claim,
            "inconclusive",
            f"fewer than {minimum} {unit} ({n}); the numbers point to {direction}: {why}",
            test,
            count,
        )
    if holds is None:
        return Verdict(claim, "inconclusive", f"a tie: {why}", test, count)
    return Verdict(claim, "agree" if holds else "disagree", why, test, count)


def _sign_verdict(claim: str, k: int, n: int, what: str) -> Verdict:
    """The one-sided sign test of ``k`` successes in ``n`` (:func:`_majority`): ``P(X >= k)``
    below :data:`ALPHA`: agree; ``P(X <= k)`` below it: disagree; else inconclusive."""
    upper, lower = _majority(k, n)
    test = "one-sided sign test (binomial, 1/2)"
    why = f"{what} in {k} of {n} (sign test p {_fmt_p(min(upper, lower))}, n = {n})"
    if upper < ALPHA:
        return Verdict(claim, "agree", why, test, str(n), upper)
    if lower < ALPHA:
        return Verdict(claim, "disagree", why, test, str(n), lower)
    floor = stats.smallest_p_sign_flip(n, "greater")
    if floor >= ALPHA:
        why += f"; {n} cannot reach p < {ALPHA} (smallest p {_fmt_p(floor)})"
    return Verdict(claim, "inconclusive", why, test, str(n), min(upper, lower))


# ------------------------------------------------------------------------------------------
# Comparisons of per-seed values: the rule and the test together
# ------------------------------------------------------------------------------------------
class _Pair(NamedTuple):
    """``a`` vs ``b``: the rule's centres (medians; over strata, the mean of the strata's means),
    the one level the rule needs (0 without levels), the test's statistic ``shift`` (mean of
    ``a`` minus mean of ``b``) and two-sided ``p``, sizes and the smallest reachable p."""

    a: str
    b: str
    centre_a: float
    centre_b: float
    level: float
    shift: float
    p: float
    n: str
    floor: float
    exact: bool

    @property
    def rule(self) -> bool | None:
        """True: ``a``'s centre below ``b``'s by a level or more; False: above; None: within."""
        gap = self.centre_b - self.centre_a
        if gap == 0.0 or abs(gap) < self.level:
            return None
        return gap > 0.0

    def test(self, alpha: float) -> bool | None:
        """True: significantly lower mean at ``alpha``; False: higher; None: not significant."""
        if not self.p < alpha or self.shift == 0.0:
            return None
        return self.shift < 0.0

    def text(self) -> str:
        level = f" (a level {self.level:.3f})" if self.level else ""
        floor = (
            f"; {self.n} cannot reach p < {ALPHA} (smallest p {_fmt_p(self.floor)})"
            if self.floor >= ALPHA
            else ""
        )
        return (
            f"{self.a} {self.centre_a:.3f} vs {self.b} {self.centre_b:.3f}{level}: "
            f"n = {self.n}, p = {_fmt_p(self.p)}{floor}"
        )


def _pair(
    a: str, a_values: Sequence[float], b: str, b_values: Sequence[float], quantization: int | None
) -> _Pair:
    """The medians, one level of the lower (``quantization``; none: 0) and the exact two-sided
    permutation test of ``a_values`` vs ``b_values``."""
    x = [float(v) for v in a_values]
    y = [float(v) for v in b_values]
    ca, cb = _median(x), _median(y)
    _, _, level = _within_level(ca, cb, quantization)
    return _Pair(
        a,
        b,
        ca,
        cb,
        level,
        float(np.mean(x) - np.mean(y)),
        stats.permutation_test(x, y),
        f"{len(x)} vs {len(y)}",
        stats.smallest_p(len(x), len(y)),
        stats.is_exact((len(x), len(y))),
    )


def _test_name(quantity: str, exact: bool, kind: str = "permutation test") -> str:
    how = "exact" if exact else f"Monte Carlo ({stats.MONTE_CARLO:,} random splits)"
    return f"{how} two-sided {kind} on per-seed {quantity} (difference of means)"


def _lower(
    claim: str,
    pairs: Sequence[_Pair],
    quantity: str,
    rule: str,
    alpha_agree: float = ALPHA,
    kind: str = "permutation test",
) -> Verdict:
    """Every pair claims ``a`` below ``b``. Agree: each pair's rule and test say so, the test at
    ``alpha_agree`` (an intersection-union test); disagree: some pair's rule and test say ``a``
    above ``b``, the test at ``ALPHA / len(pairs)`` (Bonferroni); else inconclusive with the
    direction the rule points to and the p."""
    strict = ALPHA / len(pairs)
    test = _test_name(quantity, all(p.exact for p in pairs), kind)
    head = f"{test} with {rule}"
    if alpha_agree != ALPHA:
        head += f"; agree needs p < {_fmt_p(alpha_agree)} per pair"
    if len(pairs) > 1:
        head += f"; disagree needs p < {_fmt_p(strict)} (Bonferroni over {len(pairs)} pairs)"
    body = "; ".join(p.text() for p in pairs)
    against = [p for p in pairs if p.rule is False and p.test(strict) is False]
    if all(p.rule is True and p.test(alpha_agree) is True for p in pairs):
        top = max(pairs, key=lambda p: p.p)
        return Verdict(claim, "agree", f"{head}: {body}", test, top.n, top.p)
    if against:
        top = min(against, key=lambda p: p.p)
        return Verdict(claim, "disagree", f"{head}: {body}", test, top.n, top.p)
    if any(p.rule is False for p in pairs):
        direction = "disagree"
        top = min((p for p in pairs if p.rule is False), key=lambda p: p.p)
    else:
        direction = "agree" if all(p.rule for p in pairs) else "a tie (within a level)"
        top = max(pairs, key=lambda p: p.p)
    why = f"the numbers point to {direction}, the rule and the test do not both decide; {head}: "
    return Verdict(claim, "inconclusive", why + body, test, top.n, top.p)


class _Near(NamedTuple):
    """``a`` vs ``b`` for a claim of likeness: the rule's ``within`` (medians inside the
    ``margin``), the TOST p (the difference of means inside ``+-margin``) and the pair."""

    pair: _Pair
    within: bool
    margin: float
    p_near: float
    floor_near: float


def _near(
    a: str,
    a_values: Sequence[float],
    b: str,
    b_values: Sequence[float],
    margin: float,
    within: bool,
) -> _Near:
    """TOST: ``max(p(mean(a) - mean(b) < margin), p(mean(a) - mean(b) > -margin))``, each a
    one-sided permutation test of ``a`` shifted by ``-+margin`` against ``b``."""
    x = np.asarray(a_values, np.float64)
    y = [float(v) for v in b_values]
    p_near = max(
        stats.permutation_test(x - margin, y, "less"),
        stats.permutation_test(x + margin, y, "greater"),
    )
    pair = _pair(a, a_values, b, b_values, None)
    return _Near(pair, within, margin, p_near, stats.smallest_p(len(x), len(y), "less"))


def _all_near(claim: str, items: Sequence[tuple[str, _Near]], quantity: str, rule: str) -> Verdict:
    """Every item claims likeness. Agree: each item's rule says within and its TOST p is below
    :data:`ALPHA`; disagree: some item's rule says apart and its two-sided test, at ``ALPHA /
    len(items)`` (Bonferroni), finds the difference in the medians' direction; else
    inconclusive."""
    strict = ALPHA / len(items)
    exact = all(near.pair.exact for _, near in items)
    test = (
        f"{_test_name(quantity, exact)}; likeness by two one-sided shifted permutation tests "
        "(TOST) at the margin"
    )
    head = f"{test}, with {rule}"
    if len(items) > 1:
        head += f"; disagree needs p < {_fmt_p(strict)} (Bonferroni over {len(items)})"

    def text(label: str, near: _Near) -> str:
        p = near.pair
        floor = (
            f"; {p.n} cannot reach a TOST p < {ALPHA} (smallest {_fmt_p(near.floor_near)})"
            if near.floor_near >= ALPHA
            else ""
        )
        return (
            f"{label}{p.a} {p.centre_a:.3f} vs {p.b} {p.centre_b:.3f} (margin {near.margin:.3f}, "
            f"{'within' if near.within else 'apart'}): n = {p.n}, TOST p = {_fmt_p(near.p_near)}, "
            f"difference p = {_fmt_p(p.p)}{floor}"
        )

    body = "; ".join(text(label, near) for label, near in items)

    def apart(near: _Near) -> bool:
        p = near.pair
        return (
            not near.within
            and p.test(strict) is not None
            and p.test(strict) == (p.centre_b > p.centre_a)
        )

    if all(near.within and near.p_near < ALPHA for _, near in items):
        top = max((near for _, near in items), key=lambda near: near.p_near)
        return Verdict(claim, "agree", f"{head}: {body}", test, top.pair.n, top.p_near)
    if against := [near for _, near in items if apart(near)]:
        top = min(against, key=lambda near: near.pair.p)
        return Verdict(claim, "disagree", f"{head}: {body}", test, top.pair.n, top.pair.p)
    if all(near.within for _, near in items):
        top = max((near for _, near in items), key=lambda near: near.p_near)
        direction, p_top = "agree", top.p_near
    else:
        top = min((near for _, near in items if not near.within), key=lambda near: near.pair.p)
        direction, p_top = "disagree", top.pair.p
    why = f"the numbers point to {direction}, the rule and the test do not both decide; {head}: "
    return Verdict(claim, "inconclusive", why + body, test, top.pair.n, p_top)


def _missing(claim: str, summary: Summary, needed: Sequence[str]) -> Verdict | None:
    if missing := [m for m in needed if m not in summary or not len(summary[m]["values"])]:
        return Verdict(claim, "not comparable", f"no finished run of {', '.join(missing)}")
    return None


def _beats(
    claim: str, summary: Summary, winners: Sequence[str], quantization: int | None
) -> Verdict:
    """Each of ``winners`` has a lower min regret than every other method of ``summary``."""
    if verdict := _missing(claim, summary, winners):
        return verdict
    others = [m for m in sorted(summary) if m not in winners and len(summary[m]["values"])]
    if not others:
        return Verdict(claim, "not comparable", f"no other method beside {', '.join(winners)}")
    pairs = [
        _pair(w, _values(summary[w]), o, _values(summary[o]), quantization)
        for w in winners
        for o in others
    ]
    return _lower(claim, pairs, "min regret", "the one-level rule on medians")


# ------------------------------------------------------------------------------------------
# Fig. 1: solver regret comparison
# ------------------------------------------------------------------------------------------
def solver_all_comparable(function: str, summary: Summary) -> Verdict:
    """Paper (Fig. 1 caption, §5): "On very easy or difficult tasks, all methods perform
    comparably" -- f1 and f4, "either finding the optimal solution very quickly or making
    virtually no progress".

    Input: per method, the per-seed min regrets at the budget (``"values"``). Rule: every pair
    of methods' medians at most :data:`EASY_HARD_SPREAD` apart (the spread of the medians).
    Test: per pair, TOST at the margin :data:`EASY_HARD_SPREAD` (agree) or the two-sided
    permutation test (disagree, Bonferroni over the pairs). Agree: every pair within by both;
    disagree: a pair apart by both; else inconclusive; fewer than two methods: not comparable.
    """
    claim = f"{function}: all methods perform comparably"
    methods = sorted(m for m, s in summary.items() if len(s["values"]))
    if len(methods) < 2:
        return Verdict(claim, "not comparable", "fewer than two methods with finished runs")
    items = []
    for i, a in enumerate(methods):
        for b in methods[i + 1 :]:
            x, y = _values(summary[a]), _values(summary[b])
            within = abs(_median(x) - _median(y)) <= EASY_HARD_SPREAD
            items.append(("", _near(a, x, b, y, EASY_HARD_SPREAD, within)))
    medians = [_median(_values(summary[m])) for m in methods]
    rule = f"the rule: spread of medians {max(medians) - min(medians):.3f} <= {EASY_HARD_SPREAD}"
    return _all_near(claim, items, "min regret", rule)


def solver_best(function: str, method: str, summary: Summary, quantization: int) -> Verdict:
    """Paper (§5): "On f2 LLOME-MargE performs the best, whereas LaMBO-2 performs the best on
    f3."

    Input: per method, the per-seed min regrets at the budget; ``quantization`` the function's
    ``q``. Rule and test per other method: ``method``'s median a level or more below (the
    one-level rule) and the exact two-sided permutation test at :data:`ALPHA`. Agree: below
    every other method by both; disagree: some method below ``method`` by both, the test at
    :data:`ALPHA` / others (Bonferroni); else inconclusive (a tie, within a level, or too few
    seeds: 3 vs 3 cannot reach 0.05); ``method`` or every competitor missing: not comparable.
    """
    return _beats(f"{function}: {method} performs the best", summary, (method,), quantization)


def solver_medium_pair_outperforms(function: str, summary: Summary, quantization: int) -> Verdict:
    """Paper (Fig. 1 caption): "On medium-difficulty tasks [f2, f3], LLOME-MargE and LaMBO-2
    outperform other methods."

    Rule and test as :func:`solver_best`, for each of the two against each other method: agree
    when both are below every other method by the rule and the test; disagree when another
    method is below one of them by both (Bonferroni over the pairs); else inconclusive; either
    method or every other method missing: not comparable.
    """
    claim = f"{function}: LLOME-MargE and LaMBO-2 outperform the other methods"
    return _beats(claim, summary, ("LLOME-MargE", "LaMBO-2"), quantization)


# ------------------------------------------------------------------------------------------
# Fig. 2: diversity and feasibility of what each method generates / proposes
# ------------------------------------------------------------------------------------------
#: per method, one value per run (the mean over its rounds >= 1); ``None`` for a run whose
#: value is not measured like the paper's (the GA's uniqueness over its de-duplicated archive,
#: LLOME's feasibility after the Filter).
Rates = Mapping[str, Sequence[float | None]]


def _unlike(rates: Rates) -> list[str]:
    return sorted(m for m, runs in rates.items() if any(r is None for r in runs))


def _most(claim: str, rates: Rates, method: str, quantity: str) -> Verdict:
    """``method``'s per-run values above every other method's: per other method, the strict
    order of the medians (no levels: a fraction) and the exact two-sided permutation test."""
    rates = {m: runs for m, runs in rates.items() if len(runs)}
    if method not in rates or len(rates) < 2:
        return Verdict(claim, "not comparable", f"{method} or every other method has no runs")
    if unlike := _unlike(rates):
        return Verdict(
            claim,
            "not comparable",
            f"{quantity} of {', '.join(unlike)} is not measured on what the method generated or "
            "proposed before any filter (e.g. the GA's de-duplicated archive in runs recorded "
            "before num_proposals)",
        )
    mine = [float(r or 0.0) for r in rates[method]]
    pairs = [
        _pair(m, [float(r or 0.0) for r in rates[m]], method, mine, None)
        for m in sorted(rates)
        if m != method
    ]
    return _lower(claim, pairs, f"run mean of {quantity}", "the strict order of the medians")


def diversity_lambo2_most_unique(unique: Rates) -> Verdict:
    """Paper (Fig. solver diagnostics): "LaMBO-2 produces the most diverse [...] solutions"
    ("the percentage of generated sequences for f2 that are unique").

    Measured like with like: the fraction of distinct sequences among what each method generated
    or proposed in a round, before any filter: LLOME's ``frac_unique`` (distinct valid candidates
    / all generated outputs, before the Filter), LaMBO-2's over its ``j`` proposals, the GA's over
    its particles (``num_proposals``; older GA records measured it on the de-duplicated archive,
    1.0 by construction: ``None``, not comparable).

    Input: per method, each run's mean over rounds >= 1. Rule and test per other method:
    LaMBO-2's median strictly higher and the exact two-sided permutation test at :data:`ALPHA`.
    Agree: above every other method by both; disagree: another method above LaMBO-2 by both
    (Bonferroni over the others); else inconclusive.
    """
    return _most("LaMBO-2 produces the most diverse sequences", unique, "LaMBO-2", "frac_unique")


def diversity_lambo2_most_feasible(feasible: Rates) -> Verdict:
    """Paper (Fig. solver diagnostics): "LaMBO-2 produces the most [...] feasible solutions".

    Measured before any filter: LLOME's feasible fraction of its distinct valid candidates before
    the Filter (the candidate log's ``feasible``, else the record's ``frac_feasible_generated``;
    the record's ``frac_feasible`` is after the Filter's infeasible cap: ``None``), LaMBO-2's and
    the GA's over their proposals. Rule and test as :func:`diversity_lambo2_most_unique`.
    """
    return _most(
        "LaMBO-2 produces the most feasible sequences", feasible, "LaMBO-2", "frac_feasible"
    )


def diversity_more_unique_than_ga(method: str, unique: Rates) -> Verdict:
    """Paper (§5): "Compared to the GA, [...] LaMBO-2, LLOME-MargE, and LLOME-SFT produce
    significantly higher proportions of unique sequences."

    Rule and test (measured as in :func:`diversity_lambo2_most_unique`): ``method``'s median
    over runs strictly above the GA's and the exact two-sided permutation test at
    :data:`ALPHA`: agree; both the other way: disagree; else inconclusive; ``method`` or the GA
    missing or not measured like the paper: not comparable.
    """
    claim = f"{method} generates more unique sequences than the GA"
    pair = {m: rates for m, rates in unique.items() if m in (method, "GA") and len(rates)}
    if len(pair) < 2:
        return Verdict(claim, "not comparable", f"no runs of {method} or of the GA")
    return _most(claim, pair, method, "frac_unique")


def diversity_dpo_does_not_improve(
    unique_runs: Sequence[Sequence[float | None]],
    feasible_runs: Sequence[Sequence[float | None]],
) -> Verdict:
    """Paper (§5): "LLOME-DPO does not improve either the diversity or the feasibility of its
    outputs even when provided with more oracle labels."

    Input: per LLOME-DPO run, its fraction unique / feasible (before the Filter, as above) per
    round >= 1. Per run and quantity the change ``d`` from its first to its last round. Agree
    (for both quantities): the median change is below :data:`IMPROVEMENT_MIN` and the one-sided
    exact sign-flip test of ``d - IMPROVEMENT_MIN`` (below 0) has p < :data:`ALPHA`; disagree
    (for either): the median change is at least :data:`IMPROVEMENT_MIN` and the two-sided
    sign-flip test of ``d`` finds a rise at :data:`ALPHA` / 2; else inconclusive (3 runs reach
    at best p 0.125 one-sided); no run with two rounds (DPO collapsed after one) or a value not
    measured before the Filter: not comparable.
    """
    claim = "LLOME-DPO improves neither diversity nor feasibility"
    changes: dict[str, list[float]] = {}
    for name, runs in (("frac_unique", unique_runs), ("frac_feasible", feasible_runs)):
        usable = [r for r in runs if len(r) >= 2]
        first_last = [(r[0], r[-1]) for r in usable]
        if any(a is None or b is None for a, b in first_last):
            return Verdict(claim, "not comparable", f"{name} not measured before the Filter")
        changes[name] = [float(b or 0.0) - float(a or 0.0) for a, b in first_last]
    if min(len(c) for c in changes.values()) == 0:
        return Verdict(claim, "not comparable", "no LLOME-DPO run reached a second round")
    test = (
        "exact sign-flip test on per-run changes (first to last round): one-sided below "
        f"{IMPROVEMENT_MIN} (agree), two-sided (disagree)"
    )
    strict = ALPHA / len(changes)
    parts, flat, rising = [], [], []
    for name, d in changes.items():
        median = _median(d)
        p_below = stats.sign_flip_test(np.asarray(d) - IMPROVEMENT_MIN, "less")
        p_change = stats.sign_flip_test(d)
        flat.append((median < IMPROVEMENT_MIN and p_below < ALPHA, p_below))
        rising.append((median >= IMPROVEMENT_MIN and p_change < strict and sum(d) > 0, p_change))
        parts.append(
            f"median change of {name} {median:+.3f} over {len(d)} runs (p below "
            f"{IMPROVEMENT_MIN}: {_fmt_p(p_below)}, p of a change: {_fmt_p(p_change)})"
        )
    n = min(len(c) for c in changes.values())
    why = (
        "; ".join(parts) + f" (an improvement if >= {IMPROVEMENT_MIN}; disagree needs p < "
        f"{_fmt_p(strict)})"
    )
    floor = stats.smallest_p_sign_flip(n, "less")
    if floor >= ALPHA:
        why += f"; {n} runs cannot reach p < {ALPHA} (smallest p {_fmt_p(floor)})"
    if all(ok for ok, _ in flat):
        return Verdict(claim, "agree", why, test, str(n), max(p for _, p in flat))
    if any(ok for ok, _ in rising):
        return Verdict(claim, "disagree", why, test, str(n), min(p for ok, p in rising if ok))
    points = "disagree" if any(_median(d) >= IMPROVEMENT_MIN for d in changes.values()) else "agree"
    return Verdict(
        claim,
        "inconclusive",
        f"the numbers point to {points}, the rule and the test do not both decide: {why}",
        test,
        str(n),
        max(p for _, p in flat) if points == "agree" else min(p for _, p in rising),
    )


# ------------------------------------------------------------------------------------------
# Fig. 3 and 4: calibration of the likelihood against regret
# ------------------------------------------------------------------------------------------
def spearman_feasible(
    likelihood: np.ndarray, values: np.ndarray, above: float | None = None
) -> tuple[float, int]:
    """Spearman's rho between likelihood and regret ``1 - f`` over the *feasible* candidates
    (finite ``f``; optionally only those with likelihood > ``above``), and their count. NaN when
    fewer than 3 or either side is constant. Infeasible candidates are left out: counted as
    regret 1, they made the old pooled rho mostly a measure of feasibility."""
    lik = np.asarray(likelihood, np.float64)
    val = np.asarray(values, np.float64)
    mask = np.isfinite(val)
    if above is not None:
        mask &= lik > above
    x, y = lik[mask], 1.0 - val[mask]
    n = int(x.size)
    if n < 3 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan"), n
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic), n


def _band(n: int) -> float:
    return Z_95 / math.sqrt(max(n - 1, 1))


def _normal_p(z: float) -> float:
    """Two-sided normal p of ``z``: ``erfc(|z| / sqrt 2)`` (0.05 at ``|z|`` = 1.96)."""
    return math.erfc(abs(z) / math.sqrt(2.0))


_RHO_TEST = "Spearman rho against its null band Z_95 / sqrt(n - 1) (two-sided normal p)"


def calibration_higher_likelihood_lower_regret(
    method: str, likelihood: np.ndarray | None, values: np.ndarray | None
) -> Verdict:
    """Paper (§5): "LLOME-MargE and LLOME-SFT assign higher likelihoods to lower regret
    sequences".

    Input: every logged candidate of the method's runs (all rounds): its likelihood
    ``exp(mean log-prob)`` and ``f`` (``-inf`` infeasible); ``None`` without a candidate log.
    Rule: Spearman's rho(likelihood, regret) over the feasible candidates
    (:func:`spearman_feasible`) below ``-Z_95 / sqrt(n - 1)``: agree; above ``+Z_95 /
    sqrt(n - 1)``: disagree; inside the band (or undefined): inconclusive; no log or no feasible
    candidate: not comparable.
    """
    claim = f"{method} assigns higher likelihood to lower regret (feasible candidates)"
    if likelihood is None or values is None:
        return Verdict(claim, "not comparable", f"no candidate log of a finished {method} run")
    rho, n = spearman_feasible(likelihood, values)
    if n == 0:
        return Verdict(claim, "not comparable", "no feasible candidate")
    if math.isnan(rho):
        return Verdict(
            claim, "inconclusive", f"rho undefined over {n} feasible candidates", _RHO_TEST, str(n)
        )
    band = _band(n)
    p = _normal_p(rho * math.sqrt(max(n - 1, 1)))
    why = f"rho {rho:.3f} over {n} feasible candidates (noise band +-{band:.3f}, p {_fmt_p(p)})"
    if rho < -band:
        return Verdict(claim, "agree", why, _RHO_TEST, str(n), p)
    if rho > band:
        return Verdict(claim, "disagree", why, _RHO_TEST, str(n), p)
    return Verdict(claim, "inconclusive", f"inside the noise band: {why}", _RHO_TEST, str(n), p)


def calibration_overconfident(
    method: str, likelihood: np.ndarray | None, values: np.ndarray | None
) -> Verdict:
    """Paper (§5): "[LLOME-MargE and LLOME-SFT] also exhibit some degree of overconfidence.
    Indeed, [...] the likelihood and reward of SFT- and MargE-generated sequences are inversely
    correlated for high likelihoods exceeding 0.7."

    Rule: over the feasible candidates with likelihood > :data:`HIGH_LIKELIHOOD`, Spearman's
    rho(likelihood, regret) above ``+Z_95 / sqrt(n - 1)`` (higher likelihood, *higher* regret):
    agree; below ``-Z_95 / sqrt(n - 1)`` (still calibrated there): disagree; inside the band:
    inconclusive; no candidate log or no feasible candidate above 0.7 (our model never reaches
    the paper's regime): not comparable. (Regret stands for the paper's reward: both rank the
    same sequences' values.)
    """
    claim = f"{method} is overconfident above likelihood {HIGH_LIKELIHOOD}"
    if likelihood is None or values is None:
        return Verdict(claim, "not comparable", f"no candidate log of a finished {method} run")
    rho, n = spearman_feasible(likelihood, values, above=HIGH_LIKELIHOOD)
    if n == 0:
        return Verdict(
            claim, "not comparable", f"no feasible candidate with likelihood > {HIGH_LIKELIHOOD}"
        )
    if math.isnan(rho):
        return Verdict(
            claim, "inconclusive", f"rho undefined over {n} feasible candidates", _RHO_TEST, str(n)
        )
    band = _band(n)
    p = _normal_p(rho * math.sqrt(max(n - 1, 1)))
    why = (
        f"rho(likelihood, regret) {rho:.3f} over {n} feasible candidates above "
        f"{HIGH_LIKELIHOOD} (noise band +-{band:.3f}, p {_fmt_p(p)})"
    )
    if rho > band:
        return Verdict(claim, "agree", why, _RHO_TEST, str(n), p)
    if rho < -band:
        return Verdict(claim, "disagree", why, _RHO_TEST, str(n), p)
    return Verdict(claim, "inconclusive", f"inside the noise band: {why}", _RHO_TEST, str(n), p)


def sft_marge_sole_optimum(first: str, finals: Mapping[str, Sequence[float]]) -> Verdict:
    """Paper (§5): "LLOME-SFT_1-MargE_9 not only is the sole pipeline to find the optimal
    solution [...]".

    Input: per pipeline, each run's min regret at the budget. Rule (an existence claim, no
    test): another pipeline reaches regret 0 in some run: disagree (one counterexample
    suffices); ``first`` reaches 0 and no other does: agree; none reaches 0: disagree
    (``first`` did not find the optimum); but without a counterexample and with fewer than
    :data:`MIN_SEEDS` seeds of a pipeline: inconclusive; ``first`` or every other pipeline
    missing: not comparable.
    """
    claim = f"{first} is the sole pipeline to find the optimum"
    if first not in finals or len(finals) < 2:
        return Verdict(claim, "not comparable", f"no runs of {first} or of another pipeline")
    solved = sorted(p for p, runs in finals.items() if any(r <= _OPTIMUM_TOL for r in runs))
    others = [p for p in solved if p != first]
    why = f"pipelines that reached regret 0: {', '.join(solved) or 'none'}"
    seeds = min(len(r) for r in finals.values())
    test = "no test (an existence claim: one run at regret 0 suffices)"
    if others:
        return Verdict(claim, "disagree", why, test, str(seeds))
    return _decide(claim, first in solved, why, seeds, test=test)


def sft_marge_best_calibration(first: str, rho: Mapping[str, tuple[float, int]]) -> Verdict:
    """Paper (§5): "[LLOME-SFT_1-MargE_9] also achieves the best calibration curve" ("a
    perfectly-calibrated model would show a steep linear trend").

    Input: per pipeline ``(rho, n)`` of :func:`spearman_feasible` over its logged candidates.
    Rule: ``first``'s rho is below the lowest other rho by more than the noise of a difference
    of two correlations, ``Z_95 sqrt(1/(n1 - 1) + 1/(n2 - 1))``: agree; above it by more:
    disagree; within: inconclusive; ``first`` or every other pipeline without a logged rho: not
    comparable.
    """
    claim = f"{first} has the best calibration (most negative rho on feasible candidates)"
    have = {p: (r, n) for p, (r, n) in rho.items() if not math.isnan(r)}
    if first not in have or len(have) < 2:
        return Verdict(
            claim, "not comparable", f"no candidate log of {first} or of another pipeline"
        )
    mine, n1 = have[first]
    other, (best, n2) = min(
        ((p, v) for p, v in have.items() if p != first), key=lambda kv: kv[1][0]
    )
    spread = math.sqrt(1.0 / max(n1 - 1, 1) + 1.0 / max(n2 - 1, 1))
    band = Z_95 * spread
    p = _normal_p((mine - best) / spread)
    test = "difference of two Spearman rho against Z_95 sqrt(1/(n1 - 1) + 1/(n2 - 1))"
    n = f"{n1} vs {n2}"
    why = (
        f"{first} rho {mine:.3f} (n {n1}) vs {other} {best:.3f} (n {n2}); noise +-{band:.3f}, "
        f"p {_fmt_p(p)}"
    )
    if mine < best - band:
        return Verdict(claim, "agree", why, test, n, p)
    if mine > best + band:
        return Verdict(claim, "disagree", why, test, n, p)
    return Verdict(claim, "inconclusive", f"within the noise: {why}", test, n, p)


def sft_marge_intermediate_worst(
    summary: Summary, first: str, last: str, quantization: int
) -> Verdict:
    """Paper (§5): "switching from SFT to MargE training at an intermediate point results in the
    worst performance."

    Input: per pipeline, the per-seed min regrets at the budget. The intermediate pipelines are
    all but ``first`` (SFT_1-MargE_{T-1}) and ``last`` (SFT_T); the worst of them is the one
    with the highest median. Rule and test per endpoint: the endpoint's median a level or more
    below the worst intermediate's (one-level rule) and the exact two-sided permutation test at
    :data:`ALPHA` / intermediates (Bonferroni for picking the worst): agree when both endpoints
    are below it by both; disagree when an endpoint is above it by both (at :data:`ALPHA` /
    2); else inconclusive; no intermediate pipeline or no endpoint: not comparable.
    """
    claim = "an intermediate SFT-to-MargE switch performs worst"
    middle = {p: s for p, s in summary.items() if p not in (first, last) and len(s["values"])}
    ends = {p: s for p, s in summary.items() if p in (first, last) and len(s["values"])}
    if not middle or not ends:
        return Verdict(claim, "not comparable", "needs an intermediate pipeline and an endpoint")
    worst = max(sorted(middle), key=lambda p: _median(_values(middle[p])))
    pairs = [
        _pair(e, _values(ends[e]), worst, _values(middle[worst]), quantization)
        for e in sorted(ends)
    ]
    return _lower(
        claim,
        pairs,
        "min regret",
        f"the one-level rule on medians (worst intermediate: {worst})",
        alpha_agree=ALPHA / len(middle),
    )


# ------------------------------------------------------------------------------------------
# Fig. 5: MargE vs REINFORCE
# ------------------------------------------------------------------------------------------
def _trained(runs: Sequence[Sequence[float]]) -> list[Sequence[float]]:
    return [r for r in runs if len(r) >= 2]


def reinforce_decreases_regret(runs: Sequence[Sequence[float]], quantization: int) -> Verdict:
    """Paper (§5): "LLOME-REINFORCE decreases the regret to some degree".

    Input: per LLOME-REINFORCE run, its min regret after each round (index 0 = round 0, the GA
    data); per run the decrease ``d = round 0 - last``. Agree: the median decrease is > 0 and
    the exact two-sided sign-flip test of ``d`` finds a decrease at :data:`ALPHA`; disagree: the
    median decrease is below one level (:func:`one_level` at the median round-0 regret; no
    decrease to speak of) and the one-sided sign-flip test of ``d - level`` (below 0) has p <
    :data:`ALPHA`; else inconclusive (3 runs reach at best 0.25 two-sided); no run past round
    0: not comparable.
    """
    claim = "LLOME-REINFORCE decreases the regret"
    trained = _trained(runs)
    if not trained:
        return Verdict(claim, "not comparable", "no LLOME-REINFORCE run got past round 0")
    d = [float(r[0] - r[-1]) for r in trained]
    n = len(d)
    drop = _median(d)
    level = one_level(_median([r[0] for r in trained]), quantization)
    p_drop = stats.sign_flip_test(d)
    p_flat = stats.sign_flip_test(np.asarray(d) - level, "less")
    test = (
        "exact sign-flip test on per-run decreases (round 0 to last): two-sided (agree), "
        "one-sided below one level (disagree)"
    )
    why = (
        f"median decrease of the min regret from round 0: {drop:.3f} over {n} runs (a level "
        f"{level:.3f}); p of a decrease {_fmt_p(p_drop)}, p below a level {_fmt_p(p_flat)}"
    )
    if drop > 0 and p_drop < ALPHA and sum(d) > 0:
        return Verdict(claim, "agree", why, test, str(n), p_drop)
    if drop < level and p_flat < ALPHA:
        return Verdict(claim, "disagree", why, test, str(n), p_flat)
    floor = stats.smallest_p_sign_flip(n)
    if floor >= ALPHA:
        why += f"; {n} runs cannot reach p < {ALPHA} two-sided (smallest p {_fmt_p(floor)})"
    points = "agree" if drop > 0 else "disagree"
    return Verdict(
        claim,
        "inconclusive",
        f"the numbers point to {points}, the rule and the test do not both decide: {why}",
        test,
        str(n),
        p_drop if drop > 0 else p_flat,
    )


def reinforce_plateaus_early(runs: Sequence[Sequence[float]], rounds: int) -> Verdict:
    """Paper (§5): "[LLOME-REINFORCE] plateaus early".

    Rule: a run plateaus early when it did not reach regret 0 and its last improvement (the last
    round whose min regret is below the previous round's) is at most :data:`PLATEAU_EARLY` x
    ``rounds``. Test: the one-sided sign test over the runs: more runs plateau early than not
    at :data:`ALPHA`: agree; fewer: disagree; else inconclusive (3 runs reach at best 0.125); no
    run past round 0: not comparable.
    """
    claim = "LLOME-REINFORCE plateaus early"
    trained = _trained(runs)
    if not trained:
        return Verdict(claim, "not comparable", "no LLOME-REINFORCE run got past round 0")
    last_gain = [max([k for k in range(1, len(r)) if r[k] < r[k - 1]], default=0) for r in trained]
    early = [
        min(r) > _OPTIMUM_TOL and g <= PLATEAU_EARLY * rounds for r, g in zip(trained, last_gain)
    ]
    what = (
        f"runs stop improving by round {PLATEAU_EARLY * rounds:g} of {rounds} "
        f"(last improving rounds: {last_gain})"
    )
    return _sign_verdict(claim, sum(early), len(early), what)


def reinforce_never_optimal(runs: Sequence[Sequence[float]]) -> Verdict:
    """Paper (§5): "[LLOME-REINFORCE] does not reach optimality".

    Rule (an existence claim, no test): some run reaches regret 0: disagree; none on at least
    :data:`MIN_SEEDS` runs: agree; none on fewer: inconclusive; no run past round 0: not
    comparable.
    """
    claim = "LLOME-REINFORCE does not reach the optimum"
    trained = _trained(runs)
    if not trained:
        return Verdict(claim, "not comparable", "no LLOME-REINFORCE run got past round 0")
    reached = sum(min(r) <= _OPTIMUM_TOL for r in trained)
    why = f"{reached} of {len(trained)} runs reached regret 0"
    test = "no test (an existence claim: one run at regret 0 suffices)"
    if reached:  # one counterexample suffices
        return Verdict(claim, "disagree", why, test, str(len(trained)))
    return _decide(claim, True, why, len(trained), unit="runs", test=test)


def reinforce_marge_ends_lower(summary: Summary, quantization: int) -> Verdict:
    """Paper (Fig. reinforce: MargE reaches the optimum where REINFORCE plateaus): LLOME-MargE
    ends below LLOME-REINFORCE.

    Rule and test as :func:`solver_best` for the two: LLOME-MargE's median a level or more
    below LLOME-REINFORCE's and the exact two-sided permutation test at :data:`ALPHA`: agree;
    both the other way: disagree; else inconclusive; either missing: not comparable.
    """
    pair = {m: s for m, s in summary.items() if m in ("LLOME-MargE", "LLOME-REINFORCE")}
    claim = "LLOME-MargE ends below LLOME-REINFORCE"
    if verdict := _missing(claim, pair, ("LLOME-MargE", "LLOME-REINFORCE")):
        return verdict
    return _beats(claim, pair, ("LLOME-MargE",), quantization)


# ------------------------------------------------------------------------------------------
# Fig. 6: iterative refinement
# ------------------------------------------------------------------------------------------
def refinement_reduces_regret(method: str, per_round: Sequence[Sequence[float]]) -> Verdict:
    """Paper (appendix, Fig. iterative-gen-all): "LLMs iteratively produce edits that
    significantly reduce regret."

    Input: per (run, round), the min regret of the candidates of each refinement iteration.
    Rule: the last iteration's min regret is below the first's in a majority of rounds by a
    one-sided sign test at :data:`ALPHA` (ties count against: the claim is that edits reduce
    regret): agree; in a minority by the same test: disagree; else inconclusive; no round with
    two iterations: not comparable.
    """
    claim = f"{method}: refinement reduces regret (last vs first iteration)"
    usable = [p for p in per_round if len(p) >= 2]
    if not usable:
        return Verdict(claim, "not comparable", "no logged round with two refinement iterations")
    k = sum(p[-1] < p[0] for p in usable)
    return _sign_verdict(claim, k, len(usable), "lower at the last iteration than the first")


def refinement_first_edits_help_most(method: str, per_round: Sequence[Sequence[float]]) -> Verdict:
    """Paper (appendix): "the first few edits frequently improve the sequence whereas later edits
    are less likely to be helpful."

    Rule: per (run, round) with at least 3 iterations, the first step helps when iteration 2's
    min regret is below iteration 1's, the last step when the last is below the one before; over
    the rounds where exactly one of the two helps, the first step is the one significantly more
    often (sign test at :data:`ALPHA`): agree; the last step significantly more often:
    disagree; else inconclusive; fewer than 3 iterations: not comparable.
    """
    claim = f"{method}: first edits help more often than later ones"
    usable = [p for p in per_round if len(p) >= 3]
    if not usable:
        return Verdict(
            claim, "not comparable", "no logged round with 3 iterations (a first and a last step)"
        )
    first = [p[1] < p[0] for p in usable]
    last = [p[-1] < p[-2] for p in usable]
    only_first = sum(f and not la for f, la in zip(first, last))
    only_last = sum(la and not f for f, la in zip(first, last))
    what = (
        f"first step helps in {sum(first)} of {len(usable)} rounds, last step in {sum(last)}; "
        f"only the first helps"
    )
    return _sign_verdict(claim, only_first, only_first + only_last, what)


# ------------------------------------------------------------------------------------------
# Fig. 7: candidate selection by likelihood vs by the oracle
# ------------------------------------------------------------------------------------------
def _informative(rounds: Sequence[SelectionRound]) -> list[SelectionRound]:
    """Rounds with a real choice (``0 < j < candidates``): selecting every candidate cannot miss."""
    return [r for r in rounds if 0 < r.selected < r.candidates]


def selection_misses_best_often(method: str, rounds: Sequence[SelectionRound]) -> Verdict:
    """Paper (§5): "the likelihood method often selects [...] not the highest scoring
    candidates".

    Rule (a fraction against a threshold the paper does not give; no test): over the rounds with
    a real choice, the fraction whose likelihood-selected ``j`` miss the oracle's best candidate
    (a higher min regret than the oracle's top ``j``) is at least :data:`OFTEN`: agree; below:
    disagree; fewer than :data:`MIN_ROUNDS` such rounds: inconclusive; none (no candidate log,
    or every candidate selected): not comparable.
    """
    claim = f"{method}: likelihood selection often misses the best candidate"
    rounds = _informative(rounds)
    if not rounds:
        return Verdict(claim, "not comparable", "no logged round with 0 < j < candidates")
    misses = sum(r.min_regret_likelihood > r.min_regret_oracle for r in rounds)
    frac = misses / len(rounds)
    why = f"missed in {misses} of {len(rounds)} rounds ({frac:.2f}; often if >= {OFTEN:.2f})"
    return _decide(
        claim,
        frac >= OFTEN,
        why,
        len(rounds),
        MIN_ROUNDS,
        "rounds with a choice",
        "no test (a fraction of rounds against OFTEN)",
    )


def selection_high_scoring(method: str, rounds: Sequence[SelectionRound]) -> Verdict:
    """Paper (§5): "the likelihood method often selects high-scoring [...] candidates".

    Rule: over the rounds with a real choice, the likelihood-selected candidates' mean regret is
    below the mean of all candidates (a random selection's expectation) in a majority of rounds
    by a one-sided sign test at :data:`ALPHA`: agree; in a minority by the same test: disagree;
    else inconclusive; no such round: not comparable.
    """
    claim = f"{method}: likelihood selection picks better than random"
    rounds = _informative(rounds)
    if not rounds:
        return Verdict(claim, "not comparable", "no logged round with 0 < j < candidates")
    k = sum(r.mean_regret_likelihood < r.mean_regret_all for r in rounds)
    return _sign_verdict(claim, k, len(rounds), "better than the candidates' mean")


# ------------------------------------------------------------------------------------------
# Fig. 8: half quantisation
# ------------------------------------------------------------------------------------------
def half_quant_marge_best(
    summary: Summary, last_round: Mapping[str, int], quantization: int
) -> Verdict:
    """Paper: a figure only ("See the Appendix for results on a test function with q < k"); no
    ranking is stated, so we test f2's, "LLOME-MargE performs the best", on Ehr(32,32)-4-4-2.

    Input: the per-seed min regrets at the budget, per method the last round any of its runs
    reached, and the function's ``q``. Rule and test: as :func:`solver_best`; but when every
    LLOME-MargE run stopped after round 0 (the GA data gives no training pairs on this
    function: every label is 0) LLOME never trained, so its regret is the GA's seed data, not
    LLOME's: not comparable.
    """
    claim = "Ehr(32,32)-4-4-2: LLOME-MargE performs the best"
    if "LLOME-MargE" in summary and last_round.get("LLOME-MargE", 1) < 1:
        return Verdict(
            claim,
            "not comparable",
            "every LLOME-MargE run stopped after round 0 (no training pairs): LLOME never trained",
        )
    return _beats(claim, summary, ("LLOME-MargE",), quantization)


# ------------------------------------------------------------------------------------------
# Fig. 9: model size
# ------------------------------------------------------------------------------------------
def model_size_comparable(
    other: str,
    points: Sequence[tuple[int, Summary]],
    quantization: int,
    budget_after_round0: int,
) -> Verdict:
    """Paper (appendix): "LLOME-MargE (LLaMA 226K) performs comparably to LLOME-MargE (Pythia
    2.8B) and LaMBO-2 up to 22K test function evaluations".

    Input: ``points``, ``(labels after round 0, summary)`` at each round's budget up to
    :data:`PAPER_22K_AFTER_ROUND0` (the paper's 22K = its 10K GA labels + 12K), with our small
    from-scratch LLOME-MargE under ``"LLOME-MargE"`` (per-seed values); ``other`` the method
    compared with. Rule: at every point the two medians are less than one quantisation level
    apart (:func:`one_level`, ``q`` of the function). Test: at every point, TOST at that level
    (the difference of means significantly inside +-level). Agree: every point within by both;
    disagree: a point a level or more apart and the two-sided permutation test finding the
    difference at :data:`ALPHA` / points (Bonferroni); else inconclusive; the runs stop before
    12K labels after round 0, or ``other`` (e.g. the Pythia-2.8B curve, not run here) missing:
    not comparable.
    """
    claim = f"small LLOME-MargE comparable to {other} up to 22K labels"
    if budget_after_round0 < PAPER_22K_AFTER_ROUND0:
        return Verdict(
            claim,
            "not comparable",
            f"our runs stop {budget_after_round0} labels after round 0, before the paper's 22K "
            f"({PAPER_22K_AFTER_ROUND0} after its 10K GA labels)",
        )
    pair = ("LLOME-MargE", other)
    missing = [
        m
        for m in pair
        if not points or any(m not in s or not len(s[m]["values"]) for _, s in points)
    ]
    if missing:
        return Verdict(claim, "not comparable", f"no finished runs of {', '.join(missing)}")
    items = []
    for after, summary in points:
        x, y = _values(summary["LLOME-MargE"]), _values(summary[other])
        within, _, level = _within_level(_median(x), _median(y), quantization)
        items.append((f"at {after}: ", _near("LLOME-MargE", x, other, y, level, within)))
    rule = "the one-level rule on medians at every budget (labels after round 0)"
    return _all_near(claim, items, "min regret", rule)


def model_size_plateaus(
    at_22k: Summary, at_end: Summary, quantization: int, budget_after_round0: int
) -> Verdict:
    """Paper (appendix): "[LLOME-MargE (LLaMA 226K)'s] performance eventually plateaus".

    Input: the small LLOME-MargE's per-seed min regrets at 22K labels (12K after round 0) and at
    the end of the runs, in the same run order; per run the drop ``d`` between them. Rule: its
    median min regret improves by less than one quantisation level (:func:`one_level` at its
    22K median). Test: agree needs the one-sided sign-flip test of ``d - level`` (below 0) at
    :data:`ALPHA`; disagree (a level or more) needs the two-sided sign-flip test of ``d`` to
    find the drop at :data:`ALPHA`; else inconclusive; no labels after 22K, or no run: not
    comparable.
    """
    claim = "small LLOME-MargE plateaus after 22K labels"
    if budget_after_round0 <= PAPER_22K_AFTER_ROUND0:
        return Verdict(
            claim,
            "not comparable",
            f"our runs stop {budget_after_round0} labels after round 0: nothing after 22K",
        )
    if verdict := _missing(claim, at_22k, ("LLOME-MargE",)) or _missing(
        claim, at_end, ("LLOME-MargE",)
    ):
        return verdict
    v22, vend = _values(at_22k["LLOME-MargE"]), _values(at_end["LLOME-MargE"])
    if len(v22) != len(vend):
        return Verdict(claim, "not comparable", "not the same runs at 22K and at the end")
    m22, mend = _median(v22), _median(vend)
    drop, level = m22 - mend, one_level(m22, quantization)
    flat = drop == 0.0 or drop < level
    d = [a - b for a, b in zip(v22, vend)]
    p_flat = stats.sign_flip_test(np.asarray(d) - level, "less")
    p_drop = stats.sign_flip_test(d)
    n = len(d)
    test = (
        "exact sign-flip test on per-run drops (22K to the end): one-sided below one level "
        "(agree), two-sided (disagree)"
    )
    why = (
        f"median {m22:.3f} at 22K -> {mend:.3f} at the end (a level at {m22:.3f}: {level:.3f}); "
        f"p below a level {_fmt_p(p_flat)}, p of a drop {_fmt_p(p_drop)}, n = {n}"
    )
    if flat and p_flat < ALPHA:
        return Verdict(claim, "agree", why, test, str(n), p_flat)
    if not flat and p_drop < ALPHA and sum(d) > 0:
        return Verdict(claim, "disagree", why, test, str(n), p_drop)
    floor = stats.smallest_p_sign_flip(n, "less")
    if floor >= ALPHA:
        why += f"; {n} runs cannot reach p < {ALPHA} (smallest p {_fmt_p(floor)})"
    return Verdict(
        claim,
        "inconclusive",
        f"the numbers point to {'agree' if flat else 'disagree'}, the rule and the test do not "
        f"both decide: {why}",
        test,
        str(n),
        p_flat if flat else p_drop,
    )


# ------------------------------------------------------------------------------------------
# Fig. 10: GA difficulty and Pareto hypervolumes
# ------------------------------------------------------------------------------------------
def ga_difficulty_q_strongest(ranges: Mapping[str, Sequence[float]]) -> Verdict:
    """Paper (appendix, Fig. ehrlich_param_sensitivity): "For this optimizer [the GA], the
    problem difficulty depends most strongly on the quantization parameter q."

    Input: per varied parameter (``v``, ``L``, ``c``, ``k``, ``q``), per seed the range over the
    parameter's values of the GA's mean regret over the run. Rule and test per other parameter:
    ``q``'s median range strictly larger and the exact two-sided permutation test at
    :data:`ALPHA`: agree when above every other parameter by both; disagree when another
    parameter is above ``q`` by both (Bonferroni over the others); else inconclusive; the sweep
    not run or ``q`` not varied: not comparable.
    """
    claim = "GA difficulty depends most strongly on q"
    ranges = {p: r for p, r in ranges.items() if len(r)}
    if "q" not in ranges:
        return Verdict(claim, "not comparable", "the difficulty sweep has not run (or not on q)")
    others = sorted(p for p in ranges if p != "q")
    if not others:
        return Verdict(claim, "not comparable", "the sweep varied q only")
    pairs = [_pair(p, ranges[p], "q", ranges["q"], None) for p in others]
    return _lower(claim, pairs, "range of mean regret", "the strict order of the medians")


def pareto_llome_variant_below(
    variant: str, hypervolume: Mapping[str, Mapping[str, Sequence[float]] | None]
) -> Verdict:
    """Paper (appendix, Fig. pareto-frontiers): "All three LLOME variants exhibit significantly
    lower average hypervolume than both the GA and LaMBO-2" (lower is better); one verdict per
    variant.

    Input: per method, per function every compared method ran on, each run's hypervolume (area
    under the min-regret curve over the labels after round 0); ``None`` without all those
    functions. Rule: ``variant``'s mean over the functions of its mean per function is strictly
    below the GA's and LaMBO-2's. Test: per opponent, the exact two-sided permutation test
    stratified by function (labels permuted within a function; the statistic is the rule's
    difference) at :data:`ALPHA`. Agree: below both by both; disagree: at or above one by the
    rule and above it by the test (Bonferroni over the two); else inconclusive; any of the
    three without a value: not comparable.
    """
    claim = f"{variant} has a lower hypervolume than the GA and LaMBO-2"
    needed = (variant, "GA", "LaMBO-2")
    missing = [m for m in needed if not hypervolume.get(m)]
    if missing:
        return Verdict(
            claim, "not comparable", f"no hypervolume on the common functions: {', '.join(missing)}"
        )
    areas = {m: hypervolume[m] or {} for m in needed}
    functions = sorted(areas[variant])
    if any(sorted(areas[m]) != functions for m in needed) or any(
        not len(areas[m][f]) for m in needed for f in functions
    ):
        return Verdict(claim, "not comparable", "the three do not share their functions")
    means = {m: float(np.mean([np.mean(areas[m][f]) for f in functions])) for m in needed}
    pairs = []
    for other in ("GA", "LaMBO-2"):
        strata = [(list(areas[variant][f]), list(areas[other][f])) for f in functions]
        sizes = [(len(a), len(b)) for a, b in strata]
        pairs.append(
            _Pair(
                variant,
                other,
                means[variant],
                means[other],
                0.0,
                means[variant] - means[other],
                stats.stratified_permutation_test(strata),
                ", ".join(f"{f} {a} vs {b}" for f, (a, b) in zip(functions, sizes)),
                stats.smallest_p_stratified(sizes),
                stats.is_exact(*sizes),
            )
        )
    verdict = _lower(
        claim,
        pairs,
        "hypervolume, stratified by function",
        "the strict order of the means over functions",
    )
    hv = "mean hypervolume " + ", ".join(f"{m} {v:.3f}" for m, v in means.items())
    return verdict._replace(reason=f"{hv}; {verdict.reason}")


# ------------------------------------------------------------------------------------------
# Across figures
# ------------------------------------------------------------------------------------------
def comparable_accounting(verdict: Verdict, accountings: Collection[str]) -> Verdict:
    """A verdict on label budgets holds only if its runs count labels alike: ``accounting``
    ``"pay_once"`` (each distinct sequence paid once) or ``"every_evaluation"`` (the paper's:
    every evaluation paid, the GA pre-solver's 10,000 included). Runs of both kinds: not
    comparable (whatever ``verdict`` said, which the reason keeps, as do its test, n and p);
    one kind: ``verdict``."""
    kinds = sorted(set(accountings))
    if len(kinds) <= 1:
        return verdict
    return verdict._replace(
        verdict="not comparable",
        reason=f"its runs count labels differently ({', '.join(kinds)}); as measured: "
        f"{verdict.verdict} ({verdict.reason})",
    )


def at_smoke_scale(verdict: Verdict) -> Verdict:
    """The smoke scale checks the pipeline only: an agree / disagree there is ``inconclusive``
    (its direction kept in the reason; test, n and p kept); not comparable / inconclusive
    stay."""
    if verdict.verdict not in ("agree", "disagree"):
        return verdict
    return verdict._replace(
        verdict="inconclusive",
        reason=f"smoke scale, a pipeline check (direction: {verdict.verdict}): {verdict.reason}",
    )


def summary_line(verdicts: Sequence[Verdict]) -> str:
    """Every sub-verdict of a figure on one line (the report's figure table): ``"claim:
    verdict; ..."``. No combined verdict, so a disagreement always shows."""
    return "; ".join(f"{v.claim}: **{v.verdict}**" for v in verdicts) or "no verdict"


def stated_test(verdict: Verdict) -> str:
    """The report's statement of a verdict's test: ``"test: ...; n = ...; p = ..."`` (``p``
    n/a without a test)."""
    p = "n/a" if verdict.p is None else _fmt_p(verdict.p)
    return f"test: {verdict.test or 'none'}; n = {verdict.n or 'n/a'}; p = {p}"
