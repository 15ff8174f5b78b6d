"""Executors on the engines clusters run: SLURM through submitit, and Ray.

Both are optional extras (``pip install "llome-jax[slurm]"``, ``"llome-jax[ray]"``), imported
only when used. Like the local ones (:mod:`llome_jax.sweep.local`), an executor's
``run(tasks, plan)`` yields one :class:`~llome_jax.sweep.tasks.TaskResult` per task as each ends
and never raises for a task's failure: a process that died comes back as a ``failed`` result
with the engine's message and the end of the task's log.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import pathlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from llome_jax.sweep.local import died
from llome_jax.sweep.plans import Resources, SweepPlan
from llome_jax.sweep.tasks import Task, TaskResult, run_task

__all__ = ["RayExecutor", "SubmititExecutor", "require"]


def require(module: str, extra: str) -> Any:
    """``import module``, or an ``ImportError`` naming the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(
            f'this executor needs {module}: pip install "llome-jax[{extra}]"'
        ) from None


def _error_line(error: BaseException, limit: int = 300) -> str:
    """The error's type and the first two lines of its message, on one line."""
    text = " ".join(line.strip() for line in str(error).strip().splitlines()[:2])
    line = f"{type(error).__name__}: {text}".rstrip(": ")
    return line if len(line) <= limit else line[: limit - 3] + "..."


class SubmititExecutor:
    """SLURM through submitit: one job array per group of runs that ask for the same resources
    and time limit, each run one array task, with ``--cpus-per-task``, ``--gpus-per-node``,
    ``--mem`` from the plan (:meth:`SweepPlan.resources_for`) and ``--time`` from its cost
    estimate times ``margin`` (:meth:`SweepPlan.time_limit_minutes`).

    ``cluster="local"`` runs the same jobs with submitit's local executor on this machine (for
    tests and trying a plan), at most ``parallelism`` at a time (default one per usable core);
    on SLURM ``parallelism`` is the array's ``%`` limit. ``slurm`` holds more ``sbatch`` options
    (``partition``, ``account``, ``qos``, ``constraint``, ``additional_parameters``, ... as
    submitit's ``slurm_<name>`` parameters). Jobs are polled every ``poll`` seconds (default 5,
    0.5 on the local cluster); this process must stay up until they end (run it in tmux, or as
    a one-core job itself).
    """

    name = "slurm"

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        cluster: str = "slurm",
        margin: float = 2.0,
        min_minutes: int = 10,
        parallelism: int | None = None,
        slurm: Mapping[str, Any] | None = None,
        poll: float | None = None,
    ) -> None:
        if cluster not in ("slurm", "local"):
            raise ValueError(f"cluster must be slurm or local, got {cluster!r}")
        self.folder = pathlib.Path(folder)
        self.cluster = cluster
        self.margin = float(margin)
        self.min_minutes = int(min_minutes)
        self.parallelism = parallelism
        self.slurm = dict(slurm or {})
        self.poll = float(poll if poll is not None else (0.5 if cluster == "local" else 5.0))

    def parameters(self, resources: Resources, minutes: int, count: int) -> dict[str, Any]:
        """The submitit parameters of one array (``count`` tasks)."""
        params: dict[str, Any] = {
            "name": "llome-jax",
            "timeout_min": int(minutes),
            "cpus_per_task": int(resources.cpus),
            "gpus_per_node": int(resources.gpus),
            "nodes": 1,
            "tasks_per_node": 1,
        }
        if resources.mem_gb is not None:
            params["mem_gb"] = float(resources.mem_gb)
        if self.parallelism:
            params["slurm_array_parallelism"] = min(int(self.parallelism), count)
        params.update({f"slurm_{k}": v for k, v in self.slurm.items()})
        return params

    def groups(self, tasks: Sequence[Task], plan: SweepPlan) -> list[tuple[dict, list[Task]]]:
        """``(parameters, tasks)`` per array: tasks that ask alike share one."""
        found: dict[tuple, list[Task]] = collections.defaultdict(list)
        for task in tasks:
            minutes = plan.time_limit_minutes(task.name, self.margin, self.min_minutes)
            found[(plan.resources_for(task.name), minutes)].append(task)
        return [
            (self.parameters(resources, minutes, len(group)), group)
            for (resources, minutes), group in found.items()
        ]

    def run(self, tasks: Sequence[Task], plan: SweepPlan) -> Iterator[TaskResult]:
        submitit = require("submitit", "slurm")
        self.folder.mkdir(parents=True, exist_ok=True)
        folder = str(self.folder / "%j")
        if self.cluster == "local":
            yield from self._run_local(submitit, folder, tasks, plan)
            return
        running: dict[Any, Task] = {}
        for params, group in self.groups(tasks, plan):
            executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
            executor.update_parameters(**params)
            jobs = executor.map_array(run_task, group)
            print(
                f"submitted array {jobs[0].job_id.split('_')[0]} of {len(group)} run(s): "
                f"{params['cpus_per_task']} CPU, {params['gpus_per_node']} GPU, "
                f"{params['timeout_min']} min each",
                flush=True,
            )
            running.update(zip(jobs, group))
        yield from self._wait(running)

    def _run_local(
        self, submitit: Any, folder: str, tasks: Sequence[Task], plan: SweepPlan
    ) -> Iterator[TaskResult]:
        """submitit's local executor, at most ``parallelism`` jobs at a time."""
        from llome_jax import host_threads

        limit = int(self.parallelism or host_threads.usable_cores())
        pending = collections.deque(tasks)
        running: dict[Any, Task] = {}
        while pending or running:
            while pending and len(running) < limit:
                task = pending.popleft()
                minutes = plan.time_limit_minutes(task.name, self.margin, self.min_minutes)
                params = self.parameters(plan.resources_for(task.name), minutes, 1)
                executor = submitit.AutoExecutor(folder=folder, cluster="local")
                executor.update_parameters(**params)
                running[executor.submit(run_task, task)] = task
            yield from self._wait(running, first_only=True)

    def _wait(self, running: dict[Any, Task], first_only: bool = False) -> Iterator[TaskResult]:
        """Results of ``running`` jobs as they end (removed from it); with ``first_only``, back
        after the first batch that ends."""
        while running:
            ended = [job for job in running if job.done()]
            if not ended:
                time.sleep(self.poll)
                continue
            for job in ended:
                task = running.pop(job)
                yield self._result(job, task)
            if first_only:
                return

    @staticmethod
    def _result(job: Any, task: Task) -> TaskResult:
        try:
            found = job.result()
        except Exception as error:  # the job died (killed, time limit, node failure)
            result = died(task, f"{_error_line(error)} (job {job.job_id})")
            text = str(error).strip()
            return dataclasses.replace(result, traceback=f"{text}\n{result.traceback}".strip())
        if isinstance(found, TaskResult):
            return found
        return died(task, f"job {job.job_id} returned {found!r}")


