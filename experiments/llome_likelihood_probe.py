"""Does a LLOME run's latest policy prefer the edits that improve its best sequences?

Loads the newest checkpoint of a run directory made by ``llome_tuning.py`` (its variant's
``overrides.json`` rebuilds the configuration), takes the ``--top`` best labelled sequences, scores
every single-substitution mutant with the oracle, and computes the policy's mean per-token
log-likelihood of each mutant given its incumbent as the prompt (the quantity the Filter
thresholds). Prints, for improving / neutral / worse feasible / infeasible mutants, their count,
median log-likelihood and the share above the 0.6 quantile of all mutants.

    python experiments/llome_likelihood_probe.py results/llome_tuning/base/inst1_seed0 --top 20
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np
from llome_diagnose import single_mutants  # experiments/llome_diagnose.py


def probe(run_dir: pathlib.Path, top: int, function: str, instance_seed: int) -> None:
    from llome_jax import ehrlich
    from llome_jax.checkpoint import CheckpointManager
    from llome_jax.llome import loop
    from llome_jax.llome.presets import preset
    from llome_jax.llome.runtime import Runtime
    from llome_jax.llome.state import restore_checkpoint
    from llome_jax.rundir import RunDirectory
    from llome_jax.train import compute_logprobs

    overrides = json.loads((run_dir.parent / "overrides.json").read_text())
    loss = overrides.pop("loss", "marge")
    overrides = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    seed = int(run_dir.name.split("_seed")[1])
    cfg = preset(
        "cpu",
        function=function,
        instance_seed=instance_seed,
        seed=seed,
        schedule=loop.schedule_for_loss(loss),
        **overrides,
    )
    res = Runtime.build(cfg)
    with CheckpointManager(run_dir / "checkpoints") as manager:
        state = restore_checkpoint(manager, res, cfg)
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
    lp = compute_logprobs(
        res.model, state.params, ids, target_mask, attention_mask, batch_size=1024
    )
    per_token = np.asarray(lp.sum_logp) / np.asarray(lp.num_tokens)
    cut = np.quantile(per_token, 0.6)
    print(f"{run_dir}: round {int(state.round)}, best {best:.4f}, {len(v)} mutants of "
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=pathlib.Path)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--function", default="Ehr(32,32)-4-4-4")
    parser.add_argument("--instance-seed", type=int, default=1)
    args = parser.parse_args(argv)
    for run_dir in args.run_dirs:
        probe(run_dir, args.top, args.function, args.instance_seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
