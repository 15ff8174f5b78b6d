"""Figure 10: the GA difficulty sweep and the budget-vs-regret Pareto frontier (hypervolumes)."""

from __future__ import annotations

import csv
from collections.abc import Sequence

import numpy as np

from llome_jax.bench import verdicts as vd
from llome_jax.bench.figures.plots import pyplot, save_figure
from llome_jax.bench.plan import EXTRA_METHODS, F2_METHODS, METHODS
from llome_jax.bench.results import (
    CI_NOTE,
    Context,
    early_stops,
    markdown_table,
    median_ci,
    write_csv,
)
from llome_jax.bench.verdicts import Verdict
from llome_jax.stats import bootstrap_interval_stratified

__all__ = ["figure_difficulty_pareto", "hypervolume"]


def hypervolume(x: Sequence[int], y: Sequence[float], after: float) -> float:
    """Area under the min-regret step curve over the ``after`` labels past the run's round 0
    (``x[0]``), in K labels x regret (lower is better; the paper's "average (evaluations x min
    regret)")."""
    xs = np.asarray(x, np.float64)
    ys = np.asarray(y, np.float64)
    grid = np.linspace(xs[0], xs[0] + after, 201)
    idx = np.searchsorted(xs, grid, side="right") - 1
    vals = ys[np.clip(idx, 0, None)]
    return float(np.trapezoid(vals, grid) / 1000.0)


