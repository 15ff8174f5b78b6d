"""LaMBO-2 `cpu` preset: which CNN width, 32/32/32 or 32/64/32, on *training* functions (not f2).

The `cpu` preset's CNN was cut from 32/64/32 (84,583 parameters) to 32/32/32 (54,663) to fit a
10-round f2 run into 30 minutes on 2 CPU cores. This experiment measures what the cut costs in
regret, on Ehrlich functions sampled with the paper's f2 shape (``--function``, default
``Ehr(32,32)-4-4-4``) and instance seeds that are not the paper's, so that the preset is not
tuned on the test function.

Each (width, instance) pair is one resumable run directory
``results/lambo2_width/<width>/inst<k>/`` (``<width>`` = the middle channel width; run seed
``--seed``, all other settings = the `cpu` preset). Re-running resumes unfinished runs and skips
finished ones; ``--widths`` selects the widths this process runs, so two processes can share the
work, e.g. pinned to one core each::

    taskset -c 0 python experiments/lambo2_width.py --widths 32 &
    taskset -c 1 python experiments/lambo2_width.py --widths 64 &
    python experiments/lambo2_width.py --summary-only

Outputs in ``--out``: ``curves.csv`` (width, instance, round, num_evaluations, min_regret,
seconds_train, seconds_design) and ``summary.csv`` (rounds done, final min regret, evaluations to
the optimum, train + design seconds per run), also printed as a markdown table. A run that has
reached regret 0 may be stopped (Ctrl-C): ``--summary-only`` counts the rounds it has written.
``--preset smoke --rounds 2`` checks the script in about two minutes.
"""

from __future__ import annotations

import argparse
import csv
import pathlib
import sys

from _curves import run_lambo2_dir  # experiments/_curves.py

WIDTHS = {32: (), 64: (("channel_dim", 64),)}  # middle width -> ModelConfig overrides of `cpu`
CURVE_FIELDS = ["width", "instance", "round", "num_evaluations", "min_regret"]
CURVE_FIELDS += ["seconds_train", "seconds_design"]
SUMMARY_FIELDS = ["width", "instance", "rounds_done", "num_evaluations", "final_min_regret"]
SUMMARY_FIELDS += ["evaluations_to_optimum", "seconds_train_plus_design"]


def _write_csv(path: pathlib.Path, header: list[str], rows: list[list]) -> None:
    with open(path, "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(header)
        writer.writerows(rows)


def _timing(record: dict) -> list[float]:
    """Train and design seconds of a round (``null`` in round 0, the GA data, read as 0)."""
    return [record.get("seconds_train") or 0.0, record.get("seconds_design") or 0.0]


def run_one(width: int, instance: int, args: argparse.Namespace, out: pathlib.Path) -> None:
    from llome_jax.lambo2 import optimizer

    cfg = optimizer.preset(
        args.preset,
        function=args.function,
        instance_seed=instance,
        rounds=args.rounds,
        seed=args.seed,
        model_overrides=WIDTHS[width],
    )
    run_lambo2_dir(
        cfg,
        out / str(width) / f"inst{instance}",
        progress=not args.no_progress,
        extra_config={"preset": args.preset, "experiment": "lambo2_width"},
        prefix=f"width {width}, inst {instance}",
    )


def summarise(out: pathlib.Path, widths: list[int], instances: list[int], rounds: int) -> None:
    from llome_jax.rundir import RunDirectory

    curve_rows, summary = [], []
    for width in widths:
        for instance in instances:
            path = out / str(width) / f"inst{instance}"
            if not (path / "rounds.jsonl").exists():
                continue
            records = [r for r in RunDirectory(path).rounds() if r["round"] <= rounds]
            if not records:
                continue
            run_rows = [
                [width, instance, *(r[k] for k in CURVE_FIELDS[2:5]), *_timing(r)] for r in records
            ]
            curve_rows += run_rows
            seconds = sum(row[-2] + row[-1] for row in run_rows)
            last = records[-1]
            hit = next((r["num_evaluations"] for r in records if r["min_regret"] <= 0.0), "")
            summary.append(
                [
                    width,
                    instance,
                    last["round"],
                    last["num_evaluations"],
                    last["min_regret"],
                    hit,
                    round(seconds, 1),
                ]
            )
    _write_csv(out / "curves.csv", CURVE_FIELDS, curve_rows)
    _write_csv(out / "summary.csv", SUMMARY_FIELDS, summary)
    print("| " + " | ".join(SUMMARY_FIELDS) + " |")
    print("|" + "---|" * len(SUMMARY_FIELDS))
    for row in summary:
        row = [*row[:4], f"{row[4]:.4f}", *row[5:]]
        print("| " + " | ".join(str(v) for v in row) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="32,64", help="middle CNN widths to run (32, 64)")
    parser.add_argument("--instances", default="101,102", help="instance seeds of the function")
    parser.add_argument("--function", default="Ehr(32,32)-4-4-4")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="run seed")
    parser.add_argument("--preset", default="cpu", help="LaMBO-2 preset (smoke: a quick check)")
    parser.add_argument("--out", default="results/lambo2_width")
    parser.add_argument("--summary-only", action="store_true", help="only collect the results")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    widths = [int(w) for w in args.widths.split(",") if w.strip()]
    unknown = [w for w in widths if w not in WIDTHS]
    if unknown:
        raise SystemExit(f"unknown width(s) {unknown}; choose from {sorted(WIDTHS)}")
    instances = [int(s) for s in args.instances.split(",") if s.strip()]
    if args.function.lower() in {"f1", "f2", "f3", "f4"}:
        raise SystemExit(
            "this experiment tunes the preset: use a sampled function, not the paper's"
        )
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.summary_only:
        for instance in instances:
            for width in widths:
                run_one(width, instance, args, out)
    summarise(out, sorted(WIDTHS) if args.summary_only else widths, instances, args.rounds)
    return 0


if __name__ == "__main__":
    from llome_jax.host_memory import reexec_with_huge_pages

    reexec_with_huge_pages()  # huge pages for malloc: ~1.25x faster steps (see that module)
    sys.exit(main())
