"""One sweep API on every engine: :func:`run_sweep`.

:func:`run_sweep` submits a plan's unfinished runs to an executor (``inline``, ``local``,
``slurm``, ``ray``; :func:`make_executor`), records every failed attempt in ``OUT/failures.jsonl``
(the run, the attempt, the error and its traceback, or how the process died and the end of its
log), resubmits the failed runs up to ``retries`` times (each resumes its run directory from its
last checkpoint), and finally writes the paper driver's report from whatever finished
(:func:`llome_jax.bench.report.write_report`: ``report.md``, ``curves.csv``, the figures) with a
``Sweep`` section that names what is missing and why. Run directories are the paper driver's
(``OUT/runs/<function>/<method>_seed<k>``), so ``llome-jax paper --report-only`` reads a sweep's
``OUT`` and the other way round.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import pathlib
import shutil
import time
from collections.abc import Mapping, Sequence
from typing import Any

from llome_jax.bench.plan import UsageError
from llome_jax.host import compile_cache
from llome_jax.sweep import fingerprint
from llome_jax.sweep.engines import RayExecutor, SubmititExecutor, require_installed
from llome_jax.sweep.jobs import JobBook, driver_lock
from llome_jax.sweep.local import InlineExecutor, LocalExecutor, died
from llome_jax.sweep.plans import SweepPlan, finished
from llome_jax.sweep.tasks import CACHE_MODES, Task, TaskResult, log_path

__all__ = [
    "EXECUTORS",
    "FAILURES",
    "SweepResult",
    "check_changes",
    "finished",
    "make_executor",
    "run_sweep",
    "with_plan_settings",
]

#: the executors :func:`make_executor` knows
EXECUTORS = ("inline", "local", "slurm", "ray")
#: one JSON line per failed attempt, in ``OUT``
FAILURES = "failures.jsonl"


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """What a sweep did.

    Attributes:
      done: the selected runs that are finished (this call or before).
      missing: selected run -> why it is not finished (its last failure).
      results: every attempt's result, in the order they ended.
      failures: the failed attempts this call recorded.
      seconds: the wall time of the call.
    """

    done: tuple[str, ...]
    missing: dict[str, str]
    results: tuple[TaskResult, ...]
    failures: int
    seconds: float


def make_executor(name: str, out: str | os.PathLike, **options: Any) -> Any:
    """The executor ``name`` (:data:`EXECUTORS`) with its ``options``: ``local``: ``workers``,
    ``gpus``; ``slurm``: ``cluster``, ``margin``, ``min_minutes``, ``parallelism``, ``slurm``,
    ``poll``, ``max_array_size``, ``python``, ``max_minutes`` (submitit's files under
    ``OUT/sweep/submitit``; :func:`run_sweep` puts the plan's ``slurm`` settings under
    ``slurm``);
    ``ray``: ``address``, ``num_cpus``.

    Raises:
      ValueError: an unknown executor.
    """
    if name == "inline":
        return InlineExecutor()
    if name == "local":
        return LocalExecutor(**options)
    if name == "slurm":
        folder = options.pop("folder", None) or pathlib.Path(out) / "sweep" / "submitit"
        return SubmititExecutor(folder, **options)
    if name == "ray":
        return RayExecutor(**options)
    raise ValueError(f"unknown executor {name!r}; choose from {', '.join(EXECUTORS)}")


def check_changes(
    plan: SweepPlan, out: str | os.PathLike, names: Sequence[str], rerun_changed: bool = False
) -> dict[str, str]:
    """The finished runs of ``names`` that another plan made (their ``done.json`` fingerprint,
    or for a run finished before fingerprints its ``config.json``, disagrees with ``plan``:
    :func:`llome_jax.sweep.fingerprint.changed_runs`) -> what changed; reads only.

    Raises:
      UsageError: such runs without ``rerun_changed``: one line naming the first few and the
        settings that changed.
    """
    specs = [spec for spec in map(plan.spec, names) if spec is not None]
    changed = fingerprint.changed_runs(pathlib.Path(out), specs, plan.scale)
    if changed and not rerun_changed:
        shown = ", ".join(list(changed)[:3])
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        what = list(dict.fromkeys(why for why in changed.values() if why))
        settings = f" ({'; '.join(what[:2])}{'; ...' if len(what) > 2 else ''})" if what else ""
        raise UsageError(
            f"{len(changed)} finished run(s) were made by another plan: {shown}{more}{settings}; "
            "--rerun-changed runs them again from scratch (or restore the plan's settings)"
        )
    return changed


def with_plan_settings(plan: SweepPlan, executor: str, options: Mapping[str, Any]) -> dict:
    """``options`` for :func:`make_executor` with the plan's cluster settings
    (:attr:`SweepPlan.slurm`, for the ``slurm`` executor) under the caller's ``slurm``."""
    if executor != "slurm":
        return dict(options)
    return {**options, "slurm": {**dict(plan.slurm), **dict(options.get("slurm") or {})}}


