"""Making the plan's runs: each run's configuration, its label budget, run / resume / skip.

:func:`run_one` is all a worker needs for one :class:`~llome_jax.bench.plan.RunSpec`: it starts,
resumes (from the last checkpoint) or skips (``done.json``) the run directory
``OUT/runs/<spec.name>`` with the optimizer of the spec's kind (the shared round driver,
:mod:`llome_jax.run.runner`), and reports ``"busy"`` when another process holds it. Every run pays
exactly :func:`~llome_jax.bench.plan.budget_after_round0` labels after the round 0 every method
of a seed shares. LLOME runs log their candidates (``candidates/round_NNNN.npz``) for the
calibration, refinement and selection figures.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

from llome_jax import optimizers
from llome_jax.bench.plan import (
    MAX_ROUNDS_FACTOR,
    PRIOR_METHODS,
    RunSpec,
    Scale,
    budget_after_round0,
)
from llome_jax.ga import optimizer as ga_optimizer
from llome_jax.lambo2 import optimizer as lambo2_optimizer
from llome_jax.llome import loop
from llome_jax.llome.presets import PRESETS, check_weights_given, preset, prior_for_function
from llome_jax.optimizers import LocalSearch, LocalSearchConfig
from llome_jax.run import runner
from llome_jax.run.lock import RunDirectoryInUseError
from llome_jax.run.rundir import RunDirectory

__all__ = ["ga_config", "lambo_config", "llome_config", "load_factory", "run_kind", "run_one"]


def llome_config(spec: RunSpec, scale: Scale):
    """LLOME's configuration: the scale's preset (``<preset>-pretrained`` for a method that
    starts from the shipped prior, or the preset with ``cpu-pretrained``'s changes where the
    scale's preset has no such variant), its overrides, the run's schedule, rounds and seed."""
    name = scale.llome_preset
    overrides: dict[str, Any] = dict(scale.llome_overrides)
    if spec.method in PRIOR_METHODS:
        if f"{name}-pretrained" in PRESETS:
            name = f"{name}-pretrained"
        else:
            overrides.update(
                {
                    "weights": "prior:" + prior_for_function(spec.function),
                    "finetune.first_round_learning_rate": None,
                    "finetune.first_round_epochs": None,
                    "finetune.first_round_min_steps": 0,
                }
            )
    if spec.schedule is not None:
        overrides["schedule"] = spec.schedule
    # a named paper instance carries its own instance: the smoke preset's instance_seed must go
    return preset(
        name,
        function=spec.function,
        instance_seed=None,
        rounds=scale.rounds,
        seed=spec.seed,
        **overrides,
    )


def lambo_config(spec: RunSpec, scale: Scale, llome_cfg: Any):
    """LaMBO-2 on LLOME's round 0 (same GA seed data) with ``j`` proposals per round."""
    overrides = {
        **dict(scale.lambo_overrides),
        "function": spec.function,
        # LLOME's instance (None for a paper function): never the smoke preset's own seed 1,
        # which would make LaMBO-2 run another problem than the GA and LLOME of the plan
        "instance_seed": llome_cfg.instance_seed,
        "rounds": scale.rounds,
        "seed": spec.seed,
        "round0_generations": llome_cfg.round0_generations,
        "round0_ga": {
            "num_particles": llome_cfg.round0_ga.num_particles,
            "mutation_prob": llome_cfg.round0_ga.mutation_prob,
        },
        "labels_per_round": llome_cfg.labels_per_round,
    }
    return lambo2_optimizer.preset(scale.lambo_preset, **overrides)


def ga_config(spec: RunSpec, scale: Scale, llome_cfg: Any):
    """The GA on LLOME's round 0 (its generations and GA settings) with rounds of about ``j``
    labels: ``round(j / n)`` generations a round, enough rounds for ``rounds x j`` labels."""
    n, j = llome_cfg.round0_ga.num_particles, llome_cfg.labels_per_round
    per_round = max(1, round(j / n))
    rounds = max(1, math.ceil(scale.rounds * j / (per_round * n)))
    return ga_optimizer.GARunConfig().replace(
        function=spec.function,
        seed=spec.seed,
        rounds=rounds,
        round0_generations=llome_cfg.round0_generations,
        generations_per_round=per_round,
        round0_ga={"num_particles": n, "mutation_prob": llome_cfg.round0_ga.mutation_prob},
    )


def run_one(
    spec: RunSpec,
    scale: Scale,
    path: pathlib.Path,
    progress: bool,
    *,
    trackers: Sequence[Any] = (),
) -> str:
    """Run, resume or skip (``done.json``) one run; returns ``"skipped"``, ``"new"``,
    ``"resumed"`` or ``"busy"`` (another process holds the run directory: it is left to that one).

    Equal label budgets: every run pays exactly ``rounds x j`` labels after round 0 (the round
    driver's ``budget``; its last round labels only what is left), within at most
    ``MAX_ROUNDS_FACTOR x rounds`` rounds, unless it stops early. ``trackers``: metrics sinks
    given every round record (:func:`llome_jax.run.runner.run`; not for the local-search baseline).
    """
    done = path / "done.json"
    if done.exists():
        return "skipped"
    resume = (path / "config.json").exists()
    log = (lambda line: print(f"  [{spec.name}] {line}", flush=True)) if progress else None
    options: dict[str, Any] = {
        "resume": resume,
        "progress": progress,
        "budget": budget_after_round0(scale),
    }
    if log is not None:
        options["log"] = log
    if trackers:
        options["trackers"] = tuple(trackers)
    capped = dataclasses.replace(scale, rounds=MAX_ROUNDS_FACTOR * scale.rounds)
    try:
        result = run_kind(spec, capped, llome_config(spec, capped), path, options)
    except RunDirectoryInUseError:
        return "busy"
    last = RunDirectory(path).rounds()[-1]["round"]
    stop = result.stop_reason
    (path / "done.json").write_text(
        json.dumps({"last_round": last, "stop_reason": stop or ""}, indent=1) + "\n"
    )
    return "resumed" if resume else "new"


def run_kind(spec: RunSpec, scale: Scale, llome_cfg: Any, path: pathlib.Path, options: dict) -> Any:
    """Start or resume ``spec``'s run with the optimiser of its kind; returns its result.

    A kind ``MODULE:ATTR`` (a sweep plan's ``optimizers:``, :mod:`llome_jax.sweep.plans`) names
    a factory ``ATTR(spec, scale, llome_cfg) -> RoundOptimizer`` (any optimizer that implements
    the round protocol of :mod:`llome_jax.run.runner`), run by the shared round driver."""
    if spec.kind.startswith("registry:"):  # a registered ask/tell optimizer, by name
        entry = optimizers.get(spec.kind.removeprefix("registry:"))
        if not issubclass(entry.config_class, optimizers.BenchmarkSettings):
            raise ValueError(
                f"{entry.name}: a sweep builds a registered optimizer's configuration from the "
                "shared BenchmarkSettings; its configuration is not one"
            )
        cfg = entry.config_class(**benchmark_settings(spec, scale, llome_cfg))
        plugin = entry.make(cfg)
        return runner.run(plugin, path, extra_config={"method": spec.method}, **options)
    if ":" in spec.kind:
        plugin = load_factory(spec.kind)(spec, scale, llome_cfg)
        return runner.run(plugin, path, **options)
    if spec.kind == "llome":
        check_weights_given(llome_cfg)  # the paper preset without --weights: refused first

        return loop.run(
            llome_cfg, path, log_candidates=True, extra_config={"method": spec.method}, **options
        )
    if spec.kind == "lambo2":
        return lambo2_optimizer.run(lambo_config(spec, scale, llome_cfg), path, **options)
    if spec.kind == "local_search":  # the ask/tell plug-in, on LLOME's round 0 and j
        cfg = LocalSearchConfig(**benchmark_settings(spec, scale, llome_cfg))
        return runner.run(LocalSearch(cfg), path, extra_config={"method": spec.method}, **options)
    return ga_optimizer.run(ga_config(spec, scale, llome_cfg), path, **options)


def benchmark_settings(spec: RunSpec, scale: Scale, llome_cfg: Any) -> dict[str, Any]:
    """The shared settings (``llome_jax.optimizers.BenchmarkSettings``) of ``spec``'s run: its
    function, LLOME's instance, its seed, the scale's rounds, ``j`` labels a round and LLOME's
    round 0 and accounting, so that an ask/tell optimizer shares round 0 and the budget with the
    plan's other methods."""
    return {
        "function": spec.function,
        "instance_seed": llome_cfg.instance_seed,
        "seed": spec.seed,
        "rounds": scale.rounds,
        "labels_per_round": int(llome_cfg.labels_per_round),
        "round0_generations": llome_cfg.round0_generations,
        "round0_ga": llome_cfg.round0_ga,
        "accounting": llome_cfg.accounting,
    }


def load_factory(kind: str) -> Callable[..., Any]:
    """The optimizer factory a plug-in kind ``MODULE:ATTR`` names (imported here).

    Raises:
      ValueError: ``kind`` is not ``MODULE:ATTR``, or names nothing callable.
    """
    module_name, _, attr = kind.partition(":")
    if not module_name or not attr:
        raise ValueError(f"an optimizer factory is named MODULE:ATTR, got {kind!r}")
    factory: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        factory = getattr(factory, part, None)
    if not callable(factory):
        raise ValueError(f"{kind!r} names no callable optimizer factory")
    return factory
