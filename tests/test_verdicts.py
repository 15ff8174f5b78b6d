"""llome_jax.bench.verdicts: every claim function on hand-made data whose answer is agree,
disagree, not comparable and inconclusive, each asserting the exact verdict; and, for every rule,
a case on each side of each constant and each inequality (just inside and just outside a
tolerance, a band, a level, a quantile or a significance level), so that changing a constant or
flipping a comparison fails a test (issue 53; the mutations run and their results are listed in
the issue's report).

Exact p-values used below (llome_jax.stats): n vs n values perfectly separated give the
two-sided permutation p ``2 / C(2n, n)``: 3 vs 3 0.1, 3 vs 4 0.057, 4 vs 4 0.0286, 5 vs 5
0.0079; the one-sided TOST p of n vs n is half of that (3 vs 3: exactly 0.05). ``m`` same-sign
differences give the sign-flip p ``2 / 2^m`` two-sided, ``1 / 2^m`` one-sided."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llome_jax.bench import verdicts as vd
from llome_jax.bench.verdicts import SelectionRound, Verdict, generation, rules

P33, P34, P44, P55 = 0.1, 2 / 35, 2 / 70, 2 / 252
NAMES = {
    "GA": "GA",
    "MargE": "LLOME-MargE",
    "SFT": "LLOME-SFT",
    "DPO": "LLOME-DPO",
    "LaMBO": "LaMBO-2",
    "REINFORCE": "LLOME-REINFORCE",
}


def summary(**values: list[float]) -> dict[str, dict[str, list[float]]]:
    """A summary: each method's per-seed min regrets (short names)."""
    return {NAMES.get(m, m): {"values": list(v)} for m, v in values.items()}


def rep(value: float, n: int) -> list[float]:
    return [value] * n


def test_verdict_is_a_named_tuple_with_its_test() -> None:
    v = vd.solver_best("f2", "LLOME-MargE", summary(MargE=rep(0.5, 4), GA=rep(0.9, 4)), 4)
    assert isinstance(v, Verdict)
    assert v == (v.claim, v.verdict, v.reason, v.test, v.n, v.p, v.methods, v.beside)
    assert (v.methods, v.beside) == (("LLOME-MargE", "GA"), ())
    assert v.claim == "f2: LLOME-MargE performs the best"
    assert v.test == "exact two-sided permutation test on per-seed min regret (difference of means)"
    assert (v.verdict, v.n, v.p) == ("agree", "4 vs 4", pytest.approx(P44))
    assert "n = 4 vs 4, p = 0.0286" in v.reason
    assert vd.stated_test(v) == f"test: {v.test}; n = 4 vs 4; p = 0.0286"
    # five fields default: a verdict without a test
    bare = Verdict("c", "not comparable", "why")
    assert (bare.test, bare.n, bare.p, bare.methods, bare.beside) == ("", "", None, (), ())
    assert vd.stated_test(bare) == "test: none; n = n/a; p = n/a"


# ------------------------------------------------------------------------------------------
# The one-level rule, the pair's rule and test, the decisions over pairs
# ------------------------------------------------------------------------------------------
def test_one_level_is_the_smallest_step_of_one_motif_level() -> None:
    """f2 (c = 4, q = 4): from f = 0.75^3 * 0.5 (regret 0.789) one level of any motif moves f by
    at least f / q; enumerate every one-level neighbour."""
    assert vd.one_level(0.789, 4) == pytest.approx(0.211 / 4)
    assert vd.one_level(1.0, 4) == 0.0
    phi = [0.75, 0.75, 0.75, 0.5]
    f = math.prod(phi)
    steps = []
    for i in range(4):
        for delta in (-0.25, 0.25):
            if 0.0 <= phi[i] + delta <= 1.0:
                other = [*phi[:i], phi[i] + delta, *phi[i + 1 :]]
                steps.append(abs(math.prod(other) - f))
    assert min(steps) >= vd.one_level(1.0 - f, 4) - 1e-12
    # the old 0.1 tolerance admitted a one-level gap: 0.789 vs 0.859
    gap = 0.859 - 0.789
    assert vd.one_level(0.789, 4) < gap < 0.1


def test_within_level_boundaries() -> None:
    """Exactly one level (0.5 vs 0.625 on q = 4: 0.125, exact in binary) is apart; 0.12 is
    within the lower regret's level (0.125) though not the higher's (0.62: 0.095); at regret 1
    the level is 0: equal regrets only. Without levels only equal values are within."""
    assert rules.within_level(0.5, 0.625, 4) == (False, 0.125, 0.125)
    assert rules.within_level(0.625, 0.5, 4) == (False, 0.125, 0.125)
    assert rules.within_level(0.5, 0.62, 4)[0] is True
    assert rules.within_level(1.0, 1.0, 4)[0] and not rules.within_level(1.0, 0.999, 4)[0]
    assert rules.within_level(0.3, 0.3, None) == (True, 0.0, 0.0)
    assert not rules.within_level(0.3, 0.31, None)[0]


def pair(
    p: float = 0.01,
    shift: float = -0.2,
    a: float = 0.5,
    b: float = 0.7,
    level: float = 0.125,
    name: str = "b",
    floor: float = 0.0,
) -> rules.PairTest:
    """A crafted pair: centres ``a`` vs ``b``, the test's ``shift`` and ``p``."""
    return rules.PairTest("a", name, a, b, level, shift, p, "4 vs 4", floor, True)


@pytest.mark.parametrize(
    "p, a, b, shift, expected",
    [
        (0.0499, 0.5, 0.7, -0.2, "agree"),
        (vd.ALPHA, 0.5, 0.7, -0.2, "inconclusive"),  # p must be below alpha
        (0.0499, 0.5, 0.625, -0.2, "agree"),  # exactly a level below
        (0.0499, 0.5, 0.62, -0.2, "inconclusive"),  # within the level: a tie
        (0.0499, 0.5, 0.7, 0.0, "inconclusive"),  # no difference of means
        (0.0499, 0.5, 0.7, 0.2, "inconclusive"),  # medians lower, means higher
        (0.0499, 0.7, 0.5, 0.2, "disagree"),
        (vd.ALPHA, 0.7, 0.5, 0.2, "inconclusive"),
        (0.0499, 0.62, 0.5, 0.2, "inconclusive"),  # within the (lower regret's) level
        (0.0499, 0.625, 0.5, 0.2, "disagree"),
        (0.0499, 0.7, 0.5, -0.2, "inconclusive"),  # medians higher, means lower
    ],
)
def test_one_pair_needs_the_rule_and_the_test(p, a, b, shift, expected) -> None:
    v = rules.lower_verdict("c", [pair(p, shift, a, b)], "min regret", "the rule")
    assert v.verdict == expected and v.p == p


def test_pairs_agree_together_and_disagree_with_bonferroni() -> None:
    """Agree: every pair (each at alpha); disagree: one pair at alpha / pairs."""
    good = pair(0.01, name="GA")
    assert rules.lower_verdict("c", [good, pair(0.03)], "q", "r").verdict == "agree"
    v = rules.lower_verdict("c", [good, pair(0.04, a=0.5, b=0.55)], "q", "r")  # one within a level
    assert v.verdict == "inconclusive" and "point to a tie" in v.reason
    # the reported p of an agree is the largest (the intersection-union test's p)
    v = rules.lower_verdict("c", [good, pair(0.03)], "q", "r")
    assert v.p == 0.03
    # another method below: p 0.03 is not below 0.05 / 2, p 0.02 is; 0.025 exactly is not
    against = [good, pair(0.03, shift=0.2, a=0.7, b=0.5)]
    v = rules.lower_verdict("c", against, "q", "r")
    assert v.verdict == "inconclusive" and "point to disagree" in v.reason and v.p == 0.03
    assert "disagree needs p < 0.025 (Bonferroni over 2 pairs)" in v.reason
    against[1] = pair(0.025, shift=0.2, a=0.7, b=0.5)
    assert rules.lower_verdict("c", against, "q", "r").verdict == "inconclusive"
    against[1] = pair(0.02, shift=0.2, a=0.7, b=0.5)
    v = rules.lower_verdict("c", against, "q", "r")
    assert v.verdict == "disagree" and v.p == 0.02
    # agree at a stricter level when asked (a choice among several)
    assert rules.lower_verdict("c", [pair(0.02)], "q", "r", alpha_agree=0.025).verdict == "agree"
    v = rules.lower_verdict("c", [pair(0.025)], "q", "r", alpha_agree=0.025)
    assert v.verdict == "inconclusive" and "agree needs p < 0.025 per pair" in v.reason


