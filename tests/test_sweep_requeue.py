"""Time limits, preemption and a driver that goes away, on a real single-node SLURM
(tests/slurm_cluster.py).

One sweep of two GA smoke runs (7 rounds each) on the cluster, driven by a separate process:

* ``f2/GA_seed1`` raises after round 1's record in its first attempt: the driver resubmits it at
  once, and its retry finishes while ``f2/GA_seed0`` is still running (not after the pass);
* ``f2/GA_seed0`` pauses after round 1's record; the driver process is then SIGKILLed (as a
  login node kills a long-lived process). ``--status`` reads where both stand; a new driver
  re-attaches to seed 0's job instead of submitting it again, and a third driver is refused;
* the test sends seed 0's job the scheduler's SIGUSR2 (``scancel --signal=USR2``, what SLURM
  sends before a time limit): the run finishes round 1, checkpoints, and submitit requeues
  the job, which resumes after round 1 and finishes. Its labels equal an uninterrupted run's.

A second sweep runs seed 0 alone under a real one-minute time limit: SLURM's own warning stops it
at the end of round 1, and the requeued job finishes with an uninterrupted run's labels.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time

import pytest
import yaml

from llome_jax.bench.plan import UsageError
from llome_jax.sweep import plan_from_dict, run_sweep
from llome_jax.sweep.tasks import FAULT_ENV, log_path
from tests.slurm_cluster import slurm_cluster  # noqa: F401 (a fixture)

#: two GA smoke runs of 7 rounds (rounds x j = 20 x 32 labels at 400 a round), no budget cap
PLAN = """
name: requeue
scale: smoke
functions: [f2]
methods: [GA]
seeds: [0, 1]
rounds: 20
budget: 100000
"""
PAUSED, FAILING = "f2/GA_seed0", "f2/GA_seed1"
#: seconds any one wait of this test may take before it fails (the whole test takes ~60 s)
TIMEOUT = 240.0
#: the first driver: a process of its own, polling every 0.5 s
DRIVER = """
import sys, yaml
from llome_jax.sweep import plan_from_dict, run_sweep
plan = plan_from_dict(yaml.safe_load(open(sys.argv[1]).read()))
run_sweep(plan, sys.argv[2], "slurm", retries=1, poll=0.5, python=sys.executable,
          cache="off", env={"LLOME_JAX_SWEEP_FAULT": sys.argv[3]}, report=False)
