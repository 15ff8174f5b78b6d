"""The plan of the paper driver: which runs the selected figures need, at which scale.

Pure data and cheap functions (no JAX at import), so a cluster worker or a notebook can rebuild
the plan and name its runs without running anything::

    from llome_jax.bench.plan import SCALES, build_plan, parse_figures, parse_methods

    plan = build_plan(SCALES["cpu"], parse_methods("GA,LLOME-MargE"), parse_figures("solver"))
    [spec.name for spec in plan]  # ['f1/GA_seed0', ..., 'f2/LLOME-MargE_seed0', ...]

A :class:`RunSpec` names its run directory ``OUT/runs/<function>/<method>_seed<k>``
(:attr:`RunSpec.name`, e.g. ``f2/LLOME-MargE_seed0``); these names are what ``--runs`` matches
and what existing output directories hold, so they never change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

__all__ = [
    "DEFAULT_METHODS",
    "EXTRA_METHODS",
    "F2_METHODS",
    "FIGURES",
    "HALF",
    "MAX_ROUNDS_FACTOR",
    "METHODS",
    "PRIOR_METHODS",
    "SCALES",
    "RunSpec",
    "Scale",
    "UsageError",
    "budget_after_round0",
    "build_plan",
    "function_length",
    "labels_per_round",
    "parse_figures",
    "parse_functions",
    "parse_methods",
    "sft_marge_label",
]


class UsageError(ValueError):
    """A selection the plan cannot honour (an unknown scale, figure or method, a ``--runs``
    pattern that matches nothing): the command line reports it as a usage error."""


#: method label -> (optimizer kind, LLOME loss schedule or None)
METHODS: dict[str, tuple[str, str | None]] = {
    "GA": ("ga", None),
    "LLOME-SFT": ("llome", "sft:1"),
    "LLOME-MargE": ("llome", "sft:1,marge:1"),
    "LLOME-DPO": ("llome", "sft:1,dpo:1"),
    "LaMBO-2": ("lambo2", None),
}
#: methods only some figures use (not selectable with --methods; run when their figure is)
EXTRA_METHODS: dict[str, tuple[str, str | None]] = {
    "LLOME-REINFORCE": ("llome", "sft:1,reinforce:1"),
}
#: f2 only (figure 1's f2 panel, where the paper makes its claims): blind local search (no model;
#: :class:`llome_jax.optimizers.LocalSearch`) and LLOME-MargE fine-tuned from the shipped prior
#: (``cpu-pretrained``); selectable with --methods
F2_METHODS: dict[str, tuple[str, str | None]] = {
    "local search": ("local_search", None),
    "LLOME-MargE-prior": ("llome", "sft:1,marge:1"),
}
#: methods that start from the shipped prior (the LLOME preset's ``-pretrained`` variant)
PRIOR_METHODS = ("LLOME-MargE-prior",)
#: what runs without --methods
DEFAULT_METHODS = (*METHODS, *F2_METHODS)

#: figure key -> title (the order of report.md), with the paper.tex label of its figure;
#: ``--only`` takes a key or its number
FIGURES: dict[str, str] = {
    "solver": "1. Solver regret comparison (paper: fig:solver_regret_comparison_main_text)",
    "diversity": "2. Diversity and feasibility of proposals on f2"
    " (paper: fig:solver_diagnostics_main_text)",
    "calibration": "3. Calibration: likelihood vs regret on f2 (paper: fig:calibration-regret)",
    "sft_marge": "4. SFT_i-MargE_j multi-stage pipelines on f2"
    " (paper: fig:sft-marge, fig:sft-marge-calibration-regret)",
    "reinforce": "5. MargE vs REINFORCE on f2 (paper: fig:reinforce)",
    "refinement": "6. Iterative refinement: min regret per refinement iteration"
    " (paper: fig:iterative-gen-all)",
    "selection": "7. Candidates selected by likelihood vs by the oracle"
    " (paper: fig:candidate-selection)",
    "half_quant": "8. Half quantisation: Ehr(32,32)-4-4-2 (paper: fig:min_regret_v32_d32_c4_k4_q2)",
    "model_size": "9. Model size: small from-scratch LLOME-MargE vs LaMBO-2 on f2"
    " (paper: fig:min_regret_small_models_v32_d32_c4_k4_q4)",
    "difficulty_pareto": "10. GA difficulty sweep and budget-vs-regret Pareto frontier"
    " (paper: fig:ehrlich_param_sensitivity, fig:pareto-frontiers)",
}

HALF = "Ehr(32,32)-4-4-2"


@dataclasses.dataclass(frozen=True)
class Scale:
    """How big every experiment is.

    Attributes:
      llome_preset / lambo_preset: the optimizers' presets.
      llome_overrides / lambo_overrides: applied after the preset (dotted keys).
      rounds: optimizer rounds ``T`` after round 0.
      seeds: function -> seeds of the expensive methods (LLOME, LaMBO-2); ``ga_seeds`` for the GA.
      functions: fig. 1's functions.
      reduced: function -> the only methods that run on it (of those selected; where the cost
        demands it).
      sft_rounds: the ``i`` of the SFT_i-MargE_j pipelines (``i + j = rounds``).
      difficulty_generations / difficulty_seeds: the GA difficulty sweep.
      seconds: (kind, L) -> (round 0 seconds, seconds per round), for ``--dry-run`` and a
        cluster task's time limit (measured on one core of a shared 2-core CPU; LaMBO-2 and
        LLOME cpu from docs/experiments.md; LLOME cpu on L = 128 is f2's cost x4, an
        extrapolation, not a measurement; the ``paper`` scale's LLOME and LaMBO-2 costs are per
        GPU, extrapolated from docs/howto/gpus.md).
      budget: labels after round 0 each run pays (``None``: ``rounds x j``,
        :func:`budget_after_round0`).
      excluded: methods this scale never plans (the ``paper`` scale's Pythia-2.8B is already
        pretrained: no run from the shipped tiny prior).
    """

    llome_preset: str
    lambo_preset: str
    llome_overrides: tuple[tuple[str, Any], ...]
    lambo_overrides: tuple[tuple[str, Any], ...]
    rounds: int
    seeds: tuple[tuple[str, tuple[int, ...]], ...]
    ga_seeds: tuple[int, ...]
    functions: tuple[str, ...]
    reduced: tuple[tuple[str, tuple[str, ...]], ...]
    sft_rounds: tuple[int, ...]
    difficulty_generations: int
    difficulty_seeds: int
    seconds: tuple[tuple[tuple[str, int], tuple[float, float]], ...]
    budget: int | None = None
    excluded: tuple[str, ...] = ()

    def seeds_for(self, function: str, kind: str) -> tuple[int, ...]:
        """The run seeds of ``kind`` on ``function``: ``seeds``; the cheap GA and local search
        also run ``ga_seeds``."""
        seeds = dict(self.seeds).get(function, ())
        if kind in ("ga", "local_search"):
            return tuple(sorted(set(self.ga_seeds) | set(seeds)))
        return seeds

    def cost(self, kind: str, length: int, rounds: int) -> float:
        """Estimated seconds of a run (a registered optimizer's at the GA's: unknown)."""
        if kind.startswith("registry:"):
            kind = "ga"
        first, per_round = dict(self.seconds)[(kind, length)]
        return first + rounds * per_round


SCALES: dict[str, Scale] = {
    "smoke": Scale(
        llome_preset="smoke",
        lambo_preset="smoke",
        # enough SFT in round 1 for the small model to write valid f2 sequences (~40 of 216)
        llome_overrides=(
            ("text_format", "compact"),
            ("round0_ga.num_particles", 200),
            ("finetune.first_round_min_steps", 96),
            ("finetune.max_train_examples", 256),
            ("finetune.epochs", 2),
            ("refine.num_iterations", 3),
            ("min_unique_candidates", 1),
        ),
        lambo_overrides=(),
        rounds=2,
        seeds=tuple((f, (0,)) for f in ("f1", "f2", "f3", "f4", HALF)),
        ga_seeds=(0,),
        functions=("f1", "f2", "f3", "f4"),
        # on L = 128 a LLOME smoke run trains ~7 s a step and LaMBO-2 compiles for minutes on
        # one shared core: the GA only there (the cpu scale runs every method on every function)
        reduced=(
            *((f, ("GA",)) for f in ("f1", "f3", "f4")),
            (HALF, ("GA", "LLOME-MargE", "LaMBO-2")),
        ),
        sft_rounds=(1, 2),
        difficulty_generations=30,
        difficulty_seeds=2,
        seconds=(
            (("ga", 32), (12.0, 5.0)),
            (("ga", 128), (15.0, 8.0)),
            (("local_search", 32), (10.0, 1.0)),
            (("llome", 32), (5.0, 35.0)),
            (("llome", 128), (5.0, 200.0)),
            (("lambo2", 32), (40.0, 15.0)),
            (("lambo2", 128), (100.0, 30.0)),
        ),
    ),
    "cpu": Scale(
        llome_preset="cpu",
        lambo_preset="cpu",
        llome_overrides=(),
        lambo_overrides=(),
        rounds=10,
        # f2, where the paper makes its claims: 8 seeds (an exact two-sided rank test on 3 vs 3
        # cannot reach p < 0.05; on 8 vs 8 it can)
        seeds=(
            ("f1", (0,)),
            ("f2", tuple(range(8))),
            ("f3", (0,)),
            ("f4", (0,)),
            (HALF, (0, 1, 2)),
        ),
        ga_seeds=(0, 1, 2),
        functions=("f1", "f2", "f3", "f4"),
        reduced=(),
        sft_rounds=(1, 3, 5, 7, 10),
        difficulty_generations=2000,
        difficulty_seeds=8,
        seconds=(
            (("ga", 32), (15.0, 2.0)),
            (("ga", 128), (30.0, 4.0)),
            (("local_search", 32), (15.0, 1.0)),
            # f2's 8-seed re-run, two runs at a time on 2 cores, exactly 20K labels after round 0:
            # LLOME-SFT ~8 min a run, LLOME-MargE ~17-25 min (the slower loss is the estimate),
            # LaMBO-2 ~55-62 min (its rounds grow from ~2 to ~8 min as its training set grows)
            (("llome", 32), (60.0, 100.0)),
            (("llome", 128), (120.0, 400.0)),  # ~4x the tokens per sequence (extrapolated)
            (("lambo2", 32), (60.0, 330.0)),
            (("lambo2", 128), (120.0, 1000.0)),  # ~2.5-3 h a run
        ),
    ),
    # The paper's settings, for GPUs (planned and dry-run in the tests, never run there): LLOME's
    # ``paper`` preset (Pythia-2.8B from ``weights``: ``llome-jax sweep --weights DIR``, one
    # epoch, 200 seeds x 10 iterations, j = 2000), LaMBO-2's ``paper`` preset (128/128/128 CNN),
    # n0 = 10 GA generations of 1000, 10 rounds: 20K labels after round 0, as the paper says.
    # The seeds are the cpu scale's (the paper does not say how many it ran).
    "paper": Scale(
        llome_preset="paper",
        lambo_preset="paper",
        llome_overrides=(),
        lambo_overrides=(),
        rounds=10,
        seeds=(
            ("f1", (0,)),
            ("f2", tuple(range(8))),
            ("f3", (0,)),
            ("f4", (0,)),
            (HALF, (0, 1, 2)),
        ),
        ga_seeds=(0, 1, 2),
        functions=("f1", "f2", "f3", "f4"),
        reduced=(),
        sft_rounds=(1, 3, 5, 7, 10),
        difficulty_generations=2000,
        difficulty_seeds=8,
        seconds=(
            (("ga", 32), (15.0, 2.0)),  # the GA and local search run on one CPU core
            (("ga", 128), (30.0, 4.0)),
            (("local_search", 32), (15.0, 1.0)),
            # one H100: a round's refinement <= ~13 min plus one epoch of 2.8B fine-tuning
            (("llome", 32), (600.0, 1200.0)),
            (("llome", 128), (1200.0, 4800.0)),  # ~4x the tokens per sequence
            # one H100: ~20 min for 10 rounds on f2 (extrapolated from the measured steps)
            (("lambo2", 32), (120.0, 120.0)),
            (("lambo2", 128), (240.0, 480.0)),
        ),
        excluded=("LLOME-MargE-prior",),
    ),
}


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One optimizer run of the plan: ``OUT/runs/<function>/<method>_seed<seed>``."""

    method: str
    kind: str
    function: str
    seed: int
    schedule: str | None
    figures: tuple[str, ...]

    @property
    def name(self) -> str:
        """The run's directory under ``OUT/runs``, e.g. ``f2/LLOME-MargE_seed0`` or
        ``Ehr32_32-4-4-2/local-search_seed1`` (what ``--runs`` matches; never changes)."""
        slug = self.function.replace("(", "").replace(")", "").replace(",", "_")
        return f"{slug}/{self.method.replace(' ', '-')}_seed{self.seed}"