def test_one_pair_or_item_has_no_bonferroni_note() -> None:
    v = rules.lower_verdict("c", [pair(0.03, shift=0.2, a=0.7, b=0.5)], "q", "r")
    assert v.verdict == "disagree" and "Bonferroni" not in v.reason
    v = rules.near_verdict("c", [("", near(False, 0.5, p=0.03, shift=-0.2))], "q", "r")
    assert v.verdict == "disagree" and "Bonferroni" not in v.reason


def test_too_few_seeds_say_the_smallest_p() -> None:
    v = rules.lower_verdict("c", [pair(0.1, floor=0.1)], "q", "r")
    assert "4 vs 4 cannot reach p < 0.05 (smallest p 0.1)" in v.reason
    v = rules.lower_verdict(
        "c", [pair(0.1, floor=vd.ALPHA)], "q", "r"
    )  # 0.05 itself is not reachable
    assert "cannot reach p < 0.05 (smallest p 0.05)" in v.reason
    v = rules.lower_verdict("c", [pair(0.1, floor=0.0499)], "q", "r")
    assert "cannot reach" not in v.reason


def near(within: bool, p_near: float, p: float = 0.01, shift: float = 0.2, a=0.5, b=0.7):
    return rules.NearTest(pair(p, shift, a, b, level=0.0), within, 0.1, p_near, 0.0)


@pytest.mark.parametrize(
    "item, expected",
    [
        (near(True, 0.0499), "agree"),
        (near(True, vd.ALPHA), "inconclusive"),  # TOST p must be below alpha
        (near(False, 0.0499, p=0.0499, shift=-0.2), "disagree"),  # a below b, by both
        (near(False, 0.0499, p=vd.ALPHA, shift=-0.2), "inconclusive"),
        (near(False, 0.0499, p=0.0499, shift=0.2), "inconclusive"),  # means the other way
        (near(False, 0.0499, p=0.0499, shift=0.2, a=0.7, b=0.5), "disagree"),
    ],
)
def test_likeness_needs_the_rule_and_tost(item, expected) -> None:
    assert rules.near_verdict("c", [("", item)], "q", "r").verdict == expected


def test_likeness_disagrees_with_bonferroni() -> None:
    apart = near(False, 0.5, p=0.03, shift=-0.2)
    v = rules.near_verdict("c", [("", apart), ("", near(True, 0.01))], "q", "r")
    assert v.verdict == "inconclusive" and "Bonferroni over 2" in v.reason
    apart = near(False, 0.5, p=0.02, shift=-0.2)
    assert rules.near_verdict("c", [("", apart), ("", near(True, 0.01))], "q", "r").verdict == (
        "disagree"
    )


def test_majority_is_the_exact_binomial_tail() -> None:
    assert rules.majority(8, 9) == (pytest.approx(10 / 512), pytest.approx(1 - 1 / 512))
    assert rules.majority(0, 0) == (1.0, 1.0)
    assert rules.majority(3, 3) == (pytest.approx(1 / 8), 1.0)


# ------------------------------------------------------------------------------------------
# Fig. 1
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "data, expected",
    [
        (summary(GA=rep(0.0, 4), MargE=rep(0.05, 4)), "agree"),
        (summary(GA=rep(0.0, 4), MargE=rep(0.09, 4)), "agree"),  # inside 0.1 by TOST
        # exactly 0.1: within by the rule, but TOST cannot show the means inside +-0.1
        (summary(GA=rep(0.0, 4), MargE=rep(0.1, 4)), "inconclusive"),
        (summary(GA=rep(0.0, 4), MargE=rep(0.11, 4)), "disagree"),
        (summary(GA=rep(0.234, 4), MargE=rep(0.0, 4)), "disagree"),
        # three methods: three pairs, disagree needs p < 0.05 / 3 (4 vs 4: 0.029; 5 vs 5: 0.008)
        (summary(GA=rep(0.0, 4), MargE=rep(0.5, 4), SFT=rep(0.0, 4)), "inconclusive"),
        (summary(GA=rep(0.0, 5), MargE=rep(0.5, 5), SFT=rep(0.0, 5)), "disagree"),
        (summary(GA=rep(0.0, 3), MargE=rep(0.0, 3)), "inconclusive"),  # TOST p 0.05 at best
        (summary(GA=[0.234], MargE=[0.0]), "inconclusive"),
        (summary(GA=rep(0.5, 3)), "not comparable"),
    ],
)
def test_solver_all_comparable(data, expected) -> None:
    assert vd.solver_all_comparable("f1", data).verdict == expected


def test_solver_all_comparable_states_tost() -> None:
    v = vd.solver_all_comparable("f1", summary(GA=rep(0.0, 3), MargE=rep(0.0, 3)))
    assert "3 vs 3 cannot reach a TOST p < 0.05 (smallest 0.05)" in v.reason
    assert v.p == pytest.approx(0.05) and v.n == "3 vs 3" and "TOST" in v.test
    v = vd.solver_all_comparable("f1", summary(GA=rep(0.0, 4), MargE=rep(0.05, 4)))
    assert v.p == pytest.approx(1 / 70)


@pytest.mark.parametrize(
    "data, expected, why",
    [
        (
            summary(MargE=rep(0.5, 4), LaMBO=rep(0.7, 4), GA=rep(0.9, 4)),
            "agree",
            "LLOME-MargE 0.500 vs LaMBO-2 0.700 (a level 0.125): LLOME-MargE lower by 0.200 "
            "(1.6 levels), n = 4 vs 4, p = 0.0286",
        ),
        # exactly one level below is a difference; 0.12 below is within it (a tie)
        (summary(MargE=rep(0.5, 4), LaMBO=rep(0.625, 4)), "agree", "a level 0.125"),
        (summary(MargE=rep(0.5, 4), LaMBO=rep(0.62, 4)), "inconclusive", "a tie (within"),
        # 3 vs 4 reaches p 0.057 at best: not below 0.05
        (summary(MargE=rep(0.5, 3), LaMBO=rep(0.7, 4)), "inconclusive", "p = 0.0571"),
        # the cpu report's f2: MargE 0.789 behind LaMBO-2's 0.684 on 3 seeds each
        (
            summary(MargE=rep(0.789, 3), LaMBO=rep(0.684, 3), SFT=rep(0.789, 3)),
            "inconclusive",
            "3 vs 3 cannot reach p < 0.05 (smallest p 0.1)",
        ),
        (summary(MargE=rep(0.789, 5), LaMBO=rep(0.684, 5)), "disagree", "p = 0.00794"),
        # two others: disagree needs p < 0.025; 4 vs 4 gives 0.029, 5 vs 5 0.008
        (
            summary(MargE=rep(0.7, 4), LaMBO=rep(0.5, 4), GA=rep(0.9, 4)),
            "inconclusive",
            "point to disagree",
        ),
        (
            summary(MargE=rep(0.7, 5), LaMBO=rep(0.5, 5), GA=rep(0.9, 5)),
            "disagree",
            "vs LaMBO-2 0.500",
        ),
        (summary(MargE=rep(0.789, 4), SFT=rep(0.789, 4)), "inconclusive", "a tie"),
        (summary(MargE=[0.5], GA=[0.9]), "inconclusive", "point to agree"),
        (summary(GA=rep(0.5, 4), LaMBO=rep(0.4, 4)), "not comparable", "no finished run of"),
        (summary(MargE=rep(0.5, 4)), "not comparable", "no other method"),
    ],
)
def test_solver_best(data, expected, why) -> None:
    v = vd.solver_best("f2", "LLOME-MargE", data, 4)
    assert v.verdict == expected and why in v.reason, v.reason


def test_solver_best_reports_the_largest_p_of_an_agree() -> None:
    v = vd.solver_best("f2", "LLOME-MargE", summary(MargE=rep(0.5, 5), GA=rep(0.9, 5)), 4)
    assert v.p == pytest.approx(P55)
    data = {**summary(MargE=rep(0.5, 5), GA=rep(0.9, 5)), "LaMBO-2": {"values": rep(0.9, 4)}}
    v = vd.solver_best("f2", "LLOME-MargE", data, 4)
    assert v.verdict == "agree" and v.p == pytest.approx(2 / 126) and v.n == "5 vs 4"


