"""Executors on the engines clusters run: SLURM through submitit, and Ray.

Both are optional extras (``pip install "llome-jax[slurm]"``, ``"llome-jax[ray]"``), imported
only when used. Like the local ones (:mod:`llome_jax.sweep.local`), an executor's
``run(tasks, plan)`` yields one :class:`~llome_jax.sweep.tasks.TaskResult` per task as each ends
and never raises for a task's failure: a process that died comes back as a ``failed`` result
with the engine's message and the end of the task's log.

On a real SLURM cluster a group of runs larger than the cluster's ``MaxArraySize`` is submitted
as several arrays (:func:`max_array_size`, :func:`array_chunks`), and a job that died is seen
through ``scontrol`` (:func:`job_states`), so that a cluster without accounting (no ``sacct``)
still reports it, with its node, state, exit code and run time in ``failures.jsonl``. Every job
runs :class:`~llome_jax.sweep.requeue.SubmititTask`, so a time limit or a preemption stops the
run at a round boundary and submitit requeues it (:mod:`llome_jax.sweep.requeue`); a run whose
job still timed out is retried with twice the time limit, up to ``max_minutes``
(:meth:`SubmititExecutor.retry`). A restarted driver re-attaches to the jobs it recorded
(:meth:`SubmititExecutor.attach`).
"""

from __future__ import annotations

import collections
import dataclasses
import importlib.util
import math
import os
import pathlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from llome_jax.host import threads as host_threads
from llome_jax.sweep.cluster_settings import (
    MEMORY_KEYS,
    check_max_minutes,
    check_time_cap,
    slurm_options,
)
from llome_jax.sweep.local import as_queue, died
from llome_jax.sweep.plans import Resources, SweepPlan, finished
from llome_jax.sweep.requeue import SubmititTask
from llome_jax.sweep.scontrol import (
    DEFAULT_MAX_ARRAY_SIZE,
    JobState,
    array_chunks,
    job_states,
    max_array_size,
    parse_job_states,
)
from llome_jax.sweep.tasks import Task, TaskResult, now, run_task

#: what one job runs: a task, or a pack of tasks run one after another (``pack``)
Item = Task | tuple[Task, ...]

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
    "require_installed",
]


