"""Random local search from the same seed data: how far do unguided single mutants get?

A diagnostic baseline for the LLOME and LaMBO-2 plateaus (docs/experiments.md). Round 0 is the
GA seed data LLOME uses (``ga.run_archive`` with the LLOME run key's ``"ga"`` key: 10 generations
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
round) and prints the min regret at the end.
"""

from __future__ import annotations

import argparse
import csv
import pathlib
from typing import NamedTuple

import numpy as np


def seed_data(
    function: str,
    instance_seed: int | None,
    seed: int,
    accounting: str = "pay_once",
    preset_name: str = "cpu",
):
    """``(fn, sequences [n, L], values [n], labels paid)``: LLOME's round 0 for run seed
    ``seed`` (the GA generations and settings of LLOME's ``preset_name`` preset, the key every
    optimizer's round 0 uses, ``runner.round0_key``).

    ``accounting`` as the optimizers' (``llome_jax.oracle``): ``"pay_once"`` pays the archive's
    distinct sequences, the public start sequence excluded; ``"every_evaluation"`` the paper's
    ``n0 n`` calls, duplicates included."""
    import jax

    from llome_jax import ehrlich, ga
    from llome_jax.llome.presets import preset
    from llome_jax.runner import round0_key

    cfg = preset(preset_name, seed=seed)
    fn = ehrlich.resolve_function(function, instance_seed)
    x0 = ehrlich.resolve_initial_solution(function, instance_seed)
    key = round0_key(jax.random.key(seed))
    archive = ga.run_archive(key, fn, x0, cfg.ga_generations, cfg.ga)
    sequences, values, _ = archive.to_numpy()
    if accounting == "every_evaluation":
        calls = cfg.ga_generations * cfg.ga.num_particles  # duplicates included (the paper)
    else:
        calls = int(np.sum(~(sequences == np.asarray(x0)).all(axis=1)))
    return fn, np.asarray(sequences, np.int64), np.asarray(values, np.float64), calls


def propose(
    rng: np.random.Generator,
    sequences: np.ndarray,
    values: np.ndarray,
    seen: set[bytes],
    num: int,
    incumbents: int,
    mutations: int,
    num_states: int,
) -> np.ndarray:
    """``num`` new distinct sequences, each ``mutations`` random substitutions of one of the
    ``incumbents`` best labelled sequences (ties at the cut broken at random)."""
    order = rng.permutation(len(values))
    order = order[np.argsort(-values[order], kind="stable")][:incumbents]
    top = sequences[order]
    length = sequences.shape[1]
    out: list[np.ndarray] = []
    stale = 0
    while len(out) < num:
        if stale == 20:
            raise ValueError(
                f"only {len(out)} of {num} new sequences found around the {len(top)} incumbents."
            )
        found = len(out)
        parents = top[rng.integers(0, len(top), 4 * num)]
        children = parents.copy()
        rows = np.arange(len(children))
        for _ in range(mutations):
            position = rng.integers(0, length, len(children))
            shift = rng.integers(1, num_states, len(children))  # a different state
            children[rows, position] = (children[rows, position] + shift) % num_states
        for child in children:
            key = child.astype(np.uint8).tobytes()
            if key not in seen:
                seen.add(key)
                out.append(child)
                if len(out) == num:
                    break
        stale = stale + 1 if len(out) == found else 0
    return np.stack(out)


