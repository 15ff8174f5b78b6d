"""Executors on the engines clusters run: SLURM through submitit, and Ray.

Both are optional extras (``pip install "llome-jax[slurm]"``, ``"llome-jax[ray]"``), imported
only when used. Like the local ones (:mod:`llome_jax.sweep.local`), an executor's
``run(tasks, plan)`` yields one :class:`~llome_jax.sweep.tasks.TaskResult` per task as each ends
and never raises for a task's failure: a process that died comes back as a ``failed`` result
with the engine's message and the end of the task's log.

On a real SLURM cluster a group of runs larger than the cluster's ``MaxArraySize`` is submitted
as several arrays (:func:`max_array_size`, :func:`array_chunks`), and a job that died is seen
through ``scontrol`` (:func:`job_states`), so that a cluster without accounting (no ``sacct``)
still reports it, with its node, state and exit code in ``failures.jsonl``.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import os
import pathlib
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from llome_jax.host import threads as host_threads
from llome_jax.sweep.cluster_settings import (
    MEMORY_KEYS,
    check_max_minutes,
    check_time_cap,
    slurm_options,
)
from llome_jax.sweep.local import died
from llome_jax.sweep.plans import Resources, SweepPlan
from llome_jax.sweep.tasks import Task, TaskResult, run_task

__all__ = [
    "DEFAULT_MAX_ARRAY_SIZE",
    "JobState",
    "RayExecutor",
    "SubmititExecutor",
    "array_chunks",
    "job_states",
    "max_array_size",
    "parse_job_states",
    "require",
]

#: SLURM's own default ``MaxArraySize``: what :func:`max_array_size` assumes when it cannot ask
DEFAULT_MAX_ARRAY_SIZE = 1001
#: the states of a SLURM job that has ended (``scontrol``'s spelling)
ENDED_STATES = frozenset(
    (
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "TIMEOUT",
    )
)

T = TypeVar("T")


def require(module: str, extra: str) -> Any:
    """``import module``, or an ``ImportError`` naming the extra that installs it."""
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


def max_array_size(config: str | None = None) -> int:
    """The cluster's ``MaxArraySize`` (the largest array task index + 1), read from ``config``
    (the text of ``scontrol show config``; default: run it), or
    :data:`DEFAULT_MAX_ARRAY_SIZE` when ``scontrol`` is missing, fails or prints no integer
    value."""
    if config is None:
        if shutil.which("scontrol") is None:
            return DEFAULT_MAX_ARRAY_SIZE
        try:
            config = subprocess.run(
                ["scontrol", "show", "config"], capture_output=True, text=True, timeout=30
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return DEFAULT_MAX_ARRAY_SIZE
    found = re.search(r"^\s*MaxArraySize\s*=\s*(\d+)\s*$", config, re.MULTILINE)
    return int(found.group(1)) if found else DEFAULT_MAX_ARRAY_SIZE


def array_chunks(items: Sequence[T], max_size: int) -> list[list[T]]:
    """``items`` in order, in consecutive chunks of ``n = max(1, max_size - 1)`` (the last one
    shorter): ``len(items) = N`` gives ``ceil(N / n)`` arrays, each with task indices
    ``0..len(chunk) - 1`` below ``max_size``. ``max_size`` 0 (arrays off) or 1 gives one task
    a chunk, which submitit submits as a plain job."""
    size = max(1, int(max_size) - 1)
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


@dataclasses.dataclass(frozen=True)
class JobState:
    """A SLURM job as ``scontrol show job`` reports it: its ``state`` (``RUNNING``,
    ``FAILED``, ...), ``exit_code`` (``status:signal``, e.g. ``137:0``) and ``node`` (its batch
    host, else its node list)."""

    state: str
    exit_code: str = ""
    node: str = ""

    @property
    def ended(self) -> bool:
        """Whether the job has ended (:data:`ENDED_STATES`)."""
        return self.state in ENDED_STATES


def parse_job_states(text: str) -> dict[str, JobState]:
    """``scontrol -o show job`` output (one job a line) as ``{job id: JobState}``, an array
    task under ``<array id>_<task index>`` as submitit names it (pending tasks still grouped in
    one record, ``ArrayTaskId=3-6``, are left out), any other job under its ``JobId``."""
    found = {}
    for line in text.splitlines():
        fields = dict(item.partition("=")[::2] for item in line.split() if "=" in item)
        if "JobId" not in fields or "JobState" not in fields:
            continue
        array, index = fields.get("ArrayJobId", ""), fields.get("ArrayTaskId", "")
        if array and not index.isdigit():
            continue
        node = fields.get("BatchHost", "")
        if node in ("", "(null)"):
            node = fields.get("NodeList", "")
        node = "" if node == "(null)" else node
        name = f"{array}_{index}" if array else fields["JobId"]
        found[name] = JobState(fields["JobState"], fields.get("ExitCode", ""), node)
    return found


def job_states(ids: Iterable[str]) -> dict[str, JobState]:
    """The states of SLURM jobs and arrays ``ids`` (``123`` or ``123_4``: the whole array
    ``123``), one ``scontrol -o show job`` each (:func:`parse_job_states`); an id ``scontrol``
    no longer knows (``MinJobAge`` after its end) or cannot be asked about is left out."""
    found: dict[str, JobState] = {}
    for job in sorted({str(i).split("_")[0] for i in ids}):
        try:
            text = subprocess.run(
                ["scontrol", "-o", "show", "job", job], capture_output=True, text=True, timeout=30
            ).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        found.update(parse_job_states(text))
    return found


class SubmititExecutor:
    """SLURM through submitit: one job array per group of runs that ask for the same resources
    and time limit, each run one array task, with ``--cpus-per-task``, ``--gpus-per-node``,
    ``--mem`` from the plan (:meth:`SweepPlan.resources_for`) and ``--time`` from its cost
    estimate times ``margin`` (:meth:`SweepPlan.time_limit_minutes`).

    ``cluster="local"`` runs the same jobs with submitit's local executor on this machine (for
    tests and trying a plan), at most ``parallelism`` at a time (default one per usable core);
    on SLURM ``parallelism`` is the array's ``%`` limit. ``slurm`` holds more ``sbatch`` options
    (``partition``, ``account``, ``qos``, ``constraint``, ``setup`` lines, a mapping of
    ``additional_parameters``, ``exclusive``, ``mem_per_gpu``, ... as submitit's
    ``slurm_<name>`` parameters, checked by
    :func:`~llome_jax.sweep.cluster_settings.slurm_options`); ``slurm={"time": N}`` makes every
    run's time limit ``N`` minutes. ``max_minutes`` caps each run's time limit and refuses,
    before submitting, runs whose estimate alone is longer
    (:func:`~llome_jax.sweep.cluster_settings.check_time_cap`). Jobs are polled every ``poll``
    seconds (default 5, 0.5 on the local cluster); this process must stay up until they end
    (run it in tmux, or as a one-core job itself).

    On SLURM a group is submitted in arrays of at most ``max_array_size - 1`` tasks
    (:func:`array_chunks`; default: the cluster's :func:`max_array_size`, read once; also
    ``slurm={"max_array_size": N}``, the command line's ``--slurm max_array_size=N``), each with
    its own ``%`` limit. ``python`` is the interpreter a job runs (default: this one,
    ``sys.executable``).
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
        max_array_size: int | None = None,
        python: str | None = None,
        max_minutes: int | None = None,
    ) -> None:
        if cluster not in ("slurm", "local"):
            raise ValueError(f"cluster must be slurm or local, got {cluster!r}")
        self.folder = pathlib.Path(folder)
        self.cluster = cluster
        self.margin = float(margin)
        self.min_minutes = int(min_minutes)
        self.parallelism = parallelism
        self.slurm = slurm_options(dict(slurm or {}), "slurm")
        given = self.slurm.pop("max_array_size", None)
        given = given if max_array_size is None else None
        self.fixed_minutes: int | None = self.slurm.pop("time", None)
        self.max_minutes = check_max_minutes(max_minutes, self.fixed_minutes)
        self.max_array_size = max_array_size if given is None else _whole(given)
        self.python = python
        self.poll = float(poll if poll is not None else (0.5 if cluster == "local" else 5.0))

    def minutes(self, name: str, plan: SweepPlan) -> int:
        """The time limit of the run ``name``: ``slurm={"time": N}``'s ``N``, else its
        estimate times ``margin``, at least ``min_minutes``, at most ``max_minutes``."""
        if self.fixed_minutes is not None:
            return self.fixed_minutes
        return plan.time_limit_minutes(name, self.margin, self.min_minutes, self.max_minutes)

    def check(self, names: Sequence[str], plan: SweepPlan) -> None:
        """Refuse runs whose estimate is longer than ``max_minutes`` (:func:`check_time_cap`).

        Raises:
          UsageError: one line naming them (nothing submitted).
        """
        check_time_cap({name: plan.seconds(name) for name in names}, self.max_minutes)

    def parameters(self, resources: Resources, minutes: int, count: int) -> dict[str, Any]:
        """The submitit parameters of one array (``count`` tasks); no ``mem_gb`` (``--mem``)
        without a memory in ``resources`` or with ``mem_per_gpu`` or ``mem_per_cpu``."""
        params: dict[str, Any] = {
            "name": "llome-jax",
            "timeout_min": int(minutes),
            "cpus_per_task": int(resources.cpus),
            "gpus_per_node": int(resources.gpus),
            "nodes": 1,
            "tasks_per_node": 1,
        }
        if resources.mem_gb is not None and not any(k in self.slurm for k in MEMORY_KEYS):
            params["mem_gb"] = float(resources.mem_gb)
        if self.parallelism:
            params["slurm_array_parallelism"] = min(int(self.parallelism), count)
        params.update({f"slurm_{k}": v for k, v in self.slurm.items()})
        return params

    def groups(self, tasks: Sequence[Task], plan: SweepPlan) -> list[tuple[dict, list[Task]]]:
        """``(parameters, tasks)`` per array: tasks that ask alike share one."""
        found: dict[tuple, list[Task]] = collections.defaultdict(list)
        for task in tasks:
            minutes = self.minutes(task.name, plan)
            found[(plan.resources_for(task.name), minutes)].append(task)
        return [
            (self.parameters(resources, minutes, len(group)), group)
            for (resources, minutes), group in found.items()
        ]

    def arrays(self, tasks: Sequence[Task], plan: SweepPlan) -> list[tuple[dict, list[Task]]]:
        """``(parameters, tasks)`` per array submitted: each of :meth:`groups` in chunks of
        at most ``max_array_size - 1`` (:func:`array_chunks`), each chunk's ``%`` limit at most
        its length."""
        if self.max_array_size is None:
            self.max_array_size = max_array_size()
        found = []
        for params, group in self.groups(tasks, plan):
            for chunk in array_chunks(group, self.max_array_size):
                limit = params.get("slurm_array_parallelism")
                given = {"slurm_array_parallelism": min(limit, len(chunk))} if limit else {}
                found.append(({**params, **given}, chunk))
        return found

    def run(self, tasks: Sequence[Task], plan: SweepPlan) -> Iterator[TaskResult]:
        submitit = require("submitit", "slurm")
        self.check([task.name for task in tasks], plan)
        self.folder.mkdir(parents=True, exist_ok=True)
        folder = str(self.folder / "%j")
        if self.cluster == "local":
            yield from self._run_local(submitit, folder, tasks, plan)
            return
        options = {} if self.python is None else {"slurm_python": self.python}
        running: dict[Any, Task] = {}
        arrays = self.arrays(tasks, plan)
        for count, (params, chunk) in enumerate(arrays, start=1):
            executor = submitit.AutoExecutor(folder=folder, cluster="slurm", **options)
            executor.update_parameters(**params)
            jobs = executor.map_array(run_task, chunk)
            part = f" ({count} of {len(arrays)}, MaxArraySize {self.max_array_size})"
            print(
                f"submitted array {jobs[0].job_id.split('_')[0]} of {len(chunk)} run(s)"
                f"{part if len(arrays) > 1 else ''}: {params['cpus_per_task']} CPU, "
                f"{params['gpus_per_node']} GPU, {params['timeout_min']} min each",
                flush=True,
            )
            running.update(zip(jobs, chunk))
        yield from self._wait(running)

    def _run_local(
        self, submitit: Any, folder: str, tasks: Sequence[Task], plan: SweepPlan
    ) -> Iterator[TaskResult]:
        """submitit's local executor, at most ``parallelism`` jobs at a time."""
        limit = int(self.parallelism or host_threads.usable_cores())
        pending = collections.deque(tasks)
        running: dict[Any, Task] = {}
        while pending or running:
            while pending and len(running) < limit:
                task = pending.popleft()
                minutes = self.minutes(task.name, plan)
                params = self.parameters(plan.resources_for(task.name), minutes, 1)
                options = {} if self.python is None else {"local_python": self.python}
                executor = submitit.AutoExecutor(folder=folder, cluster="local", **options)
                executor.update_parameters(**params)
                running[executor.submit(run_task, task)] = task
            yield from self._wait(running, first_only=True)

    def _wait(self, running: dict[Any, Task], first_only: bool = False) -> Iterator[TaskResult]:
        """Results of ``running`` jobs as they end (removed from it); with ``first_only``, back
        after the first batch that ends. On SLURM a job also ends when ``scontrol`` says so
        (:func:`job_states`): submitit asks ``sacct``, which a cluster without accounting
        lacks."""
        while running:
            states: dict[str, JobState] = {}
            ended = [job for job in running if job.done()]
            if not ended and self.cluster == "slurm":
                states = job_states(job.job_id for job in running)
                ended = [job for job in running if _ended(states, job.job_id)]
            if not ended:
                time.sleep(self.poll)
                continue
            for job in ended:
                task = running.pop(job)
                result = self._result(job, task, states.get(job.job_id))
                if self.cluster == "slurm":
                    if not result.ok and job.job_id not in states:
                        states.update(job_states([job.job_id]))
                    result = _with_job(result, job, states)
                yield result
            if first_only:
                return

    @staticmethod
    def _result(job: Any, task: Task, state: JobState | None = None) -> TaskResult:
        """The task's result from its job (``state``: the job's when it ended without one)."""
        if state is not None and state.state != "COMPLETED" and not _has_result(job):
            how = (
                f"the job ended {state.state} with exit code {state.exit_code} on "
                f"{state.node or 'an unknown node'} before returning a result (job {job.job_id})"
            )
            result = died(task, how)
            errors = "\n".join((_text(job.stderr) or "").splitlines()[-10:])
            return dataclasses.replace(result, traceback=f"{errors}\n{result.traceback}".strip())
        try:
            found = job.result()
        except Exception as error:  # the job died (killed, time limit, node failure)
            result = died(task, f"{_error_line(error)} (job {job.job_id})")
            text = str(error).strip()
            return dataclasses.replace(result, traceback=f"{text}\n{result.traceback}".strip())
        if isinstance(found, TaskResult):
            return found
        return died(task, f"job {job.job_id} returned {found!r}")


