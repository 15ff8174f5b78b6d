"""One task of a sweep, as a worker process runs it: :func:`run_task`.

Every executor ships a :class:`Task` (picklable, no JAX inside) to a fresh process and gets a
:class:`TaskResult` back. :func:`run_task` sets the task's environment before JAX starts, sends
the task's output to ``OUT/sweep/logs/<run>.<attempt>.log``, gives the task its compilation cache
(:data:`CACHE_MODES`) and runs, resumes or skips its run directory with
:func:`llome_jax.bench.execution.run_one`, the paper driver's own path (a run it finishes gets
its plan fingerprint in ``done.json``: :mod:`llome_jax.sweep.fingerprint`). It never raises: an
error comes back as a ``failed`` result with its traceback, an interruption (SIGTERM at a time
limit, SIGUSR2 before a time limit or a preemption: the round in progress is finished first) as
``interrupted``, with the signal in ``stop_signal``.

Fault injection, for the tests of the engines (a process killed midway, a task that raises):
:data:`FAULT_ENV` holds ``ACTION:RUN:ROUND`` items, comma-separated, each acted on in the first
attempt only, when the run's round ``ROUND`` has written its labels and record and before its
checkpoint: ``kill`` (SIGKILL: the process dies as at a node failure), ``raise`` (an error),
``hold`` (print ``fault injection: holding, pid <PID>`` to the task's log and sleep up to
:data:`HOLD_SECONDS`, for a test to kill the process from outside by its PID) or ``pause``
(print ``fault injection: pausing, pid <PID>`` and wait for a signal, for a test to send the
scheduler's SIGUSR2 from outside; the round then goes on and the run stops after it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import re
import signal
import socket
import sys
import time
import traceback
from collections.abc import Mapping
from typing import Any

from llome_jax.bench.plan import RunSpec, Scale
from llome_jax.host import compile_cache
from llome_jax.sweep import fingerprint

__all__ = [
    "CACHE_MODES",
    "FAULT_ENV",
    "HOLD_SECONDS",
    "NODE_CACHE_BYTES",
    "STOPPED_BY",
    "Task",
    "TaskResult",
    "log_path",
    "logged_process",
    "now",
    "run_task",
    "slug",
]

#: ``task``: a compilation cache per task under ``OUT/.jax_cache/<run>`` (kept across attempts,
#: never shared); ``node``: one per node under ``$TMPDIR`` shared by its tasks through JAX's file
#: lock (:data:`NODE_CACHE_BYTES`); ``shared``: one for the whole sweep, ``OUT/.jax_cache/shared``,
#: locked the same way (a program compiles once for the sweep; OUT must support locks);
#: ``off``: none. A cache directory set by
#: ``JAX_COMPILATION_CACHE_DIR`` is kept, and ``LLOME_JAX_COMPILATION_CACHE=off`` turns all off.
CACHE_MODES = ("task", "node", "shared", "off")
#: the node and shared caches' size limit: setting one makes JAX lock the directory for every read
#: and write, so concurrent tasks never read a half-written entry
NODE_CACHE_BYTES = 8 << 30
#: fault injection for tests (module docstring)
FAULT_ENV = "LLOME_JAX_SWEEP_FAULT"
#: how long the ``hold`` fault sleeps before the task goes on
HOLD_SECONDS = 600.0


@dataclasses.dataclass(frozen=True)
class Task:
    """One run of a sweep (or the GA difficulty sweep, ``spec is None``).

    Attributes:
      name: the run's name (``f2/GA_seed0``, or ``ga_difficulty``).
      spec / scale: what :func:`~llome_jax.bench.execution.run_one` runs.
      out: the sweep's ``OUT`` (absolute); the run directory is ``OUT/runs/<name>``.
      attempt: 1 for the first submission, then one more per resubmission.
      env: environment variables set before JAX starts (``CUDA_VISIBLE_DEVICES``, ...).
      cache: the compilation cache (:data:`CACHE_MODES`).
      log_to_file: send the output to :func:`log_path` (all but the in-process executor).
      cores: pin the process to these CPU cores (none: as it starts).
      minutes: this attempt's time limit on SLURM when the executor lengthened it (a retry of a
        run that timed out); ``None``: the plan's.
      requeues: how many times submitit requeued this attempt (:mod:`llome_jax.sweep.requeue`).
    """

    name: str
    spec: RunSpec | None
    scale: Scale
    out: str
    attempt: int = 1
    env: tuple[tuple[str, str], ...] = ()
    cache: str = "task"
    log_to_file: bool = True
    cores: tuple[int, ...] = ()
    minutes: int | None = None
    requeues: int = 0

    def with_env(self, **env: str) -> Task:
        return dataclasses.replace(self, env=tuple({**dict(self.env), **env}.items()))


@dataclasses.dataclass(frozen=True)
class TaskResult:
    """How a task ended.

    Attributes:
      status: ``done`` (its run finished: ``how`` is ``new``, ``resumed`` or ``skipped``),
        ``busy`` (another process holds its run directory), ``interrupted`` (SIGTERM or Ctrl-C:
        the run stopped at a round boundary), ``failed`` (an error, or the process died).
      error: one line: the exception, or how the process ended.
      traceback: the traceback, or the end of the task's log when its process died.
      host / pid: where the task's process ran (from its log's first line when it died).
      job_id / job_state / exit_code: on SLURM, the task's job (``123_4``) and, when the job
        ended without a result, its state (``FAILED``, ``TIMEOUT``, ...) and exit code
        (``status:signal``).
      stop_signal: for ``interrupted``, the signal (``SIGINT``, ``SIGTERM``, ``SIGUSR2``).
      started / ended: when the task's process (or, for a job that died, the job) started and
        ended, ISO 8601 local time (empty when unknown).
    """

    name: str
    attempt: int
    status: str
    how: str = ""
    seconds: float = 0.0
    error: str = ""
    traceback: str = ""
    host: str = ""
    pid: int = 0
    job_id: str = ""
    job_state: str = ""
    exit_code: str = ""
    stop_signal: str = ""
    started: str = ""
    ended: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "done"

    def record(self, executor: str) -> dict[str, Any]:
        """The ``failures.jsonl`` line of a failed attempt."""
        return {
            "run": self.name,
            "attempt": self.attempt,
            "executor": executor,
            "status": self.status,
            "error": self.error,
            "traceback": self.traceback,
            "host": self.host,
            "pid": self.pid,
            "job_id": self.job_id,
            "job_state": self.job_state,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 1),
            "started": self.started,
            "ended": self.ended,
            "stop_signal": self.stop_signal,
            "time": now(),
        }


def now(at: float | None = None) -> str:
    """``at`` (default: now) as ISO 8601 local time with its offset, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(at))


