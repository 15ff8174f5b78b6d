"""The machinery every verdict shares: the :class:`Verdict` record, the named thresholds, and the
rule-and-test comparisons of per-seed values (:func:`compare_pair` / :func:`lower_verdict` for
"lower", :func:`likeness` / :func:`near_verdict` for "comparably", :func:`sign_verdict`,
:func:`decide` for rules without a test), plus what applies across figures
(:func:`comparable_accounting`, :func:`at_smoke_scale`, the report's lines). The rules and tests
themselves are described in :mod:`llome_jax.bench.verdicts`.
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
    "OPTIMUM_TOL",
    "OUTCOMES",
    "PAPER_22K_AFTER_ROUND0",
    "PAPER_METHODS",
    "PLATEAU_EARLY",
    "Z_95",
    "NearTest",
    "Outcome",
    "PairTest",
    "SelectionRound",
    "Summary",
    "Verdict",
    "at_smoke_scale",
    "beats",
    "comparable_accounting",
    "compare_pair",
    "decide",
    "describe_test",
    "fmt_p",
    "likeness",
    "lower_verdict",
    "majority",
    "median_of",
    "missing_runs",
    "near_verdict",
    "one_level",
    "seed_values",
    "sign_verdict",
    "stated_test",
    "summary_line",
    "within_level",
]

Outcome = Literal["agree", "disagree", "not comparable", "inconclusive"]
#: every :data:`Outcome`, in the report's order
OUTCOMES: tuple[Outcome, ...] = ("agree", "disagree", "not comparable", "inconclusive")

#: ``{method: {"values": [per-seed values], ...}}``: one value per seed at one budget (the paper
#: driver's summaries also carry ``"median"``, ``"seeds"``, ``"min"``, ``"max"``; the verdicts read
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
#: A min regret at or below this is the optimum (regret 0 up to float rounding).
OPTIMUM_TOL = 1e-9
#: The methods the paper ran (its figure 1 and the REINFORCE ablation): a claim about "the other
#: methods" is decided over these; any other arm is reported beside it (:func:`beats`).
PAPER_METHODS = ("GA", "LLOME-SFT", "LLOME-MargE", "LLOME-DPO", "LLOME-REINFORCE", "LaMBO-2")


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
    #: the methods that entered the decision (empty where the claim names its methods itself)
    methods: tuple[str, ...] = ()
    #: arms compared and reported beside the claim that did not enter it (e.g. local search)
    beside: tuple[str, ...] = ()


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


def within_level(a: float, b: float, quantization: int | None) -> tuple[bool, float, float]:
    """``(|a - b| below one level of the lower regret, gap, level)``; without ``quantization``
    (no levels) the level is 0: only equal values are within it."""
    gap = abs(a - b)
    level = one_level(min(a, b), quantization) if quantization else 0.0
    return gap == 0.0 or gap < level, gap, level


def majority(k: int, n: int) -> tuple[float, float]:
    """One-sided sign-test p-values of ``k`` successes in ``n`` fair trials: ``P(X >= k)`` (more
    than half) and ``P(X <= k)`` (fewer than half); ``(1, 1)`` for ``n = 0``."""
    total = 2.0**n
    upper = sum(math.comb(n, i) for i in range(k, n + 1)) / total
    lower = sum(math.comb(n, i) for i in range(0, k + 1)) / total
    return upper, lower


def seed_values(entry: Mapping[str, Any]) -> list[float]:
    """A summary entry's per-seed values (its ``"values"``) as floats."""
    return [float(v) for v in entry["values"]]


def median_of(values: Sequence[float]) -> float:
    """The median as a Python float."""
    return float(np.median(np.asarray(values, np.float64)))


def fmt_p(p: float) -> str:
    """A p-value in a reason: 3 significant digits."""
    return f"{p:.3g}"


