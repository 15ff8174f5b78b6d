"""Does a pretrained prior help LLOME at laptop scale? Pretrained vs from-scratch LLOME-MargE.

The paper's LLOME starts from Pythia-2.8B pretrained on the Pile; the ``cpu`` preset starts from
a random 0.2M-parameter model. ``llome-jax pretrain`` trains the same model on PropEn pairs of
GA data of *other* instances of a configuration (instance seeds >= 1,000,000); this script runs
LLOME-MargE (one SFT round, then MargE) from that prior (``--preset cpu-pretrained``, or any
``--prior``; repeat ``--prior`` for functions of several configurations: each function gets the
prior pretrained on its configuration) and from scratch (``--preset cpu``) on the same
functions, run seeds and label budget, with blind single-mutant local search as the floor, and
tables the median (range) min regret at 10K / 20K / 30K paid labels (the information contract:
round 0 pays the GA archive's distinct sequences, no label twice, no constraint query). A run
whose rounds paid fewer than ``j`` labels gets more rounds until it has paid 30K (at most twice
``--rounds``).

Functions (``--functions``, comma-separated): a paper function (``f2``) or ``NAME@SEED``, an
instance of a configuration, e.g. ``Ehr(32,32)-4-4-4@1`` (training instances: seeds below
1,000,000, so pretraining never saw them).

    python experiments/pretraining.py --functions 'f2,Ehr(32,32)-4-4-4@1,Ehr(32,32)-4-4-4@2'
    python experiments/pretraining.py --arms pretrained --seeds 0 --functions f2   # one run
    python experiments/pretraining.py --report-only                               # tables
    python experiments/pretraining.py --functions 'Ehr(32,64)-4-4-4@1'  # its shipped prior
    llome-jax pretrain --function 'Ehr(32,32)-4-4-2' --out results/prior/q2   # another one
    python experiments/pretraining.py --functions 'Ehr(32,32)-4-4-2@1' --prior results/prior/q2/weights

Every run is a resumable run directory ``OUT/runs/<function>/<arm>_seed<k>/`` (re-running
resumes unfinished runs and skips finished ones); ``OUT/local_search/runs/`` holds the floor.
Writes ``OUT/summary.csv`` (function, method, budget, runs, median, min, max),
``OUT/report.md`` (the tables, the prior's provenance and CPU time, one ``compare`` plot per
function embedded) and ``OUT/<function>.png``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import pathlib
import re
import subprocess
import sys
import time

ARMS = {"pretrained": "cpu-pretrained", "scratch": "cpu"}
LABELS = {"pretrained": "LLOME-MargE (pretrained)", "scratch": "LLOME-MargE (scratch)"}
FLOOR = "blind local search"
BUDGETS = (10_000, 20_000, 30_000)
LABELS_PER_ROUND = 2000  # j of the cpu presets
ROUND0_LABELS = 1000  # at least what round 0 pays on Ehr(32,32)-4-4-4 (1,1xx distinct sequences)


def parse_function(spec: str) -> tuple[str, int | None]:
    """``"f2"`` -> ``("f2", None)``; ``"Ehr(32,32)-4-4-4@1"`` -> ``("Ehr(32,32)-4-4-4", 1)``."""
    name, _, seed = spec.strip().partition("@")
    if not seed:
        return name, None
    instance = int(seed)
    if instance >= 1_000_000:
        raise ValueError(
            f"{spec}: instance seeds >= 1,000,000 are pretraining's; evaluate below them"
        )
    return name, instance


def split_functions(text: str) -> list[str]:
    """``"f2,Ehr(32,32)-4-4-4@1"`` -> ``["f2", "Ehr(32,32)-4-4-4@1"]`` (commas inside
    parentheses belong to a name)."""
    return [s.strip() for s in re.split(r",(?![^()]*\))", text) if s.strip()]


def slug(spec: str) -> str:
    """A directory-safe name of a function spec: ``Ehr(32,32)-4-4-4@1`` -> ``Ehr_32_32_-4-4-4_1``."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in spec).strip("_")


def rounds_for(budget: int) -> int:
    """LLOME rounds whose labels reach ``budget`` (round 0 plus ``j`` per round): 15 for 30K."""
    return math.ceil((budget - ROUND0_LABELS) / LABELS_PER_ROUND)


