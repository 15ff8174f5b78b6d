"""The report: ``OUT/report.md`` (the paper's claims beside our numbers, one verdict per
sub-claim, each figure's PNG embedded) and ``OUT/curves.csv`` (every run's curve, round by round).

:func:`write_report` reads every planned run directory, counts only finished runs
(``done.json``) in the figures, lists every run with its state, label accounting and label audit,
and calls each selected figure (:data:`llome_jax.bench.figures.FIGURE_FUNCTIONS`); a figure that
cannot be drawn says why and the others go on. At smoke scale every agree / disagree is reported
as inconclusive (a pipeline check, :func:`llome_jax.bench.verdicts.at_smoke_scale`).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from llome_jax.bench import verdicts as vd
from llome_jax.bench.figures import FIGURE_FUNCTIONS
from llome_jax.bench.plan import FIGURES, RunSpec, Scale
from llome_jax.bench.results import (
    ACCOUNTING_TEXT,
    ArchivedRun,
    Context,
    accounting_of,
    markdown_table,
    read_archive,
    read_rounds,
    regret_curves,
    write_csv,
)
from llome_jax.run.label_audit import (
    cached_label_audit,
    label_audit_summary,
    read_audit_cache,
    write_audit_cache,
)
from llome_jax.stats import smallest_p

if TYPE_CHECKING:
    from llome_jax.run.label_audit import LabelAudit

__all__ = ["CLAIMS", "CURVE_COLUMNS", "STEP_COLUMNS", "write_curves", "write_report", "write_steps"]

#: where the report keeps each finished run's label audit between reports, under ``out``
#: (:func:`~llome_jax.run.label_audit.cached_label_audit`: ``evaluated.csv`` is read again only
#: when it or ``rounds.jsonl`` changed)
AUDIT_CACHE = pathlib.Path(".cache") / "label_audits.json"

#: what the paper says, quoted from paper.tex
CLAIMS: dict[str, str] = {
    "solver": (
        '"On medium-difficulty tasks, LLOME-MargE and LaMBO-2 outperform other methods. On very '
        'easy or difficult tasks, all methods perform comparably." "On f2 LLOME-MargE performs the '
        'best, whereas LaMBO-2 performs the best on f3." (Pythia-2.8B, 10 rounds of j = 2000 after '
        "10K GA labels.)"
    ),
    "diversity": (
        '"LaMBO-2 produces the most diverse and feasible solutions but LLOME-MargE balances '
        'diversity with accuracy." "Compared to the GA, [...] LaMBO-2, LLOME-MargE, and LLOME-SFT '
        'produce significantly higher proportions of unique sequences." "LLOME-DPO does not '
        'improve either the diversity or the feasibility of its outputs." ("the percentage of '
        'generated sequences for f2 that are unique or feasible"; "balances" gives no rule and is '
        "not tested)"
    ),
    "calibration": (
        '"LLOME-MargE and LLOME-SFT assign higher likelihoods to lower regret sequences, but also '
        'exhibit some degree of overconfidence." "the likelihood and reward of SFT- and '
        'MargE-generated sequences are inversely correlated for high likelihoods exceeding 0.7."'
    ),
    "sft_marge": (
        '"LLOME-SFT_1-MargE_9 not only is the sole pipeline to find the optimal solution, but also '
        "achieves the best calibration curve. In contrast, switching from SFT to MargE training at "
        'an intermediate point results in the worst performance."'
    ),
    "reinforce": (
        '"although LLOME-REINFORCE decreases the regret to some degree, it plateaus early and does '
        'not reach optimality" (MargE does).'
    ),
    "refinement": (
        '"LLMs iteratively produce edits that significantly reduce regret. However, the first few '
        'edits frequently improve the sequence whereas later edits are less likely to be helpful."'
    ),
    "selection": (
        '"the likelihood method often selects high-scoring but not the highest scoring candidates"'
    ),
    "half_quant": (
        '"See the Appendix for results on a test function with q < k." (a figure only: min regret '
        "vs evaluations on Ehr(32,32)-4-4-2; no ranking is stated in the text, so we test the f2 "
        "ranking, LLOME-MargE best)"
    ),
    "model_size": (
        '"LLOME-MargE (LLaMA 226K) performs comparably to LLOME-MargE (Pythia 2.8B) and LaMBO-2 up '
        'to 22K test function evaluations, its performance eventually plateaus"'
    ),
    "difficulty_pareto": (
        '"For this optimizer [the GA], the problem difficulty depends most strongly on the '
        'quantization parameter q." "All three LLOME variants exhibit significantly lower average '
        'hypervolume than both the GA and LaMBO-2."'
    ),
}


def _budget_text(ctx: Context) -> str:
    """The label budget of the finished runs as their own ``config.json`` records it: the
    plan's (``N labels after round 0``) when every run's agrees, else each budget and how many
    runs have it, and the plan's (a run made by another plan)."""
    found: dict[object, int] = {}
    for spec in ctx.runs:
        try:
            config = json.loads((ctx.out / "runs" / spec.name / "config.json").read_text())
        except (OSError, ValueError):
            continue  # an archived run, or none recorded: the plan's
        budget = config.get("budget", ctx.budget) if isinstance(config, dict) else ctx.budget
        found[budget] = found.get(budget, 0) + 1
    if set(found) <= {ctx.budget}:
        return f"{ctx.budget} labels after round 0"
    listed = ", ".join(
        f"{budget} labels in {count} run{'s' if count > 1 else ''}"
        for budget, count in sorted(found.items(), key=lambda item: str(item[0]))
    )
    return (
        f"{ctx.budget} labels after round 0 planned, but the finished runs' own differ "
        f"(config.json: {listed}; budget verdicts compare unlike runs)"
    )


