"""Time limits and preemption under submitit: a run stops at a round boundary and comes back.

SLURM warns a job before its time limit (and, where the cluster is set up so, before a
preemption) with the signal submitit asks for: ``#SBATCH --signal=USR2@<signal_delay_s>``. The
round driver (:func:`llome_jax.run.runner.run`) turns that SIGUSR2 into a stop at the next round
boundary, once the round's labels, record and checkpoint are written. :class:`SubmititTask`, the
callable every submitit job runs, is checkpointable in submitit's sense: when its run stopped on
SIGUSR2 it hands over to submitit's own handler, which calls :meth:`SubmititTask.checkpoint`
(the same task, one requeue more), stores it as the job's submission, runs ``scontrol requeue``
and exits. The requeued job starts again, loads that submission and resumes the run directory
from the round it stopped after: no label is paid twice and none is lost. submitit counts the
requeues that came from a time limit (not from a preemption) and, after ``max_num_timeout`` of
them (3 by default; ``--slurm max_num_timeout=N``), ends the job with an error, which the sweep
records and retries with a longer limit (:meth:`llome_jax.sweep.engines.SubmititExecutor.retry`).

Every requeue leaves a line in ``OUT/sweep/requeues.jsonl`` (:data:`REQUEUES`):
``how = "requeue"`` from the job that stopped (after which round, the job id, host, pid, and
whether submitit took it for a time limit), ``how = "restart"`` from a job that SLURM started
again on its own (``scontrol requeue`` by an operator, a node failure; ``SLURM_RESTART_COUNT``
says so), which resumes its run directory from its last checkpoint the same way.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import socket
from typing import Any

from llome_jax.sweep.tasks import Task, TaskResult, now, run_task, slug

__all__ = ["REQUEUES", "SubmititTask", "read_requeues", "record_requeue"]

#: one JSON line per requeue or SLURM restart of a task, in ``OUT/sweep``
REQUEUES = "requeues.jsonl"


def record_requeue(out: str | os.PathLike, **fields: Any) -> None:
    """Append one line to ``OUT/sweep/requeues.jsonl`` (``fields`` plus ``time``), fsynced."""
    path = pathlib.Path(out) / "sweep" / REQUEUES
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as stream:
        stream.write(json.dumps({**fields, "time": now()}) + "\n")
        stream.flush()
        os.fsync(stream.fileno())


def read_requeues(out: str | os.PathLike) -> list[dict[str, Any]]:
    """The lines of ``OUT/sweep/requeues.jsonl`` (none when it does not exist; an unreadable
    line is skipped)."""
    try:
        lines = (pathlib.Path(out) / "sweep" / REQUEUES).read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


def _last_round(task: Task) -> int | None:
    """The last round in the task's ``rounds.jsonl`` (``None`` without one)."""
    try:
        lines = (pathlib.Path(task.out) / "runs" / task.name / "rounds.jsonl").read_text()
        return int(json.loads(lines.splitlines()[-1])["round"])
    except (OSError, ValueError, IndexError, KeyError):
        return None


def _job_id() -> str:
    """This SLURM job's id as submitit names it (``123_4`` for an array task)."""
    array, index = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and index:
        return f"{array}_{index}"
    return os.environ.get("SLURM_JOB_ID", "")


class SubmititTask:
    """The callable a submitit job runs: :func:`~llome_jax.sweep.tasks.run_task`, checkpointable
    (module docstring). Holds nothing: everything is in the :class:`Task` it is called with."""

    def __call__(self, task: Task | tuple[Task, ...]) -> TaskResult | list[TaskResult]:
        """Run ``task``; a tuple of tasks (runs packed into one job) one after another, a list
        of their results (a stop on SIGUSR2 requeues the whole pack: the runs it finished
        are skipped when it comes back)."""
        if isinstance(task, tuple):
            return [self(one) for one in task]
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        if restarts > task.requeues:  # SLURM started this job again, not submitit's requeue
            record_requeue(
                task.out,
                run=task.name,
                attempt=task.attempt,
                how="restart",
                restart_count=restarts,
                job_id=_job_id(),
                host=socket.gethostname(),
                pid=os.getpid(),
                resumes_after_round=_last_round(task),
            )
        result = run_task(task)
        handler = signal.getsignal(signal.SIGUSR2)
        if result.stop_signal == "SIGUSR2" and _is_submitit(handler):
            record_requeue(
                task.out,
                run=task.name,
                attempt=task.attempt,
                how="requeue",
                requeue=task.requeues + 1,
                job_id=_job_id(),
                host=result.host,
                pid=result.pid,
                stopped_after_round=_last_round(task),
                seconds=round(result.seconds, 1),
                log=f"sweep/logs/{slug(task.name)}.{task.attempt}.log",
            )
            # submitit's handler: checkpoint() below, scontrol requeue, exit (or, after too
            # many time limits, an error that ends the job: the sweep retries it)
            handler(signal.SIGUSR2, None)
        return result

    def checkpoint(self, task: Task | tuple[Task, ...]) -> Any:
        """What submitit resubmits after a time limit or preemption: this task (each task of a
        pack), one requeue more (the run directory holds where it stopped)."""
        from submitit.helpers import DelayedSubmission  # lazy: an optional extra (slurm)

        if isinstance(task, tuple):
            return DelayedSubmission(
                self, tuple(dataclasses.replace(t, requeues=t.requeues + 1) for t in task)
            )
        return DelayedSubmission(self, dataclasses.replace(task, requeues=task.requeues + 1))


def _is_submitit(handler: Any) -> bool:
    """Whether ``handler`` is submitit's time-limit handler (set up in a submitit job)."""
    return callable(handler) and getattr(handler, "__name__", "") == "checkpoint_and_try_requeue"