@pytest.mark.parametrize(
    "data, expected",
    [
        (summary(MargE=rep(0.6, 4), LaMBO=rep(0.5, 4), SFT=rep(0.8, 4), GA=rep(0.9, 4)), "agree"),
        # LaMBO-2 within a level of the SFT (0.75 vs 0.8): a tie for one of the four pairs
        (summary(MargE=rep(0.5, 4), LaMBO=rep(0.75, 4), SFT=rep(0.8, 4)), "inconclusive"),
        (summary(MargE=rep(0.789, 5), LaMBO=rep(0.684, 5), SFT=rep(0.5, 5)), "disagree"),
        (summary(MargE=rep(0.789, 4), LaMBO=rep(0.684, 4), SFT=rep(0.5, 4)), "inconclusive"),
        (summary(MargE=rep(0.6, 3), LaMBO=rep(0.5, 3), SFT=rep(0.8, 3)), "inconclusive"),
        (summary(MargE=rep(0.6, 4), SFT=rep(0.7, 4)), "not comparable"),
        (summary(MargE=rep(0.6, 4), LaMBO=rep(0.5, 4)), "not comparable"),
    ],
)
def test_solver_medium_pair_outperforms(data, expected) -> None:
    assert vd.solver_medium_pair_outperforms("f2", data, 4).verdict == expected


# ------------------------------------------------------------------------------------------
# Fig. 2
# ------------------------------------------------------------------------------------------
LIKE = {
    "GA": [0.3, 0.35, 0.32, 0.31],
    "LLOME-MargE": [0.4, 0.36, 0.38, 0.37],
    "LaMBO-2": [0.9, 0.95, 0.94, 0.93],
}


@pytest.mark.parametrize(
    "rates, expected",
    [
        (LIKE, "agree"),
        ({k: v[:3] for k, v in LIKE.items()}, "inconclusive"),  # 3 runs: p 0.1 at best
        ({**LIKE, "LaMBO-2": [0.2, 0.25, 0.3, 0.22]}, "inconclusive"),  # 0.029 > 0.05 / 2
        (
            {"GA": [0.3] * 5, "LLOME-MargE": [0.4] * 5, "LaMBO-2": [0.2] * 5},
            "disagree",
        ),
        ({**LIKE, "GA": [0.9, 0.95, 0.94, 0.93]}, "inconclusive"),  # a tie at the top
        ({**LIKE, "LaMBO-2": [0.9]}, "inconclusive"),  # one run
        # the GA's uniqueness over its de-duplicated archive (1.0 by construction): unlike
        ({**LIKE, "GA": [None, None, None]}, "not comparable"),
        ({"GA": [0.3, 0.3, 0.3]}, "not comparable"),
        ({"GA": [0.3, 0.3, 0.3], "LaMBO-2": []}, "not comparable"),
    ],
)
def test_diversity_lambo2_most_unique(rates, expected) -> None:
    assert vd.diversity_lambo2_most_unique(rates).verdict == expected


@pytest.mark.parametrize(
    "rates, expected",
    [
        ({"GA": [0.8] * 4, "LLOME-SFT": [0.5] * 4, "LaMBO-2": [0.9] * 4}, "agree"),
        ({"GA": [0.86] * 5, "LLOME-SFT": [0.5] * 5, "LaMBO-2": [0.66] * 5}, "disagree"),
        ({"GA": [0.8] * 2, "LLOME-SFT": [0.5] * 4, "LaMBO-2": [0.9] * 4}, "inconclusive"),
        # LLOME's feasibility after the Filter's cap is not measured like the others'
        ({"GA": [0.8] * 3, "LLOME-SFT": [None] * 3, "LaMBO-2": [0.9] * 3}, "not comparable"),
    ],
)
def test_diversity_lambo2_most_feasible(rates, expected) -> None:
    v = vd.diversity_lambo2_most_feasible(rates)
    assert v.verdict == expected
    if expected != "not comparable":
        assert v.test.startswith("exact two-sided permutation test on per-seed run mean of")


#: medians equal (0.4), means apart: 11 vs 11 (sampled test, p 0.035) -- ties are no order
SAME_MEDIAN = [0.4] * 6 + [0.9] * 5


@pytest.mark.parametrize(
    "rates, expected",
    [
        (LIKE, "agree"),
        ({**LIKE, "LLOME-MargE": [0.1, 0.2, 0.1, 0.15]}, "disagree"),
        ({**LIKE, "LLOME-MargE": [0.3, 0.35, 0.32, 0.31]}, "inconclusive"),
        ({"LLOME-MargE": [0.4] * 3, "LaMBO-2": [0.9] * 3}, "not comparable"),
        ({**LIKE, "GA": [1.0, None, 1.0]}, "not comparable"),
        # equal medians: no order, whichever way the means go
        ({"GA": [0.4] * 11, "LLOME-MargE": SAME_MEDIAN}, "inconclusive"),
        ({"GA": SAME_MEDIAN, "LLOME-MargE": [0.4] * 11}, "inconclusive"),
    ],
)
def test_diversity_more_unique_than_ga(rates, expected) -> None:
    v = vd.diversity_more_unique_than_ga("LLOME-MargE", rates)
    assert v.verdict == expected
    assert v.claim == "LLOME-MargE generates more unique sequences than the GA"


def test_same_median_means_do_differ() -> None:
    """The SAME_MEDIAN case is a real difference of means (so only the rule keeps it a tie)."""
    assert rules.compare_pair("a", [0.4] * 11, "b", SAME_MEDIAN, None).p < vd.ALPHA
    assert not rules.stats.is_exact((11, 11))


def _dpo(first: float, last: float) -> list[float]:
    return [first, 0.5 * (first + last), last]


@pytest.mark.parametrize(
    "unique, feasible, expected",
    [
        # diversity falls, feasibility +0.02 over 5 runs: p 1/32 below 0.05 for both
        ([_dpo(0.1, 0.01)] * 5, [_dpo(0.5, 0.52)] * 5, "agree"),
        ([_dpo(0.1, 0.01)] * 4, [_dpo(0.5, 0.52)] * 4, "inconclusive"),  # p 1/16
        ([_dpo(0.1, 0.01)] * 5, [_dpo(0.5, 0.7)] * 5, "inconclusive"),  # 2/32 > 0.05 / 2
        ([_dpo(0.1, 0.01)] * 7, [_dpo(0.5, 0.7)] * 7, "disagree"),  # 2/128
        ([_dpo(0.1, 0.01)] * 6, [_dpo(0.5, 0.7)] * 6, "inconclusive"),  # 2/64 > 0.025
        ([[0.1, 0.3]] * 7, [[0.5, 0.5]] * 7, "disagree"),  # diversity +0.2
        # +0.045: below IMPROVEMENT_MIN; +0.055: above it
        ([[0.0, 0.045]] * 7, [[0.5, 0.5]] * 7, "agree"),
        ([[0.0, 0.055]] * 7, [[0.5, 0.5]] * 7, "disagree"),
        # exactly IMPROVEMENT_MIN (0.05 - 0.0 is exact) is an improvement
        ([[0.0, 0.05]] * 7, [[0.5, 0.5]] * 7, "disagree"),
        # median change exactly 0.05 (six runs) with five runs falling 0.95: no improvement by
        # the means, none below 0.05 by the medians: neither side decides
        ([[0.0, 0.05]] * 6 + [[1.0, 0.05]] * 5, [[0.5, 0.4]] * 11, "inconclusive"),
        ([[0.1, 0.02]] * 2 + [[0.1]], [[0.5, 0.5]] * 2 + [[0.5]], "inconclusive"),
        ([[0.1]] * 3, [[0.5]] * 3, "not comparable"),  # DPO collapsed after one round
        ([[0.1, 0.02]] * 3, [[None, None]] * 3, "not comparable"),
    ],
)
def test_diversity_dpo_does_not_improve(unique, feasible, expected) -> None:
    v = vd.diversity_dpo_does_not_improve(unique, feasible)
    assert v.verdict == expected, v.reason