def _accounting_line(ctx: Context, specs: Collection[RunSpec]) -> str:
    """Which label accounting the figure's runs use (a budget verdict over both is not
    comparable)."""
    counts: dict[str, int] = {}
    for kind in ctx.accounting(specs):
        counts[kind] = counts.get(kind, 0) + 1
    if not counts:
        return "no finished run"
    return "; ".join(
        f"`{kind}` ({ACCOUNTING_TEXT.get(kind, kind)}): {n} run{'s' if n > 1 else ''}"
        for kind, n in sorted(counts.items())
    ) + (" -- mixed: budget verdicts are not comparable" if len(counts) > 1 else "")


def _audit_cells(audit: LabelAudit | None) -> list[str]:
    """The Runs table's ``labels (distinct)`` and ``constraint queries`` cells of one run."""
    if audit is None:
        return ["", ""]
    queries = "" if audit.constraint_queries is None else f"{audit.constraint_queries:,}"
    return [f"{audit.labels:,} ({audit.distinct:,})", queries]


def _entered(verdict: vd.Verdict) -> str:
    """Which methods decided a claim over "the other methods", and which arms were only shown
    beside it (``""`` where the claim names its methods itself)."""
    if not verdict.methods:
        return ""
    text = f" Decided over: {', '.join(verdict.methods)}"
    if verdict.beside:
        text += f"; beside it, not deciding: {', '.join(verdict.beside)}"
    return text + "."


def _embedded(out: pathlib.Path, key: str, title: str) -> list[str]:
    """The figure's PNG as a markdown image (then a blank line), so a reader of ``report.md``
    sees it; nothing when the figure wrote none."""
    return [f"![{title}]({key}.png)", ""] if (out / f"{key}.png").exists() else []


CURVE_COLUMNS = (
    "run",
    "function",
    "method",
    "seed",
    "state",
    "accounting",
    "round",
    "labels",
    "min_regret",
    "constraint_queries",
)


