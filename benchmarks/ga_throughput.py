"""GA throughput: generations/s and evaluations/s, n = 1000, on f2 and f4 (issue: GA).

For each function: one seed, and 32 seeds vmapped in one jitted call; whole runs under
``lax.scan`` (compile excluded, best of several runs).

    python benchmarks/ga_throughput.py            # 300 generations per measurement
    python benchmarks/ga_throughput.py --quick    # 50 generations

Reference (holo DiscreteEvolution, torch 2.13, 2 threads, this machine kind): 96 gen/s on f2,
12.6 gen/s on f4 (96,000 and 12,600 evaluations/s).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time

import jax

from llome_jax import ehrlich, ga
from llome_jax.ga import loop as ga_loop

REFERENCE_GEN_PER_S = {"f2": 96.0, "f4": 12.6}
RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def measure(function: str, seeds: int, generations: int, repeats: int) -> dict:
    fn = ehrlich.paper_function(function)
    x0 = ehrlich.paper_initial_solution(function)
    config = ga.GAConfig()
    if seeds == 1:
        runner = jax.jit(lambda k: ga_loop.run(k, fn, x0, generations, config)[1].best_value)
        keys = [jax.random.key(i) for i in range(repeats + 1)]
    else:
        runner = jax.jit(
            jax.vmap(lambda k: ga_loop.run(k, fn, x0, generations, config)[1].best_value)
        )
        keys = [jax.random.split(jax.random.key(i), seeds) for i in range(repeats + 1)]
    start = time.perf_counter()
    runner(keys[0]).block_until_ready()
    compile_seconds = time.perf_counter() - start
    times = []
    for key in keys[1:]:
        start = time.perf_counter()
        runner(key).block_until_ready()
        times.append(time.perf_counter() - start)
    best = min(times)
    gen_per_s = generations / best  # per seed (seeds advance in lock step)
    reference = REFERENCE_GEN_PER_S[function]
    return {
        "function": function,
        "name": fn.config.name,
        "seeds": seeds,
        "generations": generations,
        "gen_per_s_per_seed": gen_per_s,
        "evals_per_s_per_seed": gen_per_s * config.num_particles,
        "evals_per_s_total": gen_per_s * config.num_particles * seeds,
        "speedup_per_seed_vs_reference": gen_per_s / reference,
        "speedup_total_vs_reference": gen_per_s * seeds / reference,
        "compile_seconds": compile_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--generations", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    generations = 50 if args.quick else args.generations
    rows = []
    header = (
        f"{'fn':3s} {'seeds':>5s} {'gen/s/seed':>11s} {'evals/s/seed':>13s} {'evals/s total':>14s} "
        f"{'x ref/seed':>10s} {'x ref total':>11s}"
    )
    print(header)
    print("-" * len(header))
    for function in ("f2", "f4"):
        for seeds in (1, 32):
            row = measure(function, seeds, generations, args.repeats)
            rows.append(row)
            print(
                f"{function:3s} {seeds:>5d} {row['gen_per_s_per_seed']:>11.1f} "
                f"{row['evals_per_s_per_seed']:>13.3e} "
                f"{row['evals_per_s_total']:>14.3e} {row['speedup_per_seed_vs_reference']:>10.1f} "
                f"{row['speedup_total_vs_reference']:>11.1f}",
                flush=True,
            )
    RESULTS.mkdir(parents=True, exist_ok=True)
    target = RESULTS / "ga_throughput.json"
    meta = {
        "cpus": os.cpu_count(),
        "devices": [str(d) for d in jax.devices()],
        "reference_gen_per_s": REFERENCE_GEN_PER_S,
        "note": "CPU only; no GPU available.",
    }
    target.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
