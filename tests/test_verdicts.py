"""experiments/verdicts.py: every claim function on hand-made data whose answer is agree,
disagree, not comparable (and inconclusive where it applies), each asserting the exact verdict."""

from __future__ import annotations

import math
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "experiments"))
import verdicts as vd  # experiments/verdicts.py
from verdicts import SelectionRound, Verdict


def summary(seeds: int = 3, **medians: float) -> dict[str, dict[str, float]]:
    """A summary: each method's median min regret over ``seeds`` seeds (short names)."""
    names = {
        "GA": "GA",
        "MargE": "LLOME-MargE",
        "SFT": "LLOME-SFT",
        "DPO": "LLOME-DPO",
        "LaMBO": "LaMBO-2",
        "REINFORCE": "LLOME-REINFORCE",
    }
    return {names[m]: {"median": v, "seeds": seeds} for m, v in medians.items()}


def test_verdict_is_a_small_named_tuple() -> None:
    v = vd.solver_best("f2", "LLOME-MargE", summary(MargE=0.5, GA=0.9))
    assert isinstance(v, Verdict) and v == (v.claim, v.verdict, v.reason)
    assert v.claim == "f2: LLOME-MargE performs the best"


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


# ------------------------------------------------------------------------------------------
# Fig. 1
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "data, expected",
    [
        (summary(GA=0.0, MargE=0.05, LaMBO=0.1), "agree"),
        (summary(GA=0.234, MargE=0.0, DPO=0.487), "disagree"),
        (summary(seeds=1, GA=0.234, MargE=0.0), "inconclusive"),
        (summary(GA=0.5), "not comparable"),
    ],
)
def test_solver_all_comparable(data, expected) -> None:
    assert vd.solver_all_comparable("f1", data).verdict == expected


@pytest.mark.parametrize(
    "data, expected, why",
    [
        (summary(MargE=0.5, LaMBO=0.7, GA=0.9), "agree", "LLOME-MargE 0.500 vs best other"),
        # the cpu report's f2: MargE 0.789 behind LaMBO-2's 0.684 on 3 seeds each
        (summary(MargE=0.789, LaMBO=0.684, SFT=0.789), "disagree", "(LaMBO-2) 0.684"),
        (summary(MargE=0.789, SFT=0.789, GA=0.9), "inconclusive", "a tie"),
        (summary(seeds=1, MargE=0.5, GA=0.9), "inconclusive", "point to agree"),
        (summary(GA=0.5, LaMBO=0.4), "not comparable", "no finished LLOME-MargE run"),
        (summary(MargE=0.5), "not comparable", "no other method"),
    ],
)
def test_solver_best(data, expected, why) -> None:
    v = vd.solver_best("f2", "LLOME-MargE", data)
    assert v.verdict == expected and why in v.reason


@pytest.mark.parametrize(
    "data, expected",
    [
        (summary(MargE=0.6, LaMBO=0.5, SFT=0.7, GA=0.9), "agree"),
        (summary(MargE=0.789, LaMBO=0.684, SFT=0.7, GA=0.9), "disagree"),
        (summary(MargE=0.789, LaMBO=0.684, SFT=0.789), "inconclusive"),
        (summary(seeds=2, MargE=0.6, LaMBO=0.5, SFT=0.7), "inconclusive"),
        (summary(MargE=0.6, SFT=0.7), "not comparable"),
        (summary(MargE=0.6, LaMBO=0.5), "not comparable"),
    ],
)
def test_solver_medium_pair_outperforms(data, expected) -> None:
    assert vd.solver_medium_pair_outperforms("f2", data).verdict == expected


# ------------------------------------------------------------------------------------------
# Fig. 2
# ------------------------------------------------------------------------------------------
LIKE = {"GA": [0.3, 0.35, 0.32], "LLOME-MargE": [0.4, 0.36, 0.35], "LaMBO-2": [0.9, 0.95, 0.94]}