def write_curves(
    out: pathlib.Path, curves: Sequence[tuple[RunSpec, str, str, Sequence[dict]]]
) -> None:
    """``out/curves.csv`` from ``(spec, state, accounting, rounds)`` per run (``rounds``: its
    ``rounds.jsonl`` records, as :func:`write_report` read them): one row per round
    (``labels``: labels paid so far, round 0 included; ``min_regret``: empty where a round has
    none; ``constraint_queries``: cumulative), with the run's ``state`` (finished / partial) and
    label accounting. Small enough to commit beside ``report.md``, so the curves of figures 1,
    5, 9 and 10 outlive the run directories."""
    rows = [
        [
            spec.name,
            spec.function,
            spec.method,
            spec.seed,
            state,
            accounting,
            r["round"],
            r["num_evaluations"],
            "" if r.get("min_regret") is None else float(r["min_regret"]),
            r.get("cum_constraint_queries", 0),
        ]
        for spec, state, accounting, records in curves
        for r in records
    ]
    write_csv(out / "curves.csv", CURVE_COLUMNS, rows)


STEP_COLUMNS = ("run", "labels", "min_regret")


def write_steps(
    out: pathlib.Path,
    curves: Sequence[tuple[RunSpec, str, str, Sequence[dict]]],
    archived: dict[RunSpec, ArchivedRun],
) -> None:
    """``out/steps.csv``: every run's min-regret curve at label resolution (the curve the
    figures read, :func:`~llome_jax.bench.results.regret_curves`: for a ``pay_once`` run each
    label that lowered the min regret inside a round, besides the round ends), one row per
    point, so that a redraw from the committed folder (``--archive``) reads a run at exactly a
    label count after its directory is gone. An archived run without such a curve is left out
    (its ``curves.csv`` rounds are all there is)."""
    rows = []
    for spec, _, _, records in curves:
        if spec in archived:
            steps = archived[spec].steps
            points = [] if steps is None else list(zip(*steps))
        else:
            found = regret_curves({spec: list(records)}, out).get(spec.method, [])
            points = list(zip(*found[0])) if found else []
        rows += [[spec.name, int(x), float(y)] for x, y in points]
    write_csv(out / "steps.csv", STEP_COLUMNS, rows)


def smallest_p_line(plan: Sequence[RunSpec]) -> str:
    """What the plan's fewest seeds of a method can show: ``"With 2 seeds against 2 the
    smallest two-sided p of an exact permutation test is 2 / C(4, 2) = 0.333: no comparison of
    such methods can reach p < 0.05."`` (the fewest seeds any method of the plan has)."""
    import math

    counts: dict[tuple[str, str], int] = {}
    for spec in plan:
        counts[spec.function, spec.method] = counts.get((spec.function, spec.method), 0) + 1
    if not counts:
        return ""
    n = min(counts.values())
    p = smallest_p(n, n)
    text = (
        f"With {n} seed{'s' if n > 1 else ''} against {n} the smallest two-sided p of an exact "
        f"permutation test is 2 / C({2 * n}, {n}) = {p:.3g}"
    )
    if p >= vd.ALPHA:
        return text + f": no comparison of such methods can reach p < {vd.ALPHA}."
    return text + f" (C({2 * n}, {n}) = {math.comb(2 * n, n)})."


def seeds_line(plan: Sequence[RunSpec]) -> str:
    """The plan's seeds per function and method, e.g. ``f1: 3 (GA), 1 (LLOME-SFT, LaMBO-2);
    f2: 8 (each of 7 methods)`` (functions and methods in plan order)."""
    counts: dict[str, dict[str, int]] = {}
    for spec in plan:
        by_method = counts.setdefault(spec.function, {})
        by_method[spec.method] = by_method.get(spec.method, 0) + 1
    parts = []
    for function, by_method in counts.items():
        if len(set(by_method.values())) == 1:
            (n,) = set(by_method.values())
            what = (
                f"each of {len(by_method)} methods" if len(by_method) > 1 else next(iter(by_method))
            )
            parts.append(f"{function}: {n} ({what})")
            continue
        groups: dict[int, list[str]] = {}
        for method, n in by_method.items():
            groups.setdefault(n, []).append(method)
        text = ", ".join(f"{n} ({', '.join(ms)})" for n, ms in sorted(groups.items(), reverse=True))
        parts.append(f"{function}: {text}")
    return "; ".join(parts) if parts else "no runs"


