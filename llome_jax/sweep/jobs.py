"""What a sweep's driver submitted: ``OUT/sweep/jobs.json`` (:class:`JobBook`), and the lock
that keeps one driver per ``OUT`` (:func:`driver_lock`).

``jobs.json`` holds, for every run the driver submitted, its current attempt (number, SLURM job
id where there is one, state, submission and end times, time limit) and every earlier attempt::

    {"version": 1, "executor": "slurm", "updated": "2026-12-02T23:10:04+0000",
     "runs": {"f2/GA_seed4": {"attempt": 2, "job_id": "118_0", "state": "submitted",
                              "submitted": "...", "ended": "", "minutes": 20, "error": "",
                              "history": [{"attempt": 1, "job_id": "117_4", "state": "failed",
                                           ...}]}}}

States: ``submitted`` (queued or running: a restarted driver re-attaches to its job), ``done``,
``failed``, ``interrupted``, ``busy``, ``lost`` (a recorded job that neither SLURM nor its result
file knows any more). The file is rewritten whole on every change, atomically (a temporary file
beside it, fsynced, then ``os.replace``), so a driver killed at any moment leaves the previous
or the next version, never half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import socket
from collections.abc import Iterator
from typing import Any

from llome_jax.bench.plan import UsageError
from llome_jax.run.lock import RunDirectoryInUseError, acquire_lock
from llome_jax.sweep.tasks import Task, TaskResult, now

__all__ = ["DRIVER", "JOBS", "JobBook", "driver_lock", "read_jobs"]

#: the driver's record of its submissions, in ``OUT/sweep``
JOBS = "jobs.json"
#: who holds the driver lock, in ``OUT/sweep`` (the lock itself is ``OUT/sweep/.lock``)
DRIVER = "driver.json"


def read_jobs(out: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """``jobs.json``'s runs (``{}`` when there is none or it cannot be read)."""
    try:
        data = json.loads((pathlib.Path(out) / "sweep" / JOBS).read_text())
    except (OSError, ValueError):
        return {}
    runs = data.get("runs") if isinstance(data, dict) else None
    return dict(runs) if isinstance(runs, dict) else {}


class JobBook:
    """``OUT/sweep/jobs.json`` in memory, written after every change (module docstring)."""

    def __init__(self, out: str | os.PathLike, executor: str) -> None:
        self.path = pathlib.Path(out) / "sweep" / JOBS
        self.executor = executor
        self.runs = read_jobs(out)

    def submitted(self, task: Task, job_id: str = "", minutes: int | None = None) -> None:
        """``task``'s attempt was handed to the executor (``job_id``: its SLURM job); a
        requeue of the same attempt keeps its record."""
        entry = self.runs.get(task.name)
        if entry and entry.get("attempt") == task.attempt and entry.get("state") == "submitted":
            entry.update({"job_id": job_id or entry.get("job_id", "")})
            if minutes is not None:
                entry["minutes"] = minutes
            return self._write()
        history = []
        if entry:
            history = list(entry.get("history", []))
            history.append({k: v for k, v in entry.items() if k != "history"})
        self.runs[task.name] = {
            "attempt": task.attempt,
            "job_id": job_id,
            "state": "submitted",
            "submitted": now(),
            "ended": "",
            "minutes": minutes if minutes is not None else task.minutes,
            "error": "",
            "history": history,
        }
        self._write()

    def ended(self, result: TaskResult, state: str | None = None) -> None:
        """``result``'s attempt ended (``state``: instead of its status, e.g. ``lost``)."""
        entry = self.runs.setdefault(
            result.name, {"attempt": result.attempt, "job_id": result.job_id, "history": []}
        )
        entry.update(
            {
                "attempt": result.attempt,
                "job_id": result.job_id or entry.get("job_id", ""),
                "state": state or result.status,
                "ended": result.ended or now(),
                "error": result.error,
                "seconds": round(result.seconds, 1),
                "host": result.host,
            }
        )
        self._write()

    def attempt(self, name: str) -> int:
        """The last attempt recorded for ``name`` (0: none)."""
        return int((self.runs.get(name) or {}).get("attempt") or 0)

    def waiting(self, name: str) -> dict[str, Any] | None:
        """``name``'s record when its attempt was submitted and has not been seen to end."""
        entry = self.runs.get(name)
        return entry if entry and entry.get("state") == "submitted" else None

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"version": 1, "executor": self.executor, "updated": now(), "runs": self.runs}
        partial = self.path.with_name(self.path.name + ".partial")
        with open(partial, "w") as stream:
            json.dump(data, stream, indent=1, sort_keys=True)
            stream.write("\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(partial, self.path)


@contextlib.contextmanager
def driver_lock(out: pathlib.Path) -> Iterator[None]:
    """Hold ``OUT/sweep/.lock`` while a driver submits and watches (one driver per ``OUT``;
    the lock goes with the process, however it ends) and name the holder in
    ``OUT/sweep/driver.json``.

    Raises:
      UsageError: another driver holds it: one line naming its host, pid and start.
    """
    folder = out / "sweep"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        handle = acquire_lock(folder)
    except RunDirectoryInUseError:
        try:
            holder = json.loads((folder / DRIVER).read_text())
            who = f" (pid {holder['pid']} on {holder['host']}, since {holder['started']})"
        except (OSError, ValueError, KeyError, TypeError):
            who = ""
        raise UsageError(
            f"another llome-jax sweep drives {out}{who}; it watches every run it submitted: "
            "--status shows where they stand (start this one again once it has ended)"
        ) from None
    try:
        (folder / DRIVER).write_text(
            json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": now()}) + "\n"
        )
        yield
    finally:
        if handle is not None:
            handle.close()
