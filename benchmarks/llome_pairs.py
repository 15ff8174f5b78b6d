"""PropEn pairs and preference triples for 30,000 sequences (issue 6: "30,000 sequences take
seconds, not minutes").

Data: GA-like clouds on the paper's f2 (Ehr(32,32)-4-4-4) and f4 (Ehr(32,128)-8-8-8): each new
sequence re-draws 1-3 positions of an earlier one (mostly a feasible one), starting from the
function's initial solution, so almost every sequence has many neighbours within Delta_x = 0.25
(the dense worst case of round 0), many are infeasible and values tie a lot. Values are the Ehrlich
function's. Timings exclude compilation (best of ``--repeats`` after a warm-up); ``knn`` is the
exact 30-NN table, ``pairs``/``triples`` the rest of the formatting given that table, and
``pairs_total`` everything from raw arrays (deduplication, kNN, pairs, cap, shuffle).

For scale, ``numpy_knn_est`` is a straightforward blocked numpy kNN (``(x[b] != x).sum(-1)`` then
``argpartition``), timed on 1,000 query rows and extrapolated to all rows; the reference uses
PyNNDescent (not installed here), which needed CPU "himem" nodes (docs/design/llome_data.md).

    python benchmarks/llome_pairs.py               # 30,000 sequences, f2 and f4
    python benchmarks/llome_pairs.py --quick       # 5,000 sequences
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time

import jax
import numpy as np

from llome_jax import ehrlich
from llome_jax.llome import (
    PropEnConfig,
    first_occurrences,
    hamming_neighbours,
    preference_triples,
    propen_pairs,
)

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def ga_like_sequences(function: str, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` distinct sequences, each a 1-3 point mutant of an earlier one, and their values.

    Parents are feasible earlier sequences 80 % of the time (selection pressure, as in the GA's
    survivors) and any earlier sequence otherwise.
    """
    fn = ehrlich.paper_function(function)
    allowed = np.asarray(fn.transition_matrix) > 0
    rng = np.random.default_rng(seed)
    length, vocab = fn.config.dim, fn.config.num_states
    pool = np.zeros((int(n * 1.2) + 16, length), np.int32)
    pool[0] = np.asarray(ehrlich.paper_initial_solution(function)).reshape(-1)
    feasible = [0]
    for i in range(1, pool.shape[0]):
        parent = (
            feasible[rng.integers(0, len(feasible))] if rng.random() < 0.8 else rng.integers(0, i)
        )
        child = pool[parent].copy()
        sites = rng.integers(0, length, rng.integers(1, 4))
        child[sites] = rng.integers(0, vocab, sites.size)
        pool[i] = child
        if allowed[child[:-1], child[1:]].all():
            feasible.append(i)
    x = pool[first_occurrences(pool)][:n]
    if x.shape[0] < n:
        raise RuntimeError("not enough distinct sequences; raise the pool size")
    values = np.asarray(ehrlich.evaluate(fn, x))
    return x, values


def best_of(fn, repeats: int) -> tuple[float, object]:
    result, times = fn(), []  # warm-up: compilation of jax.random and kernels excluded
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def numpy_knn_estimate(x: np.ndarray, k: int, queries: int = 1000, block: int = 100) -> float:
    start = time.perf_counter()
    for s in range(0, queries, block):
        d = (x[s : s + block, None, :] != x[None, :, :]).sum(-1)
        np.argpartition(d, k, axis=1)
    return (time.perf_counter() - start) * x.shape[0] / queries


def measure(function: str, n: int, repeats: int) -> dict:
    x, values = ga_like_sequences(function, n)
    cfg = PropEnConfig()  # k_n = 30 (self + 29), Delta_x = 0.25, infeasible inputs <= 10 %
    key = jax.random.key(0)

    start = time.perf_counter()
    nb = hamming_neighbours(x, cfg.num_neighbours, cfg.max_distance)
    first_call = time.perf_counter() - start
    knn_s, nb = best_of(
        lambda: hamming_neighbours(x, cfg.num_neighbours, cfg.max_distance), repeats
    )
    pairs_s, pairs = best_of(lambda: propen_pairs(key, x, values, cfg, neighbours=nb), repeats)
    triples_s, triples = best_of(
        lambda: preference_triples(key, x, values, cfg, neighbours=nb), repeats
    )
    total_s, _ = best_of(lambda: propen_pairs(key, x, values, cfg), repeats)
    numpy_s = numpy_knn_estimate(x, cfg.num_neighbours)
    return {
        "function": function,
        "shape": f"{n}x{x.shape[1]}",
        "num_sequences": n,
        "length": int(x.shape[1]),
        "frac_feasible": float(np.isfinite(values).mean()),
        "mean_neighbours_within_threshold": float((nb.index[:, 1:] >= 0).sum(1).mean()),
        "knn_seconds": knn_s,
        "knn_first_call_seconds": first_call,
        "pairs_seconds": pairs_s,
        "triples_seconds": triples_s,
        "pairs_total_seconds": total_s,
        "numpy_knn_estimate_seconds": numpy_s,
        "num_pairs": len(pairs),
        "num_pair_candidates": pairs.num_candidates,
        "num_triples": len(triples),
        "num_triple_candidates": triples.num_candidates,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--num-sequences", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="5,000 sequences, 1 repeat")
    args = parser.parse_args()
    n = 5_000 if args.quick else args.num_sequences
    repeats = 1 if args.quick else args.repeats

    header = (
        f"{'fn':3s} {'N x L':>10s} {'nbrs':>5s} {'knn s':>7s} {'pairs s':>8s} {'triples s':>9s} "
        f"{'total s':>8s} {'numpy knn s':>11s} {'pair cands':>10s} {'pairs':>7s} "
        f"{'triple cands':>12s} {'triples':>9s}"
    )
    print(header)
    print("-" * len(header))
    rows = []
    for function in ("f2", "f4"):
        row = measure(function, n, repeats)
        rows.append(row)
        print(
            f"{function:3s} {row['shape']:>10s} {row['mean_neighbours_within_threshold']:>5.1f} "
            f"{row['knn_seconds']:>7.2f} {row['pairs_seconds']:>8.2f} {row['triples_seconds']:>9.2f} "
            f"{row['pairs_total_seconds']:>8.2f} {row['numpy_knn_estimate_seconds']:>11.1f} "
            f"{row['num_pair_candidates']:>10d} {row['num_pairs']:>7d} "
            f"{row['num_triple_candidates']:>12d} {row['num_triples']:>9d}",
            flush=True,
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    target = RESULTS / "llome_pairs.json"
    meta = {
        "cpus": os.cpu_count(),
        "devices": [str(d) for d in jax.devices()],
        "config": "k_n=30 incl. self, Delta_x=0.25, infeasible inputs <= 10%",
        "numpy_knn_estimate": "blocked numpy (!=).sum + argpartition on 1,000 queries, scaled",
    }
    target.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