def function_length(function: str) -> int:
    """The sequence length ``L`` of a named function (the cost model's key)."""
    from llome_jax import ehrlich  # lazy: JAX; this module loads no JAX (bench/__init__.py)

    return int(ehrlich.resolve_function(function).config.dim)


def sft_marge_label(i: int, rounds: int) -> str:
    """``LLOME-SFT_i-MargE_j`` (``i + j = rounds``)."""
    return f"LLOME-SFT{i}-MargE{rounds - i}"


def build_plan(scale: Scale, methods: Sequence[str], figures: Sequence[str]) -> list[RunSpec]:
    """The runs the selected figures need (deduplicated; a run shared by several figures is
    listed once with all of them)."""
    wanted: dict[tuple[str, str, int], RunSpec] = {}

    def add(method: str, function: str, figure: str, schedule: str | None = None) -> None:
        only = dict(scale.reduced).get(function)
        if method in scale.excluded:
            return
        if only is not None and method in METHODS and method not in only:
            return
        if method in F2_METHODS and function != "f2":
            return
        kind, default_schedule = {**METHODS, **EXTRA_METHODS, **F2_METHODS}.get(
            method, (registered_kind(method) or "llome", None)
        )
        for seed in scale.seeds_for(function, kind):
            key = (method, function, seed)
            old = wanted.get(key)
            figs = (old.figures if old else ()) + (figure,)
            wanted[key] = RunSpec(
                method,
                kind,
                function,
                seed,
                schedule or default_schedule,
                tuple(dict.fromkeys(figs)),
            )

    f2_llome = [m for m in methods if m in METHODS and METHODS[m][0] == "llome"]
    for figure in figures:
        if figure == "solver":
            for function in scale.functions:
                for method in methods:
                    add(method, function, figure)
        elif figure == "diversity":
            for method in [m for m in methods if m in METHODS]:
                add(method, "f2", figure)
        elif figure in ("calibration", "refinement", "selection"):
            for method in [m for m in ("LLOME-MargE", "LLOME-SFT") if m in f2_llome]:
                add(method, "f2", figure)
        elif figure == "sft_marge":
            for i in scale.sft_rounds:
                if i >= scale.rounds:
                    add("LLOME-SFT", "f2", figure)
                elif i == 1:
                    add("LLOME-MargE", "f2", figure)
                else:
                    schedule = f"sft:{i},marge:{scale.rounds - i}"
                    add(sft_marge_label(i, scale.rounds), "f2", figure, schedule)
        elif figure == "reinforce":
            add("LLOME-MargE", "f2", figure)
            add("LLOME-REINFORCE", "f2", figure)
        elif figure == "half_quant":
            for method in methods:
                add(method, HALF, figure)
        elif figure == "model_size":
            for method in ("LLOME-MargE", "LaMBO-2"):
                add(method, "f2", figure)
        elif figure == "difficulty_pareto":
            pass  # the sweep is its own job; the frontier uses every finished run
    return list(wanted.values())


