"""Sweeps on real engines, on this machine: the ``local`` spawn pool, submitit's local executor
(the ``slurm`` executor's code path) and a local Ray cluster (``ray.init(num_cpus=2)``) each run
the smallest plan with GA and LLOME smoke runs on two seeds, and their ``curves.csv`` is byte for
byte the in-process driver's. In each, one task is killed midway (SIGKILL after its round 1
labels and record, before its checkpoint) and one raises: both failures are recorded in
``failures.jsonl`` and resubmitted, and both runs resume from their last checkpoint.

The engines are optional extras (``pip install "llome-jax[slurm,ray]"``; ``.ci/run`` installs
them): without one its test is skipped. The in-process reference is computed once per test
session, shared by pytest-xdist workers through a file lock.
"""

from __future__ import annotations

import csv
import io
import json
import os
import pathlib

import pytest
import yaml

from llome_jax.sweep import plan_from_dict, run_sweep
from llome_jax.sweep.tasks import FAULT_ENV

pytestmark = pytest.mark.slow

#: the smallest plan that still has GA and LLOME smoke runs on two seeds: one round after
#: round 0, a short first fine-tuning, one refinement iteration, a one-layer model (each task
#: process compiles its programs afresh, in time about proportional to the layers)
PLAN = """
name: tiny
scale: smoke
functions: [f2]
methods: [GA, LLOME-MargE]
seeds: [0, 1]
rounds: 1
overrides:
  llome:
    finetune: {first_round_min_steps: 16, epochs: 1}
    refine.num_iterations: 1
    num_seeds: 4
    model_overrides: [[num_hidden_layers, 1]]
"""
#: GA seed 1 is killed after round 1's record (before its checkpoint), GA seed 0 raises there
FAULTS = "kill:f2/GA_seed1:1,raise:f2/GA_seed0:1"


def _plan():
    return plan_from_dict(yaml.safe_load(PLAN))


def _env() -> dict[str, str]:
    """What every task gets: the faults, and this session's XLA and cache settings (so that a
    worker compiles as the in-process reference did)."""
    keep = ("XLA_FLAGS", "JAX_PLATFORMS", "LLOME_JAX_COMPILATION_CACHE")
    return {FAULT_ENV: FAULTS, **{k: os.environ[k] for k in keep if k in os.environ}}


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """``curves.csv`` of the plan run in-process exactly as ``llome-jax paper`` runs a plan
    (``execution.run_one`` per run, then ``report.write_report``), once per session."""
    from filelock import FileLock

    from llome_jax.bench import execution, report

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by this session's workers
    out = root / "sweep_reference"
    with FileLock(str(root / "sweep_reference.lock")):
        if not (out / "curves.csv").exists():
            plan = _plan()
            for spec in plan.runs:
                assert execution.run_one(spec, plan.scale, out / "runs" / spec.name, False) == "new"
            report.write_report(
                out, plan.scale_name, plan.scale, list(plan.runs), list(plan.figures), 0.0
            )
    return (out / "curves.csv").read_bytes()


def _rows(data: bytes, prefix: str = "") -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(data.decode())))
    return [rows[0]] + [r for r in rows[1:] if r[0].startswith(prefix)]


def _check_faults(out: pathlib.Path, killed: str) -> None:
    """Both faults are in failures.jsonl (with a traceback, or how the process died and the
    end of its log), and both runs were resumed in attempt 2 from their checkpoint."""
    records = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    by_run = {r["run"]: r for r in records}
    assert sorted(by_run) == ["f2/GA_seed0", "f2/GA_seed1"] and len(records) == 2
    raised = by_run["f2/GA_seed0"]
    assert raised["attempt"] == 1 and raised["status"] == "failed"
    assert raised["error"].startswith("RuntimeError: fault injection")
    assert "Traceback (most recent call last)" in raised["traceback"]
    died = by_run["f2/GA_seed1"]
    assert killed in died["error"], died
    assert "fault injection: SIGKILL" in died["traceback"]  # the end of the task's log
    for name in ("f2__GA_seed0", "f2__GA_seed1"):
        log = (out / "sweep" / "logs" / f"{name}.2.log").read_text()
        assert "attempt 2" in log and "resuming" in log  # from round 0's checkpoint
    report = (out / "report.md").read_text()
    assert "## Sweep" in report and "2 failed" not in report


def test_local_pool_records_retries_and_resumes(
    reference: bytes, tmp_path: pathlib.Path, capsys
) -> None:
    """The spawn pool on the GA runs: without retries both faults leave their runs missing
    (recorded, and named by the report); the next call resumes both."""
    out = tmp_path / "out"
    first = run_sweep(_plan(), out, "local", runs=["f2/GA_*"], env=_env(), retries=0)
    assert first.failures == 2 and sorted(first.missing) == ["f2/GA_seed0", "f2/GA_seed1"]
    assert "killed by SIGKILL" in first.missing["f2/GA_seed1"]
    report = (out / "report.md").read_text()
    assert "| f2/GA_seed0 | failed in attempt 1: RuntimeError: fault injection" in report
    assert "| f2/LLOME-MargE_seed0 | not selected (--runs) |" in report
    second = run_sweep(_plan(), out, "local", runs=["f2/GA_*"], env=_env(), retries=0)
    assert second.failures == 0 and not second.missing
    assert sorted(r.how for r in second.results) == ["resumed", "resumed"]
    _check_faults(out, "killed by SIGKILL")
    assert _rows((out / "curves.csv").read_bytes()) == _rows(reference, "f2/GA_")
    assert "0 missing" in capsys.readouterr().out


def _command(tmp_path: pathlib.Path, *flags: str) -> list[str]:
    """``llome-jax sweep PLAN --out OUT --retries 1 --env ...`` with ``flags``."""
    plan = tmp_path / "tiny.yaml"
    plan.write_text(PLAN)
    env = [f"--env={key}={value}" for key, value in _env().items()]
    return ["sweep", str(plan), "--out", str(tmp_path / "out"), "--retries", "1", *env, *flags]


def test_submitit_local_cluster_runs_the_plan_to_the_same_curves(
    reference: bytes, tmp_path: pathlib.Path
) -> None:
    """``llome-jax sweep --executor slurm`` on submitit's local cluster: jobs with their
    resources and time limits, a killed job resubmitted (``--retries 1``). (No ``capsys``:
    submitit's logging keeps the streams it was first imported with.)"""
    pytest.importorskip("submitit")
    from llome_jax import cli

    argv = ["--executor", "slurm", "--submitit-cluster", "local", "--workers", "2"]
    assert cli.main(_command(tmp_path, *argv)) == 0  # 1 if a run were missing
    out = tmp_path / "out"
    assert "4 finished, 0 missing" in (out / "report.md").read_text()
    _check_faults(out, "UncompletedJobError")
    assert (out / "curves.csv").read_bytes() == reference


@pytest.fixture
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # ray.init starts its processes
def test_ray_local_cluster_runs_the_plan_to_the_same_curves(
    reference: bytes, tmp_path: pathlib.Path, ray_cluster
) -> None:
    """``llome-jax sweep --executor ray``: Ray tasks with num_cpus, one run per worker process;
    a crashed worker resubmitted."""
    from llome_jax import cli

    assert cli.main(_command(tmp_path, "--executor", "ray")) == 0  # 1 if a run were missing
    assert ray_cluster.is_initialized()  # a cluster the sweep did not start keeps running
    out = tmp_path / "out"
    assert "4 finished, 0 missing" in (out / "report.md").read_text()
    _check_faults(out, "WorkerCrashedError")
    assert (out / "curves.csv").read_bytes() == reference
