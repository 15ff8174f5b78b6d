"""LLOME-MargE, LLOME-SFT and LLOME-DPO vs the GA on the paper's f2 (paper Fig. 3, f2 panel).

Each LLOME variant runs ``--rounds`` rounds of the ``--preset`` configuration (default ``cpu``:
a from-scratch ~0.2M-parameter Pythia, j = 2000, n0 = 10 GA generations) for every seed, in its
own resumable run directory ``results/llome_f2/<method>_seed<k>/`` (re-running the script resumes
unfinished runs and skips finished ones). The GA baseline runs the paper's GA (n = 1000) for the
same oracle budget: ``n0 * 1000 + rounds * j`` evaluations, i.e. ``budget / 1000`` generations.

Outputs in ``results/llome_f2/``: ``curves.csv`` (method, seed, round, num_evaluations,
min_regret), ``summary.csv`` (final min regret per method and seed, and the min regret at the
GA-equivalent budget) and ``min_regret_f2.png`` (min regret vs evaluations, median and spread
over seeds, as the paper's figure).

Full run (3 methods x 3 seeds x 10 rounds) takes hours on 2 CPU cores: use ``--methods``,
``--seeds`` and ``--rounds`` for a partial run, e.g. ``--methods marge --seeds 0 --rounds 3``.
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import sys
import time

from _curves import finish, run_ga, write_curves  # experiments/_curves.py

METHODS = {"marge": "LLOME-MargE", "sft": "LLOME-SFT", "dpo": "LLOME-DPO"}


def run_llome(method: str, seed: int, args: argparse.Namespace, out: pathlib.Path) -> list[dict]:
    from llome_jax.llome import loop
    from llome_jax.llome.presets import preset

    cfg = preset(
        args.preset,
        function=args.function,
        rounds=args.rounds,
        seed=seed,
        schedule=loop.schedule_for_loss(method),
    )
    run_dir = out / f"{method}_seed{seed}"
    resume = (run_dir / "config.json").exists()
    print(f"== {METHODS[method]} seed {seed} -> {run_dir} ({'resume' if resume else 'new'})")
    loop.run(
        cfg,
        run_dir,
        resume=resume,
        progress=not args.no_progress,
        extra_config={"loss": method},
    )
    return [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]


def _summary(rows: list[list]) -> list[list]:
    """Final (num_evaluations, min_regret) of every (method, seed) in ``curves.csv`` rows."""
    last: dict[tuple, list] = {}
    for method, seed, _, evaluations, regret in rows:
        last[(method, seed)] = [method, seed, evaluations, regret]
    return list(last.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="marge,sft,dpo")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--function", default="f2")
    parser.add_argument("--out", default="results/llome_f2")
    parser.add_argument("--no-ga", action="store_true", help="skip the GA baseline")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--plot-only",
        action="store_true",
        help="do not run LLOME: collect the rounds already in the run directories (partial runs "
        "included), run the GA baseline, write the CSVs and the plot",
    )
    args = parser.parse_args(argv)

    from llome_jax.llome.presets import preset

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; choose from {list(METHODS)}")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = preset(args.preset, function=args.function, rounds=args.rounds)
    budget = base.ga_generations * base.ga.num_particles + args.rounds * base.filter.num_selected

    curves: dict[str, list] = {}
    rows = []
    t0 = time.perf_counter()
    for method in methods:
        for seed in seeds:
            if args.plot_only:
                path = out / f"{method}_seed{seed}" / "rounds.jsonl"
                if not path.exists():
                    print(f"skipping {METHODS[method]} seed {seed}: no {path}")
                    continue
                records = [json.loads(line) for line in path.read_text().splitlines()]
            else:
                records = run_llome(method, seed, args, out)
            x = [r["num_evaluations"] for r in records]
            y = [r["min_regret"] for r in records]
            curves.setdefault(METHODS[method], []).append((x, y))
            for r in records:
                rows.append(
                    [METHODS[method], seed, r["round"], r["num_evaluations"], r["min_regret"]]
                )
    if not args.no_ga:
        for seed in seeds:
            trace = run_ga(seed, budget, args.function)
            curves.setdefault("GA", []).append(([e for e, _ in trace], [g for _, g in trace]))
            for generation, (e, g) in enumerate(trace, start=1):
                rows.append(["GA", seed, generation, e, g])

    write_curves(out / "curves.csv", rows)
    with open(out / "summary.csv", "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["method", "seed", "final_evaluations", "final_min_regret"])
        for row in _summary(rows):
            writer.writerow(row)
    title = f"{args.function}: LLOME ({args.preset} preset) vs GA, budget {budget}"
    finish(out, curves, budget, title, t0)
    return 0


if __name__ == "__main__":
    from llome_jax.host_memory import reexec_with_huge_pages

    reexec_with_huge_pages()  # huge pages for malloc: ~1.25x faster steps (see that module)
    sys.exit(main())