def figure_difficulty_pareto(ctx: Context) -> tuple[str, list[Verdict]]:
    """Figure 10: the GA difficulty sweep (``runs/ga_difficulty/curves.csv``) and, over every
    finished run, the budget-vs-regret Pareto frontier and hypervolume per method
    (``difficulty_pareto.csv``: rows of kind ``difficulty``, ``frontier``, ``hypervolume``)."""
    parts, verdicts = [], []
    path = ctx.out / "runs" / "ga_difficulty" / "curves.csv"
    diff_rows = []
    ranges: dict[str, list[float]] = {}
    if path.exists():
        with open(path, newline="") as stream:
            data = list(csv.DictReader(stream))
        per: dict[tuple[str, str], dict[int, list[float]]] = {}
        for row in data:
            per.setdefault((row["parameter"], row["value"]), {}).setdefault(
                int(row["seed"]), []
            ).append(float(row["min_regret"]))
        by_seed: dict[str, dict[int, list[float]]] = {}  # parameter -> seed -> per value
        for (p, v), seeds in per.items():
            mean_curve = float(np.mean([np.mean(c) for c in seeds.values()]))
            finals = [c[-1] for c in seeds.values()]
            final = float(np.median(finals))
            diff_rows.append([p, v, len(seeds), mean_curve, final, *median_ci(finals)])
            for seed, c in seeds.items():
                by_seed.setdefault(p, {}).setdefault(seed, []).append(float(np.mean(c)))
        # per seed, the range over a parameter's values of the run's mean regret (seeds that
        # ran every value of the parameter): the verdict's per-seed values
        values_of = {p: len({v for q, v in per if q == p}) for p in by_seed}
        ranges = {
            p: [max(c) - min(c) for _, c in sorted(seeds.items()) if len(c) == values_of[p]]
            for p, seeds in by_seed.items()
        }
        parts.append(
            markdown_table(
                [
                    "parameter",
                    "value",
                    "seeds",
                    "mean regret over the run",
                    "median final regret",
                    "95% CI low",
                    "95% CI high",
                ],
                diff_rows,
            )
        )
        parts.append(
            markdown_table(
                [
                    "parameter",
                    "seeds",
                    "median range of the mean regret over its values",
                    "95% CI low",
                    "95% CI high",
                ],
                [
                    [p, len(r), float(np.median(r)) if r else None, *median_ci(r)]
                    for p, r in sorted(ranges.items())
                ],
            )
            + f"\n\n{CI_NOTE}"
        )
    verdicts.append(vd.ga_difficulty_q_strongest(ranges))
    # Pareto frontier over every finished run: (budget, min regret) points per method; the
    # hypervolume is over the labels after round 0 (the GA seed data, common to every method)
    hv_by_function: dict[str, dict[str, list[float]]] = {}
    frontier_rows = []
    points: dict[str, list[tuple[int, float]]] = {}
    for spec, records in sorted(ctx.runs.items(), key=lambda kv: kv[0].name):
        pts = [
            (r["num_evaluations"], r["min_regret"])
            for r in records
            if r.get("min_regret") is not None
        ]
        if not pts:
            continue
        # a method of its own, except the SFT_i-MargE_j pipelines of figure 4 (one family)
        family = (
            spec.method
            if spec.method in {**METHODS, **EXTRA_METHODS, **F2_METHODS}
            else "LLOME-SFT/MargE pipelines"
        )
        area = hypervolume([p[0] for p in pts], [p[1] for p in pts], ctx.budget)
        hv_by_function.setdefault(family, {}).setdefault(spec.function, []).append(area)
        points.setdefault(family, []).extend(pts)
    for family, pts in sorted(points.items()):
        best = float("inf")
        for e, g in sorted(pts):
            if g < best:
                best = g
                frontier_rows.append([family, e, g])
    # methods ran on different functions (the GA everywhere, LaMBO-2 on L = 128 late), so the
    # comparison averages per-function means over the functions every compared method has
    compared = ("GA", "LaMBO-2", "LLOME-SFT", "LLOME-MargE", "LLOME-DPO")
    present = [set(hv_by_function[m]) for m in compared if m in hv_by_function]
    common = sorted(set.intersection(*present)) if len(present) == len(compared) else []

    def common_mean(family: str) -> float | None:
        per = hv_by_function[family]
        if not common or any(f not in per for f in common):
            return None
        return float(np.mean([np.mean(per[f]) for f in common]))

    def on_common(family: str) -> dict[str, list[float]] | None:
        """The family's per-run hypervolumes on each common function (the verdict's values)."""
        per = hv_by_function.get(family, {})
        if not common or any(f not in per for f in common):
            return None
        return {f: per[f] for f in common}

    table = []
    for m, per in sorted(hv_by_function.items()):
        areas = [a for runs in per.values() for a in runs]
        strata = list((on_common(m) or {}).values())
        low, high = bootstrap_interval_stratified(strata) if strata else (None, None)
        table.append(
            [
                m,
                len(areas),
                float(np.mean(areas)),
                ", ".join(sorted(per)),
                common_mean(m),
                low,
                high,
            ]
        )
    write_csv(
        ctx.out / "difficulty_pareto.csv",
        ["kind", "a", "b", "c", "d"],
        [["difficulty", *r] for r in diff_rows]
        + [["frontier", *r, ""] for r in frontier_rows]
        + [["hypervolume", *r[:3], "", ""] for r in table],
    )
    figure, axes = pyplot().subplots(1, 2, figsize=(9, 3.4), dpi=100)
    if path.exists():
        for p in sorted({r[0] for r in diff_rows}):
            mine = [r for r in diff_rows if r[0] == p]
            axes[0].plot(range(len(mine)), [r[3] for r in mine], marker="o", label=f"vary {p}")
        axes[0].set_xlabel("setting (low -> high)")
        axes[0].set_ylabel("GA mean regret over the run")
        axes[0].legend(fontsize=7)
    for family in sorted({r[0] for r in frontier_rows}):
        mine = [r for r in frontier_rows if r[0] == family]
        axes[1].step(
            [r[1] for r in mine], [r[2] for r in mine], where="post", marker="o", label=family
        )
    axes[1].set_xlabel("oracle labels")
    axes[1].set_ylabel("min regret (Pareto frontier)")
    if frontier_rows:
        axes[1].legend(fontsize=6)
    for axis in axes:
        axis.grid(alpha=0.3)
    save_figure(figure, ctx.out / "difficulty_pareto.png")
    parts.append(
        markdown_table(
            [
                "method",
                "runs",
                f"mean hypervolume (K labels x regret over {ctx.budget} labels after round 0)",
                "functions",
                f"mean over {', '.join(common) or '(no common function)'}",
                "95% CI low",
                "95% CI high",
            ],
            table,
        )
        + "\n\nThe hypervolume compared is a mean (over the common functions of the mean over "
        "a function's runs), not a median; `95% CI`: its percentile bootstrap interval, runs "
        "resampled within each function (10,000 resamples, seed 0)."
    )
    if early := early_stops(ctx, ctx.runs):
        parts.append(
            "Runs that stopped before the budget keep their last min regret to the end of the "
            f"hypervolume's window ({ctx.budget} labels after round 0): {early}."
        )
    hypervolumes = {m: on_common(m) for m in hv_by_function}
    for variant in ("LLOME-SFT", "LLOME-MargE", "LLOME-DPO"):
        verdicts.append(ctx.check(vd.pareto_llome_variant_below(variant, hypervolumes), ctx.runs))
    return "\n\n".join(parts), verdicts