def test_diversity_dpo_median_change_of_exactly_the_minimum_points_to_disagree() -> None:
    """A median change of exactly IMPROVEMENT_MIN is an improvement: the inconclusive verdict
    points to disagree and reports the p of a change, not that of 'below'."""
    unique, feasible = [[0.0, 0.05]] * 6 + [[1.0, 0.05]] * 5, [[0.5, 0.4]] * 11
    v = vd.diversity_dpo_does_not_improve(unique, feasible)
    assert v.verdict == "inconclusive" and "the numbers point to disagree" in v.reason
    assert v.p < 0.5


# ------------------------------------------------------------------------------------------
# Fig. 3
# ------------------------------------------------------------------------------------------
def _candidates(slope: float, n: int = 400, infeasible: int = 0, seed: int = 0):
    """``n`` feasible candidates whose value rises (slope > 0) or falls with the likelihood, and
    ``infeasible`` more (``-inf``) at the lowest likelihoods."""
    rng = np.random.default_rng(seed)
    lik = rng.uniform(0.05, 0.95, n)
    values = np.clip(0.5 + slope * (lik - 0.5) + rng.normal(0, 0.05, n), 0.0, 1.0)
    lik_bad = rng.uniform(0.0, 0.05, infeasible)
    return np.concatenate([lik, lik_bad]), np.concatenate([values, np.full(infeasible, -np.inf)])


def test_spearman_feasible_leaves_infeasible_candidates_out() -> None:
    """Feasible candidates with no trend plus many infeasible ones at low likelihood: counted as
    regret 1 the infeasible ones alone would make rho strongly negative."""
    lik, values = _candidates(0.0, n=300, infeasible=300)
    rho, n = vd.spearman_feasible(lik, values)
    assert n == 300 and abs(rho) < 0.15
    pooled = np.where(np.isfinite(values), 1.0 - values, 1.0)
    from scipy.stats import spearmanr

    assert spearmanr(lik, pooled).statistic < -0.5
    assert vd.calibration_higher_likelihood_lower_regret("m", lik, values).verdict == "inconclusive"


def test_spearman_feasible_needs_three_candidates() -> None:
    """Three feasible candidates give a rho (regret falls as the likelihood rises: -1), two
    give NaN."""
    lik, values = np.array([0.1, 0.2, 0.3]), np.array([0.1, 0.5, 0.9])
    assert vd.spearman_feasible(lik, values) == (-1.0, 3)
    rho, n = vd.spearman_feasible(lik[:2], values[:2])
    assert np.isnan(rho) and n == 2


def test_spearman_feasible_above_is_strict() -> None:
    """Likelihood exactly 0.7 is not above 0.7."""
    lik = np.array([0.7, 0.75, 0.8, 0.9])
    assert vd.spearman_feasible(lik, np.array([0.1, 0.2, 0.3, 0.5]), above=0.7)[1] == 3


@pytest.mark.parametrize(
    "data, expected",
    [
        (_candidates(0.8, infeasible=50), "agree"),
        (_candidates(-0.8, infeasible=50), "disagree"),
        (_candidates(0.0, seed=3), "inconclusive"),
        ((np.array([0.5, 0.6]), np.array([-np.inf, -np.inf])), "not comparable"),
        ((None, None), "not comparable"),
    ],
)
def test_calibration_higher_likelihood_lower_regret(data, expected) -> None:
    lik, values = data
    v = vd.calibration_higher_likelihood_lower_regret("LLOME-SFT", lik, values)
    assert v.verdict == expected
    if expected != "not comparable":
        assert v.test.startswith("Spearman rho") and v.n == "400"


def _patched_rho(monkeypatch, rho: float, n: int) -> None:
    monkeypatch.setattr(generation, "spearman_feasible", lambda lik, val, above=None: (rho, n))


# n = 5: the band is 1.96 / 2 = 0.98 (exact: halving is exact in binary)
BAND_CASES = [(-0.99, "agree"), (-0.98, "inconclusive"), (-0.9, "inconclusive")]
BAND_CASES += [(0.9, "inconclusive"), (0.98, "inconclusive"), (0.99, "disagree")]


@pytest.mark.parametrize("rho, expected", BAND_CASES)
def test_calibration_band_edges(monkeypatch, rho, expected) -> None:
    _patched_rho(monkeypatch, rho, 5)
    lik = np.ones(5)
    v = vd.calibration_higher_likelihood_lower_regret("m", lik, lik)
    assert v.verdict == expected
    assert v.p == pytest.approx(math.erfc(abs(rho) * 2 / math.sqrt(2)))


@pytest.mark.parametrize("rho, expected", BAND_CASES)
def test_overconfidence_band_edges(monkeypatch, rho, expected) -> None:
    _patched_rho(monkeypatch, -rho, 5)
    lik = np.ones(5)
    assert vd.calibration_overconfident("m", lik, lik).verdict == expected


def _overconfident(sign: float, n: int = 400):
    """Calibrated below 0.7; above it the value falls (sign = -1) or keeps rising (+1)."""
    rng = np.random.default_rng(1)
    lik = rng.uniform(0.3, 0.95, n)
    values = np.where(lik <= 0.7, lik - 0.3, 0.4 + sign * (lik - 0.7))
    return lik, values + rng.normal(0, 0.01, n)


@pytest.mark.parametrize(
    "data, expected",
    [
        (_overconfident(-1.0), "agree"),
        (_overconfident(+1.0), "disagree"),
        (_overconfident(0.0), "inconclusive"),
        # no feasible candidate above 0.7: the paper's regime is never reached
        ((np.array([0.2, 0.6, 0.9]), np.array([0.1, 0.2, -np.inf])), "not comparable"),
        # feasible candidates in (0.6, 0.7] only, or in (0.7, 0.8] only
        ((np.array([0.61, 0.65, 0.7]), np.array([0.1, 0.2, 0.3])), "not comparable"),
        ((np.array([0.71, 0.75, 0.8]), np.array([0.1, 0.2, 0.3])), "inconclusive"),
        ((None, None), "not comparable"),
    ],
)
def test_calibration_overconfident(data, expected) -> None:
    lik, values = data
    assert vd.calibration_overconfident("LLOME-MargE", lik, values).verdict == expected


def test_overconfidence_is_not_the_pooled_calibration() -> None:
    """One data set, two claims: higher likelihood means lower regret overall (agree) while
    above 0.7 it means higher regret (overconfidence: agree); both halves are tested."""
    lik, values = _overconfident(-1.0)
    assert vd.calibration_higher_likelihood_lower_regret("m", lik, values).verdict == "agree"
    assert vd.calibration_overconfident("m", lik, values).verdict == "agree"


# ------------------------------------------------------------------------------------------
# Fig. 4
# ------------------------------------------------------------------------------------------
FIRST, LAST = "LLOME-SFT1-MargE9", "LLOME-SFT10-MargE0"


@pytest.mark.parametrize(
    "finals, expected",
    [
        ({FIRST: [0.0, 0.2, 0.1], LAST: [0.3] * 3, "LLOME-SFT5-MargE5": [0.4] * 3}, "agree"),
        ({FIRST: [0.0, 0.2, 0.1], LAST: [0.0, 0.3, 0.3]}, "disagree"),  # another solves
        ({FIRST: [0.789] * 3, LAST: [0.789] * 3}, "disagree"),  # nobody finds the optimum
        ({FIRST: [0.0, 0.2], LAST: [0.3] * 3}, "inconclusive"),  # 2 seeds: below MIN_SEEDS
        ({FIRST: [0.0], LAST: [0.3] * 3}, "inconclusive"),
        # the tolerance of the optimum: 1e-9 is regret 0, 5e-9 is not, 5e-10 is
        ({FIRST: [1e-9, 0.2, 0.1], LAST: [0.3] * 3}, "agree"),
        ({FIRST: [5e-10, 0.2, 0.1], LAST: [0.3] * 3}, "agree"),
        ({FIRST: [5e-9, 0.2, 0.1], LAST: [0.3] * 3}, "disagree"),
        ({FIRST: [0.0, 0.2, 0.1], LAST: [5e-9, 0.3, 0.3]}, "agree"),
        ({LAST: [0.3] * 3}, "not comparable"),
    ],
)
def test_sft_marge_sole_optimum(finals, expected) -> None:
    v = vd.sft_marge_sole_optimum(FIRST, finals)
    assert v.verdict == expected
    if expected != "not comparable":
        assert v.test.startswith("no test") and v.p is None


