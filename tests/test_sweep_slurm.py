"""The ``slurm`` executor on a real single-node SLURM (tests/slurm_cluster.py: Debian's
slurmctld, slurmd and munge, ``MaxArraySize=5``), and its array chunking on its own.

On the cluster one sweep of 6 GA smoke runs (one round) is submitted: more runs than
``MaxArraySize`` allows in one array (task indices 0..4), so it goes as arrays of 4 and 2. One
task (GA seed 4) holds after round 1's record until the test kills its process by PID (SIGKILL);
the sweep records that failure with the node, the job's state and exit code from ``scontrol``
(the cluster has no accounting, so no ``sacct``), resubmits it (``retries=1``), the retry
resumes from round 0's checkpoint, and every run finishes.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import pathlib
import re
import signal
import socket
import sys
import threading
import time

import pytest
import yaml

from llome_jax.sweep import plan_from_dict, run_sweep
from llome_jax.sweep.engines import (
    DEFAULT_MAX_ARRAY_SIZE,
    JobState,
    SubmititExecutor,
    array_chunks,
    max_array_size,
    parse_job_states,
)
from llome_jax.sweep.local import died
from llome_jax.sweep.tasks import FAULT_ENV, Task, log_path
from tests.slurm_cluster import MAX_ARRAY_SIZE, slurm_cluster  # noqa: F401 (a fixture)

#: 6 GA smoke runs of one round (4-9 s each on 2 shared cores): one more than MaxArraySize
PLAN = """
name: ga6
scale: smoke
functions: [f2]
methods: [GA]
seeds: [0, 1, 2, 3, 4, 5]
rounds: 1
"""
#: the run the test kills while it holds (the second array's first task)
HELD = "f2/GA_seed4"


def _plan():
    return plan_from_dict(yaml.safe_load(PLAN))


# ---------------------------------------------------------------------------------------------
# Chunking, MaxArraySize and scontrol's job states, without a cluster
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("count", "limit", "sizes"),
    [
        (7, 5, [4, 3]),  # indices 0..3 and 0..2, each below 5
        (8, 5, [4, 4]),
        (4, 5, [4]),
        (2500, 1001, [1000, 1000, 500]),
        (3, 1, [1, 1, 1]),  # only index 0: one task a job
        (3, 0, [1, 1, 1]),  # arrays off: plain jobs
        (0, 5, []),
    ],
)
def test_array_chunks_sizes(count: int, limit: int, sizes: list[int]) -> None:
    items = list(range(count))
    chunks = array_chunks(items, limit)
    assert [len(c) for c in chunks] == sizes
    assert [i for c in chunks for i in c] == items  # in order, each once


def test_max_array_size_from_scontrol_text_or_default(monkeypatch, tmp_path) -> None:
    config = "Configuration data as of ...\nMaxArraySize            = 5\nMaxJobCount = 10000\n"
    assert max_array_size(config) == 5
    assert max_array_size("MaxArraySize = (null)\n") == DEFAULT_MAX_ARRAY_SIZE == 1001
    assert max_array_size("MaxJobCount = 10000\n") == 1001
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol
    assert max_array_size() == 1001


def test_parse_job_states_names_array_tasks_as_submitit_does() -> None:
    text = (
        "JobId=12 ArrayJobId=10 ArrayTaskId=2 JobName=llome-jax JobState=FAILED "
        "Reason=NonZeroExitCode ExitCode=137:0 NodeList=vm BatchHost=vm NumCPUs=1\n"
        "JobId=10 ArrayJobId=10 ArrayTaskId=3-6%2 JobState=PENDING ExitCode=0:0 "
        "NodeList=(null) BatchHost=(null)\n"
        "JobId=20 JobName=one JobState=RUNNING ExitCode=0:0 NodeList=n[1-2] BatchHost=(null)\n"
    )
    assert parse_job_states(text) == {
        "10_2": JobState("FAILED", "137:0", "vm"),
        "20": JobState("RUNNING", "0:0", "n[1-2]"),
    }
    assert JobState("FAILED").ended and not JobState("RUNNING").ended


def test_executor_splits_each_group_below_max_array_size(tmp_path) -> None:
    plan = _plan()
    tasks = [Task(name, plan.spec(name), plan.scale, str(tmp_path)) for name in plan.names]
    executor = SubmititExecutor(tmp_path, max_array_size=5, parallelism=3)
    arrays = executor.arrays(tasks, plan)
    assert [len(chunk) for _, chunk in arrays] == [4, 2]
    assert [t.name for _, c in arrays for t in c] == [f"f2/GA_seed{k}" for k in range(6)]
    assert [p["slurm_array_parallelism"] for p, _ in arrays] == [3, 2]
    # --slurm max_array_size=3: chunks of 2, and not an sbatch option
    executor = SubmititExecutor(tmp_path, slurm={"max_array_size": "3", "qos": "low"})
    arrays = executor.arrays(tasks, plan)
    assert [len(chunk) for _, chunk in arrays] == [2, 2, 2]
    assert arrays[0][0]["slurm_qos"] == "low" and "slurm_max_array_size" not in arrays[0][0]
    with pytest.raises(ValueError, match="max_array_size must be a non-negative integer"):
        SubmititExecutor(tmp_path, slurm={"max_array_size": "many"})


def test_died_reads_host_and_pid_from_the_log(tmp_path) -> None:
    task = Task("f2/GA_seed0", None, _plan().scale, str(tmp_path), attempt=2)
    path = log_path(tmp_path, task.name, 2)
    path.parent.mkdir(parents=True)
    path.write_text("[f2/GA_seed0] attempt 2 on node-17, pid 4242\n  round 0 ...\n")
    result = died(task, "the process was killed by SIGKILL")
    assert (result.host, result.pid, result.status) == ("node-17", 4242, "failed")
    assert result.traceback.endswith("round 0 ...")


# ---------------------------------------------------------------------------------------------
# On the real cluster
# ---------------------------------------------------------------------------------------------
def _kill_when_held(out: pathlib.Path, killed: dict, stop: threading.Event) -> None:
    """Wait for the held task's log to say ``holding, pid N``, then SIGKILL ``N``."""
    path = log_path(out, HELD, 1)
    while not stop.is_set():
        text = path.read_text(errors="replace") if path.exists() else ""
        found = re.search(r"fault injection: holding, pid (\d+)", text)
        if found:
            killed["pid"] = int(found.group(1))
            os.kill(killed["pid"], signal.SIGKILL)
            return
        time.sleep(0.2)


