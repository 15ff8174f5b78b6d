"""Why does an optimizer's run plateau? Reads a run directory's ``evaluated.csv`` and measures:

1. **Headroom around the incumbents**: for the best labelled sequences (up to ``--top``), every
   single-substitution mutant is scored by the oracle: how many are feasible, how many improve on
   the incumbent value, and how many distinct improving mutants exist.
2. **What each round proposed**: for the sequences labelled in round ``r``, the Hamming distance
   to the nearest sequence labelled before ``r`` (1, 2, 3-4, 5-8, > 8 positions), how many improve
   on the best value before ``r``, and how many lie 1 or 2 substitutions from an incumbent (a
   sequence of the best value labelled before ``r``).

Works for LLOME, LaMBO-2 and GA-style run directories (``config.json`` names the function).

Example::

    python experiments/llome_diagnose.py results/llome_tuning/base/inst1_seed0 --top 50
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

BINS = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 10**9))


def _nearest_distance(x: np.ndarray, reference: np.ndarray, block: int = 512) -> np.ndarray:
    """Hamming distance (positions) of each row of ``x`` to its nearest row of ``reference``."""
    out = np.empty(len(x), np.int64)
    for start in range(0, len(x), block):
        chunk = x[start : start + block]
        d = (chunk[:, None, :] != reference[None, :, :]).sum(-1)
        out[start : start + block] = d.min(1)
    return out


def single_mutants(sequence: np.ndarray, num_states: int) -> np.ndarray:
    """All ``L (v - 1)`` single-substitution mutants of ``sequence`` ``[L]``: ``[L (v-1), L]``."""
    length = sequence.shape[0]
    mutants = np.repeat(sequence[None, :], length * (num_states - 1), axis=0)
    row = 0
    for position in range(length):
        for state in range(num_states):
            if state != sequence[position]:
                mutants[row, position] = state
                row += 1
    return mutants


def diagnose(run_dir: pathlib.Path, top: int) -> dict:
    import jax.numpy as jnp

    from llome_jax import ehrlich
    from llome_jax.rundir import RunDirectory

    config = json.loads((run_dir / "config.json").read_text())
    fn = ehrlich.resolve_function(config["function"], config.get("instance_seed"))
    rounds, x, values = RunDirectory(run_dir).evaluated()
    values = np.where(np.isfinite(values), values, -np.inf)
    best = float(values.max())
    order = np.argsort(-values, kind="stable")
    incumbents = x[order[: min(top, int((values == best).sum()))]]

    improving: set[bytes] = set()
    feasible = improve = total = 0
    for sequence in incumbents:
        mutants = single_mutants(sequence, fn.config.num_states)
        v = np.asarray(ehrlich.evaluate(fn, jnp.asarray(mutants)), np.float64)
        total += len(v)
        feasible += int(np.isfinite(v).sum())
        better = v > best
        improve += int(better.sum())
        improving.update(m.tobytes() for m in mutants[better].astype(np.int64))
    labelled = {s.tobytes() for s in x.astype(np.int64)}
    report = {
        "run": str(run_dir),
        "function": config["function"],
        "instance_seed": config.get("instance_seed"),
        "best_value": best,
        "num_at_best": int((values == best).sum()),
        "incumbents_probed": len(incumbents),
        "single_mutants": total,
        "feasible_mutants": feasible,
        "improving_mutants": improve,
        "distinct_improving_mutants": len(improving),
        "improving_mutants_labelled": len(improving & labelled),
        "rounds": [],
    }
    for r in sorted(set(rounds.tolist()) - {0}):
        before, now = rounds < r, rounds == r
        prior_best = float(values[before].max())
        d = _nearest_distance(x[now], x[before])
        row = {
            "round": int(r),
            "labelled": int(now.sum()),
            "best_before": prior_best,
            "improving": int((values[now] > prior_best).sum()),
            "feasible": float(np.isfinite(values[now]).mean()),
        }
        for lo, hi in BINS:
            name = f"d{lo}" if lo == hi else (f"d{lo}-{hi}" if hi < 10**9 else f"d>{lo - 1}")
            row[name] = int(((d >= lo) & (d <= hi)).sum())
        # how focused the round is on the incumbents (the best sequences labelled before it)
        top_before = x[before & (values >= prior_best)]
        d_top = _nearest_distance(x[now], top_before)
        row["incumbents_before"] = len(top_before)
        row["near_incumbent_d1"] = int((d_top == 1).sum())
        row["near_incumbent_d2"] = int((d_top == 2).sum())
        report["rounds"].append(row)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=pathlib.Path)
    parser.add_argument("--top", type=int, default=50, help="incumbents whose mutants are probed")
    parser.add_argument("--json", type=pathlib.Path, help="also write the reports here")
    args = parser.parse_args(argv)
    reports = []
    for run_dir in args.run_dirs:
        rep = diagnose(run_dir, args.top)
        reports.append(rep)
        print(
            f"{rep['run']}: best {rep['best_value']:.4f} ({rep['num_at_best']} sequences); "
            f"{rep['incumbents_probed']} incumbents x single mutants = {rep['single_mutants']}: "
            f"{rep['feasible_mutants']} feasible, {rep['improving_mutants']} improve "
            f"({rep['distinct_improving_mutants']} distinct, "
            f"{rep['improving_mutants_labelled']} of them labelled)"
        )
        keys = [k for k in rep["rounds"][0] if k != "round"] if rep["rounds"] else []
        print("| round | " + " | ".join(keys) + " |")
        print("|---" * (len(keys) + 1) + "|")
        for row in rep["rounds"]:
            cells = [f"{row[k]:.4f}" if isinstance(row[k], float) else str(row[k]) for k in keys]
            print(f"| {row['round']} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(reports, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
