"""The paper-figures driver (:mod:`llome_jax.bench`, ``llome-jax paper``, ``experiments/paper.py``):
a tiny plan end to end, resume, skip, ``--report-only``, ``--dry-run`` and bad arguments (GA runs
only, so it stays fast)."""

from __future__ import annotations

import csv
import dataclasses
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from llome_jax.bench import cli, difficulty, execution, results
from llome_jax.bench import figures as bench_figures
from llome_jax.bench import report as bench_report
from llome_jax.bench.plan import DEFAULT_METHODS, FIGURES, HALF, SCALES, RunSpec, build_plan

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    """The smoke scale on f2 only (fig. 1 with ``--methods GA`` is then one GA run)."""
    tiny = dataclasses.replace(SCALES["smoke"], functions=("f2",))
    monkeypatch.setitem(SCALES, "smoke", tiny)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--scale", "huge"], "unknown scale 'huge'"),
        (["--only", "11"], "unknown figure '11'"),
        (["--only", "calibrate"], "unknown figure 'calibrate'"),
        (["--methods", "GA,BO"], "unknown method 'BO'"),
        (["--functions", "f2,f5"], "unknown function 'f5'; choose from f1, f2, f3, f4"),
    ],
)
def test_bad_arguments_are_refused_clearly(
    argv: list[str], message: str, tmp_path: pathlib.Path, capsys
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*argv, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_dry_run_lists_the_cpu_plan_and_writes_nothing(tmp_path: pathlib.Path, capsys) -> None:
    assert cli.main(["--scale", "cpu", "--dry-run", "--out", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    plan = build_plan(SCALES["cpu"], list(DEFAULT_METHODS), list(FIGURES))
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
    # each run's minutes are printed to 0.1 (off by up to 0.05), the total to 0.01 h
    assert hours == pytest.approx(sum(minutes.values()) / 60, abs=0.005 + 0.05 * len(lines) / 60)
    # a LaMBO-2 cpu run on L = 128 is ~2.5-3 h; one on f2 took 55-62 min in the 8-seed re-run
    # (two runs on 2 cores), an LLOME-MargE run 17-25 min
    assert all(minutes[f"{f}/LaMBO-2_seed0"] >= 150 for f in ("f1", "f3", "f4"))
    assert 45 <= minutes["f2/LaMBO-2_seed0"] <= 70
    assert 12 <= minutes["f2/LLOME-MargE_seed0"] <= 30
    assert not (tmp_path / "out").exists()


def test_llome_jax_paper_is_the_same_command(tmp_path: pathlib.Path, capsys) -> None:
    """``llome-jax paper`` (the CLI subcommand), ``cli.main`` and ``experiments/paper.py`` take
    the same flags and print the same plan; a bad selection is the CLI's one-line error, exit 2,
    before anything is written."""
    from llome_jax.cli import main as llome_jax

    argv = ["--scale", "cpu", "--dry-run", "--only", "1,9", "--out", str(tmp_path / "out")]
    assert cli.main(argv) == 0
    script = capsys.readouterr().out
    assert llome_jax(["paper", *argv]) == 0
    assert capsys.readouterr().out == script and "estimated total" in script
    # the script is a thin entry point to the same code
    done = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "paper.py"), *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert (done.returncode, done.stdout) == (0, script), done.stderr[-2000:]
    assert llome_jax(["paper", "--only", "11", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llome-jax paper: error: unknown figure '11'") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_an_interrupted_plan_says_how_to_resume(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Ctrl-C or SIGTERM during the runs: one line saying that the same command resumes them
    (the round driver stopped at a checkpoint), exit 130 / 143, no report written."""
    from llome_jax.run.runner import Terminated

    _tiny(monkeypatch)
    argv = ["--scale", "smoke", "--only", "1", "--methods", "GA", "--out", str(tmp_path / "out")]
    for stop, code in ((KeyboardInterrupt(), 130), (Terminated(), 143)):

        def interrupted(*args, stop=stop, **kwargs):
            raise stop

        monkeypatch.setattr(execution, "run_one", interrupted)
        assert cli.main([*argv, "--no-progress"]) == code
        err = capsys.readouterr().err
        assert "the same command resumes them" in err and err.count("\n") == 1
        assert not (tmp_path / "out" / "report.md").exists()


def test_runs_patterns_pick_a_workers_share_of_the_plan(tmp_path: pathlib.Path, capsys) -> None:
    argv = ["--scale", "cpu", "--dry-run", "--out", str(tmp_path / "out")]
    assert cli.main([*argv, "--runs", "f2/LaMBO-2_*,f3/GA_seed1"]) == 0
    text = capsys.readouterr().out
    listed = [line.split()[0] for line in text.splitlines() if line.startswith("  ")]
    assert listed == [*(f"f2/LaMBO-2_seed{k}" for k in range(8)), "f3/GA_seed1"]
    minutes = [float(line.split()[2]) for line in text.splitlines() if line.startswith("  ")]
    hours = float(text.split("estimated total: ")[1].split(" h")[0])
    assert hours == pytest.approx(sum(minutes) / 60, abs=0.01)  # the share's cost, not the plan's
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*argv, "--runs", "f9/*"])
    assert exit_info.value.code == 2
    assert "matches none of the" in capsys.readouterr().err


def test_functions_narrow_figure_1_and_the_report_header(tmp_path: pathlib.Path, capsys) -> None:
    """``--functions f2``: the plan loses figure 1's f1, f3 and f4 runs and nothing else; the
    report's header counts the seeds of the runs it covers, per function and method."""
    argv = ["--scale", "cpu", "--dry-run", "--out", str(tmp_path / "out")]
    assert cli.main([*argv, "--functions", "f2"]) == 0
    listed = {
        line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")
    }
    everything = build_plan(SCALES["cpu"], list(DEFAULT_METHODS), list(FIGURES))
    others = {s.name for s in everything if s.function in ("f1", "f3", "f4")}
    assert len(others) == 21  # 3 GA + 4 expensive methods on each of f1, f3, f4
    assert listed == {s.name for s in everything} - others | {"ga_difficulty"}

    plan = build_plan(SCALES["cpu"], ["GA", "LaMBO-2"], ["solver"])
    assert bench_report.seeds_line(plan) == (
        "f1: 3 (GA), 1 (LaMBO-2); f2: 8 (each of 2 methods); f3: 3 (GA), 1 (LaMBO-2); "
        "f4: 3 (GA), 1 (LaMBO-2)"
    )
    assert bench_report.seeds_line(plan[:2]) == "f1: 2 (GA)"


def test_a_run_another_process_holds_is_left_busy(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    _tiny(monkeypatch)
    scale = SCALES["smoke"]
    (spec,) = build_plan(scale, ["GA"], ["solver"])
    run_dir = tmp_path / "runs" / spec.name
    run_dir.mkdir(parents=True)
    with open(run_dir / ".lock", "a") as held:  # what a second worker's open run holds
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert execution.run_one(spec, scale, run_dir, progress=False) == "busy"
    assert not (run_dir / "done.json").exists() and not (run_dir / "rounds.jsonl").exists()
    assert execution.run_one(spec, scale, run_dir, progress=False) == "new"  # lock released
    assert (run_dir / "done.json").exists()


def test_workers_start_pinned_helpers_and_report_after_them(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """``--workers 3`` on 4 cores: two helper processes of the same command (``--workers 1``,
    tagged), each given its own core, this process pinned to the first; the report is written
    after the helpers have finished (here stand-ins that run nothing). A helper pins itself."""
    _tiny(monkeypatch)
    started, pinned, events = [], [], []

    class FakeHelper:
        def __init__(self, command):
            self.args = command
            started.append(command)

        def wait(self):
            events.append("helper done")
            return 0

    monkeypatch.setattr(cli, "_spawn", FakeHelper)
    monkeypatch.setattr(cli, "_affinity", lambda: [4, 5, 6, 7])
    monkeypatch.setattr(cli, "_pin", lambda core: pinned.append({core}))
    real_report = bench_report.write_report
    monkeypatch.setattr(
        bench_report, "write_report", lambda *a: (events.append("report"), real_report(*a))[1]
    )
    out = tmp_path / "paper"
    argv = ["--scale", "smoke", "--only", "1", "--methods", "GA", "--workers", "3"]
    assert cli.main([*argv, "--out", str(out), "--no-progress"]) == 0
    assert len(started) == 2
    for k, command in enumerate(started, start=1):
        assert command[:4] == [sys.executable, *cli.ENTRY]  # python -m llome_jax.cli paper
        assert command[4:] == [
            "--scale",
            "smoke",
            "--out",
            str(out),
            "--only",
            "1",
            "--methods",
            "GA",
            "--no-progress",
            "--workers",
            "1",
            "--worker-tag",
            f"w{k} ",
            "--pin-core",
            str(4 + k),
        ]  # fmt: skip  (the same selection, rebuilt from the parsed flags)
    assert pinned == [{4}]  # this process; each helper pins itself to the core it is given
    assert events == ["helper done", "helper done", "report"]
    assert "f2/GA_seed0: new" in capsys.readouterr().out
    pinned.clear()
    assert cli.main(["--scale", "smoke", "--only", "1", "--methods", "GA", "--out", str(out),
                       "--no-progress", "--worker-tag", "w1 ", "--pin-core", "6"]) == 0  # fmt: skip
    assert pinned == [{6}] and "w1 [1/1] f2/GA_seed0: skipped" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["--workers", "0", "--out", str(tmp_path / "x")])


def test_tiny_plan_runs_resumes_skips_and_redraws(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from llome_jax.ga import optimizer as ga_optimizer

    _tiny(monkeypatch)
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
    scale = SCALES["smoke"]
    (spec,) = build_plan(scale, ["GA"], ["solver"])
    run_dir = out / "runs" / spec.name
    cfg = execution.ga_config(spec, scale, execution.llome_config(spec, scale))
    ga_optimizer.run(cfg, run_dir, progress=False, max_rounds_this_call=0)
    assert not (run_dir / "done.json").exists()

    assert cli.main(argv) == 0
    assert "f2/GA_seed0: resumed" in capsys.readouterr().out
    rounds = [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == list(range(cfg.rounds + 1))
    assert json.loads((run_dir / "done.json").read_text())["last_round"] == cfg.rounds

    # solver.csv: the GA's min regret at the budget (labels after round 0), as rounds.jsonl says
    with open(out / "solver.csv", newline="") as stream:
        (row,) = list(csv.DictReader(stream))
    budget = rounds[0]["num_evaluations"] + int(row["labels_after_round_0"])
    expected = min(r["min_regret"] for r in rounds if r["num_evaluations"] <= budget)
    assert row["method"] == "GA" and row["function"] == "f2"
    assert float(row["median_min_regret"]) == pytest.approx(expected)
    paid = rounds[-1]["num_evaluations"] - rounds[0]["num_evaluations"]
    assert int(row["labels_read"]) == min(paid, int(row["labels_after_round_0"]))
    assert int(row["stopped_early"]) == int(paid < int(row["labels_after_round_0"]))
    report = (out / "report.md").read_text()
    assert "## 1. Solver regret comparison" in report and "**Paper:**" in report
    # the GA alone: the f2 claims name methods that did not run; each claim has its own line
    assert "f2: LLOME-MargE performs the best: **not comparable**" in report
    assert (
        "- f2: LLOME-MargE and LaMBO-2 outperform the other methods: **not comparable**" in report
    )
    accounting = json.loads((run_dir / "config.json").read_text()).get(
        "accounting", "every_evaluation"
    )
    assert (
        f"Label accounting of this figure's runs: `{accounting}` "
        f"({results.ACCOUNTING_TEXT[accounting]}): 1 run." in report
    )
    assert (out / "solver.png").stat().st_size > 0
    # the information contract, checked on the run's evaluated.csv (round 0 included)
    labels = len((run_dir / "evaluated.csv").read_text().splitlines()) - 1
    assert labels == rounds[-1]["num_evaluations"]
    assert "Information contract (finished runs): 1 of 1 runs pay each label once" in report
    assert f"| {labels:,} ({labels:,}) | 0 |" in report
    # curves.csv: the run's rounds.jsonl, round by round
    with open(out / "curves.csv", newline="") as stream:
        curve = list(csv.DictReader(stream))
    assert [
        (r["run"], r["state"], int(r["round"]), int(r["labels"]), float(r["min_regret"]))
        for r in curve
    ] == [
        (spec.name, "finished", r["round"], r["num_evaluations"], r["min_regret"]) for r in rounds
    ]
    assert {r["accounting"] for r in curve} == {accounting}

    # a second invocation skips the finished run and writes the same CSV, byte for byte
    first = (out / "solver.csv").read_bytes()
    assert cli.main(argv) == 0
    assert "f2/GA_seed0: skipped" in capsys.readouterr().out
    assert (out / "solver.csv").read_bytes() == first

    # --report-only redraws from the run directories without running anything
    (out / "solver.csv").unlink()
    (out / "report.md").unlink()
    assert cli.main([*argv, "--report-only"]) == 0
    assert "f2/GA_seed0" not in capsys.readouterr().out
    assert (out / "solver.csv").read_bytes() == first
    assert (out / "report.md").exists()


def test_a_partial_run_is_listed_but_never_counted(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupted run (round 0 only, no ``done.json``) appears in the report's status table as
    partial; the figures count finished runs only, so solver.csv has no row for it."""
    from llome_jax.ga import optimizer as ga_optimizer

    _tiny(monkeypatch)
    out = tmp_path / "paper"
    scale = SCALES["smoke"]
    (spec,) = build_plan(scale, ["GA"], ["solver"])
    cfg = execution.ga_config(spec, scale, execution.llome_config(spec, scale))
    ga_optimizer.run(cfg, out / "runs" / spec.name, progress=False, max_rounds_this_call=0)
    argv = ["--scale", "smoke", "--only", "1", "--methods", "ga", "--out", str(out)]
    assert cli.main([*argv, "--report-only", "--no-progress"]) == 0
    with open(out / "solver.csv", newline="") as stream:
        assert list(csv.DictReader(stream)) == []
    report = (out / "report.md").read_text()
    assert f"| {spec.name} | GA | 0 | partial |" in report
    # its curve is kept, marked partial: round 0 as rounds.jsonl has it
    (round0,) = [json.loads(line) for line in (out / "runs" / spec.name / "rounds.jsonl").open()]
    with open(out / "curves.csv", newline="") as stream:
        (row,) = list(csv.DictReader(stream))
    assert (row["run"], row["state"], row["round"]) == (spec.name, "partial", "0")
    assert int(row["labels"]) == round0["num_evaluations"] > 0


def test_early_stops_name_the_runs_short_of_the_budget(tmp_path: pathlib.Path) -> None:
    """Figure 8 says which runs stopped before the budget and why (on the half-quantised f2 the
    GA's labels are all 0, so LLOME has no training pairs and stops after round 0)."""
    scale = SCALES["cpu"]
    ctx = results.Context(tmp_path, scale, "cpu", [], {})
    budget = ctx.budget

    def spec(method: str, seed: int):
        return RunSpec(method, "llome", HALF, seed, None, ("half_quant",))

    selected = {}
    for seed in (0, 1):  # two LLOME-SFT runs that stopped after round 0 with the same reason
        s = spec("LLOME-SFT", seed)
        ctx.stop_reasons[s] = "no training pairs"
        selected[s] = [{"round": 0, "num_evaluations": 10_000}]
    # a run of all 10 rounds is not listed, even when its rounds labelled fewer than j each
    full = spec("LLOME-MargE", 0)
    selected[full] = [{"round": 10, "num_evaluations": budget - 1_500}]
    assert results.early_stops(ctx, selected) == (
        "LLOME-SFT: 2 runs after round 0 (no training pairs)"
    )
    assert results.early_stops(ctx, {full: selected[full]}) == ""


def test_hypervolumes_are_compared_on_the_functions_every_method_has(
    tmp_path: pathlib.Path,
) -> None:
    """The GA ran on f1 too, the others on f2 only: the verdict must compare f2 with f2. Regret
    curves are flat from 10K labels, so each hypervolume is regret x 20 (K labels) by hand."""
    scale = SCALES["cpu"]
    ctx = results.Context(tmp_path, scale, "cpu", [], {})
    budget = ctx.budget
    assert budget == 20_000  # labels after round 0: the paper's 30K minus its 10K GA labels

    def run(method: str, function: str, regret: float):
        spec = RunSpec(method, "x", function, 0, None, ("difficulty_pareto",))
        return spec, [
            {"round": 0, "num_evaluations": 10_000, "min_regret": regret},
            {"round": 10, "num_evaluations": 10_000 + budget, "min_regret": regret},
        ]

    regrets = {"GA": 0.9, "LaMBO-2": 0.6, "LLOME-SFT": 0.5, "LLOME-MargE": 0.4, "LLOME-DPO": 0.5}
    ctx.runs.update(run(m, "f2", r) for m, r in regrets.items())
    ctx.runs.update([run("GA", "f1", 0.0)])  # pooled, the GA's mean would be 9, below LaMBO-2
    text, found = bench_figures.figure_difficulty_pareto(ctx)
    assert "| GA | 2 | 9.000 | f1, f2 | 18.000 |" in text
    assert "| LaMBO-2 | 1 | 12.000 | f2 | 12.000 |" in text
    verdicts = {v.claim: v for v in found}
    marge = verdicts["LLOME-MargE has a lower hypervolume than the GA and LaMBO-2"]
    # one run each: too few to decide, pointing to agree (8 < 12 and 18 on f2, not GA's pooled 9)
    assert marge.verdict == "inconclusive" and "point to agree" in marge.reason
    assert "GA 18.000, LaMBO-2 12.000" in marge.reason
    sweep = verdicts["GA difficulty depends most strongly on q"]
    assert sweep.verdict == "not comparable"  # the sweep has not run


# ------------------------------------------------------------------------------------------
# The report from hand-made run directories (no optimizer runs): every figure, every verdict
# ------------------------------------------------------------------------------------------
#: final min regret per (function, method); the curve falls linearly from 0.97 at round 0
FINAL = {
    "f2": {"GA": 0.9, "LLOME-SFT": 0.8, "LLOME-MargE": 0.5, "LLOME-DPO": 0.85, "LaMBO-2": 0.6},
    "f3": {"GA": 0.9, "LLOME-SFT": 0.8, "LLOME-MargE": 0.5, "LLOME-DPO": 0.85, "LaMBO-2": 0.4},
}
#: what each f2 method's records say: frac_unique and frac_feasible (for LLOME the record's
#: frac_feasible is after the Filter's cap, 0.95; its candidate log says 0.3 before it)
F2_RATES = {
    "GA": (0.3, 0.6),
    "LaMBO-2": (0.95, 0.7),
    "LLOME-MargE": (0.4, 0.95),
    "LLOME-SFT": (0.35, 0.95),
    "LLOME-DPO": (0.1, 0.95),
}


def _curve(final: float, rounds: int) -> list[float]:
    return [0.97 + (final - 0.97) * k / rounds for k in range(rounds + 1)]


def _candidate_log(rng, r: int, m: int = 60, j: int = 20) -> dict:
    """Round ``r``'s candidates: 30 % feasible; among them the value rises with the likelihood
    up to 0.7 and falls above it (calibrated, then overconfident)."""
    lik = rng.uniform(0.3, 0.95, m)
    feasible = np.zeros(m, bool)
    feasible[rng.permutation(m)[: int(0.3 * m)]] = True
    values = np.where(lik <= 0.7, lik - 0.3, 0.4 - (lik - 0.7))
    values = np.where(feasible, values, -np.inf).astype(np.float32)
    selected = np.zeros(m, bool)
    selected[np.argsort(-lik)[:j]] = True
    return {
        "round": np.asarray(r),
        "loss": np.asarray("marge"),
        "log_likelihood_raw": np.log(lik).astype(np.float32),
        "values": values,
        "feasible": feasible,
        "selected": selected,
        "iteration": (np.arange(m) % 3 + 1).astype(np.int32),
    }


def _write_run(out: pathlib.Path, spec, rounds: int, accounting: str = "every_evaluation"):
    path = out / "runs" / spec.name
    (path / "candidates").mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"accounting": accounting}))
    method = spec.method
    if spec.function == "Ehr(32,32)-4-4-2" and spec.kind == "llome":
        curve, last, stop = [1.0], 0, "the labelled set yields no training pairs"
    elif method == "LLOME-REINFORCE":  # falls for two rounds, then flat
        curve, last, stop = [0.97, 0.9, 0.86] + [0.86] * (rounds - 2), rounds, ""
    elif method == "LLOME-MargE" and spec.function == "f2" and spec.seed == 0:
        curve, last, stop = _curve(0.0, rounds), rounds, "the optimum (f = 1) was found"
    else:
        final = FINAL.get(spec.function, {}).get(method, 0.9 if "SFT" in method else 0.95)
        curve, last, stop = _curve(final, rounds), rounds, ""
    unique, feasible = F2_RATES.get(method, (0.4, 0.95))
    records = []
    for k, regret in enumerate(curve):
        u = unique * (1 - 0.09 * k) if method == "LLOME-DPO" else unique  # DPO: 0.1 -> 0.01
        records.append(
            {
                "round": k,
                "num_evaluations": 10_000 + 2_000 * k,
                "min_regret": regret,
                "frac_unique": u,
                "frac_feasible": feasible,
                "num_proposals": 2_000,
                "frac_feasible_generated": 0.3 if spec.kind == "llome" else None,
            }
        )
        if spec.kind == "llome" and k >= 1:
            rng = np.random.default_rng([spec.seed, k])
            np.savez(path / "candidates" / f"round_{k:04d}.npz", **_candidate_log(rng, k))
    (path / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (path / "done.json").write_text(json.dumps({"last_round": last, "stop_reason": stop}))


def test_report_from_hand_made_runs_has_one_verdict_per_claim(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cpu plan written by hand (rounds.jsonl, config.json, candidate logs): every figure is
    drawn, every sub-claim has its own line, and the six points of issue 34 hold: f2's claims
    are not hidden, LLOME's feasibility is measured before the Filter, calibration is over
    feasible candidates (both halves), a LLOME that never trained is not comparable, the model-size
    claims use one quantisation level, and mixed label accounting is not comparable."""
    scale = SCALES["cpu"]
    plan = build_plan(scale, list(DEFAULT_METHODS), list(FIGURES))
    out = tmp_path / "paper"
    for spec in plan:
        _write_run(out, spec, scale.rounds)
    bench_report.write_report(out, "cpu", scale, plan, list(FIGURES), 0.0)
    report = (out / "report.md").read_text()
    assert "Not available" not in report
    # every figure's plot is embedded in its section, where a reader sees it
    for key, title in FIGURES.items():
        assert f"![{title}]({key}.png)" in report
    assert "](sft_marge_calibration.png)" in report
    verdicts = {}
    for line in report.splitlines():
        if line.startswith("- ") and ": **" in line:
            claim, rest = line[2:].split(": **", 1)
            verdicts[claim] = rest.split("**", 1)[0]
    expected = {
        # fig. 1: every sub-claim its own line (the combined "inconclusive" hid f2's answer)
        # within one level of LaMBO-2 (0.5 vs 0.6 < 0.125 at q = 4): the rule does not decide
        "f2: LLOME-MargE performs the best": "inconclusive",
        "f2: LLOME-MargE and LaMBO-2 outperform the other methods": "agree",
        "f3: LaMBO-2 performs the best": "inconclusive",  # 1 LLOME/LaMBO-2 seed on f3
        "f1: all methods perform comparably": "inconclusive",
        # fig. 2: LaMBO-2's 0.7 beats LLOME's 0.3 before the Filter (0.95 after its cap)
        "LaMBO-2 produces the most diverse sequences": "agree",
        "LaMBO-2 produces the most feasible sequences": "agree",
        "LLOME-MargE generates more unique sequences than the GA": "agree",
        "LLOME-DPO improves neither diversity nor feasibility": "agree",
        # fig. 3: both halves, on feasible candidates
        "LLOME-MargE assigns higher likelihood to lower regret (feasible candidates)": "agree",
        "LLOME-MargE is overconfident above likelihood 0.7": "agree",
        "LLOME-SFT is overconfident above likelihood 0.7": "agree",
        # fig. 4: the seed-0 LLOME-MargE run (= SFT1-MargE9) found the optimum, no other did
        "LLOME-SFT1-MargE9 is the sole pipeline to find the optimum": "agree",
        # fig. 5
        "LLOME-REINFORCE decreases the regret": "agree",
        "LLOME-REINFORCE plateaus early": "agree",
        "LLOME-REINFORCE does not reach the optimum": "agree",
        "LLOME-MargE ends below LLOME-REINFORCE": "agree",
        # fig. 8: every LLOME run stopped after round 0
        "Ehr(32,32)-4-4-2: LLOME-MargE performs the best": "not comparable",
        # fig. 9: within a level up to 22K; then 0.688 -> 0.5, more than a level (0.078)
        # seed 0's curve falls to 0: the equivalence test (TOST) cannot reject a difference
        "small LLOME-MargE comparable to LaMBO-2 up to 22K labels": "inconclusive",
        "small LLOME-MargE comparable to LLOME-MargE (Pythia 2.8B) up to 22K labels": (
            "not comparable"
        ),
        "small LLOME-MargE plateaus after 22K labels": "disagree",
        # fig. 10: the sweep did not run
        "GA difficulty depends most strongly on q": "not comparable",
    }
    assert {c: verdicts.get(c) for c in expected} == expected
    for claim in (
        "LLOME-MargE: refinement reduces regret (last vs first iteration)",
        "LLOME-SFT: first edits help more often than later ones",
        "LLOME-MargE: likelihood selection often misses the best candidate",
        "LLOME-SFT: likelihood selection picks better than random",
        "LLOME-SFT1-MargE9 has the best calibration (most negative rho on feasible candidates)",
        "an intermediate SFT-to-MargE switch performs worst",
        "LLOME-DPO has a lower hypervolume than the GA and LaMBO-2",
    ):
        assert claim in verdicts
    # figure 10's hypervolumes: local search and the prior's runs are methods of their own; only
    # the SFT_i-MargE_j pipelines of figure 4 form one family
    with open(out / "difficulty_pareto.csv", newline="") as stream:
        hv_runs = {
            r["a"]: int(r["b"]) for r in csv.DictReader(stream) if r["kind"] == "hypervolume"
        }
    pipelines = [s for s in plan if s.method.startswith("LLOME-SFT") and "-MargE" in s.method]
    assert len(pipelines) == 24  # SFT3-MargE7, SFT5-MargE5 and SFT7-MargE3, 8 seeds each
    assert hv_runs["LLOME-SFT/MargE pipelines"] == len(pipelines)
    runs_of = {m: sum(s.method == m for s in plan) for m in {s.method for s in plan}}
    assert hv_runs == {
        **{m: n for m, n in runs_of.items() if m not in {s.method for s in pipelines}},
        "LLOME-SFT/MargE pipelines": 24,
    }
    assert hv_runs["local search"] == 8 and hv_runs["LLOME-MargE-prior"] == 8  # f2 only
    # the figure table lists the sub-verdicts, so a disagreement shows there too
    (row,) = [line for line in report.splitlines() if line.startswith("| 9. Model size")]
    assert "small LLOME-MargE plateaus after 22K labels: **disagree**" in row
    assert "Label accounting of this figure's runs: `every_evaluation` (the paper's" in report
    assert "Information contract (finished runs): no run has an `evaluated.csv`." in report
    with open(out / "diversity.csv", newline="") as stream:
        rows = [r for r in csv.DictReader(stream) if r["method"] == "LLOME-MargE"]
    assert {float(r["frac_feasible"]) for r in rows} == {0.3}  # the log, not the record's 0.95

    # a GA recorded before num_proposals measured uniqueness on its de-duplicated archive
    ctx = results.Context(out, scale, "cpu", plan, {})
    for spec in plan:
        records = results.read_rounds(out / "runs" / spec.name)
        if spec.method == "GA":
            records = [{k: v for k, v in r.items() if k != "num_proposals"} for r in records]
        ctx.runs[spec] = records
    _, found = bench_figures.figure_diversity(ctx)
    found = {v.claim: v.verdict for v in found}
    assert found["LaMBO-2 produces the most diverse sequences"] == "not comparable"
    assert found["LLOME-DPO improves neither diversity nor feasibility"] == "agree"

    # runs of both label accountings: the budget verdicts are not comparable
    ga = next(s for s in plan if s.name == "f2/GA_seed1")
    (out / "runs" / ga.name / "config.json").write_text(json.dumps({"accounting": "pay_once"}))
    # ... and that GA run's evaluated.csv: 3 rows, 2 distinct (its records claim 30,000 paid)
    (out / "runs" / ga.name / "evaluated.csv").write_text(
        'round,sequence,value\n0,"1,2",0.5\n1,"2,1",0.25\n1,"1,2",0.5\n'
    )
    bench_report.write_report(out, "cpu", scale, plan, ["solver"], 0.0)
    report = (out / "report.md").read_text()
    finished = report.count("| finished |")
    assert (
        "Information contract (finished runs): 0 of 1 runs pay each label once (no sequence twice in "
        "`evaluated.csv`, `num_evaluations` = its rows); not: f2/GA_seed1; constraint queries not counted "
        f"(runs recorded before they were); {finished - 1} without "
        "`evaluated.csv`." in report
    )
    assert "| f2/GA_seed1 | GA | 10 | finished | pay_once | 3 (2) |  |" in report
    assert (
        "- f2: LLOME-MargE performs the best: **not comparable** (its runs count labels" in report
    )
    assert "mixed: budget verdicts are not comparable" in report

    # a figure that cannot be drawn says why and embeds no plot left by an earlier report
    def broken(ctx):
        raise ValueError("no runs")

    monkeypatch.setitem(bench_figures.FIGURE_FUNCTIONS, "solver", broken)
    bench_report.write_report(out, "cpu", scale, plan, ["solver"], 0.0)
    report = (out / "report.md").read_text()
    assert "Not available: ValueError: no runs" in report and "](solver.png)" not in report


def _job_argv(line: str) -> list[str]:
    """A printed job line -> the arguments of ``cli.main``, after checking that it is a
    complete command naming this interpreter and the script by absolute paths."""
    import shlex

    words = shlex.split(line)
    assert words[0] == sys.executable and pathlib.Path(words[0]).is_absolute()
    assert words[1:4] == list(cli.ENTRY)  # -m llome_jax.cli paper: the installed package
    return words[4:]


def test_print_jobs_gives_one_self_contained_command_per_run(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """``--print-jobs`` prints one command per planned run (14 at smoke scale), the difficulty
    sweep's, and last the report's; replaying a run command (from another working directory,
    with ``run_one`` stubbed so nothing is trained) runs exactly its run into
    ``OUT/runs/<name>`` and writes no report; the report command runs nothing and writes it.
    Filters (``--only``, ``--methods``, ``--runs``) carry over into the commands."""
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--scale", "smoke", "--out", "out", "--print-jobs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    plan = build_plan(SCALES["smoke"], list(DEFAULT_METHODS), list(FIGURES))
    assert len(plan) == 14 and len(lines) == len(plan) + 2
    assert not out.exists()  # printing writes nothing

    calls: list[tuple[str, pathlib.Path]] = []
    reports: list[pathlib.Path] = []
    sweeps: list[pathlib.Path] = []
    monkeypatch.setattr(
        execution, "run_one", lambda spec, scale, path, progress: calls.append((spec.name, path))
    )
    monkeypatch.setattr(difficulty, "run_difficulty", lambda scale, path: sweeps.append(path))
    monkeypatch.setattr(bench_report, "write_report", lambda out, *rest: reports.append(out))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the commands are cd-independent
    for spec, line in zip(plan, lines, strict=False):
        argv = _job_argv(line)
        assert argv[argv.index("--out") + 1] == str(out) and "--no-report" in argv
        calls.clear()
        assert cli.main(argv) == 0
        assert calls == [(spec.name, out / "runs" / spec.name)]  # exactly this run
    assert reports == [] and sweeps == []
    argv = _job_argv(lines[-2])  # the sweep, by itself
    assert cli.main(argv) == 0 and not calls[1:] and sweeps == [out / "runs" / "ga_difficulty"]
    calls.clear()
    argv = _job_argv(lines[-1])
    assert "--report-only" in argv and "--runs" not in argv
    assert cli.main(argv) == 0
    assert calls == [] and reports == [out]

    capsys.readouterr()
    argv = ["--scale", "smoke", "--out", str(out), "--only", "1", "--methods", "GA,LaMBO-2"]
    assert cli.main([*argv, "--runs", "f2/*", "--print-jobs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3  # f2's GA and LaMBO-2 (one smoke seed), then the report
    assert [_job_argv(line)[-2] for line in lines[:2]] == ["f2/GA_seed0", "f2/LaMBO-2_seed0"]
    for line in lines:
        assert "--only solver --methods GA,LaMBO-2" in line and "--functions" not in line
    assert cli.main([*argv, "--functions", "f1,f2", "--print-jobs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [_job_argv(line)[-2] for line in lines[:-1]] == [
        "f1/GA_seed0",
        "f2/GA_seed0",
        "f2/LaMBO-2_seed0",
    ]
    for line in lines:  # the report covers the same plan
        assert "--methods GA,LaMBO-2 --functions f1,f2" in line
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*argv, "--print-jobs", "--dry-run"])
    assert exit_info.value.code == 2


def test_a_run_is_given_the_label_budget_and_a_round_cap(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Equal budgets: every run is started with ``budget`` = rounds x j labels after round 0
    (the round driver ends it there exactly) and a cap of ``MAX_ROUNDS_FACTOR`` x rounds rounds
    (an LLOME round pays fewer than j when few candidates are valid); a finished run is skipped."""
    scale = dataclasses.replace(SCALES["smoke"], rounds=3)
    (spec,) = build_plan(scale, ["LLOME-MargE"], ["solver"])[:1]
    j = execution.llome_config(spec, scale).labels_per_round
    asked: list[tuple[int, int, int]] = []

    def fake_run(spec, scale, llome_cfg, path, options):
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text("{}")
        (path / "rounds.jsonl").write_text(json.dumps({"round": 0, "num_evaluations": 5}) + "\n")
        asked.append((options["budget"], scale.rounds, llome_cfg.rounds))
        return type("Result", (), {"stop_reason": ""})()

    monkeypatch.setattr(execution, "run_kind", fake_run)
    run_dir = tmp_path / "runs" / spec.name
    assert execution.run_one(spec, scale, run_dir, progress=False) == "new"
    assert asked == [(3 * j, 6, 6)]
    assert execution.run_one(spec, scale, run_dir, progress=False) == "skipped"
    assert len(asked) == 1


def test_a_run_stopped_after_round_0_is_final(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LLOME stops after round 0 when the labels hold no training pair (every f = 0, as on
    Ehr(32,32)-4-4-2): ``rounds.jsonl`` has round 0 only and ``stopped.json`` says why. The run
    is short of its budget, but a rerun of the driver skips it instead of resuming it."""
    scale = dataclasses.replace(SCALES["smoke"], rounds=3)
    (spec,) = build_plan(scale, ["LLOME-MargE"], ["solver"])[:1]
    calls: list[int] = []

    def fake_run(spec, scale, llome_cfg, path, options):
        from llome_jax.run.rundir import RunDirectory

        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text("{}")
        (path / "rounds.jsonl").write_text(json.dumps({"round": 0, "num_evaluations": 500}) + "\n")
        RunDirectory(path).log_stop(0, "the labelled set yields no training pairs")
        calls.append(scale.rounds)
        return type("Result", (), {"stop_reason": "the labelled set yields no training pairs"})()

    monkeypatch.setattr(execution, "run_kind", fake_run)
    run_dir = tmp_path / "runs" / spec.name
    assert execution.run_one(spec, scale, run_dir, progress=False) == "new"
    assert execution.run_one(spec, scale, run_dir, progress=False) == "skipped"
    assert calls == [6]  # the round cap, MAX_ROUNDS_FACTOR x rounds


def _rounds_of(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in (path / "rounds.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("scale_name", ["smoke", "cpu", "paper"])
def test_every_method_of_a_plan_runs_the_same_problem(scale_name: str) -> None:
    """Issue 67, item 1: at smoke scale LaMBO-2 ran f2's configuration with its preset's
    instance seed 1 while the GA and LLOME ran the paper's f2. Every method's configuration
    of one function now names the same (function, instance seed), whose instance is the same."""
    from llome_jax import ehrlich

    scale = SCALES[scale_name]
    plan = build_plan(scale, list(DEFAULT_METHODS), list(FIGURES))
    problems: dict[str, set] = {}
    for spec in plan:
        if spec.kind == "local_search" or spec.method in ("LLOME-MargE-prior",):
            continue  # local search takes LLOME's settings; the prior arm is LLOME's preset
        llome_cfg = execution.llome_config(spec, scale)
        if spec.kind == "ga":
            cfg = execution.ga_config(spec, scale, llome_cfg)
        elif spec.kind == "lambo2":
            cfg = execution.lambo_config(spec, scale, llome_cfg)
        else:
            cfg = llome_cfg
        problems.setdefault(spec.function, set()).add((cfg.function, cfg.instance_seed))
    assert problems and all(len(found) == 1 for found in problems.values()), problems
    f2 = ehrlich.resolve_function(*next(iter(problems["f2"])))
    assert f2.config.name == "Ehr(32,32)-4-4-4"
