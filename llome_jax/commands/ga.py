"""``llome-jax ga``: run the paper's GA on an Ehrlich function for several seeds at once."""

from __future__ import annotations

import argparse

from llome_jax.commands._common import (
    add_run_arguments,
    apply_settings,
    check_out,
    make_trackers,
    objective_argument,
    print_config_or_require_out,
    run_overrides,
)

NAME = "ga"
HELP = (
    "Run the paper's genetic algorithm: one resumable run in rounds (--rounds; the run directory "
    "of llome and lambo2) or many seeds in one jitted call (trace, summary, plot)."
)
ORDER = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(
        parser,
        what="GA",
        presets=None,
        rounds_help="round mode: rounds after round 0 (without it, --budget and --resume: the "
        "many-seeds mode)",
    )
    parser.add_argument(
        "--particles", type=int, default=None, help="population size n (paper: 1000)"
    )
    parser.add_argument("--survival-quantile", type=float, default=None, help="alpha (paper: 0.1)")
    parser.add_argument("--mutation-prob", type=float, default=None, help="p_m (paper: 0.005)")
    parser.add_argument("--recombine-prob", type=float, default=None, help="p_r (paper: 0.0882)")
    seeds = parser.add_argument_group(
        "many-seeds mode",
        "without --rounds: independent runs of --generations generations for seeds --seed, "
        "--seed + 1, ... in one jitted call; --out receives trace.csv, summary.json and "
        "regret.png.",
    )
    seeds.add_argument(
        "--generations", type=int, default=None, help="generations per seed (default 1000)"
    )
    seeds.add_argument(
        "--seeds", type=int, default=None, help="independent runs seed, seed+1, ... (default 8)"
    )
    seeds.add_argument(
        "--segment",
        type=int,
        default=None,
        help="generations per jitted call (progress granularity; default 50)",
    )
    rounds = parser.add_argument_group(
        "round mode",
        "with --rounds, --budget or --resume, one run (--seed) under the round driver, writing the run "
        "directory of llome and lambo2 (config.json, rounds.jsonl, evaluated.csv, regret.png, "
        "checkpoints/; --resume continues it): round 0 = --initial-generations generations "
        "(LLOME's seed data), then rounds of --labels-per-round new labels (default 2 x 1000 "
        "= LLOME's j).",
    )
    rounds.add_argument(
        "--initial-generations",
        type=int,
        default=None,
        help="n0, generations of round 0: round0_generations (10)",
    )
    rounds.add_argument(
        "--generations-per-round",
        type=int,
        default=None,
        help="G (2): a later round pays G x n new labels (the default accounting, pay_once: its "
        "generations run until it has), or is G generations (--set accounting=every_evaluation)",
    )
    rounds.add_argument(
        "--labels-per-round",
        type=int,
        default=None,
        help="the new labels a later round pays (pay_once; default G x n = 2000)",
    )


#: flags -> ``GARunConfig`` settings (round mode)
_ROUND_FLAGS = {
    "particles": "round0_ga.num_particles",
    "survival_quantile": "round0_ga.survival_quantile",
    "mutation_prob": "round0_ga.mutation_prob",
    "recombine_prob": "round0_ga.recombine_prob",
    "initial_generations": "round0_generations",
    "generations_per_round": "generations_per_round",
    "labels_per_round": "labels_per_round",
}


def _refuse(args: argparse.Namespace, flags: dict[str, str], mode: str) -> None:
    """A clear error for flags of the other mode (``flags``: dest -> flag), instead of ignoring
    them."""
    given = [flag for dest, flag in flags.items() if getattr(args, dest, None) is not None]
    if given:
        raise ValueError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} {mode}")


