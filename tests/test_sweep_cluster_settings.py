"""Cluster settings of the ``slurm`` executor, without a cluster
(:mod:`llome_jax.sweep.cluster_settings`): ``--slurm KEY=VALUE`` values read as YAML lists,
mappings, booleans and counts (other text kept as given), ``mem_per_gpu`` without ``--mem``,
the ``--max-minutes`` cap on each run's time limit and its refusal (exit 2, one line, nothing
written under OUT). On the real cluster: tests/test_sweep_slurm.py."""

from __future__ import annotations

import os
import pathlib

import pytest
import yaml

from llome_jax import cli
from llome_jax.bench.plan import UsageError
from llome_jax.sweep import plan_from_dict, run_sweep
from llome_jax.sweep.cluster_settings import check_time_cap, parse_slurm_options
from llome_jax.sweep.engines import SubmititExecutor
from llome_jax.sweep.plans import Resources

#: two GA runs estimated at 600 s + 1 round x 60 s = 660 s = 11 min each (the plan's costs)
PLAN = """
name: capped
scale: smoke
functions: [f2]
methods: [GA]
seeds: [0, 1]
rounds: 1
costs: {GA: [600, 60]}
resources:
  default: {mem_gb: 2}
"""


def _plan(text: str = PLAN):
    return plan_from_dict(yaml.safe_load(text))


# ---------------------------------------------------------------------------------------------
# --slurm KEY=VALUE
# ---------------------------------------------------------------------------------------------
def test_slurm_values_lists_mappings_booleans_and_counts() -> None:
    found = parse_slurm_options(
        [
            "setup=[module load cuda, source .venv/bin/activate]",
            "additional_parameters={comment: llome run, mail-type: END, requeue: true, x: false}",
            "exclusive=true",
            "time=120",
            "mem_per_gpu=40G",
        ]
    )
    assert found == {
        "setup": ["module load cuda", "source .venv/bin/activate"],
        # true: a bare flag (#SBATCH --requeue); false: left out
        "additional_parameters": {"comment": "llome run", "mail-type": "END", "requeue": True},
        "exclusive": True,
        "time": 120,
        "mem_per_gpu": "40G",
    }
    assert type(found["time"]) is int and found["exclusive"] is True


def test_slurm_values_other_text_is_kept_as_given() -> None:
    found = parse_slurm_options(
        ["account=no", "qos=01", "partition=on", "setup=echo a: b", "exclusive=user"]
    )
    # YAML would read no/on as booleans and 01 as 1; a line with ': ' as a mapping
    assert found == {
        "account": "no",
        "qos": "01",
        "partition": "on",
        "setup": ["echo a: b"],
        "exclusive": "user",
    }
    assert parse_slurm_options(["exclusive=no"]) == {}  # false: no --exclusive=False line
    assert parse_slurm_options(["max_array_size=3"]) == {"max_array_size": 3}


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["account"], "--slurm takes KEY=VALUE, got 'account'"),
        (["=x"], "--slurm takes KEY=VALUE"),
        (["setup=[a, b"], "--slurm setup: '[a, b' is not a YAML list or mapping"),
        (["setup={a: b}"], "--slurm setup: a shell line or a list of them"),
        (["setup=[1, 2]"], "--slurm setup: a shell line or a list of them"),
        (["additional_parameters=[a]"], "--slurm additional_parameters: a mapping"),
        (["additional_parameters=comment"], "--slurm additional_parameters: a mapping"),
        (["time=1:00:00"], "--slurm time: a whole number"),  # YAML 1.1 would read 3600
        (["time=-5"], "--slurm time: a whole number"),
        (["exclusive=[a]"], "--slurm exclusive: true or false"),
        (["mem=8G", "mem_per_gpu=40G"], "--slurm mem and mem_per_gpu both ask for memory"),
    ],
)
def test_slurm_values_refused_in_one_line(items: list[str], message: str) -> None:
    with pytest.raises(UsageError) as error:
        parse_slurm_options(items)
    assert str(error.value).startswith(message), str(error.value)
    assert "\n" not in str(error.value)


