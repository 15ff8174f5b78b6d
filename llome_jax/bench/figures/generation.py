"""The figures read off what LLOME generated: 2 (diversity and feasibility), 3 (calibration),
6 (iterative refinement) and 7 (candidate selection), from the runs' records and candidate logs
(``candidates/round_NNNN.npz``: every candidate of a round with its likelihood, value,
feasibility, refinement iteration and whether the Filter selected it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np

from llome_jax.bench import verdicts as vd
from llome_jax.bench.figures.plots import plot_calibration, pyplot, save_figure
from llome_jax.bench.plan import RunSpec
from llome_jax.bench.results import (
    CI_NOTE,
    Context,
    markdown_table,
    median_ci,
    read_candidates,
    regret_of,
    write_csv,
)
from llome_jax.bench.verdicts import Verdict

__all__ = [
    "CALIBRATION_HEADER",
    "calibration_rows",
    "figure_calibration",
    "figure_diversity",
    "figure_refinement",
    "figure_selection",
    "logged_candidates",
]


def _diversity_values(
    ctx: Context, spec: RunSpec, records: list[dict]
) -> tuple[list[list[Any]], str]:
    """Per round >= 1: ``[round, num_evaluations, frac_unique, frac_feasible]`` measured on what
    the method generated or proposed before any filter, and what that is. ``None`` where the run
    did not record it so (:func:`~llome_jax.bench.verdicts.diversity_lambo2_most_unique`)."""
    later = [r for r in records if r["round"] >= 1]
    if (archived := ctx.archived.get(spec)) is not None:
        if archived.diversity is None:
            raise ValueError(f"the archive has no diversity rows of {spec.name}")
        return [list(row) for row in archived.diversity], archived.measured_on

    def finite(x: Any) -> float | None:
        return None if x is None or not math.isfinite(float(x)) else float(x)

    if spec.kind == "llome":  # before the Filter: the candidate log's feasibility
        logs = {int(log["round"]): log for log in read_candidates(ctx.out / "runs" / spec.name)}
        rows = []
        for r in later:
            log = logs.get(int(r["round"]))
            if log is not None and log["feasible"].size:
                feasible = float(np.mean(log["feasible"]))
            else:
                feasible = finite(r.get("frac_feasible_generated"))
            rows.append([r["round"], r["num_evaluations"], finite(r.get("frac_unique")), feasible])
        return rows, "generated before the Filter (unique valid / all outputs; log's feasible)"
    if spec.kind == "ga":
        rows = [
            [r["round"], r["num_evaluations"]]
            + (
                [None, None]  # recorded before num_proposals: over the de-duplicated archive
                if r.get("num_proposals") is None
                else [finite(r.get("frac_unique")), finite(r.get("frac_feasible"))]
            )
            for r in later
        ]
        return rows, "its proposals (all particles of the round)"
    rows = [
        [
            r["round"],
            r["num_evaluations"],
            finite(r.get("frac_unique")),
            finite(r.get("frac_feasible")),
        ]
        for r in later
    ]
    return rows, "its proposals (j a round)"


def _run_mean(values: Sequence[float | None]) -> float | None:
    """The mean over a run's rounds; ``None`` if a round's value is missing or unlike."""
    if not values or any(v is None for v in values):
        return None
    return float(np.mean([float(v) for v in values if v is not None]))


def figure_diversity(ctx: Context) -> tuple[str, list[Verdict]]:
    """Figure 2: fraction unique and feasible of what each method generated or proposed on f2,
    before any filter (``diversity.csv``)."""
    plt = pyplot()
    rows = []
    unique: dict[str, list[float | None]] = {}
    feasible: dict[str, list[float | None]] = {}
    series: dict[str, tuple[list, list]] = {}
    measured_on: dict[str, str] = {}
    figure, axes = plt.subplots(1, 2, figsize=(9, 3.4), dpi=100)
    for spec, records in sorted(ctx.select("diversity", "f2").items(), key=lambda kv: kv[0].name):
        values, measured_on[spec.method] = _diversity_values(ctx, spec, records)
        rows += [[spec.method, spec.seed, *v, measured_on[spec.method]] for v in values]
        u, f = [v[2] for v in values], [v[3] for v in values]
        unique.setdefault(spec.method, []).append(_run_mean(u))
        feasible.setdefault(spec.method, []).append(_run_mean(f))
        su, sf = series.setdefault(spec.method, ([], []))
        su.append(u)
        sf.append(f)
        x = [v[1] for v in values]
        label = f"{spec.method} s{spec.seed}"
        axes[0].plot(x, [np.nan if v is None else v for v in u], marker="o", label=label)
        axes[1].plot(x, [np.nan if v is None else v for v in f], marker="o", label=label)
    for axis, title in zip(axes, ("fraction unique", "fraction feasible (before any filter)")):
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("oracle labels")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=6)
    save_figure(figure, ctx.out / "diversity.png")
    header = [
        "method",
        "seed",
        "round",
        "num_evaluations",
        "frac_unique",
        "frac_feasible",
        "measured_on",
    ]
    write_csv(ctx.out / "diversity.csv", header, rows)

    def median(runs: list[float | None]) -> float | None:
        return None if any(v is None for v in runs) else float(np.median(runs))

    table = [
        [
            m,
            len(unique[m]),
            median(unique[m]),
            *median_ci(unique[m]),
            median(feasible[m]),
            *median_ci(feasible[m]),
            measured_on[m],
        ]
        for m in sorted(unique)
    ]
    dpo_u, dpo_f = series.get("LLOME-DPO", ([], []))
    verdicts = [
        vd.diversity_lambo2_most_unique(unique),
        vd.diversity_lambo2_most_feasible(feasible),
        *(
            vd.diversity_more_unique_than_ga(m, unique)
            for m in ("LaMBO-2", "LLOME-MargE", "LLOME-SFT")
        ),
        vd.diversity_dpo_does_not_improve(dpo_u, dpo_f),
    ]
    body = markdown_table(
        [
            "method",
            "runs",
            "median frac_unique (mean of rounds >= 1)",
            "95% CI low",
            "95% CI high",
            "median frac_feasible",
            "95% CI low",
            "95% CI high",
            "measured on",
        ],
        table,
    )
    note = (
        "LLOME is measured on what it generated, before the Filter (whose infeasible cap sets "
        "the labelled rows' feasibility); the GA and LaMBO-2 on what they proposed. n/a: the "
        "run did not record it that way (a GA run recorded before `num_proposals` measured "
        "uniqueness on its de-duplicated archive, 1.0 by construction). " + CI_NOTE
    )
    return body + "\n\n" + note, verdicts


def logged_candidates(
    ctx: Context, specs: Collection[RunSpec], label: Callable[[RunSpec], str] = lambda s: s.method
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """label -> (likelihood ``exp(mean raw log-prob)``, ``f``) of every logged candidate of the
    runs (all rounds); a label without a candidate log is absent."""
    pooled: dict[str, tuple[list, list]] = {}
    for spec in sorted(specs, key=lambda s: s.name):
        for log in read_candidates(ctx.out / "runs" / spec.name):
            lik, val = pooled.setdefault(label(spec), ([], []))
            lik.append(np.exp(log["log_likelihood_raw"].astype(np.float64)))
            val.append(log["values"].astype(np.float64))
    return {k: (np.concatenate(lik), np.concatenate(val)) for k, (lik, val) in pooled.items()}


def calibration_rows(logged: dict[str, tuple[np.ndarray, np.ndarray]], bins: int = 5) -> list:
    """Per label: likelihood-quantile bins of every logged candidate with the bin's mean
    likelihood, feasible fraction, mean and min regret of its feasible candidates and counts."""
    rows = []
    for label, (lik, val) in logged.items():
        if lik.size == 0:
            continue
        feasible = np.isfinite(val)
        edges = np.quantile(lik, np.linspace(0, 1, bins + 1))
        which = np.clip(np.searchsorted(edges, lik, side="right") - 1, 0, bins - 1)
        for b in range(bins):
            mask = which == b
            if not mask.any():
                continue
            ok = mask & feasible
            regret = 1.0 - val[ok]
            rows.append(
                [
                    label,
                    b,
                    float(lik[mask].mean()),
                    float(feasible[mask].mean()),
                    float(regret.mean()) if regret.size else None,
                    float(regret.min()) if regret.size else None,
                    int(mask.sum()),
                    int(ok.sum()),
                ]
            )
    return rows


#: the columns of ``calibration.csv`` (one row per method and likelihood bin)
CALIBRATION_HEADER = [
    "method",
    "bin",
    "mean_likelihood",
    "frac_feasible",
    "mean_regret_feasible",
    "min_regret_feasible",
    "count",
    "feasible",
]


def figure_calibration(ctx: Context) -> tuple[str, list[Verdict]]:
    """Figure 3: likelihood against regret of LLOME-MargE's and LLOME-SFT's logged candidates
    on f2 (``calibration.csv``: likelihood-quantile bins)."""
    logged = logged_candidates(ctx, ctx.select("calibration", "f2"))
    rows = calibration_rows(logged)
    write_csv(ctx.out / "calibration.csv", CALIBRATION_HEADER, rows)
    plot_calibration(ctx.out / "calibration.png", rows)
    table, verdicts = [], []
    for method in ("LLOME-MargE", "LLOME-SFT"):
        lik, val = logged.get(method, (None, None))
        if lik is not None:
            rho, n = vd.spearman_feasible(lik, val)
            rho_high, n_high = vd.spearman_feasible(lik, val, above=vd.HIGH_LIKELIHOOD)
            table.append([method, int(lik.size), n, rho, n_high, rho_high])
        verdicts += [
            vd.calibration_higher_likelihood_lower_regret(method, lik, val),
            vd.calibration_overconfident(method, lik, val),
        ]
    header = [
        "method",
        "candidates",
        "feasible",
        "Spearman rho(likelihood, regret), feasible",
        f"feasible above likelihood {vd.HIGH_LIKELIHOOD}",
        f"rho above {vd.HIGH_LIKELIHOOD}",
    ]
    return (
        markdown_table(header, table)
        + "\n\n"
        + markdown_table(CALIBRATION_HEADER, rows)
        + "\n\nRegret is over feasible candidates only (an infeasible one is not a regret of 1 "
        "here: counted so, the correlation measured feasibility).",
        verdicts,
    )


def figure_refinement(ctx: Context) -> tuple[str, list[Verdict]]:
    """Figure 6: min regret of the candidates per refinement iteration (``refinement.csv``)."""
    rows = []
    by_iteration: dict[str, dict[int, list[float]]] = {}
    per_round: dict[str, list[list[float]]] = {}
    selected = ctx.select("refinement", "f2")
    for spec in sorted(selected, key=lambda s: s.name):
        for log in read_candidates(ctx.out / "runs" / spec.name):
            reg = regret_of(log["values"])
            mins = []
            for it in sorted(set(log["iteration"].tolist())):
                m = float(reg[log["iteration"] == it].min())
                mins.append(m)
                rows.append(
                    [
                        spec.method,
                        spec.seed,
                        int(log["round"]),
                        int(it),
                        m,
                        int((log["iteration"] == it).sum()),
                    ]
                )
                by_iteration.setdefault(spec.method, {}).setdefault(int(it), []).append(m)
            per_round.setdefault(spec.method, []).append(mins)
    header = ["method", "seed", "round", "iteration", "min_regret", "candidates"]
    write_csv(ctx.out / "refinement.csv", header, rows)
    figure, axis = pyplot().subplots(figsize=(4.5, 3.4), dpi=100)
    means = {}
    for method, its in sorted(by_iteration.items()):
        keys = sorted(its)
        means[method] = [float(np.mean(its[k])) for k in keys]
        axis.plot(keys, means[method], marker="o", label=method)
    axis.set_xlabel("refinement iteration")
    axis.set_ylabel("min regret of candidates (mean over rounds)")
    axis.grid(alpha=0.3)
    if means:
        axis.legend(fontsize=7)
    save_figure(figure, ctx.out / "refinement.png")
    table = [[m, " -> ".join(f"{v:.3f}" for v in vals)] for m, vals in means.items()]
    methods = sorted({s.method for s in selected})
    verdicts = []
    for m in methods:
        verdicts += [
            vd.refinement_reduces_regret(m, per_round.get(m, [])),
            vd.refinement_first_edits_help_most(m, per_round.get(m, [])),
        ]
    body = markdown_table(
        ["method", "min regret per iteration (mean over rounds and seeds)"], table
    )
    return body, verdicts


def figure_selection(ctx: Context) -> tuple[str, list[Verdict]]:
    """Figure 7: the j candidates selected by likelihood against the oracle's best j, per
    round (``selection.csv``)."""
    rows = []
    rounds: dict[str, list[vd.SelectionRound]] = {}
    selected_specs = ctx.select("selection", "f2")
    for spec in sorted(selected_specs, key=lambda s: s.name):
        for log in read_candidates(ctx.out / "runs" / spec.name):
            reg, sel = regret_of(log["values"]), log["selected"].astype(bool)
            j = int(sel.sum())
            if j == 0:
                continue
            oracle = np.sort(reg)[:j]
            row = [
                spec.method,
                spec.seed,
                int(log["round"]),
                int(reg.size),
                j,
                float(reg[sel].min()),
                float(oracle.min()),
                float(reg[sel].mean()),
                float(oracle.mean()),
                float(reg.mean()),
            ]
            rows.append(row)
            rounds.setdefault(spec.method, []).append(
                vd.SelectionRound(row[3], row[4], row[5], row[6], row[7], row[9])
            )
    header = [
        "method",
        "seed",
        "round",
        "candidates",
        "j",
        "min_regret_likelihood",
        "min_regret_oracle",
        "mean_regret_likelihood",
        "mean_regret_oracle",
        "mean_regret_all",
    ]
    write_csv(ctx.out / "selection.csv", header, rows)
    figure, axis = pyplot().subplots(figsize=(4.8, 3.4), dpi=100)
    for method in sorted({r[0] for r in rows}):
        mine = [
            r for r in rows if r[0] == method and r[1] == min(x[1] for x in rows if x[0] == method)
        ]
        axis.plot(
            [r[2] for r in mine], [r[5] for r in mine], marker="o", label=f"{method}: likelihood"
        )
        axis.plot(
            [r[2] for r in mine],
            [r[6] for r in mine],
            marker="x",
            ls="--",
            label=f"{method}: oracle",
        )
    axis.set_xlabel("round (candidates after the GA's labels)")
    axis.set_ylabel("min regret of the j selected")
    axis.grid(alpha=0.3)
    if rows:
        axis.legend(fontsize=6)
    save_figure(figure, ctx.out / "selection.png")
    verdicts = []
    for m in sorted({s.method for s in selected_specs}):
        verdicts += [
            vd.selection_misses_best_often(m, rounds.get(m, [])),
            vd.selection_high_scoring(m, rounds.get(m, [])),
        ]
    return markdown_table(header, rows), verdicts