def run_sweep(
    plan: SweepPlan,
    out: str | os.PathLike,
    executor: Any = "local",
    *,
    runs: Sequence[str] | None = None,
    retries: int = 0,
    cache: str = "task",
    env: Mapping[str, str] | None = None,
    report: bool = True,
    rerun_changed: bool = False,
    log: Any = print,
    **options: Any,
) -> SweepResult:
    """Run ``plan``'s unfinished runs (those matching the shell patterns ``runs``) on
    ``executor`` (a name of :data:`EXECUTORS`, with ``options`` for :func:`make_executor`, or an
    executor object), resubmitting failed ones up to ``retries`` times, then write the report
    (module docstring).

    Args:
      cache: each task's compilation cache (:data:`llome_jax.sweep.tasks.CACHE_MODES`).
      env: environment variables set in every task before JAX starts.
      report: write ``report.md`` and the figures after the runs (from every planned run that
        finished, the unselected included).
      rerun_changed: run the finished runs another plan made (:func:`check_changes`) again from
        scratch (their run directories removed first) instead of refusing them.
      log: where progress lines go.

    Raises:
      UsageError: ``runs`` patterns that match nothing; finished runs another plan made,
        without ``rerun_changed``; runs the executor's ``check(names, plan)`` refuses (the
        slurm executor's ``max_minutes`` cap); in each case nothing written.
      ValueError: an unknown executor, a negative ``retries``, an unknown cache mode, an
        executor whose extra (submitit, Ray) is not installed.
    """
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    if cache not in CACHE_MODES:
        raise ValueError(f"cache must be one of {', '.join(CACHE_MODES)}, got {cache!r}")
    t0 = time.perf_counter()
    out = pathlib.Path(out).resolve()
    names = plan.select(runs)
    changed = check_changes(plan, out, names, rerun_changed)
    if isinstance(executor, str):
        engine = make_executor(executor, out, **with_plan_settings(plan, executor, options))
    else:
        engine = executor
    check = getattr(engine, "check", None)  # e.g. the slurm executor's time cap
    if check is not None:
        check([name for name in names if name in changed or not finished(out, name)], plan)
    if isinstance(executor, str):  # after the cap: bad input is named before a missing extra
        require_installed(executor)
    with driver_lock(out):  # one driver per OUT (before anything is written or removed)
        out.mkdir(parents=True, exist_ok=True)
        if changed:
            shown = ", ".join(list(changed)[:3]) + (" ..." if len(changed) > 3 else "")
            log(f"re-running {len(changed)} run(s) another plan made, from scratch: {shown}")
            for name in changed:
                shutil.rmtree(out / "runs" / name)
        if engine.name == "inline" and cache == "task":  # one process: one cache for every run
            compile_cache.enable(out / ".jax_cache" / "inline")
        book = JobBook(out, engine.name)
        pending, attached = _pending(engine, plan, out, names, book, env, cache, log)
        skipped = len(names) - len(pending) - len(attached)
        again = f", {len(attached)} re-attached (queued or running)" if attached else ""
        log(
            f"{len(names)} run(s) of plan {plan.name!r} on {engine.name}: {skipped} finished"
            f"{again}, {len(pending)} to run"
        )
        results: list[TaskResult] = []
        last_failure: dict[str, TaskResult] = {}
        try:
            failures = _submit(
                engine, plan, out, pending, retries, results, last_failure, log, book, attached
            )
        finally:
            close = getattr(engine, "close", None)
            if close is not None:
                close()
        done = tuple(name for name in names if finished(out, name))
        missing = {}
        for name in names:
            if name in done:
                continue
            failure = last_failure.get(name)
            missing[name] = (
                f"{failure.status} in attempt {failure.attempt}: {failure.error}"
                if failure
                else "not run"
            )
        summary = SweepResult(done, missing, tuple(results), failures, time.perf_counter() - t0)
        log(
            f"{len(done)} of {len(names)} run(s) finished, {len(missing)} missing, "
            f"{failures} failed attempt(s) in {summary.seconds:.0f} s"
        )
        if report:
            write_sweep_report(plan, out, engine.name, summary, names)
            log(f"wrote {out / 'report.md'}")
        return summary


