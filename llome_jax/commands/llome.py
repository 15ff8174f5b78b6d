"""``llome-jax llome``: run LLOME (GA seed data, PropEn pairs, training, refinement, Filter, oracle)."""

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

NAME = "llome"
HELP = (
    "Optimise an Ehrlich function (or --objective) with LLOME (bilevel LLM loop); resumable, "
    "writes rounds.jsonl, evaluated.csv, regret.png."
)
ORDER = 30


def _loss_name(text: str) -> str:
    """``--loss``: a registered loss (``loss_registry.LOSS_SPECS``, read only when parsing, so that
    ``--help`` does not import JAX)."""
    from llome_jax.training.loss_registry import LOSS_SPECS

    name = text.strip().lower()
    if name not in LOSS_SPECS:
        raise argparse.ArgumentTypeError(
            f"invalid choice: {text!r} (choose from {', '.join(sorted(LOSS_SPECS))})"
        )
    return name


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(
        parser,
        what="LLOME",
        presets=("smoke", "cpu", "cpu-pretrained", "paper"),
        preset_help="small model, 2 cores; cpu-pretrained: from the shipped prior of the "
        "function's configuration; smoke: ~1 min pipeline check on Ehr(8,8)-2-2-2",
    )
    parser.add_argument(
        "--loss",
        default=None,
        type=_loss_name,
        help="a registered loss (built in: sft, marge, dpo, reinforce): SFT for round 1, then "
        "this loss (default marge)",
    )
    parser.add_argument(
        "--schedule",
        default=None,
        help="explicit loss schedule, e.g. 'sft:1,marge:9' (overrides --loss)",
    )
    parser.add_argument(
        "--weights",
        default=None,
        help="GPT-NeoX (Pythia) checkpoint directory (paper preset), an llome-jax pretrain "
        "weights/ directory, or prior:NAME for a shipped prior: prior:ehr32-32-4-4-4 or "
        "prior:ehr32-64-4-4-4, each for its own configuration (cpu-pretrained takes the one of "
        "--function's)",
    )
    parser.add_argument(
        "--num-selected",
        type=int,
        default=None,
        help="j, labels per round: labels_per_round (preset value)",
    )
    parser.add_argument(
        "--log-candidates",
        action="store_true",
        help="also write each round's candidates before the Filter (likelihoods, refinement "
        "iteration, Filter choice, f(x)) to OUT/candidates/round_NNNN.npz",
    )


def build_config(args: argparse.Namespace):  # -> LoopConfig
    """The :class:`LoopConfig` for the parsed arguments (raises ``ValueError`` on bad input):
    the preset with the default loss (MargE after one SFT round) < the run's ``config.json``
    (``--resume``; its preset is the default one then) < ``--config`` < the flags given <
    ``--set`` (``_common.apply_settings``)."""
    from llome_jax.llome.config import parse_schedule, schedule_for_loss
    from llome_jax.llome.loop import Llome
    from llome_jax.llome.presets import PRESETS, preset

    flags = run_overrides(args, PRESETS)
    saved = Llome.upgrade_config(saved_run_config(args, "llome")) if args.resume else {}
    name = args.preset or saved.get("preset") or "cpu"
    if saved.get("preset") not in (None, name):  # a preset is the lowest layer, not a setting
        raise ValueError(
            f"cannot resume {args.out}: it was made with --preset {saved['preset']}, not "
            f"{name} (leave --preset out to resume it)"
        )
    if args.schedule:
        flags["schedule"] = parse_schedule(args.schedule)
    elif args.loss is not None:
        flags["schedule"] = schedule_for_loss(args.loss)
    if args.weights is not None:
        flags["weights"] = args.weights
    if args.num_selected is not None:
        flags["labels_per_round"] = args.num_selected
    base = preset(name, schedule=schedule_for_loss("marge"))
    cfg = apply_settings(args, "llome", base, flags, upgrade=Llome.upgrade_config)
    if name == "cpu-pretrained" and not args.resume:
        # the preset's prior is the one of the run's configuration (a resumed run keeps its own);
        # a --weights, --config or --set given still wins, as the layers above are re-applied
        fitted = preset(name, schedule=schedule_for_loss("marge"), function=cfg.function)
        if fitted.weights != base.weights:
            cfg = apply_settings(args, "llome", fitted, flags, upgrade=Llome.upgrade_config)
    return cfg


def run(args: argparse.Namespace) -> int:
    import json
    import os

    # transformers (imported for the tokenizer) warns on import that PyTorch is missing, which
    # this package never needs; only that advisory kind of warning is silenced (not errors)
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

    from llome_jax.llome.config import validate_config
    from llome_jax.llome.loop import run as run_llome
    from llome_jax.llome.presets import check_weights_given
    from llome_jax.run.runner import progress_text

    objective = objective_argument(args, "llome")
    cfg = build_config(args)
    validate_config(cfg, check_function=objective is None)
    if print_config_or_require_out(args, "llome", cfg, objective=objective):
        return 0
    check_weights_given(cfg)
    trackers = make_trackers(args)
    result = run_llome(
        cfg,
        args.out,
        objective=objective,
        resume=args.resume,
        progress=not args.no_progress,
        trackers=trackers,
        log_candidates=args.log_candidates,
        budget=getattr(args, "budget", None),
        bars=not getattr(args, "quiet", False),
        repair=getattr(args, "repair", False),
    )
    last = result.records[-1] if result.records else None
    if last is None and result.path.joinpath("rounds.jsonl").exists():
        lines = result.path.joinpath("rounds.jsonl").read_text().splitlines()
        last = json.loads(lines[-1]) if lines else None
    if last is not None:
        print(
            f"{cfg.function if objective is None else objective.name}: round {last['round']}, "
            f"{last['num_evaluations']} labels paid, {progress_text(last)}"
            + (f" (stopped: {result.stop_reason})" if result.stop_reason else "")
        )
    print(f"wrote {result.path}/rounds.jsonl, evaluated.csv, regret.png, config.json, checkpoints/")
    return 0