def slug(name: str) -> str:
    """A run name as one path component (``f2/GA_seed0`` -> ``f2__GA_seed0``)."""
    return name.replace("/", "__")


def log_path(out: str | pathlib.Path, name: str, attempt: int) -> pathlib.Path:
    """Where a task's output goes: ``OUT/sweep/logs/<run>.<attempt>.log``."""
    return pathlib.Path(out) / "sweep" / "logs" / f"{slug(name)}.{attempt}.log"


def logged_process(text: str) -> tuple[str, int]:
    """``(host, pid)`` from a task log's last start line (``[run] attempt 2 on HOST, pid PID``,
    ``[run] attempt 2 (requeue 1) on ...``), or ``("", 0)`` when the log has no such line."""
    found = re.findall(
        r"^\[[^\]]+\] attempt \d+(?: \(requeue \d+\))? on (\S+), pid (\d+)", text, re.MULTILINE
    )
    return (found[-1][0], int(found[-1][1])) if found else ("", 0)


def run_task(task: Task) -> TaskResult:
    """Run ``task`` in this process (a worker's whole job; module docstring); never raises."""
    started = time.perf_counter()
    common = {"name": task.name, "attempt": task.attempt, "host": socket.gethostname()}
    common.update(pid=os.getpid(), started=now())
    if not os.path.isdir(task.out):  # a node that does not see the driver's OUT (Ray, SLURM)
        error = (
            f"{task.out} does not exist on {common['host']}: a sweep's OUT must be on storage "
            "every node sees (NFS, Lustre, ...)"
        )
        return TaskResult(status="failed", error=error, ended=now(), **common)
    for key, value in task.env:
        os.environ[key] = value
    if task.cores:
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setaffinity(0, set(task.cores))
    if task.log_to_file:
        _redirect_output(log_path(task.out, task.name, task.attempt))
    try:
        how = _run(task)
    except BaseException as error:  # everything comes back as a result
        status, stop_signal = "failed", STOPPED_BY.get(type(error).__name__, "")
        message = f"{type(error).__name__}: {error}".strip().rstrip(":")
        if stop_signal:
            status = "interrupted"
            message = f"{stop_signal}: stopped at a round boundary (its checkpoint written)"
        text = traceback.format_exc()
        print(text, flush=True)
        return TaskResult(
            status=status,
            seconds=time.perf_counter() - started,
            error=message,
            traceback=text,
            stop_signal=stop_signal,
            ended=now(),
            **common,
        )
    status = "busy" if how == "busy" else "done"
    error = "another process holds the run directory" if how == "busy" else ""
    return TaskResult(
        status=status,
        how=how,
        seconds=time.perf_counter() - started,
        error=error,
        ended=now(),
        **common,
    )


