"""The pretraining ladder on f2 (issue 65): LLOME-MargE fine-tuned from priors of growing
pretraining compute, min regret at 20,000 labels after round 0, against LaMBO-2 and
from-scratch LLOME-MargE (their 8 seeds of the committed f2 comparison).

Each rung is a prior pretrained by ``llome-jax pretrain`` on instances of ``Ehr(32,32)-4-4-4``
with instance seeds 1,000,000 and above (never f2, never an evaluation instance), then run on f2
with the settings of the f2 comparison's ``LLOME-MargE-prior`` arm (``--preset cpu-pretrained
--schedule sft:1,marge:1 --budget 20000 --rounds 10``) and ``--weights`` the rung's prior:

    llome-jax pretrain --instances 128 --epochs 2 --out runs/prior/r128
    llome-jax llome --preset cpu-pretrained --function f2 --seed 0 --budget 20000 --rounds 10 \\
        --schedule sft:1,marge:1 --weights runs/prior/r128/weights --out runs/ladder/r128/f2_seed0
    python experiments/pretraining_ladder.py collect r128 'runs/ladder/r128/f2_seed*' \\
        runs/prior/r128/weights/pretrain.json
    python experiments/pretraining_ladder.py report

``collect`` adds a rung's runs (each run's curve, round by round, from its ``rounds.jsonl``) and
its prior's ``pretrain.json`` figures to ``docs/pretraining/ladder/curves.csv`` and
``rungs.csv``; ``report`` reads those, plus rung 1 (the shipped prior, the f2 comparison's
``LLOME-MargE-prior`` arm) and the two references from ``docs/paper/f2/curves.csv``, and writes
``summary.csv``, ``scaling.png`` and the table (printed, Markdown) with each rung's verdict.

The verdict, per rung: "LLOME-MargE from the prior reaches LaMBO-2 on f2 at 20K labels". Rule
and tests (the f2 report's): agree when the prior's median is at most one quantisation level of
f2 (q = 4) above LaMBO-2's and a one-sided permutation test of non-inferiority at that margin
(the prior's values shifted down by the margin tend lower than LaMBO-2's) gives p < 0.05;
disagree when LaMBO-2's median is a level or more lower and the two-sided exact permutation test
of the difference in means gives p < 0.05; else inconclusive. The two-sided p against
from-scratch LLOME-MargE is reported beside it.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
LADDER = ROOT / "docs" / "pretraining" / "ladder"
F2_CURVES = ROOT / "docs" / "paper" / "f2" / "curves.csv"
SHIPPED = ROOT / "llome_jax" / "priors" / "ehr32-32-4-4-4" / "pretrain.json"
BUDGET = 20_000  # labels after round 0
QUANTIZATION = 4  # f2 = Ehr(32,32)-4-4-4
BATCH = 64  # pairs per pretraining step (the cpu preset's)
CURVE_FIELDS = ["rung", "seed", "round", "labels", "labels_after_round0", "min_regret", "seconds"]
RUNG_FIELDS = ["rung", "instances", "num_pairs", "steps", "pairs_seen", "pretrain_seconds", "loss"]


def _read_csv(path: pathlib.Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def _write_csv(path: pathlib.Path, fields: list[str], rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def run_curve(rung: str, run_dir: pathlib.Path) -> list[dict]:
    """A run's records as curve rows; its seed from ``config.json``."""
    seed = json.loads((run_dir / "config.json").read_text())["seed"]
    records = [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]
    round0 = records[0]["num_evaluations"]
    return [
        {
            "rung": rung,
            "seed": seed,
            "round": r["round"],
            "labels": r["num_evaluations"],
            "labels_after_round0": r["num_evaluations"] - round0,
            "min_regret": r["min_regret"],
            "seconds": round(float(r.get("seconds") or 0.0), 1),
        }
        for r in records
    ]


def collect(rung: str, pattern: str, pretrain_json: str) -> None:
    """Replace ``rung``'s rows of curves.csv and rungs.csv with the runs matching ``pattern``."""
    runs = sorted(pathlib.Path(p) for p in glob.glob(pattern))
    rows = [row for run in runs for row in run_curve(rung, run)]
    unfinished = sorted(
        {r["seed"] for r in rows} - {r["seed"] for r in rows if r["labels_after_round0"] >= BUDGET}
    )
    if unfinished:
        raise SystemExit(f"runs of seeds {unfinished} have not paid {BUDGET} labels yet")
    curves = [r for r in _read_csv(LADDER / "curves.csv") if r["rung"] != rung] + rows
    _write_csv(LADDER / "curves.csv", CURVE_FIELDS, curves)
    info = json.loads(pathlib.Path(pretrain_json).read_text())
    rung_row = {
        "rung": rung,
        "instances": info["instance_seeds"]["count"],
        "num_pairs": info["num_pairs"],
        "steps": info["steps"],
        "pairs_seen": info["steps"] * BATCH,
        "pretrain_seconds": round(float(info["seconds"])),
        "loss": info["loss"],
    }
    rungs = [r for r in _read_csv(LADDER / "rungs.csv") if r["rung"] != rung] + [rung_row]
    _write_csv(LADDER / "rungs.csv", RUNG_FIELDS, rungs)
    print(f"{rung}: {len(runs)} runs, {len(rows)} records")


def finals(rows: list[dict], key: str) -> dict[str, dict[int, float]]:
    """``{group: {seed: min regret of its last record}}`` of rows grouped by ``key``."""
    out: dict[str, dict[int, tuple[int, float]]] = {}
    for r in rows:
        group, seed, labels = r[key], int(r["seed"]), int(r["labels"])
        if seed not in out.setdefault(group, {}) or labels >= out[group][seed][0]:
            out[group][seed] = (labels, float(r["min_regret"]))
    return {g: {s: v for s, (_, v) in seeds.items()} for g, seeds in out.items()}


