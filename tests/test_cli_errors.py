"""A clear error for every bad input (issue 35, section 2): one line on stderr, exit code 2,
nothing written; and the smaller fixes of that issue (the paper preset without ``--weights``,
transformers' PyTorch warning, file permissions, compare's GA glob, plot labels and titles)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from llome_jax import cli
from llome_jax.run import plotting, rundir

#: a tiny GA in round mode
GA = ["ga", "--particles", "16", "--survival-quantile", "0.25", "--initial-generations", "1"]
GA += ["--generations-per-round", "1", "--no-progress"]


def _files(directory: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def _error(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    """Run ``argv``: exit code 2 and exactly one line on stderr, which is returned."""
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.endswith("\n") and len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err.strip()


# ---------------------------------------------------------------------------------------------
# Bad input: one line, exit 2, nothing written
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command", [["ga", "--rounds", "1"], ["llome", "--preset", "smoke"], ["lambo2"]]
)
def test_invalid_yaml_in_config_is_one_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture, command: list[str]
) -> None:
    bad = tmp_path / "settings.yaml"
    bad.write_text("finetune:\n  epochs: [1, 2\nrounds: 3\n")  # a ScannerError / ParserError
    out = tmp_path / "run"
    err = _error(capsys, [*command, "--config", str(bad), "--out", str(out)])
    assert f"--config {bad}: not valid YAML" in err and "line " in err
    assert not out.exists()
    tabs = tmp_path / "tabs.yml"
    tabs.write_text("a:\n\tb: 1\n")  # a ScannerError
    assert "not valid YAML" in _error(capsys, [*command, "--config", str(tabs), "--out", str(out)])
    assert not out.exists()


@pytest.mark.parametrize(
    "argv",
    [
        [*GA, "--rounds", "1"],
        ["ga", "--generations", "2", "--seeds", "1", "--particles", "16"],
        ["llome", "--preset", "smoke"],
        ["lambo2", "--preset", "smoke"],
        ["ga", "--resume"],
    ],
)
def test_out_naming_an_existing_file_is_refused(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture, argv: list[str]
) -> None:
    target = tmp_path / "afile"
    target.write_text("keep me\n")
    err = _error(capsys, [*argv, "--out", str(target)])
    assert f"{target} is a file, not a directory" in err
    assert target.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_compare_out_naming_a_file_is_refused(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    assert cli.main([*GA, "--function", "f2", "--rounds", "1", "--out", str(run)]) == 0
    target = tmp_path / "afile"
    target.write_text("")
    assert "is a file" in _error(capsys, ["compare", str(run), "--out", str(target)])


def test_ehrlich_evaluate_refuses_oversized_and_out_of_range_states(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    output = tmp_path / "out.csv"
    base = [
        "ehrlich",
        "evaluate",
        "Ehr(8,8)-2-2-2",
        "--instance-seed",
        "1",
        "--output",
        str(output),
    ]
    lines = tmp_path / "in.txt"
    lines.write_text("0,1,2,3,4,5,6,7\n99999999999999999999,1,2,3,4,5,6,7\n")
    err = _error(capsys, [*base, "--input", str(lines)])
    assert f"{lines}:2: state 99999999999999999999 is outside [0, 8)" in err
    lines.write_text("0,1,2,3,4,5,6,8\n")
    assert "state 8 is outside [0, 8)" in _error(capsys, [*base, "--input", str(lines)])
    assert not output.exists()


@pytest.mark.parametrize(
    "line", ["0,1,2,3,1 5,0,1", "0,1,,2,3,4,5,6", "0,1,2,3,4,5,6,1_0", "0;1;2;3;4;5;6;7"]
)
def test_ehrlich_evaluate_reads_one_integer_per_comma_separated_token(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture, line: str
) -> None:
    """``"1 5"`` inside a comma-separated line used to be read as 15 and scored."""
    output = tmp_path / "out.csv"
    lines = tmp_path / "in.txt"
    lines.write_text(f"0,1,2,3,4,5,6,7\n{line}\n")
    argv = ["ehrlich", "evaluate", "Ehr(8,8)-2-2-2", "--instance-seed", "1"]
    err = _error(capsys, [*argv, "--input", str(lines), "--output", str(output)])
    assert f"{lines}:2: not a comma-separated list of integers" in err
    assert not output.exists()
    lines.write_text("[0, 1, 2, 3, 4, 5, 6, 7]\n 0 ,1,2,3,4,5,6,7,\n")  # still accepted
    assert cli.main([*argv, "--input", str(lines), "--output", str(output)]) == 0
    assert output.read_text().count('"0,1,2,3,4,5,6,7"') == 2


def test_corrupt_config_json_on_resume_names_the_file(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    for text in ('{"rounds": 3', "[1, 2]"):
        (out / "config.json").write_text(text)
        for argv in (
            ["ga", "--resume"],
            [*GA, "--rounds", "4", "--resume"],
            ["lambo2", "--resume"],
        ):
            err = _error(capsys, [*argv, "--out", str(out)])
            assert str(out / "config.json") in err
        assert sorted(p.name for p in out.iterdir()) == ["config.json"]
        assert (out / "config.json").read_text() == text
    with pytest.raises(ValueError, match=str(out / "config.json")):
        rundir.RunDirectory.create(out, {"rounds": 4}, resume=True)


def test_a_resume_without_a_run_and_of_another_optimizer(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "none"
    assert "does not exist" in _error(capsys, ["llome", "--resume", "--out", str(out)])
    assert not out.exists()
    assert "pass --out" in _error(capsys, ["ga", "--resume"])
    run = tmp_path / "ga"
    assert cli.main([*GA, "--function", "f2", "--rounds", "1", "--out", str(run)]) == 0
    err = _error(capsys, ["lambo2", "--resume", "--out", str(run)])
    assert "it holds a 'ga' run" in err


def test_an_impossible_ehr_name_says_why(capsys: pytest.CaptureFixture) -> None:
    """``Ehr(4,8)-4-4-4`` (4 motifs of 4 in 8 positions) without ``--instance-seed`` used to be
    called "not a valid name"; with or without a seed the reason is given."""
    for extra in ([], ["--instance-seed", "1"]):
        err = _error(capsys, ["ehrlich", "describe", "Ehr(4,8)-4-4-4", *extra])
        assert "'Ehr(4,8)-4-4-4' is not a valid Ehrlich function" in err
        assert "cannot all fit" in err and "unknown function" not in err
    err = _error(capsys, ["ehrlich", "describe", "Ehr(4,8)-2-4-4"])  # valid, but not shipped
    assert "pass --instance-seed" in err
    assert "unknown function 'Ehr4'" in _error(capsys, ["ehrlich", "describe", "Ehr4"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rounds", "1", "--generations", "5"], "--generations is for the many-seeds mode"),
        (["--rounds", "1", "--segment", "5"], "--segment is for the many-seeds mode"),
        (["--initial-generations", "3"], "--initial-generations is for the round mode"),
        (["--generations-per-round", "3"], "--generations-per-round is for the round mode"),
        (["--rounds", "1", "--seeds", "3"], "leave --seeds at 1"),
    ],
)
def test_ga_flags_of_the_other_mode_are_refused(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    out = tmp_path / "run"
    assert message in _error(capsys, ["ga", *argv, "--out", str(out)])
    assert not out.exists()


def test_a_many_seeds_ga_directory_cannot_be_resumed(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "seeds"
    argv = ["ga", "--function", "f2", "--generations", "2", "--seeds", "1", "--particles", "32"]
    assert cli.main([*argv, "--no-progress", "--out", str(out)]) == 0
    before = _files(out)
    assert "cannot be resumed" in _error(capsys, ["ga", "--resume", "--out", str(out)])
    assert _files(out) == before


# ---------------------------------------------------------------------------------------------
# The smaller fixes
# ---------------------------------------------------------------------------------------------
def test_paper_preset_prints_without_weights_and_runs_only_with_them(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    from llome_jax.llome.presets import preset

    cfg = preset("paper")  # used to raise: --weights was demanded before anything else
    assert cfg.weights is None and cfg.preset == "paper"
    assert cli.main(["llome", "--preset", "paper", "--print-config"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["preset"] == "paper" and shown["weights"] is None
    out = tmp_path / "run"
    assert "pass --weights DIR" in _error(capsys, ["llome", "--preset", "paper", "--out", str(out)])
    assert not out.exists()


def test_llome_command_silences_transformers_pytorch_advice(tmp_path: pathlib.Path) -> None:
    """Every ``llome`` command printed transformers' "PyTorch was not found" on import (no torch
    is needed). Checked in a fresh process with torch hidden, as in a plain install."""
    hide_torch = "import sys; sys.modules['torch'] = None; "
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_NO_ADVISORY_WARNINGS"}

    def stderr(code: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", hide_torch + code],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            check=True,
        )
        return done.stderr

    assert "PyTorch was not found" in stderr("import transformers")  # what users saw
    code = (
        "from llome_jax.cli import main; "
        "assert main(['llome', '--preset', 'smoke', '--print-config']) == 0; "
        "import transformers, logging; "
        "transformers.logging.get_logger('x').warning('a real warning')"
    )
    err = stderr(code)
    assert "PyTorch was not found" not in err
    assert "a real warning" in err  # ordinary warnings still show
    # Python users importing the tokenizer (which imports transformers) see no advice either
    assert "PyTorch was not found" not in stderr("import llome_jax.lm.tokenizer")


def test_many_seeds_ga_files_legend_and_title(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """summary.json was written 0600 (mkstemp); the legend said ``GA (n=32) (n=2)``."""
    drawn: list[dict] = []
    original = plotting.plot_regret_curves

    def capture(curves, path, **kwargs):
        drawn.append({"curves": dict(curves), **kwargs})
        return original(curves, path, **kwargs)

    monkeypatch.setattr(plotting, "plot_regret_curves", capture)
    out = tmp_path / "seeds"
    argv = ["ga", "--function", "Ehr(8,8)-2-2-2", "--instance-seed", "1", "--generations", "2"]
    argv += ["--seeds", "2", "--particles", "32", "--no-progress", "--out", str(out)]
    previous = os.umask(0o022)
    try:
        assert cli.main(argv) == 0
    finally:
        os.umask(previous)
    for name in ("config.json", "summary.json", "trace.csv", "regret.png"):
        assert (out / name).stat().st_mode & 0o777 == 0o644, name
    (plot,) = drawn
    assert list(plot["curves"]) == ["GA (32 particles)"] and plot["unit"] == "seed"
    assert plot["title"] == "GA on Ehr(8,8)-2-2-2 (instance seed 1), run seeds 0-1"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots()
    plotting.draw_regret_curves(axis, plot["curves"], unit="seed")
    assert axis.get_legend_handles_labels()[1] == ["GA (32 particles), 2 seeds"]
    plt.close(figure)


def test_regret_png_uses_compare_label_and_names_the_seeds(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """regret.png said ``LLOME-SFT/MargE`` where compare says ``LLOME-MargE``, and its title
    ``f2 (seed 0)`` did not say which seed."""
    from llome_jax.compare import method_label

    drawn: list[dict] = []
    monkeypatch.setattr(
        plotting,
        "plot_regret_curves",
        lambda curves, path, **kwargs: drawn.append({"curves": dict(curves), **kwargs}),
    )
    config = {
        "optimizer": "llome",
        "schedule": "sft:1,marge:1",
        "function": "Ehr(8,8)-2-2-2",
        "instance_seed": 3,
        "seed": 0,
    }
    run = rundir.RunDirectory.create(tmp_path / "r", config)
    run.log_round({"round": 0, "num_evaluations": 10, "min_regret": 0.5})
    plotting.plot_run(run, "LLOME-SFT/MargE", "LLOME on Ehr(8,8)-2-2-2 (seed 0)", log_x=False)
    (plot,) = drawn
    assert list(plot["curves"]) == [method_label(config)] == ["LLOME-MargE"]
    assert plot["title"] == "LLOME-MargE on Ehr(8,8)-2-2-2 (instance seed 3), run seed 0"
    assert plot["unit"] is None  # one run: no count in the legend


def test_compare_names_a_many_seeds_ga_directory(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """README's ``GA='runs/ga_*'`` also matched its many-seeds GA directory (``runs/ga_f2``),
    and compare said "no finished round (rounds.jsonl is empty)"."""
    runs = tmp_path / "runs"
    argv = ["ga", "--function", "f2", "--generations", "2", "--seeds", "1", "--particles", "32"]
    assert cli.main([*argv, "--no-progress", "--out", str(runs / "ga_f2")]) == 0
    argv = [*GA, "--function", "f2", "--rounds", "1", "--out", str(runs / "ga_round_f2")]
    assert cli.main(argv) == 0
    err = _error(capsys, ["compare", f"GA={runs}/ga_*"])
    assert f"{runs / 'ga_f2'} is a many-seeds GA directory" in err
    assert "no finished round" not in err
    capsys.readouterr()
    assert cli.main(["compare", f"GA={runs}/ga_round_*"]) == 0  # README's pattern now
    assert "| GA |" in capsys.readouterr().out
    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    assert "GA='runs/ga_*'" not in readme and "GA='runs/ga_round_*'" in readme


def test_flag_defaults_are_documented_but_do_not_override(capsys: pytest.CaptureFixture) -> None:
    """Flags left out override nothing (their defaults live in the configurations), so the
    printed configuration of a bare command is the documented default one."""
    assert cli.main(["ga", "--rounds", "2", "--print-config"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["seed"] == 0 and shown["round0_ga"]["num_particles"] == 1000
    assert (shown["round0_generations"], shown["generations_per_round"]) == (10, 2)
    assert cli.main(["llome", "--print-config"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["preset"] == "cpu" and shown["schedule"] == "sft:1,marge:1"
    assert np.isclose(shown["finetune"]["learning_rate"], 3e-3)