#: seconds the cluster's sweep may take before the test gives up on it (it takes 30-40 s)
SWEEP_TIMEOUT = 300.0


def _sweep_on(cluster, out: pathlib.Path) -> tuple:
    """The 6-run sweep on ``cluster`` (module docstring): ``(result, printed lines, the killed
    PID)``. It runs in a thread, so that a sweep that never sees its jobs end fails the test
    after :data:`SWEEP_TIMEOUT` seconds (its jobs cancelled) instead of hanging it."""
    keep = ("XLA_FLAGS", "JAX_PLATFORMS", "LLOME_JAX_COMPILATION_CACHE")
    env = {FAULT_ENV: f"hold:{HELD}:1", **{k: os.environ[k] for k in keep if k in os.environ}}
    killed: dict = {}
    found: dict = {}
    lines: list[str] = []

    def sweep() -> None:
        try:
            found["result"] = run_sweep(
                _plan(),
                out,
                "slurm",
                retries=1,
                env=env,
                log=lines.append,
                poll=0.5,
                python=sys.executable,
                cache="off",
            )
        except BaseException as error:  # raised again in the test's thread
            found["error"] = error

    stop = threading.Event()
    killer = threading.Thread(target=_kill_when_held, args=(out, killed, stop), daemon=True)
    runner = threading.Thread(target=sweep, daemon=True)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        killer.start()
        runner.start()
        runner.join(timeout=SWEEP_TIMEOUT)
        stop.set()
    if runner.is_alive():
        cluster.cancel_jobs()
        pytest.fail(f"the sweep did not end in {SWEEP_TIMEOUT:.0f} s:\n" + "\n".join(lines))
    if "error" in found:
        raise found["error"]
    return found["result"], printed.getvalue().splitlines() + lines, killed.get("pid")