def _whole(value: Any) -> int:
    """``value`` as a non-negative integer (``--slurm max_array_size=N`` gives a string).

    Raises:
      ValueError: anything else, in one line.
    """
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if number < 0 or isinstance(value, bool):
        raise ValueError(f"max_array_size must be a non-negative integer, got {value!r}")
    return number


def _ended(states: Mapping[str, JobState], job_id: str) -> bool:
    state = states.get(job_id)
    return state is not None and state.ended


def _has_result(job: Any) -> bool:
    """Whether submitit's result file of ``job`` exists."""
    try:
        return bool(job.paths.result_pickle.exists())
    except (AttributeError, OSError):
        return False


def _text(read: Any) -> str:
    """``read()`` (a submitit log), or empty when it cannot be read."""
    try:
        return read() or ""
    except (OSError, ValueError, AttributeError):
        return ""


def _with_job(result: TaskResult, job: Any, states: Mapping[str, JobState]) -> TaskResult:
    """``result`` with its SLURM job id and, when the job ended without a result, the job's
    state and exit code, and its node as the host when the task did not say."""
    state = states.get(job.job_id)
    if result.ok or state is None or not state.ended:
        return dataclasses.replace(result, job_id=str(job.job_id))
    return dataclasses.replace(
        result,
        job_id=str(job.job_id),
        job_state=state.state,
        exit_code=state.exit_code,
        host=result.host or state.node,
    )


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
            import ray  # lazy: an optional dependency (the ray extra)

            ray.shutdown()
            self._started = False
