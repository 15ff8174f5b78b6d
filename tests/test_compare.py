"""``llome_jax.compare`` and ``llome-jax compare`` on hand-written run directories."""

from __future__ import annotations

import csv
import json
import math
import pathlib

import pytest

from llome_jax import compare
from llome_jax.cli import main


def _run_dir(root: pathlib.Path, name: str, config: dict, curve: list[tuple[int, float | None]]):
    path = root / name
    path.mkdir(parents=True)
    base = {"function": "f2", "instance_seed": None}
    (path / "config.json").write_text(json.dumps({**base, **config}))
    lines = [
        json.dumps({"round": i, "num_evaluations": n, "min_regret": r, "best_value": 1 - (r or 1)})
        for i, (n, r) in enumerate(curve)
    ]
    (path / "rounds.jsonl").write_text("\n".join(lines) + "\n")
    return path


MARGE = {"optimizer": "llome", "schedule": "sft:1,marge:9"}


@pytest.fixture
def runs(tmp_path: pathlib.Path) -> pathlib.Path:
    _run_dir(tmp_path, "marge_s0", MARGE, [(10000, 0.9), (12000, 0.8), (14000, 0.5)])
    _run_dir(tmp_path, "marge_s1", MARGE, [(10000, 0.95), (12000, 0.7), (13500, 0.7)])
    _run_dir(tmp_path, "marge_s2", MARGE, [(11000, 0.9), (13000, 0.6), (15000, 0.2)])
    _run_dir(tmp_path, "ga_s0", {"optimizer": "ga"}, [(10000, 0.97), (16000, 0.96)])
    return tmp_path


@pytest.mark.parametrize(
    ("config", "label"),
    [
        ({"optimizer": "llome", "schedule": "sft:1,marge:9", "method": "Mine"}, "Mine"),
        ({"optimizer": "ga"}, "GA"),
        ({"optimizer": "lambo2"}, "LaMBO-2"),
        ({"optimizer": "llome", "schedule": "sft:1,marge:9"}, "LLOME-MargE"),
        ({"optimizer": "llome", "schedule": "dpo:10"}, "LLOME-DPO"),
        ({"optimizer": "llome", "schedule": "sft:3,marge:7"}, "LLOME-SFT3-MargE7"),
        (
            {"optimizer": "llome", "schedule": "sft:1,reinforce:4,marge:5"},
            "LLOME-SFT1-REINFORCE4-MargE5",
        ),
    ],
)
def test_method_label(config, label):
    assert compare.method_label(config) == label


def test_a_curve_at_a_budget_is_its_best_point_within_it():
    """``curve_at``: the one reading of "regret at a budget" (``value_at`` and the paper
    driver's summaries call it): the best point with ``labels <= budget``, NaN before the first."""
    labels, regret = [100, 150, 200, 300], [0.9, 0.95, 0.7, 0.8]  # not monotone: the best counts
    assert math.isnan(compare.curve_at(labels, regret, 99))
    at = [compare.curve_at(labels, regret, budget) for budget in (100, 199, 200, 1e9)]
    assert at == [0.9, 0.9, 0.7, 0.7]
    best = [0.1, 0.05, 0.3, 0.2]  # best_value: higher is better
    assert [compare.curve_at(labels, best, b, "best_value") for b in (150, 300)] == [0.1, 0.3]


