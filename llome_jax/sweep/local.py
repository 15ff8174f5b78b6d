"""Executors on this machine: ``inline`` (this process, one task after another: the paper
driver's own path) and ``local`` (a fresh Python process per task, one per core, with
``CUDA_VISIBLE_DEVICES`` per GPU: :mod:`llome_jax.sweep.child`, so a script that calls
``run_sweep`` needs no ``if __name__ == "__main__":`` guard).

An executor's ``run(tasks, plan)`` yields one :class:`~llome_jax.sweep.tasks.TaskResult` per
task as each ends, in any order; it never raises for a task's failure.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import pathlib
import pickle
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from llome_jax.host import threads as host_threads
from llome_jax.sweep.plans import SweepPlan
from llome_jax.sweep.tasks import (
    Task,
    TaskResult,
    log_path,
    logged_process,
    now,
    run_task,
    slug,
)

__all__ = ["InlineExecutor", "LocalExecutor", "as_queue", "died", "log_tail", "visible_gpus"]


def log_tail(task: Task, lines: int = 40) -> str:
    """The last ``lines`` lines of a task's log (empty when it wrote none)."""
    try:
        text = log_path(task.out, task.name, task.attempt).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def died(
    task: Task,
    how: str,
    seconds: float = 0.0,
    started: str = "",
    ended: str = "",
    process: tuple[str, int] = ("", 0),
) -> TaskResult:
    """The result of a task whose process ended without one (``how``: what the engine said),
    with the end of its log as the traceback, the host and PID its log's start line names
    (:func:`~llome_jax.sweep.tasks.logged_process`; else ``process``, what the engine knows),
    and ``seconds`` / ``started`` / ``ended`` as the engine saw them (the process's or the
    job's run time)."""
    try:  # the whole log: a requeued attempt appends its own start line
        text = log_path(task.out, task.name, task.attempt).read_text(errors="replace")
    except OSError:
        text = ""
    host, pid = logged_process(text)
    host, pid = (host, pid) if pid else process
    return TaskResult(
        name=task.name,
        attempt=task.attempt,
        status="failed",
        seconds=seconds,
        error=how,
        traceback=log_tail(task),
        host=host,
        pid=pid,
        started=started,
        ended=ended,
    )


class InlineExecutor:
    """Every task in this process, one after another (what ``llome-jax paper`` does): its
    output stays on this terminal, and one compilation cache serves them all."""

    name = "inline"
    #: takes tasks added to ``run``'s deque while it runs (a failed run's retry, at once)
    live = True

    def run(self, tasks: Sequence[Task], plan: SweepPlan) -> Iterator[TaskResult]:
        pending = as_queue(tasks)
        while pending:
            yield run_task(dataclasses.replace(pending.popleft(), log_to_file=False))


def as_queue(tasks: Sequence[Task]) -> collections.deque[Task]:
    """``tasks`` itself when it is a deque (the driver appends a failed run's retry to it while
    the executor runs: executors with ``live = True`` take it at their next free slot), else a
    deque of them."""
    return tasks if isinstance(tasks, collections.deque) else collections.deque(tasks)


