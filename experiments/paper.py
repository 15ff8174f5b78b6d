"""The paper's figures at laptop scale: runs every experiment (resumable) and writes report.md.

One command runs every experiment behind the paper's figures and writes ``report.md`` with a PNG
and a CSV per figure (issue 16).

    python experiments/paper.py --scale smoke --out results/paper          # every figure, minutes
    python experiments/paper.py --scale cpu --out results/paper_cpu --dry-run   # the plan and its cost
    python experiments/paper.py --scale cpu --out results/paper_cpu --only solver --methods GA,LLOME-MargE
    python experiments/paper.py --out results/paper --report-only          # redraw from finished runs
    python experiments/paper.py --scale cpu --out results/paper --runs "f2/LaMBO-2_*"  # a second worker
    python experiments/paper.py --scale cpu --out results/paper --workers 2   # one process per core
    python experiments/paper.py --scale cpu --out results/paper --print-jobs > jobs.txt
        # one self-contained command per run, then the report's: for a SLURM array, Ray or GNU
        # parallel across machines (README: "Paper figures")

Every run (GA, LLOME-SFT/-MargE/-DPO/-REINFORCE, SFT_i-MargE_j pipelines, LaMBO-2) is a run
directory ``OUT/runs/<function>/<method>_seed<k>/`` of the shared round driver
(``llome_jax.runner``): a finished run (``done.json``) is skipped, an interrupted one resumes from
its last checkpoint, and a run that another process holds is left to it ("busy"), so several
workers (``--runs`` picks each one's share by name) can fill one ``OUT``. LLOME runs log their
candidates (``candidates/round_NNNN.npz``, ``llome.loop.run(log_candidates=True)``) for the
calibration, refinement and selection figures.
The figures are then computed from the run directories only, so ``--report-only`` redraws them
and a second invocation writes byte-identical CSVs. Per figure: ``OUT/<figure>.png`` and
``OUT/<figure>.csv``; ``OUT/report.md`` puts the paper's claims (quoted from ``paper.tex``) beside
our numbers, with one verdict per sub-claim (agree / disagree / not comparable / inconclusive),
each from its function in ``experiments/verdicts.py`` (the only place verdicts come from; this
module measures), and the label accounting of every figure's runs (``accounting`` of each run's
``config.json``: ``pay_once`` or ``every_evaluation``, the paper's; a ``config.json`` without it
was written before the setting existed, when every evaluation was paid). Budgets are counted in
labels after round 0 (the GA seed data every method of a seed shares), so that both accountings
compare like with like: the paper's 30K is its 10K GA labels + 20K.

Scales: ``smoke`` (the LLOME and LaMBO-2 ``smoke`` presets on the paper's instances, 1 seed, a
pipeline check: its numbers say nothing about the paper) and ``cpu`` (the tuned ``cpu`` presets:
the paper's protocol, n0 = 10 GA generations of 1000, j = 2000, 10 rounds; 3 seeds on f2 and on
the half-quantised f2, 1 seed of LLOME/LaMBO-2 on f1, f3, f4 where a LaMBO-2 run takes ~3 h).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import fnmatch
import functools
import glob
import io
import json
import math
import os
import pathlib
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from llome_jax.rundir import LabelAudit

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import verdicts as vd  # noqa: E402  (experiments/verdicts.py: every verdict of the report)
from verdicts import Verdict  # noqa: E402

# ------------------------------------------------------------------------------------------
# Methods, figures, scales
# ------------------------------------------------------------------------------------------
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
#: ``experiments/local_search.py``) and LLOME-MargE fine-tuned from the shipped prior
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
      seconds: (kind, L) -> (round 0 seconds, seconds per round), for ``--dry-run`` (measured on
        one core of a shared 2-core CPU; LaMBO-2 and LLOME cpu from docs/experiments.md; LLOME
        cpu on L = 128 is f2's cost x4, an extrapolation, not a measurement).
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

    def seeds_for(self, function: str, kind: str) -> tuple[int, ...]:
        """The run seeds of ``kind`` on ``function``: ``seeds``; the cheap GA and local search
        also run ``ga_seeds``."""
        seeds = dict(self.seeds).get(function, ())
        if kind in ("ga", "local_search"):
            return tuple(sorted(set(self.ga_seeds) | set(seeds)))
        return seeds

    def cost(self, kind: str, length: int, rounds: int) -> float:
        first, per_round = dict(self.seconds)[(kind, length)]
        return first + rounds * per_round


SCALES: dict[str, Scale] = {
    "smoke": Scale(
        llome_preset="smoke",
        lambo_preset="smoke",
        # enough SFT in round 1 for the small model to write valid f2 sequences (~40 of 216)
        llome_overrides=(
            ("text_format", "compact"),
            ("ga.num_particles", 200),
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
        difficulty_seeds=4,
        seconds=(
            (("ga", 32), (15.0, 2.0)),
            (("ga", 128), (30.0, 4.0)),
            (("local_search", 32), (15.0, 1.0)),
            (("llome", 32), (60.0, 72.0)),  # 10-14 min a run (docs/experiments.md)
            (("llome", 128), (120.0, 290.0)),  # ~4x the tokens per sequence
            (("lambo2", 32), (60.0, 138.0)),  # ~23 min a run
            (("lambo2", 128), (120.0, 1000.0)),  # ~2.5-3 h a run
        ),
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
        slug = self.function.replace("(", "").replace(")", "").replace(",", "_")
        return f"{slug}/{self.method.replace(' ', '-')}_seed{self.seed}"


def _save(figure: Any, path: pathlib.Path) -> None:
    """Lay out, write (no software tag, so reruns are byte-identical) and close a figure."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)


