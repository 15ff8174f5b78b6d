"""Verdicts on what the methods generate (figures 2, 3, 6, 7 and the calibration half of figure
4): diversity and feasibility before any filter, likelihood against regret, refinement and
candidate selection. One function per claim of the paper."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from llome_jax import stats
from llome_jax.bench.verdicts.rules import (
    ALPHA,
    HIGH_LIKELIHOOD,
    IMPROVEMENT_MIN,
    MIN_ROUNDS,
    OFTEN,
    Z_95,
    SelectionRound,
    Verdict,
    compare_pair,
    decide,
    fmt_p,
    lower_verdict,
    median_of,
    sign_verdict,
)

__all__ = [
    "Rates",
    "calibration_higher_likelihood_lower_regret",
    "calibration_overconfident",
    "diversity_dpo_does_not_improve",
    "diversity_lambo2_most_feasible",
    "diversity_lambo2_most_unique",
    "diversity_more_unique_than_ga",
    "refinement_first_edits_help_most",
    "refinement_reduces_regret",
    "selection_high_scoring",
    "selection_misses_best_often",
    "sft_marge_best_calibration",
    "spearman_feasible",
]

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
        compare_pair(m, [float(r or 0.0) for r in rates[m]], method, mine, None)
        for m in sorted(rates)
        if m != method
    ]
    return lower_verdict(claim, pairs, f"run mean of {quantity}", "the strict order of the medians")


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
        median = median_of(d)
        p_below = stats.sign_flip_test(np.asarray(d) - IMPROVEMENT_MIN, "less")
        p_change = stats.sign_flip_test(d)
        flat.append((median < IMPROVEMENT_MIN and p_below < ALPHA, p_below))
        rising.append((median >= IMPROVEMENT_MIN and p_change < strict and sum(d) > 0, p_change))
        parts.append(
            f"median change of {name} {median:+.3f} over {len(d)} runs (p below "
            f"{IMPROVEMENT_MIN}: {fmt_p(p_below)}, p of a change: {fmt_p(p_change)})"
        )
    n = min(len(c) for c in changes.values())
    why = (
        "; ".join(parts) + f" (an improvement if >= {IMPROVEMENT_MIN}; disagree needs p < "
        f"{fmt_p(strict)})"
    )
    floor = stats.smallest_p_sign_flip(n, "less")
    if floor >= ALPHA:
        why += f"; {n} runs cannot reach p < {ALPHA} (smallest p {fmt_p(floor)})"
    if all(ok for ok, _ in flat):
        return Verdict(claim, "agree", why, test, str(n), max(p for _, p in flat))
    if any(ok for ok, _ in rising):
        return Verdict(claim, "disagree", why, test, str(n), min(p for ok, p in rising if ok))
    points = (
        "disagree" if any(median_of(d) >= IMPROVEMENT_MIN for d in changes.values()) else "agree"
    )
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
    why = f"rho {rho:.3f} over {n} feasible candidates (noise band +-{band:.3f}, p {fmt_p(p)})"
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
        f"{HIGH_LIKELIHOOD} (noise band +-{band:.3f}, p {fmt_p(p)})"
    )
    if rho > band:
        return Verdict(claim, "agree", why, _RHO_TEST, str(n), p)
    if rho < -band:
        return Verdict(claim, "disagree", why, _RHO_TEST, str(n), p)
    return Verdict(claim, "inconclusive", f"inside the noise band: {why}", _RHO_TEST, str(n), p)


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
        f"p {fmt_p(p)}"
    )
    if mine < best - band:
        return Verdict(claim, "agree", why, test, n, p)
    if mine > best + band:
        return Verdict(claim, "disagree", why, test, n, p)
    return Verdict(claim, "inconclusive", f"within the noise: {why}", test, n, p)


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
    return sign_verdict(claim, k, len(usable), "lower at the last iteration than the first")


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
    return sign_verdict(claim, only_first, only_first + only_last, what)


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
    return decide(
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
    return sign_verdict(claim, k, len(rounds), "better than the candidates' mean")