def write_sweep_report(
    plan: SweepPlan,
    out: pathlib.Path,
    executor: str,
    summary: SweepResult | None = None,
    selected: Sequence[str] | None = None,
) -> None:
    """The paper driver's report of every planned run that finished, then a ``Sweep`` section:
    the executor, what is missing and why (``summary``'s reasons; runs outside ``selected``
    were not selected), where the failures are."""
    from llome_jax.bench import report  # lazy: JAX (sweep/__init__.py: no JAX at import)

    total = sum(plan.seconds(name) for name in plan.names)
    report.write_report(
        out,
        plan.scale_name,
        plan.scale,
        list(plan.runs),
        list(plan.figures),
        total,
        generator="llome-jax sweep",
    )
    everything = [name for name in plan.names if not finished(out, name)]
    lines = [
        "",
        "## Sweep",
        "",
        f"Plan `{plan.name}` (scale `{plan.scale_name}`, {len(plan.names)} runs) on the "
        f"`{executor}` executor: {len(plan.names) - len(everything)} finished, "
        f"{len(everything)} missing. Failed attempts are in `{FAILURES}` (with tracebacks), "
        "each task's output in `sweep/logs/`. The same command runs what is missing "
        "(finished runs are skipped, interrupted ones resume from their last checkpoint).",
        "",
    ]
    if everything:
        lines += ["| missing run | why |", "|---|---|"]
        reasons = summary.missing if summary is not None else {}
        for name in everything:
            why = reasons.get(name) or (
                "not selected (--runs)"
                if selected is not None and name not in selected
                else "not finished"
            )
            lines.append(f"| {name} | {why.replace('|', '/')} |")
        lines.append("")
    with open(out / "report.md", "a") as stream:
        stream.write("\n".join(lines))


def _record(out: pathlib.Path, result: TaskResult, executor: str) -> None:
    """Append a failed attempt to ``failures.jsonl`` (fsynced)."""
    with open(out / FAILURES, "a") as stream:
        stream.write(json.dumps(result.record(executor)) + "\n")
        stream.flush()
        os.fsync(stream.fileno())


def _attempts(out: pathlib.Path) -> dict[str, int]:
    """The highest attempt of each run in ``failures.jsonl`` (so attempts and their logs go on
    numbering across calls)."""
    found: dict[str, int] = {}
    try:
        lines = (out / FAILURES).read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        try:
            record = json.loads(line)
            found[record["run"]] = max(found.get(record["run"], 0), int(record["attempt"]))
        except (ValueError, KeyError, TypeError):
            continue
    return found