#: A run's round cap under its label budget: this many times ``scale.rounds`` (the budget, not
#: the cap, ends a run: LLOME pays fewer than ``j`` in a round with few valid candidates, and
#: LaMBO-2 under ``pay_once`` does not pay for proposals it knows, so they may need more rounds).
MAX_ROUNDS_FACTOR = 2


def labels_per_round(scale: Scale) -> int:
    """``j``, the labels an LLOME or LaMBO-2 round pays at most (the scale's LLOME preset)."""
    from llome_jax.llome.presets import preset  # lazy: JAX (as function_length)

    return int(preset(scale.llome_preset, **dict(scale.llome_overrides)).labels_per_round)


def budget_after_round0(scale: Scale) -> int:
    """Labels after round 0 each run pays: the scale's ``budget``, else ``rounds x j`` (the
    paper's 20K at cpu and paper scale: its 30K minus its 10K GA labels)."""
    if scale.budget is not None:
        return int(scale.budget)
    return scale.rounds * labels_per_round(scale)


def parse_figures(text: str | None) -> list[str]:
    """``--only``: figure keys or numbers, comma-separated (``None`` or empty: every figure), in
    the order given, without repeats."""
    if not text:
        return list(FIGURES)
    keys = list(FIGURES)
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part.isdigit() and 1 <= int(part) <= len(keys):
            out.append(keys[int(part) - 1])
        elif part in FIGURES:
            out.append(part)
        else:
            raise UsageError(
                f"unknown figure {part!r}; choose from 1-{len(keys)} or {', '.join(keys)}"
            )
    return list(dict.fromkeys(out))


