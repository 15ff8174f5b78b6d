"""Sweep plans as data (:mod:`llome_jax.sweep.plans`): YAML plans and their errors, the paper's
plan at the ``paper`` scale (planned and dry-run only), resources and time limits, SLURM arrays
(built, not submitted), the per-task compilation caches, and a new optimizer joining a plan by
name (one real in-process sweep of two tiny GA runs)."""

from __future__ import annotations

import csv
import dataclasses
import json
import pathlib

import pytest

from llome_jax.bench import cli as paper_cli
from llome_jax.bench import execution
from llome_jax.bench.plan import SCALES, UsageError, budget_after_round0
from llome_jax.commands import sweep as sweep_command
from llome_jax.sweep import load_plan, paper_plan, plan_from_dict, run_sweep
from llome_jax.sweep.engines import SubmititExecutor
from llome_jax.sweep.plans import Resources
from llome_jax.sweep.tasks import Task

TINY = """
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
resources:
  default: {mem_gb: 2}
  llome: {cpus: 2}
"""


def test_a_yaml_plan_is_the_paper_drivers_runs(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    plan = load_plan(path)
    assert plan.name == "tiny" and plan.scale_name == "smoke" and plan.figures == ("solver",)
    assert plan.names == [
        "f2/GA_seed0",
        "f2/GA_seed1",
        "f2/LLOME-MargE_seed0",
        "f2/LLOME-MargE_seed1",
    ]
    assert plan.scale.rounds == 1 and plan.scale.functions == ("f2",)
    overrides = dict(plan.scale.llome_overrides)
    assert overrides["finetune.first_round_min_steps"] == 16  # after the smoke scale's 96
    assert overrides["text_format"] == "compact" and overrides["num_seeds"] == 4
    spec = plan.spec("f2/LLOME-MargE_seed1")
    cfg = execution.llome_config(spec, plan.scale)
    assert (cfg.preset, cfg.rounds, cfg.seed) == ("smoke", 1, 1)
    assert cfg.schedule == (("sft", 1), ("marge", 1))
    assert cfg.refine.num_iterations == 1 and cfg.finetune.epochs == 1
    assert budget_after_round0(plan.scale) == 32  # 1 round of j = 32
    assert plan.resources_for("f2/GA_seed0") == Resources(cpus=1, gpus=0, mem_gb=2.0)
    assert plan.resources_for("f2/LLOME-MargE_seed0") == Resources(cpus=2, gpus=0, mem_gb=2.0)
    # a label budget of its own, read by the runs and the report alike
    budget = plan_from_dict({**_tiny_dict(), "budget": 20})
    assert budget_after_round0(budget.scale) == 20
    # the paper's plan from YAML: no functions
    paper = plan_from_dict({"scale": "cpu", "figures": ["solver"], "methods": "GA"})
    assert paper.names == [s.name for s in paper_plan("cpu", "solver", "GA").runs]
    # --functions narrows figure 1 to those functions, as llome-jax paper does
    f2_only = paper_plan("cpu", "solver", "GA", functions="f2")
    assert f2_only.names == [f"f2/GA_seed{k}" for k in range(8)]
    assert f2_only.names == [n for n in paper.names if n.startswith("f2/")]
    with pytest.raises(UsageError, match="unknown function 'f9'"):
        paper_plan("cpu", functions="f9")


def _tiny_dict() -> dict:
    import yaml

    return yaml.safe_load(TINY)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"seed": [0]}, "unknown plan key(s) 'seed'"),
        ({"scale": "huge"}, "unknown scale 'huge'"),
        ({"methods": ["GA", "BO"]}, "unknown method 'BO'"),
        ({"seeds": [0, 0]}, "seeds repeats a value"),
        ({"seeds": ["a"]}, "seeds must be non-negative integers"),
        ({"rounds": 0}, "rounds must be a positive integer"),
        ({"functions": ["f9"]}, "unknown function 'f9'"),
        ({"presets": {"lambo": "cpu"}}, "presets takes llome, lambo2"),
        ({"optimizers": {"X": "nofactory"}}, "neither a registered optimizer nor MODULE:ATTR"),
        ({"optimizers": {"X": ":make"}}, "a factory is named MODULE:ATTR"),
        ({"resources": {"ga": {"cores": 2}}}, "resources.ga takes"),
        ({"costs": {"GA": 3}}, "costs.GA is [round 0 seconds, seconds per round]"),
        ({"seeds": None}, "names its methods and seeds too"),
    ],
)
def test_a_bad_plan_is_refused_naming_the_problem(change: dict, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        plan_from_dict({**_tiny_dict(), **change})
    assert message in str(caught.value)


def test_the_paper_scale_plans_the_papers_settings_for_gpus(tmp_path: pathlib.Path, capsys) -> None:
    """The ``paper`` scale (planned, never run in tests): LLOME's ``paper`` preset with the
    given weights, LaMBO-2's ``paper`` preset, 20K labels after round 0, no run from the tiny
    prior, one GPU per LLOME and LaMBO-2 run, and time limits from its cost table."""
    scale = SCALES["paper"]
    assert budget_after_round0(scale) == 20_000 and scale.rounds == 10
    plan = paper_plan("paper", weights="/models/pythia-2.8b")
    assert "f2/LLOME-MargE-prior_seed0" not in plan.names
    assert "f2/LLOME-MargE_seed7" in plan.names and plan.difficulty
    spec = plan.spec("f2/LLOME-MargE_seed0")
    cfg = execution.llome_config(spec, plan.scale)
    assert (cfg.preset, cfg.model, cfg.weights) == ("paper", "2.8b", "/models/pythia-2.8b")
    assert cfg.labels_per_round == 2000 and cfg.round0_ga.num_particles == 1000
    lambo = execution.lambo_config(plan.spec("f2/LaMBO-2_seed0"), plan.scale, cfg)
    assert lambo.model_preset == "paper" and lambo.labels_per_round == 2000
    assert plan.resources_for("f2/LLOME-MargE_seed0") == Resources(4, 1, 64.0)
    assert plan.resources_for("f2/LaMBO-2_seed0") == Resources(2, 1, 16.0)
    assert plan.resources_for("f2/GA_seed0") == Resources(1, 0, None)
    assert plan.time_limit_minutes("f2/LLOME-MargE_seed0") == 2 * (600 + 10 * 1200) // 60
    # without weights a paper-scale LLOME run is refused before anything is written
    bare = paper_plan("paper")
    run_dir = tmp_path / "runs" / spec.name
    with pytest.raises(ValueError, match="--weights"):
        execution.run_one(bare.spec(spec.name), bare.scale, run_dir, progress=False)
    assert not run_dir.exists()
    # the dry run lists resources, limits and the wall time on 64 workers
    argv = ["--scale", "paper", "--out", str(tmp_path / "out"), "--dry-run", "--workers", "64"]
    args = _parse(argv)
    assert sweep_command.run(args) == 0
    text = capsys.readouterr().out
    assert "f2/LLOME-MargE_seed0" in text and "4 CPU 1 GPU 64 GB, limit 420 min  todo" in text
    assert "on 64 worker(s) about" in text
    assert not (tmp_path / "out").exists()


def _parse(argv: list[str]):
    import argparse

    parser = argparse.ArgumentParser()
    sweep_command.add_arguments(parser)
    return parser.parse_args(argv)


def test_slurm_arrays_group_runs_by_resources_and_time_limit(tmp_path: pathlib.Path) -> None:
    plan = paper_plan("paper", only="solver", methods="GA,LLOME-MargE", weights="/w")
    tasks = [Task(n, plan.spec(n), plan.scale, str(tmp_path)) for n in plan.names]
    executor = SubmititExecutor(tmp_path, margin=1.5, parallelism=16, slurm={"partition": "gpu"})
    groups = executor.groups(tasks, plan)
    arrays = {p["timeout_min"]: (p, [t.name for t in group]) for p, group in groups}
    ga_f2 = plan.time_limit_minutes("f2/GA_seed0", 1.5)
    params, names = arrays[ga_f2]
    # the GA on every function of L = 32 (f2's among them): one array
    assert {n.split("/")[1].split("_")[0] for n in names} == {"GA"}
    assert {n for n in plan.names if n.startswith("f2/GA")} <= set(names)
    assert params["cpus_per_task"] == 1 and params["gpus_per_node"] == 0
    assert "mem_gb" not in params and params["slurm_partition"] == "gpu"
    params, names = arrays[plan.time_limit_minutes("f2/LLOME-MargE_seed0", 1.5)]
    assert len(names) == 8 and params["gpus_per_node"] == 1 and params["mem_gb"] == 64.0
    assert params["slurm_array_parallelism"] == 8 and params["timeout_min"] == 315
    assert sum(len(names) for _, names in arrays.values()) == len(plan.names)


def test_makespan_on_workers() -> None:
    assert sweep_command.makespan([], 4) == 0.0
    assert sweep_command.makespan([5, 4, 3, 3, 3], 2) == 10.0  # greedy (the best is 9)
    assert sweep_command.makespan([10, 1, 1], 64) == 10.0


def test_each_printed_job_has_its_own_compilation_cache(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``llome-jax paper --print-jobs`` commands select one run each: each caches under its own
    run's name (they run at the same time in an array), not all under ``w0``."""
    from llome_jax.bench import difficulty
    from llome_jax.host import compile_cache

    monkeypatch.setitem(SCALES, "smoke", dataclasses.replace(SCALES["smoke"], functions=("f2",)))
    caches = []
    monkeypatch.setattr(compile_cache, "enable", lambda path, *a: caches.append(path))
    monkeypatch.setattr(execution, "run_one", lambda spec, scale, path, progress: "skipped")
    monkeypatch.setattr(difficulty, "run_difficulty", lambda scale, path: "skipped")
    out = tmp_path / "out"
    base = ["--scale", "smoke", "--only", "1,10", "--methods", "GA", "--out", str(out)]
    for extra in (["--runs", "f2/GA_seed0"], ["--runs", "ga_difficulty"], ["--runs", "*"], []):
        assert paper_cli.main([*base, *extra, "--no-report", "--no-progress"]) == 0
    tagged = ["--worker-tag", "w3 "]
    assert paper_cli.main([*base, *tagged, "--no-report", "--no-progress"]) == 0
    names = [path.name for path in caches]
    assert names[:2] == ["f2__GA_seed0", "ga_difficulty"]
    assert names[2].startswith("runs-") and names[3:] == ["w0", "w3"]
    assert {path.parent for path in caches} == {out / ".jax_cache"}


def make_ga(spec, scale, llome_cfg):
    """A "new" optimizer for the plan below: the GA's plug-in under another name (any object
    that implements the round protocol of ``llome_jax.run.runner`` would do)."""
    from llome_jax.ga import optimizer as ga_optimizer

    return ga_optimizer.GeneticAlgorithm(execution.ga_config(spec, scale, llome_cfg))


def test_a_new_optimizer_joins_a_plan_by_name(tmp_path: pathlib.Path) -> None:
    """``optimizers: {MyGA: MODULE:ATTR}`` runs through the same path (run directory, budget,
    report): here the GA under another name, whose curve is the GA's."""
    plan = plan_from_dict(
        {
            **_tiny_dict(),
            "methods": ["GA", "MyGA"],
            "seeds": [0],
            "optimizers": {"MyGA": f"{__name__}:make_ga"},
            "costs": {"MyGA": [12, 5]},
        }
    )
    assert plan.spec("f2/MyGA_seed0").kind == f"{__name__}:make_ga"
    assert plan.seconds("f2/MyGA_seed0") == 17.0
    out = tmp_path / "out"
    result = run_sweep(plan, out, "inline", log=lambda line: None)
    assert result.done == ("f2/GA_seed0", "f2/MyGA_seed0") and not result.missing
    with open(out / "curves.csv", newline="") as stream:
        rows = list(csv.DictReader(stream))
    curve = {
        m: [(r["round"], r["labels"], r["min_regret"]) for r in rows if r["method"] == m]
        for m in ("GA", "MyGA")
    }
    assert curve["GA"] == curve["MyGA"] and len(curve["GA"]) == 2
    report = (out / "report.md").read_text()
    assert "## Sweep" in report and "2 finished, 0 missing" in report
    # finished runs are skipped without a process; --runs selects, the report covers all
    again = run_sweep(plan, out, "inline", runs=["f2/My*"], log=lambda line: None)
    assert again.done == ("f2/MyGA_seed0",) and not again.results
    with pytest.raises(UsageError, match="matches none"):
        run_sweep(plan, out, "inline", runs=["f3/*"], log=lambda line: None)


def test_the_local_pool_gives_each_run_its_gpus_and_cores(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process pool (processes faked here): one GPU per LLOME run by
    ``CUDA_VISIBLE_DEVICES``, an empty one for a CPU run on a GPU machine, each run pinned to its
    own core, a GPU handed on when its run ends, and a run asking for more GPUs than exist failed
    at once."""
    import pickle
    import subprocess

    from llome_jax.sweep.local import LocalExecutor
    from llome_jax.sweep.tasks import TaskResult

    class FakeProcess:  # what subprocess.Popen of llome_jax.sweep.child gives: ended at once
        returncode = 0
        count = 0

        def __init__(self, argv, **kwargs):
            *_, handed, result = argv
            task = pickle.loads(pathlib.Path(handed).read_bytes())
            env = dict(task.env)
            how = f"{env['CUDA_VISIBLE_DEVICES']}|{task.cores}"
            found = TaskResult(task.name, task.attempt, "done", how=how)
            pathlib.Path(result).write_bytes(pickle.dumps(found))
            FakeProcess.count += 1
            self.pid = FakeProcess.count

        def poll(self):
            return 0

        def wait(self):
            return 0

    monkeypatch.setattr(subprocess, "Popen", FakeProcess)
    plan = plan_from_dict(
        {
            **_tiny_dict(),
            "seeds": [0, 1, 2],
            "resources": {"llome": {"gpus": 1}, "f2/LLOME-MargE_seed2": {"gpus": 3}},
        }
    )
    tasks = [Task(n, plan.spec(n), plan.scale, str(tmp_path)) for n in plan.names]
    executor = LocalExecutor(workers=2, gpus=["0", "1"], cores=[4, 5])
    results = {r.name: r for r in executor.run(tasks, plan)}
    assert results["f2/GA_seed0"].how == "|(4,)" and results["f2/GA_seed1"].how == "|(5,)"
    assert results["f2/GA_seed2"].how in ("|(4,)", "|(5,)")
    gpus = [results[f"f2/LLOME-MargE_seed{k}"].how.split("|") for k in (0, 1)]
    assert sorted(g for g, _ in gpus) == ["0", "1"]
    assert sorted(c for _, c in gpus) == ["(4,)", "(5,)"]
    failed = results["f2/LLOME-MargE_seed2"]
    assert failed.status == "failed" and "asks for 3 GPU(s); this machine has 2" in failed.error


def test_each_task_gets_its_own_compilation_cache_or_the_nodes(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llome_jax.host import compile_cache
    from llome_jax.sweep import tasks

    asked = []
    monkeypatch.setattr(compile_cache, "enable", lambda path, *a: asked.append(path) or False)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "node"))
    plan = plan_from_dict(_tiny_dict())
    for cache in ("task", "node", "off"):
        task = Task("f2/GA_seed1", plan.spec("f2/GA_seed1"), plan.scale, str(tmp_path), cache=cache)
        tasks._enable_cache(task, tmp_path)
    assert asked[0] == tmp_path / ".jax_cache" / "f2__GA_seed1"
    assert asked[1].parent == tmp_path / "node" and len(asked) == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"overrides": {"llome": {"finetune.epoch": 4}}},
            "overrides.llome: unknown setting 'finetune.epoch'; did you mean 'finetune.epochs'?",
        ),
        (
            {"overrides": {"lambo2": {"train.epoch": 1}}},
            "overrides.lambo2: unknown setting 'train.epoch'; did you mean 'train.epochs'?",
        ),
        (
            {"presets": {"llome": "smok"}},
            "presets.llome: unknown preset 'smok'; did you mean 'smoke'?",
        ),
        (
            {"resources": {"lamboo2": {"cpus": 2}}},
            "resources.lamboo2: not a kind, method or run of this plan; did you mean 'lambo2'?",
        ),
    ],
)
def test_a_typo_in_a_plan_is_refused_before_dry_run_prints(extra, message) -> None:
    """Issue 67, item 3: the whole plan is validated when it is read (``--dry-run`` and the
    sweep read it the same way), one line naming the key and the closest valid one."""
    base = {"scale": "smoke", "functions": ["f2"], "methods": ["GA", "LLOME-MargE", "LaMBO-2"]}
    with pytest.raises(UsageError) as refused:
        plan_from_dict({**base, "seeds": [0], **extra})
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
    # the same plan without the typo is accepted, resources by kind, method and run name
    ok = {"resources": {"ga": {"cpus": 1}, "LaMBO-2": {"cpus": 2}, "f2/GA_seed0": {"cpus": 1}}}
    assert len(plan_from_dict({**base, "seeds": [0], **ok}).runs) == 3


def test_a_registered_optimizer_joins_a_plan_by_its_name(tmp_path: pathlib.Path) -> None:
    """``optimizers: {Label: NAME}`` with a registered name (``llome_jax.optimizers``): the run
    gets the plan's shared settings (LLOME's round 0, ``j``, the budget) and shares round 0 with
    the GA of its seed; an unknown name is refused with the closest one."""
    plan = plan_from_dict(
        {
            **_tiny_dict(),
            "methods": ["GA", "Mine"],
            "seeds": [0],
            "optimizers": {"Mine": "local_search"},
        }
    )
    assert plan.spec("f2/Mine_seed0").kind == "registry:local_search"
    out = tmp_path / "out"
    result = run_sweep(plan, out, "inline", log=lambda line: None)
    assert result.done == ("f2/GA_seed0", "f2/Mine_seed0") and not result.missing

    def round0(name: str) -> list[str]:
        rows = (out / "runs" / name / "evaluated.csv").read_text().splitlines()[1:]
        return [row for row in rows if row.startswith("0,")]

    assert len(round0("f2/Mine_seed0")) > 20 and round0("f2/Mine_seed0") == round0("f2/GA_seed0")
    config = json.loads((out / "runs" / "f2" / "Mine_seed0" / "config.json").read_text())
    assert (config["optimizer"], config["method"]) == ("local_search", "Mine")
    with pytest.raises(
        UsageError,
        match="'local_serch' is neither a registered optimizer; did you mean 'local_search'",
    ):
        plan_from_dict(
            {**_tiny_dict(), "methods": ["X"], "seeds": [0], "optimizers": {"X": "local_serch"}}
        )
