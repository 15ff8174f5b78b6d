"""f2's runs read by wall clock (issue 66): the seconds each method takes to pay its labels, and
the min regret each has reached after equal seconds.

Reads finished run directories of ``llome-jax paper --functions f2`` (one per method and seed;
their ``rounds.jsonl`` time every round, round 0 included) through :mod:`llome_jax.compare`,
and writes to ``--out``:

* ``runs.csv``: per run its method, seed, round-0 seconds, the seconds to pay ``--budget``
  labels after round 0 (round 0 included: what a user waits; a run that stopped early, the
  seconds to its end, with the labels it paid and its stop reason), labels per second after
  round 0, its min regret at the budget and the machine its provenance names;
* ``summary.csv``: per method and time ``T`` (seconds since the run started), the median min
  regret of its runs after ``T`` with the 95 % bootstrap interval, min and max, the labels read
  and how many had already ended (a run that paid its budget before ``T`` keeps its final
  value: the label budget is the constraint, the clock a second reading), and the p of the
  exact two-sided permutation test of its runs' values against ``--reference``'s (the GA);
* ``curves.csv``: per run and round its labels, the seconds since the run started at the round's
  end and the min regret then (the data of the plot);
* ``wall_clock.png``: min regret against seconds, one thin line a run, the median a method.

    python experiments/f2_wall_clock.py --runs 'runs/f2/runs/f2/*' --out docs/wall_clock/f2 \\
        --load "two runs at once, one pinned to each of 2 cores"

Only finished runs are read (``done.json``); a run still going is listed and left out.
"""

from __future__ import annotations

import argparse
import csv
import glob
import math
import pathlib
import re
import sys
import warnings

import numpy as np

from llome_jax import compare
from llome_jax.stats import bootstrap_interval, permutation_test


def _seed(path: pathlib.Path) -> int:
    found = re.search(r"seed(\d+)$", path.name)
    return int(found.group(1)) if found else -1


def _seconds_to(run: compare.Run, budget: int) -> tuple[float, int]:
    """Seconds (round 0 included) at the end of the first round with ``budget`` labels paid
    after round 0, and the labels paid by then; a run that stopped before the budget gives its
    last round's seconds and labels."""
    assert run.clock is not None and run.clock_labels is not None
    paid = run.clock_labels - run.clock_labels[0]
    reached = np.flatnonzero(paid >= budget)
    k = int(reached[0]) if reached.size else len(paid) - 1
    return float(run.clock[k]), int(paid[k])


def read(pattern: str, budget: int) -> tuple[list[compare.Run], list[str]]:
    paths = sorted(pathlib.Path(p) for p in glob.glob(pattern))
    done = [p for p in paths if (p / "done.json").exists()]
    going = [str(p) for p in paths if p not in done]
    return (compare.load_runs([str(p) for p in done]) if done else []), going


def run_rows(runs: list[compare.Run], budget: int) -> list[dict]:
    rows = []
    for run in runs:
        assert run.clock is not None
        seconds, paid = _seconds_to(run, budget)
        shifted = compare.after_round0(run)
        rows.append(
            {
                "method": run.label,
                "seed": _seed(run.path),
                "round0_seconds": round(float(run.clock[0]), 1),
                "seconds_to_budget": round(seconds, 1),
                "labels_paid": paid,
                "labels_per_second": round(paid / (seconds - float(run.clock[0])), 1),
                "min_regret_at_budget": compare.value_at(shifted, budget),
                "stop_reason": run.stop_reason,
                "machine": run.machine,
            }
        )
    return rows


def curve_rows(runs: list[compare.Run]) -> list[dict]:
    rows = []
    for run in runs:
        seconds, regret = compare.wall_clock_curve(run)
        for k, (t, value) in enumerate(zip(seconds, regret)):
            rows.append(
                {
                    "method": run.label,
                    "seed": _seed(run.path),
                    "round": k,
                    "labels": int(run.clock_labels[k]),  # type: ignore[index]
                    "seconds": round(float(t), 2),
                    "min_regret": float(value),
                }
            )
    return rows


def time_rows(runs: list[compare.Run], times: list[float], reference: str = "GA") -> list[dict]:
    rows = []
    for t in times:
        summary = compare.summarise(runs, t, axis="wall_clock")
        base = [row.per_run for row in summary if row.label == reference]
        for row in summary:
            group = [run for run in runs if run.label == row.label]
            rows.append(
                {
                    "seconds": t,
                    "method": row.label,
                    "runs": len(row.per_run),
                    "median_min_regret": row.median,
                    "ci95_low": row.ci_low,
                    "ci95_high": row.ci_high,
                    "min": row.low,
                    "max": row.high,
                    "labels_read": " ".join(
                        str(compare.labels_read(r, t, "wall_clock")) for r in group
                    ),
                    "ended_by_then": sum(float(r.clock[-1]) <= t for r in group),  # type: ignore[index]
                    f"p_vs_{reference}": _p(row.per_run, base[0] if base else ())
                    if row.label != reference
                    else math.nan,
                }
            )
    return rows