@pytest.mark.parametrize(
    "rates, expected",
    [
        (LIKE, "agree"),
        ({**LIKE, "LaMBO-2": [0.2, 0.25, 0.3]}, "disagree"),
        ({**LIKE, "GA": [0.9, 0.95, 0.94]}, "inconclusive"),  # a tie at the top
        ({**LIKE, "LaMBO-2": [0.9]}, "inconclusive"),  # one run
        # the GA's uniqueness over its de-duplicated archive (1.0 by construction): unlike
        ({**LIKE, "GA": [None, None, None]}, "not comparable"),
        ({"GA": [0.3, 0.3, 0.3]}, "not comparable"),
    ],
)
def test_diversity_lambo2_most_unique(rates, expected) -> None:
    assert vd.diversity_lambo2_most_unique(rates).verdict == expected


@pytest.mark.parametrize(
    "rates, expected",
    [
        ({"GA": [0.8] * 3, "LLOME-SFT": [0.5] * 3, "LaMBO-2": [0.9] * 3}, "agree"),
        ({"GA": [0.86] * 3, "LLOME-SFT": [0.5] * 3, "LaMBO-2": [0.66] * 3}, "disagree"),
        ({"GA": [0.8] * 2, "LLOME-SFT": [0.5] * 3, "LaMBO-2": [0.9] * 3}, "inconclusive"),
        # LLOME's feasibility after the Filter's cap is not measured like the others'
        ({"GA": [0.8] * 3, "LLOME-SFT": [None] * 3, "LaMBO-2": [0.9] * 3}, "not comparable"),
    ],
)
def test_diversity_lambo2_most_feasible(rates, expected) -> None:
    assert vd.diversity_lambo2_most_feasible(rates).verdict == expected


@pytest.mark.parametrize(
    "rates, expected",
    [
        (LIKE, "agree"),
        ({**LIKE, "LLOME-MargE": [0.1, 0.2, 0.1]}, "disagree"),
        ({**LIKE, "LLOME-MargE": [0.3, 0.35, 0.32]}, "inconclusive"),
        ({"LLOME-MargE": [0.4] * 3, "LaMBO-2": [0.9] * 3}, "not comparable"),
        ({**LIKE, "GA": [1.0, None, 1.0]}, "not comparable"),
    ],
)
def test_diversity_more_unique_than_ga(rates, expected) -> None:
    v = vd.diversity_more_unique_than_ga("LLOME-MargE", rates)
    assert v.verdict == expected
    assert v.claim == "LLOME-MargE generates more unique sequences than the GA"


@pytest.mark.parametrize(
    "unique, feasible, expected",
    [
        # diversity falls 0.1 -> 0.01, feasibility +0.02: no improvement
        ([[0.1, 0.02, 0.01]] * 3, [[0.5, 0.51, 0.52]] * 3, "agree"),
        ([[0.1, 0.02, 0.01]] * 3, [[0.5, 0.6, 0.7]] * 3, "disagree"),  # feasibility +0.2
        ([[0.1, 0.3]] * 3, [[0.5, 0.5]] * 3, "disagree"),  # diversity +0.2
        ([[0.1, 0.02]] * 2 + [[0.1]], [[0.5, 0.5]] * 2 + [[0.5]], "inconclusive"),
        ([[0.1]] * 3, [[0.5]] * 3, "not comparable"),  # DPO collapsed after one round
        ([[0.1, 0.02]] * 3, [[None, None]] * 3, "not comparable"),
    ],
)
def test_diversity_dpo_does_not_improve(unique, feasible, expected) -> None:
    assert vd.diversity_dpo_does_not_improve(unique, feasible).verdict == expected


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
    assert (
        vd.calibration_higher_likelihood_lower_regret("LLOME-SFT", lik, values).verdict == expected
    )


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
        ({FIRST: [0.0], LAST: [0.3] * 3}, "inconclusive"),
        ({LAST: [0.3] * 3}, "not comparable"),
    ],
)
def test_sft_marge_sole_optimum(finals, expected) -> None:
    assert vd.sft_marge_sole_optimum(FIRST, finals).verdict == expected