#: the kind of a run of a registered optimizer (``llome_jax.optimizers``): ``registry:NAME``
REGISTERED = "registry:"


def registered_kind(method: str) -> str | None:
    """``registry:NAME`` for a method that is a registered optimizer's name outside the paper's
    methods (``llome_jax.optimizers.names()``: a user's own, an installed package's), else
    ``None``."""
    from llome_jax import optimizers  # lazy: JAX (as function_length)

    builtin = {kind for kind, _ in (*METHODS.values(), *F2_METHODS.values())}
    if method in builtin or method not in optimizers.names():
        return None
    return f"{REGISTERED}{method}"


def parse_methods(text: str | None) -> list[str]:
    """``--methods``: method labels, comma-separated, any case (``None`` or empty: the
    :data:`DEFAULT_METHODS`), or the name of a registered optimizer
    (:func:`registered_kind`: it runs on figure 1's functions with the plan's shared settings,
    reported beside the paper's methods, never deciding a paper claim)."""
    if not text:
        return list(DEFAULT_METHODS)
    lookup = {m.lower(): m for m in [*METHODS, *F2_METHODS]}
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part.lower() in lookup:
            out.append(lookup[part.lower()])
        elif registered_kind(part):
            out.append(part)
        else:
            from llome_jax import optimizers  # lazy: JAX (as function_length)

            own = [n for n in optimizers.names() if registered_kind(n)]
            raise UsageError(
                f"unknown method {part!r}; choose from {', '.join(lookup.values())}"
                + (f" or a registered optimizer ({', '.join(own)})" if own else "")
            )
    return list(dict.fromkeys(out))


def parse_functions(text: str | None, scale: Scale) -> tuple[str, ...]:
    """``--functions``: figure 1's functions, comma-separated, in the scale's order (``None`` or
    empty: all of ``scale.functions``). The other figures are on f2 (figure 8 on
    ``Ehr(32,32)-4-4-2``) whatever this selects."""
    if not text:
        return scale.functions
    chosen = [p.strip() for p in text.split(",") if p.strip()]
    for part in chosen:
        if part not in scale.functions:
            raise UsageError(f"unknown function {part!r}; choose from {', '.join(scale.functions)}")
    return tuple(f for f in scale.functions if f in chosen)
