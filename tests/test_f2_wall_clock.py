"""``experiments/f2_wall_clock.py`` on hand-made run directories (every number derived by hand).

Round 0 pays 100 labels; the budget is 200 labels after it:

    Fast seed 0: labels 100 / 200 / 300, min regret 0.9 / 0.6 / 0.5, round seconds 10 / 5 / 5
    Fast seed 1: labels 100 / 300,       min regret 0.9 / 0.4,       round seconds 10 / 30
    Slow seed 0: labels 100 / 150 / 300, min regret 0.9 / 0.7 / 0.3, round seconds 2 / 2 / 20
    Slow seed 1: still going (no done.json): listed and left out
    Slow seed 2: labels 100 / 250, min regret 0.9 / 0.8, round seconds 2 / 6, then stopped early

Seconds to the budget (round 0 included): 20, 40 and 24, and Slow seed 2's 8 to its stop after
150 labels; labels per second after round 0: 200 / 10 = 20, 200 / 30 = 6.7, 200 / 22 = 9.1 and
150 / 6 = 25. At 20 s Fast seed 0 has ended (0.5), Fast seed 1 has only its round 0 (0.9):
median 0.7, one ended; Slow seed 0 has ended its round 1 (0.7), seed 2 its run (0.8): 0.75.
"""

from __future__ import annotations

import csv
import json
import math
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "experiments"))

import f2_wall_clock

RUNS = {
    "Fast_seed0": [(100, 0.9, 10.0), (200, 0.6, 5.0), (300, 0.5, 5.0)],
    "Fast_seed1": [(100, 0.9, 10.0), (300, 0.4, 30.0)],
    "Slow_seed0": [(100, 0.9, 2.0), (150, 0.7, 2.0), (300, 0.3, 20.0)],
    "Slow_seed1": [(100, 0.9, 2.0)],
    "Slow_seed2": [(100, 0.9, 2.0), (250, 0.8, 6.0)],
}


@pytest.fixture
def root(tmp_path: pathlib.Path) -> pathlib.Path:
    for name, rounds in RUNS.items():
        path = tmp_path / "f2" / name
        path.mkdir(parents=True)
        config = {
            "function": "f2",
            "instance_seed": None,
            "optimizer": "ga",
            "method": name.split("_")[0],
            "accounting": "once_per_sequence",
            "provenance": [{"device_kind": "cpu", "devices": 1, "backend": "cpu"}],
        }
        (path / "config.json").write_text(json.dumps(config))
        records = [
            {"round": i, "num_evaluations": n, "min_regret": r, "seconds": s}
            for i, (n, r, s) in enumerate(rounds)
        ]
        if name == "Slow_seed2":
            records[-1]["stop_reason"] = "no training pairs"
        lines = [json.dumps(record) for record in records]
        (path / "rounds.jsonl").write_text("\n".join(lines) + "\n")
        if name != "Slow_seed1":
            (path / "done.json").write_text("{}")
    return tmp_path


def _csv(path: pathlib.Path) -> list[dict]:
    with open(path) as stream:
        return list(csv.DictReader(stream))


def test_runs_csv_summary_csv_and_tables(root, capsys):
    out = root / "out"
    argv = ["--runs", str(root / "f2" / "*"), "--out", str(out), "--budget", "200"]
    code = f2_wall_clock.main([*argv, "--times", "20", "--reference", "Fast"])
    assert code == 0
    rows = _csv(out / "runs.csv")
    got = [
        (
            r["method"],
            r["seed"],
            r["round0_seconds"],
            r["seconds_to_budget"],
            r["labels_per_second"],
        )
        for r in rows
    ]
    assert got == [
        ("Fast", "0", "10.0", "20.0", "20.0"),
        ("Fast", "1", "10.0", "40.0", "6.7"),
        ("Slow", "0", "2.0", "24.0", "9.1"),
        ("Slow", "2", "2.0", "8.0", "25.0"),
    ]
    assert [float(r["min_regret_at_budget"]) for r in rows] == [0.5, 0.4, 0.3, 0.8]
    assert [(r["labels_paid"], r["stop_reason"]) for r in rows][2:] == [
        ("200", ""),
        ("150", "no training pairs"),
    ]
    summary = _csv(out / "summary.csv")
    assert [
        (
            r["method"],
            r["runs"],
            float(r["median_min_regret"]),
            r["labels_read"],
            r["ended_by_then"],
        )
        for r in summary
    ] == [
        ("Fast", "2", pytest.approx(0.7), "300 100", "1"),
        ("Slow", "2", pytest.approx(0.75), "150 250", "1"),
    ]
    # Slow (0.7, 0.8) against Fast (0.5, 0.9): every one of the 6 splits is as extreme
    assert [r["p_vs_Fast"] for r in summary] == ["nan", "1.0"]
    curves = [
        (r["method"], r["round"], r["labels"], r["seconds"]) for r in _csv(out / "curves.csv")
    ]
    assert curves[:4] == [
        ("Fast", "0", "100", "10.0"),
        ("Fast", "1", "200", "15.0"),
        ("Fast", "2", "300", "20.0"),
        ("Fast", "0", "100", "10.0"),
    ]
    assert [float(r["min_regret"]) for r in _csv(out / "curves.csv")][-5:] == [
        0.9,
        0.7,
        0.3,
        0.9,
        0.8,
    ]
    assert (out / "wall_clock.png").stat().st_size > 0
    printed = capsys.readouterr().out
    assert "still going, left out: " + str(root / "f2" / "Slow_seed1") in printed
    assert "| Fast | 2 | 30.0 (" in printed  # the median of 20 and 40 seconds
    assert (
        "| Slow | 2 | 16.0 (8.0-24.0) | 8.0-24.0 | 1 |" in printed
    )  # 24 and 8 s, one stopped early
    assert "machines: cpu x1\n" in printed


def test_no_finished_run_is_a_one_line_error(root, capsys):
    code = f2_wall_clock.main(["--runs", str(root / "f2" / "Slow_seed1"), "--out", str(root / "o")])
    assert code == 2
    assert not (root / "o").exists()
    assert "no finished run directory" in capsys.readouterr().err


def test_the_p_after_equal_seconds_is_the_exact_permutation_test_and_waits_for_round0():
    assert f2_wall_clock._p((1.0, 2.0, 3.0), (4.0, 5.0, 6.0)) == pytest.approx(0.1)  # 2 / C(6, 3)
    assert math.isnan(f2_wall_clock._p((math.nan, 0.5), (0.4, 0.6)))  # a round 0 not over
