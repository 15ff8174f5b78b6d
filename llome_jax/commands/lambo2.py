"""``llome-jax lambo2``: run LaMBO-2 (GA seed data, CNN ensemble, guided design) on an Ehrlich function."""

from __future__ import annotations

import argparse

from llome_jax.commands._common import (
    add_run_arguments,
    apply_settings,
    make_trackers,
    objective_argument,
    print_config_or_require_out,
    run_overrides,
    saved_run_config,
)

NAME = "lambo2"
HELP = (
    "Optimise an Ehrlich function (or --objective) with LaMBO-2 (JAX port); resumable, writes "
    "rounds.jsonl, evaluated.csv, regret.png."
)
ORDER = 40


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(
        parser,
        what="LaMBO-2",
        presets=("smoke", "cpu", "paper"),
        preset_help="paper protocol, small CNN; smoke: ~1 min pipeline check on LLOME's smoke "
        "problem",
    )
    parser.add_argument(
        "--num-samples",
        type=int,
        default=None,
        help="n, proposals per round: labels_per_round (preset value)",
    )
    parser.add_argument("--epochs", type=int, default=None, help="training epochs E (preset)")
    parser.add_argument(
        "--design-steps", type=int, default=None, help="design steps S per round (preset)"
    )
    parser.add_argument(
        "--kl-weight",
        type=float,
        default=None,
        help="KL weight lambda in [0, 1) of the design step (preset: 0, the paper's value)",
    )
    parser.add_argument(
        "--devices",
        type=int,
        default=None,
        help="shard the design population over this many devices (default: no mesh)",
    )


def build_config(args: argparse.Namespace):  # -> Lambo2Config
    """The :class:`Lambo2Config` for the parsed arguments (``ValueError`` on bad input): the
    preset < the run's ``config.json`` (``--resume``; its preset is the default one then) <
    ``--config`` < the flags given < ``--set`` (``_common.apply_settings``). Sets
    ``args.preset`` to the preset used."""
    from llome_jax.lambo2.optimizer import PRESETS, Lambo2, preset

    overrides = run_overrides(args, PRESETS)
    saved = saved_run_config(args, "lambo2")
    asked = getattr(args, "preset", None)
    if asked is not None and saved.get("preset") not in (None, asked):
        raise ValueError(  # a preset is the lowest layer, not a setting a resume may change
            f"cannot resume {args.out}: it was made with --preset {saved['preset']}, not {asked} "
            "(leave --preset out to resume it)"
        )
    args.preset = asked or saved.get("preset") or "cpu"
    if args.num_samples is not None:
        overrides["labels_per_round"] = args.num_samples
    if args.epochs is not None:
        overrides["train"] = {"epochs": args.epochs}
    design: dict = {}
    if args.design_steps is not None:
        design["num_steps"] = args.design_steps
    kl_weight = getattr(args, "kl_weight", None)  # namespaces built by hand may lack it
    if kl_weight is not None:
        design["kl_weight"] = kl_weight
    if design:
        overrides["design"] = design
    return apply_settings(
        args,
        "lambo2",
        preset(args.preset),
        overrides,
        upgrade=Lambo2.upgrade_config,
        not_settings=("preset",),
    )


def run(args: argparse.Namespace) -> int:
    from llome_jax.lambo2 import optimizer

    objective = objective_argument(args, "lambo2")
    cfg = build_config(args)
    if print_config_or_require_out(args, "lambo2", cfg, {"preset": args.preset}, objective):
        return 0
    trackers = make_trackers(args)
    mesh = None
    if args.devices is not None:
        from llome_jax.host.parallel import make_mesh

        mesh = make_mesh(args.devices)
    result = optimizer.run(
        cfg,
        args.out,
        resume=args.resume,
        progress=not args.no_progress,
        mesh=mesh,
        objective=objective,
        extra_config={"preset": args.preset},
        trackers=trackers,
        budget=getattr(args, "budget", None),
        bars=not getattr(args, "quiet", False),
        repair=getattr(args, "repair", False),
    )
    final = result.state.history
    best = float(final.y.max())
    from llome_jax.run.rundir import RunDirectory

    # the labels paid, as the run directory counts them (the history also holds the public
    # start sequence, which is not paid)
    paid = RunDirectory(result.path).rounds()[-1]["num_evaluations"]
    optimum = 1.0 if objective is None else objective.optimal_value
    regret = "" if optimum is None else f" (regret {optimum - best:.4f})"
    print(
        f"LaMBO-2 on {cfg.function if objective is None else objective.name}: best value "
        f"{best:.4f}{regret} after {paid} labels paid; "
        f"wrote {result.path}"
    )
    return 0
