"""LaMBO-2 vs the GA (and LLOME, when its results exist) on the paper's f2 (paper Fig. 3, f2 panel).

Each seed runs ``--rounds`` LaMBO-2 rounds of the ``--preset`` configuration (default ``cpu``:
n = 2000 per round after 10 GA generations of 1000, a 32/32/32 CNN, E = 16, S = 32) in its own
resumable run directory ``results/lambo2_f2/seed<k>/`` (re-running resumes unfinished runs and
skips finished ones). The GA baseline runs the paper's GA (n = 1000) for the same oracle budget
(``n0 * 1000 + rounds * n`` evaluations). LLOME curves are read from
``results/llome_f2/curves.csv`` (written by ``experiments/llome_f2.py``) if that file exists.

Outputs in ``results/lambo2_f2/``: ``curves.csv`` (method, seed, round, num_evaluations,
min_regret), ``summary.csv`` (final min regret per method and seed, evaluations to the optimum)
and ``min_regret_f2.png`` (min regret vs evaluations: median and spread over seeds).

The full experiment (3 seeds x 10 rounds) takes hours on 2 shared CPU cores; use ``--seeds``,
``--rounds`` and ``--preset`` for partial runs, e.g. ``--seeds 0 --rounds 2``.
"""

from __future__ import annotations

import argparse
import csv
import pathlib
import sys
import time

from _curves import finish, run_ga, run_lambo2_dir, write_curves  # experiments/_curves.py


def run_lambo2(seed: int, args: argparse.Namespace, out: pathlib.Path) -> list[dict]:
    from llome_jax.lambo2 import optimizer

    overrides = {"function": args.function, "rounds": args.rounds, "seed": seed}
    if args.epochs is not None:
        overrides["train"] = {"epochs": args.epochs}
    if args.design_steps is not None:
        overrides["design"] = {"num_steps": args.design_steps}
    cfg = optimizer.preset(args.preset, **overrides)
    return run_lambo2_dir(
        cfg,
        out / f"seed{seed}",
        progress=not args.no_progress,
        extra_config={"preset": args.preset},
        prefix=f"seed {seed}",
    )


def read_llome_curves(path: pathlib.Path) -> dict[str, list]:
    """LLOME method -> [(evaluations, min_regret) per seed] from ``experiments/llome_f2.py``."""
    curves: dict[str, dict[int, list]] = {}
    if not path.exists():
        return {}
    with open(path, newline="") as stream:
        for row in csv.DictReader(stream):
            if not row["method"].startswith("LLOME"):
                continue
            runs = curves.setdefault(row["method"], {})
            runs.setdefault(int(row["seed"]), []).append(
                (int(row["num_evaluations"]), float(row["min_regret"]))
            )
    return {
        name: [([e for e, _ in sorted(r)], [g for _, g in sorted(r)]) for r in runs.values()]
        for name, runs in curves.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--function", default="f2")
    parser.add_argument("--epochs", type=int, default=None, help="override the preset's E")
    parser.add_argument("--design-steps", type=int, default=None, help="override the preset's S")
    parser.add_argument("--out", default="results/lambo2_f2")
    parser.add_argument(
        "--llome",
        default=None,
        help="LLOME curves.csv to plot alongside (default: results/llome_f2/curves.csv on f2 only)",
    )
    parser.add_argument("--no-ga", action="store_true", help="skip the GA baseline")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--plot-only",
        action="store_true",
        help="do not run LaMBO-2: collect the rounds already in the run directories (partial runs "
        "included), run the GA baseline, write the CSVs and the plot",
    )
    args = parser.parse_args(argv)

    from llome_jax.lambo2 import optimizer
    from llome_jax.rundir import RunDirectory

    if args.preset not in optimizer.PRESETS:
        raise SystemExit(f"unknown preset {args.preset!r}; choose from {sorted(optimizer.PRESETS)}")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = optimizer.preset(args.preset, function=args.function, rounds=args.rounds)
    budget = optimizer.expected_oracle_calls(base)

    curves: dict[str, list] = {}
    rows = []
    t0 = time.perf_counter()
    for seed in seeds:
        if args.plot_only:
            path = out / f"seed{seed}"
            records = [r for r in RunDirectory(path).rounds() if r["round"] <= args.rounds]
            if not records:
                print(f"skipping LaMBO-2 seed {seed}: no rounds in {path}")
                continue
        else:
            records = run_lambo2(seed, args, out)
        x = [r["num_evaluations"] for r in records]
        y = [r["min_regret"] for r in records]
        curves.setdefault("LaMBO-2", []).append((x, y))
        rows += [
            ["LaMBO-2", seed, r["round"], r["num_evaluations"], r["min_regret"]] for r in records
        ]
    if not args.no_ga:
        for seed in seeds:
            trace = run_ga(seed, budget, args.function)
            curves.setdefault("GA", []).append(([e for e, _ in trace], [g for _, g in trace]))
            rows += [["GA", seed, g, e, r] for g, (e, r) in enumerate(trace, start=1)]
    llome_path = args.llome or ("results/llome_f2/curves.csv" if args.function == "f2" else None)
    llome = read_llome_curves(pathlib.Path(llome_path)) if llome_path else {}
    curves.update(llome)

    write_curves(out / "curves.csv", rows)
    with open(out / "summary.csv", "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(
            ["method", "seed", "final_evaluations", "final_min_regret", "evaluations_to_optimum"]
        )
        for name, runs in curves.items():
            for index, (x, y) in enumerate(runs):
                hit = next((e for e, g in zip(x, y) if g <= 0.0), None)
                seed = seeds[index] if name in ("LaMBO-2", "GA") else index
                writer.writerow([name, seed, x[-1], y[-1], hit])
    title = f"{args.function}: LaMBO-2 ({args.preset} preset) vs GA"
    title += (" vs LLOME" if llome else "") + f", budget {budget}"
    finish(out, curves, budget, title, t0)
    return 0


if __name__ == "__main__":
    from llome_jax.host_memory import reexec_with_huge_pages

    reexec_with_huge_pages()  # huge pages for malloc: ~1.25x faster steps (see that module)
    sys.exit(main())
