"""Difficulty of Ehrlich functions for the GA as v, L, c, k, q vary (paper App. A, Fig. "difficulty").

Starting from a reference configuration, each parameter is varied on its own; for every setting the
paper's GA (n = 1000, alpha = 0.1, p_m = 0.005, p_r = 0.0882) runs on several instances (instance
seed = run seed, so the spread covers both the function and the optimizer's randomness), all seeds
of one setting vmapped in a single jitted call. When k varies, q follows it (q = k, the reference's
dense signal), since q must lie in [1, k]. Writes a CSV of min-regret curves and a PNG with one
panel per parameter (the sweep: :mod:`llome_jax.bench.difficulty`).

    python experiments/ga_difficulty.py --out results/ga_difficulty            # ~5 min on 2 cores
    python experiments/ga_difficulty.py --generations 300 --seeds 2 --out /tmp/x   # quick check
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import pathlib
import time

import numpy as np

# the settings and the sweep itself: the paper driver's figure 10 runs them too
from llome_jax.bench.difficulty import REFERENCE, VARIATIONS, run_setting
from llome_jax.run.plotting import draw_regret_curves


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--generations", type=int, default=2000, help="GA generations (x1000 evaluations)"
    )
    parser.add_argument("--seeds", type=int, default=4, help="instances/runs per setting")
    parser.add_argument("--out", default="results/ga_difficulty")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = list(range(args.seeds))
    evaluations = 1000 * np.arange(1, args.generations + 1)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(
        1, len(VARIATIONS), figsize=(4 * len(VARIATIONS), 3.6), dpi=110, sharey=True
    )
    rows, summary, cache = [], {}, {}
    t0 = time.perf_counter()
    for axis, (symbol, (field, values)) in zip(axes, VARIATIONS.items()):
        curves = {}
        for value in values:
            changes = {field: value}
            if field == "motif_length":
                # q must divide k and lie in [1, k]: keep the reference's dense q = k
                changes["quantization"] = value
            config = dataclasses.replace(REFERENCE, **changes)
            if config not in cache:
                started = time.perf_counter()
                cache[config] = run_setting(config, seeds, args.generations)
                print(
                    f"{config.name:22s} {time.perf_counter() - started:6.1f} s  "
                    f"final median regret {np.median(1 - cache[config][:, -1]):.3f}",
                    flush=True,
                )
            best = cache[config]
            curves[f"{symbol}={value}"] = [(evaluations, 1.0 - row) for row in best]
            summary[f"{symbol}={value}"] = {
                "config": config.name,
                "median_final_regret": float(np.median(1.0 - best[:, -1])),
                "area_under_regret_curve": float(np.mean(1.0 - best)),
                "frac_runs_solved": float(np.mean(best[:, -1] >= 1.0)),
            }
            for seed, row in zip(seeds, best):
                for g in range(0, args.generations, max(1, args.generations // 200)):
                    rows.append(
                        [
                            symbol,
                            value,
                            config.name,
                            seed,
                            g + 1,
                            int(evaluations[g]),
                            1.0 - float(row[g]),
                        ]
                    )
        draw_regret_curves(axis, curves)
        axis.set_xscale("log")
        axis.set_title(f"vary {symbol} (reference {REFERENCE.name})", fontsize=9)
        axis.set_xlabel("evaluations")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    axes[0].set_ylabel("min simple regret")
    figure.tight_layout()
    figure.savefig(out / "ga_difficulty.png")
    with open(out / "ga_difficulty.csv", "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(
            ["parameter", "value", "config", "seed", "generation", "num_evaluations", "min_regret"]
        )
        writer.writerows(rows)
    (out / "ga_difficulty.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"total {time.perf_counter() - t0:.0f} s; wrote {out}/ga_difficulty.png, .csv, .json")
    # spread of the area under the regret curve per parameter: which knob matters most
    for symbol in VARIATIONS:
        areas = [
            v["area_under_regret_curve"] for k, v in summary.items() if k.startswith(symbol + "=")
        ]
        print(f"  {symbol}: mean-regret range across settings {min(areas):.3f} .. {max(areas):.3f}")


if __name__ == "__main__":
    from llome_jax.host.memory import reexec_with_huge_pages

    reexec_with_huge_pages()  # huge pages for malloc: ~1.25x faster steps (see that module)
    main()