def verdict(prior: list[float], lambo: list[float]) -> tuple[str, str]:
    """The rung's verdict against LaMBO-2 and its reason:
    :func:`llome_jax.bench.verdicts.prior_reaches_lambo2`, the f2 report's own rule."""
    from llome_jax.bench import verdicts as vd

    summary = {"LLOME-MargE-prior": {"values": prior}, "LaMBO-2": {"values": lambo}}
    found = vd.prior_reaches_lambo2("f2", summary, QUANTIZATION)
    return found.verdict, found.reason


def report() -> int:
    from llome_jax import stats

    paper = _read_csv(F2_CURVES)
    references = finals([r for r in paper if r["function"] == "f2"], "method")
    lambo = list(references["LaMBO-2"].values())
    scratch = list(references["LLOME-MargE"].values())
    shipped = json.loads(SHIPPED.read_text())
    rungs = {
        "r256 (shipped)": {
            "instances": 256,
            "steps": shipped["steps"],
            "pairs_seen": shipped["steps"] * BATCH,
            "pretrain_seconds": round(float(shipped["seconds"])),
            "values": references["LLOME-MargE-prior"],
        }
    }
    ladder = finals(_read_csv(LADDER / "curves.csv"), "rung")
    for row in _read_csv(LADDER / "rungs.csv"):
        rungs[row["rung"]] = {
            "instances": int(row["instances"]),
            "steps": int(row["steps"]),
            "pairs_seen": int(row["pairs_seen"]),
            "pretrain_seconds": int(row["pretrain_seconds"]),
            "values": ladder.get(row["rung"], {}),
        }
    summary = []
    for name, rung in sorted(rungs.items(), key=lambda kv: kv[1]["pairs_seen"]):
        values = [rung["values"][s] for s in sorted(rung["values"])]
        lo, hi = stats.bootstrap_interval(values)
        decided, why = verdict(values, lambo)
        summary.append(
            {
                "rung": name,
                "instances": rung["instances"],
                "steps": rung["steps"],
                "pairs_seen": rung["pairs_seen"],
                "pretrain_minutes": round(rung["pretrain_seconds"] / 60, 1),
                "seeds": " ".join(str(s) for s in sorted(rung["values"])),
                "n": len(values),
                "median": float(np.median(values)),
                "interval_lo": lo,
                "interval_hi": hi,
                "p_vs_lambo2": stats.permutation_test(values, lambo),
                "p_vs_scratch": stats.permutation_test(values, scratch),
                "verdict_vs_lambo2": decided,
                "reason": why,
            }
        )
    _write_csv(LADDER / "summary.csv", list(summary[0]), summary)
    _plot(summary, lambo, scratch)
    print(
        "| rung | instances | pretraining steps | pairs seen | pretraining min | seeds "
        "| median (95% CI) | p vs LaMBO-2 | p vs scratch | reaches LaMBO-2? |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in summary:
        print(
            f"| {s['rung']} | {s['instances']} | {s['steps']:,} | {s['pairs_seen']:,} | "
            f"{s['pretrain_minutes']} | {s['n']} | {s['median']:.3f} ({s['interval_lo']:.3f}-"
            f"{s['interval_hi']:.3f}) | {s['p_vs_lambo2']:.3g} | {s['p_vs_scratch']:.3g} | "
            f"{s['verdict_vs_lambo2']}: {s['reason']} |"
        )
    for label, values in (("LaMBO-2", lambo), ("LLOME-MargE (scratch)", scratch)):
        lo, hi = stats.bootstrap_interval(values)
        print(f"\n{label}: median {np.median(values):.3f} ({lo:.3f}-{hi:.3f}), n = {len(values)}")
    return 0


def _plot(summary: list[dict], lambo: list[float], scratch: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from llome_jax import stats

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    x = [s["pairs_seen"] for s in summary]
    for label, values, colour in (
        ("LaMBO-2 (8 seeds)", lambo, "tab:red"),
        ("LLOME-MargE from scratch (8 seeds)", scratch, "tab:grey"),
    ):
        lo, hi = stats.bootstrap_interval(values)
        ax.axhspan(lo, hi, color=colour, alpha=0.15)
        ax.axhline(float(np.median(values)), color=colour, label=label)
    ax.errorbar(
        x,
        [s["median"] for s in summary],
        yerr=[
            [s["median"] - s["interval_lo"] for s in summary],
            [s["interval_hi"] - s["median"] for s in summary],
        ],
        fmt="o-",
        color="tab:blue",
        capsize=4,
        label="LLOME-MargE from the prior (median, 95% CI)",
    )
    for s in summary:
        ax.annotate(
            f"{s['instances']} inst., n={s['n']}",
            (s["pairs_seen"], s["median"]),
            textcoords="offset points",
            xytext=(6, 6),
            fontsize=8,
        )
    ax.set_xscale("log")
    ax.set_xlabel("pretraining compute: PropEn pairs seen (steps x 64)")
    ax.set_ylabel("f2 min regret at 20,000 labels after round 0")
    ax.set_title("Pretraining ladder on Ehr(32,32)-4-4-4, evaluated on f2")
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(LADDER / "scaling.png", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("collect", help="add a rung's runs and its prior's pretrain.json")
    add.add_argument("rung")
    add.add_argument("runs", help="a glob of the rung's f2 run directories")
    add.add_argument("pretrain_json")
    sub.add_parser("report", help="summary.csv, scaling.png and the table")
    args = parser.parse_args(argv)
    if args.command == "collect":
        collect(args.rung, args.runs, args.pretrain_json)
        return 0
    return report()


if __name__ == "__main__":
    sys.exit(main())
