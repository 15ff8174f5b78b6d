"""Random local search from the same seed data: how far do unguided single mutants get?

A diagnostic baseline for the LLOME and LaMBO-2 plateaus (docs/experiments.md). Round 0 is the
GA seed data LLOME uses (``ga_loop.run_archive`` with the LLOME run key's ``"ga"`` key: 10 generations
of 1,000; its distinct sequences are paid once, as the optimizers pay, or with
``--accounting every_evaluation`` 10,000 calls as in the paper). Each later round labels
``--per-round`` new sequences, each a uniformly random substitution (``--mutations`` positions,
a different state each) of a uniformly chosen incumbent among the ``--incumbents`` best labelled
sequences (ties at the cut broken at random); sequences already labelled are never proposed
again. Nothing is learnt: the question is how often a blind edit of the incumbents improves
them, at the same label budget as the optimizers (10 rounds of 2,000 after the seed data).

Settings are fixed before looking at f2 (the defaults below), and the script runs in seconds:

    python experiments/local_search.py --function "Ehr(32,32)-4-4-4" --instance-seeds 1,2,101,102,103
    python experiments/local_search.py --function f2

Writes ``OUT/<function>_r<rounds>_m<mutations>_k<incumbents>.csv`` (one row per run and
round) and prints the min regret at the end. The search is the ``local_search`` optimizer
(:class:`llome_jax.optimizers.LocalSearch`, the paper driver's ``local search`` method, each run
a resumable run directory of the optimizers' layout); this is its command line.
"""

from __future__ import annotations

import argparse
import csv
import pathlib

import numpy as np

from llome_jax.bench.local_search import run  # runs of the LocalSearch plug-in


def _slug(function: str) -> str:
    """A file-name-safe form of a function name: ``Ehr(32,32)-4-4-4`` -> ``Ehr_32_32_-4-4-4``."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in function).strip("_")


def run_directory(root: pathlib.Path, function: str, instance, seed: int) -> pathlib.Path:
    """Where one run's directory goes (the optimizers' layout; an earlier one is replaced)."""
    slug = _slug(function)
    return root / (f"{slug}_seed{seed}" if instance is None else f"{slug}_{instance}_seed{seed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--function", default="Ehr(32,32)-4-4-4")
    parser.add_argument(
        "--instance-seeds", default="", help="comma-separated (none: the named function)"
    )
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--budget",
        type=int,
        default=None,
        help="labels after round 0: the run ends at exactly this many (--rounds is then a cap)",
    )
    parser.add_argument("--per-round", type=int, default=2000)
    parser.add_argument("--incumbents", type=int, default=200)
    parser.add_argument("--mutations", type=int, default=1)
    parser.add_argument("--out", default="results/local_search")
    parser.add_argument(
        "--accounting",
        default="pay_once",
        choices=("pay_once", "every_evaluation"),
        help="round 0's labels: the GA archive's distinct sequences (default, as the optimizers "
        "pay) or every GA evaluation (the paper's 10,000)",
    )
    parser.add_argument(
        "--run-dirs",
        action="store_true",
        help="also write OUT/runs/<function>_<instance>_seed<k>/, run directories in the "
        "optimizers' layout (config.json, rounds.jsonl, evaluated.csv), so that `llome-jax "
        "compare` reads the baseline like any run",
    )
    args = parser.parse_args()
    instances = [int(s) for s in args.instance_seeds.split(",") if s] or [None]
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    for instance in instances:
        finals = []
        for seed in seeds:
            directory = (
                run_directory(pathlib.Path(args.out) / "runs", args.function, instance, seed)
                if args.run_dirs
                else None
            )
            run_rows = run(
                args.function,
                instance,
                seed,
                args.rounds,
                args.per_round,
                args.incumbents,
                args.mutations,
                directory,
                args.accounting,
                args.budget,
            )
            rows += run_rows
            finals.append(run_rows[-1][5])
            curve = " / ".join(f"{r[5]:.3f}" for r in run_rows)
            print(f"{args.function} instance {instance} seed {seed}: {curve}", flush=True)
        print(
            f"  median min regret at {rows[-1][4]} labels: {np.median(finals):.4f} "
            f"(range {min(finals):.4f}-{max(finals):.4f})"
        )
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    slug = _slug(args.function)
    name = f"{slug}_r{args.rounds}_m{args.mutations}_k{args.incumbents}.csv"
    with open(out / name, "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(
            [
                "function",
                "instance_seed",
                "seed",
                "round",
                "num_evaluations",
                "min_regret",
                "improving_labels",
            ]
        )
        writer.writerows(rows)
    print(f"wrote {out / name}")


if __name__ == "__main__":
    main()