@pytest.mark.parametrize(
    "rho, expected",
    [
        ({FIRST: (-0.6, 10_000), LAST: (-0.5, 10_000)}, "agree"),
        ({FIRST: (-0.5, 10_000), LAST: (-0.6, 10_000)}, "disagree"),
        ({FIRST: (-0.55, 300), LAST: (-0.56, 300)}, "inconclusive"),
        # the cpu report's table: no rho for SFT1-MargE9 (its candidate log was not found)
        ({FIRST: (float("nan"), 0), LAST: (-0.5, 300)}, "not comparable"),
        ({FIRST: (-0.5, 300)}, "not comparable"),
    ],
)
def test_sft_marge_best_calibration(rho, expected) -> None:
    assert vd.sft_marge_best_calibration(FIRST, rho).verdict == expected


@pytest.mark.parametrize(
    "medians, expected",
    [
        ({FIRST: 0.5, LAST: 0.6, "LLOME-SFT5-MargE5": 0.8}, "agree"),
        ({FIRST: 0.5, LAST: 0.9, "LLOME-SFT5-MargE5": 0.8}, "disagree"),
        ({FIRST: 0.789, LAST: 0.789, "LLOME-SFT5-MargE5": 0.789}, "inconclusive"),
        ({FIRST: 0.5, LAST: 0.6}, "not comparable"),
    ],
)
def test_sft_marge_intermediate_worst(medians, expected) -> None:
    data = {p: {"median": v, "seeds": 3} for p, v in medians.items()}
    assert vd.sft_marge_intermediate_worst(data, FIRST, LAST).verdict == expected


# ------------------------------------------------------------------------------------------
# Fig. 5
# ------------------------------------------------------------------------------------------
FLAT_EARLY = [0.97, 0.9, 0.86, 0.86, 0.86, 0.86, 0.86, 0.86, 0.86, 0.86, 0.86]  # last gain: 2
LATE = [0.97, 0.97, 0.97, 0.97, 0.97, 0.97, 0.97, 0.97, 0.9, 0.86, 0.79]  # improves to round 10
SOLVED = [0.97, 0.9, 0.0]
UNTRAINED = [0.97]  # stopped after round 0


@pytest.mark.parametrize(
    "runs, expected",
    [
        ([FLAT_EARLY] * 3, "agree"),
        ([[0.97, 0.97, 0.97]] * 3, "disagree"),
        ([FLAT_EARLY], "inconclusive"),
        ([UNTRAINED] * 3, "not comparable"),
    ],
)
def test_reinforce_decreases_regret(runs, expected) -> None:
    assert vd.reinforce_decreases_regret(runs).verdict == expected


@pytest.mark.parametrize(
    "runs, expected",
    [
        ([FLAT_EARLY, FLAT_EARLY, LATE], "agree"),
        ([LATE, LATE, FLAT_EARLY], "disagree"),
        ([SOLVED, SOLVED, FLAT_EARLY], "disagree"),  # reaching the optimum is no plateau
        ([FLAT_EARLY, LATE, FLAT_EARLY, LATE], "inconclusive"),
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
        ([SOLVED], "disagree"),  # one counterexample suffices
        ([FLAT_EARLY, LATE], "inconclusive"),
        ([UNTRAINED], "not comparable"),
    ],
)
def test_reinforce_never_optimal(runs, expected) -> None:
    assert vd.reinforce_never_optimal(runs).verdict == expected


@pytest.mark.parametrize(
    "data, expected",
    [
        (summary(MargE=0.5, REINFORCE=0.79, GA=0.1), "agree"),  # the GA is not compared here
        (summary(MargE=0.86, REINFORCE=0.79), "disagree"),
        (summary(MargE=0.789, REINFORCE=0.789), "inconclusive"),
        (summary(MargE=0.5), "not comparable"),
    ],
)
def test_reinforce_marge_ends_lower(data, expected) -> None:
    assert vd.reinforce_marge_ends_lower(data).verdict == expected


