"""``llome-jax sweep``: a plan's runs on this machine, SLURM (submitit) or Ray, then one report
(:mod:`llome_jax.sweep`)."""

from __future__ import annotations

import argparse

NAME = "sweep"
HELP = (
    "Run a plan (a YAML file, or the paper's plan: --scale, --only, --methods, --functions) on an executor: "
    "inline, local (one process per core), slurm (a submitit job array) or ray; failed runs are "
    "recorded in OUT/failures.jsonl and resubmitted (--retries), each resuming its run "
    "directory; then OUT/report.md from whatever finished, naming what is missing."
)
ORDER = 75


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "plan",
        nargs="?",
        default=None,
        metavar="PLAN",
        help="a YAML plan (functions, methods, seeds, presets, budget, ...: "
        "docs/howto/cluster-sweeps.md); without one, the paper's plan",
    )
    parser.add_argument(
        "--executor",
        default="local",
        choices=("inline", "local", "slurm", "ray"),
        help="where the runs go: inline (this process), local (a fresh Python process per run, one "
        "per core, CUDA_VISIBLE_DEVICES per GPU; default), slurm (submitit job arrays with each "
        "run's resources and a time limit), ray (one Ray task per run)",
    )
    parser.add_argument("--out", default="results/sweep")
    parser.add_argument("--scale", default="smoke", help="the paper's plan: smoke, cpu or paper")
    parser.add_argument("--only", default=None, help="the paper's plan: figures, comma-separated")
    parser.add_argument("--methods", default=None, help="the paper's plan: methods")
    parser.add_argument(
        "--functions", default=None, help="the paper's plan: figure 1's functions (default all)"
    )
    parser.add_argument(
        "--weights", default=None, help="the Pythia-2.8B directory the paper scale fine-tunes"
    )
    parser.add_argument(
        "--runs",
        default=None,
        help="only the runs whose name matches one of these comma-separated shell patterns "
        "(e.g. 'f2/LaMBO-2_*'); the report still covers every run",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=1,
        help="resubmit a failed run this many times (each resumes its run directory)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="list the runs with their resources, time limits and state, and the wall time on "
        "--workers parallel workers; submit nothing",
    )
    parser.add_argument(
        "--report-only", action="store_true", help="write the report from the finished runs"
    )
    parser.add_argument(
        "--status",
        action="store_true",
        help="print where every run stands (finished, queued or running with its SLURM job, "
        "failed with its error, stopped after round k, not started) and exit; submits nothing "
        "(a driver may be running)",
    )
    parser.add_argument("--no-report", action="store_true", help="no report after the runs")
    parser.add_argument(
        "--rerun-changed",
        action="store_true",
        help="run again from scratch the finished runs another plan made (their done.json "
        "fingerprint differs: rounds, budget, an override); without it they are refused",
    )
    resources = parser.add_argument_group("resources (every run; default: the plan's)")
    resources.add_argument("--cpus", type=int, default=None, help="CPU cores per run")
    resources.add_argument("--gpus", type=int, default=None, help="GPUs per run")
    resources.add_argument("--mem-gb", type=float, default=None, help="memory per run (GB)")
    resources.add_argument(
        "--time-margin",
        type=float,
        default=2.0,
        help="a run's time limit: its estimated cost times this (slurm)",
    )
    resources.add_argument(
        "--min-minutes", type=int, default=10, help="the shortest time limit (slurm)"
    )
    resources.add_argument(
        "--max-minutes",
        type=int,
        default=None,
        help="the longest time limit (slurm; e.g. the partition's MaxTime): each run's is capped "
        "at it, and runs estimated longer are refused before anything is submitted",
    )
    engines = parser.add_argument_group("executors")
    engines.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local: processes at a time (default one per usable core); slurm: the array's "
        "parallel limit; --dry-run: the workers its wall time assumes",
    )
    engines.add_argument(
        "--partition", default=None, help="slurm: the partition (sbatch --partition)"
    )
    engines.add_argument(
        "--slurm",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="slurm: another submitit slurm_KEY parameter (account=..., qos=..., "
        "constraint=..., exclusive=true, mem_per_gpu=40G (then no --mem), time=MINUTES for "
        "every run); a value in [...] is a YAML list ('setup=[module load cuda, source "
        ".venv/bin/activate]'), in {...} a mapping ('additional_parameters={comment: llome}'); "
        "repeatable",
    )
    engines.add_argument(
        "--submitit-cluster",
        default="slurm",
        choices=("slurm", "local"),
        help="slurm: submit to SLURM, or run the same jobs with submitit's local executor",
    )
    engines.add_argument(
        "--ray-address",
        default=None,
        help="ray: the cluster (auto, or ray://HOST:PORT); default a local Ray for the sweep",
    )
    engines.add_argument(
        "--compile-cache",
        default="task",
        choices=("task", "node", "shared", "off"),
        help="JAX compilation cache: one per task (OUT/.jax_cache/<run>), one per node "
        "($TMPDIR, locked), one for the sweep (OUT/.jax_cache/shared, locked: tasks on every "
        "node share compilations), or none",
    )
    engines.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment variable for every run (repeatable)",
    )


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    found = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} takes KEY=VALUE, got {item!r}")
        found[key] = value
    return found


