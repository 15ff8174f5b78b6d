"""``llome-jax pretrain``: pretrain the LLOME policy on many Ehrlich instances of one configuration."""

from __future__ import annotations

import argparse

from llome_jax.commands._common import add_run_directory_arguments

NAME = "pretrain"
HELP = (
    "Pretrain the LLOME policy on GA data and PropEn pairs of many instances of one Ehrlich "
    "configuration (instance seeds >= 1,000,000); resumable, writes losses.csv, loss.png and "
    "weights/ for llome --weights."
)
ORDER = 35

#: flags -> ``PretrainConfig`` settings
_FLAGS = {
    "function": "function",
    "first_instance_seed": "first_instance_seed",
    "instances": "num_instances",
    "seed": "seed",
    "generations": "ga_generations",
    "particles": "ga.num_particles",
    "loss": "loss",
    "epochs": "finetune.epochs",
    "steps": "max_steps",
    "batch_size": "finetune.batch_size",
    "lr": "finetune.learning_rate",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--preset",
        default=None,
        choices=("smoke", "cpu"),
        help="smoke (seconds, Ehr(8,8)-2-2-2) | cpu (default: the cpu LLOME preset's model, "
        "text format and round-1 training; with --resume: the run's)",
    )
    parser.add_argument(
        "--function",
        default=None,
        help="the Ehrlich configuration 'Ehr(v,L)-c-k-q' (or f1..f4 for theirs; default "
        "Ehr(32,32)-4-4-4)",
    )
    parser.add_argument(
        "--first-instance-seed",
        type=int,
        default=None,
        help="instances first, first + 1, ...; >= 1,000,000 (seeds below are kept for "
        "evaluation; default 1,000,000)",
    )
    parser.add_argument("--instances", type=int, default=None, help="number of instances (256)")
    parser.add_argument("--seed", type=int, default=None, help="run seed (default 0)")
    parser.add_argument(
        "--generations", type=int, default=None, help="GA generations per instance (10)"
    )
    parser.add_argument("--particles", type=int, default=None, help="GA population (1000)")
    parser.add_argument(
        "--loss", default=None, help="sft (default, LLOME's round 1), marge or reinforce"
    )
    parser.add_argument("--epochs", type=int, default=None, help="passes over the pairs (4)")
    parser.add_argument(
        "--steps", type=int, default=None, help="total optimizer steps (overrides --epochs)"
    )
    parser.add_argument("--batch-size", type=int, default=None, help="pairs per step (64)")
    parser.add_argument("--lr", type=float, default=None, help="peak learning rate (1e-2)")
    add_run_directory_arguments(parser, "pair_sampling=balanced, ga_generations=30")


def build_config(args: argparse.Namespace):  # -> PretrainConfig
    """The :class:`~llome_jax.llome.pretrain_config.PretrainConfig` of the parsed arguments: the preset
    < the run's ``config.json`` (``--resume``) < ``--config`` < the flags given < ``--set``
    (``_common.apply_settings``). Raises ``ValueError`` on bad input, before any jitted code."""
    from llome_jax.commands._common import apply_settings, check_out, saved_run_config
    from llome_jax.llome.pretrain_config import PRESETS, preset

    check_out(args.out)
    saved = saved_run_config(args, "pretrain")
    name = args.preset or saved.get("preset") or "cpu"
    if saved.get("preset") not in (None, name):
        raise ValueError(
            f"cannot resume {args.out}: it was made with --preset {saved['preset']}, not "
            f"{name} (leave --preset out to resume it)"
        )
    if name not in PRESETS:  # a saved config.json from elsewhere
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    flags = {key: getattr(args, dest) for dest, key in _FLAGS.items()}
    flags = {key: value for key, value in flags.items() if value is not None}
    return apply_settings(
        args,
        "pretrain",
        preset(name),
        flags,
        not_settings=("instance_seeds", "seconds", "seconds_data"),
    )


def run(args: argparse.Namespace) -> int:
    import json
    import os

    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    from llome_jax.llome import pretrain, pretrain_config

    cfg = build_config(args)
    if args.print_config:
        print(json.dumps(pretrain_config.run_config(cfg), indent=1, default=list))
        return 0
    if args.out is None:
        raise ValueError("--out DIR is required (or --print-config to show the configuration)")
    import pathlib

    from llome_jax.host import compile_cache

    # ehrlich.make compiles a small chain sampler per instance: a persistent cache turns the
    # repeats into cache hits (keep one the caller set)
    compile_cache.enable(pathlib.Path(args.out) / ".jax_cache", min_compile_time_secs=0.0)
    result = pretrain.run(cfg, args.out, resume=args.resume, progress=not args.no_progress)
    print(
        f"pretrained {result.steps} steps on {cfg.num_instances} x {cfg.function}; wrote "
        f"{result.path}/config.json, losses.csv, loss.png, checkpoints/ and {result.weights} "
        f"(llome-jax llome --weights {result.weights})"
    )
    return 0