"""


def _wait(what: str, ready, cluster) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not ready():
        if time.monotonic() > deadline:
            cluster.cancel_jobs()
            pytest.fail(f"{what}: not within {TIMEOUT:.0f} s")
        time.sleep(0.3)


def _text(path: pathlib.Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _jobs(out: pathlib.Path) -> dict:
    try:
        return json.loads((out / "sweep" / "jobs.json").read_text())["runs"]
    except (OSError, ValueError, KeyError):
        return {}


def _job_ids() -> set[str]:
    text = subprocess.run(
        ["scontrol", "-o", "show", "job"], capture_output=True, text=True, timeout=30
    ).stdout
    return set(re.findall(r"^JobId=(\d+)", text, re.MULTILINE))


@pytest.mark.slow
def test_a_killed_driver_comes_back_and_a_warned_run_is_requeued_at_a_round_boundary(
    slurm_cluster,  # noqa: F811 (the fixture imported above)
    tmp_path: pathlib.Path,
) -> None:
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(PLAN)
    out = tmp_path / "out"
    faults = f"pause:{PAUSED}:1,raise:{FAILING}:1"
    before = _job_ids()
    with open(tmp_path / "driver1.log", "w") as log:
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(plan_file), str(out), faults],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **slurm_cluster.env()},
        )
    try:
        paused_log = log_path(out, PAUSED, 1)
        _wait(
            "seed 0 pauses", lambda: "fault injection: pausing" in _text(paused_log), slurm_cluster
        )
        _wait(
            "seed 1's retry finishes",
            lambda: _jobs(out).get(FAILING, {}).get("state") == "done",
            slurm_cluster,
        )
        # the retry ran while seed 0 still waited in its first job: not after the pass
        jobs = _jobs(out)
        assert jobs[FAILING]["attempt"] == 2 and jobs[FAILING]["history"][0]["state"] == "failed"
        assert jobs[PAUSED]["state"] == "submitted" and jobs[PAUSED]["attempt"] == 1
        assert (out / "runs" / FAILING / "done.json").exists()
        assert not (out / "runs" / PAUSED / "done.json").exists()
    finally:
        driver.kill()  # the login node ends the driver
        driver.wait(timeout=30)
    job = jobs[PAUSED]["job_id"]

    # --status, with no driver: seed 0 running in its job, seed 1 finished
    from llome_jax import cli

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(["sweep", str(plan_file), "--out", str(out), "--status"]) == 0
    status = printed.getvalue()
    assert "2 run(s): 1 finished, 1 running" in status, status
    assert re.search(rf"{PAUSED}\s+running\s+attempt 1 job {job}, round 1: RUNNING", status)

    # a new driver re-attaches to seed 0's job; a third one is refused
    lines: list[str] = []
    found: dict = {}

    def second() -> None:
        try:
            found["result"] = run_sweep(
                plan_from_dict(yaml.safe_load(PLAN)),
                out,
                "slurm",
                retries=1,
                poll=0.5,
                python=sys.executable,
                cache="off",
                log=lines.append,
            )
        except BaseException as error:  # raised again in the test's thread
            found["error"] = error

    runner = threading.Thread(target=second, daemon=True)
    with contextlib.redirect_stdout(io.StringIO()):
        runner.start()
        _wait(
            "the second driver re-attaches",
            lambda: any("to run" in x for x in lines),
            slurm_cluster,
        )
        assert f"re-attached to job {job} of {PAUSED} (RUNNING)" in lines
        assert "2 run(s) of plan 'requeue' on slurm: 1 finished, 1 re-attached" in lines[-1]
        with pytest.raises(UsageError, match="another llome-jax sweep drives"):
            run_sweep(plan_from_dict(yaml.safe_load(PLAN)), out, "slurm", report=False)

        # the scheduler's warning: seed 0 finishes round 1, checkpoints, and is requeued
        subprocess.run(["scancel", "--signal=USR2", job], check=True, timeout=30)
        requeues = out / "sweep" / "requeues.jsonl"
        _wait("the job is requeued", lambda: _text(requeues).strip() != "", slurm_cluster)
        record = json.loads(_text(requeues).splitlines()[0])
        assert (record["run"], record["how"], record["requeue"]) == (PAUSED, "requeue", 1)
        assert (record["job_id"], record["stopped_after_round"]) == (job, 1)
        # SLURM holds a requeued job about two minutes; let it start now
        _wait("the job is pending again", lambda: _pending(job), slurm_cluster)
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], timeout=30)
        runner.join(timeout=TIMEOUT)
    if runner.is_alive():
        slurm_cluster.cancel_jobs()
        pytest.fail("the second driver did not end:\n" + "\n".join(lines))
    if "error" in found:
        raise found["error"]
    result = found["result"]
    assert sorted(result.done) == [PAUSED, FAILING] and not result.missing
    assert [r.how for r in result.results] == ["resumed"]  # seed 0's job, watched to its end
    # two sbatch calls (the array of both runs, seed 1's retry), three jobs: nothing twice
    assert len(list((out / "sweep" / "submitit").glob("*/*_submission.sh"))) == 2
    assert len(_job_ids() - before) == 3
    text = _text(log_path(out, PAUSED, 1))
    assert "SIGUSR2 (time limit or preemption): finishing this round" in text
    assert f"[{PAUSED}] attempt 1 (requeue 1) on" in text
    assert f"resuming {out / 'runs' / PAUSED} after round 1" in text
    done = json.loads((out / "runs" / PAUSED / "done.json").read_text())
    assert (done["last_round"], done["stop_reason"][:20]) == (7, "its 7 rounds ended i")
    failures = [json.loads(x) for x in _text(out / "failures.jsonl").splitlines()]
    assert [(f["run"], f["attempt"]) for f in failures] == [(FAILING, 1)]  # the requeue is none
    report = _text(out / "report.md")  # the restarted driver's report: both runs, none missing
    assert "on the `slurm` executor: 2 finished, 0 missing" in report

    # the requeued run's labels are an uninterrupted run's
    once = tmp_path / "once"
    run_sweep(
        plan_from_dict(yaml.safe_load(PLAN)),
        once,
        "inline",
        runs=[PAUSED],
        report=False,
        log=lambda line: None,
    )
    for name in ("evaluated.csv",):
        assert _text(out / "runs" / PAUSED / name) == _text(once / "runs" / PAUSED / name)
    assert FAULT_ENV not in os.environ


def _pending(job: str) -> bool:
    text = subprocess.run(
        ["scontrol", "-o", "show", "job", job], capture_output=True, text=True, timeout=30
    ).stdout
    return "JobState=PENDING" in text


@pytest.mark.slow
def test_a_real_time_limit_inside_a_round_stops_at_its_end_and_the_requeued_run_finishes(
    slurm_cluster,  # noqa: F811 (the fixture imported above)
    tmp_path: pathlib.Path,
) -> None:
    """SLURM's own warning, not one the test sends: a one-minute time limit (``--slurm
    time=1``; USR2 30 s before it) ends while round 1 waits; the round finishes, the job is
    requeued, resumes after round 1 and finishes with an uninterrupted run's labels."""
    out = tmp_path / "out"
    found: dict = {}

    def sweep() -> None:
        try:
            found["result"] = run_sweep(
                plan_from_dict(yaml.safe_load(PLAN)),
                out,
                "slurm",
                runs=[PAUSED],
                poll=0.5,
                python=sys.executable,
                cache="off",
                env={FAULT_ENV: f"pause:{PAUSED}:1"},  # waits for a signal after round 1
                slurm={"time": 1},
                report=False,
                log=lambda line: None,
            )
        except BaseException as error:  # raised again in the test's thread
            found["error"] = error

    runner = threading.Thread(target=sweep, daemon=True)
    requeues = out / "sweep" / "requeues.jsonl"
    with contextlib.redirect_stdout(io.StringIO()):
        runner.start()
        _wait("SLURM's time-limit warning requeues the job", lambda: _text(requeues), slurm_cluster)
        job = json.loads(_text(requeues).splitlines()[0])["job_id"]
        _wait("the job is pending again", lambda: _pending(job), slurm_cluster)
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], timeout=30)
        runner.join(timeout=TIMEOUT)
    if runner.is_alive():
        slurm_cluster.cancel_jobs()
        pytest.fail("the sweep did not end")
    if "error" in found:
        raise found["error"]
    assert found["result"].done == (PAUSED,) and found["result"].failures == 0
    record = json.loads(_text(requeues).splitlines()[0])
    assert (record["how"], record["requeue"], record["stopped_after_round"]) == ("requeue", 1, 1)
    assert record["seconds"] < 60  # the warning came before the limit
    text = _text(log_path(out, PAUSED, 1))
    assert "SIGUSR2 (time limit or preemption): finishing this round" in text
    assert f"resuming {out / 'runs' / PAUSED} after round 1" in text
    once = tmp_path / "once"
    run_sweep(
        plan_from_dict(yaml.safe_load(PLAN)),
        once,
        "inline",
        runs=[PAUSED],
        report=False,
        log=lambda line: None,
    )
    assert _text(out / "runs" / PAUSED / "evaluated.csv") == _text(
        once / "runs" / PAUSED / "evaluated.csv"
    )