def _p(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """The two-sided permutation test's p (exact at these sizes) of the two methods' values
    after equal seconds; NaN when a run of either has no value yet (its round 0 not over)."""
    if not a or not b or not all(map(math.isfinite, (*a, *b))):
        return math.nan
    return permutation_test(a, b)


def plot(runs: list[compare.Run], path: pathlib.Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    labels = list(dict.fromkeys(run.label for run in runs))
    for colour, label in zip(plt.rcParams["axes.prop_cycle"].by_key()["color"], labels):
        group = [run for run in runs if run.label == label]
        clocks = [
            run.clock for run in group
        ]  # the median from the last round 0 end to the last run end
        grid = np.geomspace(max(c[0] for c in clocks), max(c[-1] for c in clocks), 400)  # type: ignore[index]
        for run in group:
            x, y = compare.wall_clock_curve(run)
            ax.step(x, y, where="post", color=colour, alpha=0.25, linewidth=0.8)
        values = np.asarray(
            [[compare.value_at(run, t, axis="wall_clock") for t in grid] for run in group]
        )
        with warnings.catch_warnings():  # all NaN before the runs' round 0 ended
            warnings.simplefilter("ignore", RuntimeWarning)
            median = np.nanmedian(values, axis=0)
        ax.step(
            grid, median, where="post", color=colour, linewidth=2, label=f"{label} ({len(group)})"
        )
    ax.set_xscale("log")
    ax.set_xlabel("seconds since the run started (round 0 included)")
    ax.set_ylabel("min regret")
    ax.set_title(title)
    ax.legend(frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _s(seconds: float) -> str:
    """Seconds for a table: one decimal under 100 s, whole seconds above."""
    return f"{seconds:,.1f}" if seconds < 100 else f"{seconds:,.0f}"


def _write(path: pathlib.Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", required=True, help="a glob of run directories, in quotes")
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget", type=int, default=20000, help="labels after round 0")
    parser.add_argument(
        "--times",
        default="10,100,600,1200,2400,3600",
        help="seconds since the runs started to read them at, comma-separated",
    )
    parser.add_argument(
        "--reference", default="GA", help="the method the others are tested against at each time"
    )
    parser.add_argument("--load", default="", help="what else ran on the machine (the title)")
    args = parser.parse_args(argv)
    runs, going = read(args.runs, args.budget)
    if not runs:
        print(f"error: no finished run directory matches {args.runs!r}", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    per_run = run_rows(runs, args.budget)
    _write(out / "runs.csv", per_run)
    _write(out / "curves.csv", curve_rows(runs))
    times = [float(t) for t in args.times.split(",")]
    _write(out / "summary.csv", time_rows(runs, times, args.reference))
    plot(runs, out / "wall_clock.png", "f2 by wall clock" + (f": {args.load}" if args.load else ""))

    print(f"{len(runs)} finished runs; still going, left out: {', '.join(going) or 'none'}")
    machines = sorted({re.sub(r", load [0-9.]+", "", r["machine"]) for r in per_run})
    loads = [float(m) for r in per_run for m in re.findall(r"load ([0-9.]+)", r["machine"])]
    load = f"; 1-minute load at the start {min(loads):.2f}-{max(loads):.2f}" if loads else ""
    print(f"machines: {'; '.join(machines)}{load}")
    print(
        f"\n| method | runs | seconds to {args.budget:,} labels after round 0 or an early stop "
        "(95% CI) | min-max "
        "| stopped early | round 0 (s) | labels/s after round 0 | median min regret at the budget |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label in dict.fromkeys(r["method"] for r in per_run):
        group = [r for r in per_run if r["method"] == label]
        seconds = np.asarray([r["seconds_to_budget"] for r in group])
        low, high = bootstrap_interval(seconds)
        print(
            f"| {label} | {len(group)} | {_s(np.median(seconds))} ({_s(low)}-{_s(high)}) "
            f"| {_s(seconds.min())}-{_s(seconds.max())} "
            f"| {sum(bool(r['stop_reason']) for r in group)} "
            f"| {np.median([r['round0_seconds'] for r in group]):,.1f} "
            f"| {np.median([r['labels_per_second'] for r in group]):,.1f} "
            f"| {np.median([r['min_regret_at_budget'] for r in group]):.3f} |"
        )
    print(
        f"\nmedian min regret (min-max) after equal seconds, p: exact two-sided permutation "
        f"test against {args.reference}"
    )
    print("\n| seconds | " + " | ".join(dict.fromkeys(r.label for r in runs)) + " |")
    print("|---:|" + "---:|" * len(dict.fromkeys(r.label for r in runs)))
    table = time_rows(runs, times, args.reference)
    key = f"p_vs_{args.reference}"
    for t in times:
        cells = [
            f"{r['median_min_regret']:.3f} ({r['min']:.3f}-{r['max']:.3f})"
            + (f", p {r[key]:.2g}" if math.isfinite(r[key]) else "")
            if math.isfinite(r["median_min_regret"])
            else "round 0 not over"
            for r in table
            if r["seconds"] == t
        ]
        print(f"| {t:,.0f} | " + " | ".join(cells) + " |")
    print(f"\nwrote {out}/runs.csv, curves.csv, summary.csv, wall_clock.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