def require(module: str, extra: str) -> Any:
    """``import module``, or an ``ImportError`` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(
            f'this executor needs {module}: pip install "llome-jax[{extra}]"'
        ) from None


EXTRAS = {"slurm": ("submitit", "slurm"), "ray": ("ray", "ray")}
"""Per executor name, the module it needs and the extra that installs it."""


def require_installed(executor: str) -> None:
    """A one-line ``ValueError`` naming the extra when ``executor``'s engine (:data:`EXTRAS`)
    is not installed; found without importing it."""
    if executor in EXTRAS:
        module, extra = EXTRAS[executor]
        if importlib.util.find_spec(module) is None:
            raise ValueError(
                f'--executor {executor} needs {module}: pip install "llome-jax[{extra}]"'
            )


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
    (``partition``, ``account``, ``qos``, ``constraint``, ``setup`` lines, a mapping of
    ``additional_parameters``, ``exclusive``, ``mem_per_gpu``, ... as submitit's
    ``slurm_<name>`` parameters, checked by
    :func:`~llome_jax.sweep.cluster_settings.slurm_options`); ``slurm={"time": N}`` makes every
    run's time limit ``N`` minutes. ``max_minutes`` caps each run's time limit and refuses,
    before submitting, runs whose estimate alone is longer
    (:func:`~llome_jax.sweep.cluster_settings.check_time_cap`). Jobs are polled every ``poll``
    seconds (default 5, 0.5 on the local cluster); the driver may go away and come back
    (:meth:`attach`).

    Time limits and preemption (:mod:`llome_jax.sweep.requeue`): each job is warned
    ``signal_delay_s`` seconds before its limit (default: twice a round's estimated seconds,
    at least 90 and at most half the limit; ``slurm={"signal_delay_s": N}`` sets it), stops
    after the round in progress and is requeued by submitit, at most ``max_num_timeout`` times
    for time limits (``slurm={"max_num_timeout": N}``, default 3).

    On SLURM a group is submitted in arrays of at most ``max_array_size - 1`` tasks
    (:func:`array_chunks`; default: the cluster's :func:`max_array_size`, read once; also
    ``slurm={"max_array_size": N}``, the command line's ``--slurm max_array_size=N``), each with
    its own ``%`` limit. ``python`` is the interpreter a job runs (default: this one,
    ``sys.executable``). ``on_submit(task, job_id)``, when set, is called for each job submitted.
    """

    name = "slurm"
    #: takes tasks added to ``run``'s deque while it runs (a failed run's retry, at once)
    live = True

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
        self.signal_delay: int | None = self.slurm.pop("signal_delay_s", None)
        self.max_num_timeout = int(self.slurm.pop("max_num_timeout", 3))
        self.pack = max(1, int(self.slurm.pop("pack", 1)))
        jobs = self.slurm.pop("max_jobs", None)
        self.max_jobs: int | None = None if jobs is None else max(1, int(jobs))
        planned = self.slurm.pop("max_minutes", None)
        max_minutes = planned if max_minutes is None else max_minutes
        self.max_minutes = check_max_minutes(max_minutes, self.fixed_minutes)
        self.max_array_size = max_array_size if given is None else _whole(given)
        self.python = python
        self.poll = float(poll if poll is not None else (0.5 if cluster == "local" else 5.0))
        self.on_submit: Any = None
        self._attached: dict[str, tuple[Any, Item]] = {}  # job id -> (job, its task or pack)
        self._leaving: set[str] = set()  # ended jobs SLURM may still list (max_jobs)

    def minutes(self, name: str, plan: SweepPlan, task: Task | None = None) -> int:
        """The time limit of the run ``name``: a retry's own (``task.minutes``), else
        ``slurm={"time": N}``'s ``N``, else its estimate times ``margin``, at least
        ``min_minutes``, at most ``max_minutes``."""
        if task is not None and task.minutes is not None:
            return int(task.minutes)
        if self.fixed_minutes is not None:
            return self.fixed_minutes
        return plan.time_limit_minutes(name, self.margin, self.min_minutes, self.max_minutes)

    def signal_delay_s(self, name: str, plan: SweepPlan, minutes: int) -> int:
        """Seconds between SLURM's SIGUSR2 and the time limit: ``slurm={"signal_delay_s": N}``,
        else ``margin`` times a round's estimate (:meth:`SweepPlan.round_seconds`), at least 90
        (submitit's default) and at most half of ``minutes``."""
        if self.signal_delay is not None:
            return int(self.signal_delay)
        wanted = max(90, math.ceil(self.margin * plan.round_seconds(name)))
        return int(max(1, min(wanted, minutes * 30)))

    def check(self, names: Sequence[str], plan: SweepPlan) -> None:
        """Refuse runs whose estimate is longer than ``max_minutes`` (:func:`check_time_cap`).

        Raises:
          UsageError: one line naming them (nothing submitted).
        """
        check_time_cap({name: plan.seconds(name) for name in names}, self.max_minutes)

    def retry(self, task: Task, result: TaskResult, plan: SweepPlan) -> Task:
        """The next attempt of a failed ``task``: after a time limit (the job ended
        ``TIMEOUT``, or submitit gave up requeuing it) with twice its time limit, at most
        ``max_minutes``; otherwise as it was. The driver numbers the attempt."""
        timed_out = result.job_state == "TIMEOUT" or "timed-out" in result.error
        if not timed_out or self.fixed_minutes is not None:
            return task
        longer = 2 * self.minutes(task.name, plan, task)
        if self.max_minutes is not None:
            longer = min(longer, int(self.max_minutes))
        return dataclasses.replace(task, minutes=longer)

    @property
    def attachable(self) -> bool:
        """Whether a restarted driver can watch jobs an earlier one submitted (on SLURM; a
        local cluster's jobs end with the driver that started them)."""
        return self.cluster == "slurm"

    def attach(self, task: Task, job_id: str) -> str | None:
        """Watch the job ``job_id``, submitted by an earlier driver, as ``task``'s: :meth:`run`
        yields its result as if it had submitted it. Returns the job's state (``PENDING``,
        ``RUNNING``, ..., or ``ended`` when only its result file is left), or ``None`` when
        neither SLURM nor a result file knows the job (nothing to watch)."""
        submitit = require("submitit", "slurm")
        job = submitit.SlurmJob(folder=str(self.folder / "%j"), job_id=str(job_id))
        state = job_states([str(job_id)]).get(str(job_id))
        if state is None and not _has_result(job):
            return None
        if str(job_id) in self._attached:  # a pack: one job, several runs
            job, item = self._attached[str(job_id)]
            task = (*(item if isinstance(item, tuple) else (item,)), task)
        self._attached[str(job_id)] = (job, task)
        return "ended" if state is None else state.state

    def parameters(
        self, resources: Resources, minutes: int, count: int, signal_delay: int | None = None
    ) -> dict[str, Any]:
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
        if signal_delay is not None:
            params["slurm_signal_delay_s"] = int(signal_delay)  # (submitit-local warns 30 s early)
        params.update({f"slurm_{k}": v for k, v in self.slurm.items()})
        return params

    def groups(self, tasks: Sequence[Task], plan: SweepPlan) -> list[tuple[dict, list[Task]]]:
        """``(parameters, tasks)`` per array: tasks that ask alike share one."""
        found: dict[tuple, list[Task]] = collections.defaultdict(list)
        for task in tasks:
            minutes = self.minutes(task.name, plan, task)
            delay = self.signal_delay_s(task.name, plan, minutes)
            found[(plan.resources_for(task.name), minutes, delay)].append(task)
        return [
            (self.parameters(resources, minutes, len(group), delay), group)
            for (resources, minutes, delay), group in found.items()
        ]

    def arrays(self, tasks: Sequence[Task], plan: SweepPlan) -> list[tuple[dict, list[Item]]]:
        """``(parameters, items)`` per array submitted: each of :meth:`groups` in chunks of
        at most ``max_array_size - 1`` (:func:`array_chunks`), each chunk's ``%`` limit at most
        its length. With ``pack`` K > 1 an item is a tuple of up to K runs of the group, run
        one after another in one job whose time limit is theirs added (K at most
        ``max_minutes`` over a run's limit)."""
        if self.max_array_size is None:
            self.max_array_size = max_array_size()
        found = []
        for params, group in self.groups(tasks, plan):
            items: list[Item] = list(group)
            if self.pack > 1:
                minutes = int(params["timeout_min"])
                size = self.pack
                if self.max_minutes is not None:
                    size = max(1, min(size, self.max_minutes // max(1, minutes)))
                items = [tuple(group[k : k + size]) for k in range(0, len(group), size)]
                params = {**params, "timeout_min": minutes * size}
            for chunk in array_chunks(items, self.max_array_size):
                limit = params.get("slurm_array_parallelism")
                given = {"slurm_array_parallelism": min(limit, len(chunk))} if limit else {}
                found.append(({**params, **given}, chunk))
        return found

    def run(self, tasks: Sequence[Task], plan: SweepPlan) -> Iterator[TaskResult]:
        submitit = require("submitit", "slurm")
        pending = as_queue(tasks)
        self.check([task.name for task in pending], plan)
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.cluster == "local":
            yield from self._run_local(submitit, pending, plan)
            return
        running: dict[Any, Item] = dict(self._attached.values())
        self._attached.clear()
        running.update(self._submit_arrays(submitit, pending, plan, self._room(running)))
        while running or pending:
            if running:
                yield from self._wait(running, first_only=True)
            room = self._room(running)  # retries at once, then what max_jobs held back
            if room == 0 and not running:
                time.sleep(self.poll)  # ended jobs SLURM still lists (COMPLETING)
            running.update(self._submit_arrays(submitit, pending, plan, room))

    def _room(self, running: Mapping[Any, Item]) -> int | None:
        """How many more jobs may be submitted now (``None``: no limit): ``max_jobs`` less
        those queued or running, counting a job whose result is in but that SLURM still lists
        (``COMPLETING``), as its ``MaxSubmitJobs`` does."""
        if self.max_jobs is None:
            return None
        states = job_states(self._leaving) if self._leaving else {}
        self._leaving = {i for i in self._leaving if i in states and not states[i].ended}
        return max(0, self.max_jobs - len(running) - len(self._leaving))

    def _submit_arrays(
        self,
        submitit: Any,
        pending: collections.deque[Task],
        plan: SweepPlan,
        room: int | None = None,
    ) -> dict[Any, Item]:
        """Submit the tasks of ``pending`` for the first ``room`` jobs (``None``: all of them;
        ``pack`` tasks a job), taken off it, as arrays (:meth:`arrays`): ``{job: task or
        pack}``."""
        taken = len(pending) if room is None else min(room * self.pack, len(pending))
        tasks = [pending.popleft() for _ in range(taken)]
        arrays = self.arrays(tasks, plan) if tasks else []
        if room is not None:  # packs of several groups: at most ``room`` jobs, the rest back
            kept, back = [], []
            for params, chunk in arrays:
                head = chunk[: max(0, room - sum(len(c) for _, c in kept))]
                if head:
                    kept.append((params, head))
                for item in chunk[len(head) :]:
                    back += item if isinstance(item, tuple) else [item]
            arrays = kept
            pending.extendleft(reversed(back))
        options = {"slurm_max_num_timeout": self.max_num_timeout}
        if self.python is not None:
            options["slurm_python"] = self.python
        submitted: dict[Any, Item] = {}
        for count, (params, chunk) in enumerate(arrays, start=1):
            executor = submitit.AutoExecutor(
                folder=str(self.folder / "%j"), cluster="slurm", **options
            )
            executor.update_parameters(**params)
            jobs = executor.map_array(SubmititTask(), chunk)
            part = f" ({count} of {len(arrays)}, MaxArraySize {self.max_array_size})"
            packed = [item for item in chunk if isinstance(item, tuple)]
            what = f"{len(chunk)} run(s)"
            if packed:
                runs = sum(map(len, packed))
                what = f"{len(chunk)} job(s) of up to {self.pack} run(s), {runs} run(s)"
            print(
                f"submitted array {jobs[0].job_id.split('_')[0]} of {what}"
                f"{part if len(arrays) > 1 else ''}: {params['cpus_per_task']} CPU, "
                f"{params['gpus_per_node']} GPU, {params['timeout_min']} min each",
                flush=True,
            )
            for job, item in zip(jobs, chunk):
                submitted[job] = item
                for task in item if isinstance(item, tuple) else (item,):
                    if self.on_submit is not None:
                        self.on_submit(task, str(job.job_id))
        return submitted

    def _run_local(
        self, submitit: Any, pending: collections.deque[Task], plan: SweepPlan
    ) -> Iterator[TaskResult]:
        """submitit's local executor, at most ``parallelism`` jobs at a time."""
        limit = int(self.parallelism or host_threads.usable_cores())
        running: dict[Any, Task] = {}
        options = {"local_max_num_timeout": self.max_num_timeout}
        if self.python is not None:
            options["local_python"] = self.python
        while pending or running:
            while pending and len(running) < limit:
                task = pending.popleft()
                minutes = self.minutes(task.name, plan, task)
                delay = self.signal_delay_s(task.name, plan, minutes)
                params = self.parameters(plan.resources_for(task.name), minutes, 1, delay)
                executor = submitit.AutoExecutor(
                    folder=str(self.folder / "%j"), cluster="local", **options
                )
                executor.update_parameters(**params)
                job = executor.submit(SubmititTask(), task)
                running[job] = task
                if self.on_submit is not None:
                    self.on_submit(task, str(job.job_id))
            yield from self._wait(running, first_only=True)

    def _wait(self, running: dict[Any, Item], first_only: bool = False) -> Iterator[TaskResult]:
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
                item = running.pop(job)
                if self.max_jobs is not None:
                    self._leaving.add(str(job.job_id))
                for result in self._results(job, item, states.get(job.job_id)):
                    if self.cluster == "slurm":
                        if not result.ok and job.job_id not in states:
                            states.update(job_states([job.job_id]))
                        result = _with_job(result, job, states)
                    yield result
            if first_only:
                return

    @classmethod
    def _results(cls, job: Any, item: Item, state: JobState | None = None) -> list[TaskResult]:
        """The results of a job's task, or of each run of its pack: the job's list; when the
        job ended without one, a run of the pack that finished is ``done`` and the others
        failed as the job did."""
        if not isinstance(item, tuple):
            return [cls._result(job, item, state)]
        try:
            found = job.result() if _has_result(job) else None
        except Exception:  # the job died: each run as its run directory says
            found = None
        if isinstance(found, list) and len(found) == len(item):
            return found
        results = []
        for task in item:
            if finished(task.out, task.name):
                results.append(
                    TaskResult(task.name, task.attempt, "done", how="finished in its pack")
                )
            else:  # with the end of its own log
                results.append(cls._result(job, task, state))
        return results

    @staticmethod
    def _result(job: Any, task: Task, state: JobState | None = None) -> TaskResult:
        """The task's result from its job (``state``: the job's when it ended without one)."""
        if state is not None and state.state != "COMPLETED" and not _has_result(job):
            how = (
                f"the job ended {state.state} with exit code {state.exit_code} on "
                f"{state.node or 'an unknown node'} before returning a result (job {job.job_id})"
            )
            result = died(task, how, state.run_seconds, state.start, state.end)
            errors = "\n".join((_text(job.stderr) or "").splitlines()[-10:])
            return dataclasses.replace(result, traceback=f"{errors}\n{result.traceback}".strip())
        try:
            found = job.result()
        except Exception as error:  # the job died (killed, time limit, node failure)
            result = died(task, f"{_error_line(error)} (job {job.job_id})", ended=now())
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
    state, exit code and times, and its node as the host when the task did not say."""
    state = states.get(job.job_id)
    if result.ok or state is None or not state.ended:
        return dataclasses.replace(result, job_id=str(job.job_id))
    return dataclasses.replace(
        result,
        job_id=str(job.job_id),
        job_state=state.state,
        exit_code=state.exit_code,
        host=result.host or state.node,
        seconds=result.seconds or state.run_seconds,
        started=result.started or state.start,
        ended=result.ended or state.end,
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
    live = True

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
        pending = as_queue(tasks)
        running: dict[Any, Task] = {}
        try:
            while pending or running:
                while pending:  # every task at once (a retry too): Ray queues them
                    task = pending.popleft()
                    options = self.options(plan.resources_for(task.name))
                    running[remote.options(**options).remote(task)] = task
                ended, _ = ray.wait(list(running), num_returns=1)
                for ref in ended:
                    task = running.pop(ref)
                    try:
                        found = ray.get(ref)
                    except Exception as error:  # the worker died, or Ray could not run it
                        found = died(task, _error_line(error), ended=now())
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
