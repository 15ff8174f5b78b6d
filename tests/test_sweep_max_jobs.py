"""``max_jobs`` and ``pack`` on a real single-node SLURM (tests/slurm_cluster.py).

``max_jobs``, a cluster's ``MaxSubmitJobs``-style limit: a plan of three GA smoke runs says
``slurm: {max_jobs: 1}``; the sweep submits one job, the next only once it has ended, and
``squeue``, polled while the sweep runs, never lists more than one job of it. ``pack``: four
runs with ``slurm: {pack: 2}`` go as one array of two jobs, two runs each, each job's time
limit the two runs' added; every run finishes, and ``jobs.json`` gives each pair one job. The
same plan with another round is then refused for the four runs it changes, submitting nothing."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import subprocess
import sys
import threading

import pytest
import yaml

from llome_jax.bench.plan import UsageError
from llome_jax.sweep import plan_from_dict, run_sweep
from tests.slurm_cluster import slurm_cluster  # noqa: F401 (a fixture)

PLAN = """
name: one-at-a-time
scale: smoke
functions: [f2]
methods: [GA]
seeds: [0, 1, 2]
rounds: 1
slurm: {max_jobs: 1}
"""
#: seconds the sweep may take before the test fails (it takes ~20 s)
TIMEOUT = 240.0


def _queued(env: dict[str, str]) -> int:
    """How many jobs (array tasks one each) ``squeue`` lists now."""
    text = subprocess.run(
        ["squeue", "-h", "-r", "-o", "%i"], env=env, capture_output=True, text=True, timeout=30
    ).stdout
    return len(text.split())


def _sweep(plan: str, out: pathlib.Path, cluster) -> tuple:
    """``plan`` swept on the cluster in a thread: ``(result, printed lines)``."""
    found: dict = {}

    def sweep() -> None:
        try:
            found["result"] = run_sweep(
                plan_from_dict(yaml.safe_load(plan)),
                out,
                "slurm",
                poll=0.5,
                python=sys.executable,
                cache="off",
                report=False,
                log=lambda line: None,
            )
        except BaseException as error:  # raised again in the test's thread
            found["error"] = error

    runner = threading.Thread(target=sweep)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        runner.start()
        runner.join(timeout=TIMEOUT)
    if runner.is_alive():
        cluster.cancel_jobs()
        pytest.fail(f"the sweep did not end in {TIMEOUT:.0f} s")
    if "error" in found:
        raise found["error"]
    return found["result"], printed.getvalue().splitlines()


@pytest.mark.slow
def test_max_jobs_keeps_that_many_jobs_in_the_queue(
    slurm_cluster,  # noqa: F811 (the fixture imported above)
    tmp_path: pathlib.Path,
) -> None:
    env = {**os.environ, **slurm_cluster.env()}
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(_queued(env))
            stop.wait(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result, printed = _sweep(PLAN, tmp_path / "out", slurm_cluster)
    finally:
        stop.set()
    assert sorted(result.done) == [f"f2/GA_seed{k}" for k in range(3)] and not result.missing
    submitted = [line for line in printed if line.startswith("submitted")]
    assert len(submitted) == 3 and all(" of 1 run(s): " in line for line in submitted), submitted
    assert max(seen) == 1, seen  # one job at a time, and the watcher saw it


PACKED = """
name: packed
scale: smoke
functions: [f2]
methods: [GA]
seeds: [0, 1, 2, 3]
rounds: 1
slurm: {pack: 2}
"""


@pytest.mark.slow
def test_pack_runs_two_runs_in_each_job(
    slurm_cluster,  # noqa: F811 (the fixture imported above)
    tmp_path: pathlib.Path,
) -> None:
    out = tmp_path / "out"
    result, printed = _sweep(PACKED, out, slurm_cluster)
    names = [f"f2/GA_seed{k}" for k in range(4)]
    assert sorted(result.done) == names and not result.missing and result.failures == 0
    submitted = [line for line in printed if line.startswith("submitted")]
    assert len(submitted) == 1, printed  # one array of two jobs, each 2 x 10 min
    assert submitted[0].endswith(
        " of 2 job(s) of up to 2 run(s), 4 run(s): 1 CPU, 0 GPU, 20 min each"
    ), submitted
    runs = json.loads((out / "sweep" / "jobs.json").read_text())["runs"]
    jobs = [runs[name]["job_id"] for name in names]
    assert jobs[0] == jobs[1] != jobs[2] == jobs[3], jobs
    for name in names:  # each run went all the way, in its own log
        done = json.loads((out / "runs" / name / "done.json").read_text())
        assert done["last_round"] == 1, name
    scripts = sorted((out / "sweep" / "submitit").glob("*/*_submission.sh"))
    assert len(scripts) == 1 and "#SBATCH --time=20" in scripts[0].read_text()

    # the plan changed (2 rounds, not 1): refused for the runs it changes, nothing submitted
    changed = plan_from_dict(yaml.safe_load(PACKED.replace("rounds: 1", "rounds: 2")))
    with pytest.raises(UsageError) as refused:
        run_sweep(changed, out, "slurm", python=sys.executable, report=False)
    assert str(refused.value).startswith(
        "4 finished run(s) were made by another plan: f2/GA_seed0, f2/GA_seed1, f2/GA_seed2 "
        "and 1 more (budget 32 -> 64, rounds 1 -> 2); --rerun-changed runs them again"
    ), refused.value
    assert len(list((out / "sweep" / "submitit").glob("*/*_submission.sh"))) == 1
