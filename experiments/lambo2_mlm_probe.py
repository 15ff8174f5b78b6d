"""Does LaMBO-2's model point at the edits that improve the incumbents? A plateau diagnosis.

For a finished (or interrupted) LaMBO-2 run directory this script rebuilds the model the next
round would design with (the run's last checkpoint, then the fit of round ``R + 1`` on the whole
labelled history, exactly as :func:`llome_jax.lambo2.optimizer.lambo2_round` fits it) and scores
every single-substitution mutant of the best labelled sequences (up to ``--top``) in two ways:

1. **The generator**: the MLM head's probability of the mutant's token at its position, with that
   one position masked (the distribution the design samples edits from; also at the decode
   temperatures given by ``--temperatures``).
2. **The regressor**: the ensemble's mean predicted value of the mutant (what the acquisition
   ranks by).

Mutants are split by their oracle label into improving / neutral / worse feasible / infeasible;
the report gives, per class, the median token probability, the share of mutants whose token is
among the two most likely at its position, and the median predicted value. If the improving
tokens are rare under the generator, the design seldom proposes them however good the regressor.

Example::

    python experiments/lambo2_mlm_probe.py results/lambo2_tuning/mutations8/inst102_seed0 --top 50
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys

import numpy as np
from llome_diagnose import single_mutants  # experiments/llome_diagnose.py

CLASSES = ("improving", "neutral", "worse", "infeasible")


def _config(run_dir: pathlib.Path):
    from llome_jax import configs
    from llome_jax.lambo2 import optimizer

    saved = json.loads((run_dir / "config.json").read_text())  # also holds provenance keys
    fields = {f.name for f in dataclasses.fields(optimizer.Lambo2Config)}
    return configs.from_dict(
        optimizer.Lambo2Config, {k: v for k, v in saved.items() if k in fields}
    )


def probe(run_dir: pathlib.Path, top: int, temperatures: tuple[float, ...]) -> dict:
    import jax
    import jax.numpy as jnp

    from llome_jax import ehrlich
    from llome_jax.checkpoint import CheckpointManager
    from llome_jax.lambo2 import design as lambo_design
    from llome_jax.lambo2 import model as lambo_model
    from llome_jax.lambo2 import optimizer
    from llome_jax.lambo2 import train as lambo_train

    cfg = _config(run_dir)
    plugin = optimizer.Lambo2(cfg)
    mc = plugin.mc
    with CheckpointManager(run_dir / "checkpoints", max_to_keep=2) as manager:
        state = plugin.restore(manager)
    if state is None:
        raise SystemExit(f"{run_dir} has no readable checkpoint")
    history = state.history
    next_round = state.round + 1
    k_fit, _ = jax.random.split(optimizer._round_key(cfg, next_round))
    data = lambo_train.prepare_training_data(history.x, history.y, history.t, mc, cfg.train)
    params, _ = lambo_train.fit(
        k_fit,
        state.theta_init,
        data,
        mc,
        cfg.train,
        progress=lambda epoch, _: print(f"fit epoch {epoch + 1}", file=sys.stderr, flush=True),
    )
    stats = lambo_design.RegressorStats(jnp.float32(data.y_mean), jnp.float32(data.y_std))

    fn = ehrlich.resolve_function(cfg.function, cfg.instance_seed)
    v = mc.num_states
    y = np.where(np.isfinite(history.y), history.y, -np.inf)
    best = float(y.max())
    order = np.argsort(-y, kind="stable")
    incumbents = history.x[order[: min(top, int((y == best).sum()))]]
    encoder = lambo_model.encoder_module(mc, params["encoder"])

    @jax.jit
    def position_logits(sequence):
        """MLM logits [L, v] at each position with only that position masked."""
        length = sequence.shape[0]
        masked = jnp.where(jnp.eye(length, dtype=bool), mc.mask_id, sequence[None, :])
        logits = lambo_model.gen_apply(mc, params["gen"], encoder(masked))  # [L, L, vocab]
        return jnp.diagonal(logits, axis1=0, axis2=1).T[:, :v]

    rows: dict[str, list] = {c: [] for c in CLASSES}
    for sequence in incumbents:
        mutants = single_mutants(sequence, v)
        labels = np.asarray(ehrlich.evaluate(fn, jnp.asarray(mutants)), np.float64)
        logits = np.asarray(position_logits(jnp.asarray(sequence, jnp.int32)), np.float64)
        predicted = np.asarray(
            lambo_design.member_means(mc, params, stats, jnp.asarray(mutants, jnp.int32))
        ).mean(0)
        position = (mutants != sequence[None, :]).argmax(1)
        token = mutants[np.arange(len(mutants)), position]
        per_temp = []
        for temperature in temperatures:
            z = logits / temperature
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            per_temp.append(p[position, token])
        rank = (logits[position] > logits[position, token][:, None]).sum(1)
        for i, label in enumerate(labels):
            if not np.isfinite(label):
                cls = "infeasible"
            elif label > best:
                cls = "improving"
            elif label == best:
                cls = "neutral"
            else:
                cls = "worse"
            rows[cls].append((*(p[i] for p in per_temp), rank[i], predicted[i]))
    report = {
        "run": str(run_dir),
        "next_round": next_round,
        "best_value": best,
        "incumbents_probed": len(incumbents),
        "temperatures": list(temperatures),
        "classes": {},
    }
    all_pred = np.concatenate([np.asarray(r)[:, -1] for r in rows.values() if r])
    for cls, values in rows.items():
        if not values:
            report["classes"][cls] = {"count": 0}
            continue
        a = np.asarray(values, np.float64)
        entry = {"count": len(a)}
        for j, temperature in enumerate(temperatures):
            entry[f"median_p_T{temperature:g}"] = float(np.median(a[:, j]))
            entry[f"mean_p_T{temperature:g}"] = float(np.mean(a[:, j]))
        entry["share_top2_token"] = float((a[:, len(temperatures)] < 2).mean())
        entry["median_predicted_value"] = float(np.median(a[:, -1]))
        entry["share_predicted_above_median"] = float((a[:, -1] > np.median(all_pred)).mean())
        report["classes"][cls] = entry
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=pathlib.Path)
    parser.add_argument("--top", type=int, default=50, help="incumbents whose mutants are probed")
    parser.add_argument("--temperatures", default="1,2", help="decode temperatures to report")
    parser.add_argument("--json", type=pathlib.Path, help="also write the reports here")
    args = parser.parse_args(argv)
    temperatures = tuple(float(t) for t in args.temperatures.split(","))
    reports = []
    for run_dir in args.run_dirs:
        rep = probe(run_dir, args.top, temperatures)
        reports.append(rep)
        print(
            f"{rep['run']}: model of round {rep['next_round']}, best {rep['best_value']:.4f}, "
            f"{rep['incumbents_probed']} incumbents"
        )
        keys = [k for k in rep["classes"]["neutral"] if k != "count"]
        print("| mutants | count | " + " | ".join(keys) + " |")
        print("|---" * (len(keys) + 2) + "|")
        for cls, entry in rep["classes"].items():
            cells = [f"{entry[k]:.4g}" if k in entry else "-" for k in keys]
            print(f"| {cls} | {entry['count']} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(reports, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    from llome_jax.host_memory import reexec_with_huge_pages

    reexec_with_huge_pages()  # huge pages for malloc (see that module)
    sys.exit(main())
