"""The parts of a restartable sweep that need no cluster: ``jobs.json`` (written whole and
atomically, attempts kept), the one-driver lock, ``--status`` on a hand-made ``OUT``, the slurm
executor's longer limit after a time limit and its signal delay, ``scontrol``'s times, a
task log's last start line, and a SLURM restart's record. (The same on a real SLURM:
tests/test_sweep_requeue.py.)"""

from __future__ import annotations

import json
import os
import pathlib

import pytest
import yaml

from llome_jax.bench.plan import UsageError
from llome_jax.run.lock import acquire_lock
from llome_jax.sweep import plan_from_dict, run_sweep
from llome_jax.sweep.engines import SubmititExecutor, parse_job_states
from llome_jax.sweep.jobs import JobBook, driver_lock, read_jobs
from llome_jax.sweep.requeue import SubmititTask, read_requeues
from llome_jax.sweep.status import status_text, sweep_status
from llome_jax.sweep.tasks import Task, TaskResult, logged_process

PLAN = """
name: four
scale: smoke
functions: [f2]
methods: [GA]
seeds: [0, 1, 2, 3]
rounds: 1
costs: {GA: [60, 200]}
"""


def _plan():
    return plan_from_dict(yaml.safe_load(PLAN))


def _task(name: str, out: pathlib.Path, attempt: int = 1, **kw) -> Task:
    plan = _plan()
    return Task(name, plan.spec(name), plan.scale, str(out), attempt=attempt, **kw)


def test_jobs_json_keeps_every_attempt_and_is_written_whole(tmp_path: pathlib.Path) -> None:
    book = JobBook(tmp_path, "slurm")
    first = _task("f2/GA_seed0", tmp_path)
    book.submitted(first, "17_0", 20)
    book.submitted(first, "17_0")  # a requeue of the same attempt: one record
    assert read_jobs(tmp_path)["f2/GA_seed0"]["state"] == "submitted"
    failed = TaskResult("f2/GA_seed0", 1, "failed", error="boom", job_id="17_0", seconds=3.04)
    book.ended(failed)
    book.submitted(_task("f2/GA_seed0", tmp_path, attempt=2), "18", 40)
    entry = read_jobs(tmp_path)["f2/GA_seed0"]
    assert (entry["attempt"], entry["job_id"], entry["state"], entry["minutes"]) == (
        2,
        "18",
        "submitted",
        40,
    )
    (old,) = entry["history"]
    assert (old["attempt"], old["job_id"], old["state"], old["error"], old["seconds"]) == (
        1,
        "17_0",
        "failed",
        "boom",
        3.0,
    )
    assert old["minutes"] == 20
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir()) == ["jobs.json"]
    again = JobBook(tmp_path, "slurm")  # a restarted driver reads what the first wrote
    assert again.attempt("f2/GA_seed0") == 2 and again.waiting("f2/GA_seed0") is not None
    assert again.waiting("f2/GA_seed1") is None and again.attempt("f2/GA_seed1") == 0