# ------------------------------------------------------------------------------------------
# Fig. 6
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "per_round, expected",
    [
        ([[0.9, 0.85, 0.8]] * 8 + [[0.8, 0.8, 0.8]], "agree"),  # 8 of 9 lower, p = 0.02
        ([[0.8, 0.8, 0.8]] * 8 + [[0.9, 0.85, 0.8]], "disagree"),  # ties count against
        ([[0.9, 0.8], [0.8, 0.8], [0.8, 0.9]], "inconclusive"),
        ([[0.9]] * 5, "not comparable"),
    ],
)
def test_refinement_reduces_regret(per_round, expected) -> None:
    assert vd.refinement_reduces_regret("LLOME-MargE", per_round).verdict == expected


@pytest.mark.parametrize(
    "per_round, expected",
    [
        ([[0.9, 0.8, 0.8, 0.8]] * 6, "agree"),  # only the first step helps, 6 rounds: p = 0.016
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
        # the old rule's "at least once": 1 of 10 met it; "often" does not
        ([_sel(True)] + [_sel(False)] * 9, "disagree"),
        ([_sel(True)] * 3, "inconclusive"),
        # every candidate selected (j = candidates): no choice, so no round counts
        ([_sel(False, candidates=2000)] * 10, "not comparable"),
        ([], "not comparable"),
    ],
)
def test_selection_misses_best_often(rounds, expected) -> None:
    assert vd.selection_misses_best_often("LLOME-MargE", rounds).verdict == expected


@pytest.mark.parametrize(
    "rounds, expected",
    [
        ([_sel(True, better=True)] * 10, "agree"),
        ([_sel(True, better=False)] * 10, "disagree"),
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
        (summary(MargE=0.5, LaMBO=0.9, GA=1.0), {"LLOME-MargE": 10}, "agree"),
        (summary(MargE=0.9, LaMBO=0.5, GA=1.0), {"LLOME-MargE": 10}, "disagree"),
        # the cpu report: MargE 1.000 > LaMBO-2 0.938, but every LLOME run stopped after round 0
        (summary(MargE=1.0, LaMBO=0.938, GA=1.0), {"LLOME-MargE": 0}, "not comparable"),
        (summary(MargE=1.0, LaMBO=1.0), {"LLOME-MargE": 10}, "inconclusive"),
    ],
)
def test_half_quant_marge_best(data, last_round, expected) -> None:
    assert vd.half_quant_marge_best(data, last_round).verdict == expected


# ------------------------------------------------------------------------------------------
# Fig. 9
# ------------------------------------------------------------------------------------------
def _points(marge: float, lambo: float, seeds: int = 3):
    return [
        (after, summary(seeds, MargE=marge, LaMBO=lambo))
        for after in range(2000, vd.PAPER_22K_AFTER_ROUND0 + 1, 2000)
    ]


@pytest.mark.parametrize(
    "points, budget, expected",
    [
        (_points(0.789, 0.789), 20_000, "agree"),
        (_points(0.789, 0.77), 20_000, "agree"),  # 0.019 < one level (0.053)
        # one level apart: 0.1 called it comparable, a level does not
        (_points(0.789, 0.859), 20_000, "disagree"),
        (_points(0.789, 0.684), 20_000, "disagree"),
        (_points(0.789, 0.789, seeds=1), 20_000, "inconclusive"),
        (_points(0.789, 0.789), 4_000, "not comparable"),  # smoke: the budget stops before 22K
    ],
)
def test_model_size_comparable(points, budget, expected) -> None:
    assert vd.model_size_comparable("LaMBO-2", points, 4, budget).verdict == expected


def test_model_size_comparable_to_pythia_is_not_comparable_without_its_runs() -> None:
    v = vd.model_size_comparable("LLOME-MargE (Pythia 2.8B)", _points(0.7, 0.7), 4, 20_000)
    assert v.verdict == "not comparable"


@pytest.mark.parametrize(
    "at_22k, at_end, budget, expected",
    [
        (summary(MargE=0.789), summary(MargE=0.789), 20_000, "agree"),
        (summary(MargE=0.789), summary(MargE=0.77), 20_000, "agree"),  # < one level
        (summary(MargE=0.789), summary(MargE=0.684), 20_000, "disagree"),
        (summary(1, MargE=0.789), summary(1, MargE=0.789), 20_000, "inconclusive"),
        (summary(MargE=0.789), summary(MargE=0.789), 12_000, "not comparable"),
        (summary(LaMBO=0.789), summary(LaMBO=0.7), 20_000, "not comparable"),
    ],
)
def test_model_size_plateaus(at_22k, at_end, budget, expected) -> None:
    assert vd.model_size_plateaus(at_22k, at_end, 4, budget).verdict == expected


