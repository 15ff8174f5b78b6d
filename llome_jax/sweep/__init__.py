"""Sweeps on the engines researchers run: this machine, SLURM (submitit) and Ray.

One API for every engine, on the paper driver's plan and run directories::

    from llome_jax.sweep import load_plan, paper_plan, run_sweep

    plan = load_plan("plan.yaml")                 # or paper_plan("cpu", only="solver")
    result = run_sweep(plan, "results/sweep", "ray", retries=1)
    result.done, result.missing                   # finished runs; missing run -> why

and one command, ``llome-jax sweep [PLAN] --executor inline|local|slurm|ray``
(:mod:`llome_jax.commands.sweep`).

Modules, by concern (none imports JAX at import; submitit and Ray are imported when used):

* :mod:`.plans` -- :class:`~.plans.SweepPlan`: the runs (the paper's plan or a YAML file), their
  resources and time limits from the plan's cost table.
* :mod:`.tasks` -- :class:`~.tasks.Task` and :func:`~.tasks.run_task`, what a worker process runs:
  the task's environment, log and compilation cache, then
  :func:`llome_jax.bench.execution.run_one` (run, resume or skip the run directory).
* :mod:`.local` -- the ``inline`` and ``local`` (a fresh process per run, one per core and GPU)
  executors.
* :mod:`.engines` -- the ``slurm`` (submitit job arrays) and ``ray`` executors.
* :mod:`.driver` -- :func:`~.driver.run_sweep`: submit, record failures (``failures.jsonl``),
  resubmit (``retries``), then the report.
"""

from llome_jax.sweep.driver import EXECUTORS, SweepResult, run_sweep
from llome_jax.sweep.plans import Resources, SweepPlan, load_plan, paper_plan, plan_from_dict

__all__ = [
    "EXECUTORS",
    "Resources",
    "SweepPlan",
    "SweepResult",
    "load_plan",
    "paper_plan",
    "plan_from_dict",
    "run_sweep",
]
