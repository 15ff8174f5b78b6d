"""Flags shared by the optimizer commands (``ga``, ``llome``, ``lambo2``), declared once.

``add_run_arguments`` adds ``--function`` (or ``--objective MODULE:ATTR``, your own
:class:`~llome_jax.objective.Objective`; :func:`objective_argument` loads it),
``--instance-seed``, ``--preset`` (where the command has presets), ``--rounds``, ``--seed``,
``--out``, ``--resume`` and ``--no-progress`` with one meaning and one default each;
``run_overrides`` turns them into configuration overrides (only what was given, so a preset keeps
its own function and number of rounds). ``--config FILE`` and ``--set KEY=VALUE`` reach every
setting of the optimizer's configuration (dotted keys into the nested configurations, as
``--print-config`` shows them); :func:`apply_settings` applies them after the preset and the
other flags. ``--tracker tensorboard|wandb`` (repeatable) sends each round's record to TensorBoard
(``<out>/tensorboard/``) and/or W&B (offline, ``<out>/wandb/``): :func:`make_trackers`.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

__all__ = [
    "add_run_arguments",
    "apply_settings",
    "make_trackers",
    "objective_argument",
    "print_config_or_require_out",
    "run_overrides",
]

#: keys of a run's ``config.json`` that are not settings: ``--config`` accepts such a file
_NOT_SETTINGS = ("optimizer", "provenance", "loss", "objective", "objective_info")


def add_run_arguments(
    parser: argparse.ArgumentParser,
    *,
    what: str,
    presets: Iterable[str] | None,
    preset_help: str = "",
    rounds_help: str | None = None,
) -> None:
    """Add the common flags of an optimizer command (``what``: its name in the help texts;
    ``presets=None``: the command has none, and ``--function`` defaults to f2)."""
    default_function = "the preset's, f2 for cpu/paper" if presets is not None else "f2"
    problem = parser.add_mutually_exclusive_group()
    problem.add_argument(
        "--objective",
        metavar="MODULE:ATTR",
        default=None,
        help="optimise your own llome_jax.Objective instead of an Ehrlich function: an Objective "
        "or a function of no arguments returning one (MODULE may be a path/to/file.py)",
    )
    problem.add_argument(
        "--function",
        default=None,
        help=f"f1..f4, a paper Ehr name, or 'Ehr(v,L)-c-k-q' with --instance-seed (default: "
        f"{default_function})",
    )
    parser.add_argument(
        "--instance-seed",
        type=int,
        default=None,
        help="sample the --function 'Ehr(v,L)-c-k-q' with this seed",
    )
    if presets is not None:
        parser.add_argument(
            "--preset",
            default="cpu",
            choices=list(presets),
            help=f"{' | '.join(presets)} (default cpu: {preset_help})",
        )
    parser.add_argument(
        "--rounds", type=int, default=None, help=rounds_help or f"{what} rounds (preset: 10)"
    )
    parser.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    parser.add_argument("--out", default=None, help="run directory (required to run)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars / lines")
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the effective configuration (as config.json records it) and exit",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="settings from a JSON or YAML file: nested as --print-config shows them, or dotted "
        "keys; a run's config.json works. Applied after the preset and the other flags",
    )
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one setting, dotted into nested configurations (e.g. finetune.epochs=4; the value "
        "is read as JSON, else as a string); repeatable; applied last",
    )
    parser.add_argument(
        "--tracker",
        dest="trackers",
        action="append",
        default=[],
        choices=("tensorboard", "wandb"),
        help="also log each round's metrics to TensorBoard (<out>/tensorboard/) or W&B (offline, "
        '<out>/wandb/); repeatable; needs pip install "llome-jax[tracking]"',
    )


def run_overrides(args: argparse.Namespace, presets: Iterable[str]) -> dict[str, Any]:
    """``seed`` and, where given, ``function``/``instance_seed`` and ``rounds``.

    Raises:
      ValueError: unknown preset, ``--rounds < 1``, ``--instance-seed`` without ``--function``,
        or a function name that does not resolve.
    """
    from llome_jax import ehrlich

    presets = sorted(presets)
    if args.preset not in presets:
        raise ValueError(f"unknown preset {args.preset!r}; choose one of {presets}")
    overrides: dict[str, Any] = {"seed": args.seed}
    if args.function is not None:
        ehrlich.resolve_function(args.function, args.instance_seed)  # a clear error if bad
        overrides.update(function=args.function, instance_seed=args.instance_seed)
    elif args.instance_seed is not None:
        raise ValueError("--instance-seed needs --function")
    if args.rounds is not None:
        if args.rounds < 1:
            raise ValueError("--rounds must be >= 1")
        overrides["rounds"] = args.rounds
    return overrides


def apply_settings(args: argparse.Namespace, optimizer: str, config: Any) -> Any:
    """``config`` with the settings of ``--config FILE`` and then of every ``--set KEY=VALUE``
    (``config.replace``: dotted keys or nested dicts; see ``llome_jax.configs``).

    Raises:
      ValueError / FileNotFoundError: an unreadable file, a file made for another optimizer, an
        unknown key (the message lists the valid ones) or a value of the wrong type; before any
        work starts.
    """
    from llome_jax import configs

    settings: dict[str, Any] = {}
    if getattr(args, "config", None):
        loaded = configs.load_config_file(args.config)
        made_for = loaded.get("optimizer", optimizer)
        if made_for != optimizer:
            raise ValueError(
                f"--config {args.config} holds a {made_for!r} configuration, not {optimizer!r}"
            )
        settings.update({k: v for k, v in loaded.items() if k not in _NOT_SETTINGS})
    for item in getattr(args, "settings", None) or []:
        key, value = configs.parse_assignment(item)
        settings[key] = value
    return config.replace(**settings) if settings else config


def print_config_or_require_out(
    args: argparse.Namespace, optimizer: str, config: Any, extra: dict[str, Any] | None = None
) -> bool:
    """With ``--print-config``: print ``{"optimizer", **config.to_dict(), **extra}`` (what the
    run's ``config.json`` records, provenance aside) and return True (the command exits);
    otherwise check that ``--out`` was given and return False.

    Raises:
      ValueError: neither ``--print-config`` nor ``--out``.
    """
    import json

    if args.print_config:
        shown = {"optimizer": optimizer, **config.to_dict(), **(extra or {})}
        print(json.dumps(shown, indent=1, default=list))
        return True
    if args.out is None:
        raise ValueError("--out DIR is required (or --print-config to show the configuration)")
    return False


def make_trackers(args: argparse.Namespace) -> list[Any]:
    """The ``--tracker`` sinks for the run in ``--out`` (``llome_jax.tracking.make_tracker``).

    Raises:
      ValueError: a sink's package is missing (exit code 2, before the run starts).
    """
    from llome_jax.tracking import make_tracker

    try:
        return [make_tracker(name, args.out) for name in getattr(args, "trackers", None) or []]
    except ImportError as error:
        raise ValueError(str(error)) from error


def objective_argument(args: argparse.Namespace) -> Any:
    """The :class:`~llome_jax.objective.Objective` of ``--objective MODULE:ATTR`` (``None``
    without the flag), loaded before anything is written.

    Raises:
      ValueError: the module does not import, the attribute does not give an Objective, or
        ``--instance-seed`` was given with it (one clear message; the CLI exits with code 2).
    """
    spec = getattr(args, "objective", None)
    if spec is None:
        return None
    if getattr(args, "instance_seed", None) is not None:
        raise ValueError("--instance-seed selects an Ehrlich --function; drop it with --objective")
    from llome_jax.objective import load_objective

    return load_objective(spec)
