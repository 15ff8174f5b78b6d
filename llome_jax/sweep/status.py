"""Where every run of a sweep stands, read without submitting anything: :func:`sweep_status`
(``llome-jax sweep PLAN --status``).

Each selected run is one of: ``finished`` (its ``done.json``), ``queued`` / ``running`` (the job
``jobs.json`` records for its attempt, as ``scontrol`` sees it now; ``submitted`` when SLURM
cannot be asked), ``failed`` (its last attempt's error in ``failures.jsonl``), ``stopped``
(a run directory with rounds and no ``done.json``: interrupted, it resumes from its last
checkpoint) or ``not started``. The requeues of ``requeues.jsonl`` are counted beside.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
from collections.abc import Sequence

from llome_jax.sweep.jobs import read_jobs
from llome_jax.sweep.plans import SweepPlan, finished
from llome_jax.sweep.requeue import read_requeues
from llome_jax.sweep.scontrol import job_states

__all__ = ["STATES", "RunStatus", "status_text", "sweep_status"]

#: the states of :class:`RunStatus`, in the order the summary counts them
STATES = ("finished", "running", "queued", "submitted", "failed", "stopped", "not started")
#: SLURM job states that :func:`sweep_status` calls ``queued``
QUEUED = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED", "CONFIGURING")


@dataclasses.dataclass(frozen=True)
class RunStatus:
    """One run's standing: its ``state`` (:data:`STATES`), last ``attempt``, SLURM ``job``
    id, rounds written (``rounds``: the last round's index, ``-1`` for none), ``requeues``
    and one line of ``detail``."""

    name: str
    state: str
    attempt: int = 0
    job: str = ""
    rounds: int = -1
    requeues: int = 0
    detail: str = ""


def _last_round(path: pathlib.Path) -> int:
    try:
        return len((path / "rounds.jsonl").read_text().splitlines()) - 1
    except OSError:
        return -1


def _failures(out: pathlib.Path) -> dict[str, dict]:
    """Each run's last line of ``failures.jsonl``."""
    found: dict[str, dict] = {}
    try:
        lines = (out / "failures.jsonl").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        try:
            record = json.loads(line)
            found[str(record["run"])] = record
        except (ValueError, KeyError, TypeError):
            continue
    return found


def sweep_status(
    plan: SweepPlan,
    out: str | os.PathLike,
    names: Sequence[str] | None = None,
    ask_slurm: bool = True,
) -> list[RunStatus]:
    """The standing of ``names`` (default: every planned run) under ``out``; reads only
    (``ask_slurm``: one ``scontrol`` call per recorded array, where ``scontrol`` exists)."""
    out = pathlib.Path(out)
    names = list(plan.names if names is None else names)
    jobs = read_jobs(out)
    failures = _failures(out)
    requeues: dict[str, int] = {}
    for line in read_requeues(out):
        requeues[str(line.get("run"))] = requeues.get(str(line.get("run")), 0) + 1
    waiting = {
        name: str(entry["job_id"])
        for name, entry in jobs.items()
        if entry.get("state") == "submitted" and entry.get("job_id") and name in names
    }
    states = {}
    if waiting and ask_slurm and shutil.which("scontrol"):
        states = job_states(waiting.values())
    found = []
    for name in names:
        path = out / "runs" / name
        entry = jobs.get(name) or {}
        common = {
            "name": name,
            "attempt": int(entry.get("attempt") or failures.get(name, {}).get("attempt") or 0),
            "job": str(entry.get("job_id") or ""),
            "rounds": _last_round(path),
            "requeues": requeues.get(name, 0),
        }
        if finished(out, name):
            found.append(RunStatus(state="finished", detail="", **common))
            continue
        if name in waiting:
            state = states.get(waiting[name])
            if state is None:
                found.append(
                    RunStatus(
                        state="submitted",
                        detail=f"since {entry.get('submitted', '?')} (SLURM not asked or "
                        "no longer knows the job)",
                        **common,
                    )
                )
                continue
            if not state.ended:
                kind = "queued" if state.state in QUEUED else "running"
                where = f" on {state.node}" if state.node and kind == "running" else ""
                found.append(RunStatus(state=kind, detail=f"{state.state}{where}", **common))
                continue
            found.append(
                RunStatus(
                    state="failed",
                    detail=f"job ended {state.state} (exit {state.exit_code}); the next sweep "
                    "records it and runs it again",
                    **common,
                )
            )
            continue
        failure = failures.get(name)
        ended = entry.get("state")
        if failure is not None and ended in (None, "failed", "lost", "busy"):
            detail = f"{failure.get('status', 'failed')}: {failure.get('error', '')}"
            found.append(RunStatus(state="failed", detail=detail, **common))
        elif common["rounds"] >= 0:
            detail = f"after round {common['rounds']} (resumes from its last checkpoint)"
            found.append(RunStatus(state="stopped", detail=detail, **common))
        else:
            found.append(RunStatus(state="not started", **common))
    return found


def status_text(plan: SweepPlan, out: str | os.PathLike, rows: Sequence[RunStatus]) -> str:
    """``--status``'s text: one summary line, then one line per run that is not finished."""
    counts = {state: sum(row.state == state for row in rows) for state in STATES}
    summary = ", ".join(f"{count} {state}" for state, count in counts.items() if count)
    requeued = sum(row.requeues for row in rows)
    extra = f"; {requeued} requeue(s) in sweep/requeues.jsonl" if requeued else ""
    lines = [f"plan {plan.name!r} in {out}: {len(rows)} run(s): {summary or 'none'}{extra}"]
    width = max([len(row.name) for row in rows] + [3])
    for row in rows:
        if row.state == "finished":
            continue
        rounds = f"round {row.rounds}" if row.rounds >= 0 else "no round"
        job = f" job {row.job}" if row.job else ""
        attempt = f"attempt {row.attempt}" if row.attempt else "attempt -"
        line = f"  {row.name:{width}s}  {row.state:11s} {attempt}{job}, {rounds}"
        lines.append(line + (f": {row.detail}" if row.detail else ""))
    return "\n".join(lines)