def run_llome(spec: str, arm: str, seed: int, args: argparse.Namespace) -> pathlib.Path:
    """One LLOME-MargE run (resumed if started, skipped if finished); its run directory."""
    from llome_jax.llome import loop
    from llome_jax.llome.config import schedule_for_loss
    from llome_jax.llome.presets import preset

    name, instance = parse_function(spec)
    overrides = {"function": name, "instance_seed": instance, "rounds": args.rounds, "seed": seed}
    if arm == "pretrained":
        overrides["weights"] = prior_for(spec, args.prior)
    cfg = preset(ARMS[arm], schedule=schedule_for_loss("marge"), **overrides)
    run_dir = pathlib.Path(args.out) / "runs" / slug(spec) / f"{arm}_seed{seed}"
    if (run_dir / "done.json").exists():
        return run_dir
    resume = (run_dir / "config.json").exists()
    started = time.perf_counter()
    print(f"== {LABELS[arm]} on {spec}, seed {seed} -> {run_dir}", flush=True)
    rounds = args.rounds
    if resume:  # a run extended before keeps its larger target
        rounds = max(rounds, json.loads((run_dir / "config.json").read_text())["rounds"])
    while True:
        result = loop.run(
            cfg.replace(rounds=rounds),
            run_dir,
            resume=resume,
            progress=not args.no_progress,
        )
        records = (run_dir / "rounds.jsonl").read_text().splitlines()
        paid = json.loads(records[-1])["num_evaluations"]
        # a round that paid fewer than j labels (few unique valid candidates) is made up for by
        # more rounds, as the paper driver does, up to twice the planned number
        if paid >= max(BUDGETS) or result.stop_reason or rounds >= 2 * args.rounds:
            break
        rounds, resume = rounds + 1, True
    seconds = time.perf_counter() - started
    records = (run_dir / "rounds.jsonl").read_text().splitlines()
    done = {
        "last_round": json.loads(records[-1])["round"],
        "stop_reason": result.stop_reason or "",
        "seconds_this_call": round(seconds, 1),
    }
    (run_dir / "done.json").write_text(json.dumps(done) + "\n")
    return run_dir


def finished(run_dir: pathlib.Path) -> dict | None:
    """A finished run's ``done.json`` (``stop_reason`` ``""``: none recorded), else ``None``."""
    path = run_dir / "done.json"
    return {"stop_reason": "", **json.loads(path.read_text())} if path.is_file() else None


