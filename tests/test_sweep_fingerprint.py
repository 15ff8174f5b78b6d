"""A changed plan never reuses finished runs silently (:mod:`llome_jax.sweep.fingerprint`): the
plan fingerprint follows what determines a run's results and nothing else, a finished sweep
re-planned with other rounds is refused (exit 2, nothing written) or, with
``--rerun-changed``, run again from scratch, a ``done.json`` from before fingerprints is judged
by its ``config.json``, and the report says when the runs' own budgets differ (one real sweep of
two tiny GA runs, in process)."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from llome_jax import cli
from llome_jax.bench.plan import UsageError
from llome_jax.sweep import driver, plan_from_dict
from llome_jax.sweep.fingerprint import (
    FINGERPRINT,
    INPUTS,
    changed_runs,
    describe_changes,
    fingerprint_inputs,
    run_fingerprint,
)

PLAN = {
    "name": "tiny",
    "scale": "smoke",
    "functions": ["f2"],
    "methods": ["GA"],
    "seeds": [0, 1],
    "rounds": 1,
}
NAMES = ["f2/GA_seed0", "f2/GA_seed1"]


def _plan(**changes):
    return plan_from_dict({**PLAN, **changes})


def _print(plan, name: str = "f2/GA_seed0") -> str:
    return run_fingerprint(plan.spec(name), plan.scale)


def test_the_fingerprint_follows_results_settings_not_resources() -> None:
    base = _plan()
    assert len(_print(base)) == 64 and _print(base) == _print(_plan())
    assert _print(base) != _print(base, "f2/GA_seed1")  # the seed enters
    # what determines the results changes it
    for changed in (
        _plan(rounds=2),
        _plan(budget=20),
        _plan(overrides={"llome": {"round0_ga.num_particles": 100}}),
        _plan(presets={"llome": "cpu"}),
    ):
        assert _print(changed) != _print(base)
    # what only says where and how a run goes does not
    for same in (
        _plan(resources={"default": {"cpus": 4, "gpus": 1, "mem_gb": 8}}),
        _plan(costs={"GA": [1, 2]}),
        _plan(figures=["solver"], name="other"),
        _plan(weights="/somewhere/else"),  # a directory, not a setting
        _plan(overrides={"lambo2": {"train.epochs": 3}}),  # a GA run never reads LaMBO-2's
    ):
        assert _print(same) == _print(base)
    old = fingerprint_inputs(base.spec("f2/GA_seed0"), base.scale)
    new = fingerprint_inputs(*(lambda p: (p.spec("f2/GA_seed0"), p.scale))(_plan(rounds=2)))
    assert describe_changes(old, new) == "budget 32 -> 64, rounds 1 -> 2"
    tuned = _plan(overrides={"llome": {"round0_ga.num_particles": 100}})
    new = fingerprint_inputs(tuned.spec("f2/GA_seed0"), tuned.scale)
    assert describe_changes(old, new) == "overrides.llome.round0_ga.num_particles 200 -> 100"


def _files(out: pathlib.Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in sorted(out.rglob("*"))}


def _sweep(plan_file: pathlib.Path, out: pathlib.Path, *extra: str) -> int:
    return cli.main(["sweep", str(plan_file), "--out", str(out), "--executor", "inline", *extra])


def _done(out: pathlib.Path, name: str) -> dict:
    return json.loads((out / "runs" / name / "done.json").read_text())


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
    """A finished sweep of ``PLAN`` (two GA runs, one round) and its plan file."""
    root = tmp_path_factory.mktemp("fingerprint")
    plan_file = root / "tiny.yaml"
    plan_file.write_text(yaml.safe_dump(PLAN))
    out = root / "out"
    assert _sweep(plan_file, out, "--no-report") == 0
    return plan_file, out


def test_a_changed_plan_is_refused_then_rerun_from_scratch(
    finished: tuple[pathlib.Path, pathlib.Path], capsys, tmp_path: pathlib.Path
) -> None:
    plan_file, first = finished
    out = tmp_path / "out"
    import shutil

    shutil.copytree(first, out)
    base = _plan()
    for name in NAMES:
        done = _done(out, name)
        assert done[FINGERPRINT] == _print(base, name) and done["last_round"] == 1
        assert done[INPUTS]["rounds"] == 1 and "stop_reason" in done  # today's keys kept
    capsys.readouterr()
    # the same plan again: both finished, nothing to run
    assert _sweep(plan_file, out, "--no-report") == 0
    assert "2 finished, 0 to run" in capsys.readouterr().out
    # rounds 1 -> 2: refused, naming the runs and the change, before anything is written
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump({**PLAN, "rounds": 2}))
    before = _files(out)
    for extra in ((), ("--dry-run",)):
        assert _sweep(changed, out, *extra) == 2
        captured = capsys.readouterr()
        error = captured.err.strip()
        assert len(error.splitlines()) == 1 and captured.out == ""
        assert "2 finished run(s) were made by another plan: f2/GA_seed0, f2/GA_seed1" in error
        assert "budget 32 -> 64, rounds 1 -> 2" in error and "--rerun-changed" in error
    assert _files(out) == before
    # the dry run with --rerun-changed lists them as reruns, still writing nothing
    assert _sweep(changed, out, "--dry-run", "--rerun-changed") == 0
    assert capsys.readouterr().out.count(" rerun\n") == 2
    assert _files(out) == before
    # --rerun-changed: both run again from scratch and record the new plan's fingerprint
    assert _sweep(changed, out, "--rerun-changed") == 0
    text = capsys.readouterr().out
    assert "re-running 2 run(s) another plan made, from scratch" in text
    assert "2 finished, 0 to run" not in text and "0 finished, 2 to run" in text
    new = _plan(rounds=2)
    for name in NAMES:
        done = _done(out, name)
        assert done[FINGERPRINT] == _print(new, name) != _print(base, name)
        config = json.loads((out / "runs" / name / "config.json").read_text())
        assert config["budget"] == 64
    assert "Budget per run: 64 labels after round 0 (" in (out / "report.md").read_text()
    assert driver.check_changes(new, out, NAMES) == {}


def test_a_done_json_without_fingerprint_is_judged_by_its_config(
    finished: tuple[pathlib.Path, pathlib.Path], capsys, tmp_path: pathlib.Path
) -> None:
    plan_file, first = finished
    out = tmp_path / "out"
    import shutil

    shutil.copytree(first, out)
    for name in NAMES:  # as a sweep before fingerprints left them
        done = _done(out, name)
        (out / "runs" / name / "done.json").write_text(
            json.dumps({"last_round": done["last_round"], "stop_reason": done["stop_reason"]})
        )
    base, longer = _plan(), _plan(rounds=2)
    specs = [base.spec(name) for name in NAMES]
    # config.json agrees with the plan (budget 32, its rounds): accepted
    assert changed_runs(out, specs, base.scale) == {}
    capsys.readouterr()
    assert _sweep(plan_file, out, "--no-report") == 0
    assert "2 finished, 0 to run" in capsys.readouterr().out
    # it disagrees on the budget: changed, and said from config.json
    found = changed_runs(out, [longer.spec(name) for name in NAMES], longer.scale)
    assert found == dict.fromkeys(NAMES, "budget 32 -> 64 (config.json)")
    with pytest.raises(UsageError, match=r"2 finished run\(s\) were made by another plan"):
        driver.check_changes(longer, out, NAMES)
    # one run's config.json records another budget: the report says the runs differ
    path = out / "runs" / "f2/GA_seed1" / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "budget": 20}))
    assert set(changed_runs(out, specs, base.scale)) == {"f2/GA_seed1"}
    driver.write_sweep_report(base, out, "inline")
    report = (out / "report.md").read_text()
    assert "32 labels after round 0 planned, but the finished runs' own differ" in report
    assert "config.json: 20 labels in 1 run, 32 labels in 1 run" in report
