"""``llome-jax compare``: several run directories side by side at equal label budgets."""

from __future__ import annotations

import argparse

NAME = "compare"
HELP = (
    "Compare run directories (GA, LLOME, LaMBO-2; one per seed) at equal label budgets: median "
    "(with its bootstrap interval) and range of the min regret per method (and how many runs "
    "ended before the budget), whether each run paid every label once and asked constraint "
    "queries, a plot, curves.csv and summary.csv."
)
ORDER = 60


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="[LABEL=]DIR",
        help="run directories, or glob patterns in quotes ('runs/marge_s*'); LABEL= names the "
        "method (default: the run's own method: GA, LaMBO-2, LLOME-MargE, ...)",
    )
    parser.add_argument(
        "--budget",
        type=int,
        action="append",
        default=None,
        help="label budget(s) for the table, in labels paid in all, round 0 included (after "
        "round 0 with --after-round-0; repeatable; default: the most every run still going has "
        "paid, printed with the table)",
    )
    parser.add_argument(
        "--after-round-0",
        action="store_true",
        help="count labels after each run's round 0 (--budget, the default budget, the table, "
        "the CSVs and the plot): every run is read at exactly N labels after its own round 0, "
        "as llome-jax paper reads its runs",
    )
    parser.add_argument("--out", default=None, help="write compare.png, curves.csv, summary.csv")
    parser.add_argument("--title", default=None, help="plot title (default: the problem)")
    parser.add_argument("--log-x", action="store_true", help="logarithmic label axis")
    parser.add_argument(
        "--allow-mixed",
        action="store_true",
        help="compare runs on different functions or instances anyway",
    )


def _cell(value: float) -> str:
    return "n/a" if value != value else f"{value:.4f}"


def _interval(low: float, high: float) -> str:
    return "n/a" if low != low else f"{low:.4f}-{high:.4f}"


def _span(labels: tuple[int, ...]) -> str:
    """``"21100"`` when every run was read at one label count, else ``"20841-21100"``."""
    return str(labels[0]) if min(labels) == max(labels) else f"{min(labels)}-{max(labels)}"


def run(args: argparse.Namespace) -> int:
    import csv
    import pathlib

    from llome_jax.commands._common import check_out
    from llome_jax.compare import after_round0, common_budget, extended, load_runs, summarise
    from llome_jax.label_audit import label_audit, label_audit_summary

    if args.budget is not None and min(args.budget) < 1:
        raise ValueError(f"--budget must be >= 1, got {min(args.budget)}.")
    check_out(args.out)
    runs = load_runs(args.runs, allow_mixed=args.allow_mixed)
    if args.after_round_0:
        runs = [after_round0(run) for run in runs]
    unit = "after round 0" if args.after_round_0 else "in all, round 0 included"
    budgets = args.budget or [common_budget(runs)]
    metric = runs[0].metric
    name = "min regret" if metric == "min_regret" else "best value"
    rows = [row for budget in budgets for row in summarise(runs, budget)]
    problems = sorted({run.problem for run in runs})
    print(f"{name} on {'; '.join(problems)} ({len(runs)} runs)")
    if args.budget is None:
        stopped = sum(bool(run.stop_reason) for run in runs)
        print(
            f"budget: {budgets[0]} labels {unit} (the default: the most every "
            "run still going has paid"
            + (f"; {stopped} run(s) that stopped early keep their final value" if stopped else "")
            + "; --budget N for others)"
        )
    print(
        f"| method | budget | labels read | runs | median {name} | 95% CI | min | max "
        "| ended before |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        counted = sum(v == v for v in row.per_run)
        print(
            f"| {row.label} | {row.budget} | {_span(row.labels)} | {counted} of "
            f"{len(row.per_run)} | {_cell(row.median)} | {_interval(row.ci_low, row.ci_high)} | "
            f"{_cell(row.low)} | {_cell(row.high)} | {row.ended_before} |"
        )
    print(ci_note([len(row.per_run) for row in rows]))
    for row in rows:
        for run, value in zip([r for r in runs if r.label == row.label], row.per_run):
            if value != value:
                print(
                    f"n/a for {run.path}: its round 0 paid {int(run.evaluations[0])} labels, "
                    f"more than the budget {row.budget}"
                )
    audits = {str(r.path): label_audit(r.path) for r in runs}
    print(f"information contract: {label_audit_summary(audits)}")
    if args.out is None:
        return 0
    from llome_jax.plotting import plot_regret_curves

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "curves.csv", "w", newline="") as stream:
        writer = csv.writer(stream)
        x_name = "labels_after_round_0" if args.after_round_0 else "num_evaluations"
        writer.writerow(["method", "run", x_name, metric])
        for r in runs:
            for x, y in zip(r.evaluations, r.values):
                writer.writerow([r.label, str(r.path), int(x), float(y)])
    with open(out / "summary.csv", "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(
            [
                "method",
                "budget",
                "runs",
                "median",
                "median_ci95_low",
                "median_ci95_high",
                "min",
                "max",
                "ended_before",
                "per_run",
                "labels_read",
            ]
        )
        for row in rows:
            per_run = " ".join(_cell(v) for v in row.per_run)
            writer.writerow(
                [
                    row.label,
                    row.budget,
                    len(row.per_run),
                    row.median,
                    row.ci_low,
                    row.ci_high,
                    row.low,
                    row.high,
                    row.ended_before,
                    per_run,
                    " ".join(str(n) for n in row.labels),
                ]
            )
    curves: dict[str, list] = {}
    until = max(r.evaluations[-1] for r in runs)
    stopped: dict[str, list[tuple[float, float]]] = {}
    for r in runs:  # a run that stopped early keeps its final value, as the table reads it
        curves.setdefault(r.label, []).append(extended(r, until))
        if r.stop_reason and r.evaluations[-1] < until:  # ... and is marked where it ended
            stopped.setdefault(r.label, []).append((r.evaluations[-1], r.values[-1]))
    plot_regret_curves(
        curves,
        out / "compare.png",
        title=args.title if args.title is not None else "; ".join(problems),
        ylabel="min simple regret" if metric == "min_regret" else "best value so far",
        log_x=args.log_x,
        xlabel="labels paid after round 0" if args.after_round_0 else "labels paid",
        ylim=(-0.02, 1.02) if metric == "min_regret" else None,
        stopped=stopped,
    )
    print(f"wrote {out}/compare.png, curves.csv, summary.csv")
    return 0


def ci_note(runs_per_method: list[int]) -> str:
    """The table's note on the interval, with the runs it is over: ``"... over the runs (3 a
    method, 10,000 resamples, seed 0); with 3 runs a method it spans nearly their range."``; the
    last clause only where a method has 5 runs or fewer."""
    low, high = min(runs_per_method), max(runs_per_method)
    count = f"{low}" if low == high else f"{low}-{high}"
    word = "run" if high == 1 else "runs"
    text = (
        "95% CI: the median's percentile bootstrap interval over the runs "
        f"({count} {word} a method, 10,000 resamples, seed 0)"
    )
    if low <= 5:
        text += f"; with {low} {'run' if low == 1 else 'runs'} a method it spans nearly their range"
    return text + "."
