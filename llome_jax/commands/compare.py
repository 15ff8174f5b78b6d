"""``llome-jax compare``: several run directories side by side at equal label budgets."""

from __future__ import annotations

import argparse
from typing import Any

NAME = "compare"
HELP = (
    "Compare run directories (GA, LLOME, LaMBO-2; one per seed) at equal label budgets: median "
    "(with its bootstrap interval) and range of the min regret per method (and how many runs "
    "ended before the budget), whether each run paid every label once and asked constraint "
    "queries, a plot, curves.csv and summary.csv; --metric cumulative-regret, --x wall-clock."
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
        type=float,
        action="append",
        default=None,
        help="label budget(s) for the table, in labels paid in all, round 0 included (after "
        "round 0 with --after-round-0; seconds with --x wall-clock; repeatable; default: the "
        "most every run still going has paid, printed with the table)",
    )
    parser.add_argument(
        "--metric",
        choices=("min-regret", "cumulative-regret"),
        default="min-regret",
        help="min-regret (default; best value for runs without a known optimum) or "
        "cumulative-regret: holo-bench's sum of the min regret after each label paid after "
        "round 0 (lower is better)",
    )
    parser.add_argument(
        "--x",
        dest="axis",
        choices=("labels", "wall-clock"),
        default="labels",
        help="the budget's axis: labels paid (default) or wall-clock seconds (each run's "
        "rounds.jsonl seconds, summed; read at the last round that ended by then)",
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

    import numpy as np

    from llome_jax.commands._common import check_out
    from llome_jax.compare import after_round0, common_budget, load_runs, summarise
    from llome_jax.run.label_audit import label_audit, label_audit_summary

    axis = "wall_clock" if args.axis == "wall-clock" else "labels"
    if args.budget is not None:
        if axis == "labels" and any(b != int(b) for b in args.budget):
            raise ValueError("--budget counts labels: give whole numbers (seconds: --x wall-clock)")
        if min(args.budget) < (0 if axis == "wall_clock" else 1):
            raise ValueError(f"--budget must be >= 1, got {min(args.budget):g}.")
        args.budget = [int(b) if axis == "labels" else b for b in args.budget]
    check_out(args.out)
    runs = load_runs(args.runs, allow_mixed=args.allow_mixed)
    if args.after_round_0:
        runs = [after_round0(run) for run in runs]
    metric = runs[0].metric
    if args.metric == "cumulative-regret":
        if metric != "min_regret":
            raise ValueError(
                "--metric cumulative-regret needs the min regret (a known optimum); these runs "
                "record only the best value"
            )
        metric = "cumulative_regret"
    if axis == "wall_clock":
        missing = [str(r.path) for r in runs if r.clock is None]
        if missing:
            raise ValueError(
                f"--x wall-clock needs each round's seconds; {missing[0]} has none in its "
                "rounds.jsonl"
            )
    unit = "after round 0" if args.after_round_0 else "in all, round 0 included"
    if axis == "wall_clock":
        unit = "seconds " + ("after round 0" if args.after_round_0 else "of wall clock")
    else:
        unit = "labels " + unit
    budgets = args.budget or [common_budget(runs, axis)]
    name = {
        "min_regret": "min regret",
        "best_value": "best value",
        "cumulative_regret": "cumulative regret",
    }[metric]
    rows = [row for budget in budgets for row in summarise(runs, budget, metric, axis)]
    problems = sorted({run.problem for run in runs})
    print(f"{name} on {'; '.join(problems)} ({len(runs)} runs)")
    if metric == "cumulative_regret":
        print(
            "cumulative regret: the sum over the labels paid after round 0 of the min regret "
            "after each (holo-bench's cumulative regret, per label; lower is better)"
        )
    if axis == "wall_clock":
        machines = sorted({r.machine or "unrecorded" for r in runs})
        print(
            "wall clock: each run's rounds.jsonl seconds summed, read at the last round that "
            f"ended by the budget; device(s): {'; '.join(machines)} (load: the 1-minute load "
            "average when each run started; the load during a run is not recorded)"
        )
    if args.budget is None:
        stopped = sum(bool(run.stop_reason) for run in runs)
        shown = f"{budgets[0]:.1f}" if axis == "wall_clock" else str(budgets[0])
        print(
            f"budget: {shown} {unit} (the default: the most every "
            "run still going has paid"
            + (f"; {stopped} run(s) that stopped early keep their final value" if stopped else "")
            + "; --budget N for others)"
        )
    print(
        f"| method | budget{' (s)' if axis == 'wall_clock' else ''} | labels read | runs "
        f"| median {name} | 95% CI | min | max | ended before |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        counted = sum(v == v for v in row.per_run)
        budget = f"{row.budget:.1f}" if axis == "wall_clock" else str(row.budget)
        print(
            f"| {row.label} | {budget} | {_span(row.labels)} | {counted} of "
            f"{len(row.per_run)} | {_cell(row.median)} | {_interval(row.ci_low, row.ci_high)} | "
            f"{_cell(row.low)} | {_cell(row.high)} | {row.ended_before} |"
        )
    print(ci_note([len(row.per_run) for row in rows]))
    for row in rows:
        for run, value in zip([r for r in runs if r.label == row.label], row.per_run):
            if value != value:
                if axis == "wall_clock":
                    print(
                        f"n/a for {run.path}: its round 0 took {run.clock[0]:.1f} s, more than "
                        f"the budget {row.budget:.1f} s"
                    )
                    continue
                print(
                    f"n/a for {run.path}: its round 0 paid {int(run.evaluations[0])} labels, "
                    f"more than the budget {row.budget}"
                )
    audits = {str(r.path): label_audit(r.path) for r in runs}
    print(f"information contract: {label_audit_summary(audits)}")
    if args.out is None:
        return 0
    from llome_jax.run.plotting import plot_regret_curves

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    curve_of = {str(r.path): _curve(r, metric, axis) for r in runs}
    with open(out / "curves.csv", "w", newline="") as stream:
        writer = csv.writer(stream)
        x_name = "labels_after_round_0" if args.after_round_0 else "num_evaluations"
        if axis == "wall_clock":
            x_name = "seconds_after_round_0" if args.after_round_0 else "seconds"
        writer.writerow(["method", "run", x_name, metric])
        for r in runs:
            for x, y in zip(*curve_of[str(r.path)]):
                writer.writerow(
                    [r.label, str(r.path), float(x) if axis != "labels" else int(x), float(y)]
                )
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
                "metric",
                "axis",
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
                    row.metric,
                    row.axis,
                ]
            )
    curves: dict[str, list] = {}
    until = max(curve_of[str(r.path)][0][-1] for r in runs)
    stopped: dict[str, list[tuple[float, float]]] = {}
    for r in runs:  # a run that stopped early keeps its final value, as the table reads it
        x, y = curve_of[str(r.path)]
        curves.setdefault(r.label, []).append(_extended(r, x, y, until, metric))
        if r.stop_reason and x[-1] < until:  # ... and is marked where it ended
            stopped.setdefault(r.label, []).append((x[-1], y[-1]))
    xlabel = "labels paid after round 0" if args.after_round_0 else "labels paid"
    if axis == "wall_clock":
        xlabel = "seconds after round 0" if args.after_round_0 else "wall-clock seconds"
    regret_in_unit = all(
        float(np.nanmax(curve_of[str(r.path)][1])) <= 1.0 for r in runs
    )  # Ehrlich's [0, 1]; another objective's regret has its own units
    plot_regret_curves(
        curves,
        out / "compare.png",
        title=args.title if args.title is not None else "; ".join(problems),
        ylabel={
            "min_regret": "min simple regret",
            "best_value": "best value so far",
            "cumulative_regret": "cumulative regret (sum over labels)",
        }[metric],
        log_x=args.log_x,
        xlabel=xlabel,
        ylim=(-0.02, 1.02) if metric == "min_regret" and regret_in_unit else None,
        stopped=stopped,
    )
    print(f"wrote {out}/compare.png, curves.csv, summary.csv")
    return 0


def _curve(run: Any, metric: str, axis: str) -> tuple[Any, Any]:
    """The run's plotted curve: ``(labels or seconds, metric)``."""
    from llome_jax.compare import cumulative_curve, wall_clock_curve

    if axis == "wall_clock":
        return wall_clock_curve(run, metric)
    if metric == "cumulative_regret":
        return cumulative_curve(run)
    return run.evaluations, run.values


def _extended(run: Any, x: Any, y: Any, until: float, metric: str) -> tuple[Any, Any]:
    """A run that stopped early carried on to ``until``: flat for min regret / best value, its
    cumulative regret growing by its last min regret per label (on the label axis)."""
    import numpy as np

    if not run.stop_reason or x[-1] >= until:
        return x, y
    last = y[-1]
    if metric == "cumulative_regret" and len(x) == len(run.evaluations):
        last = y[-1] + float(np.minimum.accumulate(run.values)[-1]) * (until - x[-1])
    return np.append(x, until), np.append(y, last)


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