@pytest.mark.slow
def test_slurm_sweep_in_arrays_below_max_array_size_records_a_killed_task(
    slurm_cluster,  # noqa: F811 (the fixture imported above)
    tmp_path: pathlib.Path,
) -> None:
    """One sweep, two checks (one test, so that pytest-xdist starts one cluster): the arrays fit
    and every run finishes; the task killed by PID has its node, job state and exit code in
    ``failures.jsonl`` and finishes in its retry."""
    out = tmp_path / "out"
    result, printed, pid = _sweep_on(slurm_cluster, out)
    assert max_array_size() == MAX_ARRAY_SIZE == 5  # the cluster's own, through scontrol
    # arrays of 4 and 2 (indices below 5), then the killed run's retry alone
    submitted = [line for line in printed if line.startswith("submitted array")]
    assert len(submitted) == 3, printed
    assert " of 4 run(s) (1 of 2, MaxArraySize 5): 1 CPU, 0 GPU, 10 min each" in submitted[0]
    assert " of 2 run(s) (2 of 2, MaxArraySize 5)" in submitted[1]
    assert " of 1 run(s): " in submitted[2]
    names = [f"f2/GA_seed{k}" for k in range(6)]
    assert sorted(result.done) == names and not result.missing and result.failures == 1
    for name in names:  # one round after round 0, not stopped early
        done = json.loads((out / "runs" / name / "done.json").read_text())
        assert (done["last_round"], done["stop_reason"]) == (1, ""), name
        assert len(done["plan_fingerprint"]) == 64, name  # the worker stamped it on the node
    assert "6 finished, 0 missing" in (out / "report.md").read_text()
    rows = list(csv.DictReader(io.StringIO((out / "curves.csv").read_text())))
    for name in names:  # rounds 0 and 1, round 1 paying the smoke budget's 32 labels
        mine = [row for row in rows if row["run"] == name]
        assert [(r["round"], r["state"]) for r in mine] == [("0", "finished"), ("1", "finished")]
        assert int(mine[1]["labels"]) - int(mine[0]["labels"]) == 32, mine
    # every job ran this interpreter (the venv's), as its sbatch script says
    scripts = sorted((out / "sweep" / "submitit").glob("*/*_submission.sh"))
    assert len(scripts) == 3
    for script in scripts:
        assert f"{sys.executable} -u -m submitit.core._submit" in script.read_text()

    # the killed task: the second array's first task, SIGKILLed by the PID its log gave
    assert pid, "the held task never said its PID"
    second = re.search(r"submitted array (\d+) ", submitted[1]).group(1)
    records = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert len(records) == 1, records
    record = records[0]
    assert (record["run"], record["attempt"], record["status"]) == (HELD, 1, "failed")
    assert (record["executor"], record["job_id"]) == ("slurm", f"{second}_0")
    assert (record["host"], record["pid"]) == (socket.gethostname(), pid)  # the task's log
    assert (record["job_state"], record["exit_code"]) == ("FAILED", "137:0")  # srun: 128 + 9
    assert record["error"] == (
        f"the job ended FAILED with exit code 137:0 on {slurm_cluster.node} before returning a "
        f"result (job {second}_0)"
    )
    assert "fault injection: holding" in record["traceback"]  # the end of the task's log
    retried = log_path(out, HELD, 2).read_text()
    assert "attempt 2" in retried and "fault injection" not in retried
    assert [r.how for r in result.results if r.name == HELD] == ["", "resumed"]


# ---------------------------------------------------------------------------------------------
# Cluster settings on the real cluster: --max-minutes, --slurm setup/additional_parameters/...
# ---------------------------------------------------------------------------------------------
#: one GA run estimated at 60 + 1 round x 60 = 120 s: 4 min with the margin 2
CAPPED = """
name: capped
scale: smoke
functions: [f2]
methods: [GA]
seeds: [0]
rounds: 1
costs: {GA: [60, 60]}
resources:
  default: {mem_gb: 2}
"""