def test_summary_at_a_budget_is_the_median_and_range_over_seeds(runs: pathlib.Path):
    loaded = compare.load_runs([str(runs / "marge_s*"), str(runs / "ga_s0")])
    assert [r.label for r in loaded] == ["LLOME-MargE"] * 3 + ["GA"]
    # The largest budget every run has reached: marge_s1 ends at 13,500 labels.
    assert compare.common_budget(loaded) == 13500
    marge, ga = compare.summarise(loaded, 13500)
    # Best within 13,500 labels: s0 0.8 (its 14,000 round is beyond), s1 0.7, s2 0.6.
    assert marge.per_run == (0.8, 0.7, 0.6)
    assert (marge.median, marge.low, marge.high) == (0.7, 0.6, 0.8)
    assert ga.per_run == (0.97,) and ga.median == 0.97
    # marge_s1 ended at 13,500 labels: at 14,000 it counts with its last value, and is flagged.
    assert [r.ended_before for r in compare.summarise(loaded, 14000)] == [1, 0]
    # Before its first round a run has no value; the others still summarise.
    (early,) = [r for r in compare.summarise(loaded, 10500) if r.label == "LLOME-MargE"]
    assert early.per_run[:2] == (0.9, 0.95) and math.isnan(early.per_run[2])
    assert early.median == pytest.approx(0.925)


def test_labels_from_the_command_line_and_best_value_when_no_regret(tmp_path: pathlib.Path):
    _run_dir(tmp_path, "a", MARGE, [(100, 0.5), (200, 0.25)])
    _run_dir(tmp_path, "b", {"optimizer": "ga"}, [(100, 0.75), (200, None)])
    loaded = compare.load_runs([f"mine={tmp_path / 'a'}", str(tmp_path / "b")])
    assert [r.label for r in loaded] == ["mine", "GA"]
    # One run has no regret (no known optimum): everything is compared by best value, higher
    # is better (best_value = 1 - regret here, 0 where regret is unknown).
    assert [r.metric for r in loaded] == ["best_value"] * 2
    assert [row.per_run for row in compare.summarise(loaded, 200)] == [(0.75,), (0.25,)]


