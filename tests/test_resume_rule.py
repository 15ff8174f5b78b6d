"""The one resume rule, at its edges: a changed setting is refused for every optimizer (one
line naming it, nothing written), the counters go on after a resume, and an error message of
several lines reaches the user as one."""

from __future__ import annotations

import hashlib
import json
import pathlib

import pytest

from llome_jax import cli


def _digest(path: pathlib.Path) -> str:
    return hashlib.sha256((path / "config.json").read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("command", "made", "changed", "named"),
    [
        (["ga", "--rounds", "2"], [], ["--mutation-prob", "0.01"], "round0_ga.mutation_prob"),
        (["llome", "--preset", "smoke"], [], ["--set", "finetune.epochs=7"], "finetune.epochs"),
        (["lambo2", "--preset", "smoke"], [], ["--epochs", "7"], "train.epochs"),
    ],
    ids=["ga", "llome", "lambo2"],
)
def test_a_changed_setting_beside_resume_is_refused_in_one_line(
    command: list[str],
    made: list[str],
    changed: list[str],
    named: str,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture,
) -> None:
    assert cli.main([*command, *made, "--print-config"]) == 0
    recorded = json.loads(capsys.readouterr().out)
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({**recorded, "provenance": []}))
    before = _digest(out)
    argv = [command[0], "--resume", "--out", str(out), *changed, "--no-progress"]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert f"{named}: saved" in line and "cannot resume" in line
    assert "changed settings" not in captured.out  # no listing before the refusal
    assert _digest(out) == before
    assert sorted(p.name for p in out.iterdir() if p.name != ".lock") == ["config.json"]


@pytest.mark.slow
def test_the_counters_go_on_after_a_resume(tmp_path: pathlib.Path) -> None:
    """Labels paid and constraint queries count on from the saved run (not from 0): LLOME with
    counted constraint queries, 1 round then resumed to 2, equals the run made in one go."""
    from test_information_contract import LLOME_CFG

    from llome_jax.llome import loop

    cfg = LLOME_CFG.replace(constraint_queries="free", seed=1)  # 2 rounds (seed 0 stops at 1)
    loop.run(cfg.replace(rounds=1), tmp_path / "twice", progress=False)
    loop.run(cfg, tmp_path / "twice", progress=False, resume=True)
    loop.run(cfg, tmp_path / "once", progress=False)

    def counters(path: pathlib.Path) -> list[tuple[int, int, int]]:
        records = [json.loads(x) for x in (path / "rounds.jsonl").read_text().splitlines()]
        return [
            (r["num_evaluations"], r["num_constraint_queries"], r["cum_constraint_queries"])
            for r in records
        ]

    twice = counters(tmp_path / "twice")
    assert twice == counters(tmp_path / "once")
    assert twice[2][0] > twice[1][0] > twice[0][0]  # labels paid go on
    assert twice[2][2] == twice[1][2] + twice[2][1] and twice[2][1] > 0  # queries go on
    rows = (tmp_path / "twice" / "evaluated.csv").read_text().splitlines()[1:]
    assert len(rows) == twice[2][0]


def test_a_message_of_several_lines_reaches_the_user_as_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from llome_jax.commands import compare

    def fails(args: object) -> int:
        raise ValueError("first line\n  second line\n\nthird")

    monkeypatch.setattr(compare, "run", fails)
    assert cli.main(["compare", "x"]) == 2
    err = capsys.readouterr().err
    assert err == "llome-jax compare: error: first line second line third\n"


def test_resuming_a_finished_run_says_so_and_a_smaller_budget_is_nothing_to_do(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    """Issue 67, item 7: a resume that finds nothing to run says why, with the labels paid
    after round 0; a smaller ``--budget`` is "nothing to do" (a budget only grows) and writes
    nothing; a smaller ``--rounds`` is not listed as a changed setting."""
    out = tmp_path / "ga"
    argv = ["ga", "--function", "Ehr(32,32)-4-4-4", "--instance-seed", "7"]
    argv += ["--initial-generations", "2", "--particles", "64", "--labels-per-round", "32"]
    assert cli.main([*argv, "--budget", "64", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    resume = ["ga", "--resume", "--out", str(out), "--no-progress"]
    assert cli.main(resume) == 0
    assert (
        f"nothing to do: {out} already ended after round 2 (its budget of 64 labels is spent), "
        "64 labels paid after round 0" in capsys.readouterr().out
    )
    before = _digest(out)
    assert cli.main([*resume, "--budget", "32"]) == 0
    said = capsys.readouterr().out
    assert "has a budget of 64 labels after round 0 (asked for 32); a budget only grows" in said
    assert _digest(out) == before
    assert cli.main([*resume, "--rounds", "1"]) == 0
    assert "changed settings" not in capsys.readouterr().out