def _job_fields(job: str) -> dict[str, str]:
    """``scontrol -o show job JOB``'s ``KEY=VALUE`` fields (values without spaces)."""
    import subprocess

    text = subprocess.run(
        ["scontrol", "-o", "show", "job", job], capture_output=True, text=True, timeout=30
    ).stdout
    return dict(item.partition("=")[::2] for item in text.split() if "=" in item)


def _job_ids() -> list[str]:
    import subprocess

    text = subprocess.run(
        ["scontrol", "-o", "show", "job"], capture_output=True, text=True, timeout=30
    ).stdout
    return sorted(re.findall(r"^JobId=(\d+)", text, re.MULTILINE))


def _cli_in_thread(cluster, argv: list[str]) -> int:
    """``cli.main(argv)`` in a thread, failing the test after :data:`SWEEP_TIMEOUT` s."""
    from llome_jax import cli

    found: dict = {}

    def main() -> None:
        try:
            found["code"] = cli.main(argv)
        except BaseException as error:  # raised again in the test's thread
            found["error"] = error

    runner = threading.Thread(target=main, daemon=True)
    with contextlib.redirect_stdout(io.StringIO()):
        runner.start()
        runner.join(timeout=SWEEP_TIMEOUT)
    if runner.is_alive():
        cluster.cancel_jobs()
        pytest.fail(f"the sweep did not end in {SWEEP_TIMEOUT:.0f} s")
    if "error" in found:
        raise found["error"]
    return found["code"]


@pytest.mark.slow
def test_slurm_cluster_settings_reach_the_job(
    slurm_cluster,  # noqa: F811 (the fixture imported above)
    tmp_path: pathlib.Path,
) -> None:
    """``llome-jax sweep --executor slurm``: a run estimated longer than ``--max-minutes`` is
    refused (exit 2, no job, no OUT); under a cap of 3 min the job's TimeLimit is 3 min (not
    the 4 its estimate and margin give), its ``setup`` lines ran before the task, its
    ``additional_parameters`` comment and ``mem_per_cpu`` are the job's, and no ``--mem``."""
    plan = tmp_path / "capped.yaml"
    plan.write_text(CAPPED)
    out = tmp_path / "out"
    mark = tmp_path / "setup.txt"
    keep = ("XLA_FLAGS", "JAX_PLATFORMS")
    env = [f"--env={k}={os.environ[k]}" for k in keep if k in os.environ]
    argv = ["sweep", str(plan), "--out", str(out), "--executor", "slurm", *env]
    argv += ["--compile-cache", "off", "--min-minutes", "1", "--time-margin", "2"]
    before = _job_ids()
    assert _cli_in_thread(slurm_cluster, [*argv, "--max-minutes", "1"]) == 2  # 2 min > 1
    assert not out.exists() and _job_ids() == before  # nothing written, nothing submitted

    settings = [
        f"setup=[echo $SLURM_JOB_ID > {mark}, echo second line >> {mark}]",
        "additional_parameters={comment: llome-gap5}",
        "mem_per_cpu=512",
        "exclusive=false",
    ]
    argv += ["--max-minutes", "3", *(f"--slurm={item}" for item in settings)]
    assert _cli_in_thread(slurm_cluster, argv) == 0
    assert (out / "runs" / "f2" / "GA_seed0" / "done.json").exists()
    (folder,) = [p for p in (out / "sweep" / "submitit").iterdir() if p.is_dir()]
    job = folder.name  # one run: a plain job, not an array
    fields = _job_fields(job)
    assert fields["JobState"] == "COMPLETED", fields
    assert fields["TimeLimit"] == "00:03:00"  # capped from 4 min
    assert fields["Comment"] == "llome-gap5"
    assert fields["MinMemoryCPU"] == "512M"
    script = next(folder.parent.glob("*/*_submission.sh")).read_text()
    assert "#SBATCH --mem=" not in script and "--exclusive" not in script  # plan's 2 GB dropped
    assert mark.read_text().splitlines() == [fields["JobId"], "second line"]  # both lines ran