@pytest.mark.parametrize(
    "rho, expected",
    [
        ({FIRST: (-0.6, 10_000), LAST: (-0.5, 10_000)}, "agree"),
        ({FIRST: (-0.5, 10_000), LAST: (-0.6, 10_000)}, "disagree"),
        ({FIRST: (-0.55, 300), LAST: (-0.56, 300)}, "inconclusive"),
        # n = 3 each: the noise is exactly 1.96 (sqrt(1/2 + 1/2) = 1); -0.98 vs 0.98 is on it
        ({FIRST: (-0.98, 3), LAST: (0.98, 3)}, "inconclusive"),
        ({FIRST: (-0.99, 3), LAST: (0.98, 3)}, "agree"),
        ({FIRST: (0.98, 3), LAST: (-0.98, 3)}, "inconclusive"),
        ({FIRST: (0.99, 3), LAST: (-0.98, 3)}, "disagree"),
        # n = 101 each: noise 1.96 sqrt(0.02) = 0.277 (without the sqrt it would be 0.039)
        ({FIRST: (-0.7, 101), LAST: (-0.5, 101)}, "inconclusive"),
        ({FIRST: (-0.8, 101), LAST: (-0.5, 101)}, "agree"),
        ({FIRST: (-0.5, 101), LAST: (-0.75, 101)}, "inconclusive"),
        ({FIRST: (-0.5, 101), LAST: (-0.8, 101)}, "disagree"),
        # the lowest other rho is the one compared
        ({FIRST: (-0.8, 101), LAST: (-0.5, 101), "x": (-0.7, 101)}, "inconclusive"),
        # the cpu report's table: no rho for SFT1-MargE9 (its candidate log was not found)
        ({FIRST: (float("nan"), 0), LAST: (-0.5, 300)}, "not comparable"),
        ({FIRST: (-0.5, 300)}, "not comparable"),
    ],
)
def test_sft_marge_best_calibration(rho, expected) -> None:
    assert vd.sft_marge_best_calibration(FIRST, rho).verdict == expected


def test_sft_marge_best_calibration_states_its_p() -> None:
    v = vd.sft_marge_best_calibration(FIRST, {FIRST: (-0.98, 3), LAST: (0.98, 3)})
    assert v.n == "3 vs 3" and v.p == pytest.approx(math.erfc(1.96 / math.sqrt(2)))


MIDDLE = ("LLOME-SFT3-MargE7", "LLOME-SFT5-MargE5", "LLOME-SFT7-MargE3")


def _pipelines(first: float, last: float, middle: float, n: int, middles: int = 3):
    data = {FIRST: rep(first, n), LAST: rep(last, n)}
    data.update({m: rep(0.6, n) for m in MIDDLE[: middles - 1]})
    data[MIDDLE[middles - 1]] = rep(middle, n)
    return {p: {"values": v} for p, v in data.items()}


@pytest.mark.parametrize(
    "data, expected",
    [
        # three intermediates: agree needs p < 0.05 / 3 per endpoint (5 vs 5: 0.008)
        (_pipelines(0.5, 0.6, 0.8, 5), "agree"),
        (_pipelines(0.5, 0.6, 0.8, 4), "inconclusive"),  # 0.029 > 0.017
        (_pipelines(0.5, 0.6, 0.8, 4, middles=1), "agree"),  # one intermediate: 0.05
        (_pipelines(0.5, 0.9, 0.8, 5), "disagree"),  # an endpoint is worse
        (_pipelines(0.5, 0.9, 0.8, 4), "inconclusive"),  # 0.029 > 0.05 / 2
        (_pipelines(0.5, 0.75, 0.8, 5), "inconclusive"),  # within a level of the last
        (_pipelines(0.789, 0.789, 0.789, 5), "inconclusive"),
        (_pipelines(0.5, 0.6, 0.8, 3), "inconclusive"),
        ({FIRST: {"values": [0.5]}, LAST: {"values": [0.6]}}, "not comparable"),
    ],
)
def test_sft_marge_intermediate_worst(data, expected) -> None:
    assert vd.sft_marge_intermediate_worst(data, FIRST, LAST, 4).verdict == expected


# ------------------------------------------------------------------------------------------
# Fig. 5
# ------------------------------------------------------------------------------------------
FLAT_EARLY = [0.97, 0.9, 0.86, 0.86, 0.86, 0.86, 0.86, 0.86, 0.86, 0.86, 0.86]  # last gain: 2
LATE = [0.97, 0.97, 0.97, 0.97, 0.97, 0.97, 0.97, 0.97, 0.9, 0.86, 0.79]  # improves to round 10
SOLVED = [0.97, 0.9, 0.0]
UNTRAINED = [0.97]  # stopped after round 0


def _gain_at(k: int, rounds: int = 10, end: float = 0.86) -> list[float]:
    """A run whose last improvement is at round ``k`` (then flat)."""
    return [0.97] * k + [end] * (rounds + 1 - k)


@pytest.mark.parametrize(
    "runs, expected",
    [
        ([FLAT_EARLY] * 6, "agree"),  # 6 decreases: two-sided p 2/64
        ([FLAT_EARLY] * 5, "inconclusive"),  # 2/32 > 0.05
        ([[0.97, 0.97, 0.97]] * 5, "disagree"),  # 5 runs flat: below a level, p 1/32
        ([[0.97, 0.97, 0.97]] * 4, "inconclusive"),
        ([[0.97, 0.97]] * 5, "disagree"),  # two rounds are a trained run
        # median decrease 0 but seven runs decrease: by the test, not by the rule
        ([[0.97, 0.97]] * 8 + [[0.97, 0.87]] * 7, "inconclusive"),
        # median decrease exactly one level (0.125 at regret 0.5, q = 4): not below it
        ([[0.5, 0.375]] * 6 + [[0.5, 0.7]] * 5, "inconclusive"),
        ([[0.5, 0.4]] * 6 + [[0.5, 0.7]] * 5, "disagree"),  # 0.1 below the level
        ([FLAT_EARLY], "inconclusive"),
        ([UNTRAINED] * 3, "not comparable"),
    ],
)
def test_reinforce_decreases_regret(runs, expected) -> None:
    v = vd.reinforce_decreases_regret(runs, 4)
    assert v.verdict == expected, v.reason


def test_reinforce_decreases_regret_with_no_median_decrease_points_to_disagree() -> None:
    """Median decrease exactly 0 (8 flat runs, 7 falling): inconclusive, pointing to disagree,
    with the p of 'below a level' (not that of a decrease)."""
    v = vd.reinforce_decreases_regret([[0.97, 0.97]] * 8 + [[0.97, 0.87]] * 7, 4)
    assert v.verdict == "inconclusive" and "the numbers point to disagree" in v.reason
    assert f"p below a level {rules.fmt_p(v.p)}" in v.reason
    assert f"p of a decrease {rules.fmt_p(v.p)}" not in v.reason


def test_reinforce_decreases_regret_states_the_floor() -> None:
    v = vd.reinforce_decreases_regret([FLAT_EARLY] * 5, 4)
    assert "5 runs cannot reach p < 0.05 two-sided (smallest p 0.0625)" in v.reason
    assert v.p == pytest.approx(2 / 32) and v.n == "5"


@pytest.mark.parametrize(
    "runs, expected",
    [
        ([FLAT_EARLY] * 5, "agree"),  # 5 of 5 plateau: sign test p 1/32
        ([FLAT_EARLY] * 4, "inconclusive"),  # 1/16
        ([LATE] * 5, "disagree"),
        ([FLAT_EARLY, FLAT_EARLY, LATE], "inconclusive"),
        ([SOLVED] * 5, "disagree"),  # reaching the optimum is no plateau
        # the last gain at round 5 of 10 is early (at most half), at round 6 it is not
        ([_gain_at(5)] * 5, "agree"),
        ([_gain_at(6)] * 5, "disagree"),
        ([_gain_at(4)] * 5, "agree"),
        # a run at regret 1e-9 reached the optimum (no plateau); at 2e-9 it did not
        ([_gain_at(2, end=1e-9)] * 5, "disagree"),
        ([_gain_at(2, end=2e-9)] * 5, "agree"),
        ([FLAT_EARLY], "inconclusive"),
        ([UNTRAINED] * 3, "not comparable"),
    ],
)
def test_reinforce_plateaus_early(runs, expected) -> None:
    assert vd.reinforce_plateaus_early(runs, rounds=10).verdict == expected


