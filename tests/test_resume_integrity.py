"""Resume integrity (issue 35, section 1): a run directory holds the function it runs on, its
``config.json`` never contradicts its data, and ``--resume`` alone continues a run with its
saved configuration (flags beside it override it, and the changes are printed)."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from llome_jax import cli
from llome_jax.objective import Objective, objective_config
from llome_jax.run import files, rundir

#: a tiny GA in round mode: 16 particles, 1 generation per round
GA = [
    "ga",
    "--particles",
    "16",
    "--survival-quantile",
    "0.25",
    "--initial-generations",
    "1",
    "--generations-per-round",
    "1",
]
GA += ["--no-progress"]


def _files(directory: pathlib.Path) -> dict[str, bytes]:
    """Every file under ``directory`` (relative path -> bytes)."""
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def _config(directory: pathlib.Path) -> dict:
    return json.loads((directory / "config.json").read_text())


def _rounds(directory: pathlib.Path) -> list[int]:
    lines = (directory / "rounds.jsonl").read_text().splitlines()
    return [json.loads(line)["round"] for line in lines]


def _describe_json(capsys: pytest.CaptureFixture, seed: int) -> str:
    capsys.readouterr()
    argv = ["ehrlich", "describe", "Ehr(8,16)-2-4-4", "--instance-seed", str(seed), "--json"]
    assert cli.main(argv) == 0
    return capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# The function is pinned
# ---------------------------------------------------------------------------------------------
def test_a_resume_cannot_switch_the_instance_behind_a_file_name(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's reproduction: a run on ``--function inst.json``, then another instance written
    to the same file, then ``--resume``. It used to continue on the other instance and exit 0."""
    monkeypatch.chdir(tmp_path)
    original = _describe_json(capsys, 3)
    pathlib.Path("inst.json").write_text(original)
    assert cli.main([*GA, "--rounds", "1", "--function", "inst.json", "--out", "r"]) == 0
    recorded = _config(tmp_path / "r")["function_digest"]
    assert recorded.startswith("sha256:")
    before = _files(tmp_path / "r")
    pathlib.Path("inst.json").write_text(_describe_json(capsys, 99))
    assert (
        cli.main([*GA, "--rounds", "2", "--function", "inst.json", "--out", "r", "--resume"]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "function 'inst.json' now gives another Ehrlich instance" in err
    assert recorded.removeprefix("sha256:")[:12] in err
    assert _files(tmp_path / "r") == before  # nothing written
    # --resume alone (the saved configuration) is refused the same way
    assert cli.main(["ga", "--resume", "--out", "r", "--no-progress"]) == 2
    assert "another Ehrlich instance" in capsys.readouterr().err
    # the original instance back: the run continues
    pathlib.Path("inst.json").write_text(original)
    assert cli.main(["ga", "--resume", "--out", "r", "--rounds", "2", "--no-progress"]) == 0
    assert _rounds(tmp_path / "r") == [0, 1, 2]
    assert _config(tmp_path / "r")["function_digest"] == recorded


def test_a_run_made_before_the_digest_resumes_and_records_it(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """A ``config.json`` without ``function_digest`` (written before it existed): not recorded,
    so the resume goes on, and the digest is recorded from then on."""
    out = tmp_path / "r"
    base = [*GA, "--function", "Ehr(8,8)-2-2-2", "--instance-seed", "1", "--out", str(out)]
    assert cli.main([*base, "--rounds", "1"]) == 0
    config = _config(out)
    digest = config.pop("function_digest")
    (out / "config.json").write_text(json.dumps(config, indent=1))
    assert cli.main([*base, "--rounds", "2", "--resume"]) == 0
    assert _config(out)["function_digest"] == digest
    assert _rounds(out) == [0, 1, 2]


def test_a_custom_objective_is_pinned_by_source_description_and_module_digest(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    module = tmp_path / "my_objective.py"
    module.write_text(
        "import numpy as np\n"
        "from llome_jax import Objective\n\n"
        "def _count(x):\n"
        "    return (np.asarray(x) == 3).sum(axis=1).astype(np.float32)\n\n"
        "onemax = Objective('onemax', 4, 8, _count, initial_solution=[0] * 8, optimal_value=8.0)\n"
    )
    out = tmp_path / "r"
    base = [*GA, "--objective", f"{module}:onemax", "--out", str(out)]
    assert cli.main([*base, "--rounds", "1"]) == 0
    config = _config(out)
    assert config["objective"] == f"{module}:onemax"
    assert config["objective_info"]["name"] == "onemax" and "function" not in config
    assert config["objective_digest"].startswith("sha256:")
    before = _files(out)
    module.write_text(module.read_text().replace("== 3", "== 2"))  # another function, same name
    capsys.readouterr()
    assert cli.main([*base, "--rounds", "2", "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"objective '{module}:onemax' is not the one the run used" in err
    assert _files(out) == before


def test_objective_config_pins_ehrlich_objectives_by_their_instance() -> None:
    from llome_jax import ehrlich
    from llome_jax.ehrlich.instances import function_digest

    fn = ehrlich.resolve_function("Ehr(8,8)-2-2-2", 1)
    other = ehrlich.resolve_function("Ehr(8,8)-2-2-2", 2)
    a = objective_config({"seed": 0}, Objective.from_ehrlich(fn, name="x"))
    b = objective_config({"seed": 0}, Objective.from_ehrlich(other, name="x"))
    assert a["objective"] == b["objective"] == "x"
    assert a["objective_digest"] != b["objective_digest"]
    plain = objective_config({"function": "Ehr(8,8)-2-2-2", "instance_seed": 1}, None)
    assert plain["function_digest"] == function_digest("Ehr(8,8)-2-2-2", 1)
    assert plain["function_digest"] != function_digest("Ehr(8,8)-2-2-2", 2)
    built_in_python = Objective("y", 4, 8, lambda x: x.sum(axis=1) * 1.0)
    assert "objective_digest" not in objective_config({}, built_in_python)  # nothing to pin


# ---------------------------------------------------------------------------------------------
# config.json never contradicts the data
# ---------------------------------------------------------------------------------------------
def test_a_do_nothing_resume_leaves_config_json_as_it_was(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """The issue's reproduction: ``--rounds 3``, then ``--rounds 1 --resume`` used to print
    "resuming after round 3", exit 0 and record ``"rounds": 1``; then ``--rounds 5 --config
    g/config.json --resume`` did nothing."""
    out = tmp_path / "g"
    assert cli.main([*GA, "--rounds", "3", "--out", str(out)]) == 0
    before = _files(out)
    capsys.readouterr()
    assert cli.main([*GA, "--rounds", "1", "--out", str(out), "--resume"]) == 0
    printed = capsys.readouterr().out
    assert f"nothing to do: {out} already has 3 rounds" in printed
    assert _files(out) == before  # config.json (provenance included) untouched
    assert _config(out)["rounds"] == 3
    # a flag beats --config (a run's config.json as a file): 5 rounds, recorded
    argv = [*GA, "--rounds", "5", "--config", str(out / "config.json"), "--out", str(out)]
    assert cli.main([*argv, "--resume"]) == 0
    assert _rounds(out) == [0, 1, 2, 3, 4, 5] and _config(out)["rounds"] == 5


def test_rounds_in_config_json_is_the_largest_target_asked_for(tmp_path: pathlib.Path) -> None:
    """``RunDirectory.create``: a resume stores ``max(saved, requested)`` rounds, refuses a
    request below the rounds ``rounds.jsonl`` holds, and appends provenance."""
    path = tmp_path / "r"
    config = {"optimizer": "toy", "rounds": 10, "provenance": [{"call": 1}]}
    run = rundir.RunDirectory.create(path, config)
    for r in range(3):
        run.log_round({"round": r})
    rundir.RunDirectory.create(
        path, {**config, "rounds": 5, "provenance": [{"call": 2}]}, resume=True
    )
    saved = _config(path)
    assert saved["rounds"] == 10  # an interrupted 10-round run resumed to 5 still targets 10
    assert saved["provenance"] == [{"call": 1}, {"call": 2}]
    before = _files(path)
    with pytest.raises(rundir.NothingToDoError, match="already has 2 rounds"):
        rundir.RunDirectory.create(path, {**config, "rounds": 1}, resume=True)
    assert _files(path) == before
    rundir.RunDirectory.create(path, {**config, "rounds": 12}, resume=True)
    assert _config(path)["rounds"] == 12


def test_pinning_keys_missing_from_an_old_config_json_are_adopted(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "r"
    rundir.RunDirectory.create(path, {"function": "f2", "rounds": 1})
    now = {"function": "f2", "rounds": 1, "function_digest": "sha256:aa"}
    rundir.RunDirectory.create(path, now, resume=True)
    assert _config(path)["function_digest"] == "sha256:aa"
    with pytest.raises(ValueError, match="function 'f2' now gives another Ehrlich instance"):
        rundir.RunDirectory.create(path, {**now, "function_digest": "sha256:bb"}, resume=True)


# ---------------------------------------------------------------------------------------------
# --resume alone takes the saved configuration
# ---------------------------------------------------------------------------------------------
def test_resume_alone_takes_the_saved_configuration(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "r"
    argv = [*GA, "--function", "f2", "--instance-seed", "1", "--seed", "3"]
    argv += ["--mutation-prob", "0.05", "--rounds", "1", "--out", str(out)]
    assert cli.main(argv) == 0
    saved = _config(out)
    capsys.readouterr()
    # no flag but --rounds: function, seeds, GA settings all come from config.json
    assert cli.main(["ga", "--resume", "--out", str(out), "--rounds", "2", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "rounds: 1 -> 2" in printed and "mutation_prob" not in printed
    assert _rounds(out) == [0, 1, 2]
    now = _config(out)
    assert {k: v for k, v in now.items() if k not in ("provenance", "rounds")} == {
        k: v for k, v in saved.items() if k not in ("provenance", "rounds")
    }
    # a flag that changes a setting is refused in one line naming it; nothing written
    before = _files(out)
    argv = ["ga", "--resume", "--out", str(out), "--seed", "4", "--no-progress"]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert "seed" not in captured.out
    assert "configuration differs (seed: saved 3 vs now 4)" in captured.err
    assert _files(out) == before
    # --print-config on resume shows the saved configuration with the flags applied
    assert cli.main(["ga", "--resume", "--out", str(out), "--rounds", "7", "--print-config"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (
        shown["rounds"] == 7 and shown["seed"] == 3 and shown["round0_ga"]["mutation_prob"] == 0.05
    )


def test_a_run_with_records_of_another_caller_resumes_from_the_command_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """A run directory made by the paper driver or an experiment script holds records beside
    the settings (``method``, ``loss``): ``--resume`` alone continues it and keeps them, and its
    ``config.json`` given as ``--config`` starts a new run; a hand-written file with an unknown
    key is still refused."""
    out = tmp_path / "r"
    assert cli.main([*GA, "--function", "f2", "--rounds", "1", "--out", str(out)]) == 0
    config = _config(out)
    config.update(method="GA (paper driver)", loss="none")  # what extra_config writes
    (out / "config.json").write_text(json.dumps(config))
    assert cli.main(["ga", "--resume", "--out", str(out), "--rounds", "2", "--no-progress"]) == 0
    assert _rounds(out) == [0, 1, 2]
    assert _config(out)["method"] == "GA (paper driver)" and _config(out)["loss"] == "none"
    argv = [*GA, "--config", str(out / "config.json"), "--rounds", "1"]
    argv += ["--out", str(tmp_path / "copy")]
    assert cli.main(argv) == 0
    assert _config(tmp_path / "copy")["round0_ga"] == _config(out)["round0_ga"]
    handwritten = tmp_path / "mine.json"
    handwritten.write_text(json.dumps({"method": "typo", "rounds": 1}))
    capsys.readouterr()
    argv = [*GA, "--config", str(handwritten), "--rounds", "1", "--out", str(tmp_path / "x")]
    assert cli.main(argv) == 2
    assert "method" in capsys.readouterr().err and not (tmp_path / "x").exists()


@pytest.mark.parametrize("command", ["llome", "lambo2"])
def test_resume_alone_takes_the_saved_preset(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture, command: str
) -> None:
    """``--resume`` without ``--preset`` uses the run's preset (not the ``cpu`` default); checked
    with ``--print-config`` on a ``config.json`` as a smoke run records it."""
    argv = [command, "--preset", "smoke", "--set", "seed=5", "--print-config"]
    assert cli.main(argv) == 0
    recorded = json.loads(capsys.readouterr().out)
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({**recorded, "provenance": []}))
    assert cli.main([command, "--resume", "--out", str(out), "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out) == recorded
    assert (
        cli.main([command, "--resume", "--out", str(out), "--rounds", "9", "--print-config"]) == 0
    )
    assert json.loads(capsys.readouterr().out) == {**recorded, "rounds": 9}
    # another preset beside --resume is refused, not silently ignored (both optimizers)
    argv = [command, "--resume", "--out", str(out), "--preset", "cpu", "--print-config"]
    assert cli.main(argv) == 2
    assert "made with --preset smoke" in capsys.readouterr().err


def test_precedence_preset_config_file_flags_set(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """preset < --config FILE < the flags given < --set, setting by setting."""
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"round0_ga": {"num_particles": 50, "mutation_prob": 0.02}}))
    base = ["ga", "--rounds", "2", "--config", str(settings), "--print-config"]
    assert cli.main(base) == 0
    shown = json.loads(capsys.readouterr().out)["round0_ga"]
    assert (shown["num_particles"], shown["mutation_prob"]) == (50, 0.02)
    assert cli.main([*base, "--particles", "70"]) == 0
    shown = json.loads(capsys.readouterr().out)["round0_ga"]
    assert (shown["num_particles"], shown["mutation_prob"]) == (70, 0.02)  # the rest kept
    assert cli.main([*base, "--particles", "70", "--set", "round0_ga.num_particles=80"]) == 0
    assert json.loads(capsys.readouterr().out)["round0_ga"]["num_particles"] == 80
    llome = tmp_path / "llome.json"
    llome.write_text(json.dumps({"labels_per_round": 16, "num_seeds": 4}))
    argv = ["llome", "--preset", "smoke", "--config", str(llome), "--print-config"]
    assert cli.main([*argv, "--num-selected", "24"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["labels_per_round"], shown["num_seeds"]) == (24, 4)
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["labels_per_round"] == 16


def test_config_json_and_summary_json_have_ordinary_permissions(tmp_path: pathlib.Path) -> None:
    """``atomic_write_text`` used ``mkstemp`` (mode 0600); files now follow the umask."""
    previous = os.umask(0o027)
    try:
        files.atomic_write_text(tmp_path / "a.json", "{}\n")
    finally:
        os.umask(previous)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o640
    previous = os.umask(0o022)
    try:
        rundir.RunDirectory.create(tmp_path / "r", {"rounds": 1})
    finally:
        os.umask(previous)
    assert (tmp_path / "r" / "config.json").stat().st_mode & 0o777 == 0o644
    assert not [p for p in (tmp_path / "r").iterdir() if p.name.startswith(".config")]