def write_report(
    out: pathlib.Path,
    scale_name: str,
    scale: Scale,
    plan: list[RunSpec],
    figures: Sequence[str],
    plan_seconds: float,
    archive: pathlib.Path | None = None,
    generator: str = "llome-jax paper",
) -> None:
    """Write ``out/report.md``, ``out/curves.csv`` and each figure's PNG and CSV from the plan's
    run directories. With ``archive`` (a committed report folder, e.g. ``docs/paper/f2``), a
    planned run with no directory under ``out/runs`` is read from the archive's ``curves.csv``
    and ``diversity.csv`` (:func:`~llome_jax.bench.results.read_archive`), so a report can be
    redrawn after some runs were re-made and the others' directories are gone; such runs are
    marked ``archived`` in the run table. ``generator``: the command the header names
    (``llome-jax sweep`` writes its reports through this too).

    Raises:
      ValueError: ``archive`` has no ``curves.csv``.
    """
    stored: dict[str, ArchivedRun] = {} if archive is None else read_archive(archive)
    runs, stop_reasons, accountings, audits = {}, {}, {}, {}
    archived: dict[RunSpec, ArchivedRun] = {}
    status, curves = [], []
    audit_cache = read_audit_cache(out / AUDIT_CACHE)
    for spec in plan:
        path = out / "runs" / spec.name
        records = read_rounds(path)
        if not records and spec.name in stored:
            old = stored[spec.name]
            archived[spec] = old
            state = old.state
            status.append(
                [
                    spec.name,
                    spec.method,
                    len(old.records) - 1,
                    f"{state} (archived)",
                    old.stop_reason,
                ]
            )
            curves.append((spec, state, old.accounting, old.records))
            if state == "finished":
                runs[spec] = old.records
                stop_reasons[spec] = old.stop_reason
                accountings[spec] = old.accounting
            continue
        done = (
            json.loads((path / "done.json").read_text()) if (path / "done.json").exists() else None
        )
        why = done.get("stop_reason") if done else ""
        state = "finished" if done else ("partial" if records else "not run")
        status.append(
            [spec.name, spec.method, len(records) - 1 if records else 0, state, why or ""]
        )
        if not records:
            continue
        accounting = accounting_of(path)
        curves.append((spec, state, accounting, records))
        if done:  # a partial run is listed in the run table, never counted in a figure
            runs[spec] = records
            stop_reasons[spec] = why or ""
            accountings[spec] = accounting
            audits[spec.name] = cached_label_audit(path, audit_cache, spec.name)
    write_audit_cache(out / AUDIT_CACHE, audit_cache)
    ctx = Context(out, scale, scale_name, plan, runs, stop_reasons, accountings, archived)
    write_curves(out, curves)
    write_steps(out, curves, archived)
    write_csv(
        out / "runs.csv",
        ["run", "method", "rounds", "state", "stop_reason"],
        [
            [name, method, rounds, state.split(" ")[0], why]
            for name, method, rounds, state, why in status
        ],
    )
    seeds = seeds_line(plan)
    sections, table, every = [], [], []
    for key in figures:
        drawn = True
        try:
            body, found = FIGURE_FUNCTIONS[key](ctx)
        except Exception as error:  # a figure that cannot be drawn says why; the others go on
            body, found = f"Not available: {type(error).__name__}: {error}", []
            drawn = False
        if scale_name == "smoke":
            found = [vd.at_smoke_scale(v) for v in found]
        every += found
        specs = ctx.runs if key == "difficulty_pareto" else ctx.select(key)
        table.append(f"| {FIGURES[key]} | {vd.summary_line(found) if found else 'not available'} |")
        sections += [
            f"## {FIGURES[key]}",
            "",
            f"**Paper:** {CLAIMS[key]}",
            "",
            f"**Ours** (`{key}.png`, `{key}.csv`):",
            "",
            *(_embedded(out, key, FIGURES[key]) if drawn else []),
            body,
            "",
            f"Label accounting of this figure's runs: {_accounting_line(ctx, specs)}.",
            "",
            "**Verdicts** (one per claim, `llome_jax.bench.verdicts`; with test, n and p):",
            "",
            *(
                f"- {v.claim}: **{v.verdict}** ({v.reason}) [{vd.stated_test(v)}]{_entered(v)}"
                for v in found
            ),
            "",
        ]
    counts = {k: sum(v.verdict == k for v in every) for k in vd.OUTCOMES}
    lines = [
        f"# The paper's figures at `{scale_name}` scale",
        "",
        f"Generated by `{generator}` from the run directories under `runs/` "
        f"(re-draw with `--report-only`). Budget per run: {_budget_text(ctx)} "
        f"({scale.rounds} rounds after the GA's round 0, whose labels every method of a seed "
        f"shares; the paper's 30K = 10K + 20K). Seeds per function and method: "
        f"{seeds}. Planned cost {plan_seconds / 3600:.2f} h "
        "(one core of a shared 2-core CPU, estimated).",
        "",
        f"Label accounting of the finished runs: {_accounting_line(ctx, ctx.runs)}.",
        "",
        "Every run's curve, round by round (labels paid, min regret, constraint queries): "
        "`curves.csv`; at label resolution (each label that lowered the min regret): "
        "`steps.csv`; each run's state and stop reason: `runs.csv`.",
        "",
        *(
            [
                f"{len(archived)} of the {len(plan)} planned runs are read from the committed "
                f"`{archive}` (`curves.csv`, `diversity.csv`, and `steps.csv` where it holds "
                "them; their run directories are not here): a run without `steps.csv` points "
                "is read round by round, so a reading between two of its rounds (figure 9's) "
                "is its earlier round's, and its label audit and stop reason are those of the "
                "report that made it; the others from their run directories under `runs/`.",
                "",
            ]
            if archived
            else []
        ),
        f"Information contract (finished runs): {label_audit_summary(audits)}.",
        "",
        "The models are small and from scratch (LLOME: a ~0.2M-parameter Pythia, LaMBO-2: the "
        "`cpu` CNN), not the paper's Pythia-2.8B and 314K LaMBO-2; "
        + (
            "the smoke scale checks the pipeline only: its numbers say nothing about the paper's claims."
            if scale_name == "smoke"
            else "a verdict compares our numbers with the paper's direction."
        ),
        "",
        *(
            [
                "Reduced at this scale (cost): "
                + "; ".join(f"{f}: {', '.join(m)} only" for f, m in scale.reduced)
                + ". LaMBO-2's round 0 is the GA of the paper's mutation rate (0.005), LLOME's "
                "and the GA's that of the LLOME preset"
                + (
                    " (0.1 at smoke scale, so their round 0 differs)."
                    if scale_name == "smoke"
                    else "."
                ),
                "",
            ]
            if scale.reduced
            else []
        ),
        "Every sub-claim has its own verdict (`llome_jax.bench.verdicts`: agree, disagree, not "
        "comparable: we do not measure what the paper measured, inconclusive: too little to "
        "decide); none is combined. Over all claims: "
        + ", ".join(f"{k} {n}" for k, n in counts.items())
        + ".",
        "",
        "A comparison over seeds (of methods, or of one method at two points) agrees or "
        "disagrees only when its rule (medians a quantisation level or more apart, or their "
        "strict order where there are no levels) and its exact test on the per-seed values (a "
        f"two-sided permutation or sign-flip test at alpha = {vd.ALPHA}; TOST for 'comparably') "
        "both say so; otherwise it is inconclusive, with the direction and p. Each verdict lists "
        f"its test, n and p. {smallest_p_line(plan)}",
        "",
        "| figure | verdicts |",
        "|---|---|",
        *table,
    ]
    lines += [
        "",
        *sections,
        "## Runs",
        "",
        markdown_table(
            [
                "run",
                "method",
                "rounds",
                "state",
                "accounting",
                "labels (distinct)",
                "constraint queries",
                "stop reason",
            ],
            [
                [*row[:4], accountings.get(spec, ""), *_audit_cells(audits.get(spec.name)), row[4]]
                for spec, row in zip(plan, status)
            ],
        ),
        "",
    ]
    (out / "report.md").write_text("\n".join(lines))
