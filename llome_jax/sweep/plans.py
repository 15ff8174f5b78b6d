"""Sweep plans as data: the paper's plan or a user's YAML file, with each run's resources and
time limit.

A :class:`SweepPlan` is what every executor runs: a base :class:`~llome_jax.bench.plan.Scale`
(presets, overrides, rounds, label budget, the cost table), the runs
(:class:`~llome_jax.bench.plan.RunSpec`, named ``<function>/<method>_seed<k>`` as the paper
driver names them), the report's figures, and per-run resources. No JAX at import.

:func:`paper_plan` is the plan ``llome-jax paper`` runs (``--scale``, ``--only``, ``--methods``);
:func:`load_plan` reads a YAML file (:data:`PLAN_KEYS`)::

    scale: smoke                 # base scale: presets, cost table (smoke, cpu or paper)
    functions: [f2]              # a grid of functions x methods x seeds ...
    methods: [GA, LLOME-MargE]   # ... (without functions: the paper's plan for `figures`)
    seeds: [0, 1]
    rounds: 1                    # rounds after round 0 (default: the scale's)
    budget: 32                   # labels after round 0 (default: rounds x j)
    presets: {llome: smoke, lambo2: smoke}
    overrides:                   # dotted keys or nested maps, after the presets
      llome: {finetune.epochs: 1, refine.num_iterations: 1}
    optimizers:                  # a new optimizer joins by name: a registered one, or a factory MODULE:ATTR
      MyOpt: my_package.my_module:make_optimizer   # (spec, scale, llome_cfg) -> RoundOptimizer
    resources:                   # per run: default, then by kind, method, run name
      default: {cpus: 1, gpus: 0, mem_gb: 4}
      llome: {gpus: 1}           # mem_gb: null asks for no memory (no --mem; e.g. mem_per_gpu)
    costs: {MyOpt: [30, 10]}     # seconds for round 0 and per round (time limits, --dry-run)
    figures: [solver]            # what report.md draws (default: solver for a grid)
    slurm:                       # cluster settings, as --slurm KEY=VALUE (the CLI's win)
      {partition: cpu, max_minutes: 240, max_jobs: 500, setup: [module load python]}
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import functools
import math
import os
import pathlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from llome_jax import configs
from llome_jax.bench.plan import (
    EXTRA_METHODS,
    F2_METHODS,
    METHODS,
    SCALES,
    RunSpec,
    Scale,
    UsageError,
    build_plan,
    function_length,
    parse_figures,
    parse_functions,
    parse_methods,
)
from llome_jax.sweep.cluster_settings import slurm_options

__all__ = [
    "DIFFICULTY",
    "PLAN_KEYS",
    "Resources",
    "SweepPlan",
    "default_resources",
    "finished",
    "load_plan",
    "paper_plan",
    "plan_from_dict",
]

#: the GA difficulty sweep's name (figure 10's other half: not an optimizer run)
DIFFICULTY = "ga_difficulty"


def finished(out: str | os.PathLike, name: str) -> bool:
    """Whether the run ``name`` under ``out`` is finished (``done.json``; the difficulty sweep:
    its ``curves.csv``)."""
    marker = "curves.csv" if name == DIFFICULTY else "done.json"
    return (pathlib.Path(out) / "runs" / name / marker).exists()


#: the keys a YAML plan may hold
PLAN_KEYS = (
    "name",
    "scale",
    "functions",
    "methods",
    "seeds",
    "rounds",
    "budget",
    "presets",
    "overrides",
    "weights",
    "optimizers",
    "resources",
    "costs",
    "figures",
    "slurm",
)


#: a plan's ``mem_gb: null`` in its resources table: no memory asked (no ``--mem``)
NO_MEMORY = -1.0


@dataclasses.dataclass(frozen=True)
class Resources:
    """What one run asks of a cluster: CPU cores, GPUs, memory (GB; ``None``: the engine's
    default)."""

    cpus: int = 1
    gpus: int = 0
    mem_gb: float | None = None

    def replace(self, **changes: Any) -> Resources:
        """These resources with ``changes`` (``None`` values are ignored)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def default_resources(scale_name: str, kind: str) -> Resources:
    """A run's resources unless the plan says otherwise: one core (and the engine's default
    memory); at the ``paper`` scale an LLOME run (Pythia-2.8B) takes one GPU, 4 cores and 64
    GB of host memory, and a LaMBO-2 run one GPU, 2 cores and 16 GB."""
    if scale_name == "paper" and kind == "llome":
        return Resources(cpus=4, gpus=1, mem_gb=64.0)
    if scale_name == "paper" and kind == "lambo2":
        return Resources(cpus=2, gpus=1, mem_gb=16.0)
    return Resources(cpus=1, gpus=0, mem_gb=None)


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """The runs of a sweep and what each needs.

    Attributes:
      name: the plan's name (the report's heading says which).
      scale_name: the base scale's name (``smoke`` marks every verdict inconclusive).
      scale: the scale every run is configured from (:func:`llome_jax.bench.execution.run_one`).
      runs: the runs, in plan order (all of them: the report covers each).
      figures: the report's figures.
      difficulty: whether the GA difficulty sweep (figure 10) is one of the tasks.
      resources: ``(key, Resources)`` for ``default``, a kind or a method, applied in that order.
      costs: ``(method, (round 0 seconds, seconds per round))`` over the scale's cost table.
      slurm: ``(key, value)`` cluster settings for the slurm executor, as ``--slurm KEY=VALUE``
        gives them (:mod:`llome_jax.sweep.cluster_settings`; also ``max_minutes``), under the
        command line's.
    """

    name: str
    scale_name: str
    scale: Scale
    runs: tuple[RunSpec, ...]
    figures: tuple[str, ...]
    difficulty: bool = False
    resources: tuple[tuple[str, Resources], ...] = ()
    costs: tuple[tuple[str, tuple[float, float]], ...] = ()
    slurm: tuple[tuple[str, Any], ...] = ()

    @functools.cached_property
    def _by_name(self) -> dict[str, RunSpec]:
        """``{name: RunSpec}``: :meth:`spec` in O(1) (a plan of 10,000 runs asks it for each)."""
        return {spec.name: spec for spec in self.runs}

    @property
    def names(self) -> list[str]:
        """Every task's name: the runs', then the difficulty sweep's."""
        return [spec.name for spec in self.runs] + ([DIFFICULTY] if self.difficulty else [])

    def select(self, patterns: Sequence[str] | None) -> list[str]:
        """The task names matching one of the shell ``patterns`` (``None``: all).

        Raises:
          UsageError: patterns that match nothing.
        """
        if patterns is None:
            return self.names
        chosen = [n for n in self.names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
        if not chosen:
            raise UsageError(
                f"--runs {','.join(patterns)!r} matches none of the {len(self.names)} planned runs"
            )
        return chosen

    def spec(self, name: str) -> RunSpec | None:
        """The run named ``name`` (``None`` for the difficulty sweep)."""
        return self._by_name.get(name)

    def resources_for(self, name: str) -> Resources:
        """A task's resources: :func:`default_resources`, then the plan's ``default``, its
        kind's, its method's, its own (by run name) and ``*`` (the command line's ``--cpus``,
        ``--gpus``, ``--mem-gb``), each changing only the fields it gives (``mem_gb: null``:
        no memory asked, :data:`NO_MEMORY`)."""
        spec = self.spec(name)
        kind = spec.kind if spec is not None else "ga"
        method = spec.method if spec is not None else DIFFICULTY
        found = default_resources(self.scale_name, kind)
        table = dict(self.resources)
        for key in ("default", kind, method, name, "*"):
            if key in table:
                found = found.replace(**dataclasses.asdict(table[key]))
        if found.mem_gb is not None and found.mem_gb < 0:  # mem_gb: null, no memory asked
            found = dataclasses.replace(found, mem_gb=None)
        return found

    def seconds(self, name: str) -> float:
        """A task's estimated seconds: the plan's ``costs`` for its method, else the scale's
        table for its kind and sequence length (the nearest length there, scaled by length,
        when its own is not listed; one hour for a kind the table lacks)."""
        spec = self.spec(name)
        if spec is None:  # 12 settings, each one compilation (~12 s) + ~4 ms a generation/seed
            scale = self.scale
            return 12 * (12.0 + 0.004 * scale.difficulty_seeds * scale.difficulty_generations)
        first, per_round = self._cost(spec)
        return first + self.scale.rounds * per_round

    def round_seconds(self, name: str) -> float:
        """A task's estimated seconds per round (the plan's ``costs`` or the scale's table, as
        :meth:`seconds`; for the difficulty sweep, its whole estimate): how early the
        scheduler must warn a job before its time limit for the round in progress to end."""
        spec = self.spec(name)
        if spec is None or self.scale.rounds < 1:
            return self.seconds(name)
        return self._cost(spec)[1]

    def _cost(self, spec: RunSpec) -> tuple[float, float]:
        """``(round 0 seconds, seconds per round)`` of a run (:meth:`seconds`)."""
        costs = dict(self.costs)
        if spec.method in costs:
            first, per_round = costs[spec.method]
            return float(first), float(per_round)
        length = function_length(spec.function)
        table = dict(self.scale.seconds)
        kind = "ga" if ":" in spec.kind else spec.kind
        if (kind, length) in table:
            first, per_round = table[(kind, length)]
            return float(first), float(per_round)
        lengths = [n for (k, n) in table if k == kind]
        if not lengths:
            return 3600.0, 0.0
        near = min(lengths, key=lambda n: (abs(n - length), n))
        first, per_round = table[(kind, near)]
        factor = max(1.0, length / near)
        return factor * first, factor * per_round

    def time_limit_minutes(
        self, name: str, margin: float = 2.0, floor: int = 10, cap: int | None = None
    ) -> int:
        """A task's time limit: its estimated seconds times ``margin``, in whole minutes, at
        least ``floor`` and at most ``cap`` (``None``: no cap)."""
        minutes = max(int(floor), math.ceil(self.seconds(name) * margin / 60.0))
        return minutes if cap is None else min(int(cap), minutes)


# ---------------------------------------------------------------------------------------------
# Building plans
# ---------------------------------------------------------------------------------------------
def _scale(name: str) -> Scale:
    if name not in SCALES:
        raise UsageError(f"unknown scale {name!r}; choose from {', '.join(SCALES)}")
    return SCALES[name]


def paper_plan(
    scale_name: str = "smoke",
    only: str | None = None,
    methods: str | None = None,
    *,
    weights: str | None = None,
    functions: str | None = None,
) -> SweepPlan:
    """The plan ``llome-jax paper`` runs for these flags (``--scale``, ``--only``,
    ``--methods``, ``--functions``; ``weights``: the Pythia-2.8B directory the ``paper`` scale
    fine-tunes)."""
    scale = _scale(scale_name)
    scale = dataclasses.replace(scale, functions=parse_functions(functions, scale))
    if weights:
        scale = dataclasses.replace(
            scale, llome_overrides=(*scale.llome_overrides, ("weights", str(weights)))
        )
    figures = parse_figures(only)
    runs = build_plan(scale, parse_methods(methods), figures)
    return SweepPlan(
        name=f"paper ({scale_name})",
        scale_name=scale_name,
        scale=scale,
        runs=tuple(runs),
        figures=tuple(figures),
        difficulty="difficulty_pareto" in figures,
    )


def load_plan(path: str | pathlib.Path) -> SweepPlan:
    """The plan of a YAML file (module docstring; relative ``weights`` resolve against the
    file's folder).

    Raises:
      UsageError: an unreadable file, an unknown key, scale, method or figure, or a value of
        the wrong type; named.
    """
    path = pathlib.Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise UsageError(f"cannot read the plan {path}: {error}") from None
    if not isinstance(data, Mapping):
        raise UsageError(f"the plan {path} must be a YAML mapping of {', '.join(PLAN_KEYS)}")
    data = dict(data)
    data.setdefault("name", path.stem)
    if data.get("weights"):
        data["weights"] = str((path.parent / str(data["weights"])).resolve())
    return plan_from_dict(data)


def plan_from_dict(data: Mapping[str, Any]) -> SweepPlan:
    """The plan of a mapping with the keys of a YAML plan (:data:`PLAN_KEYS`).

    Raises:
      UsageError: as :func:`load_plan`.
    """
    unknown = sorted(set(data) - set(PLAN_KEYS))
    if unknown:
        raise UsageError(
            f"unknown plan key(s) {', '.join(map(repr, unknown))}; a plan may hold "
            f"{', '.join(PLAN_KEYS)}"
        )
    scale_name = str(data.get("scale", "smoke"))
    scale = _scale(scale_name)
    presets = _mapping(data, "presets", ("llome", "lambo2"))
    overrides = _mapping(data, "overrides", ("llome", "lambo2"))
    changes: dict[str, Any] = {}
    if "llome" in presets:
        changes["llome_preset"] = str(presets["llome"])
    if "lambo2" in presets:
        changes["lambo_preset"] = str(presets["lambo2"])
    llome_overrides = dict(scale.llome_overrides)
    llome_overrides.update(_dotted(overrides.get("llome", {}), "overrides.llome"))
    if data.get("weights"):
        llome_overrides["weights"] = str(data["weights"])
    changes["llome_overrides"] = tuple(llome_overrides.items())
    lambo_overrides = dict(scale.lambo_overrides)
    lambo_overrides.update(_dotted(overrides.get("lambo2", {}), "overrides.lambo2"))
    changes["lambo_overrides"] = tuple(lambo_overrides.items())
    if data.get("rounds") is not None:
        changes["rounds"] = _positive(data["rounds"], "rounds")
    if data.get("budget") is not None:
        changes["budget"] = _positive(data["budget"], "budget")
    optimizers = {str(k): str(v) for k, v in _mapping(data, "optimizers", None).items()}
    for label, factory in optimizers.items():
        if ":" not in factory:  # a registered optimizer's name (llome_jax.optimizers)
            from llome_jax import optimizers as registry  # lazy: JAX (module docstring)

            if factory not in registry.names():
                raise UsageError(
                    f"optimizers.{label}: {factory!r} is neither a registered optimizer"
                    f"{_closest(factory, registry.names())} nor MODULE:ATTR "
                    f"(registered: {', '.join(registry.names())})"
                )
            optimizers[label] = f"{REGISTERED}{factory}"
            continue
        module, _, attr = factory.partition(":")
        if not module or not attr:
            raise UsageError(f"optimizers.{label}: a factory is named MODULE:ATTR, got {factory!r}")
    seeds = None
    if data.get("seeds") is not None:
        seeds = tuple(_int_list(data["seeds"], "seeds"))
    methods = _str_list(data.get("methods"), "methods")
    figures_text = ",".join(_str_list(data.get("figures"), "figures")) or None
    functions = _str_list(data.get("functions"), "functions")
    if functions:
        if not methods or seeds is None:
            raise UsageError("a plan with functions names its methods and seeds too")
        figures = parse_figures(figures_text or "solver")
        changes.update(
            functions=tuple(functions),
            seeds=tuple((f, seeds) for f in functions),
            ga_seeds=seeds,
            reduced=(),
            excluded=(),
        )
        scale = dataclasses.replace(scale, **changes)
        runs = _grid(functions, methods, seeds, optimizers, figures)
        difficulty = False
    else:
        if optimizers:
            raise UsageError("optimizers join a plan with functions (a grid), not the paper's")
        if seeds is not None:
            changes.update(seeds=tuple((f, seeds) for f, _ in scale.seeds), ga_seeds=seeds)
        scale = dataclasses.replace(scale, **changes)
        figures = parse_figures(figures_text)
        runs = build_plan(scale, parse_methods(",".join(methods) or None), figures)
        difficulty = "difficulty_pareto" in figures
    _check_optimizer_settings(scale)
    resources = _resources(_mapping(data, "resources", None))
    _check_resource_keys(resources, runs)
    return SweepPlan(
        name=str(data.get("name", "plan")),
        scale_name=scale_name,
        scale=scale,
        runs=tuple(runs),
        figures=tuple(figures),
        difficulty=difficulty,
        resources=resources,
        costs=_costs(_mapping(data, "costs", None)),
        slurm=tuple(slurm_options(_mapping(data, "slurm", None), "plan key slurm").items()),
    )


#: the kind of a run of a registered optimizer: ``registry:NAME`` (``optimizers: {Label: NAME}``)
REGISTERED = "registry:"


def _closest(word: str, choices: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices`` (difflib), or ``""``."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {found[0]!r}?" if found else ""


def _check_optimizer_settings(scale: Scale) -> None:
    """Build the plan's LLOME and LaMBO-2 configurations once (presets and overrides), so that
    an unknown preset or setting is refused before ``--dry-run`` prints or anything is submitted.

    Raises:
      UsageError: one line naming the preset or key and the closest valid one.
    """
    # lazy: JAX and the optimizers; this module loads no JAX at import (module docstring)
    from llome_jax.lambo2 import optimizer as lambo2
    from llome_jax.llome import presets

    for label, names, name, overrides, make in (
        ("llome", presets.PRESETS, scale.llome_preset, scale.llome_overrides, presets.preset),
        ("lambo2", lambo2.PRESETS, scale.lambo_preset, scale.lambo_overrides, lambo2.preset),
    ):
        if name not in names:
            raise UsageError(
                f"presets.{label}: unknown preset {name!r}{_closest(name, list(names))} "
                f"(choose from {', '.join(names)})"
            )
        given = dict(overrides)
        given.pop("weights", None)  # a directory, checked when the run starts
        try:
            make(name, **given)
        except (ValueError, TypeError) as error:
            text = str(error).splitlines()[0]
            unknown = re.search(r"unknown setting '([^']+)'", text)
            if unknown:
                key = unknown.group(1)
                valid = configs.leaf_keys(make(name))
                text = f"unknown setting {key!r}{_closest(key, valid)}"
            raise UsageError(f"overrides.{label}: {text}") from None


def _check_resource_keys(
    resources: Sequence[tuple[str, Resources]], runs: Sequence[RunSpec]
) -> None:
    """A resources key is ``default``, an optimizer kind, a method or a run name of the plan.

    Raises:
      UsageError: naming the key and the closest valid one.
    """
    kinds = {"ga", "llome", "lambo2", "local_search", *(r.kind for r in runs)}
    methods = {*METHODS, *EXTRA_METHODS, *F2_METHODS, *(r.method for r in runs)}
    valid = ["default", *sorted(kinds), *sorted(methods)]
    names = [r.name for r in runs]
    for key, _ in resources:
        if key not in valid and key not in names:
            raise UsageError(
                f"resources.{key}: not a kind, method or run of this plan{_closest(key, valid)}"
            )


def _grid(
    functions: Sequence[str],
    methods: Sequence[str],
    seeds: Sequence[int],
    optimizers: Mapping[str, str],
    figures: Sequence[str],
) -> list[RunSpec]:
    """Every function x method x seed, as the paper driver names its runs."""
    known = {**METHODS, **EXTRA_METHODS, **F2_METHODS}
    lookup = {m.lower(): m for m in known}
    runs = []
    for function in functions:
        _check_function(function)
        for method in methods:
            if method in optimizers:
                kind, schedule = optimizers[method], None
            elif method.lower() in lookup:
                method = lookup[method.lower()]
                kind, schedule = known[method]
            else:
                raise UsageError(
                    f"unknown method {method!r}; choose from {', '.join(known)} or name it "
                    "under optimizers: (MODULE:ATTR)"
                )
            runs += [
                RunSpec(method, kind, function, int(s), schedule, tuple(figures)) for s in seeds
            ]
    names = [spec.name for spec in runs]
    if len(set(names)) != len(names):
        raise UsageError("the plan names a run twice (a function, method or seed repeated)")
    return runs


def _check_function(function: str) -> None:
    from llome_jax import ehrlich  # lazy: JAX; no JAX at import (module docstring)

    try:
        ehrlich.resolve_function(function)
    except ValueError as error:
        raise UsageError(f"unknown function {function!r}: {error}") from None


def _mapping(data: Mapping[str, Any], key: str, allowed: tuple[str, ...] | None) -> dict:
    value = data.get(key) or {}
    if not isinstance(value, Mapping):
        raise UsageError(f"{key} must be a mapping, got {value!r}")
    if allowed is not None:
        extra = sorted(set(value) - set(allowed))
        if extra:
            raise UsageError(f"{key} takes {', '.join(allowed)}; not {', '.join(map(str, extra))}")
    return dict(value)


def _dotted(value: Any, where: str, prefix: str = "") -> dict[str, Any]:
    """Nested maps as dotted keys (hashable values: lists become tuples)."""
    if not isinstance(value, Mapping):
        raise UsageError(f"{where} must be a mapping of settings, got {value!r}")
    flat: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping):
            flat.update(_dotted(item, where, name + "."))
        else:
            flat[name] = tuple(item) if isinstance(item, list) else item
    return flat


def _positive(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{where} must be a positive integer, got {value!r}")
    return value


def _int_list(value: Any, where: str) -> list[int]:
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise UsageError(f"{where} must be non-negative integers, got {item!r}")
    if len(set(items)) != len(items):
        raise UsageError(f"{where} repeats a value: {items}")
    return list(items)


def _str_list(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [p.strip() for p in value.split(",") if p.strip()]
    if not isinstance(value, list):
        raise UsageError(f"{where} must be a list, got {value!r}")
    return [str(item) for item in value]


def _resources(table: Mapping[str, Any]) -> tuple[tuple[str, Resources], ...]:
    fields = {f.name for f in dataclasses.fields(Resources)}
    out = []
    for key, value in table.items():
        if not isinstance(value, Mapping) or set(value) - fields:
            raise UsageError(f"resources.{key} takes {', '.join(sorted(fields))}, got {value!r}")
        try:
            found = Resources(
                cpus=int(value.get("cpus", 1)),
                gpus=int(value.get("gpus", 0)),
                mem_gb=None if value.get("mem_gb") is None else float(value["mem_gb"]),
            )
        except (TypeError, ValueError):
            raise UsageError(f"resources.{key}: numbers only, got {value!r}") from None
        if found.mem_gb is not None and found.mem_gb < 0:
            raise UsageError(f"resources.{key}.mem_gb: GB >= 0 (null: none asked), got {value!r}")
        # only the fields given change a run's resources; mem_gb: null drops the memory asked
        given = {k: getattr(found, k) for k in value}
        if "mem_gb" in value and value["mem_gb"] is None:
            given["mem_gb"] = NO_MEMORY
        out.append((str(key), Resources(**{**dict.fromkeys(fields), **given})))
    return tuple(out)


def _costs(table: Mapping[str, Any]) -> tuple[tuple[str, tuple[float, float]], ...]:
    out = []
    for key, value in table.items():
        if not isinstance(value, list | tuple) or len(value) != 2:
            raise UsageError(f"costs.{key} is [round 0 seconds, seconds per round], got {value!r}")
        out.append((str(key), (float(value[0]), float(value[1]))))
    return tuple(out)