def build_plan(args: argparse.Namespace):
    """The plan the flags name, with ``--cpus``/``--gpus``/``--mem-gb`` over every run."""
    import dataclasses

    from llome_jax.sweep.plans import Resources, load_plan, paper_plan

    if args.plan is not None:
        plan = load_plan(args.plan)
        if args.weights:
            scale = plan.scale
            overrides = (*scale.llome_overrides, ("weights", args.weights))
            plan = dataclasses.replace(
                plan, scale=dataclasses.replace(scale, llome_overrides=overrides)
            )
    else:
        plan = paper_plan(
            args.scale, args.only, args.methods, weights=args.weights, functions=args.functions
        )
    given = {"cpus": args.cpus, "gpus": args.gpus, "mem_gb": args.mem_gb}
    if any(v is not None for v in given.values()):
        table = [
            *plan.resources,
            ("*", Resources(**{k: v for k, v in given.items()})),  # type: ignore[arg-type]
        ]
        plan = dataclasses.replace(plan, resources=tuple(table))
    return plan


def run(args: argparse.Namespace) -> int:
    import pathlib

    from llome_jax.sweep import driver

    plan = build_plan(args)
    out = pathlib.Path(args.out)
    patterns = None if args.runs is None else [p.strip() for p in args.runs.split(",") if p]
    if args.dry_run:
        names = plan.select(patterns)
        changed = driver.check_changes(plan, out, names, args.rerun_changed)
        engine = None
        if args.executor == "slurm":  # its time limits and cap (submitit not needed)
            options = driver.with_plan_settings(plan, "slurm", _slurm_options(args))
            engine = driver.make_executor("slurm", out, **options)
        print_plan(plan, out, names, args, changed, engine)
        if engine is not None:  # refused as the run would be: exit 2
            engine.check([n for n in names if n in changed or not driver.finished(out, n)], plan)
        return 0
    if args.status:
        from llome_jax.sweep import status

        names = plan.select(patterns)
        print(status.status_text(plan, out, status.sweep_status(plan, out, names)))
        return 0
    if args.report_only:
        out.mkdir(parents=True, exist_ok=True)
        driver.write_sweep_report(plan, out.resolve(), args.executor)
        print(f"wrote {out / 'report.md'}")
        return 0
    options = _executor_options(args)  # bad --slurm settings, the cap, a missing extra: refused
    # in that order, nothing written (run_sweep)
    result = driver.run_sweep(
        plan,
        out,
        args.executor,
        runs=patterns,
        retries=args.retries,
        cache=args.compile_cache,
        env=_pairs(args.env, "--env"),
        report=not args.no_report,
        rerun_changed=args.rerun_changed,
        **options,
    )
    return 0 if not result.missing else 1