def _pending(
    engine: Any,
    plan: SweepPlan,
    out: pathlib.Path,
    names: Sequence[str],
    book: JobBook,
    env: Mapping[str, str] | None,
    cache: str,
    log: Any,
) -> tuple[list[Task], list[Task]]:
    """The tasks to submit, and those whose recorded jobs ``engine`` re-attached to (a run whose
    attempt ``jobs.json`` records as submitted: still queued or running, or ended with its
    result while no driver watched; :meth:`SubmititExecutor.attach`). A recorded job that
    neither SLURM nor its result file knows is a failed attempt (``lost``), run again."""
    previous = _attempts(out)
    pending: list[Task] = []
    attached: list[Task] = []
    attach = getattr(engine, "attach", None) if getattr(engine, "attachable", False) else None
    for name in names:
        if finished(out, name):
            continue
        task = Task(
            name,
            plan.spec(name),
            plan.scale,
            str(out),
            attempt=max(previous.get(name, 0), book.attempt(name)) + 1,
            env=tuple((env or {}).items()),
            cache=cache,
        )
        waiting = book.waiting(name)
        if waiting is not None and waiting.get("job_id") and attach is not None:
            task = dataclasses.replace(
                task, attempt=int(waiting["attempt"]), minutes=waiting.get("minutes")
            )
            state = attach(task, str(waiting["job_id"]))
            if state is not None:
                attached.append(task)
                log(f"re-attached to job {waiting['job_id']} of {name} ({state})")
                continue
            lost = died(
                task,
                f"job {waiting['job_id']} ended while no driver watched it, and neither SLURM "
                "nor its result file knows it any more",
            )
            lost = dataclasses.replace(lost, job_id=str(waiting["job_id"]))
            _record(out, lost, engine.name)
            book.ended(lost, state="lost")
            log(f"{name}: {lost.error} (attempt {task.attempt})")
            task = dataclasses.replace(task, attempt=task.attempt + 1, minutes=None)
        pending.append(task)
    return pending, attached


def _submit(
    engine: Any,
    plan: SweepPlan,
    out: pathlib.Path,
    pending: list[Task],
    retries: int,
    results: list[TaskResult],
    last_failure: dict[str, TaskResult],
    log: Any,
    book: JobBook,
    attached: Sequence[Task] = (),
) -> int:
    """Submit ``pending`` (and watch the ``attached`` jobs), record every attempt in
    ``jobs.json`` and every failure in ``failures.jsonl``, and resubmit a failed run up to
    ``retries`` times: at once on an executor that takes tasks while it runs (``live``), else
    after the pass; the number of failed attempts."""
    failures = 0
    tries: collections.Counter[str] = collections.Counter()
    if hasattr(engine, "on_submit"):
        engine.on_submit = lambda task, job_id: book.submitted(
            task, job_id, engine.minutes(task.name, plan, task)
        )
    live = bool(getattr(engine, "live", False))
    retry = getattr(engine, "retry", None)
    queue: collections.deque[Task] = collections.deque(pending)
    known = {task.name: task for task in [*pending, *attached]}
    total = len(queue) + len(attached)
    watching = bool(attached)
    while queue or watching:
        batch = queue if live else collections.deque(queue)
        if not live:
            queue = collections.deque()
        if not hasattr(engine, "on_submit"):
            for task in batch:
                book.submitted(task)
        count = 0
        for result in engine.run(batch, plan):
            count += 1
            results.append(result)
            book.ended(result)
            line = f"[{count}/{total}] {result.name}: "
            if result.ok:
                log(line + f"{result.how} ({result.seconds:.0f} s)")
                last_failure.pop(result.name, None)
                continue
            failures += 1
            last_failure[result.name] = result
            _record(out, result, engine.name)
            where = log_path(out, result.name, result.attempt).relative_to(out)
            log(line + f"{result.status}: {result.error} (attempt {result.attempt}, log {where})")
            if tries[result.name] >= retries:
                continue
            tries[result.name] += 1
            task = known[result.name]
            if retry is not None:
                task = retry(task, result, plan)
            task = dataclasses.replace(task, attempt=result.attempt + 1, requeues=0)
            known[result.name] = task  # a second time-out doubles this attempt's limit
            total += 1
            log(
                f"resubmitting {result.name} (retry {tries[result.name]} of {retries}, "
                f"attempt {task.attempt})"
            )
            queue.append(task)
            if live and not hasattr(engine, "on_submit"):
                book.submitted(task)
        watching = False
    return failures