def test_a_second_driver_is_refused_before_it_writes(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    with driver_lock(out):
        holder = json.loads((out / "sweep" / "driver.json").read_text())
        assert holder["pid"] == os.getpid()
        with pytest.raises(
            UsageError, match=rf"another llome-jax sweep drives .*pid {os.getpid()}"
        ):
            run_sweep(_plan(), out, "inline", report=False, log=lambda line: None)
    assert not (out / "runs").exists() and not (out / "sweep" / "jobs.json").exists()
    handle = acquire_lock(out / "sweep")  # the lock went with the block
    handle.close()


def test_status_reads_each_runs_standing_from_the_files(tmp_path: pathlib.Path) -> None:
    out = tmp_path
    runs = out / "runs" / "f2"
    for seed in (0, 2):
        (runs / f"GA_seed{seed}").mkdir(parents=True)
    (runs / "GA_seed0" / "done.json").write_text("{}")
    (runs / "GA_seed2" / "rounds.jsonl").write_text('{"round": 0}\n{"round": 1}\n')
    failure = {"run": "f2/GA_seed1", "attempt": 2, "status": "failed", "error": "OOM"}
    (out / "failures.jsonl").write_text(json.dumps(failure) + "\n")
    book = JobBook(out, "slurm")
    book.submitted(_task("f2/GA_seed3", out, attempt=1), "99_3")
    (out / "sweep" / "requeues.jsonl").write_text(json.dumps({"run": "f2/GA_seed3"}) + "\n")
    rows = sweep_status(_plan(), out, ask_slurm=False)
    assert [(r.name, r.state, r.attempt, r.rounds) for r in rows] == [
        ("f2/GA_seed0", "finished", 0, -1),
        ("f2/GA_seed1", "failed", 2, -1),
        ("f2/GA_seed2", "stopped", 0, 1),
        ("f2/GA_seed3", "submitted", 1, -1),
    ]
    text = status_text(_plan(), out, rows).splitlines()
    assert text[0] == (
        f"plan 'four' in {out}: 4 run(s): 1 finished, 1 submitted, 1 failed, 1 stopped; "
        "1 requeue(s) in sweep/requeues.jsonl"
    )
    assert " ".join(text[1].split()) == "f2/GA_seed1 failed attempt 2, no round: failed: OOM"
    assert (
        "f2/GA_seed2" in text[2] and "after round 1 (resumes from its last checkpoint)" in text[2]
    )
    assert "f2/GA_seed3  submitted   attempt 1 job 99_3, no round: since" in text[3]


def test_a_timed_out_run_is_retried_with_twice_its_limit_up_to_the_cap(tmp_path) -> None:
    plan = _plan()  # 60 + 1 x 200 s: 9 min with margin 2, at least 10
    executor = SubmititExecutor(tmp_path, max_minutes=30)
    task = _task("f2/GA_seed0", tmp_path)
    assert executor.minutes(task.name, plan, task) == 10
    timeout = TaskResult(task.name, 1, "failed", job_state="TIMEOUT")
    longer = executor.retry(task, timeout, plan)
    assert longer.minutes == 20 and executor.minutes(task.name, plan, longer) == 20
    assert executor.retry(longer, timeout, plan).minutes == 30  # 40, capped at 30
    gave_up = TaskResult(
        task.name, 1, "failed", error="Job not requeued because: timed-out too many times."
    )
    assert executor.retry(task, gave_up, plan).minutes == 20
    other = TaskResult(task.name, 1, "failed", job_state="FAILED", error="RuntimeError: x")
    assert executor.retry(task, other, plan) is task


def test_the_warning_comes_a_rounds_estimate_early(tmp_path) -> None:
    plan = _plan()
    assert plan.round_seconds("f2/GA_seed0") == 200.0
    executor = SubmititExecutor(tmp_path)
    assert executor.signal_delay_s("f2/GA_seed0", plan, 60) == 400  # margin 2 x 200 s
    assert executor.signal_delay_s("f2/GA_seed0", plan, 10) == 300  # at most half the limit
    given = SubmititExecutor(tmp_path, slurm={"signal_delay_s": 120, "max_num_timeout": 5})
    assert given.signal_delay_s("f2/GA_seed0", plan, 60) == 120 and given.max_num_timeout == 5
    params = given.parameters(plan.resources_for("f2/GA_seed0"), 60, 1, 120)
    assert params["slurm_signal_delay_s"] == 120 and "slurm_max_num_timeout" not in params
    fast = plan_from_dict({**yaml.safe_load(PLAN), "costs": {"GA": [60, 5]}})
    assert executor.signal_delay_s("f2/GA_seed0", fast, 60) == 90  # submitit's own at least


def test_scontrol_times_and_a_requeued_logs_last_start() -> None:
    line = (
        "JobId=7 ArrayJobId=7 ArrayTaskId=0 JobState=TIMEOUT ExitCode=0:15 RunTime=1-02:03:04 "
        "StartTime=2026-12-02T10:00:00 EndTime=2026-12-03T12:03:04 BatchHost=node3"
    )
    state = parse_job_states(line)["7_0"]
    assert (state.start, state.end, state.node) == (
        "2026-12-02T10:00:00",
        "2026-12-03T12:03:04",
        "node3",
    )
    assert state.run_seconds == ((24 + 2) * 60 + 3) * 60 + 4
    pending = parse_job_states("JobId=8 JobState=PENDING RunTime=00:00:00 StartTime=Unknown")
    assert pending["8"].start == "" and pending["8"].run_seconds == 0.0
    log = "[f2/GA_seed0] attempt 1 on a, pid 10\n...\n[f2/GA_seed0] attempt 1 (requeue 1) on b, pid 20\n"
    assert logged_process(log) == ("b", 20)


@pytest.mark.slow
def test_a_job_slurm_started_again_leaves_a_restart_record(tmp_path, monkeypatch) -> None:
    out = tmp_path / "out"
    plan = _plan()
    assert run_sweep(plan, out, "inline", runs=["f2/GA_seed0"], report=False, log=print).done
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # what SLURM sets in a requeued job
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    task = _task("f2/GA_seed0", out, log_to_file=False, cache="off")
    result = SubmititTask()(task)
    assert (result.status, result.how) == ("done", "skipped")
    (record,) = read_requeues(out)
    assert (record["run"], record["how"], record["restart_count"]) == ("f2/GA_seed0", "restart", 1)
    assert (record["job_id"], record["resumes_after_round"]) == ("41", 1)
    assert SubmititTask()(task.__class__(**{**task.__dict__, "requeues": 1})).how == "skipped"
    assert len(read_requeues(out)) == 1  # submitit's own requeue: recorded when it stopped
