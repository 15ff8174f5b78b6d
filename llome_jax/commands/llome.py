"""``llome-jax llome``: run LLOME (GA seed data, PropEn pairs, training, refinement, Filter, oracle)."""

from __future__ import annotations

import argparse

NAME = "llome"
HELP = (
    "Optimise an Ehrlich function with LLOME (bilevel LLM loop); resumable, writes rounds.jsonl, "
    "evaluated.csv, regret.png."
)
ORDER = 30


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--function",
        default=None,
        help="f1..f4, a paper Ehr name, or 'Ehr(v,L)-c-k-q' with --instance-seed (default: the "
        "preset's, f2 for cpu/paper)",
    )
    parser.add_argument(
        "--instance-seed", type=int, default=None, help="sample the function with this seed"
    )
    parser.add_argument(
        "--loss",
        default="marge",
        help="sft | marge | dpo | reinforce: SFT for round 1, then this loss (default marge)",
    )
    parser.add_argument(
        "--schedule",
        default=None,
        help="explicit loss schedule, e.g. 'sft:1,marge:9' (overrides --loss)",
    )
    parser.add_argument(
        "--preset", default="cpu", help="smoke | cpu | paper (default cpu: small model, 2 cores)"
    )
    parser.add_argument("--rounds", type=int, default=None, help="LLOME rounds (preset: 10)")
    parser.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    parser.add_argument("--out", required=True, help="run directory")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument(
        "--weights", default=None, help="GPT-NeoX (Pythia) checkpoint directory (paper preset)"
    )
    parser.add_argument(
        "--num-selected", type=int, default=None, help="j, labels per round (preset value)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars / lines")


def build_config(args: argparse.Namespace):  # -> LoopConfig
    """The :class:`LoopConfig` for the parsed arguments (raises ``ValueError`` on bad input)."""
    from llome_jax.llome.loop import parse_schedule, schedule_for_loss
    from llome_jax.llome.presets import PRESETS, preset

    if args.preset not in PRESETS:
        raise ValueError(f"unknown preset {args.preset!r}; choose one of {sorted(PRESETS)}")
    rounds = args.rounds if args.rounds is not None else PRESETS[args.preset].get("rounds", 10)
    if rounds < 1:
        raise ValueError("--rounds must be >= 1")
    if args.schedule:
        schedule = parse_schedule(args.schedule)
    else:
        schedule = schedule_for_loss(args.loss)
    overrides = dict(schedule=schedule, rounds=rounds, seed=args.seed)
    if args.function is not None:
        overrides.update(function=args.function, instance_seed=args.instance_seed)
    elif args.instance_seed is not None:
        raise ValueError("--instance-seed needs --function")
    if args.weights is not None:
        overrides["weights"] = args.weights
    if args.num_selected is not None:
        overrides["num_selected"] = args.num_selected
    return preset(args.preset, **overrides)


def run(args: argparse.Namespace) -> int:
    import json

    from llome_jax.llome.loop import run as run_llome
    from llome_jax.llome.loop import validate_config

    cfg = build_config(args)
    validate_config(cfg)
    result = run_llome(
        cfg,
        args.out,
        resume=args.resume,
        progress=not args.no_progress,
    )
    last = result.records[-1] if result.records else None
    if last is None and result.path.joinpath("rounds.jsonl").exists():
        lines = result.path.joinpath("rounds.jsonl").read_text().splitlines()
        last = json.loads(lines[-1]) if lines else None
    if last is not None:
        print(
            f"{cfg.function}: round {last['round']}, {last['num_evaluations']} evaluations, "
            f"min regret {last['min_regret']:.4f}"
            + (f" (stopped: {result.stop_reason})" if result.stop_reason else "")
        )
    print(f"wrote {result.path}/rounds.jsonl, evaluated.csv, regret.png, config.json, checkpoints/")
    return 0
