"""Does a LLOME run's policy prefer the edits that improve its best sequences?

Loads a run directory's policy, takes the ``--top`` best labelled sequences, scores every
single-substitution mutant with the oracle, and computes the policy's mean per-token
log-likelihood of each mutant given its incumbent as the prompt (the quantity the Filter
thresholds). Prints, for improving / neutral / worse feasible / infeasible mutants, their count,
median log-likelihood and the share above the 0.6 quantile of all mutants, and ``P(improving >
neutral)``: the chance that a random improving mutant outscores a random neutral one (0.5: no
preference; the Mann-Whitney statistic, ties counted half).

``--model final`` (default) scores with the run's newest checkpoint; ``--model initial`` with
the model it started from (``weights``, e.g. a pretrained prior, or the untrained model of the
run seed). The configuration comes from the run's ``config.json`` (or, for ``llome_tuning.py``
runs, its variant's ``overrides.json`` with ``--function`` / ``--instance-seed``).

    python experiments/llome_likelihood_probe.py results/llome_tuning/base/inst1_seed0 --top 20
    python experiments/llome_likelihood_probe.py results/pretraining/runs/f2/pretrained_seed0 \
        --model initial
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np
from llome_diagnose import single_mutants  # experiments/llome_diagnose.py


def run_config(run_dir: pathlib.Path, function: str, instance_seed: int):
    """The run's :class:`LoopConfig`: its ``config.json``, or for a ``llome_tuning.py`` run the
    ``cpu`` preset with its variant's ``overrides.json``."""
    import dataclasses

    from llome_jax.llome import loop
    from llome_jax.llome.config import LoopConfig, upgrade_saved_config
    from llome_jax.llome.presets import preset

    variant = run_dir.parent / "overrides.json"
    if variant.is_file():
        overrides = json.loads(variant.read_text())
        loss = overrides.pop("loss", "marge")
        overrides = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
        seed = int(run_dir.name.split("_seed")[1])
        return preset(
            "cpu",
            function=function,
            instance_seed=instance_seed,
            seed=seed,
            schedule=loop.schedule_for_loss(loss),
            **overrides,
        )
    saved = upgrade_saved_config(json.loads((run_dir / "config.json").read_text()))
    names = {f.name for f in dataclasses.fields(LoopConfig)}
    return LoopConfig.from_dict({k: v for k, v in saved.items() if k in names})


def prefers(a: np.ndarray, b: np.ndarray) -> float:
    """``P(a > b)`` for random members of ``a`` and ``b``, ties counted half (Mann-Whitney)."""
    if len(a) == 0 or len(b) == 0:
        return float("nan")
    b = np.sort(b)
    below = np.searchsorted(b, a, side="left")
    equal = np.searchsorted(b, a, side="right") - below
    return float((below + 0.5 * equal).sum() / (len(a) * len(b)))


def probe(
    run_dir: pathlib.Path, top: int, function: str, instance_seed: int, model: str = "final"
) -> dict:
    from llome_jax import ehrlich
    from llome_jax.checkpoint import CheckpointManager
    from llome_jax.llome.runtime import Runtime
    from llome_jax.llome.state import restore_checkpoint
    from llome_jax.rundir import RunDirectory
    from llome_jax.train import compute_logprobs

    cfg = run_config(run_dir, function, instance_seed)
    res = Runtime.build(cfg)
    if model == "final":
        with CheckpointManager(run_dir / "checkpoints") as manager:
            state = restore_checkpoint(manager, res, cfg)
        params, where = state.params, f"round {int(state.round)}"
    else:
        params, where = None, f"initial model ({cfg.weights or 'untrained'})"
    _, x, values = RunDirectory(run_dir).evaluated()
    values = np.where(np.isfinite(values), values, -np.inf)
    best = values.max()
    incumbents = x[np.argsort(-values, kind="stable")[:top]]
    fn_states = res.fn.config.num_states
    prompts, mutants = [], []
    for sequence in incumbents:
        m = single_mutants(sequence, fn_states)
        prompts.append(np.repeat(sequence[None], len(m), 0))
        mutants.append(m)
    prompts, mutants = np.concatenate(prompts), np.concatenate(mutants)
    v = np.asarray(ehrlich.evaluate(res.fn, mutants), np.float64)
    ids, target_mask, attention_mask = res.codec.encode_pairs(prompts, mutants)
    lp = compute_logprobs(res.model, params, ids, target_mask, attention_mask, batch_size=1024)
    per_token = np.asarray(lp.sum_logp) / np.asarray(lp.num_tokens)
    cut = np.quantile(per_token, 0.6)
    print(f"{run_dir}: {where}, best {best:.4f}, {len(v)} mutants of "
          f"{len(incumbents)} incumbents (v = {fn_states})")  # fmt: skip
    groups = {
        "improving": v > best,
        "neutral": v == best,
        "worse feasible": np.isfinite(v) & (v < best),
        "infeasible": ~np.isfinite(v),
    }
    for name, rows in groups.items():
        print(
            f"{name:>15}: n={int(rows.sum()):6d}  median log-lik/token "
            f"{np.median(per_token[rows]):8.4f}  above the 0.6 quantile {np.mean(per_token[rows] > cut):.3f}"
        )
    preference = prefers(per_token[groups["improving"]], per_token[groups["neutral"]])
    print(f"P(improving > neutral) = {preference:.3f}")
    return {
        "run": str(run_dir),
        "model": where,
        "best": float(best),
        "improving": int(groups["improving"].sum()),
        "neutral": int(groups["neutral"].sum()),
        "median_improving": float(np.median(per_token[groups["improving"]]))
        if groups["improving"].any()
        else float("nan"),
        "median_neutral": float(np.median(per_token[groups["neutral"]])),
        "p_improving_over_neutral": preference,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=pathlib.Path)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--function", default="Ehr(32,32)-4-4-4")
    parser.add_argument("--instance-seed", type=int, default=1)
    parser.add_argument(
        "--model",
        choices=("final", "initial"),
        default="final",
        help="the run's newest checkpoint, or the model it started from (a prior or untrained)",
    )
    parser.add_argument("--csv", type=pathlib.Path, help="append one row per run to this CSV")
    args = parser.parse_args(argv)
    for run_dir in args.run_dirs:
        row = probe(run_dir, args.top, args.function, args.instance_seed, args.model)
        if args.csv is not None:  # each run's row as soon as it is known (a long probe may stop)
            import csv

            new_file = not args.csv.exists()
            with open(args.csv, "a", newline="") as stream:
                writer = csv.DictWriter(stream, fieldnames=list(row))
                if new_file:
                    writer.writeheader()
                writer.writerow(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