def _run_rounds(args: argparse.Namespace) -> int:
    import pathlib

    from llome_jax.ga.optimizer import GARunConfig, GeneticAlgorithm, run
    from llome_jax.run.runner import progress_text

    _refuse(
        args,
        {"generations": "--generations", "segment": "--segment"},
        "for the many-seeds mode (without --rounds); a round-mode run has "
        "--initial-generations and --generations-per-round",
    )
    if args.seeds is not None and args.seeds != 1:
        raise ValueError("--rounds runs one seed (--seed); leave --seeds at 1")
    if args.resume and args.out is not None and (pathlib.Path(args.out) / "trace.csv").exists():
        raise ValueError(
            f"{args.out} holds a many-seeds GA run (trace.csv), which cannot be resumed; "
            "--resume continues a round-mode run (--rounds)"
        )
    if args.function is None and args.instance_seed is not None and not args.resume:
        args.function = "f2"  # the GA's default function, sampled with that seed
    objective = objective_argument(args, "ga")
    flags = run_overrides(args, ())
    flags.update(
        {
            key: getattr(args, dest)
            for dest, key in _ROUND_FLAGS.items()
            if getattr(args, dest) is not None
        }
    )
    cfg = apply_settings(args, "ga", GARunConfig(), flags, upgrade=GeneticAlgorithm.upgrade_config)
    if print_config_or_require_out(args, "ga", cfg, objective=objective):
        return 0
    trackers = make_trackers(args)
    result = run(
        cfg,
        args.out,
        objective=objective,
        resume=args.resume,
        progress=not args.no_progress,
        trackers=trackers,
        budget=getattr(args, "budget", None),
        bars=not getattr(args, "quiet", False),
        repair=getattr(args, "repair", False),
    )
    if result.records:
        last = result.records[-1]
        print(
            f"GA on {cfg.function if objective is None else objective.name}: round "
            f"{last['round']}, {last['num_evaluations']} labels paid, {progress_text(last)}; "
            f"wrote {result.path}"
        )
    return 0


def run(args: argparse.Namespace) -> int:
    import pathlib

    from tqdm import tqdm

    from llome_jax import ehrlich, ga
    from llome_jax.ga.optimizer import GASeedsConfig, run_seeds
    from llome_jax.rough_mt_fuji import is_rmf_name

    if args.rounds is not None or args.resume or getattr(args, "budget", None) is not None:
        return _run_rounds(args)
    if args.objective is not None:
        raise ValueError("--objective runs in round mode: pass --rounds")
    _refuse(
        args,
        {
            "initial_generations": "--initial-generations",
            "generations_per_round": "--generations-per-round",
            "labels_per_round": "--labels-per-round",
        },
        "for the round mode: pass --rounds (the many-seeds mode has --generations)",
    )
    if args.config or args.settings:
        raise ValueError("--config / --set configure a round-mode run: pass --rounds")
    if getattr(args, "trackers", None):
        raise ValueError("--tracker logs the rounds of a round-mode run: pass --rounds")
    if args.print_config:
        raise ValueError("--print-config shows a round-mode configuration: pass --rounds")
    if args.out is None:
        raise ValueError("--out DIR is required")
    check_out(args.out)
    defaults = ga.GAConfig()
    args.function = "f2" if args.function is None else args.function
    if is_rmf_name(args.function):
        raise ValueError(
            "the many-seeds mode reads regret as 1 - f (an Ehrlich function); run Rough Mt. "
            "Fuji in round mode: pass --rounds"
        )
    args.seed = 0 if args.seed is None else args.seed
    args.seeds = 8 if args.seeds is None else args.seeds
    args.generations = 1000 if args.generations is None else args.generations
    args.segment = 50 if args.segment is None else args.segment
    if args.generations < 1 or args.seeds < 1 or args.segment < 1:
        raise ValueError("--generations, --seeds and --segment must be positive")
    config = ga.GAConfig(
        num_particles=defaults.num_particles if args.particles is None else args.particles,
        survival_quantile=defaults.survival_quantile
        if args.survival_quantile is None
        else args.survival_quantile,
        mutation_prob=defaults.mutation_prob if args.mutation_prob is None else args.mutation_prob,
        recombine_prob=defaults.recombine_prob
        if args.recombine_prob is None
        else args.recombine_prob,
    )
    cfg = GASeedsConfig(
        function=args.function,
        instance_seed=args.instance_seed,
        seed=args.seed,
        seeds=args.seeds,
        generations=args.generations,
        segment=args.segment,
        ga=config,
    )
    name = ehrlich.resolve_function(args.function, args.instance_seed).config.name
    with tqdm(
        total=args.generations,
        desc=f"GA {name} x{args.seeds} seeds",
        unit="gen",
        disable=args.no_progress,
    ) as bar:

        def progress(done: int, best: float) -> None:
            bar.set_postfix(best=f"{best:.4f}", regret=f"{1 - best:.4f}")
            bar.update(done - bar.n)

        summary = run_seeds(cfg, args.out, progress=progress)
    hits = [g for g in summary["generations_to_optimum"] if g is not None]
    print(
        f"{name}: median final regret {summary['median_final_regret']:.4f} over "
        f"{args.seeds} seeds; optimum reached by {len(hits)}/{args.seeds}; "
        f"{summary['wall_seconds']:.1f} s"
    )
    print(f"wrote {pathlib.Path(args.out)}/trace.csv, summary.json, regret.png")
    return 0