def _executor_options(args: argparse.Namespace) -> dict:
    if args.executor == "local":
        return {"workers": args.workers}
    if args.executor == "slurm":
        return {"cluster": args.submitit_cluster, **_slurm_options(args)}
    if args.executor == "ray":
        return {"address": args.ray_address}
    return {}


def _slurm_options(args: argparse.Namespace) -> dict:
    """The slurm executor's options from ``--slurm`` (values read as YAML:
    :func:`~llome_jax.sweep.cluster_settings.parse_slurm_options`), ``--partition``,
    ``--time-margin``, ``--min-minutes``, ``--max-minutes`` and ``--workers``.

    Raises:
      UsageError: a bad ``--slurm`` value; ``--mem-gb`` beside ``--slurm mem_per_gpu`` or
        ``mem_per_cpu`` (sbatch refuses ``--mem`` beside them).
    """
    from llome_jax.bench.plan import UsageError
    from llome_jax.sweep.cluster_settings import MEMORY_KEYS, parse_slurm_options

    slurm = parse_slurm_options(args.slurm)
    given = [key for key in MEMORY_KEYS if key in slurm]
    if given and args.mem_gb is not None:
        raise UsageError(
            f"--mem-gb and --slurm {given[0]} both ask for memory (sbatch refuses --mem beside "
            f"--{given[0].replace('_', '-')}); give one"
        )
    if args.partition:
        slurm["partition"] = args.partition
    return {
        "margin": args.time_margin,
        "min_minutes": args.min_minutes,
        "max_minutes": args.max_minutes,
        "parallelism": args.workers,
        "slurm": slurm,
    }


def print_plan(
    plan,
    out,
    names: list[str],
    args: argparse.Namespace,
    changed: dict | None = None,
    engine=None,
) -> None:
    """``--dry-run``: each selected run with its kind, resources, time limit (``engine``'s, the
    slurm executor's, when given), estimated minutes and state (``rerun``: a finished run
    another plan made, ``changed``, run again), then the estimated wall time on ``--workers``
    workers (longest runs first)."""
    from llome_jax.sweep.driver import finished

    changed = changed or {}

    def todo(name: str) -> bool:
        return name in changed or not finished(out, name)

    workers = args.workers or 1
    print(
        f"{len(names)} run(s) of plan {plan.name!r} (scale {plan.scale_name}, "
        f"{plan.scale.rounds} rounds), figures: {', '.join(plan.figures)}"
    )
    for name in names:
        spec = plan.spec(name)
        need = plan.resources_for(name)
        memory = "" if need.mem_gb is None else f" {need.mem_gb:g} GB"
        limit = (
            engine.minutes(name, plan)
            if engine is not None
            else plan.time_limit_minutes(name, args.time_margin, args.min_minutes)
        )
        state = "rerun" if name in changed else "todo" if todo(name) else "done"
        print(
            f"  {name:45s} {spec.kind if spec else 'ga':7s} {plan.seconds(name) / 60:8.1f} min  "
            f"{need.cpus} CPU {need.gpus} GPU{memory}, limit {limit} min  {state}"
        )
    seconds = [plan.seconds(name) for name in names if todo(name)]
    print(
        f"estimated total: {sum(seconds) / 3600:.2f} h of runs; on {workers} worker(s) about "
        f"{makespan(seconds, workers) / 3600:.2f} h (longest run "
        f"{max(seconds, default=0.0) / 3600:.2f} h; costs measured on one core of a shared "
        "2-core CPU, the paper scale's LLOME and LaMBO-2 per GPU)"
    )


def makespan(seconds: list[float], workers: int) -> float:
    """The wall time of ``seconds`` of runs on ``workers`` workers, longest first, each to the
    worker that frees first (a greedy schedule, within 4/3 of the best)."""
    import heapq

    ends = [0.0] * max(1, workers)
    for cost in sorted(seconds, reverse=True):
        heapq.heapreplace(ends, ends[0] + cost)
    return max(ends)