def test_mem_per_gpu_asks_no_mem(tmp_path: pathlib.Path) -> None:
    plain = SubmititExecutor(tmp_path, slurm={"qos": "low"})
    params = plain.parameters(Resources(cpus=2, gpus=1, mem_gb=64.0), 30, 1)
    assert params["mem_gb"] == 64.0 and params["timeout_min"] == 30
    per_gpu = SubmititExecutor(
        tmp_path,
        slurm=parse_slurm_options(["mem_per_gpu=40G", "setup=[echo hi]", "exclusive=true"]),
    )
    params = per_gpu.parameters(Resources(cpus=2, gpus=1, mem_gb=64.0), 30, 1)
    assert "mem_gb" not in params
    assert (params["slurm_mem_per_gpu"], params["slurm_setup"]) == ("40G", ["echo hi"])
    assert params["slurm_exclusive"] is True


def test_mem_gb_beside_mem_per_gpu_is_refused(tmp_path: pathlib.Path, capsys) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN)
    out = tmp_path / "out"
    argv = ["sweep", str(path), "--out", str(out), "--executor", "slurm"]
    argv += ["--submitit-cluster", "local", "--mem-gb", "8", "--slurm", "mem_per_gpu=40G"]
    assert cli.main(argv) == 2
    err = _error(capsys)
    assert err == (
        "llome-jax sweep: error: --mem-gb and --slurm mem_per_gpu both ask for memory (sbatch "
        "refuses --mem beside --mem-per-gpu); give one"
    )
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# Time limits and the --max-minutes cap
# ---------------------------------------------------------------------------------------------
def test_time_limits_capped() -> None:
    plan = _plan()
    name = "f2/GA_seed0"
    assert plan.seconds(name) == 660.0  # 600 + 1 x 60
    assert plan.time_limit_minutes(name, 2.0, 10) == 22  # 1320 s
    assert plan.time_limit_minutes(name, 2.0, 10, 12) == 12  # capped
    assert plan.time_limit_minutes(name, 2.0, 10, 30) == 22  # under the cap
    assert plan.time_limit_minutes(name, 0.5, 10, 30) == 10  # 330 s: the floor
    assert plan.time_limit_minutes(name, 0.5, 10, 8) == 8  # the cap wins over the floor


def test_executor_time_limits_fixed_capped_and_grouped(tmp_path: pathlib.Path) -> None:
    plan = _plan()
    capped = SubmititExecutor(tmp_path, margin=2.0, min_minutes=10, max_minutes=15)
    assert capped.minutes("f2/GA_seed1", plan) == 15
    fixed = SubmititExecutor(tmp_path, slurm={"time": "45"})
    assert fixed.minutes("f2/GA_seed1", plan) == 45
    from llome_jax.sweep.tasks import Task

    tasks = [Task(n, plan.spec(n), plan.scale, str(tmp_path)) for n in plan.names]
    ((params, group),) = capped.arrays(tasks, plan)
    assert params["timeout_min"] == 15 and len(group) == 2 and "slurm_time" not in params
    with pytest.raises(UsageError, match=r"^--slurm time=45 is longer than --max-minutes 30"):
        SubmititExecutor(tmp_path, slurm={"time": 45}, max_minutes=30)
    with pytest.raises(UsageError, match=r"^--max-minutes: a whole number of minutes >= 1"):
        SubmititExecutor(tmp_path, max_minutes=0)


def test_check_time_cap_names_the_runs_over() -> None:
    check_time_cap({"a": 600.0, "b": 5.0}, 10)  # exactly 10 min: fits
    check_time_cap({"a": 1e9}, None)  # no cap
    with pytest.raises(UsageError) as error:
        check_time_cap({"a": 601.0, "b": 60.0, "c": 3000.0, "d": 700, "e": 800}, 10)
    assert str(error.value).startswith(
        "--max-minutes 10: 4 run(s) estimated longer than the cap: a (11 min), c (50 min), "
        "d (12 min) and 1 more; raise it"
    )


def _error(capsys) -> str:
    """The one error line the command printed (other notes, e.g. a renamed setting's, aside)."""
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("llome-jax sweep")]
    assert len(lines) == 1, lines
    return lines[0]


