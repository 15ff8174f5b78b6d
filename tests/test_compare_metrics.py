"""``llome-jax compare --metric cumulative-regret`` and ``--x wall-clock`` on hand-made runs.

Two methods, one run each (every number below is derived by hand from these records):

    A: labels 100 / 200 / 300, min regret 0.9 / 0.6 / 0.5, round seconds 10 / 5 / 5
    B: labels 100 / 150 / 300, min regret 0.9 / 0.7 / 0.3, round seconds 2 / 2 / 20

By labels B ends lower (0.3 against 0.5 at 300); by wall clock A is ahead at 20 s (A has ended
round 2, B only round 1: 0.5 against 0.7); the cumulative regrets at 300 labels are
A: 99 x 0.9 + 100 x 0.6 + 1 x 0.5 = 149.6 and B: 49 x 0.9 + 150 x 0.7 + 1 x 0.3 = 149.4.
"""

from __future__ import annotations

import csv
import json
import math
import pathlib

import pytest

from llome_jax import compare
from llome_jax.cli import main

A = [(100, 0.9, 10.0), (200, 0.6, 5.0), (300, 0.5, 5.0)]
B = [(100, 0.9, 2.0), (150, 0.7, 2.0), (300, 0.3, 20.0)]


def _run_dir(root: pathlib.Path, name: str, rounds, seconds: bool = True) -> pathlib.Path:
    path = root / name
    path.mkdir(parents=True)
    config = {
        "function": "f2",
        "instance_seed": None,
        "optimizer": "ga",
        "provenance": [{"device_kind": "cpu", "devices": 1, "backend": "cpu"}],
    }
    (path / "config.json").write_text(json.dumps(config))
    lines = []
    for i, (n, r, s) in enumerate(rounds):
        record = {"round": i, "num_evaluations": n, "min_regret": r, "best_value": 1 - r}
        if seconds:
            record["seconds"] = s
        lines.append(json.dumps(record))
    (path / "rounds.jsonl").write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def runs(tmp_path: pathlib.Path) -> list[str]:
    return [f"A={_run_dir(tmp_path, 'a', A)}", f"B={_run_dir(tmp_path, 'b', B)}"]


def test_cumulative_regret_sums_the_step_curve_label_by_label():
    # labels 11 (0.5), 12-14 (0.4 each), 15-16 (0.25 each)
    assert compare.cumulative_regret_at([10, 12, 15], [0.5, 0.4, 0.25], 16) == pytest.approx(2.2)
    # a worse later point changes nothing: the running minimum is summed (11: 0.5, 12-14: 0.5)
    assert compare.cumulative_regret_at([10, 12, 15], [0.5, 0.7, 0.25], 16) == pytest.approx(2.5)
    assert compare.cumulative_regret_at([10, 12], [0.5, 0.4], 10) == 0.0  # nothing after round 0
    assert math.isnan(compare.cumulative_regret_at([10, 12], [0.5, 0.4], 9))
    assert compare.cumulative_regret_at([10, 12], [0.5, 0.0], 1000) == pytest.approx(0.5)


def test_readings_by_labels_cumulative_regret_and_wall_clock(runs):
    a, b = compare.load_runs(runs)
    assert a.clock.tolist() == [10.0, 15.0, 20.0] and b.clock.tolist() == [2.0, 4.0, 24.0]
    assert a.machine == "cpu x1"
    assert [compare.value_at(r, 300) for r in (a, b)] == [0.5, 0.3]
    cumulative = [compare.value_at(r, 300, "cumulative_regret") for r in (a, b)]
    assert cumulative == [pytest.approx(149.6), pytest.approx(149.4)]
    # the same sum counted after round 0 (the axis shifted by 100 labels)
    shifted = compare.after_round0(a)
    assert compare.value_at(shifted, 200, "cumulative_regret") == pytest.approx(149.6)
    assert shifted.clock.tolist() == [0.0, 5.0, 10.0]
    # by wall clock: at 20 s A has ended round 2 and B only round 1
    assert [compare.value_at(r, 20, axis="wall_clock") for r in (a, b)] == [0.5, 0.7]
    assert [compare.labels_read(r, 20, "wall_clock") for r in (a, b)] == [300, 150]
    # B's cumulative regret after its 150 labels: 49 x 0.9 + 1 x 0.7
    assert compare.value_at(b, 20, "cumulative_regret", "wall_clock") == pytest.approx(44.8)
    assert math.isnan(compare.value_at(a, 3, axis="wall_clock"))  # round 0 ended at 10 s
    # the default budget: the earliest end of the runs (A at 20 s), as on the label axis
    assert compare.common_budget([a, b], "wall_clock") == 20.0
    rows = compare.summarise([a, b], 20.0, axis="wall_clock")
    assert [(r.label, r.median, r.ended_before) for r in rows] == [("A", 0.5, 0), ("B", 0.7, 0)]