class RayExecutor:
    """Ray tasks, one per run, each in a fresh worker process (``max_calls=1``: the compiled
    programs of a run go with its process), asking for the run's ``num_cpus`` and ``num_gpus``
    (Ray sets ``CUDA_VISIBLE_DEVICES``) and, when the plan gives one, its memory.

    Connects to ``address`` (``auto``: the running cluster, ``ray://...``: a client) or to the
    Ray this process already started; without either, starts a local Ray with ``num_cpus``
    cores (default all) for the sweep and stops it at :meth:`close`. Ray's own retries are off: the sweep
    resubmits a failed run (``--retries``) and records every failure.
    """

    name = "ray"

    def __init__(
        self, address: str | None = None, num_cpus: int | None = None, memory: bool = True
    ) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self.memory = memory
        self._started = False

    def options(self, resources: Resources) -> dict[str, Any]:
        """The Ray task options of a run."""
        found: dict[str, Any] = {"num_cpus": resources.cpus, "num_gpus": resources.gpus}
        if self.memory and resources.mem_gb is not None:
            found["memory"] = int(resources.mem_gb * (1 << 30))
        return found

    def run(self, tasks: Sequence[Task], plan: SweepPlan) -> Iterator[TaskResult]:
        ray = require("ray", "ray")
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if self.address:
                ray.init(address=self.address, **kwargs)
            else:
                ray.init(num_cpus=self.num_cpus, **kwargs)
            self._started = True
        remote = ray.remote(max_calls=1, max_retries=0)(run_task)
        running: dict[Any, Task] = {}
        try:
            for task in tasks:
                ref = remote.options(**self.options(plan.resources_for(task.name))).remote(task)
                running[ref] = task
            while running:
                ended, _ = ray.wait(list(running), num_returns=1)
                for ref in ended:
                    task = running.pop(ref)
                    try:
                        found = ray.get(ref)
                    except Exception as error:  # the worker died, or Ray could not run it
                        found = died(task, _error_line(error))
                        found = dataclasses.replace(
                            found, traceback=f"{str(error).strip()}\n{found.traceback}".strip()
                        )
                    yield found
        finally:
            for ref in running:  # the driver stopped: the tasks stop at a round's end
                ray.cancel(ref)

    def close(self) -> None:
        """Stop the Ray this executor started (a cluster it connected to keeps running)."""
        if self._started:
            import ray

            ray.shutdown()
            self._started = False