def _snapshot(root: pathlib.Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")} | {
        ".": root.stat().st_mtime_ns
    }


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_run_longer_than_the_cap_is_refused_and_nothing_written(
    tmp_path: pathlib.Path, capsys, dry_run: bool
) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN)
    out = tmp_path / "out"
    argv = ["sweep", str(path), "--out", str(out), "--executor", "slurm"]
    argv += ["--submitit-cluster", "local", "--max-minutes", "10"]
    argv += ["--dry-run"] if dry_run else []
    assert cli.main(argv) == 2
    err = _error(capsys)
    assert err.startswith(
        "llome-jax sweep: error: --max-minutes 10: 2 run(s) estimated longer than the cap: "
        "f2/GA_seed0 (11 min), f2/GA_seed1 (11 min); raise it"
    ), err
    assert not out.exists()  # nothing written, nothing submitted
    # an OUT that exists is left as it was (no file added or touched)
    (out / "runs").mkdir(parents=True)
    (out / "notes.txt").write_text("mine\n")
    os.utime(out / "notes.txt", ns=(1_000_000_000, 1_000_000_000))
    before = _snapshot(out)
    assert cli.main(argv) == 2
    assert _snapshot(out) == before
    # the Python API refuses the same, before writing
    other = tmp_path / "other"
    with pytest.raises(UsageError, match=r"^--max-minutes 10: 2 run\(s\)"):
        run_sweep(_plan(), other, "slurm", cluster="local", max_minutes=10)
    assert not other.exists()


def test_dry_run_prints_the_capped_limits(tmp_path: pathlib.Path, capsys) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN)
    argv = ["sweep", str(path), "--out", str(tmp_path / "out"), "--executor", "slurm"]
    assert cli.main([*argv, "--dry-run", "--max-minutes", "12"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "f2/GA_seed" in line]
    assert len(lines) == 2 and all("1 CPU 0 GPU 2 GB, limit 12 min  todo" in x for x in lines)
    assert cli.main([*argv, "--dry-run"]) == 0  # no cap: 660 s x 2 = 22 min
    assert "limit 22 min" in capsys.readouterr().out
    assert cli.main([*argv, "--dry-run", "--slurm", "time=40"]) == 0
    assert "limit 40 min" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_a_plans_mem_gb_null_asks_for_no_memory() -> None:
    text = PLAN.replace("default: {mem_gb: 2}", "default: {mem_gb: 2}\n  GA: {mem_gb: null}")
    assert _plan(text).resources_for("f2/GA_seed0") == Resources(cpus=1, gpus=0, mem_gb=None)
    assert _plan().resources_for("f2/GA_seed0") == Resources(cpus=1, gpus=0, mem_gb=2.0)
    with pytest.raises(UsageError, match=r"^resources.default.mem_gb: GB >= 0"):
        _plan(PLAN.replace("{mem_gb: 2}", "{mem_gb: -1}"))


def test_a_plans_slurm_settings_are_read_checked_and_under_the_command_lines(
    tmp_path: pathlib.Path, capsys
) -> None:
    data = yaml.safe_load(PLAN)
    data["slurm"] = {"setup": "module load python", "max_jobs": "3", "max_minutes": 12}
    plan = plan_from_dict(data)
    assert dict(plan.slurm) == {"setup": ["module load python"], "max_jobs": 3, "max_minutes": 12}
    with pytest.raises(UsageError, match=r"^plan key slurm"):  # a count that is not one
        plan_from_dict({**data, "slurm": {"max_jobs": "many"}})
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    argv = ["sweep", str(path), "--out", str(tmp_path / "out"), "--executor", "slurm"]
    assert cli.main([*argv, "--dry-run"]) == 0  # the plan's cap: 22 min -> 12
    lines = [line for line in capsys.readouterr().out.splitlines() if "f2/GA_seed" in line]
    assert len(lines) == 2 and all("limit 12 min  todo" in line for line in lines), lines
    assert cli.main([*argv, "--dry-run", "--max-minutes", "15"]) == 0  # the command line wins
    assert "limit 15 min" in capsys.readouterr().out
    assert cli.main([*argv, "--dry-run", "--slurm", "max_minutes=10"]) == 2  # 11 min > 10
    assert _error(capsys).startswith("llome-jax sweep: error: --max-minutes 10: 2 run(s)")