def decide(
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


def sign_verdict(claim: str, k: int, n: int, what: str) -> Verdict:
    """The one-sided sign test of ``k`` successes in ``n`` (:func:`majority`): ``P(X >= k)``
    below :data:`ALPHA`: agree; ``P(X <= k)`` below it: disagree; else inconclusive."""
    upper, lower = majority(k, n)
    test = "one-sided sign test (binomial, 1/2)"
    why = f"{what} in {k} of {n} (sign test p {fmt_p(min(upper, lower))}, n = {n})"
    if upper < ALPHA:
        return Verdict(claim, "agree", why, test, str(n), upper)
    if lower < ALPHA:
        return Verdict(claim, "disagree", why, test, str(n), lower)
    floor = stats.smallest_p_sign_flip(n, "greater")
    if floor >= ALPHA:
        why += f"; {n} cannot reach p < {ALPHA} (smallest p {fmt_p(floor)})"
    return Verdict(claim, "inconclusive", why, test, str(n), min(upper, lower))


# ------------------------------------------------------------------------------------------
# Comparisons of per-seed values: the rule and the test together
# ------------------------------------------------------------------------------------------
class PairTest(NamedTuple):
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

    def direction(self) -> str:
        """Which centre is lower and by how much, in the rule's terms: ``"b lower by 0.281
        (2.3 levels)"``, ``"a lower by 0.023, within a level"``, ``"equal"``."""
        gap = self.centre_b - self.centre_a
        if gap == 0.0:
            return "equal"
        lower = self.a if gap > 0 else self.b
        text = f"{lower} lower by {abs(gap):.3f}"
        if self.level:
            levels = abs(gap) / self.level
            text += ", within a level" if levels < 1 else f" ({levels:.1f} levels)"
        return text

    def text(self) -> str:
        level = f" (a level {self.level:.3f})" if self.level else ""
        floor = (
            f"; {self.n} cannot reach p < {ALPHA} (smallest p {fmt_p(self.floor)})"
            if self.floor >= ALPHA
            else ""
        )
        return (
            f"{self.a} {self.centre_a:.3f} vs {self.b} {self.centre_b:.3f}{level}: "
            f"{self.direction()}, n = {self.n}, p = {fmt_p(self.p)}{floor}"
        )


def compare_pair(
    a: str, a_values: Sequence[float], b: str, b_values: Sequence[float], quantization: int | None
) -> PairTest:
    """The medians, one level of the lower (``quantization``; none: 0) and the exact two-sided
    permutation test of ``a_values`` vs ``b_values``."""
    x = [float(v) for v in a_values]
    y = [float(v) for v in b_values]
    ca, cb = median_of(x), median_of(y)
    _, _, level = within_level(ca, cb, quantization)
    return PairTest(
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


def describe_test(quantity: str, exact: bool, kind: str = "permutation test") -> str:
    """The ``test`` text of a two-sided comparison of per-seed ``quantity`` (exact or Monte
    Carlo, as :mod:`llome_jax.stats` ran it)."""
    how = "exact" if exact else f"Monte Carlo ({stats.MONTE_CARLO:,} random splits)"
    return f"{how} two-sided {kind} on per-seed {quantity} (difference of means)"


def lower_verdict(
    claim: str,
    pairs: Sequence[PairTest],
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
    test = describe_test(quantity, all(p.exact for p in pairs), kind)
    head = f"{test} with {rule}"
    if alpha_agree != ALPHA:
        head += f"; agree needs p < {fmt_p(alpha_agree)} per pair"
    if len(pairs) > 1:
        head += f"; disagree needs p < {fmt_p(strict)} (Bonferroni over {len(pairs)} pairs)"
    body = "; ".join(p.text() for p in pairs)
    against = [p for p in pairs if p.rule is False and p.test(strict) is False]
    if all(p.rule is True and p.test(alpha_agree) is True for p in pairs):
        top = max(pairs, key=lambda p: p.p)
        why = f"decided by every pair: {_lower_list(pairs)}; {head}: {body}"
        return Verdict(claim, "agree", why, test, top.n, top.p)
    if against:
        top = min(against, key=lambda p: p.p)
        why = f"decided by: {_lower_list(against)}; {head}: {body}"
        return Verdict(claim, "disagree", why, test, top.n, top.p)
    if any(p.rule is False for p in pairs):
        direction = "disagree"
        top = min((p for p in pairs if p.rule is False), key=lambda p: p.p)
    else:
        direction = "agree" if all(p.rule for p in pairs) else "a tie (within a level)"
        top = max(pairs, key=lambda p: p.p)
    why = f"the numbers point to {direction}, the rule and the test do not both decide; {head}: "
    return Verdict(claim, "inconclusive", why + body, test, top.n, top.p)


def _lower_list(pairs: Sequence[PairTest]) -> str:
    """``"LaMBO-2 below LLOME-MargE by 0.281 (p = 0.000777)"`` for each pair: the direction of
    every difference a verdict rests on."""
    out = []
    for p in pairs:
        gap = p.centre_b - p.centre_a
        low, high = (p.a, p.b) if gap > 0 else (p.b, p.a)
        out.append(f"{low} below {high} by {abs(gap):.3f} (p = {fmt_p(p.p)})")
    return ", ".join(out)


class NearTest(NamedTuple):
    """``a`` vs ``b`` for a claim of likeness: the rule's ``within`` (medians inside the
    ``margin``), the TOST p (the difference of means inside ``+-margin``) and the pair."""

    pair: PairTest
    within: bool
    margin: float
    p_near: float
    floor_near: float


def likeness(
    a: str,
    a_values: Sequence[float],
    b: str,
    b_values: Sequence[float],
    margin: float,
    within: bool,
) -> NearTest:
    """TOST: ``max(p(mean(a) - mean(b) < margin), p(mean(a) - mean(b) > -margin))``, each a
    one-sided permutation test of ``a`` shifted by ``-+margin`` against ``b``."""
    x = np.asarray(a_values, np.float64)
    y = [float(v) for v in b_values]
    p_near = max(
        stats.permutation_test(x - margin, y, "less"),
        stats.permutation_test(x + margin, y, "greater"),
    )
    pair = compare_pair(a, a_values, b, b_values, None)
    return NearTest(pair, within, margin, p_near, stats.smallest_p(len(x), len(y), "less"))


def near_verdict(
    claim: str, items: Sequence[tuple[str, NearTest]], quantity: str, rule: str
) -> Verdict:
    """Every item claims likeness. Agree: each item's rule says within and its TOST p is below
    :data:`ALPHA`; disagree: some item's rule says apart and its two-sided test, at ``ALPHA /
    len(items)`` (Bonferroni), finds the difference in the medians' direction; else
    inconclusive."""
    strict = ALPHA / len(items)
    exact = all(near.pair.exact for _, near in items)
    test = (
        f"{describe_test(quantity, exact)}; likeness by two one-sided shifted permutation tests "
        "(TOST) at the margin"
    )
    head = f"{test}, with {rule}"
    if len(items) > 1:
        head += f"; disagree needs p < {fmt_p(strict)} (Bonferroni over {len(items)})"

    def text(label: str, near: NearTest) -> str:
        p = near.pair
        floor = (
            f"; {p.n} cannot reach a TOST p < {ALPHA} (smallest {fmt_p(near.floor_near)})"
            if near.floor_near >= ALPHA
            else ""
        )
        return (
            f"{label}{p.a} {p.centre_a:.3f} vs {p.b} {p.centre_b:.3f} (margin {near.margin:.3f}, "
            f"{'within' if near.within else 'apart'}): {p.direction()}, n = {p.n}, "
            f"TOST p = {fmt_p(near.p_near)}, difference p = {fmt_p(p.p)}{floor}"
        )

    body = "; ".join(text(label, near) for label, near in items)

    def apart(near: NearTest) -> bool:
        p = near.pair
        return (
            not near.within
            and p.test(strict) is not None
            and p.test(strict) == (p.centre_b > p.centre_a)
        )

    if all(near.within and near.p_near < ALPHA for _, near in items):
        top = max((near for _, near in items), key=lambda near: near.p_near)
        return Verdict(claim, "agree", f"{head}: {body}", test, top.pair.n, top.p_near)
    if against := [(label, near) for label, near in items if apart(near)]:
        top = min((near for _, near in against), key=lambda near: near.pair.p)
        decided = ", ".join(f"{label}{_lower_list([near.pair])}" for label, near in against)
        why = f"apart, decided by: {decided}; {head}: {body}"
        return Verdict(claim, "disagree", why, test, top.pair.n, top.pair.p)
    if all(near.within for _, near in items):
        top = max((near for _, near in items), key=lambda near: near.p_near)
        direction, p_top = "agree", top.p_near
    else:
        top = min((near for _, near in items if not near.within), key=lambda near: near.pair.p)
        direction, p_top = "disagree", top.pair.p
    why = f"the numbers point to {direction}, the rule and the test do not both decide; {head}: "
    return Verdict(claim, "inconclusive", why + body, test, top.pair.n, p_top)


def missing_runs(claim: str, summary: Summary, needed: Sequence[str]) -> Verdict | None:
    """``not comparable`` when one of ``needed`` has no finished run in ``summary``, else
    ``None``."""
    if missing := [m for m in needed if m not in summary or not len(summary[m]["values"])]:
        return Verdict(claim, "not comparable", f"no finished run of {', '.join(missing)}")
    return None


def beats(
    claim: str,
    summary: Summary,
    winners: Sequence[str],
    quantization: int | None,
    among: Collection[str] | None = None,
) -> Verdict:
    """Each of ``winners`` has a lower min regret than every other method of ``summary`` that
    is in ``among`` (``None``: every method). The methods outside ``among`` (arms the paper does
    not have) are compared with the winners the same way and reported beside the verdict, in
    its reason and :attr:`Verdict.beside`; they never change it."""
    if verdict := missing_runs(claim, summary, winners):
        return verdict
    present = [m for m in sorted(summary) if m not in winners and len(summary[m]["values"])]
    others = [m for m in present if among is None or m in among]
    beside = [m for m in present if m not in others]
    if not others:
        return Verdict(claim, "not comparable", f"no other method beside {', '.join(winners)}")

    def pairs_with(methods: Sequence[str]) -> list[PairTest]:
        return [
            compare_pair(w, seed_values(summary[w]), o, seed_values(summary[o]), quantization)
            for w in winners
            for o in methods
        ]

    verdict = lower_verdict(
        claim, pairs_with(others), "min regret", "the one-level rule on medians"
    )
    verdict = verdict._replace(methods=(*winners, *others), beside=tuple(beside))
    if not beside:
        return verdict
    aside = "; ".join(p.text() for p in pairs_with(beside))
    return verdict._replace(
        reason=f"{verdict.reason}. Beside the claim (not the paper's methods, not deciding it): "
        f"{aside}"
    )


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
    p = "n/a" if verdict.p is None else fmt_p(verdict.p)
    return f"test: {verdict.test or 'none'}; n = {verdict.n or 'n/a'}; p = {p}"