def test_cli_cumulative_regret_and_wall_clock_tables_and_csvs(runs, tmp_path, capsys):
    out = tmp_path / "cr"
    assert (
        main(
            [
                "compare",
                *runs,
                "--metric",
                "cumulative-regret",
                "--budget",
                "300",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "| A | 300 | 300 | 1 of 1 | 149.6000 |" in printed
    assert "| B | 300 | 300 | 1 of 1 | 149.4000 |" in printed
    with open(out / "summary.csv", newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert [(r["method"], r["metric"], r["axis"]) for r in rows] == [
        ("A", "cumulative_regret", "labels"),
        ("B", "cumulative_regret", "labels"),
    ]
    assert [float(r["median"]) for r in rows] == [pytest.approx(149.6), pytest.approx(149.4)]
    with open(out / "curves.csv", newline="") as stream:
        curve = [r for r in csv.DictReader(stream) if r["method"] == "B"]
    assert [float(r["cumulative_regret"]) for r in curve] == [
        0.0,
        pytest.approx(44.8),
        pytest.approx(149.4),
    ]
    assert (out / "compare.png").stat().st_size > 0

    out = tmp_path / "clock"
    assert main(["compare", *runs, "--x", "wall-clock", "--budget", "20", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "device(s): cpu x1" in printed
    assert "| A | 20.0 | 300 | 1 of 1 | 0.5000 |" in printed
    assert "| B | 20.0 | 150 | 1 of 1 | 0.7000 |" in printed
    with open(out / "curves.csv", newline="") as stream:
        reader = csv.DictReader(stream)
        assert reader.fieldnames == ["method", "run", "seconds", "min_regret"]
        a_rows = [
            (float(r["seconds"]), float(r["min_regret"])) for r in reader if r["method"] == "A"
        ]
    assert a_rows == [(10.0, 0.9), (15.0, 0.6), (20.0, 0.5)]


def test_cli_refuses_what_it_cannot_read(runs, tmp_path, capsys):
    bare = _run_dir(tmp_path, "bare", A, seconds=False)
    assert main(["compare", runs[0], f"C={bare}", "--x", "wall-clock"]) == 2
    assert "needs each round's seconds" in capsys.readouterr().err
    assert main(["compare", *runs, "--budget", "1.5"]) == 2
    assert "whole numbers" in capsys.readouterr().err
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "config.json").write_text(json.dumps({"function": "f2", "optimizer": "ga"}))
    (unknown / "rounds.jsonl").write_text(
        json.dumps({"round": 0, "num_evaluations": 10, "min_regret": None, "best_value": 3.0})
        + "\n"
    )
    assert main(["compare", str(unknown), "--metric", "cumulative-regret"]) == 2
    assert "needs the min regret" in capsys.readouterr().err


def test_the_machine_names_the_cpu_its_cores_and_the_load_of_the_last_session(tmp_path):
    path = _run_dir(tmp_path, "c", A)
    config = json.loads((path / "config.json").read_text())
    session = {"device_kind": "cpu", "devices": 1, "backend": "cpu"}
    config["provenance"] = [
        {**session, "cpu": "Old CPU", "cores": 2, "load": 0.5},
        {**session, "cpu": "AMD EPYC 7B13", "cores": 1, "load": 2.0},
    ]
    (path / "config.json").write_text(json.dumps(config))
    (run,) = compare.load_runs([str(path)])
    assert run.machine == "cpu x1 (AMD EPYC 7B13, 1 core, load 2.00)"
    config["provenance"].append({**session, "cores": 16, "load": None})
    (path / "config.json").write_text(json.dumps(config))
    (run,) = compare.load_runs([str(path)])
    assert run.machine == "cpu x1 (16 cores)"