@pytest.mark.parametrize(
    "runs, expected",
    [
        ([FLAT_EARLY, LATE, FLAT_EARLY], "agree"),
        ([[0.97, 0.9]] * 3, "agree"),  # two rounds are a trained run
        ([SOLVED], "disagree"),  # one counterexample suffices
        ([[0.97, 1e-9]], "disagree"),
        ([FLAT_EARLY, LATE], "inconclusive"),  # below MIN_SEEDS runs
        ([UNTRAINED], "not comparable"),
    ],
)
def test_reinforce_never_optimal(runs, expected) -> None:
    assert vd.reinforce_never_optimal(runs).verdict == expected


@pytest.mark.parametrize(
    "data, expected",
    [
        (summary(MargE=rep(0.5, 4), REINFORCE=rep(0.79, 4), GA=rep(0.1, 4)), "agree"),
        (summary(MargE=rep(0.86, 4), REINFORCE=rep(0.5, 4)), "disagree"),
        (summary(MargE=rep(0.5, 3), REINFORCE=rep(0.79, 3)), "inconclusive"),
        (summary(MargE=rep(0.789, 4), REINFORCE=rep(0.789, 4)), "inconclusive"),
        (summary(MargE=rep(0.5, 4)), "not comparable"),
        (summary(REINFORCE=rep(0.5, 4)), "not comparable"),
    ],
)
def test_reinforce_marge_ends_lower(data, expected) -> None:
    assert vd.reinforce_marge_ends_lower(data, 4).verdict == expected


# ------------------------------------------------------------------------------------------
# Fig. 6
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "per_round, expected",
    [
        ([[0.9, 0.85, 0.8]] * 8 + [[0.8, 0.8, 0.8]], "agree"),  # 8 of 9 lower, p = 0.02
        ([[0.8, 0.8, 0.8]] * 8 + [[0.9, 0.85, 0.8]], "disagree"),  # ties count against
        # 10 of 13: p 0.046 (below 0.05); 8 of 10: p 0.055 (not)
        ([[0.9, 0.8]] * 10 + [[0.8, 0.8]] * 3, "agree"),
        ([[0.9, 0.8]] * 8 + [[0.8, 0.8]] * 2, "inconclusive"),
        ([[0.9, 0.8], [0.8, 0.8], [0.8, 0.9]], "inconclusive"),
        ([[0.9]] * 5, "not comparable"),
    ],
)
def test_refinement_reduces_regret(per_round, expected) -> None:
    v = vd.refinement_reduces_regret("LLOME-MargE", per_round)
    assert v.verdict == expected
    if expected != "not comparable":
        assert v.test == "one-sided sign test (binomial, 1/2)"


@pytest.mark.parametrize(
    "per_round, expected",
    [
        ([[0.9, 0.8, 0.8, 0.8]] * 6, "agree"),  # only the first step helps, 6 rounds: p = 0.016
        ([[0.9, 0.8, 0.8]] * 6, "agree"),  # three iterations: a first and a last step
        ([[0.9, 0.9, 0.9, 0.8]] * 6, "disagree"),
        ([[0.9, 0.8, 0.7, 0.6]] * 6, "inconclusive"),  # both help every time: no discordance
        ([[0.9, 0.8]] * 6, "not comparable"),  # two iterations: the first step is the last
    ],
)
def test_refinement_first_edits_help_most(per_round, expected) -> None:
    assert vd.refinement_first_edits_help_most("LLOME-SFT", per_round).verdict == expected


# ------------------------------------------------------------------------------------------
# Fig. 7
# ------------------------------------------------------------------------------------------
def _sel(miss: bool, better: bool = True, candidates: int = 5000, j: int = 2000):
    return SelectionRound(candidates, j, 0.86 if miss else 0.79, 0.79, 0.8 if better else 0.95, 0.9)


@pytest.mark.parametrize(
    "rounds, expected",
    [
        ([_sel(True)] * 4 + [_sel(False)] * 6, "agree"),  # 4 of 10
        ([_sel(True)] * 4 + [_sel(False)] * 8, "agree"),  # 4 of 12: exactly a third
        ([_sel(True)] * 3 + [_sel(False)] * 7, "disagree"),  # 0.3, below a third
        # the old rule's "at least once": 1 of 10 met it; "often" does not
        ([_sel(True)] + [_sel(False)] * 9, "disagree"),
        ([_sel(True)] * 4 + [_sel(False)] * 5, "inconclusive"),  # 9 rounds: below MIN_ROUNDS
        ([_sel(True)] * 3, "inconclusive"),
        # every candidate selected (j = candidates), or none: no choice, so no round counts
        ([_sel(False, candidates=2000)] * 10, "not comparable"),
        ([_sel(True, j=0)] * 10, "not comparable"),
        ([], "not comparable"),
    ],
)
def test_selection_misses_best_often(rounds, expected) -> None:
    v = vd.selection_misses_best_often("LLOME-MargE", rounds)
    assert v.verdict == expected
    if expected != "not comparable":
        assert v.test.startswith("no test") and v.n == str(len(rounds))


@pytest.mark.parametrize(
    "rounds, expected",
    [
        ([_sel(True, better=True)] * 10, "agree"),
        ([_sel(True, better=False)] * 10, "disagree"),
        # the selection's mean equal to all candidates' is not better
        ([SelectionRound(5000, 2000, 0.8, 0.79, 0.9, 0.9)] * 10, "disagree"),
        ([_sel(True, True), _sel(True, False)] * 3, "inconclusive"),
        ([_sel(True, candidates=2000)] * 10, "not comparable"),
    ],
)
def test_selection_high_scoring(rounds, expected) -> None:
    assert vd.selection_high_scoring("LLOME-MargE", rounds).verdict == expected


# ------------------------------------------------------------------------------------------
# Fig. 8
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "data, last_round, expected",
    [
        (summary(MargE=rep(0.5, 4), LaMBO=rep(0.9, 4)), {"LLOME-MargE": 10}, "agree"),
        (summary(MargE=rep(0.5, 4), LaMBO=rep(0.9, 4)), {"LLOME-MargE": 1}, "agree"),
        (summary(MargE=rep(0.9, 4), LaMBO=rep(0.5, 4)), {"LLOME-MargE": 10}, "disagree"),
        # q = 2: a level at regret 0.5 is 0.25; 0.7 is within it
        (summary(MargE=rep(0.5, 4), LaMBO=rep(0.7, 4)), {"LLOME-MargE": 10}, "inconclusive"),
        # the cpu report: MargE 1.000 > LaMBO-2 0.938, but every LLOME run stopped after round 0
        (summary(MargE=rep(1.0, 3), LaMBO=rep(0.938, 3)), {"LLOME-MargE": 0}, "not comparable"),
        (summary(MargE=rep(1.0, 4), LaMBO=rep(1.0, 4)), {"LLOME-MargE": 10}, "inconclusive"),
        # no round count for LLOME-MargE: its runs are not taken as untrained
        (summary(MargE=rep(0.5, 4), LaMBO=rep(0.9, 4)), {}, "agree"),
    ],
)
def test_half_quant_marge_best(data, last_round, expected) -> None:
    assert vd.half_quant_marge_best(data, last_round, 2).verdict == expected


# ------------------------------------------------------------------------------------------
# Fig. 9
# ------------------------------------------------------------------------------------------
def _points(marge: float, lambo: float, seeds: int = 4, last: int = vd.PAPER_22K_AFTER_ROUND0):
    return [
        (after, summary(MargE=rep(marge, seeds), LaMBO=rep(lambo, seeds)))
        for after in range(2000, last + 1, 2000)
    ]


def _one_point(marge: float, lambo: float, seeds: int = 4):
    return [(12_000, summary(MargE=rep(marge, seeds), LaMBO=rep(lambo, seeds)))]