def run_floor(spec: str, seeds: list[int], args: argparse.Namespace) -> None:
    """Blind local search on ``spec`` (seconds; rewritten every call, it is deterministic)."""
    name, instance = parse_function(spec)
    command = [
        sys.executable,
        str(pathlib.Path(__file__).with_name("local_search.py")),
        "--function",
        name,
        "--seeds",
        ",".join(map(str, seeds)),
        "--rounds",
        str(args.rounds),
        "--out",
        str(pathlib.Path(args.out) / "local_search" / slug(spec)),
        "--run-dirs",
    ]
    if instance is not None:
        command += ["--instance-seeds", str(instance)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def groups(spec: str, args: argparse.Namespace) -> list[str]:
    """``compare`` arguments (``LABEL=GLOB``) of the runs of ``spec`` that exist."""
    root = pathlib.Path(args.out)
    out = []
    for arm in ARMS:
        if list((root / "runs" / slug(spec)).glob(f"{arm}_seed*/rounds.jsonl")):
            out.append(f"{LABELS[arm]}={root / 'runs' / slug(spec) / (arm + '_seed*')}")
    if list((root / "local_search" / slug(spec) / "runs").glob("*/rounds.jsonl")):
        out.append(f"{FLOOR}={root / 'local_search' / slug(spec) / 'runs' / '*'}")
    return out


def summarise(specs: list[str], args: argparse.Namespace) -> list[dict]:
    """Median / min / max min regret at each of :data:`BUDGETS` per (function, method), over the
    runs that reached the budget or finished below it (``done.json``: stopped early, e.g. with
    no training pairs, or at its round cap; its last min regret counts, as it can pay no more).
    An unfinished run short of a budget is not counted there. ``ended_before``: the finished
    runs counted below the budget. Floor runs (local search) count where they reached it."""
    import numpy as np

    from llome_jax.compare import load_runs, value_at

    rows = []
    for spec in specs:
        arguments = groups(spec, args)
        if not arguments:
            continue
        runs = load_runs(arguments)
        by_method: dict[str, list] = {}
        for run in runs:
            by_method.setdefault(run.label, []).append(run)
        done = {r.path for r in runs if r.label != FLOOR and finished(r.path)}
        for method, members in by_method.items():
            for budget in BUDGETS:
                ended = [r for r in members if r.evaluations[-1] < budget and r.path in done]
                reached = [r for r in members if r.evaluations[-1] >= budget] + ended
                values = np.array([value_at(r, budget) for r in reached], np.float64)
                rows.append(
                    {
                        "function": spec,
                        "method": method,
                        "budget": budget,
                        "runs": len(members),
                        "runs_at_budget": len(reached),
                        "ended_before": len(ended),
                        "median": float(np.median(values)) if len(values) else float("nan"),
                        "min": float(values.min()) if len(values) else float("nan"),
                        "max": float(values.max()) if len(values) else float("nan"),
                    }
                )
    return rows


def plot(spec: str, args: argparse.Namespace) -> pathlib.Path | None:
    """``llome-jax compare`` of the runs of ``spec``: ``OUT/<slug>.png``."""
    arguments = groups(spec, args)
    if not arguments:
        return None
    target = pathlib.Path(args.out) / "compare" / slug(spec)
    command = [sys.executable, "-m", "llome_jax.cli", "compare", *arguments, "--out", str(target)]
    for budget in BUDGETS:
        command += ["--budget", str(budget)]
    command += ["--title", f"{spec}: LLOME-MargE, prior vs scratch (cpu)"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    png = pathlib.Path(args.out) / f"{slug(spec)}.png"
    png.write_bytes((target / "compare.png").read_bytes())
    return png


def prior_provenance(prior: str) -> dict:
    """The prior's ``pretrain.json`` (configuration, instance seeds, steps, seconds)."""
    from llome_jax import priors
    from llome_jax.llome.config import check_weights_dir

    return priors.provenance(check_weights_dir(prior))


def configuration(spec: str) -> str:
    """The Ehrlich configuration of a function spec: ``f2`` -> ``Ehr(32,32)-4-4-4``."""
    from llome_jax.ehrlich import configuration_name

    name, _ = parse_function(spec)
    return configuration_name(name)


def prior_for(spec: str, candidates: list[str]) -> str:
    """The one of ``candidates`` pretrained on ``spec``'s configuration.

    Raises:
      ValueError: none is (the message says how to make one).
    """
    wanted = configuration(spec)
    for prior in candidates:
        if prior_provenance(prior).get("function") == wanted:
            return prior
    raise ValueError(
        f"no --prior was pretrained on {wanted} (for {spec}); make one with `llome-jax pretrain "
        f"--function '{wanted}' --out DIR` and add --prior DIR/weights"
    )


def _prior_line(spec: str, candidates: list[str]) -> str:
    try:
        prior = prior_for(spec, candidates)
        made = prior_provenance(prior)
    except (ValueError, FileNotFoundError):
        return "Prior: none given for this configuration."
    seeds = made.get("instance_seeds", {})
    return (
        f"Prior: `{prior}`, pretrained on {made.get('function', '?')} instance seeds "
        f"{seeds.get('first', '?')}..{seeds.get('last', '?')} ({made.get('steps', '?')} steps, "
        f"{made.get('seconds', float('nan')):.0f} s of CPU wall clock, paid once per "
        "configuration and not counted below)."
    )


def early_stops(spec: str, args: argparse.Namespace) -> list[str]:
    """``"LLOME-MargE (pretrained) seed 1: after round 11, 23,124 labels (reason)"`` for the
    finished runs of ``spec`` that paid fewer than the largest budget."""
    out = []
    for run_dir in sorted((pathlib.Path(args.out) / "runs" / slug(spec)).glob("*_seed*")):
        done = finished(run_dir)
        if done is None:
            continue
        last = json.loads((run_dir / "rounds.jsonl").read_text().splitlines()[-1])
        if last["num_evaluations"] >= max(BUDGETS):
            continue
        arm, seed = run_dir.name.split("_seed")
        reason = done["stop_reason"] or (
            "its round cap" if "last_round" in done else "no reason recorded"
        )
        out.append(
            f"{LABELS.get(arm, arm)} seed {seed}: after round {last['round']}, "
            f"{last['num_evaluations']:,} labels ({reason})"
        )
    return out


def report(specs: list[str], args: argparse.Namespace) -> None:
    rows = summarise(specs, args)
    out = pathlib.Path(args.out)
    with open(out / "summary.csv", "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]) if rows else ["function"])
        writer.writeheader()
        writer.writerows(rows)
    seconds: dict[tuple[str, str], list[float]] = {}
    for run_dir in (out / "runs").glob("*/*_seed*"):
        records = [json.loads(x) for x in (run_dir / "rounds.jsonl").read_text().splitlines()]
        group = (run_dir.parent.name, run_dir.name.split("_seed")[0])
        seconds.setdefault(group, []).append(sum(r.get("seconds", 0.0) for r in records))
    lines = [
        "# Pretrained prior vs from scratch: LLOME-MargE at laptop scale",
        "",
        "Median (range) min regret at paid labels (information contract: round 0 pays the GA "
        "archive's distinct sequences; no label twice; no constraint query). A cell counts the "
        "runs that reached the budget and finished runs that ended below it (`*` each, with "
        "their last min regret); `k/n`: only k of the n runs count. CPU minutes: the sum "
        "of a run's round times, on a 2-core machine shared with one other job.",
        "",
    ]
    for spec in specs:
        cells = [r for r in rows if r["function"] == spec]
        if not cells:
            continue
        lines += [f"## {spec}", "", _prior_line(spec, args.prior), ""]
        lines += ["| method | " + " | ".join(f"{b // 1000}K" for b in BUDGETS)]
        lines[-1] += " | CPU min per run |"
        lines.append("|---|" + "---|" * (len(BUDGETS) + 1))
        for method in dict.fromkeys(r["method"] for r in cells):
            row = [f"| {method} |"]
            for budget in BUDGETS:
                (c,) = [r for r in cells if r["method"] == method and r["budget"] == budget]
                if c["runs_at_budget"] == 0:
                    row.append(" – |")
                else:
                    shown = f" {c['median']:.3f} ({c['min']:.3f}-{c['max']:.3f})"
                    if c["runs_at_budget"] < c["runs"]:
                        shown += f" {c['runs_at_budget']}/{c['runs']}"
                    if c["ended_before"]:
                        shown += " " + "*" * c["ended_before"]
                    row.append(shown + " |")
            arm = next((a for a, label in LABELS.items() if label == method), None)
            times = seconds.get((slug(spec), arm), [])
            row.append(f" {sum(times) / len(times) / 60:.0f} |" if times else " – |")
            lines.append("".join(row))
        if stops := early_stops(spec, args):
            lines += [
                "",
                f"Runs that ended before {max(BUDGETS) // 1000}K labels (`*` in a cell: counted "
                "there with "
                "their last min regret, as they can pay no more): " + "; ".join(stops) + ".",
            ]
        png = plot(spec, args)
        if png is not None:
            lines += ["", f"![{spec}]({png.name})", ""]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'report.md'}, {out / 'summary.csv'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--functions", default="f2,Ehr(32,32)-4-4-4@1,Ehr(32,32)-4-4-4@2")
    parser.add_argument("--arms", default="pretrained,scratch", help="pretrained, scratch")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--prior",
        action="append",
        help="the pretrained arm's weights: a shipped prior (prior:NAME) or a pretrain weights/ "
        "directory; repeatable, each function takes the one pretrained on its configuration "
        "(default: every shipped prior)",
    )
    parser.add_argument(
        "--rounds", type=int, default=rounds_for(max(BUDGETS)), help="LLOME rounds (to 30K)"
    )
    parser.add_argument("--out", default="results/pretraining")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    from llome_jax import priors

    args.prior = args.prior or [priors.PREFIX + name for name in priors.PRIORS]
    specs = split_functions(args.functions)
    arms = [a for a in args.arms.split(",") if a]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    try:
        for spec in specs:
            parse_function(spec)
        unknown = set(arms) - set(ARMS)
        if unknown:
            raise ValueError(f"unknown arms {sorted(unknown)}; choose from {sorted(ARMS)}")
        if "pretrained" in arms:
            for spec in specs:
                prior_for(spec, args.prior)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        for spec in specs:
            run_floor(spec, seeds, args)
            for seed in seeds:
                for arm in arms:
                    run_llome(spec, arm, seed, args)
    report(specs, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
