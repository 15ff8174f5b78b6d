"""What the SLURM controller says about a cluster and its jobs, read through ``scontrol``: the
cluster's ``MaxArraySize`` (:func:`max_array_size`) and how a group of runs is cut below it
(:func:`array_chunks`), and each job's state, node, exit code, start and end and run time
(:func:`job_states`, :func:`parse_job_states`), so that a cluster without accounting (no
``sacct``) still tells the sweep how a job ended.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from typing import TypeVar

__all__ = [
    "DEFAULT_MAX_ARRAY_SIZE",
    "ENDED_STATES",
    "JobState",
    "array_chunks",
    "job_states",
    "max_array_size",
    "parse_job_states",
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
    ``FAILED``, ...), ``exit_code`` (``status:signal``, e.g. ``137:0``), ``node`` (its batch
    host, else its node list), ``start`` / ``end`` (``StartTime`` / ``EndTime`` as SLURM
    prints them, empty when ``Unknown``) and ``run_seconds`` (``RunTime``)."""

    state: str
    exit_code: str = ""
    node: str = ""
    start: str = ""
    end: str = ""
    run_seconds: float = 0.0

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
        start, end = (fields.get(key, "") for key in ("StartTime", "EndTime"))
        found[name] = JobState(
            fields["JobState"],
            fields.get("ExitCode", ""),
            node,
            "" if start in ("Unknown", "None") else start,
            "" if end in ("Unknown", "None") else end,
            _run_seconds(fields.get("RunTime", "")),
        )
    return found


def _run_seconds(text: str) -> float:
    """SLURM's ``[days-]hours:minutes:seconds`` (``RunTime=00:01:05``) in seconds (0 when it
    cannot be read)."""
    found = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d+):(\d+)", text.strip())
    if not found:
        return 0.0
    days, hours, minutes, seconds = (int(part or 0) for part in found.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


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