def run(
    function,
    instance_seed,
    seed,
    rounds,
    per_round,
    incumbents,
    mutations,
    directory=None,
    accounting="pay_once",
    budget=None,
    preset_name="cpu",
) -> list[list]:
    """One run: a row ``[function, instance, seed, round, labels, min regret, improving]`` per
    round; with ``directory`` (a ``RunDirectory``) also its ``rounds.jsonl`` and
    ``evaluated.csv``, as the optimizers write them. With ``budget`` the run pays exactly that
    many labels after round 0 (its last round proposes only what is left; ``rounds`` is then a
    cap), as the optimizers' ``--budget``."""
    from llome_jax import ehrlich

    fn, sequences, values, evaluations = seed_data(
        function, instance_seed, seed, accounting, preset_name
    )
    rng = np.random.default_rng(1_000 + seed)
    seen = {s.astype(np.uint8).tobytes() for s in sequences}
    optimum = float(fn.optimal_value)
    best = float(values.max())
    rows = [[function, instance_seed, seed, 0, evaluations, optimum - best, 0]]
    if directory is not None:
        from llome_jax import ehrlich as _ehrlich

        x0 = np.asarray(_ehrlich.resolve_initial_solution(function, instance_seed))
        paid = ~(sequences == x0).all(axis=1) if accounting == "pay_once" else slice(None)
        directory.log_evaluated(0, sequences[paid], values[paid])
    paid = 0
    for index in range(1, rounds + 1):
        size = per_round if budget is None else min(per_round, budget - paid)
        if size <= 0:
            break
        paid += size
        batch = propose(
            rng, sequences, values, seen, size, incumbents, mutations, fn.config.num_states
        )
        new = np.asarray(ehrlich.evaluate(fn, batch.astype(np.int32)), np.float64)
        improving = int((new > best).sum())
        sequences, values = np.concatenate([sequences, batch]), np.concatenate([values, new])
        best = float(values.max())
        evaluations += size
        rows.append([function, instance_seed, seed, index, evaluations, optimum - best, improving])
        if directory is not None:
            directory.log_evaluated(index, batch, new)
    if directory is not None:
        for row in rows:
            directory.log_round(
                {
                    "round": row[3],
                    "num_evaluations": row[4],
                    "min_regret": row[5],
                    "best_value": optimum - row[5],
                    "num_improving": row[6],
                }
            )
    return rows


class LocalSearchResult(NamedTuple):
    """What :func:`run_directory_run` returns (``stop_reason`` as the round driver's)."""

    path: pathlib.Path
    rows: list
    stop_reason: str = ""


def run_directory_run(
    function: str,
    seed: int,
    path: pathlib.Path,
    *,
    budget: int,
    resume: bool = False,
    per_round: int = 2000,
    incumbents: int = 200,
    mutations: int = 1,
    preset_name: str = "cpu",
) -> LocalSearchResult:
    """One run into the run directory ``path`` (the optimizers' layout, ``config.json`` with
    ``"method": "local search"`` and ``"budget"``), paying exactly ``budget`` labels after the
    shared round 0: what ``experiments/paper.py`` runs for its ``local search`` method. A run
    takes seconds, so an unfinished one (``resume``) is made again from the start (the same
    seeds give the same run)."""
    import shutil

    from llome_jax.rundir import RunDirectory

    if resume:
        shutil.rmtree(path, ignore_errors=True)
    config = {
        "optimizer": "local_search",
        "method": "local search",
        "function": function,
        "instance_seed": None,
        "seed": seed,
        "incumbents": incumbents,
        "mutations": mutations,
        "per_round": per_round,
        "accounting": "pay_once",
        "budget": budget,
        "rounds": -(-budget // per_round),
        "round0_preset": preset_name,
    }
    directory = RunDirectory.create(path, config)
    rows = run(
        function,
        None,
        seed,
        config["rounds"],
        per_round,
        incumbents,
        mutations,
        directory,
        budget=budget,
        preset_name=preset_name,
    )
    return LocalSearchResult(directory.path, rows)


def _slug(function: str) -> str:
    """A file-name-safe form of a function name: ``Ehr(32,32)-4-4-4`` -> ``Ehr_32_32_-4-4-4``."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in function).strip("_")


def run_directory(root: pathlib.Path, args, instance, seed: int):
    """A fresh ``RunDirectory`` (the optimizers' layout) for one run, replacing an earlier one."""
    import shutil

    from llome_jax.rundir import RunDirectory

    slug = _slug(args.function)
    path = root / (f"{slug}_seed{seed}" if instance is None else f"{slug}_{instance}_seed{seed}")
    shutil.rmtree(path, ignore_errors=True)
    config = {
        "optimizer": "local_search",
        "method": "blind local search",
        "function": args.function,
        "instance_seed": instance,
        "seed": seed,
        "incumbents": args.incumbents,
        "mutations": args.mutations,
        "per_round": args.per_round,
        "accounting": args.accounting,
    }
    return RunDirectory.create(path, config)


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
        "compare` and llome_diagnose.py read the baseline like any run",
    )
    args = parser.parse_args()
    instances = [int(s) for s in args.instance_seeds.split(",") if s] or [None]
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    for instance in instances:
        finals = []
        for seed in seeds:
            directory = (
                run_directory(pathlib.Path(args.out) / "runs", args, instance, seed)
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