#: the exceptions a signal raises at a round boundary (``llome_jax.run.runner.STOP_SIGNALS``),
#: by name (this module loads no JAX) -> the signal
STOPPED_BY = {"KeyboardInterrupt": "SIGINT", "Terminated": "SIGTERM", "Preempted": "SIGUSR2"}


def _run(task: Task) -> str:
    # lazy: JAX; run_task sets the task's environment before JAX starts (module docstring)
    from llome_jax.bench import difficulty, execution

    out = pathlib.Path(task.out)
    _enable_cache(task, out)
    path = out / "runs" / task.name
    requeue = f" (requeue {task.requeues})" if task.requeues else ""
    print(
        f"[{task.name}] attempt {task.attempt}{requeue} on {socket.gethostname()}, "
        f"pid {os.getpid()}",
        flush=True,
    )
    if task.spec is None:
        return str(difficulty.run_difficulty(task.scale, path))
    trackers = _faults(task)
    how = execution.run_one(task.spec, task.scale, path, progress=True, trackers=trackers)
    if how in ("new", "resumed"):  # what the run was made from (llome_jax.sweep.fingerprint)
        fingerprint.stamp(path, task.spec, task.scale)
    return how


def _enable_cache(task: Task, out: pathlib.Path) -> None:
    """The task's compilation cache (:data:`CACHE_MODES`)."""
    if task.cache == "off":
        return
    if task.cache in ("node", "shared"):
        root = pathlib.Path(os.environ.get("TMPDIR") or "/tmp") / f"llome_jax_cache_{os.getuid()}"
        root = out / ".jax_cache" / "shared" if task.cache == "shared" else root
        if compile_cache.enable(root):
            import jax  # lazy: after the task's environment is set (module docstring)

            if jax.config.jax_compilation_cache_dir == str(root):
                jax.config.update("jax_compilation_cache_max_size", NODE_CACHE_BYTES)
        return
    compile_cache.enable(out / ".jax_cache" / slug(task.name))


def _redirect_output(path: pathlib.Path) -> None:
    """This process's stdout and stderr (file descriptors 1 and 2, so XLA's too) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(handle, 1)
    os.dup2(handle, 2)
    os.close(handle)


def _faults(task: Task) -> tuple[Any, ...]:
    """The fault :data:`FAULT_ENV` asks of this task's first attempt, as a tracker."""
    text = os.environ.get(FAULT_ENV, "")
    if task.attempt != 1 or not text:
        return ()
    actions = {}
    for item in (p.strip() for p in text.split(",") if p.strip()):
        action, name, round_index = item.split(":")
        if name == task.name:
            actions[int(round_index)] = action
    return (_Fault(actions),) if actions else ()


class _Fault:
    """A tracker that kills its process, or raises, once a given round's record is written."""

    def __init__(self, actions: Mapping[int, str]) -> None:
        self.actions = dict(actions)

    def start(self, config: Any, run_dir: Any, history: Any = ()) -> None:
        pass

    def log_round(self, record: Mapping[str, Any]) -> None:
        action = self.actions.get(int(record["round"]))
        if action == "kill":
            print(f"fault injection: SIGKILL after round {record['round']}'s record", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "raise":
            raise RuntimeError(f"fault injection: an error after round {record['round']}'s record")
        elif action == "hold":
            print(f"fault injection: holding, pid {os.getpid()}", flush=True)
            time.sleep(HOLD_SECONDS)
        elif action == "pause":
            print(f"fault injection: pausing, pid {os.getpid()}", flush=True)
            signal.pause()  # back once a signal's handler has run

    def finish(self, error: BaseException | None = None) -> None:
        pass