def test_bad_inputs_are_refused(runs: pathlib.Path, tmp_path: pathlib.Path):
    with pytest.raises(FileNotFoundError, match="no run directory matches"):
        compare.load_runs([str(tmp_path / "nothing_*")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        compare.load_runs([str(tmp_path / "empty")])
    with pytest.raises(ValueError, match="more than once"):
        compare.load_runs([str(runs / "ga_s0"), f"GA={runs / 'ga_s0'}"])
    _run_dir(tmp_path, "other", {"optimizer": "ga", "instance_seed": 3}, [(100, 0.5)])
    with pytest.raises(ValueError, match="different problems"):
        compare.load_runs([str(runs / "ga_s0"), str(tmp_path / "other")])
    assert (
        len(compare.load_runs([str(runs / "ga_s0"), str(tmp_path / "other")], allow_mixed=True))
        == 2
    )


def test_cli_writes_the_table_plot_and_csvs(runs: pathlib.Path, capsys):
    out = runs / "cmp"
    code = main(
        [
            "compare",
            str(runs / "marge_s*"),
            f"GA={runs / 'ga_s0'}",
            "--budget",
            "15000",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    # read at the last round end within 15,000 (these runs count every evaluation): 0.5, 0.7,
    # 0.2; a resample's median is 0.2 when two or three of its three draws are 0.2, chance
    # 7/27 > 2.5 % (and 0.7 likewise), so the 95 % interval is the range
    assert (
        "| LLOME-MargE | 15000 | 13500-15000 | 3 of 3 | 0.5000 | 0.2000-0.7000 | 0.2000 | 0.7000 "
        "| 2 |" in printed
    )
    # one GA run: its interval is its value
    assert (
        "| GA | 15000 | 10000 | 1 of 1 | 0.9700 | 0.9700-0.9700 | 0.9700 | 0.9700 | 0 |" in printed
    )
    assert "information contract: no run has an `evaluated.csv`" in printed
    with open(out / "summary.csv", newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert [(r["method"], float(r["median"])) for r in rows] == [("LLOME-MargE", 0.5), ("GA", 0.97)]
    assert [(float(r["median_ci95_low"]), float(r["median_ci95_high"])) for r in rows] == [
        (0.2, 0.7),
        (0.97, 0.97),
    ]
    with open(out / "curves.csv", newline="") as stream:
        assert len(list(csv.DictReader(stream))) == 3 + 3 + 3 + 2
    assert (out / "compare.png").stat().st_size > 1000
    assert main(["compare", str(runs / "marge_s0"), "--budget", "0"]) == 2


def test_cli_after_round_0_reads_each_run_after_its_own_round_0(runs: pathlib.Path, capsys):
    """``--after-round-0 --budget 4000``: marge_s2 (round 0: 11,000 labels) is read at 15,000
    in all (0.2), the others at 14,000 (0.5; marge_s1 ended at 3,500 after round 0: 0.7); in
    labels in all, 14,000 reads marge_s2 at 13,000 (0.6) instead."""
    out = runs / "cmp"
    args = ["compare", str(runs / "marge_s*"), f"GA={runs / 'ga_s0'}"]
    assert main([*args, "--after-round-0", "--budget", "4000", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert (
        "| LLOME-MargE | 4000 | 3500-4000 | 3 of 3 | 0.5000 | 0.2000-0.7000 | 0.2000 | 0.7000 "
        "| 1 |" in printed
    )
    assert "| GA | 4000 | 0 | 1 of 1 | 0.9700 | 0.9700-0.9700 | 0.9700 | 0.9700 | 0 |" in printed
    with open(out / "curves.csv", newline="") as stream:
        rows = list(csv.reader(stream))
    assert rows[0][2] == "labels_after_round_0"
    assert [r[2] for r in rows[1:4]] == ["0", "2000", "4000"]  # marge_s0
    assert [r[2] for r in rows[7:10]] == ["0", "2000", "4000"]  # marge_s2 (round 0: 11,000)
    assert main([*args, "--budget", "14000"]) == 0
    assert "| LLOME-MargE | 14000 | 13000-14000 | 3 of 3 | 0.6000 |" in capsys.readouterr().out
    assert main([*args, "--after-round-0"]) == 0  # the default budget, counted the same way
    assert "budget: 3500 labels after round 0 (the default" in capsys.readouterr().out


def test_cli_curves_csv_holds_every_round_of_every_run(runs: pathlib.Path):
    """``curves.csv``: one row per round of each run, in the order the runs were given (a glob
    sorted), with the round's own ``num_evaluations`` and ``min_regret`` (no running minimum:
    marge_s1's last round repeats 0.7), as written in the fixture above."""
    out = runs / "cmp"
    assert main(["compare", str(runs / "marge_s*"), f"GA={runs / 'ga_s0'}", "--out", str(out)]) == 0
    with open(out / "curves.csv", newline="") as stream:
        rows = list(csv.reader(stream))
    s0, s1, s2, ga = (str(runs / name) for name in ("marge_s0", "marge_s1", "marge_s2", "ga_s0"))
    assert rows == [
        ["method", "run", "num_evaluations", "min_regret"],
        ["LLOME-MargE", s0, "10000", "0.9"],
        ["LLOME-MargE", s0, "12000", "0.8"],
        ["LLOME-MargE", s0, "14000", "0.5"],
        ["LLOME-MargE", s1, "10000", "0.95"],
        ["LLOME-MargE", s1, "12000", "0.7"],
        ["LLOME-MargE", s1, "13500", "0.7"],
        ["LLOME-MargE", s2, "11000", "0.9"],
        ["LLOME-MargE", s2, "13000", "0.6"],
        ["LLOME-MargE", s2, "15000", "0.2"],
        ["GA", ga, "10000", "0.97"],
        ["GA", ga, "16000", "0.96"],
    ]


def test_cli_curves_csv_by_best_value_without_regret(tmp_path: pathlib.Path):
    """A run without a known optimum: the column is ``best_value`` (1 - regret here, 0 where the
    regret is unknown, as ``_run_dir`` writes it)."""
    _run_dir(tmp_path, "a", MARGE, [(100, 0.5), (200, 0.25)])
    _run_dir(tmp_path, "b", {"optimizer": "ga"}, [(100, 0.75), (200, None)])
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    with open(out / "curves.csv", newline="") as stream:
        rows = list(csv.reader(stream))
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert rows == [
        ["method", "run", "num_evaluations", "best_value"],
        ["LLOME-MargE", a, "100", "0.5"],
        ["LLOME-MargE", a, "200", "0.75"],
        ["GA", b, "100", "0.25"],
        ["GA", b, "200", "0.0"],
    ]


def test_cli_allow_mixed(runs: pathlib.Path, tmp_path: pathlib.Path, capsys):
    """Runs on two instances of f2: refused by the command (exit 2, the reason on stderr, nothing
    written), compared with ``--allow-mixed`` (both problems named, one row per method)."""
    _run_dir(tmp_path, "other", {"optimizer": "ga", "instance_seed": 3}, [(10000, 0.5)])
    args = ["compare", str(runs / "ga_s0"), f"Other={tmp_path / 'other'}"]
    out = tmp_path / "cmp"
    assert main([*args, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "different problems (f2; f2 (instance seed 3))" in captured.err
    assert "--allow-mixed" in captured.err and captured.out == "" and not out.exists()

    assert main([*args, "--allow-mixed", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "min regret on f2; f2 (instance seed 3) (2 runs)"
    assert printed[1].startswith("budget: 10000 labels in all, round 0 included")
    # common budget 10,000 labels: the GA's first round (0.97), the other run's only one (0.5)
    assert printed[4:6] == [
        "| GA | 10000 | 10000 | 1 of 1 | 0.9700 | 0.9700-0.9700 | 0.9700 | 0.9700 | 0 |",
        "| Other | 10000 | 10000 | 1 of 1 | 0.5000 | 0.5000-0.5000 | 0.5000 | 0.5000 | 0 |",
    ]
    with open(out / "curves.csv", newline="") as stream:
        assert [r[0] for r in csv.reader(stream)] == ["method", "GA", "GA", "Other"]


def test_runs_counting_labels_differently_are_not_compared(runs: pathlib.Path, tmp_path):
    """A run made before the information contract paid every evaluation (no ``accounting`` in
    its config.json); one under ``pay_once`` did not: equal budgets would not be equal."""
    fair = {"optimizer": "ga", "accounting": "pay_once"}
    _run_dir(tmp_path, "fair", fair, [(1132, 0.97), (3200, 0.9)])
    with pytest.raises(ValueError, match="count labels differently"):
        compare.load_runs([str(runs / "ga_s0"), str(tmp_path / "fair")])
    both = compare.load_runs([str(runs / "ga_s0"), str(tmp_path / "fair")], allow_mixed=True)
    assert [r.label for r in both] == ["GA", "GA"]
    paper = {"optimizer": "ga", "accounting": "every_evaluation"}
    _run_dir(tmp_path, "paper", paper, [(10000, 0.96)])  # the old default, stated
    assert len(compare.load_runs([str(runs / "ga_s0"), str(tmp_path / "paper")])) == 2


def test_cli_says_which_runs_paid_a_label_twice(runs: pathlib.Path, capsys):
    """The GA's run has 3 rows for 2 distinct sequences (and claims 16,000 paid): it does not
    pay each label once; a LLOME run whose rows match its last num_evaluations does."""
    ga, marge = runs / "ga_s0", runs / "marge_s0"
    (ga / "evaluated.csv").write_text('round,sequence,value\n0,"1,2",0.5\n1,"1,2",0.5\n1,"2,1",0\n')
    rows = "".join(f'0,"{i},0",0.5\n' for i in range(14000))
    (marge / "evaluated.csv").write_text("round,sequence,value\n" + rows)
    with open(marge / "rounds.jsonl", "a") as stream:  # the last record counts the queries
        stream.write(
            json.dumps(
                {
                    "round": 3,
                    "num_evaluations": 14000,
                    "min_regret": 0.5,
                    "cum_constraint_queries": 7,
                }
            )
            + "\n"
        )
    assert main(["compare", str(marge), f"GA={ga}"]) == 0
    printed = capsys.readouterr().out
    assert (
        "information contract: 1 of 2 runs pay each label once (no sequence twice in "
        f"`evaluated.csv`, `num_evaluations` = its rows); not: {ga}; constraint queries on "
        "unlabelled sequences: 7 in the run that counts them" in printed
    )


def test_the_default_budget_keeps_early_stops_and_no_run_reads_na(tmp_path: pathlib.Path, capsys):
    """Default budget: the least that a run still going has paid (14,000), not the least of all
    (a run that stopped early at 12,000 keeps its final value); raised to the largest round 0
    (a GA counting 15,000 for round 0) so that nothing reads n/a."""
    stopped = [(10000, 0.9), (12000, 0.0)]
    _run_dir(tmp_path, "a", MARGE, stopped)
    lines = (tmp_path / "a" / "rounds.jsonl").read_text().splitlines()
    last = {**json.loads(lines[-1]), "stop_reason": "the optimum (f = 1) was found"}
    (tmp_path / "a" / "rounds.jsonl").write_text("\n".join([lines[0], json.dumps(last)]) + "\n")
    _run_dir(tmp_path, "b", MARGE, [(10000, 0.9), (16000, 0.5)])
    _run_dir(tmp_path, "c", MARGE, [(10000, 0.9), (14000, 0.6)])
    runs = compare.load_runs([str(tmp_path / n) for n in "abc"])
    assert [r.stop_reason != "" for r in runs] == [True, False, False]
    assert compare.common_budget(runs) == 14000
    (row,) = compare.summarise(runs, 14000)
    assert row.per_run == (0.0, 0.9, 0.6) and row.median == 0.6
    x, y = compare.extended(runs[0], 16000)  # drawn at its final value to the group's end
    assert x.tolist() == [10000, 12000, 16000] and y.tolist() == [0.9, 0.0, 0.0]
    x, _ = compare.extended(runs[2], 16000)  # a run that did not stop is not extended
    assert x.tolist() == [10000, 14000]
    _run_dir(tmp_path, "ga", {"optimizer": "ga"}, [(15000, 0.97), (16000, 0.96)])
    runs = compare.load_runs([str(tmp_path / n) for n in ("a", "b", "c", "ga")])
    assert compare.common_budget(runs) == 15000
    assert main(["compare", *(str(tmp_path / n) for n in ("a", "b", "c", "ga"))]) == 0
    out = capsys.readouterr().out
    assert "budget: 15000 labels in all" in out and "1 run(s) that stopped early" in out
    assert "n/a" not in out.split("information contract")[0].split("|---")[1]


@pytest.mark.parametrize(
    ("runs", "note"),
    [
        ([1], "(1 run a method, 10,000 resamples, seed 0); with 1 run a method it spans"),
        ([2, 2], "(2 runs a method, 10,000 resamples, seed 0); with 2 runs a method it spans"),
        ([5, 3], "(3-5 runs a method, 10,000 resamples, seed 0); with 3 runs a method it spans"),
        ([8, 8], "(8 runs a method, 10,000 resamples, seed 0)."),
    ],
)
def test_the_interval_note_counts_the_runs_it_is_over(runs, note) -> None:
    from llome_jax.commands.compare import ci_note

    assert note in ci_note(runs)


def test_the_median_curve_starts_once_every_run_has_its_round_0() -> None:
    """Issue 67, item 8: three runs whose round 0 paid 2, 4 and 6 labels; before, the median
    began with the first run alone (0.25) and rose to 0.5 as the others joined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from llome_jax.run.plotting import draw_regret_curves

    runs = [([2, 10], [0.25, 0.25]), ([4, 10], [0.5, 0.5]), ([6, 10], [0.5, 0.25])]
    figure, axis = plt.subplots()
    draw_regret_curves(axis, {"A": runs})
    (line,) = axis.lines
    x, y = line.get_xdata(), line.get_ydata()
    plt.close(figure)
    assert list(x) == [6, 10] and list(y) == [0.5, 0.25]