def visible_gpus() -> list[str]:
    """This machine's GPUs as ``CUDA_VISIBLE_DEVICES`` names: those it lists, else one per
    ``/dev/nvidia<k>`` device (none on a machine without NVIDIA GPUs)."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [g.strip() for g in given.split(",") if g.strip() and g.strip() != "-1"]
    found = sorted(
        int(p.name[6:]) for p in pathlib.Path("/dev").glob("nvidia*") if p.name[6:].isdigit()
    )
    return [str(k) for k in found]


@dataclasses.dataclass
class _Running:
    task: Task
    process: Any
    result: pathlib.Path
    cores: list[int]
    gpus: list[str]
    started: float
    wall: float


class LocalExecutor:
    """A pool of processes on this machine: each task in a fresh Python process
    (:mod:`llome_jax.sweep.child`: nothing of this process's JAX is inherited, a process's
    compiled programs go with it, and the caller's script is not run again), at most ``workers``
    at a time (default one per usable core). A task's output, from the interpreter's first
    line, goes to its log (:func:`~llome_jax.sweep.tasks.log_path`).

    Each task is pinned to as many free cores as it asks for (``cpus``) when the machine has
    enough for ``workers`` tasks, and gets ``CUDA_VISIBLE_DEVICES`` naming as many free GPUs
    as it asks for (``gpus``; an empty value for a CPU task on a machine with GPUs). A task
    that asks for more GPUs than the machine has fails at once, saying so.
    """

    name = "local"
    live = True

    def __init__(
        self,
        workers: int | None = None,
        gpus: Sequence[str] | None = None,
        cores: Sequence[int] | None = None,
    ) -> None:
        self.cores = list(host_threads.core_ids() if cores is None else cores)
        self.workers = int(workers or len(self.cores) or os.cpu_count() or 1)
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.gpus = list(visible_gpus() if gpus is None else gpus)

    def run(self, tasks: Sequence[Task], plan: SweepPlan) -> Iterator[TaskResult]:
        pending = as_queue(tasks)
        running: dict[Any, _Running] = {}
        free_cores = list(self.cores)
        free_gpus = list(self.gpus)
        pin = len(self.cores) >= self.workers
        try:
            while pending or running:
                while pending and len(running) < self.workers:
                    task = pending[0]
                    need = plan.resources_for(task.name)
                    if need.gpus > len(self.gpus):
                        pending.popleft()
                        yield died(
                            task,
                            f"it asks for {need.gpus} GPU(s); this machine has {len(self.gpus)}",
                        )
                        continue
                    ncores = min(max(1, need.cpus), len(self.cores)) if pin else 0
                    if need.gpus > len(free_gpus) or ncores > len(free_cores):
                        if not running:  # cannot happen with enough resources; be safe
                            raise RuntimeError(f"{task.name} cannot be started")
                        break
                    pending.popleft()
                    cores = [free_cores.pop(0) for _ in range(ncores)]
                    gpus = [free_gpus.pop(0) for _ in range(need.gpus)]
                    job = self._start(task, cores, gpus)
                    running[job.process.pid] = job
                if not running:
                    continue
                for pid in _ended(running):
                    job = running.pop(pid)
                    free_cores += job.cores
                    free_gpus += job.gpus
                    yield self._collect(job)
        finally:
            for job in running.values():  # the driver stopped: the tasks stop at a round's end
                job.process.terminate()
            for job in running.values():
                job.process.wait()

    def _start(self, task: Task, cores: list[int], gpus: list[str]) -> _Running:
        env = {}
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        task = dataclasses.replace(task.with_env(**env), cores=tuple(cores))
        folder = pathlib.Path(task.out) / "sweep" / "results"
        folder.mkdir(parents=True, exist_ok=True)
        result = folder / f"{slug(task.name)}.{task.attempt}.pickle"
        result.unlink(missing_ok=True)
        handed = result.with_suffix(".task")
        with open(handed, "wb") as stream:
            pickle.dump(task, stream)
        env = dict(os.environ)  # the child finds what this process imports (a plan's factory)
        env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
        log = log_path(task.out, task.name, task.attempt)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as stream:  # import errors too, before run_task redirects
            process = subprocess.Popen(
                [sys.executable, "-m", "llome_jax.sweep.child", str(handed), str(result)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=stream,
                stderr=subprocess.STDOUT,
            )
        return _Running(task, process, result, cores, gpus, time.perf_counter(), time.time())

    @staticmethod
    def _collect(job: _Running) -> TaskResult:
        seconds = time.perf_counter() - job.started
        try:
            with open(job.result, "rb") as stream:
                found = pickle.load(stream)
            job.result.unlink()
            return found
        except (OSError, EOFError, pickle.UnpicklingError):
            code = job.process.returncode
            how = f"the process exited with status {code} before returning a result"
            if code is not None and code < 0:
                try:
                    name = signal.Signals(-code).name
                except ValueError:
                    name = f"signal {-code}"
                how = f"the process was killed by {name}"
            process = (socket.gethostname(), job.process.pid)
            return died(job.task, how, seconds, now(job.wall), now(), process)
        finally:
            job.result.with_suffix(".task").unlink(missing_ok=True)


def _ended(running: dict[int, _Running], poll: float = 0.1) -> list[int]:
    """The PIDs of ``running`` whose process has ended (reaped), once at least one has."""
    while True:
        done = [pid for pid, job in running.items() if job.process.poll() is not None]
        if done:
            return done
        time.sleep(poll)
