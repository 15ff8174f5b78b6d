"""Flags shared by the optimizer commands (``ga``, ``llome``, ``lambo2``), declared once.

``add_run_arguments`` adds ``--function`` (or ``--objective MODULE:ATTR``, your own
:class:`~llome_jax.objective.Objective`; :func:`objective_argument` loads it),
``--instance-seed``, ``--preset`` (where the command has presets), ``--rounds``, ``--seed``,
``--out``, ``--resume`` and ``--no-progress`` with one meaning and one default each;
``run_overrides`` turns them into configuration overrides (only what was given, so a preset keeps
its own function and number of rounds). ``--config FILE`` and ``--set KEY=VALUE`` reach every
setting of the optimizer's configuration (dotted keys into the nested configurations, as
``--print-config`` shows them). ``--tracker tensorboard|wandb`` (repeatable) sends each round's
record to TensorBoard (``<out>/tensorboard/``) and/or W&B (offline, ``<out>/wandb/``):
:func:`make_trackers`.

**Precedence** (:func:`apply_settings`), lowest first: the preset (or the command's defaults) <
the run's own ``config.json`` (with ``--resume``) < ``--config FILE`` < the flags given on the
command line < ``--set``. So ``--resume --out DIR`` alone continues a run with its saved
configuration (function, objective and preset included); flags given beside it override it, and
the settings they change are printed. A flag that is not given never overrides anything: the
commands' flags default to ``None`` and their documented defaults live in the configurations.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "add_run_arguments",
    "apply_settings",
    "check_out",
    "make_trackers",
    "objective_argument",
    "print_config_or_require_out",
    "run_overrides",
    "saved_run_config",
]

#: The one resume rule: beside ``--resume`` a flag may change these settings (``--rounds``; and
#: ``--budget``, a run setting, which like ``rounds`` only grows), and the trackers and progress
#: output (``--tracker``, ``--no-progress``, ``--quiet``), which are not settings. Any other
#: setting given beside ``--resume`` that differs from the saved one is refused, one line naming
#: it (``RunDirectory.create``).
RESUMABLE_SETTINGS = ("rounds",)

#: ``rounds`` of a run given ``--budget`` and no ``--rounds``: a cap the budget ends first
ROUND_CAP_WITH_BUDGET = 1000


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
        help=f"f1..f4, a paper Ehr name, 'Ehr(v,L)-c-k-q' with --instance-seed, or Rough Mt. "
        f"Fuji: 'RMF(256)' (holo's) or 'RMF(L)' with --instance-seed (default: "
        f"{default_function})",
    )
    parser.add_argument(
        "--instance-seed",
        type=int,
        default=None,
        help="sample the --function 'Ehr(v,L)-c-k-q' with this seed (0 to 2,147,483,647)",
    )
    if presets is not None:
        parser.add_argument(
            "--preset",
            default=None,
            choices=list(presets),
            help=f"{' | '.join(presets)} (default cpu: {preset_help}; with --resume: the run's)",
        )
    parser.add_argument(
        "--rounds", type=int, default=None, help=rounds_help or f"{what} rounds (preset: 10)"
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=None,
        metavar="N",
        help="labels to pay after round 0: the run ends at exactly N (its last round labels only "
        f"what is left); --rounds is then a cap (default {ROUND_CAP_WITH_BUDGET}). On --resume: "
        "the saved budget, or a larger one",
    )
    parser.add_argument("--seed", type=int, default=None, help="run seed (default 0)")
    add_run_directory_arguments(parser)
    parser.add_argument(
        "--repair",
        action="store_true",
        help="with --resume: roll a damaged run directory back to its newest checkpointed round "
        "whose files agree (the later rounds are recomputed); without it a damaged one is refused",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bars; the round lines (round k/N, labels paid, min regret, ETA) stay",
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
    """The configuration overrides of the common flags that were given: ``seed``,
    ``function``/``instance_seed`` and ``rounds`` (a flag left out overrides nothing; ``--budget``
    without ``--rounds`` sets ``rounds`` to :data:`ROUND_CAP_WITH_BUDGET`).

    Raises:
      ValueError: unknown preset, ``--rounds < 1``, ``--budget < 1``, ``--instance-seed`` without
        ``--function``,
        or a function name that does not resolve.
    """
    from llome_jax import ehrlich

    presets = sorted(presets)
    preset = getattr(args, "preset", None)
    if preset is not None and preset not in presets:
        raise ValueError(f"unknown preset {preset!r}; choose one of {presets}")
    overrides: dict[str, Any] = {}
    if getattr(args, "seed", None) is not None:
        overrides["seed"] = args.seed
    if args.function is not None:
        ehrlich.resolve_function(args.function, args.instance_seed)  # a clear error if bad
        overrides.update(function=args.function, instance_seed=args.instance_seed)
    elif args.instance_seed is not None:
        raise ValueError("--instance-seed needs --function")
    if args.rounds is not None:
        if args.rounds < 1:
            raise ValueError("--rounds must be >= 1")
        overrides["rounds"] = args.rounds
    budget = getattr(args, "budget", None)
    if budget is not None:
        if budget < 1:
            raise ValueError("--budget must be >= 1 (labels to pay after round 0)")
        if args.rounds is None:
            overrides["rounds"] = ROUND_CAP_WITH_BUDGET
    return overrides


def check_out(path: str | None) -> None:
    """Refuse an ``--out`` that names an existing file (a run directory is a directory).

    Raises:
      ValueError: ``path`` exists and is not a directory.
    """
    import pathlib

    if path is not None and pathlib.Path(path).exists() and not pathlib.Path(path).is_dir():
        raise ValueError(f"--out {path} is a file, not a directory; choose another --out")


def saved_run_config(args: argparse.Namespace, optimizer: str | None = None) -> dict[str, Any]:
    """With ``--resume``: the run's ``config.json`` in ``--out`` (read once per command);
    ``{}`` without ``--resume``.

    Raises:
      ValueError: ``--resume`` without ``--out``, no run there, an unreadable ``config.json``
        (the message names it), or a run of another optimizer than ``optimizer``.
    """
    import pathlib

    from llome_jax.run.files import read_config
    from llome_jax.run.rundir import RunDirectory

    if not getattr(args, "resume", False):
        return {}
    cached = getattr(args, "_saved_run_config", None)
    if cached is None:
        if args.out is None:
            raise ValueError("--resume continues the run in --out DIR: pass --out")
        check_out(args.out)
        path = pathlib.Path(args.out) / RunDirectory.CONFIG
        if not path.is_file():
            raise ValueError(f"cannot resume: {path} does not exist (start without --resume).")
        cached = read_config(path)
        args._saved_run_config = cached
    made_for = cached.get("optimizer")
    if optimizer is not None and made_for not in (None, optimizer):
        raise ValueError(
            f"cannot resume {args.out} with {optimizer}: it holds a {made_for!r} run "
            f"(llome-jax {made_for} --resume --out {args.out})"
        )
    return cached


def apply_settings(
    args: argparse.Namespace,
    optimizer: str,
    config: Any,
    flags: Mapping[str, Any] | None = None,
    *,
    upgrade: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    not_settings: Iterable[str] = (),
) -> Any:
    """``config`` (the preset, or the command's defaults) with, in this order, the settings of
    the run's ``config.json`` (``--resume``; through ``upgrade``, the optimizer's reading of an
    older file), of ``--config FILE``, the ``flags`` given on the command line and every
    ``--set KEY=VALUE``: :func:`llome_jax.configs.layered`, which the bench, the sweep and
    Python users call alike. On resume, the settings that differ from the saved ones are
    printed (one line).

    Args:
      not_settings: more keys of a saved ``config.json`` or ``--config`` file that are not
        settings of ``config`` (e.g. LaMBO-2's ``preset``).

    Raises:
      ValueError / FileNotFoundError: an unreadable file, a file made for another optimizer, an
        unknown key (the message lists the valid ones) or a value of the wrong type; before any
        work starts.
    """
    from llome_jax import configs

    result, saved_settings = configs.layered(
        config,
        saved=saved_run_config(args, optimizer),
        file=getattr(args, "config", None),
        flags=flags,
        assignments=getattr(args, "settings", None) or [],
        optimizer=optimizer,
        upgrade=upgrade,
        not_settings=not_settings,
    )
    if saved_settings and not getattr(args, "print_config", False):
        # a target of rounds only grows: a smaller --rounds changes nothing, so it is not listed
        grows = [
            key
            for key in RESUMABLE_SETTINGS
            if not isinstance(saved_settings.get(key), int)
            or getattr(result, key, None) is None
            or getattr(result, key) > saved_settings[key]
        ]
        changes = _changes(configs, result, saved_settings, only=grows)
        if changes:  # the others are refused when the run directory is opened
            print(f"resuming {args.out} with changed settings: {changes}")
    return result


def _changes(
    configs: Any, config: Any, saved: Mapping[str, Any], only: Iterable[str] | None = None
) -> str:
    """``"rounds: 3 -> 5; seed: 0 -> 1"`` for the settings of ``config`` that differ from the
    ``saved`` ones ("" when none do); ``only``: just those keys."""
    before = configs.flatten(config, saved)
    after = configs.flatten(config, config.to_dict())
    text = []
    for key, old in before.items():
        if only is not None and key not in only:
            continue
        new = after.get(key, old)
        if json.dumps(old, sort_keys=True, default=list) != json.dumps(
            new, sort_keys=True, default=list
        ):
            text.append(
                f"{key}: {json.dumps(old, default=list)} -> {json.dumps(new, default=list)}"
            )
    return "; ".join(text)


def print_config_or_require_out(
    args: argparse.Namespace,
    optimizer: str,
    config: Any,
    extra: dict[str, Any] | None = None,
    objective: Any = None,
) -> bool:
    """With ``--print-config``: print what the run's ``config.json`` would record, provenance
    aside (``{"optimizer", **objective_config(config.to_dict(), objective), **extra}``: the
    function's digest, or the objective's name, description and digest; and the configuration's
    ``config_version``, ``llome_jax.run.migrations``) and return True (the command exits); otherwise
    check ``--out`` (given, not a file) and return False.

    Raises:
      ValueError: neither ``--print-config`` nor ``--out``, or ``--out`` names a file.
    """
    from llome_jax.objective import objective_config
    from llome_jax.run.migrations import CONFIG_VERSION, MIGRATIONS

    if args.print_config:
        recorded = objective_config(config.to_dict(), objective)
        if optimizer in MIGRATIONS:
            recorded[CONFIG_VERSION] = len(MIGRATIONS[optimizer])
        budget = getattr(args, "budget", None)
        shown = {
            "optimizer": optimizer,
            **recorded,
            **(extra or {}),
            **({"budget": budget} if budget is not None else {}),
        }
        print(json.dumps(shown, indent=1, default=list))
        return True
    if args.out is None:
        raise ValueError("--out DIR is required (or --print-config to show the configuration)")
    check_out(args.out)
    return False


def make_trackers(args: argparse.Namespace) -> list[Any]:
    """The ``--tracker`` sinks for the run in ``--out`` (``llome_jax.run.tracking.make_tracker``).

    Raises:
      ValueError: a sink's package is missing (exit code 2, before the run starts).
    """
    from llome_jax.run.tracking import make_tracker

    try:
        return [make_tracker(name, args.out) for name in getattr(args, "trackers", None) or []]
    except ImportError as error:
        raise ValueError(str(error)) from error


def objective_argument(args: argparse.Namespace, optimizer: str | None = None) -> Any:
    """The :class:`~llome_jax.objective.Objective` of ``--objective MODULE:ATTR`` (``None``
    without the flag), loaded before anything is written. With ``--resume`` and neither
    ``--objective`` nor ``--function``, the objective the run recorded (``config.json``'s
    ``"objective"``); ``args.objective`` is set to it.

    Raises:
      ValueError: the module does not import, the attribute does not give an Objective,
        ``--instance-seed`` was given with it, or the run to resume optimised an objective built
        in Python (no ``MODULE:ATTR`` to load) (one clear message; the CLI exits with code 2).
    """
    spec = getattr(args, "objective", None)
    if spec is None and getattr(args, "function", None) is None:
        recorded = saved_run_config(args, optimizer).get("objective")
        if recorded is not None:
            if ":" not in str(recorded):
                raise ValueError(
                    f"cannot resume {args.out}: it optimised the objective {recorded!r} given in "
                    "Python (no MODULE:ATTR recorded); resume it from Python"
                )
            spec = args.objective = str(recorded)
    if spec is None:
        return None
    if getattr(args, "instance_seed", None) is not None:
        raise ValueError("--instance-seed selects an Ehrlich --function; drop it with --objective")
    from llome_jax.objective import load_objective

    return load_objective(spec)


def add_run_directory_arguments(
    parser: argparse.ArgumentParser, set_example: str = "finetune.epochs=4"
) -> None:
    """The options every command that writes a run directory takes: ``--out``, ``--resume``,
    ``--no-progress``, ``--print-config``, ``--config`` and ``--set`` (``set_example`` shows a
    setting of that command in ``--set``'s help)."""
    parser.add_argument("--out", default=None, help="run directory (required to run)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out with its saved configuration (config.json); flags given "
        "beside it override it (the changes are printed)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bars and no round lines"
    )
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
        "keys; a run's config.json works. Precedence: preset < the run's config.json "
        "(--resume) < --config < the other flags < --set",
    )
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"one setting, dotted into nested configurations (e.g. {set_example}; the value "
        "is read as JSON, else as a string); repeatable; applied last (over every other flag)",
    )