@pytest.mark.parametrize(
    "points, budget, expected",
    [
        (_points(0.789, 0.789), 20_000, "agree"),
        (_points(0.789, 0.77), 20_000, "agree"),  # 0.019 < one level (0.053)
        (_one_point(0.5, 0.62), 20_000, "agree"),  # within the lower regret's level (0.125)
        (_one_point(0.5, 0.625), 20_000, "disagree"),  # exactly one level apart
        # one level apart at every budget: 0.1 called it comparable, a level does not; with six
        # budgets disagree needs p < 0.05 / 6 (5 vs 5: 0.008)
        (_points(0.789, 0.859, seeds=5), 20_000, "disagree"),
        (_points(0.789, 0.859), 20_000, "inconclusive"),
        (_points(0.789, 0.684, seeds=5), 20_000, "disagree"),
        (_points(0.789, 0.789, seeds=3), 20_000, "inconclusive"),  # TOST p 0.05 at best
        (_points(0.789, 0.789, seeds=1), 20_000, "inconclusive"),
        (_points(0.789, 0.789), 12_000, "agree"),  # the runs reach 12K after round 0
        (_points(0.789, 0.789), 11_999, "not comparable"),
        (_points(0.789, 0.789), 4_000, "not comparable"),  # smoke: the budget stops before 22K
    ],
)
def test_model_size_comparable(points, budget, expected) -> None:
    assert vd.model_size_comparable("LaMBO-2", points, 4, budget).verdict == expected


def test_model_size_comparable_to_pythia_is_not_comparable_without_its_runs() -> None:
    v = vd.model_size_comparable("LLOME-MargE (Pythia 2.8B)", _points(0.7, 0.7), 4, 20_000)
    assert v.verdict == "not comparable"


def _marge(*values: float):
    return summary(MargE=list(values))


@pytest.mark.parametrize(
    "at_22k, at_end, budget, expected",
    [
        (_marge(*rep(0.789, 5)), _marge(*rep(0.789, 5)), 20_000, "agree"),  # p 1/32
        (_marge(*rep(0.789, 5)), _marge(*rep(0.77, 5)), 20_000, "agree"),  # < one level
        (_marge(*rep(0.789, 4)), _marge(*rep(0.789, 4)), 20_000, "inconclusive"),  # 1/16
        (_marge(*rep(0.789, 6)), _marge(*rep(0.684, 6)), 20_000, "disagree"),  # 2/64
        (_marge(*rep(0.789, 5)), _marge(*rep(0.684, 5)), 20_000, "inconclusive"),  # 2/32
        # 0.5 -> 0.375 is exactly one level (0.125): not a plateau; 0.5 -> 0.38 is
        (_marge(*rep(0.5, 6)), _marge(*rep(0.375, 6)), 20_000, "disagree"),
        (_marge(*rep(0.5, 6)), _marge(*rep(0.38, 6)), 20_000, "agree"),
        (_marge(*rep(0.789, 5)), _marge(*rep(0.789, 5)), 13_000, "agree"),
        (_marge(*rep(0.789, 5)), _marge(*rep(0.789, 5)), 12_000, "not comparable"),
        (_marge(*rep(0.789, 5)), _marge(*rep(0.789, 4)), 20_000, "not comparable"),
        (summary(LaMBO=[0.789]), summary(LaMBO=[0.7]), 20_000, "not comparable"),
    ],
)
def test_model_size_plateaus(at_22k, at_end, budget, expected) -> None:
    assert vd.model_size_plateaus(at_22k, at_end, 4, budget).verdict == expected


# ------------------------------------------------------------------------------------------
# Fig. 10
# ------------------------------------------------------------------------------------------
RANGES = {"v": 0.55, "L": 0.14, "c": 0.22, "k": 0.21, "q": 0.82}


def _ranges(seeds: int = 4, **changed: float) -> dict[str, list[float]]:
    return {p: rep(r, seeds) for p, r in {**RANGES, **changed}.items()}


@pytest.mark.parametrize(
    "ranges, expected",
    [
        (_ranges(), "agree"),
        (_ranges(5, v=0.9), "disagree"),  # four others: 5 vs 5 p 0.008 < 0.0125
        (_ranges(4, v=0.9), "inconclusive"),  # 0.029 > 0.0125
        (_ranges(v=0.82), "inconclusive"),
        (_ranges(seeds=2), "inconclusive"),
        (_ranges(seeds=3), "inconclusive"),
        ({}, "not comparable"),
        ({"q": [0.8] * 4}, "not comparable"),
        ({p: r for p, r in _ranges().items() if p != "q"}, "not comparable"),
    ],
)
def test_ga_difficulty_q_strongest(ranges, expected) -> None:
    assert vd.ga_difficulty_q_strongest(ranges).verdict == expected


def _hv(variant, ga, lambo, function: str = "f2"):
    return {"LLOME-MargE": {function: variant}, "GA": {function: ga}, "LaMBO-2": {function: lambo}}


@pytest.mark.parametrize(
    "hv, expected",
    [
        (_hv(rep(15.0, 4), rep(16.6, 4), rep(16.0, 4)), "agree"),
        # issue 53's per-run areas: MargE (16.20, 16.21, 17.48) vs LaMBO-2 (16.76, 17.02, 16.81)
        (_hv([16.20, 16.21, 17.48], rep(18.0, 3), [16.76, 17.02, 16.81]), "inconclusive"),
        (_hv(rep(15.92, 5), rep(16.59, 5), rep(15.42, 5)), "disagree"),
        (_hv(rep(15.92, 4), rep(16.59, 4), rep(15.42, 4)), "inconclusive"),  # 0.029 > 0.025
        (_hv(rep(15.0, 4), rep(15.0, 4), rep(16.0, 4)), "inconclusive"),  # equal is not lower
        (_hv(rep(15.0, 4), rep(16.6, 4), [16.0]), "inconclusive"),
        ({**_hv(rep(15.0, 4), rep(16.6, 4), rep(16.0, 4)), "LaMBO-2": None}, "not comparable"),
        ({"GA": {"f2": [16.6]}, "LLOME-MargE": {"f2": [15.0]}}, "not comparable"),
        (
            {**_hv(rep(15.0, 4), rep(16.6, 4), rep(16.0, 4)), "GA": {"f1": rep(16.6, 4)}},
            "not comparable",
        ),
    ],
)
def test_pareto_llome_variant_below(hv, expected) -> None:
    assert vd.pareto_llome_variant_below("LLOME-MargE", hv).verdict == expected


def test_pareto_is_stratified_by_function() -> None:
    """f2 3 vs 3 and f1 1 vs 1, perfectly separated: 20 x 2 splits, p = 2 / 40 = 0.05 exactly,
    not below 0.05; the reason says the strata cannot reach it."""
    hv = {
        "LLOME-MargE": {"f1": [1.0], "f2": [1.0, 1.1, 1.2]},
        "GA": {"f1": [2.0], "f2": [2.0, 2.1, 2.2]},
        "LaMBO-2": {"f1": [2.0], "f2": [2.0, 2.1, 2.2]},
    }
    v = vd.pareto_llome_variant_below("LLOME-MargE", hv)
    assert v.verdict == "inconclusive" and v.p == pytest.approx(0.05)
    assert v.n == "f1 1 vs 1, f2 3 vs 3"
    assert "cannot reach p < 0.05 (smallest p 0.05)" in v.reason
    assert v.reason.startswith("mean hypervolume LLOME-MargE 1.050, GA 2.050, LaMBO-2 2.050")
    hv["LLOME-MargE"]["f2"] = [1.0, 1.1, 1.2, 1.3]  # 4 vs 3: 35 x 2 splits, p 1/35
    v = vd.pareto_llome_variant_below("LLOME-MargE", hv)
    assert v.verdict == "agree" and v.p == pytest.approx(2 / 70)


# ------------------------------------------------------------------------------------------
# Across figures
# ------------------------------------------------------------------------------------------
def test_mixed_label_accounting_is_not_comparable() -> None:
    agree = vd.solver_best("f2", "LLOME-MargE", summary(MargE=rep(0.5, 4), GA=rep(0.9, 4)), 4)
    assert agree.verdict == "agree"
    assert vd.comparable_accounting(agree, ["pay_once", "pay_once"]) == agree
    assert vd.comparable_accounting(agree, []) == agree
    mixed = vd.comparable_accounting(agree, ["pay_once", "every_evaluation", "pay_once"])
    assert mixed.verdict == "not comparable" and mixed.claim == agree.claim
    assert "every_evaluation, pay_once" in mixed.reason and "as measured: agree" in mixed.reason
    assert (mixed.test, mixed.n, mixed.p) == (agree.test, agree.n, agree.p)


