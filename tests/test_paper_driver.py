"""experiments/paper.py, the paper-figures driver: a tiny plan end to end, resume, skip,
``--report-only``, ``--dry-run`` and bad arguments (GA runs only, so it stays fast)."""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def paper():
    spec = importlib.util.spec_from_file_location("paper_driver", ROOT / "experiments" / "paper.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["paper_driver"] = module
    spec.loader.exec_module(module)
    return module


def _tiny(paper, monkeypatch: pytest.MonkeyPatch) -> None:
    """The smoke scale on f2 only (fig. 1 with ``--methods GA`` is then one GA run)."""
    tiny = dataclasses.replace(paper.SCALES["smoke"], functions=("f2",))
    monkeypatch.setitem(paper.SCALES, "smoke", tiny)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--scale", "huge"], "unknown scale 'huge'"),
        (["--only", "11"], "unknown figure '11'"),
        (["--only", "calibrate"], "unknown figure 'calibrate'"),
        (["--methods", "GA,BO"], "unknown method 'BO'"),
    ],
)
def test_bad_arguments_are_refused_clearly(
    paper, argv: list[str], message: str, tmp_path: pathlib.Path, capsys
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        paper.main([*argv, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_dry_run_lists_the_cpu_plan_and_writes_nothing(
    paper, tmp_path: pathlib.Path, capsys
) -> None:
    assert paper.main(["--scale", "cpu", "--dry-run", "--out", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    plan = paper.build_plan(paper.SCALES["cpu"], list(paper.METHODS), list(paper.FIGURES))
    lines = [line for line in text.splitlines() if line.startswith("  ") and "/" in line]
    assert len(lines) == len(plan)
    # 3 seeds on f2, 1 of each expensive method on f1, f3, f4; the GA everywhere 3 seeds
    names = {spec.name for spec in plan}
    assert {f"f2/LLOME-MargE_seed{s}" for s in range(3)} <= names
    assert "f3/LaMBO-2_seed0" in names and "f3/LaMBO-2_seed1" not in names
    assert {f"f4/GA_seed{s}" for s in range(3)} <= names
    assert {f"f2/LLOME-SFT3-MargE7_seed{s}" for s in range(3)} <= names
    assert "f2/LLOME-REINFORCE_seed2" in names
    minutes = {line.split()[0]: float(line.split()[2]) for line in text.splitlines()[1:-1]}
    hours = float(text.split("estimated total: ")[1].split(" h")[0])
    assert hours == pytest.approx(sum(minutes.values()) / 60, abs=0.01)
    # a LaMBO-2 cpu run on L = 128 is ~2.5-3 h, one on f2 ~23 min
    assert all(minutes[f"{f}/LaMBO-2_seed0"] >= 150 for f in ("f1", "f3", "f4"))
    assert 15 <= minutes["f2/LaMBO-2_seed0"] <= 40
    assert not (tmp_path / "out").exists()


def test_runs_patterns_pick_a_workers_share_of_the_plan(
    paper, tmp_path: pathlib.Path, capsys
) -> None:
    argv = ["--scale", "cpu", "--dry-run", "--out", str(tmp_path / "out")]
    assert paper.main([*argv, "--runs", "f2/LaMBO-2_*,f3/GA_seed1"]) == 0
    text = capsys.readouterr().out
    listed = [line.split()[0] for line in text.splitlines() if line.startswith("  ")]
    assert listed == ["f2/LaMBO-2_seed0", "f2/LaMBO-2_seed1", "f2/LaMBO-2_seed2", "f3/GA_seed1"]
    minutes = [float(line.split()[2]) for line in text.splitlines() if line.startswith("  ")]
    hours = float(text.split("estimated total: ")[1].split(" h")[0])
    assert hours == pytest.approx(sum(minutes) / 60, abs=0.01)  # the share's cost, not the plan's
    with pytest.raises(SystemExit) as exit_info:
        paper.main([*argv, "--runs", "f9/*"])
    assert exit_info.value.code == 2
    assert "matches none of the" in capsys.readouterr().err


def test_a_run_another_process_holds_is_left_busy(
    paper, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    _tiny(paper, monkeypatch)
    scale = paper.SCALES["smoke"]
    (spec,) = paper.build_plan(scale, ["GA"], ["solver"])
    run_dir = tmp_path / "runs" / spec.name
    run_dir.mkdir(parents=True)
    with open(run_dir / ".lock", "a") as held:  # what a second worker's open run holds
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert paper.run_one(spec, scale, run_dir, progress=False) == "busy"
    assert not (run_dir / "done.json").exists() and not (run_dir / "rounds.jsonl").exists()
    assert paper.run_one(spec, scale, run_dir, progress=False) == "new"  # lock released
    assert (run_dir / "done.json").exists()


def test_workers_start_pinned_helpers_and_report_after_them(
    paper, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """``--workers 3`` on 4 cores: two helper processes of the same command (``--workers 1``,
    tagged), each given its own core, this process pinned to the first; the report is written
    after the helpers have finished (here stand-ins that run nothing). A helper pins itself."""
    _tiny(paper, monkeypatch)
    started, pinned, events = [], [], []

    class FakeHelper:
        def __init__(self, command):
            self.args = command
            started.append(command)

        def wait(self):
            events.append("helper done")
            return 0

    monkeypatch.setattr(paper, "_spawn", FakeHelper)
    monkeypatch.setattr(paper, "_affinity", lambda: [4, 5, 6, 7])
    monkeypatch.setattr(paper, "_pin", lambda core: pinned.append({core}))
    real_report = paper.write_report
    monkeypatch.setattr(
        paper, "write_report", lambda *a: (events.append("report"), real_report(*a))[1]
    )
    out = tmp_path / "paper"
    argv = ["--scale", "smoke", "--only", "1", "--methods", "GA", "--workers", "3"]
    assert paper.main([*argv, "--out", str(out), "--no-progress"]) == 0
    assert len(started) == 2
    for k, command in enumerate(started, start=1):
        assert command[1].endswith("paper.py")
        assert command[2:] == [
            "--scale", "smoke", "--only", "1", "--methods", "GA", "--out", str(out),
            "--no-progress", "--workers", "1", "--worker-tag", f"w{k} ", "--pin-core", str(4 + k),
        ]  # fmt: skip
    assert pinned == [{4}]  # this process; each helper pins itself to the core it is given
    assert events == ["helper done", "helper done", "report"]
    assert "f2/GA_seed0: new" in capsys.readouterr().out
    pinned.clear()
    assert paper.main(["--scale", "smoke", "--only", "1", "--methods", "GA", "--out", str(out),
                       "--no-progress", "--worker-tag", "w1 ", "--pin-core", "6"]) == 0  # fmt: skip
    assert pinned == [{6}] and "w1 [1/1] f2/GA_seed0: skipped" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        paper.main(["--workers", "0", "--out", str(tmp_path / "x")])


def test_tiny_plan_runs_resumes_skips_and_redraws(
    paper, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from llome_jax import ga_optimizer

    _tiny(paper, monkeypatch)
    out = tmp_path / "paper"
    argv = [
        "--scale",
        "smoke",
        "--only",
        "1",
        "--methods",
        "ga",
        "--out",
        str(out),
        "--no-progress",
    ]
    # an interrupted run: round 0 only, no done.json; the driver must resume it
    scale = paper.SCALES["smoke"]
    (spec,) = paper.build_plan(scale, ["GA"], ["solver"])
    run_dir = out / "runs" / spec.name
    cfg = paper._ga_config(spec, scale, paper._llome_config(spec, scale))
    ga_optimizer.run(cfg, run_dir, progress=False, max_rounds_this_call=0)
    assert not (run_dir / "done.json").exists()

    assert paper.main(argv) == 0
    assert "f2/GA_seed0: resumed" in capsys.readouterr().out
    rounds = [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == list(range(cfg.rounds + 1))
    assert json.loads((run_dir / "done.json").read_text())["last_round"] == cfg.rounds

    # solver.csv: the GA's min regret at the budget, as rounds.jsonl says
    with open(out / "solver.csv", newline="") as stream:
        (row,) = list(csv.DictReader(stream))
    budget = int(row["budget"])
    expected = min(r["min_regret"] for r in rounds if r["num_evaluations"] <= budget)
    assert row["method"] == "GA" and row["function"] == "f2"
    assert float(row["median_min_regret"]) == pytest.approx(expected)
    report = (out / "report.md").read_text()
    assert "## 1. Solver regret comparison" in report and "**Paper:**" in report
    assert "inconclusive at this scale" in report  # one method, one seed
    assert (out / "solver.png").stat().st_size > 0

    # a second invocation skips the finished run and writes the same CSV, byte for byte
    first = (out / "solver.csv").read_bytes()
    assert paper.main(argv) == 0
    assert "f2/GA_seed0: skipped" in capsys.readouterr().out
    assert (out / "solver.csv").read_bytes() == first

    # --report-only redraws from the run directories without running anything
    (out / "solver.csv").unlink()
    (out / "report.md").unlink()
    assert paper.main([*argv, "--report-only"]) == 0
    assert "f2/GA_seed0" not in capsys.readouterr().out
    assert (out / "solver.csv").read_bytes() == first
    assert (out / "report.md").exists()


def test_a_partial_run_is_listed_but_never_counted(
    paper, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupted run (round 0 only, no ``done.json``) appears in the report's status table as
    partial; the figures count finished runs only, so solver.csv has no row for it."""
    from llome_jax import ga_optimizer

    _tiny(paper, monkeypatch)
    out = tmp_path / "paper"
    scale = paper.SCALES["smoke"]
    (spec,) = paper.build_plan(scale, ["GA"], ["solver"])
    cfg = paper._ga_config(spec, scale, paper._llome_config(spec, scale))
    ga_optimizer.run(cfg, out / "runs" / spec.name, progress=False, max_rounds_this_call=0)
    argv = ["--scale", "smoke", "--only", "1", "--methods", "ga", "--out", str(out)]
    assert paper.main([*argv, "--report-only", "--no-progress"]) == 0
    with open(out / "solver.csv", newline="") as stream:
        assert list(csv.DictReader(stream)) == []
    report = (out / "report.md").read_text()
    assert f"| {spec.name} | GA | 0 | partial |" in report


def test_calibration_verdict_names_what_is_missing(paper) -> None:
    methods = ["LLOME-MargE", "LLOME-SFT"]
    verdict, why = paper._rho_verdict({"LLOME-MargE": (-0.5, 5000)}, methods)
    assert (verdict, why) == (
        "inconclusive at this scale",
        "no finished run with logged candidates: LLOME-SFT",
    )
    verdict, why = paper._rho_verdict({m: (-0.5, 150) for m in methods}, methods)
    assert verdict == "inconclusive at this scale" and "fewer than 200" in why
    verdict, why = paper._rho_verdict(
        {"LLOME-MargE": (-0.5, 300), "LLOME-SFT": (0.1, 300)}, methods
    )
    assert verdict == "disagree" and "LLOME-SFT: rho 0.100 over 300" in why
    verdict, _ = paper._rho_verdict({m: (-0.2, 300) for m in methods}, methods)
    assert verdict == "agree"


def test_early_stops_name_the_runs_short_of_the_budget(paper, tmp_path: pathlib.Path) -> None:
    """Figure 8 says which runs stopped before the budget and why (on the half-quantised f2 the
    GA's labels are all 0, so LLOME has no training pairs and stops after round 0)."""
    scale = paper.SCALES["cpu"]
    ctx = paper.Context(tmp_path, scale, "cpu", [], {})
    budget = ctx.budget

    def spec(method: str, seed: int):
        return paper.RunSpec(method, "llome", paper.HALF, seed, None, ("half_quant",))

    selected = {}
    for seed in (0, 1):  # two LLOME-SFT runs that stopped after round 0 with the same reason
        s = spec("LLOME-SFT", seed)
        ctx.stop_reasons[s] = "no training pairs"
        selected[s] = [{"round": 0, "num_evaluations": 10_000}]
    # a run of all 10 rounds is not listed, even when its rounds labelled fewer than j each
    full = spec("LLOME-MargE", 0)
    selected[full] = [{"round": 10, "num_evaluations": budget - 1_500}]
    assert paper._early_stops(ctx, selected) == (
        "LLOME-SFT: 2 runs after round 0 (no training pairs)"
    )
    assert paper._early_stops(ctx, {full: selected[full]}) == ""


def test_hypervolumes_are_compared_on_the_functions_every_method_has(
    paper, tmp_path: pathlib.Path
) -> None:
    """The GA ran on f1 too, the others on f2 only: the verdict must compare f2 with f2. Regret
    curves are flat from 10K labels, so each hypervolume is regret x 20 (K labels) by hand."""
    scale = paper.SCALES["cpu"]
    ctx = paper.Context(tmp_path, scale, "cpu", [], {})
    budget = ctx.budget
    assert budget == 30_000

    def run(method: str, function: str, regret: float):
        spec = paper.RunSpec(method, "x", function, 0, None, ("difficulty_pareto",))
        return spec, [
            {"num_evaluations": 10_000, "min_regret": regret},
            {"num_evaluations": budget, "min_regret": regret},
        ]

    regrets = {"GA": 0.9, "LaMBO-2": 0.6, "LLOME-SFT": 0.5, "LLOME-MargE": 0.4, "LLOME-DPO": 0.5}
    ctx.runs.update(run(m, "f2", r) for m, r in regrets.items())
    ctx.runs.update([run("GA", "f1", 0.0)])  # pooled, the GA's mean would be 9, below LaMBO-2
    text, _ = paper.figure_difficulty_pareto(ctx)
    assert "| GA | 2 | 9.000 | f1, f2 | 18.000 |" in text
    assert "| LaMBO-2 | 1 | 12.000 | f2 | 12.000 |" in text
    assert "below GA's and LaMBO-2's on f2" in text and "agree (LLOME" in text


def test_a_shared_lowest_median_is_not_agreement(paper) -> None:
    """The paper says SFT_1-MargE_9 is the best pipeline; five pipelines tied at 0.789 do not show
    it (the cpu report's figure 4 first called that "agree")."""

    def summary(**medians: float) -> dict:
        return {m: {"seeds": 3, "median": v} for m, v in medians.items()}

    assert paper._verdict_best(summary(A=0.5, B=0.7), "A") == ("agree", "A has the lowest median")
    verdict, why = paper._verdict_best(summary(A=0.789, B=0.789, C=0.9), "A")
    assert verdict == "inconclusive at this scale" and why.endswith("0.789 with B")
    assert paper._verdict_best(summary(A=0.8, B=0.7), "A")[0] == "disagree"
    # with too few seeds the verdict stays inconclusive, and says which way the medians point
    few = {"A": {"seeds": 1, "median": 0.625}, "B": {"seeds": 3, "median": 0.906}}
    assert paper._verdict_best(few, "A") == (
        "inconclusive at this scale",
        "fewer than 3 seeds per method; lowest median 0.625: A (some methods 1 seed)",
    )
