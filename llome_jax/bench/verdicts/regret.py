"""Verdicts on min regret over seeds (figures 1, 4, 5, 8, 9) and on the GA difficulty sweep and
the Pareto hypervolumes (figure 10): one function per claim of the paper."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from llome_jax import stats
from llome_jax.bench.verdicts.rules import (
    ALPHA,
    EASY_HARD_SPREAD,
    OPTIMUM_TOL,
    PAPER_22K_AFTER_ROUND0,
    PAPER_METHODS,
    PLATEAU_EARLY,
    PairTest,
    Summary,
    Verdict,
    beats,
    compare_pair,
    decide,
    fmt_p,
    likeness,
    lower_verdict,
    median_of,
    missing_runs,
    near_verdict,
    one_level,
    seed_values,
    sign_verdict,
    within_level,
)

__all__ = [
    "ga_difficulty_q_strongest",
    "half_quant_marge_best",
    "model_size_comparable",
    "model_size_plateaus",
    "pareto_llome_variant_below",
    "prior_reaches_lambo2",
    "reinforce_decreases_regret",
    "reinforce_marge_ends_lower",
    "reinforce_never_optimal",
    "reinforce_plateaus_early",
    "sft_marge_intermediate_worst",
    "sft_marge_sole_optimum",
    "solver_all_comparable",
    "solver_best",
    "solver_medium_pair_outperforms",
]


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
            x, y = seed_values(summary[a]), seed_values(summary[b])
            within = abs(median_of(x) - median_of(y)) <= EASY_HARD_SPREAD
            items.append(("", likeness(a, x, b, y, EASY_HARD_SPREAD, within)))
    medians = [median_of(seed_values(summary[m])) for m in methods]
    rule = f"the rule: spread of medians {max(medians) - min(medians):.3f} <= {EASY_HARD_SPREAD}"
    return near_verdict(claim, items, "min regret", rule)


def solver_best(function: str, method: str, summary: Summary, quantization: int) -> Verdict:
    """Paper (§5): "On f2 LLOME-MargE performs the best, whereas LaMBO-2 performs the best on
    f3."

    Input: per method, the per-seed min regrets at the budget; ``quantization`` the function's
    ``q``. Rule and test per other method of the paper (:data:`PAPER_METHODS`; any other arm
    of ``summary`` is reported beside the verdict, never deciding it): ``method``'s median a
    level or more below (the one-level rule) and the exact two-sided permutation test at
    :data:`ALPHA`. Agree: below
    every other method by both; disagree: some method below ``method`` by both, the test at
    :data:`ALPHA` / others (Bonferroni); else inconclusive (a tie, within a level, or too few
    seeds: 3 vs 3 cannot reach 0.05); ``method`` or every competitor missing: not comparable.
    """
    claim = f"{function}: {method} performs the best"
    return beats(claim, summary, (method,), quantization, among=PAPER_METHODS)


def solver_medium_pair_outperforms(function: str, summary: Summary, quantization: int) -> Verdict:
    """Paper (Fig. 1 caption): "On medium-difficulty tasks [f2, f3], LLOME-MargE and LaMBO-2
    outperform other methods."

    "Other methods" are the paper's (:data:`PAPER_METHODS`: the GA, LLOME-SFT, LLOME-DPO; arms
    the paper does not have are reported beside). Rule and test as :func:`solver_best`, for each
    of the two against each other method: agree
    when both are below every other method by the rule and the test; disagree when another
    method is below one of them by both (Bonferroni over the pairs); else inconclusive; either
    method or every other method missing: not comparable.
    """
    claim = f"{function}: LLOME-MargE and LaMBO-2 outperform the other methods"
    return beats(claim, summary, ("LLOME-MargE", "LaMBO-2"), quantization, among=PAPER_METHODS)


def prior_reaches_lambo2(
    function: str,
    summary: Summary,
    quantization: int,
    prior: str = "LLOME-MargE-prior",
    specialist: str = "LaMBO-2",
) -> Verdict:
    """Ours, not the paper's (an arm it does not have; it decides no paper claim): "LLOME-MargE
    from the prior reaches LaMBO-2 at the budget".

    Input: per method, the per-seed min regrets at the budget; ``quantization`` the function's
    ``q``. Rule and tests, with one level ``l`` (:func:`one_level` at the lower median): agree
    when the prior's median is at most ``l`` above LaMBO-2's and a one-sided exact permutation
    test of non-inferiority at that margin (the prior's values less ``l`` against LaMBO-2's,
    alternative "less") gives p < :data:`ALPHA`; disagree when LaMBO-2's median is ``l`` or
    more below the prior's and the two-sided exact permutation test gives p < :data:`ALPHA`;
    else inconclusive; either arm missing: not comparable.
    """
    claim = f"{function}: {prior} reaches {specialist} (not a paper claim: an arm it lacks)"
    have = {m: seed_values(summary[m]) for m in (prior, specialist) if m in summary}
    if len(have) < 2 or not all(have.values()):
        missing = [m for m in (prior, specialist) if not have.get(m)]
        return Verdict(claim, "not comparable", f"no finished runs of {', '.join(missing)}")
    x, y = have[prior], have[specialist]
    a, b = median_of(x), median_of(y)
    level = one_level(min(a, b), quantization)
    p_diff = stats.permutation_test(x, y)
    p_level = stats.permutation_test(np.asarray(x) - level, y, "less")
    reason = (
        f"{prior} {a:.3f} vs {specialist} {b:.3f} (a level {level:.3f}); non-inferiority at one "
        f"level p = {fmt_p(p_level)}, difference p = {fmt_p(p_diff)}, n = {len(x)} vs {len(y)}"
    )
    n = f"{len(x)} vs {len(y)}"
    if a <= b + level and p_level < ALPHA:
        test = "one-sided exact permutation test of non-inferiority at one level"
        return Verdict(claim, "agree", reason, test, n, p_level)
    test = "exact two-sided permutation test on per-seed min regret (difference of means)"
    if b <= a - level and p_diff < ALPHA:
        return Verdict(claim, "disagree", reason, test, n, p_diff)
    return Verdict(claim, "inconclusive", reason, test, n, p_diff)


def sft_marge_sole_optimum(first: str, finals: Mapping[str, Sequence[float]]) -> Verdict:
    """Paper (§5): "LLOME-SFT_1-MargE_9 not only is the sole pipeline to find the optimal
    solution [...]".

    Input: per pipeline, each run's min regret at the budget. Rule (an existence claim, no
    test): another pipeline reaches regret 0 in some run: disagree (one counterexample
    suffices); ``first`` reaches 0 and no other does: agree; none reaches 0: disagree
    (``first`` did not find the optimum); but without a counterexample and with fewer than
    :data:`~llome_jax.bench.verdicts.rules.MIN_SEEDS` seeds of a pipeline: inconclusive;
    ``first`` or every other pipeline missing: not comparable.
    """
    claim = f"{first} is the sole pipeline to find the optimum"
    if first not in finals or len(finals) < 2:
        return Verdict(claim, "not comparable", f"no runs of {first} or of another pipeline")
    solved = sorted(p for p, runs in finals.items() if any(r <= OPTIMUM_TOL for r in runs))
    others = [p for p in solved if p != first]
    why = f"pipelines that reached regret 0: {', '.join(solved) or 'none'}"
    seeds = min(len(r) for r in finals.values())
    test = "no test (an existence claim: one run at regret 0 suffices)"
    if others:
        return Verdict(claim, "disagree", why, test, str(seeds))
    return decide(claim, first in solved, why, seeds, test=test)


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
    worst = max(sorted(middle), key=lambda p: median_of(seed_values(middle[p])))
    pairs = [
        compare_pair(e, seed_values(ends[e]), worst, seed_values(middle[worst]), quantization)
        for e in sorted(ends)
    ]
    return lower_verdict(
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
    drop = median_of(d)
    level = one_level(median_of([r[0] for r in trained]), quantization)
    p_drop = stats.sign_flip_test(d)
    p_flat = stats.sign_flip_test(np.asarray(d) - level, "less")
    test = (
        "exact sign-flip test on per-run decreases (round 0 to last): two-sided (agree), "
        "one-sided below one level (disagree)"
    )
    why = (
        f"median decrease of the min regret from round 0: {drop:.3f} over {n} runs (a level "
        f"{level:.3f}); p of a decrease {fmt_p(p_drop)}, p below a level {fmt_p(p_flat)}"
    )
    if drop > 0 and p_drop < ALPHA and sum(d) > 0:
        return Verdict(claim, "agree", why, test, str(n), p_drop)
    if drop < level and p_flat < ALPHA:
        return Verdict(claim, "disagree", why, test, str(n), p_flat)
    floor = stats.smallest_p_sign_flip(n)
    if floor >= ALPHA:
        why += f"; {n} runs cannot reach p < {ALPHA} two-sided (smallest p {fmt_p(floor)})"
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
        min(r) > OPTIMUM_TOL and g <= PLATEAU_EARLY * rounds for r, g in zip(trained, last_gain)
    ]
    what = (
        f"runs stop improving by round {PLATEAU_EARLY * rounds:g} of {rounds} "
        f"(last improving rounds: {last_gain})"
    )
    return sign_verdict(claim, sum(early), len(early), what)


def reinforce_never_optimal(runs: Sequence[Sequence[float]]) -> Verdict:
    """Paper (§5): "[LLOME-REINFORCE] does not reach optimality".

    Rule (an existence claim, no test): some run reaches regret 0: disagree; none on at least
    :data:`~llome_jax.bench.verdicts.rules.MIN_SEEDS` runs: agree; none on fewer: inconclusive;
    no run past round 0: not comparable.
    """
    claim = "LLOME-REINFORCE does not reach the optimum"
    trained = _trained(runs)
    if not trained:
        return Verdict(claim, "not comparable", "no LLOME-REINFORCE run got past round 0")
    reached = sum(min(r) <= OPTIMUM_TOL for r in trained)
    why = f"{reached} of {len(trained)} runs reached regret 0"
    test = "no test (an existence claim: one run at regret 0 suffices)"
    if reached:  # one counterexample suffices
        return Verdict(claim, "disagree", why, test, str(len(trained)))
    return decide(claim, True, why, len(trained), unit="runs", test=test)


def reinforce_marge_ends_lower(summary: Summary, quantization: int) -> Verdict:
    """Paper (Fig. reinforce: MargE reaches the optimum where REINFORCE plateaus): LLOME-MargE
    ends below LLOME-REINFORCE.

    Rule and test as :func:`solver_best` for the two: LLOME-MargE's median a level or more
    below LLOME-REINFORCE's and the exact two-sided permutation test at :data:`ALPHA`: agree;
    both the other way: disagree; else inconclusive; either missing: not comparable.
    """
    pair = {m: s for m, s in summary.items() if m in ("LLOME-MargE", "LLOME-REINFORCE")}
    claim = "LLOME-MargE ends below LLOME-REINFORCE"
    if verdict := missing_runs(claim, pair, ("LLOME-MargE", "LLOME-REINFORCE")):
        return verdict
    return beats(claim, pair, ("LLOME-MargE",), quantization)


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
    return beats(claim, summary, ("LLOME-MargE",), quantization, among=PAPER_METHODS)


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
        x, y = seed_values(summary["LLOME-MargE"]), seed_values(summary[other])
        within, _, level = within_level(median_of(x), median_of(y), quantization)
        items.append((f"at {after}: ", likeness("LLOME-MargE", x, other, y, level, within)))
    rule = "the one-level rule on medians at every budget (labels after round 0)"
    return near_verdict(claim, items, "min regret", rule)


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
    if verdict := missing_runs(claim, at_22k, ("LLOME-MargE",)) or missing_runs(
        claim, at_end, ("LLOME-MargE",)
    ):
        return verdict
    v22, vend = seed_values(at_22k["LLOME-MargE"]), seed_values(at_end["LLOME-MargE"])
    if len(v22) != len(vend):
        return Verdict(claim, "not comparable", "not the same runs at 22K and at the end")
    m22, mend = median_of(v22), median_of(vend)
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
        f"p below a level {fmt_p(p_flat)}, p of a drop {fmt_p(p_drop)}, n = {n}"
    )
    if flat and p_flat < ALPHA:
        return Verdict(claim, "agree", why, test, str(n), p_flat)
    if not flat and p_drop < ALPHA and sum(d) > 0:
        return Verdict(claim, "disagree", why, test, str(n), p_drop)
    floor = stats.smallest_p_sign_flip(n, "less")
    if floor >= ALPHA:
        why += f"; {n} runs cannot reach p < {ALPHA} (smallest p {fmt_p(floor)})"
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
    pairs = [compare_pair(p, ranges[p], "q", ranges["q"], None) for p in others]
    return lower_verdict(claim, pairs, "range of mean regret", "the strict order of the medians")


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
            PairTest(
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
    verdict = lower_verdict(
        claim,
        pairs,
        "hypervolume, stratified by function",
        "the strict order of the means over functions",
    )
    hv = "mean hypervolume " + ", ".join(f"{m} {v:.3f}" for m, v in means.items())
    return verdict._replace(reason=f"{hv}; {verdict.reason}")