def test_smoke_scale_keeps_the_direction_and_the_not_comparable() -> None:
    disagree = Verdict("c", "disagree", "why", "t", "4 vs 4", 0.01)
    assert vd.at_smoke_scale(disagree) == Verdict(
        "c",
        "inconclusive",
        "smoke scale, a pipeline check (direction: disagree): why",
        "t",
        "4 vs 4",
        0.01,
    )
    for kept in ("not comparable", "inconclusive"):
        assert vd.at_smoke_scale(Verdict("c", kept, "why")).verdict == kept


def test_summary_line_lists_every_sub_verdict() -> None:
    """The figure table's cell: no combined verdict hides the f2 disagree."""
    lines = [
        vd.solver_all_comparable("f1", summary(GA=[0.2], MargE=[0.0])),
        vd.solver_best("f2", "LLOME-MargE", summary(MargE=rep(0.789, 5), LaMBO=rep(0.684, 5)), 4),
    ]
    assert vd.summary_line(lines) == (
        "f1: all methods perform comparably: **inconclusive**; "
        "f2: LLOME-MargE performs the best: **disagree**"
    )
    assert vd.summary_line([]) == "no verdict"


def test_every_decided_comparison_names_its_test_n_and_p() -> None:
    """An agree or disagree of a comparison always carries its test, n and p."""
    cases = [
        vd.solver_best("f2", "LLOME-MargE", summary(MargE=rep(0.5, 4), GA=rep(0.9, 4)), 4),
        vd.solver_all_comparable("f1", summary(GA=rep(0.0, 4), MargE=rep(0.05, 4))),
        vd.diversity_lambo2_most_unique(LIKE),
        vd.reinforce_decreases_regret([FLAT_EARLY] * 6, 4),
        vd.reinforce_plateaus_early([FLAT_EARLY] * 5, 10),
        vd.model_size_plateaus(_marge(*rep(0.789, 5)), _marge(*rep(0.789, 5)), 4, 20_000),
        vd.ga_difficulty_q_strongest(_ranges()),
        vd.pareto_llome_variant_below("LLOME-MargE", _hv(rep(15.0, 4), rep(16.6, 4), rep(16.0, 4))),
        vd.diversity_dpo_does_not_improve([_dpo(0.1, 0.01)] * 5, [_dpo(0.5, 0.52)] * 5),
    ]
    for v in cases:
        assert v.verdict in ("agree", "disagree"), v
        assert v.test and v.n and v.p is not None and v.p < vd.ALPHA, v


# ------------------------------------------------------------------------------------------
# Issue 62: the paper's methods decide, other arms beside; every difference has a direction
# ------------------------------------------------------------------------------------------
def test_an_arm_the_paper_does_not_have_never_decides_the_other_methods_claim() -> None:
    # MargE and LaMBO-2 below the paper's other methods; our prior arm and local search below
    # both, 6 seeds each (p = 2 / C(12, 6) = 0.0022, below Bonferroni's 0.05 / 10 over every
    # method's pairs: so the old rule, taken over every method, disagrees)
    data = summary(
        MargE=rep(0.5, 6),
        LaMBO=rep(0.5, 6),
        GA=rep(0.9, 6),
        SFT=rep(0.9, 6),
        DPO=rep(0.9, 6),
        **{"LLOME-MargE-prior": rep(0.2, 6), "local search": rep(0.2, 6)},
    )
    v = vd.solver_medium_pair_outperforms("f2", data, 4)
    assert v.verdict == "agree", v.reason
    assert v.methods == ("LLOME-MargE", "LaMBO-2", "GA", "LLOME-DPO", "LLOME-SFT")
    assert v.beside == ("LLOME-MargE-prior", "local search")
    # the arms are compared and shown, after the deciding pairs
    deciding, aside = v.reason.split("Beside the claim", 1)
    assert "LLOME-MargE-prior" not in deciding and "Bonferroni over 6 pairs" in deciding
    assert "LLOME-MargE-prior lower by 0.300 (1.5 levels)" in aside
    # taken among every method (the rule before issue 62), the prior arm decides: disagree
    everything = vd.rules.beats("c", data, ("LLOME-MargE", "LaMBO-2"), 4)
    assert everything.verdict == "disagree" and everything.beside == ()
    best = vd.solver_best("f2", "LLOME-MargE", data, 4)
    assert best.verdict == "inconclusive" and best.beside == ("LLOME-MargE-prior", "local search")


def test_the_paper_methods_are_the_plans_paper_methods() -> None:
    from llome_jax.bench.plan import EXTRA_METHODS, F2_METHODS, METHODS

    assert set(vd.PAPER_METHODS) == set(METHODS) | set(EXTRA_METHODS)
    assert not set(vd.PAPER_METHODS) & set(F2_METHODS)


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ([0.5] * 4, [0.7] * 4, "A lower by 0.200 (1.6 levels)"),  # a level at 0.5: 0.125
        ([0.7] * 4, [0.5] * 4, "B lower by 0.200 (1.6 levels)"),
        ([0.5] * 4, [0.625] * 4, "A lower by 0.125 (1.0 levels)"),  # exactly one level
        ([0.789] * 4, [0.8125] * 4, "A lower by 0.023, within a level"),  # a level 0.053
        ([0.789] * 4, [0.789] * 4, "equal"),
    ],
)
def test_a_pair_says_which_side_is_lower_and_by_how_much(a, b, expected) -> None:
    pair = vd.rules.compare_pair("A", a, "B", b, 4)
    assert pair.direction() == expected and expected in pair.text()


def test_a_likeness_disagreement_says_who_is_ahead_and_where() -> None:
    # small MargE ahead of LaMBO-2 early (0.883 vs 0.938 at 2,000), level with it later
    early = summary(MargE=[0.859, 0.875, 0.883, 0.883, 0.89, 0.9], LaMBO=rep(0.9375, 6))
    level = summary(MargE=rep(0.789, 6), LaMBO=rep(0.789, 6))
    points = [(2000, early), *((after, level) for after in range(4000, 12_001, 2000))]
    v = vd.model_size_comparable("LaMBO-2", points, 4, 20_000)
    assert v.verdict == "disagree", v.reason
    assert v.reason.startswith("apart, decided by: at 2000: LLOME-MargE below LaMBO-2 by 0.054")
    assert "at 4000" not in v.reason.split(";")[0]


def test_an_arm_the_paper_does_not_have_does_not_decide_the_half_quantised_claim() -> None:
    data = summary(
        MargE=rep(0.5, 6), LaMBO=rep(0.9, 6), GA=rep(0.9, 6), **{"local search": rep(0.2, 6)}
    )
    v = vd.half_quant_marge_best(data, {"LLOME-MargE": 10}, 4)
    assert v.verdict == "agree" and v.beside == ("local search",), v.reason


def _prior(prior: list[float], lambo: list[float]) -> dict:
    return {"LLOME-MargE-prior": {"values": prior}, "LaMBO-2": {"values": lambo}}


@pytest.mark.parametrize(
    ("prior", "lambo", "expected", "p"),
    [
        # medians 0.62 vs 0.5, one level (1 - 0.5) / 4 = 0.125: within; every prior value less
        # the level (0.495) below every LaMBO-2 value: one split of C(16, 8) = 12,870
        ([0.62] * 8, [0.5] * 8, "agree", 1 / 12870),
        # 0.64 is more than a level above 0.5: not non-inferior; LaMBO-2 lower in every split
        # but the observed one and its mirror: two-sided p = 2 / 12,870
        ([0.64] * 8, [0.5] * 8, "disagree", 2 / 12870),
        # equal medians, 2 vs 2: the one-sided p cannot go below 1 / C(4, 2) = 1 / 6
        ([0.5, 0.5], [0.5, 0.5], "inconclusive", 1.0),
    ],
)
def test_the_prior_reaches_lambo2_on_both_sides_of_one_level(prior, lambo, expected, p) -> None:
    v = vd.prior_reaches_lambo2("f2", _prior(prior, lambo), 4)
    assert v.verdict == expected, v.reason
    assert v.p == pytest.approx(p, rel=1e-9)
    assert v.claim == "f2: LLOME-MargE-prior reaches LaMBO-2 (not a paper claim: an arm it lacks)"
    assert v.n == f"{len(prior)} vs {len(lambo)}"


def test_the_prior_verdict_without_an_arm_is_not_comparable() -> None:
    v = vd.prior_reaches_lambo2("f2", {"LaMBO-2": {"values": [0.5, 0.4]}}, 4)
    assert (v.verdict, v.reason) == ("not comparable", "no finished runs of LLOME-MargE-prior")