def _length(function: str) -> int:
    from llome_jax import ehrlich

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
        if only is not None and method in METHODS and method not in only:
            return
        if method in F2_METHODS and function != "f2":
            return
        kind, default_schedule = {**METHODS, **EXTRA_METHODS, **F2_METHODS}.get(
            method, ("llome", None)
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


# ------------------------------------------------------------------------------------------
# Running
# ------------------------------------------------------------------------------------------
def _llome_config(spec: RunSpec, scale: Scale):
    """LLOME's configuration: the scale's preset (``<preset>-pretrained`` for a method that
    starts from the shipped prior, or the preset with ``cpu-pretrained``'s changes where the
    scale's preset has no such variant), its overrides, the run's schedule, rounds and seed."""
    from llome_jax.llome.presets import PRESETS, preset, prior_for_function

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


def _lambo_config(spec: RunSpec, scale: Scale, llome_cfg: Any):
    """LaMBO-2 on LLOME's round 0 (same GA seed data) with ``j`` proposals per round."""
    from llome_jax.lambo2 import optimizer

    overrides = {
        **dict(scale.lambo_overrides),
        "function": spec.function,
        "rounds": scale.rounds,
        "seed": spec.seed,
        "ga_generations": llome_cfg.ga_generations,
        "ga_particles": llome_cfg.ga.num_particles,
        "ga_mutation_prob": llome_cfg.ga.mutation_prob,
        "num_samples": llome_cfg.filter.num_selected,
    }
    return optimizer.preset(scale.lambo_preset, **overrides)


def _ga_config(spec: RunSpec, scale: Scale, llome_cfg: Any):
    from llome_jax import ga_optimizer

    n, j = llome_cfg.ga.num_particles, llome_cfg.filter.num_selected
    per_round = max(1, round(j / n))
    rounds = max(1, math.ceil(scale.rounds * j / (per_round * n)))
    return ga_optimizer.GARunConfig().replace(
        function=spec.function,
        seed=spec.seed,
        rounds=rounds,
        initial_generations=llome_cfg.ga_generations,
        generations_per_round=per_round,
        ga={"num_particles": n, "mutation_prob": llome_cfg.ga.mutation_prob},
    )


#: A run's round cap under its label budget: this many times ``scale.rounds`` (the budget, not
#: the cap, ends a run: LLOME pays fewer than ``j`` in a round with few valid candidates, and
#: LaMBO-2 under ``pay_once`` does not pay for proposals it knows, so they may need more rounds).
MAX_ROUNDS_FACTOR = 2


def _budget_after_round0(scale: Scale) -> int:
    """Labels after round 0 each run pays: ``rounds x j`` (the paper's 20K at cpu scale)."""
    from llome_jax.llome.presets import preset

    j = preset(scale.llome_preset, **dict(scale.llome_overrides)).filter.num_selected
    return scale.rounds * int(j)


def run_one(spec: RunSpec, scale: Scale, path: pathlib.Path, progress: bool) -> str:
    """Run, resume or skip (``done.json``) one run; returns ``"skipped"``, ``"new"``,
    ``"resumed"`` or ``"busy"`` (another process holds the run directory: it is left to that one).

    Equal label budgets: every run pays exactly ``rounds x j`` labels after round 0 (the round
    driver's ``budget``; its last round labels only what is left), within at most
    ``MAX_ROUNDS_FACTOR x rounds`` rounds, unless it stops early."""
    done = path / "done.json"
    if done.exists():
        return "skipped"
    resume = (path / "config.json").exists()
    log = (lambda line: print(f"  [{spec.name}] {line}", flush=True)) if progress else None
    options: dict[str, Any] = {
        "resume": resume,
        "progress": progress,
        "budget": _budget_after_round0(scale),
    }
    if log is not None:
        options["log"] = log
    capped = dataclasses.replace(scale, rounds=MAX_ROUNDS_FACTOR * scale.rounds)
    from llome_jax.rundir import RunDirectory, RunDirectoryInUseError

    try:
        result = _run_kind(spec, capped, _llome_config(spec, capped), path, options)
    except RunDirectoryInUseError:
        return "busy"
    last = RunDirectory(path).rounds()[-1]["round"]
    stop = result.stop_reason
    (path / "done.json").write_text(
        json.dumps({"last_round": last, "stop_reason": stop or ""}, indent=1) + "\n"
    )
    return "resumed" if resume else "new"


def _run_kind(
    spec: RunSpec, scale: Scale, llome_cfg: Any, path: pathlib.Path, options: dict
) -> Any:
    """Start or resume ``spec``'s run with the optimiser of its kind; returns its result."""
    if spec.kind == "llome":
        from llome_jax.llome import loop

        return loop.run(
            llome_cfg, path, log_candidates=True, extra_config={"method": spec.method}, **options
        )
    if spec.kind == "lambo2":
        from llome_jax.lambo2 import optimizer

        return optimizer.run(_lambo_config(spec, scale, llome_cfg), path, **options)
    if spec.kind == "local_search":
        sys.path.insert(0, str(HERE))
        import local_search  # experiments/local_search.py

        return local_search.run_directory_run(
            spec.function,
            spec.seed,
            path,
            budget=options["budget"],
            resume=options["resume"],
            per_round=int(llome_cfg.filter.num_selected),
            preset_name=scale.llome_preset,
        )
    from llome_jax import ga_optimizer

    return ga_optimizer.run(_ga_config(spec, scale, llome_cfg), path, **options)


def run_difficulty(scale: Scale, path: pathlib.Path) -> str:
    """The GA difficulty sweep (``experiments/ga_difficulty.py``'s settings) into
    ``path/curves.csv``; skipped when it exists (each setting is a few seconds at smoke scale,
    minutes at cpu scale, so the sweep restarts as a whole)."""
    import dataclasses as dc

    if (path / "curves.csv").exists():
        return "skipped"
    sys.path.insert(0, str(HERE))
    import ga_difficulty as gd  # experiments/ga_difficulty.py

    path.mkdir(parents=True, exist_ok=True)
    seeds = list(range(scale.difficulty_seeds))
    rows, cache = [], {}
    for symbol, (field, values) in gd.VARIATIONS.items():
        for value in values:
            changes = {field: value}
            if field == "motif_length":
                changes["quantization"] = value
            config = dc.replace(gd.REFERENCE, **changes)
            if config not in cache:  # the reference setting recurs in every variation
                cache[config] = gd.run_setting(config, seeds, scale.difficulty_generations)
            best = cache[config]
            for seed, row in zip(seeds, best):
                for g, b in enumerate(row, start=1):
                    rows.append(
                        [symbol, value, config.name, seed, g, 1000 * g, repr(1.0 - float(b))]
                    )
    header = ["parameter", "value", "config", "seed", "generation", "num_evaluations", "min_regret"]
    partial = path / "curves.partial.csv"
    _write_csv(partial, header, rows)
    partial.replace(path / "curves.csv")
    return "new"


# ------------------------------------------------------------------------------------------
# Reading results
# ------------------------------------------------------------------------------------------
def _rounds(path: pathlib.Path) -> list[dict]:
    """A run's ``rounds.jsonl`` records (a damaged line is named: ``RunDirectory.rounds``)."""
    from llome_jax.rundir import RunDirectory

    return RunDirectory(path).rounds()


def _candidates(path: pathlib.Path) -> list[dict[str, np.ndarray]]:
    out = []
    for file in sorted((path / "candidates").glob("round_[0-9][0-9][0-9][0-9].npz")):
        with np.load(file) as data:
            out.append({k: data[k] for k in data.files})
    return out


def _regret(values: np.ndarray) -> np.ndarray:
    """``1 - f`` with infeasible (``-inf``) and unknown (NaN) as 1 (BUILD.md §2)."""
    v = np.asarray(values, np.float64)
    return np.where(np.isfinite(v), 1.0 - v, 1.0)


def _fmt(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float):
        return f"{x:.3f}"
    return str(x)


def _write_csv(path: pathlib.Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([repr(v) if isinstance(v, float) else v for v in row])
    path.write_text(buffer.getvalue())


def _curves(
    runs: dict[RunSpec, list[dict]], out: pathlib.Path | None = None
) -> dict[str, list[tuple[list, list]]]:
    """method -> [(num_evaluations, min_regret) per seed] (rounds with a regret). With ``out``
    (the plan's directory) a run's curve is ``RunDirectory.regret_curve``: for a ``pay_once``
    run it holds each label that improved the min regret inside a round, so that :func:`_at`
    reads it at exactly a label count, not at the last round before it."""
    from llome_jax.rundir import RunDirectory

    curves: dict[str, list] = {}
    for spec, records in runs.items():
        points = [
            (r["num_evaluations"], r["min_regret"])
            for r in records
            if r.get("min_regret") is not None
        ]
        path = None if out is None else out / "runs" / spec.name
        if points and len(points) == len(records) and path is not None and path.is_dir():
            x, y = RunDirectory(path).regret_curve("min_regret")
            points = [(int(e), float(g)) for e, g in zip(x, y)]
        if points:
            curves.setdefault(spec.method, []).append(
                ([p[0] for p in points], [p[1] for p in points])
            )
    return curves


def _at(x: Sequence[int], y: Sequence[float], budget: float) -> float:
    within = [g for e, g in zip(x, y) if e <= budget]
    return min(within) if within else float("nan")


def _summary(curves: dict[str, list], after: float) -> dict[str, dict[str, Any]]:
    """method -> median / min / max over seeds of the min regret ``after`` labels past round 0
    (each run's first point, its round 0, plus ``after``), seeds, ``labels_paid``: the
    median over seeds of the labels a run paid after round 0 up to ``after`` (less for a run that
    stopped early, whose last min regret counts), ``values``: each run's min regret (the runs'
    order, the same at every ``after``; the verdicts' per-seed values) and ``ci_low`` /
    ``ci_high``: the median's 95 % percentile bootstrap interval (:func:`_median_ci`)."""
    out = {}
    for method, runs in curves.items():
        finals = np.array([_at(x, y, x[0] + after) for x, y in runs], np.float64)
        paid = np.array([min(x[-1] - x[0], after) for x, _ in runs], np.float64)
        keep = ~np.isnan(finals)
        finals, paid = finals[keep], paid[keep]
        if finals.size:
            low, high = _median_ci(finals)
            out[method] = {
                "median": float(np.median(finals)),
                "min": float(finals.min()),
                "max": float(finals.max()),
                "seeds": int(finals.size),
                "labels_paid": float(np.median(paid)),
                "values": [float(v) for v in finals],
                "ci_low": low,
                "ci_high": high,
            }
    return out


def _median_ci(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """The median's 95 % percentile bootstrap interval over runs (``llome_jax.stats``: 10,000
    resamples, seed 0, so a redraw gives the same numbers); ``None`` where a value is missing or
    there is none."""
    from llome_jax.stats import bootstrap_interval

    if not len(values) or any(v is None for v in values):
        return None, None
    return bootstrap_interval([float(v) for v in values if v is not None])


#: the columns of a table of medians over seeds at the budget
MEDIAN_HEADER = [
    "method",
    "seeds",
    "median_min_regret",
    "median_ci95_low",
    "median_ci95_high",
    "min",
    "max",
]
#: the report's note under a table of medians
CI_NOTE = (
    "Medians are over seeds (runs); `95% CI`: the median's percentile bootstrap interval "
    "(10,000 resamples, seed 0). With 3 seeds it spans nearly their range: it shows how little "
    "a few seeds pin a median down."
)


def _finals(curves: dict[str, list], after: float) -> dict[str, list[float]]:
    """method -> each run's min regret ``after`` labels past round 0."""
    return {m: [_at(x, y, x[0] + after) for x, y in runs] for m, runs in curves.items()}


def _plot_curves(
    path: pathlib.Path, panels: dict[str, dict[str, list]], xlabel: str = "oracle labels"
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from llome_jax.rundir import draw_regret_curves

    n = max(1, len(panels))
    figure, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), dpi=100, squeeze=False)
    for axis, (title, curves) in zip(axes[0], panels.items()):
        if curves:
            draw_regret_curves(axis, curves)
            axis.legend(fontsize=7)
        axis.set_title(title, fontsize=9)
        axis.set_xlabel(xlabel)
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("min simple regret")
    _save(figure, path)


def _accounting(path: pathlib.Path) -> str:
    """The run's label accounting (``config.json``'s ``accounting``); a ``config.json`` without
    it was written before the setting existed, when every evaluation was paid."""
    file = path / "config.json"
    config = json.loads(file.read_text()) if file.exists() else {}
    return str(config.get("accounting", "every_evaluation"))


#: what each label accounting means, for the report
ACCOUNTING_TEXT = {
    "pay_once": "each distinct sequence paid once",
    "every_evaluation": "the paper's: every evaluation paid, the GA pre-solver's included",
}


def _quantization(function: str) -> int:
    from llome_jax import ehrlich

    config = ehrlich.resolve_function(function).config
    return int(config.quantization or config.motif_length)


# ------------------------------------------------------------------------------------------
# Figures: each returns (markdown section body, its verdicts: one per sub-claim)
# ------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Context:
    out: pathlib.Path
    scale: Scale
    scale_name: str
    plan: list[RunSpec]
    runs: dict[RunSpec, list[dict]]
    #: a finished run's ``done.json`` stop reason ("" when none was recorded)
    stop_reasons: dict[RunSpec, str] = dataclasses.field(default_factory=dict)
    #: a finished run's label accounting (:func:`_accounting`)
    accountings: dict[RunSpec, str] = dataclasses.field(default_factory=dict)

    def select(
        self,
        figure: str | None = None,
        function: str | None = None,
        methods: Sequence[str] | None = None,
    ) -> dict[RunSpec, list[dict]]:
        return {
            s: r
            for s, r in self.runs.items()
            if (figure is None or figure in s.figures)
            and (function is None or s.function == function)
            and (methods is None or s.method in methods)
        }

    @functools.cached_property
    def labels_per_round(self) -> int:
        """``j``, the labels an LLOME or LaMBO-2 round pays at most."""
        from llome_jax.llome.presets import preset

        return int(
            preset(self.scale.llome_preset, **dict(self.scale.llome_overrides)).filter.num_selected
        )

    @property
    def budget(self) -> int:
        """Labels after round 0 every run may pay: ``rounds x j`` (20,000 at cpu scale: the
        paper's 30K minus its 10K GA labels). Summaries take each run's min regret at its own
        round-0 labels plus this, so both accountings compare like with like."""
        return self.scale.rounds * self.labels_per_round

    def accounting(self, specs: Collection[RunSpec]) -> list[str]:
        """The label accounting of each of ``specs`` (finished runs)."""
        return [self.accountings.get(s, "every_evaluation") for s in specs]

    def check(self, verdict: Verdict, specs: Collection[RunSpec]) -> Verdict:
        """A budget verdict holds only when its runs count labels alike."""
        return vd.comparable_accounting(verdict, self.accounting(specs))


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


#: The method the paper names best on a function ("On f2 LLOME-MargE performs the best, whereas
#: LaMBO-2 performs the best on f3").
PAPER_BEST_METHOD = {"f2": "LLOME-MargE", "f3": "LaMBO-2"}
#: The paper's very easy / very difficult functions ("all methods perform comparably") and its
#: medium ones ("LLOME-MargE and LaMBO-2 outperform other methods").
EASY_OR_HARD = ("f1", "f4")
MEDIUM = ("f2", "f3")


def figure_solver(ctx: Context) -> tuple[str, list[Verdict]]:
    rows, panels, text = [], {}, []
    verdicts: list[Verdict] = []
    stops = []
    for function in ctx.scale.functions:
        selected = ctx.select("solver", function)
        curves = _curves(selected, ctx.out)
        panels[function] = curves
        if early := _early_stops(ctx, selected):
            stops.append(f"{function}: {early}")
        summary = _summary(curves, ctx.budget)
        for method, s in summary.items():
            rows.append(
                [
                    function,
                    method,
                    s["seeds"],
                    ctx.budget,
                    s["median"],
                    s["ci_low"],
                    s["ci_high"],
                    s["min"],
                    s["max"],
                    int(s["labels_paid"]),
                ]
            )
        found = []
        if function in EASY_OR_HARD:
            found.append(vd.solver_all_comparable(function, summary))
        if function in MEDIUM:
            found.append(
                vd.solver_medium_pair_outperforms(function, summary, _quantization(function))
            )
        if method := PAPER_BEST_METHOD.get(function):
            found.append(vd.solver_best(function, method, summary, _quantization(function)))
        verdicts += [ctx.check(v, selected) for v in found]
    _plot_curves(ctx.out / "solver.png", panels)
    header = [
        "function",
        "method",
        "seeds",
        "labels_after_round_0",
        "median_min_regret",
        "median_ci95_low",
        "median_ci95_high",
        "min",
        "max",
        "median_labels_paid",
    ]
    _write_csv(ctx.out / "solver.csv", header, rows)
    text.append(_table(header, rows))
    text.append(CI_NOTE)
    if stops:  # their last min regret counts at the budget
        text.append(
            "Runs that stopped before their budget (their last min regret counts; "
            "`median_labels_paid`: labels paid after round 0, median over seeds): "
            + "; ".join(stops)
            + "."
        )
    return "\n\n".join(text), verdicts


def _diversity_values(
    ctx: Context, spec: RunSpec, records: list[dict]
) -> tuple[list[list[Any]], str]:
    """Per round >= 1: ``[round, num_evaluations, frac_unique, frac_feasible]`` measured on what
    the method generated or proposed before any filter, and what that is. ``None`` where the run
    did not record it so (``verdicts.diversity_lambo2_most_unique``)."""
    later = [r for r in records if r["round"] >= 1]

    def finite(x: Any) -> float | None:
        return None if x is None or not math.isfinite(float(x)) else float(x)

    if spec.kind == "llome":  # before the Filter: the candidate log's feasibility
        logs = {int(log["round"]): log for log in _candidates(ctx.out / "runs" / spec.name)}
        rows = []
        for r in later:
            log = logs.get(int(r["round"]))
            if log is not None and log["feasible"].size:
                feasible = float(np.mean(log["feasible"]))
            else:
                feasible = finite(r.get("frac_feasible_generated"))
            rows.append([r["round"], r["num_evaluations"], finite(r.get("frac_unique")), feasible])
        return rows, "generated before the Filter (unique valid / all outputs; log's feasible)"
    if spec.kind == "ga":
        rows = [
            [r["round"], r["num_evaluations"]]
            + (
                [None, None]  # recorded before num_proposals: over the de-duplicated archive
                if r.get("num_proposals") is None
                else [finite(r.get("frac_unique")), finite(r.get("frac_feasible"))]
            )
            for r in later
        ]
        return rows, "its proposals (all particles of the round)"
    rows = [
        [
            r["round"],
            r["num_evaluations"],
            finite(r.get("frac_unique")),
            finite(r.get("frac_feasible")),
        ]
        for r in later
    ]
    return rows, "its proposals (j a round)"


def _run_mean(values: Sequence[float | None]) -> float | None:
    """The mean over a run's rounds; ``None`` if a round's value is missing or unlike."""
    if not values or any(v is None for v in values):
        return None
    return float(np.mean([float(v) for v in values if v is not None]))


def figure_diversity(ctx: Context) -> tuple[str, list[Verdict]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = []
    unique: dict[str, list[float | None]] = {}
    feasible: dict[str, list[float | None]] = {}
    series: dict[str, tuple[list, list]] = {}
    measured_on: dict[str, str] = {}
    figure, axes = plt.subplots(1, 2, figsize=(9, 3.4), dpi=100)
    for spec, records in sorted(ctx.select("diversity", "f2").items(), key=lambda kv: kv[0].name):
        values, measured_on[spec.method] = _diversity_values(ctx, spec, records)
        rows += [[spec.method, spec.seed, *v, measured_on[spec.method]] for v in values]
        u, f = [v[2] for v in values], [v[3] for v in values]
        unique.setdefault(spec.method, []).append(_run_mean(u))
        feasible.setdefault(spec.method, []).append(_run_mean(f))
        su, sf = series.setdefault(spec.method, ([], []))
        su.append(u)
        sf.append(f)
        x = [v[1] for v in values]
        label = f"{spec.method} s{spec.seed}"
        axes[0].plot(x, [np.nan if v is None else v for v in u], marker="o", label=label)
        axes[1].plot(x, [np.nan if v is None else v for v in f], marker="o", label=label)
    for axis, title in zip(axes, ("fraction unique", "fraction feasible (before any filter)")):
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("oracle labels")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=6)
    _save(figure, ctx.out / "diversity.png")
    header = [
        "method",
        "seed",
        "round",
        "num_evaluations",
        "frac_unique",
        "frac_feasible",
        "measured_on",
    ]
    _write_csv(ctx.out / "diversity.csv", header, rows)

    def median(runs: list[float | None]) -> float | None:
        return None if any(v is None for v in runs) else float(np.median(runs))

    table = [
        [
            m,
            len(unique[m]),
            median(unique[m]),
            *_median_ci(unique[m]),
            median(feasible[m]),
            *_median_ci(feasible[m]),
            measured_on[m],
        ]
        for m in sorted(unique)
    ]
    dpo_u, dpo_f = series.get("LLOME-DPO", ([], []))
    verdicts = [
        vd.diversity_lambo2_most_unique(unique),
        vd.diversity_lambo2_most_feasible(feasible),
        *(
            vd.diversity_more_unique_than_ga(m, unique)
            for m in ("LaMBO-2", "LLOME-MargE", "LLOME-SFT")
        ),
        vd.diversity_dpo_does_not_improve(dpo_u, dpo_f),
    ]
    body = _table(
        [
            "method",
            "runs",
            "median frac_unique (mean of rounds >= 1)",
            "95% CI low",
            "95% CI high",
            "median frac_feasible",
            "95% CI low",
            "95% CI high",
            "measured on",
        ],
        table,
    )
    note = (
        "LLOME is measured on what it generated, before the Filter (whose infeasible cap sets "
        "the labelled rows' feasibility); the GA and LaMBO-2 on what they proposed. n/a: the "
        "run did not record it that way (a GA run recorded before `num_proposals` measured "
        "uniqueness on its de-duplicated archive, 1.0 by construction). " + CI_NOTE
    )
    return body + "\n\n" + note, verdicts


def _logged(
    ctx: Context, specs: Collection[RunSpec], label: Callable[[RunSpec], str] = lambda s: s.method
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """label -> (likelihood ``exp(mean raw log-prob)``, ``f``) of every logged candidate of the
    runs (all rounds); a label without a candidate log is absent."""
    pooled: dict[str, tuple[list, list]] = {}
    for spec in sorted(specs, key=lambda s: s.name):
        for log in _candidates(ctx.out / "runs" / spec.name):
            lik, val = pooled.setdefault(label(spec), ([], []))
            lik.append(np.exp(log["log_likelihood_raw"].astype(np.float64)))
            val.append(log["values"].astype(np.float64))
    return {k: (np.concatenate(lik), np.concatenate(val)) for k, (lik, val) in pooled.items()}


def _calibration_rows(logged: dict[str, tuple[np.ndarray, np.ndarray]], bins: int = 5) -> list:
    """Per label: likelihood-quantile bins of every logged candidate with the bin's mean
    likelihood, feasible fraction, mean and min regret of its feasible candidates and counts."""
    rows = []
    for label, (lik, val) in logged.items():
        if lik.size == 0:
            continue
        feasible = np.isfinite(val)
        edges = np.quantile(lik, np.linspace(0, 1, bins + 1))
        which = np.clip(np.searchsorted(edges, lik, side="right") - 1, 0, bins - 1)
        for b in range(bins):
            mask = which == b
            if not mask.any():
                continue
            ok = mask & feasible
            regret = 1.0 - val[ok]
            rows.append(
                [
                    label,
                    b,
                    float(lik[mask].mean()),
                    float(feasible[mask].mean()),
                    float(regret.mean()) if regret.size else None,
                    float(regret.min()) if regret.size else None,
                    int(mask.sum()),
                    int(ok.sum()),
                ]
            )
    return rows


CALIBRATION_HEADER = [
    "method",
    "bin",
    "mean_likelihood",
    "frac_feasible",
    "mean_regret_feasible",
    "min_regret_feasible",
    "count",
    "feasible",
]


def _plot_calibration(path: pathlib.Path, rows: list) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(4.5, 3.4), dpi=100)
    for method in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == method and r[4] is not None]
        axis.plot([r[2] for r in mine], [r[4] for r in mine], marker="o", label=method)
    axis.set_xlabel("likelihood exp(mean log-prob), bin mean")
    axis.set_ylabel("mean regret of feasible candidates")
    axis.grid(alpha=0.3)
    if rows:
        axis.legend(fontsize=7)
    _save(figure, path)


def figure_calibration(ctx: Context) -> tuple[str, list[Verdict]]:
    logged = _logged(ctx, ctx.select("calibration", "f2"))
    rows = _calibration_rows(logged)
    _write_csv(ctx.out / "calibration.csv", CALIBRATION_HEADER, rows)
    _plot_calibration(ctx.out / "calibration.png", rows)
    table, verdicts = [], []
    for method in ("LLOME-MargE", "LLOME-SFT"):
        lik, val = logged.get(method, (None, None))
        if lik is not None:
            rho, n = vd.spearman_feasible(lik, val)
            rho_high, n_high = vd.spearman_feasible(lik, val, above=vd.HIGH_LIKELIHOOD)
            table.append([method, int(lik.size), n, rho, n_high, rho_high])
        verdicts += [
            vd.calibration_higher_likelihood_lower_regret(method, lik, val),
            vd.calibration_overconfident(method, lik, val),
        ]
    header = [
        "method",
        "candidates",
        "feasible",
        "Spearman rho(likelihood, regret), feasible",
        f"feasible above likelihood {vd.HIGH_LIKELIHOOD}",
        f"rho above {vd.HIGH_LIKELIHOOD}",
    ]
    return (
        _table(header, table)
        + "\n\n"
        + _table(CALIBRATION_HEADER, rows)
        + "\n\nRegret is over feasible candidates only (an infeasible one is not a regret of 1 "
        "here: counted so, the correlation measured feasibility).",
        verdicts,
    )


def figure_sft_marge(ctx: Context) -> tuple[str, list[Verdict]]:
    specs = ctx.select("sft_marge", "f2")
    rounds = ctx.scale.rounds

    def label(spec: RunSpec) -> str:
        if spec.method == "LLOME-MargE":
            return sft_marge_label(1, rounds)
        if spec.method == "LLOME-SFT":
            return sft_marge_label(rounds, rounds)
        return spec.method

    curves: dict[str, list] = {}
    for spec, records in specs.items():
        for runs in _curves({spec: records}, ctx.out).values():
            curves.setdefault(label(spec), []).extend(runs)
    _plot_curves(ctx.out / "sft_marge.png", {"f2: SFT_i-MargE_j": curves})
    summary = _summary(curves, ctx.budget)
    logged = _logged(ctx, specs, label)  # each run's own directory, under its pipeline's label
    _plot_calibration(ctx.out / "sft_marge_calibration.png", _calibration_rows(logged))
    rho = {p: vd.spearman_feasible(lik, val) for p, (lik, val) in logged.items()}
    rows = [
        [
            m,
            s["seeds"],
            s["median"],
            s["ci_low"],
            s["ci_high"],
            s["min"],
            s["max"],
            rho.get(m, (float("nan"), 0))[0],
        ]
        for m, s in sorted(summary.items())
    ]
    header = [
        "pipeline",
        "seeds",
        "median_min_regret",
        "median_ci95_low",
        "median_ci95_high",
        "min",
        "max",
        "spearman_rho_feasible",
    ]
    _write_csv(ctx.out / "sft_marge.csv", header, rows)
    first, last = sft_marge_label(1, rounds), sft_marge_label(rounds, rounds)
    verdicts = [
        ctx.check(vd.sft_marge_sole_optimum(first, _finals(curves, ctx.budget)), specs),
        vd.sft_marge_best_calibration(first, rho),
        ctx.check(
            vd.sft_marge_intermediate_worst(summary, first, last, _quantization("f2")), specs
        ),
    ]
    curves = (
        "\n\nCalibration curves (`sft_marge_calibration.png`):\n\n"
        "![likelihood vs regret per SFT_i-MargE_j pipeline](sft_marge_calibration.png)"
    )
    return _table(header, rows) + f"\n\n{CI_NOTE}" + curves, verdicts


def _regret_by_round(records: list[dict]) -> list[float]:
    """A run's min regret after each round (index 0: round 0)."""
    ordered = sorted(records, key=lambda r: r["round"])
    return [float(r["min_regret"]) for r in ordered if r.get("min_regret") is not None]


def figure_reinforce(ctx: Context) -> tuple[str, list[Verdict]]:
    selected = ctx.select("reinforce", "f2")
    curves = _curves(selected, ctx.out)
    _plot_curves(ctx.out / "reinforce.png", {"f2: MargE vs REINFORCE": curves})
    summary = _summary(curves, ctx.budget)
    rows = [
        [m, s["seeds"], s["median"], s["ci_low"], s["ci_high"], s["min"], s["max"]]
        for m, s in sorted(summary.items())
    ]
    header = MEDIAN_HEADER
    _write_csv(ctx.out / "reinforce.csv", header, rows)
    reinforce = [
        _regret_by_round(r)
        for s, r in sorted(selected.items(), key=lambda kv: kv[0].name)
        if s.method == "LLOME-REINFORCE"
    ]
    verdicts = [
        vd.reinforce_decreases_regret(reinforce, _quantization("f2")),
        vd.reinforce_plateaus_early(reinforce, ctx.scale.rounds),
        vd.reinforce_never_optimal(reinforce),
        ctx.check(vd.reinforce_marge_ends_lower(summary, _quantization("f2")), selected),
    ]
    per_run = "; ".join(" -> ".join(f"{v:.3f}" for v in r) for r in reinforce)
    return (
        _table(header, rows)
        + f"\n\n{CI_NOTE}\n\nLLOME-REINFORCE min regret by round: {per_run or 'none'}.",
        verdicts,
    )


def figure_refinement(ctx: Context) -> tuple[str, list[Verdict]]:
    rows = []
    by_iteration: dict[str, dict[int, list[float]]] = {}
    per_round: dict[str, list[list[float]]] = {}
    selected = ctx.select("refinement", "f2")
    for spec in sorted(selected, key=lambda s: s.name):
        for log in _candidates(ctx.out / "runs" / spec.name):
            reg = _regret(log["values"])
            mins = []
            for it in sorted(set(log["iteration"].tolist())):
                m = float(reg[log["iteration"] == it].min())
                mins.append(m)
                rows.append(
                    [
                        spec.method,
                        spec.seed,
                        int(log["round"]),
                        int(it),
                        m,
                        int((log["iteration"] == it).sum()),
                    ]
                )
                by_iteration.setdefault(spec.method, {}).setdefault(int(it), []).append(m)
            per_round.setdefault(spec.method, []).append(mins)
    header = ["method", "seed", "round", "iteration", "min_regret", "candidates"]
    _write_csv(ctx.out / "refinement.csv", header, rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(4.5, 3.4), dpi=100)
    means = {}
    for method, its in sorted(by_iteration.items()):
        keys = sorted(its)
        means[method] = [float(np.mean(its[k])) for k in keys]
        axis.plot(keys, means[method], marker="o", label=method)
    axis.set_xlabel("refinement iteration")
    axis.set_ylabel("min regret of candidates (mean over rounds)")
    axis.grid(alpha=0.3)
    if means:
        axis.legend(fontsize=7)
    _save(figure, ctx.out / "refinement.png")
    table = [[m, " -> ".join(f"{v:.3f}" for v in vals)] for m, vals in means.items()]
    methods = sorted({s.method for s in selected})
    verdicts = []
    for m in methods:
        verdicts += [
            vd.refinement_reduces_regret(m, per_round.get(m, [])),
            vd.refinement_first_edits_help_most(m, per_round.get(m, [])),
        ]
    body = _table(["method", "min regret per iteration (mean over rounds and seeds)"], table)
    return body, verdicts


def figure_selection(ctx: Context) -> tuple[str, list[Verdict]]:
    rows = []
    rounds: dict[str, list[vd.SelectionRound]] = {}
    selected_specs = ctx.select("selection", "f2")
    for spec in sorted(selected_specs, key=lambda s: s.name):
        for log in _candidates(ctx.out / "runs" / spec.name):
            reg, sel = _regret(log["values"]), log["selected"].astype(bool)
            j = int(sel.sum())
            if j == 0:
                continue
            oracle = np.sort(reg)[:j]
            row = [
                spec.method,
                spec.seed,
                int(log["round"]),
                int(reg.size),
                j,
                float(reg[sel].min()),
                float(oracle.min()),
                float(reg[sel].mean()),
                float(oracle.mean()),
                float(reg.mean()),
            ]
            rows.append(row)
            rounds.setdefault(spec.method, []).append(
                vd.SelectionRound(row[3], row[4], row[5], row[6], row[7], row[9])
            )
    header = [
        "method",
        "seed",
        "round",
        "candidates",
        "j",
        "min_regret_likelihood",
        "min_regret_oracle",
        "mean_regret_likelihood",
        "mean_regret_oracle",
        "mean_regret_all",
    ]
    _write_csv(ctx.out / "selection.csv", header, rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(4.8, 3.4), dpi=100)
    for method in sorted({r[0] for r in rows}):
        mine = [
            r for r in rows if r[0] == method and r[1] == min(x[1] for x in rows if x[0] == method)
        ]
        axis.plot(
            [r[2] for r in mine], [r[5] for r in mine], marker="o", label=f"{method}: likelihood"
        )
        axis.plot(
            [r[2] for r in mine],
            [r[6] for r in mine],
            marker="x",
            ls="--",
            label=f"{method}: oracle",
        )
    axis.set_xlabel("round (candidates after the GA's labels)")
    axis.set_ylabel("min regret of the j selected")
    axis.grid(alpha=0.3)
    if rows:
        axis.legend(fontsize=6)
    _save(figure, ctx.out / "selection.png")
    verdicts = []
    for m in sorted({s.method for s in selected_specs}):
        verdicts += [
            vd.selection_misses_best_often(m, rounds.get(m, [])),
            vd.selection_high_scoring(m, rounds.get(m, [])),
        ]
    return _table(header, rows), verdicts


def figure_half_quant(ctx: Context) -> tuple[str, list[Verdict]]:
    selected = ctx.select("half_quant", HALF)
    curves = _curves(selected, ctx.out)
    _plot_curves(ctx.out / "half_quant.png", {HALF: curves})
    summary = _summary(curves, ctx.budget)
    rows = [
        [m, s["seeds"], s["median"], s["ci_low"], s["ci_high"], s["min"], s["max"]]
        for m, s in sorted(summary.items())
    ]
    header = MEDIAN_HEADER
    _write_csv(ctx.out / "half_quant.csv", header, rows)
    last_round: dict[str, int] = {}
    for spec, records in selected.items():
        last = max(int(r["round"]) for r in records)
        last_round[spec.method] = max(last_round.get(spec.method, 0), last)
    verdict = ctx.check(
        vd.half_quant_marge_best(summary, last_round, _quantization(HALF)), selected
    )
    stops = _early_stops(ctx, selected)
    return (
        _table(header, rows)
        + f"\n\n{CI_NOTE}"
        + (f"\n\nRuns that stopped before their budget: {stops}." if stops else ""),
        [verdict],
    )


def _early_stops(ctx: Context, selected: dict[RunSpec, list[dict]]) -> str:
    """``"method: N runs after round r (reason)"`` for finished runs that stopped before their
    last planned round, e.g. LLOME with no training pairs in the GA data or a collapsed DPO. (A
    LLOME round may label fewer than ``j`` sequences, so a run can end below the budget
    without stopping early.)"""
    stops: dict[tuple[str, int, str], int] = {}
    for spec, records in selected.items():
        if int(records[-1]["round"]) >= ctx.scale.rounds:
            continue
        reason = ctx.stop_reasons.get(spec) or "no reason recorded"
        key = (spec.method, int(records[-1]["round"]), reason)
        stops[key] = stops.get(key, 0) + 1
    return "; ".join(
        f"{method}: {n} run{'s' if n > 1 else ''} after round {last} ({reason})"
        for (method, last, reason), n in sorted(stops.items())
    )


#: the name the model-size figure gives our small from-scratch LLOME-MargE
TINY = "LLOME-MargE (tiny, from scratch)"


def figure_model_size(ctx: Context) -> tuple[str, list[Verdict]]:
    selected = ctx.select("model_size", "f2", ("LLOME-MargE", "LaMBO-2"))
    curves = _curves(selected, ctx.out)
    _plot_curves(
        ctx.out / "model_size.png",
        {"f2": {(TINY if m == "LLOME-MargE" else m): c for m, c in curves.items()}},
    )
    mark = vd.PAPER_22K_AFTER_ROUND0
    j = ctx.labels_per_round
    points = []
    if ctx.budget >= mark:  # the paper's "up to 22K": every round's budget up to 12K after round 0
        afters = sorted({*range(j, mark + 1, j), mark})
        points = [(after, _summary(curves, after)) for after in afters]
    rows = []
    for after, s in [*points, (ctx.budget, _summary(curves, ctx.budget))]:
        rows += [
            [
                TINY if m == "LLOME-MargE" else m,
                after,
                v["seeds"],
                v["median"],
                v["ci_low"],
                v["ci_high"],
                v["min"],
                v["max"],
            ]
            for m, v in sorted(s.items())
        ]
    header = [
        "method",
        "labels_after_round_0",
        "seeds",
        "median_min_regret",
        "median_ci95_low",
        "median_ci95_high",
        "min",
        "max",
    ]
    _write_csv(ctx.out / "model_size.csv", header, rows)
    q = _quantization("f2")
    at_end = _summary(curves, ctx.budget)
    at_22k = points[-1][1] if points else {}
    verdicts = [
        ctx.check(vd.model_size_comparable("LaMBO-2", points, q, ctx.budget), selected),
        vd.model_size_comparable("LLOME-MargE (Pythia 2.8B)", points, q, ctx.budget),
        ctx.check(vd.model_size_plateaus(at_22k, at_end, q, ctx.budget), selected),
    ]
    note = (
        "The paper's Pythia-2.8B curve needs GPUs and weights (`--preset paper`); it is not run "
        f"here. 22K labels in the paper = its 10K GA labels + {mark}: rows at "
        f"labels_after_round_0 <= {mark}; a quantisation level of f2 (q = {q}) at regret r is "
        "(1 - r) / q."
    )
    return _table(header, rows) + f"\n\n{CI_NOTE} {note}", verdicts


def _hypervolume(x: Sequence[int], y: Sequence[float], after: float) -> float:
    """Area under the min-regret step curve over the ``after`` labels past the run's round 0
    (``x[0]``), in K labels x regret (lower is better; the paper's "average (evaluations x min
    regret)")."""
    xs = np.asarray(x, np.float64)
    ys = np.asarray(y, np.float64)
    grid = np.linspace(xs[0], xs[0] + after, 201)
    idx = np.searchsorted(xs, grid, side="right") - 1
    vals = ys[np.clip(idx, 0, None)]
    return float(np.trapezoid(vals, grid) / 1000.0)


def figure_difficulty_pareto(ctx: Context) -> tuple[str, list[Verdict]]:
    parts, verdicts = [], []
    path = ctx.out / "runs" / "ga_difficulty" / "curves.csv"
    diff_rows = []
    ranges: dict[str, list[float]] = {}
    if path.exists():
        with open(path, newline="") as stream:
            data = list(csv.DictReader(stream))
        per: dict[tuple[str, str], dict[int, list[float]]] = {}
        for row in data:
            per.setdefault((row["parameter"], row["value"]), {}).setdefault(
                int(row["seed"]), []
            ).append(float(row["min_regret"]))
        by_seed: dict[str, dict[int, list[float]]] = {}  # parameter -> seed -> per value
        for (p, v), seeds in per.items():
            mean_curve = float(np.mean([np.mean(c) for c in seeds.values()]))
            finals = [c[-1] for c in seeds.values()]
            final = float(np.median(finals))
            diff_rows.append([p, v, len(seeds), mean_curve, final, *_median_ci(finals)])
            for seed, c in seeds.items():
                by_seed.setdefault(p, {}).setdefault(seed, []).append(float(np.mean(c)))
        # per seed, the range over a parameter's values of the run's mean regret (seeds that
        # ran every value of the parameter): the verdict's per-seed values
        values_of = {p: len({v for q, v in per if q == p}) for p in by_seed}
        ranges = {
            p: [max(c) - min(c) for _, c in sorted(seeds.items()) if len(c) == values_of[p]]
            for p, seeds in by_seed.items()
        }
        parts.append(
            _table(
                [
                    "parameter",
                    "value",
                    "seeds",
                    "mean regret over the run",
                    "median final regret",
                    "95% CI low",
                    "95% CI high",
                ],
                diff_rows,
            )
        )
        parts.append(
            _table(
                [
                    "parameter",
                    "seeds",
                    "median range of the mean regret over its values",
                    "95% CI low",
                    "95% CI high",
                ],
                [
                    [p, len(r), float(np.median(r)) if r else None, *_median_ci(r)]
                    for p, r in sorted(ranges.items())
                ],
            )
            + f"\n\n{CI_NOTE}"
        )
    verdicts.append(vd.ga_difficulty_q_strongest(ranges))
    # Pareto frontier over every finished run: (budget, min regret) points per method; the
    # hypervolume is over the labels after round 0 (the GA seed data, common to every method)
    hv_by_function: dict[str, dict[str, list[float]]] = {}
    frontier_rows = []
    points: dict[str, list[tuple[int, float]]] = {}
    for spec, records in sorted(ctx.runs.items(), key=lambda kv: kv[0].name):
        pts = [
            (r["num_evaluations"], r["min_regret"])
            for r in records
            if r.get("min_regret") is not None
        ]
        if not pts:
            continue
        family = (
            spec.method
            if spec.method in METHODS or spec.method == "LLOME-REINFORCE"
            else "LLOME-SFT/MargE pipelines"
        )
        area = _hypervolume([p[0] for p in pts], [p[1] for p in pts], ctx.budget)
        hv_by_function.setdefault(family, {}).setdefault(spec.function, []).append(area)
        points.setdefault(family, []).extend(pts)
    for family, pts in sorted(points.items()):
        best = float("inf")
        for e, g in sorted(pts):
            if g < best:
                best = g
                frontier_rows.append([family, e, g])
    # methods ran on different functions (the GA everywhere, LaMBO-2 on L = 128 late), so the
    # comparison averages per-function means over the functions every compared method has
    compared = ("GA", "LaMBO-2", "LLOME-SFT", "LLOME-MargE", "LLOME-DPO")
    present = [set(hv_by_function[m]) for m in compared if m in hv_by_function]
    common = sorted(set.intersection(*present)) if len(present) == len(compared) else []

    def common_mean(family: str) -> float | None:
        per = hv_by_function[family]
        if not common or any(f not in per for f in common):
            return None
        return float(np.mean([np.mean(per[f]) for f in common]))

    from llome_jax.stats import bootstrap_interval_stratified

    def on_common(family: str) -> dict[str, list[float]] | None:
        """The family's per-run hypervolumes on each common function (the verdict's values)."""
        per = hv_by_function.get(family, {})
        if not common or any(f not in per for f in common):
            return None
        return {f: per[f] for f in common}

    table = []
    for m, per in sorted(hv_by_function.items()):
        areas = [a for runs in per.values() for a in runs]
        strata = list((on_common(m) or {}).values())
        low, high = bootstrap_interval_stratified(strata) if strata else (None, None)
        table.append(
            [
                m,
                len(areas),
                float(np.mean(areas)),
                ", ".join(sorted(per)),
                common_mean(m),
                low,
                high,
            ]
        )
    _write_csv(
        ctx.out / "difficulty_pareto.csv",
        ["kind", "a", "b", "c", "d"],
        [["difficulty", *r] for r in diff_rows]
        + [["frontier", *r, ""] for r in frontier_rows]
        + [["hypervolume", *r[:3], "", ""] for r in table],
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(9, 3.4), dpi=100)
    if path.exists():
        for p in sorted({r[0] for r in diff_rows}):
            mine = [r for r in diff_rows if r[0] == p]
            axes[0].plot(range(len(mine)), [r[3] for r in mine], marker="o", label=f"vary {p}")
        axes[0].set_xlabel("setting (low -> high)")
        axes[0].set_ylabel("GA mean regret over the run")
        axes[0].legend(fontsize=7)
    for family in sorted({r[0] for r in frontier_rows}):
        mine = [r for r in frontier_rows if r[0] == family]
        axes[1].step(
            [r[1] for r in mine], [r[2] for r in mine], where="post", marker="o", label=family
        )
    axes[1].set_xlabel("oracle labels")
    axes[1].set_ylabel("min regret (Pareto frontier)")
    if frontier_rows:
        axes[1].legend(fontsize=6)
    for axis in axes:
        axis.grid(alpha=0.3)
    _save(figure, ctx.out / "difficulty_pareto.png")
    parts.append(
        _table(
            [
                "method",
                "runs",
                f"mean hypervolume (K labels x regret over {ctx.budget} labels after round 0)",
                "functions",
                f"mean over {', '.join(common) or '(no common function)'}",
                "95% CI low",
                "95% CI high",
            ],
            table,
        )
        + "\n\nThe hypervolume compared is a mean (over the common functions of the mean over "
        "a function's runs), not a median; `95% CI`: its percentile bootstrap interval, runs "
        "resampled within each function (10,000 resamples, seed 0)."
    )
    hypervolumes = {m: on_common(m) for m in hv_by_function}
    for variant in ("LLOME-SFT", "LLOME-MargE", "LLOME-DPO"):
        verdicts.append(ctx.check(vd.pareto_llome_variant_below(variant, hypervolumes), ctx.runs))
    return "\n\n".join(parts), verdicts


FIGURE_FUNCTIONS: dict[str, Callable[[Context], tuple[str, list[Verdict]]]] = {
    "solver": figure_solver,
    "diversity": figure_diversity,
    "calibration": figure_calibration,
    "sft_marge": figure_sft_marge,
    "reinforce": figure_reinforce,
    "refinement": figure_refinement,
    "selection": figure_selection,
    "half_quant": figure_half_quant,
    "model_size": figure_model_size,
    "difficulty_pareto": figure_difficulty_pareto,
}

#: what the paper says, quoted from paper.tex
CLAIMS: dict[str, str] = {
    "solver": (
        '"On medium-difficulty tasks, LLOME-MargE and LaMBO-2 outperform other methods. On very '
        'easy or difficult tasks, all methods perform comparably." "On f2 LLOME-MargE performs the '
        'best, whereas LaMBO-2 performs the best on f3." (Pythia-2.8B, 10 rounds of j = 2000 after '
        "10K GA labels.)"
    ),
    "diversity": (
        '"LaMBO-2 produces the most diverse and feasible solutions but LLOME-MargE balances '
        'diversity with accuracy." "Compared to the GA, [...] LaMBO-2, LLOME-MargE, and LLOME-SFT '
        'produce significantly higher proportions of unique sequences." "LLOME-DPO does not '
        'improve either the diversity or the feasibility of its outputs." ("the percentage of '
        'generated sequences for f2 that are unique or feasible"; "balances" gives no rule and is '
        "not tested)"
    ),
    "calibration": (
        '"LLOME-MargE and LLOME-SFT assign higher likelihoods to lower regret sequences, but also '
        'exhibit some degree of overconfidence." "the likelihood and reward of SFT- and '
        'MargE-generated sequences are inversely correlated for high likelihoods exceeding 0.7."'
    ),
    "sft_marge": (
        '"LLOME-SFT_1-MargE_9 not only is the sole pipeline to find the optimal solution, but also '
        "achieves the best calibration curve. In contrast, switching from SFT to MargE training at "
        'an intermediate point results in the worst performance."'
    ),
    "reinforce": (
        '"although LLOME-REINFORCE decreases the regret to some degree, it plateaus early and does '
        'not reach optimality" (MargE does).'
    ),
    "refinement": (
        '"LLMs iteratively produce edits that significantly reduce regret. However, the first few '
        'edits frequently improve the sequence whereas later edits are less likely to be helpful."'
    ),
    "selection": (
        '"the likelihood method often selects high-scoring but not the highest scoring candidates"'
    ),
    "half_quant": (
        '"See the Appendix for results on a test function with q < k." (a figure only: min regret '
        "vs evaluations on Ehr(32,32)-4-4-2; no ranking is stated in the text, so we test the f2 "
        "ranking, LLOME-MargE best)"
    ),
    "model_size": (
        '"LLOME-MargE (LLaMA 226K) performs comparably to LLOME-MargE (Pythia 2.8B) and LaMBO-2 up '
        'to 22K test function evaluations, its performance eventually plateaus"'
    ),
    "difficulty_pareto": (
        '"For this optimizer [the GA], the problem difficulty depends most strongly on the '
        'quantization parameter q." "All three LLOME variants exhibit significantly lower average '
        'hypervolume than both the GA and LaMBO-2."'
    ),
}


def _accounting_line(ctx: Context, specs: Collection[RunSpec]) -> str:
    """Which label accounting the figure's runs use (a budget verdict over both is not
    comparable)."""
    counts: dict[str, int] = {}
    for kind in ctx.accounting(specs):
        counts[kind] = counts.get(kind, 0) + 1
    if not counts:
        return "no finished run"
    return "; ".join(
        f"`{kind}` ({ACCOUNTING_TEXT.get(kind, kind)}): {n} run{'s' if n > 1 else ''}"
        for kind, n in sorted(counts.items())
    ) + (" -- mixed: budget verdicts are not comparable" if len(counts) > 1 else "")


def _audit_cells(audit: LabelAudit | None) -> list[str]:
    """The Runs table's ``labels (distinct)`` and ``constraint queries`` cells of one run."""
    if audit is None:
        return ["", ""]
    queries = "" if audit.constraint_queries is None else f"{audit.constraint_queries:,}"
    return [f"{audit.labels:,} ({audit.distinct:,})", queries]


def _embedded(out: pathlib.Path, key: str, title: str) -> list[str]:
    """The figure's PNG as a markdown image (then a blank line), so a reader of ``report.md``
    sees it; nothing when the figure wrote none."""
    return [f"![{title}]({key}.png)", ""] if (out / f"{key}.png").exists() else []


CURVE_COLUMNS = (
    "run",
    "function",
    "method",
    "seed",
    "state",
    "accounting",
    "round",
    "labels",
    "min_regret",
    "constraint_queries",
)


def write_curves(
    out: pathlib.Path, curves: Sequence[tuple[RunSpec, str, str, Sequence[dict]]]
) -> None:
    """``out/curves.csv`` from ``(spec, state, accounting, rounds)`` per run (``rounds``: its
    ``rounds.jsonl`` records, as :func:`write_report` read them): one row per round
    (``labels``: labels paid so far, round 0 included; ``min_regret``: empty where a round has
    none; ``constraint_queries``: cumulative), with the run's ``state`` (finished / partial) and
    label accounting. Small enough to commit beside ``report.md``, so the curves of figures 1,
    5, 9 and 10 outlive the run directories."""
    rows = [
        [
            spec.name,
            spec.function,
            spec.method,
            spec.seed,
            state,
            accounting,
            r["round"],
            r["num_evaluations"],
            "" if r.get("min_regret") is None else float(r["min_regret"]),
            r.get("cum_constraint_queries", 0),
        ]
        for spec, state, accounting, records in curves
        for r in records
    ]
    _write_csv(out / "curves.csv", CURVE_COLUMNS, rows)


def write_report(
    out: pathlib.Path,
    scale_name: str,
    scale: Scale,
    plan: list[RunSpec],
    figures: Sequence[str],
    plan_seconds: float,
) -> None:
    from llome_jax.rundir import RunDirectory, label_audit_summary

    runs, stop_reasons, accountings, audits = {}, {}, {}, {}
    status, curves = [], []
    for spec in plan:
        path = out / "runs" / spec.name
        records = _rounds(path)
        done = (
            json.loads((path / "done.json").read_text()) if (path / "done.json").exists() else None
        )
        why = done.get("stop_reason") if done else ""
        state = "finished" if done else ("partial" if records else "not run")
        status.append(
            [spec.name, spec.method, len(records) - 1 if records else 0, state, why or ""]
        )
        if not records:
            continue
        accounting = _accounting(path)
        curves.append((spec, state, accounting, records))
        if done:  # a partial run is listed in the run table, never counted in a figure
            runs[spec] = records
            stop_reasons[spec] = why or ""
            accountings[spec] = accounting
            audits[spec.name] = RunDirectory(path).label_audit()
    ctx = Context(out, scale, scale_name, plan, runs, stop_reasons, accountings)
    write_curves(out, curves)
    seeds = ", ".join(f"{f}: {len(s)}" for f, s in scale.seeds)
    sections, table, every = [], [], []
    for key in figures:
        drawn = True
        try:
            body, found = FIGURE_FUNCTIONS[key](ctx)
        except Exception as error:  # a figure that cannot be drawn says why; the others go on
            body, found = f"Not available: {type(error).__name__}: {error}", []
            drawn = False
        if scale_name == "smoke":
            found = [vd.at_smoke_scale(v) for v in found]
        every += found
        specs = ctx.runs if key == "difficulty_pareto" else ctx.select(key)
        table.append(f"| {FIGURES[key]} | {vd.summary_line(found) if found else 'not available'} |")
        sections += [
            f"## {FIGURES[key]}",
            "",
            f"**Paper:** {CLAIMS[key]}",
            "",
            f"**Ours** (`{key}.png`, `{key}.csv`):",
            "",
            *(_embedded(out, key, FIGURES[key]) if drawn else []),
            body,
            "",
            f"Label accounting of this figure's runs: {_accounting_line(ctx, specs)}.",
            "",
            "**Verdicts** (one per claim, `experiments/verdicts.py`; with test, n and p):",
            "",
            *(f"- {v.claim}: **{v.verdict}** ({v.reason}) [{vd.stated_test(v)}]" for v in found),
            "",
        ]
    counts = {k: sum(v.verdict == k for v in every) for k in vd.OUTCOMES}
    lines = [
        f"# The paper's figures at `{scale_name}` scale",
        "",
        "Generated by `python experiments/paper.py` from the run directories under `runs/` "
        f"(re-draw with `--report-only`). Budget per run: {ctx.budget} labels after round 0 "
        f"({scale.rounds} rounds after the GA's round 0, whose labels every method of a seed "
        f"shares; the paper's 30K = 10K + 20K). Seeds of LLOME/LaMBO-2 per function: "
        f"{seeds}; GA seeds: {len(scale.ga_seeds)}. Planned cost {plan_seconds / 3600:.2f} h "
        "(one core of a shared 2-core CPU, estimated).",
        "",
        f"Label accounting of the finished runs: {_accounting_line(ctx, ctx.runs)}.",
        "",
        "Every run's curve, round by round (labels paid, min regret, constraint queries): "
        "`curves.csv`.",
        "",
        f"Information contract (finished runs): {label_audit_summary(audits)}.",
        "",
        "The models are small and from scratch (LLOME: a ~0.2M-parameter Pythia, LaMBO-2: the "
        "`cpu` CNN), not the paper's Pythia-2.8B and 314K LaMBO-2; "
        + (
            "the smoke scale checks the pipeline only: its numbers say nothing about the paper's claims."
            if scale_name == "smoke"
            else "a verdict compares our numbers with the paper's direction."
        ),
        "",
        *(
            [
                "Reduced at this scale (cost): "
                + "; ".join(f"{f}: {', '.join(m)} only" for f, m in scale.reduced)
                + ". LaMBO-2's round 0 is the GA of the paper's mutation rate (0.005), LLOME's "
                "and the GA's that of the LLOME preset"
                + (
                    " (0.1 at smoke scale, so their round 0 differs)."
                    if scale_name == "smoke"
                    else "."
                ),
                "",
            ]
            if scale.reduced
            else []
        ),
        "Every sub-claim has its own verdict (`experiments/verdicts.py`: agree, disagree, not "
        "comparable: we do not measure what the paper measured, inconclusive: too little to "
        "decide); none is combined. Over all claims: "
        + ", ".join(f"{k} {n}" for k, n in counts.items())
        + ".",
        "",
        "A comparison over seeds (of methods, or of one method at two points) agrees or "
        "disagrees only when its rule (medians a quantisation level or more apart, or their "
        "strict order where there are no levels) and its exact test on the per-seed values (a "
        f"two-sided permutation or sign-flip test at alpha = {vd.ALPHA}; TOST for 'comparably') "
        "both say so; otherwise it is inconclusive, with the direction and p. Each verdict lists "
        "its test, n and p. 3 seeds against 3 cannot reach p < 0.05: the smallest two-sided p "
        "of an exact permutation test is 2 / C(6, 3) = 0.1.",
        "",
        "| figure | verdicts |",
        "|---|---|",
        *table,
    ]
    lines += [
        "",
        *sections,
        "## Runs",
        "",
        _table(
            [
                "run",
                "method",
                "rounds",
                "state",
                "accounting",
                "labels (distinct)",
                "constraint queries",
                "stop reason",
            ],
            [
                [*row[:4], accountings.get(spec, ""), *_audit_cells(audits.get(spec.name)), row[4]]
                for spec, row in zip(plan, status)
            ],
        ),
        "",
    ]
    (out / "report.md").write_text("\n".join(lines))


# ------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------
def job_commands(
    scale: str,
    out: pathlib.Path,
    figures: Sequence[str],
    methods: Sequence[str],
    plan: Sequence[RunSpec],
    sweep: bool,
    python: str = sys.executable,
) -> list[str]:
    """One self-contained shell command per planned run, then the GA difficulty sweep's (when
    ``sweep``), then the report's (``--report-only``), for ``--print-jobs``.

    Each command names this interpreter, this script and ``out`` by absolute paths (so it runs
    from any directory of a machine that sees the same file system), repeats the plan's
    selection (``--scale``, ``--only``, ``--methods``: the same plan is built) and selects one
    run with ``--runs NAME`` (the name glob-escaped, so it matches itself only) and
    ``--no-report``. Run directories are independent and resumable, so the run commands may run
    in any order, on any machines, concurrently or again; the last command writes the report
    once they are done.
    """
    base = [
        python,
        str(HERE / "paper.py"),
        "--scale",
        scale,
        "--out",
        str(out.resolve()),
        "--only",
        ",".join(figures),
        "--methods",
        ",".join(methods),
    ]
    names = [spec.name for spec in plan] + (["ga_difficulty"] if sweep else [])
    lines = [shlex.join([*base, "--runs", glob.escape(name), "--no-report"]) for name in names]
    return [*lines, shlex.join([*base, "--report-only"])]


def _figures_arg(text: str | None) -> list[str]:
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
            raise ValueError(
                f"unknown figure {part!r}; choose from 1-{len(keys)} or {', '.join(keys)}"
            )
    return list(dict.fromkeys(out))


def _methods_arg(text: str | None) -> list[str]:
    if not text:
        return list(DEFAULT_METHODS)
    lookup = {m.lower(): m for m in [*METHODS, *F2_METHODS]}
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part.lower() not in lookup:
            raise ValueError(f"unknown method {part!r}; choose from {', '.join(lookup.values())}")
        out.append(lookup[part.lower()])
    return list(dict.fromkeys(out))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scale", default="smoke", help="smoke (minutes) or cpu (the tuned cpu presets; days)"
    )
    parser.add_argument("--out", default="results/paper")
    parser.add_argument(
        "--only",
        default=None,
        help="figures to run, by number or name, comma-separated (default all)",
    )
    parser.add_argument(
        "--methods", default=None, help=f"methods, comma-separated (default {','.join(METHODS)})"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list the planned runs with their estimated cost"
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="redraw report.md and the figures from finished runs",
    )
    parser.add_argument(
        "--runs",
        default=None,
        help="run only the planned runs whose name (e.g. f2/LaMBO-2_seed0) matches one of these "
        "comma-separated shell patterns, e.g. 'f2/LaMBO-2_*'; the report still covers every run",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="run the plan in this many processes, each pinned to its own core where there are "
        "enough (they take the runs in plan order, skipping one another's); the report is "
        "written once all are done",
    )
    parser.add_argument(
        "--print-jobs",
        action="store_true",
        help="print one self-contained shell command per planned run (after --only, --methods, "
        "--runs), then the difficulty sweep's and, last, the report's, and exit: run them with a "
        "SLURM array, Ray or GNU parallel (absolute paths; run directories are independent and "
        "resumable)",
    )
    parser.add_argument(
        "--no-report",
        action="store_true",
        help="do not write the report after the runs (the --print-jobs commands; their last "
        "command, --report-only, writes it once)",
    )
    parser.add_argument("--worker-tag", default="", help=argparse.SUPPRESS)
    parser.add_argument("--pin-core", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-progress", action="store_true")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    try:
        if args.scale not in SCALES:
            raise ValueError(f"unknown scale {args.scale!r}; choose from {', '.join(SCALES)}")
        if args.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {args.workers}")
        if args.print_jobs and (args.dry_run or args.report_only or args.workers > 1):
            raise ValueError(
                "--print-jobs prints commands: not with --dry-run, --report-only or --workers"
            )
        figures = _figures_arg(args.only)
        methods = _methods_arg(args.methods)
    except ValueError as error:
        parser.error(str(error))
    if args.pin_core is not None:
        _pin(args.pin_core)
    scale = SCALES[args.scale]
    plan = build_plan(scale, methods, figures)
    report_plan = plan
    patterns = None if args.runs is None else [p.strip() for p in args.runs.split(",") if p.strip()]

    def wanted(name: str) -> bool:
        return patterns is None or any(fnmatch.fnmatchcase(name, p) for p in patterns)

    plan = [spec for spec in report_plan if wanted(spec.name)]
    if not plan and not wanted("ga_difficulty"):
        parser.error(f"--runs {args.runs!r} matches none of the {len(report_plan)} planned runs")
    costs = {
        spec: scale.cost(spec.kind, _length(spec.function), scale.rounds) for spec in report_plan
    }
    sweep = "difficulty_pareto" in figures and wanted("ga_difficulty")
    # 12 settings, each one compilation (~12 s) plus ~4 ms per generation and seed
    sweep_cost = 12 * (12.0 + 0.004 * scale.difficulty_seeds * scale.difficulty_generations)
    total = sum(costs.values()) + (sweep_cost if "difficulty_pareto" in figures else 0.0)
    out = pathlib.Path(args.out)
    if args.print_jobs:
        for line in job_commands(args.scale, out, figures, methods, plan, sweep):
            print(line)
        return 0
    if args.dry_run:
        print(
            f"{len(plan)} runs at scale {args.scale} ({scale.rounds} rounds each), "
            f"figures: {', '.join(figures)}"
        )
        for spec in plan:
            state = "done" if (out / "runs" / spec.name / "done.json").exists() else "todo"
            print(
                f"  {spec.name:45s} {spec.kind:7s} {costs[spec] / 60:8.1f} min  "
                f"[{','.join(spec.figures)}] {state}"
            )
        if sweep:
            print(
                f"  {'ga_difficulty':45s} {'ga':7s} {sweep_cost / 60:8.1f} min  [difficulty_pareto]"
            )
        selected = sum(costs[spec] for spec in plan) + (sweep_cost if sweep else 0.0)
        print(f"estimated total: {selected / 3600:.2f} h (one core of a shared 2-core CPU)")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        from llome_jax import compile_cache

        # one directory per worker process: JAX writes entries in place without a lock, so a
        # worker could read another's half-written executable
        compile_cache.enable(out / ".jax_cache" / (args.worker_tag.strip() or "w0"))
        t0 = time.perf_counter()
        helpers = _start_workers(argv, args.workers)
        for index, spec in enumerate(plan, start=1):
            started = time.perf_counter()
            how = run_one(spec, scale, out / "runs" / spec.name, progress=not args.no_progress)
            print(
                f"{args.worker_tag}[{index}/{len(plan)}] {spec.name}: {how} "
                f"({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
        if sweep and not args.worker_tag:
            how = run_difficulty(scale, out / "runs" / "ga_difficulty")
            print(f"ga_difficulty: {how}", flush=True)
        failed = sum(helper.wait() != 0 for helper in helpers)
        print(f"{args.worker_tag}runs done in {time.perf_counter() - t0:.0f} s", flush=True)
        if args.worker_tag:
            return 0  # a helper: the first process writes the report
        if failed:
            print(f"{failed} worker(s) failed; their runs resume on the next call", flush=True)
        if args.no_report:
            return 0
    write_report(out, args.scale, scale, report_plan, figures, total)
    print(f"wrote {out / 'report.md'}")
    return 0


def _spawn(command: list[str]) -> subprocess.Popen:
    """Start one helper process (it pins itself: ``--pin-core``; a ``preexec_fn`` would fork a
    process that already runs JAX's threads)."""
    return subprocess.Popen(command)


def _start_workers(argv: list[str], workers: int) -> list[subprocess.Popen]:
    """Start ``workers - 1`` helper processes of this command (``--workers 1``, tagged), each
    pinned to one of this process's cores when there are enough of them (this one takes the
    first). Every worker walks the same plan: a finished run is skipped, a run another worker
    holds is "busy" (its lock), so together they run each planned run once."""
    if workers <= 1:
        return []
    cores = _affinity()
    pin = len(cores) >= workers
    base = [a for i, a in enumerate(argv) if a != "--workers" and argv[i - 1 : i] != ["--workers"]]
    base = [a for a in base if not a.startswith("--workers=")]
    helpers = []
    for k in range(1, workers):
        command = [sys.executable, __file__, *base, "--workers", "1", "--worker-tag", f"w{k} "]
        helpers.append(_spawn(command + (["--pin-core", str(cores[k])] if pin else [])))
    if pin:
        _pin(cores[0])
    return helpers


def _affinity() -> list[int]:
    from llome_jax import host_threads

    return host_threads.core_ids()


def _pin(core: int) -> None:
    os.sched_setaffinity(0, {core})


if __name__ == "__main__":
    from llome_jax.host_memory import reexec_with_huge_pages

    reexec_with_huge_pages()  # huge pages for malloc: ~1.25x faster steps (see that module)
    sys.exit(main())
