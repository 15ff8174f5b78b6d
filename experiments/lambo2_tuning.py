"""Tune LaMBO-2's ``cpu`` preset on training instances of the f2 configuration, one lever at a time.

The LaMBO-2 counterpart of ``llome_tuning.py`` (same layout, same summary): each *variant* is the
``cpu`` preset plus a few :class:`~llome_jax.lambo2.optimizer.Lambo2Config` overrides
(:data:`VARIANTS`, or ``--set key=value`` with dotted keys such as ``train.epochs=32`` for an
ad-hoc one). Every (variant, instance seed, run seed) runs in its own resumable run directory
``<out>/<variant>/inst<i>_seed<s>/``; re-running resumes unfinished runs and skips finished ones.

Training instances are ``Ehr(32,32)-4-4-4`` built from an instance seed, never the paper's f2:
f2 is the final check (``lambo2_f2.py``).

Outputs in ``<out>/``: ``runs.csv``, ``tuning.md`` (median and range of the min regret at 30K
labels per variant, mean wall minutes per run) and ``tuning.png``.

Examples::

    taskset -c 0 python experiments/lambo2_tuning.py --variants base,warm --instances 101,102
    python experiments/lambo2_tuning.py --variants mine --set design.num_mutations=8
    python experiments/lambo2_tuning.py --summary-only
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

from llome_tuning import FUNCTION, _parse_set, _records, summarise  # experiments/llome_tuning.py

TITLE = "LaMBO-2 cpu preset levers"

#: variant name -> Lambo2Config overrides on the ``cpu`` preset (one lever at a time).
VARIANTS: dict[str, dict[str, Any]] = {
    "base": {},
    # each round's fit continues from the last round's weights instead of θ0 (cortex's choice)
    "warm": {"warm_start": True},
    # the feasibility head multiplies each member's mean (the paper's text; off in its configs)
    "constraints": {"design.use_constraints": True},
    # more edit positions per design step (paper 4; bbo-bench's reproduce sweep 16-24)
    "mutations8": {"design.num_mutations": 8},
    # fewer edit positions per design step (the paper's sweep {2, 4, 8, 16}; closer to seeds)
    "mutations2": {"design.num_mutations": 2},
    # twice the epochs per fit (paper 100, bbo-bench 16 = cpu)
    "epochs32": {"train.epochs": 32},
    # seeds from the whole history instead of the top quarter (bbo-bench's alpha 2 tiles them)
    "alpha1": {"alpha": 1.0},
    # more design steps per round (paper 32; bbo-bench's reproduce sweep 64)
    "steps64": {"design.num_steps": 64},
    # more Adam updates of the latent perturbation per design step (paper 2 = K_g)
    "guidance4": {"design.guidance_updates": 4},
    # twice the ensemble members per discriminative head (paper 8)
    "ensemble16": {"model_overrides": {"ensemble_size": 16}},
    # a third encoder block (paper 2)
    "blocks3": {"model_overrides": {"num_blocks": 3}},
    # MLM logits / 2 before sampling: tokens the plateau's labels rarely show (not in cortex)
    "decode2": {"design.decode_temperature": 2.0},
    # the same with the feasibility head in the acquisition, so hot infeasible edits are rejected
    "decode2_constraints": {"design.decode_temperature": 2.0, "design.use_constraints": True},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="base", help=f"comma list of {sorted(VARIANTS)}")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Lambo2Config override (dotted keys) for an ad-hoc variant (one --variants name)",
    )
    parser.add_argument("--instances", default="101,102", help="instance seeds of Ehr(32,32)-4-4-4")
    parser.add_argument("--seeds", default="0", help="run seeds")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", default="results/lambo2_tuning")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--summary-only", action="store_true", help="only collect finished rounds")
    args = parser.parse_args(argv)

    out = pathlib.Path(args.out)
    if args.summary_only:
        summarise(out, TITLE)
        return 0

    from llome_jax.lambo2 import optimizer

    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    extra = _parse_set(args.set)
    if extra and len(names) != 1:
        raise SystemExit("--set defines one ad-hoc variant: pass exactly one --variants name")
    unknown = [n for n in names if n not in VARIANTS and not extra]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; choose from {sorted(VARIANTS)} or use --set")
    variants = {n: {**VARIANTS.get(n, {}), **extra} for n in names}
    instances = [int(i) for i in args.instances.split(",") if i.strip()]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    configs = {  # validate everything before the first run starts
        (name, i, s): optimizer.preset(
            "cpu", function=FUNCTION, instance_seed=i, seed=s, rounds=args.rounds, **overrides
        )
        for name, overrides in variants.items()
        for i in instances
        for s in seeds
    }
    for (name, instance, seed), cfg in configs.items():
        variant_dir = out / name
        variant_dir.mkdir(parents=True, exist_ok=True)
        overrides_path = variant_dir / "overrides.json"
        overrides_text = json.dumps(variants[name], sort_keys=True)
        if overrides_path.exists() and json.loads(overrides_path.read_text()) != variants[name]:
            raise SystemExit(f"{variant_dir} holds another variant; choose a new name")
        overrides_path.write_text(overrides_text)
        run_dir = variant_dir / f"inst{instance}_seed{seed}"
        done = _records(run_dir)
        if done and done[-1]["round"] >= args.rounds:
            continue
        print(f"== {name} instance {instance} seed {seed} -> {run_dir}", flush=True)
        optimizer.run(
            cfg,
            run_dir,
            resume=(run_dir / "config.json").exists(),
            progress=not args.no_progress,
            log=lambda line, tag=f"[{name} {instance}:{seed}]": print(f"{tag} {line}", flush=True),
        )
    summarise(out, TITLE)
    return 0


if __name__ == "__main__":
    from llome_jax.host_memory import reexec_with_huge_pages

    reexec_with_huge_pages()  # huge pages for malloc: ~1.25x faster steps (see that module)
    sys.exit(main())
