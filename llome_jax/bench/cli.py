"""The paper driver's command line: ``llome-jax paper`` (``python experiments/paper.py`` takes the
same flags).

:func:`add_arguments` declares the flags and :func:`run` carries them out; the ``llome-jax`` CLI
(:mod:`llome_jax.commands.paper`) and :func:`main` (the script's entry point) share both. Nothing
heavy is imported until :func:`run` needs it, so ``llome-jax --help`` stays fast.

Several processes can fill one ``OUT``: ``--workers N`` starts ``N - 1`` helper processes of
the same command on this machine (each pinned to its own core where there are enough), and
``--print-jobs`` prints one self-contained command per run for a cluster (a SLURM array, Ray,
GNU parallel). Each command starts this interpreter with ``-m llome_jax.cli paper``
(:data:`ENTRY`), so it needs the installed package, not this checkout.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import glob
import os
import pathlib
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence

from llome_jax.bench.plan import (
    DEFAULT_METHODS,
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
from llome_jax.host import compile_cache
from llome_jax.host import threads as host_threads

__all__ = [
    "DESCRIPTION",
    "ENTRY",
    "add_arguments",
    "cache_name",
    "job_commands",
    "main",
    "run",
]

#: what the command does (its ``--help`` description)
DESCRIPTION = (
    "Run every experiment behind the paper's figures (resumable run directories) and write "
    "OUT/report.md with one verdict per claim, a PNG and CSV per figure, and curves.csv "
    "(python experiments/paper.py takes the same flags)."
)
#: how a helper process or a printed job starts this command: ``python -m llome_jax.cli paper``
ENTRY = ("-m", "llome_jax.cli", "paper")

#: the GA difficulty sweep's name where run names are matched (``--runs``) and printed
SWEEP = "ga_difficulty"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The driver's flags (those of ``experiments/paper.py`` before it became this package)."""
    parser.add_argument(
        "--scale",
        default="smoke",
        help="smoke (minutes), cpu (the tuned cpu presets; days) or paper (the paper's presets, "
        "for GPUs: run it with llome-jax sweep --weights DIR)",
    )
    parser.add_argument("--out", default="results/paper")
    parser.add_argument(
        "--only",
        default=None,
        help="figures to run, by number or name, comma-separated (default all)",
    )
    parser.add_argument(
        "--methods",
        default=None,
        help=f"methods, comma-separated (default {','.join(DEFAULT_METHODS)}), or a registered "
        "optimizer's name (llome-jax optimize --list), run beside them with the plan's round 0, "
        "j and budget",
    )
    parser.add_argument(
        "--functions",
        default=None,
        help="figure 1's functions, comma-separated (default f1,f2,f3,f4); the plan and the "
        "report then cover those only, e.g. --functions f2 for f2's runs and claims (the other "
        "figures are on f2 whatever this says)",
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
        "--archive",
        default=None,
        help="a committed report folder (e.g. docs/paper/f2): planned runs with no directory "
        "under OUT/runs are read from its curves.csv and diversity.csv, so the report can be "
        "redrawn after re-making some runs",
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
    parser.add_argument(
        "--worker-tag",
        default="",
        help="a prefix for this process's lines and the name of its compilation cache "
        "(--workers gives each helper process its own; set it when you start workers by hand)",
    )
    parser.add_argument("--pin-core", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Carry out the parsed flags: print the jobs or the plan's cost, or run the selected share
    of the plan (resumable; helper processes with ``--workers``), then write the report.

    Raises:
      UsageError: an unknown scale, figure or method, ``--workers`` below 1, ``--print-jobs``
        with a flag it cannot go with, or ``--runs`` patterns that match nothing; raised before
        anything is written.
    """
    if args.scale not in SCALES:
        raise UsageError(f"unknown scale {args.scale!r}; choose from {', '.join(SCALES)}")
    if args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    if args.print_jobs and (args.dry_run or args.report_only or args.workers > 1):
        raise UsageError(
            "--print-jobs prints commands: not with --dry-run, --report-only or --workers"
        )
    figures = parse_figures(args.only)
    methods = parse_methods(args.methods)
    if args.pin_core is not None:
        _pin(args.pin_core)
    scale = SCALES[args.scale]
    scale = dataclasses.replace(scale, functions=parse_functions(args.functions, scale))
    report_plan = build_plan(scale, methods, figures)
    patterns = None if args.runs is None else [p.strip() for p in args.runs.split(",") if p.strip()]

    def wanted(name: str) -> bool:
        return patterns is None or any(fnmatch.fnmatchcase(name, p) for p in patterns)

    plan = [spec for spec in report_plan if wanted(spec.name)]
    if not plan and not wanted(SWEEP):
        raise UsageError(
            f"--runs {args.runs!r} matches none of the {len(report_plan)} planned runs"
        )
    costs = {
        spec: scale.cost(spec.kind, function_length(spec.function), scale.rounds)
        for spec in report_plan
    }
    sweep = "difficulty_pareto" in figures and wanted(SWEEP)
    # 12 settings, each one compilation (~12 s) plus ~4 ms per generation and seed
    sweep_cost = 12 * (12.0 + 0.004 * scale.difficulty_seeds * scale.difficulty_generations)
    total = sum(costs.values()) + (sweep_cost if "difficulty_pareto" in figures else 0.0)
    out = pathlib.Path(args.out)
    archive = None if args.archive is None else pathlib.Path(args.archive)
    if archive is not None and not (archive / "curves.csv").is_file():
        raise UsageError(f"--archive {args.archive!r} has no curves.csv")
    if args.print_jobs:
        for line in job_commands(
            args.scale, out, figures, methods, plan, sweep, functions=args.functions
        ):
            print(line)
        return 0
    if args.dry_run:
        _print_plan(scale, args.scale, out, figures, plan, costs, sweep_cost if sweep else None)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        # lazy: JAX; this module loads no JAX (bench/__init__.py), llome-jax --help stays fast
        from llome_jax.run.runner import Terminated

        try:
            helper = _run_share(args, out, plan, sweep)
        except (KeyboardInterrupt, Terminated) as stop:
            # each run keeps its rounds up to its last checkpoint (the round driver saw to it)
            how = "SIGTERM" if isinstance(stop, Terminated) else "Ctrl-C"
            print(
                f"{args.worker_tag}interrupted ({how}): every run keeps its rounds up to its last "
                f"checkpoint and the same command resumes them (finished runs are skipped)",
                file=sys.stderr,
            )
            return 143 if isinstance(stop, Terminated) else 130
        if helper or args.no_report:
            return 0  # a helper (the first process writes the report), or --no-report
    from llome_jax.bench import report  # lazy: report reads runs with JAX (as above)

    report.write_report(out, args.scale, scale, report_plan, figures, total, archive)
    print(f"wrote {out / 'report.md'}")
    return 0


def _print_plan(
    scale: Scale,
    scale_name: str,
    out: pathlib.Path,
    figures: Sequence[str],
    plan: Sequence[RunSpec],
    costs: dict[RunSpec, float],
    sweep_cost: float | None,
) -> None:
    """``--dry-run``: the selected runs, each with its estimated minutes, figures and state."""
    print(
        f"{len(plan)} runs at scale {scale_name} ({scale.rounds} rounds each), "
        f"figures: {', '.join(figures)}"
    )
    for spec in plan:
        state = "done" if (out / "runs" / spec.name / "done.json").exists() else "todo"
        print(
            f"  {spec.name:45s} {spec.kind:7s} {costs[spec] / 60:8.1f} min  "
            f"[{','.join(spec.figures)}] {state}"
        )
    if sweep_cost is not None:
        print(f"  {SWEEP:45s} {'ga':7s} {sweep_cost / 60:8.1f} min  [difficulty_pareto]")
    selected = sum(costs[spec] for spec in plan) + (sweep_cost or 0.0)
    where = "one core of a shared 2-core CPU"
    if scale_name == "paper":
        where += "; LLOME and LaMBO-2 runs on one GPU each"
    print(f"estimated total: {selected / 3600:.2f} h ({where})")


def _run_share(
    args: argparse.Namespace, out: pathlib.Path, plan: Sequence[RunSpec], sweep: bool
) -> bool:
    """Run (resume, skip) this process's share of the plan, with ``--workers - 1`` helpers,
    and the difficulty sweep; True for a helper process (which writes no report)."""
    from llome_jax.bench import difficulty, execution  # lazy: JAX and the optimizers (as above)

    scale = SCALES[args.scale]
    # one directory per worker process: JAX writes entries in place without a lock, so a
    # worker could read another's half-written executable
    compile_cache.enable(out / ".jax_cache" / cache_name(args, plan, sweep))
    t0 = time.perf_counter()
    helpers = start_workers(args, args.workers)
    for index, spec in enumerate(plan, start=1):
        started = time.perf_counter()
        how = execution.run_one(
            spec, scale, out / "runs" / spec.name, progress=not args.no_progress
        )
        print(
            f"{args.worker_tag}[{index}/{len(plan)}] {spec.name}: {how} "
            f"({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    if sweep and not args.worker_tag:
        how = difficulty.run_difficulty(scale, out / "runs" / SWEEP)
        print(f"{SWEEP}: {how}", flush=True)
    failed = sum(helper.wait() != 0 for helper in helpers)
    print(f"{args.worker_tag}runs done in {time.perf_counter() - t0:.0f} s", flush=True)
    if args.worker_tag:
        return True
    if failed:
        print(f"{failed} worker(s) failed; their runs resume on the next call", flush=True)
    return False


def cache_name(args: argparse.Namespace, plan: Sequence[RunSpec], sweep: bool) -> str:
    """This process's compilation cache under ``OUT/.jax_cache``: its ``--worker-tag``; else,
    for a process of one run (a ``--print-jobs`` command), that run's name (``f2__GA_seed0``),
    so that the concurrent tasks of an array never share one; else (``--runs`` patterns) a name
    of the patterns; else ``w0``. ``JAX_COMPILATION_CACHE_DIR`` (one per node or task) wins."""
    if args.worker_tag.strip():
        return args.worker_tag.strip()
    names = [spec.name for spec in plan] + ([SWEEP] if sweep else [])
    if len(names) == 1:
        return names[0].replace("/", "__")
    if args.runs is not None:
        import hashlib

        return "runs-" + hashlib.sha256(args.runs.encode()).hexdigest()[:12]
    return "w0"


def job_commands(
    scale: str,
    out: pathlib.Path,
    figures: Sequence[str],
    methods: Sequence[str],
    plan: Sequence[RunSpec],
    sweep: bool,
    python: str | None = None,
    functions: str | None = None,
) -> list[str]:
    """One self-contained shell command per planned run, then the GA difficulty sweep's (when
    ``sweep``), then the report's (``--report-only``), for ``--print-jobs``.

    Each command names this interpreter and ``out`` by absolute paths and starts the command
    with ``-m llome_jax.cli paper`` (so it runs from any directory of a machine that sees the
    same file system and the same environment), repeats the plan's selection (``--scale``,
    ``--only``, ``--methods``, ``--functions`` when given: the same plan is built) and selects
    one run with ``--runs NAME`` (the name glob-escaped, so it matches itself only) and
    ``--no-report``; ``python`` defaults to this interpreter (``sys.executable``). Run
    directories are
    independent and resumable, so the run commands may run in any order, on any machines,
    concurrently or again; the last command writes the report once they are done.
    """
    base = [
        python or sys.executable,
        *ENTRY,
        "--scale",
        scale,
        "--out",
        str(out.resolve()),
        "--only",
        ",".join(figures),
        "--methods",
        ",".join(methods),
        *(["--functions", functions] if functions else []),
    ]
    names = [spec.name for spec in plan] + ([SWEEP] if sweep else [])
    lines = [shlex.join([*base, "--runs", glob.escape(name), "--no-report"]) for name in names]
    return [*lines, shlex.join([*base, "--report-only"])]


def _share_argv(args: argparse.Namespace) -> list[str]:
    """The flags that make a helper build the same plan and take the same share of it (the
    given selection, ``--no-report``, ``--no-progress``)."""
    argv = ["--scale", args.scale, "--out", str(args.out)]
    for flag, value in (
        ("--only", args.only),
        ("--methods", args.methods),
        ("--functions", args.functions),
        ("--runs", args.runs),
    ):
        if value is not None:
            argv += [flag, value]
    return argv + ["--no-report"] * args.no_report + ["--no-progress"] * args.no_progress


def _spawn(command: list[str]) -> subprocess.Popen:
    """Start one helper process (it pins itself: ``--pin-core``; a ``preexec_fn`` would fork a
    process that already runs JAX's threads)."""
    return subprocess.Popen(command)


def start_workers(args: argparse.Namespace, workers: int) -> list[subprocess.Popen]:
    """Start ``workers - 1`` helper processes of this command (``--workers 1``, tagged), each
    pinned to one of this process's cores when there are enough of them (this one takes the
    first). Every worker walks the same plan: a finished run is skipped, a run another worker
    holds is "busy" (its lock), so together they run each planned run once."""
    if workers <= 1:
        return []
    cores = _affinity()
    pin = len(cores) >= workers
    base = [sys.executable, *ENTRY, *_share_argv(args), "--workers", "1"]
    helpers = []
    for k in range(1, workers):
        command = [*base, "--worker-tag", f"w{k} "]
        helpers.append(_spawn(command + (["--pin-core", str(cores[k])] if pin else [])))
    if pin:
        _pin(cores[0])
    return helpers


def _affinity() -> list[int]:
    return host_threads.core_ids()


def _pin(core: int) -> None:
    os.sched_setaffinity(0, {core})


def main(argv: Sequence[str] | None = None) -> int:
    """The command line of ``python experiments/paper.py``: parse ``argv`` (default
    ``sys.argv[1:]``) and :func:`run` it; a usage error ends it as argparse does (exit 2)."""
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(None if argv is None else list(argv))
    try:
        return run(args)
    except UsageError as error:
        parser.error(str(error))