# ------------------------------------------------------------------------------------------
# Fig. 10
# ------------------------------------------------------------------------------------------
RANGES = {"v": 0.55, "L": 0.14, "c": 0.22, "k": 0.21, "q": 0.82}


@pytest.mark.parametrize(
    "ranges, seeds, expected",
    [
        (RANGES, 4, "agree"),
        ({**RANGES, "v": 0.9}, 4, "disagree"),
        ({**RANGES, "v": 0.82}, 4, "inconclusive"),
        (RANGES, 2, "inconclusive"),
        ({}, 4, "not comparable"),
        ({k: v for k, v in RANGES.items() if k != "q"}, 4, "not comparable"),
    ],
)
def test_ga_difficulty_q_strongest(ranges, seeds, expected) -> None:
    assert vd.ga_difficulty_q_strongest(ranges, seeds).verdict == expected


RUNS = {"GA": 15, "LaMBO-2": 9, "LLOME-SFT": 9, "LLOME-MargE": 9, "LLOME-DPO": 9}


@pytest.mark.parametrize(
    "hv, runs, expected",
    [
        ({"GA": 16.6, "LaMBO-2": 16.0, "LLOME-MargE": 15.0}, RUNS, "agree"),
        # the cpu report: MargE 15.92 above LaMBO-2's 15.42
        ({"GA": 16.59, "LaMBO-2": 15.42, "LLOME-MargE": 15.92}, RUNS, "disagree"),
        (
            {"GA": 16.6, "LaMBO-2": 16.0, "LLOME-MargE": 15.0},
            {**RUNS, "LaMBO-2": 1},
            "inconclusive",
        ),
        ({"GA": 16.6, "LaMBO-2": None, "LLOME-MargE": 15.0}, RUNS, "not comparable"),
        ({"GA": 16.6, "LLOME-MargE": 15.0}, RUNS, "not comparable"),
    ],
)
def test_pareto_llome_variant_below(hv, runs, expected) -> None:
    assert vd.pareto_llome_variant_below("LLOME-MargE", hv, runs).verdict == expected


# ------------------------------------------------------------------------------------------
# Across figures
# ------------------------------------------------------------------------------------------
def test_mixed_label_accounting_is_not_comparable() -> None:
    agree = vd.solver_best("f2", "LLOME-MargE", summary(MargE=0.5, GA=0.9))
    assert vd.comparable_accounting(agree, ["pay_once", "pay_once"]) == agree
    assert vd.comparable_accounting(agree, []) == agree
    mixed = vd.comparable_accounting(agree, ["pay_once", "every_evaluation", "pay_once"])
    assert mixed.verdict == "not comparable" and mixed.claim == agree.claim
    assert "every_evaluation, pay_once" in mixed.reason and "as measured: agree" in mixed.reason


def test_smoke_scale_keeps_the_direction_and_the_not_comparable() -> None:
    disagree = Verdict("c", "disagree", "why")
    assert vd.at_smoke_scale(disagree) == Verdict(
        "c", "inconclusive", "smoke scale, a pipeline check (direction: disagree): why"
    )
    for kept in ("not comparable", "inconclusive"):
        assert vd.at_smoke_scale(Verdict("c", kept, "why")).verdict == kept


def test_summary_line_lists_every_sub_verdict() -> None:
    """The figure table's cell: no combined verdict hides the f2 disagree."""
    lines = [
        vd.solver_all_comparable("f1", summary(seeds=1, GA=0.2, MargE=0.0)),
        vd.solver_best("f2", "LLOME-MargE", summary(MargE=0.789, LaMBO=0.684)),
    ]
    assert vd.summary_line(lines) == (
        "f1: all methods perform comparably: **inconclusive**; "
        "f2: LLOME-MargE performs the best: **disagree**"
    )
    assert vd.summary_line([]) == "no verdict"
