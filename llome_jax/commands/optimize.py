"""``llome-jax optimize NAME``: run any registered optimizer (``llome_jax.optimizers``)."""

from __future__ import annotations

import argparse

from llome_jax.commands._common import (
    add_run_arguments,
    apply_settings,
    make_trackers,
    objective_argument,
    print_config_or_require_out,
    run_overrides,
)

NAME = "optimize"
HELP = (
    "Run a registered optimizer by name (llome-jax optimize --list): a built-in, an installed "
    "package's (entry-point group llome_jax.optimizers) or your own as module:attr or "
    "path/to/file.py:attr; the run directory, --budget and --resume of every optimizer."
)
ORDER = 45


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "optimizer",
        nargs="?",
        default=None,
        help="a registered name (see --list) or module:attr / path/to/file.py:attr",
    )
    parser.add_argument(
        "--list", action="store_true", help="print the registered optimizers and exit"
    )
    add_run_arguments(parser, what="optimizer", presets=None)


def run(args: argparse.Namespace) -> int:
    """List the registry, or run (resume) one optimizer into ``--out``.

    Raises:
      ValueError: no optimizer named, an unknown one, or a bad setting (before anything is
        written).
    """
    from llome_jax import optimizers
    from llome_jax.run.runner import progress_text

    if args.list:
        for name in optimizers.names():
            entry = optimizers.get(name)
            print(f"{name}\t{entry.config_class.__name__}\t{entry.source}")
        return 0
    if args.optimizer is None:
        raise ValueError("name an optimizer (llome-jax optimize --list shows them)")
    entry = optimizers.get(args.optimizer)
    objective = objective_argument(args, entry.name)
    flags = run_overrides(args, ())
    upgrade = getattr(entry.make, "upgrade_config", None)
    cfg = apply_settings(args, entry.name, entry.config_class(), flags, upgrade=upgrade)
    if print_config_or_require_out(args, entry.name, cfg, objective=objective):
        return 0
    result = optimizers.run(
        entry,
        cfg,
        args.out,
        objective=objective,
        resume=args.resume,
        progress=not args.no_progress,
        trackers=make_trackers(args),
        budget=args.budget,
        bars=not args.quiet,
        repair=args.repair,
    )
    if result.records:
        last = result.records[-1]
        print(
            f"{entry.name}: round {last['round']}, {last['num_evaluations']} labels paid, "
            f"{progress_text(last)}; wrote {result.path}"
        )
    return 0
