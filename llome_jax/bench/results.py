"""Reading the plan's results: run directories into curves, summaries at a label budget, tables.

Everything a figure reads comes from the run directories (``rounds.jsonl``, ``config.json``,
``done.json``, the LLOME candidate logs), so ``--report-only`` redraws the report and a redraw
writes byte-identical CSVs (:func:`write_csv`). A run's min regret at a budget is
:func:`llome_jax.compare.curve_at`, the one reading ``llome-jax compare`` uses too: the best
point of its curve within ``round-0 labels + budget``.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import math
import pathlib
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from llome_jax import ehrlich
from llome_jax.bench import verdicts as vd
from llome_jax.bench.plan import RunSpec, Scale, labels_per_round
from llome_jax.bench.verdicts import Verdict
from llome_jax.compare import curve_at
from llome_jax.run.rundir import RunDirectory
from llome_jax.stats import bootstrap_interval

__all__ = [
    "ACCOUNTING_TEXT",
    "CI_NOTE",
    "MEDIAN_HEADER",
    "ArchivedRun",
    "Context",
    "accounting_of",
    "early_stops",
    "finals_at",
    "fmt",
    "markdown_table",
    "median_ci",
    "quantization_of",
    "read_archive",
    "read_candidates",
    "read_rounds",
    "regret_curves",
    "regret_of",
    "summary_at",
    "write_csv",
]


def read_rounds(path: pathlib.Path) -> list[dict]:
    """A run's ``rounds.jsonl`` records (a damaged line is named: ``RunDirectory.rounds``)."""
    return RunDirectory(path).rounds()


def read_candidates(path: pathlib.Path) -> list[dict[str, np.ndarray]]:
    """An LLOME run's candidate logs (``candidates/round_NNNN.npz``), one dict per round."""
    out = []
    for file in sorted((path / "candidates").glob("round_[0-9][0-9][0-9][0-9].npz")):
        with np.load(file) as data:
            out.append({k: data[k] for k in data.files})
    return out


@dataclasses.dataclass(frozen=True)
class ArchivedRun:
    """A run read from a committed report folder instead of its run directory (which is gone):
    its ``curves.csv`` rows as ``rounds.jsonl``-like records (``round``, ``num_evaluations``,
    ``min_regret``, ``cum_constraint_queries``; round resolution, so a reading between two
    rounds is the earlier round's) and, for figure 2, its ``diversity.csv`` rows
    ``[round, num_evaluations, frac_unique, frac_feasible]`` with what they were measured on."""

    state: str
    accounting: str
    records: list[dict]
    diversity: list[list[Any]] | None = None
    measured_on: str = ""
    #: ``(labels, min_regret)`` at label resolution (``steps.csv``, :func:`regret_curves`'s
    #: curve when the run directory was there); ``None`` where the archive has none
    steps: tuple[list[int], list[float]] | None = None
    #: why the run ended early (``runs.csv``; ``""``: it did not, or the archive does not say)
    stop_reason: str = ""


def read_archive(folder: pathlib.Path) -> dict[str, ArchivedRun]:
    """Run name -> :class:`ArchivedRun` from a report folder's ``curves.csv`` (and its
    ``diversity.csv`` where there is one: f2's runs, keyed ``f2/<method>_seed<seed>``; its
    ``steps.csv``, the curves at label resolution, and ``runs.csv``, the stop reasons, where
    there are).

    Raises:
      ValueError: the folder has no ``curves.csv``.
    """
    folder = pathlib.Path(folder)
    if not (folder / "curves.csv").is_file():
        raise ValueError(f"{folder} has no curves.csv to read archived runs from")

    def number(text: str) -> float | None:
        return None if text == "" else float(text)

    runs: dict[str, dict[str, Any]] = {}
    with open(folder / "curves.csv", newline="") as stream:
        for row in csv.DictReader(stream):
            run = runs.setdefault(
                row["run"], {"state": row["state"], "accounting": row["accounting"], "rows": []}
            )
            run["rows"].append(
                {
                    "round": int(row["round"]),
                    "num_evaluations": int(row["labels"]),
                    "min_regret": number(row["min_regret"]),
                    "cum_constraint_queries": (
                        None if row["constraint_queries"] == "" else int(row["constraint_queries"])
                    ),
                }
            )
    diversity: dict[str, list[list[Any]]] = {}
    measured: dict[str, str] = {}
    if (folder / "diversity.csv").is_file():
        with open(folder / "diversity.csv", newline="") as stream:
            for row in csv.DictReader(stream):
                name = f"f2/{row['method'].replace(' ', '-')}_seed{row['seed']}"
                diversity.setdefault(name, []).append(
                    [
                        int(row["round"]),
                        int(row["num_evaluations"]),
                        number(row["frac_unique"]),
                        number(row["frac_feasible"]),
                    ]
                )
                measured[name] = row["measured_on"]
    steps: dict[str, tuple[list[int], list[float]]] = {}
    if (folder / "steps.csv").is_file():
        with open(folder / "steps.csv", newline="") as stream:
            for row in csv.DictReader(stream):
                x, y = steps.setdefault(row["run"], ([], []))
                x.append(int(row["labels"]))
                y.append(float(row["min_regret"]))
    reasons: dict[str, str] = {}
    if (folder / "runs.csv").is_file():
        with open(folder / "runs.csv", newline="") as stream:
            reasons = {row["run"]: row["stop_reason"] for row in csv.DictReader(stream)}
    return {
        name: ArchivedRun(
            run["state"],
            run["accounting"],
            run["rows"],
            diversity.get(name),
            measured.get(name, ""),
            steps.get(name),
            reasons.get(name, ""),
        )
        for name, run in runs.items()
    }


def regret_of(values: np.ndarray) -> np.ndarray:
    """``1 - f`` with infeasible (``-inf``) and unknown (NaN) as 1 (BUILD.md §2)."""
    v = np.asarray(values, np.float64)
    return np.where(np.isfinite(v), 1.0 - v, 1.0)


def fmt(x: Any) -> str:
    """A markdown table cell: ``n/a`` for ``None`` / NaN, floats to 3 decimals."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float):
        return f"{x:.3f}"
    return str(x)


def write_csv(path: pathlib.Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A CSV with ``\\n`` line ends and floats as ``repr`` (shortest round trip), so a redraw
    from the same run directories writes the same bytes."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([repr(v) if isinstance(v, float) else v for v in row])
    path.write_text(buffer.getvalue())


def regret_curves(
    runs: dict[RunSpec, list[dict]],
    out: pathlib.Path | None = None,
    archived: dict[RunSpec, ArchivedRun] | None = None,
) -> dict[str, list[tuple[list, list]]]:
    """method -> [(num_evaluations, min_regret) per seed] (rounds with a regret). With ``out``
    (the plan's directory) a run's curve is ``RunDirectory.regret_curve``: for a ``pay_once``
    run it holds each label that improved the min regret inside a round, so that
    :func:`llome_jax.compare.curve_at` reads it at exactly a label count, not at the last round
    before it. An ``archived`` run's curve is its ``steps.csv`` curve where the archive has one,
    else its rounds."""
    curves: dict[str, list] = {}
    for spec, records in runs.items():
        points = [
            (r["num_evaluations"], r["min_regret"])
            for r in records
            if r.get("min_regret") is not None
        ]
        path = None if out is None else out / "runs" / spec.name
        old = (archived or {}).get(spec)
        if old is not None:
            if old.steps is not None:
                points = list(zip(*old.steps))
        elif points and len(points) == len(records) and path is not None and path.is_dir():
            x, y = RunDirectory(path).regret_curve("min_regret")
            points = [(int(e), float(g)) for e, g in zip(x, y)]
        if points:
            curves.setdefault(spec.method, []).append(
                ([p[0] for p in points], [p[1] for p in points])
            )
    return curves


def summary_at(curves: dict[str, list], after: float) -> dict[str, dict[str, Any]]:
    """method -> median / min / max over seeds of the min regret ``after`` labels past round 0
    (each run's first point, its round 0, plus ``after``), seeds, ``labels_paid``: the
    median over seeds of the labels a run paid after round 0 up to ``after`` (less for a run that
    stopped early, whose last min regret counts), ``values``: each run's min regret (the runs'
    order, the same at every ``after``; the verdicts' per-seed values), ``labels_read``: each
    run's labels after round 0 up to ``after``, ``stopped``: how many runs read fewer than
    ``after`` (they stopped early; their last value is what is read) and ``ci_low`` /
    ``ci_high``: the median's 95 % percentile bootstrap interval (:func:`median_ci`)."""
    out = {}
    for method, runs in curves.items():
        finals = np.array([curve_at(x, y, x[0] + after) for x, y in runs], np.float64)
        paid = np.array([min(x[-1] - x[0], after) for x, _ in runs], np.float64)
        keep = ~np.isnan(finals)
        finals, paid = finals[keep], paid[keep]
        if finals.size:
            low, high = median_ci(finals)
            out[method] = {
                "median": float(np.median(finals)),
                "min": float(finals.min()),
                "max": float(finals.max()),
                "seeds": int(finals.size),
                "labels_paid": float(np.median(paid)),
                "labels_read": [int(v) for v in paid],
                "stopped": int(np.sum(paid < after)),
                "values": [float(v) for v in finals],
                "ci_low": low,
                "ci_high": high,
            }
    return out


def median_ci(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """The median's 95 % percentile bootstrap interval over runs (``llome_jax.stats``: 10,000
    resamples, seed 0, so a redraw gives the same numbers); ``None`` where a value is missing or
    there is none."""
    if not len(values) or any(v is None for v in values):
        return None, None
    return bootstrap_interval([float(v) for v in values if v is not None])


#: the columns of a table of medians over seeds at the budget
MEDIAN_HEADER = [
    "method",
    "seeds",
    "median_min_regret",
    "median_ci95_low",
    "median_ci95_high",
    "min",
    "max",
]
#: the report's note under a table of medians
CI_NOTE = (
    "Medians are over seeds (runs); `95% CI`: the median's percentile bootstrap interval "
    "(10,000 resamples, seed 0). With 3 seeds it spans nearly their range: it shows how little "
    "a few seeds pin a median down."
)


def finals_at(curves: dict[str, list], after: float) -> dict[str, list[float]]:
    """method -> each run's min regret ``after`` labels past round 0."""
    return {m: [curve_at(x, y, x[0] + after) for x, y in runs] for m, runs in curves.items()}


def accounting_of(path: pathlib.Path) -> str:
    """The run's label accounting (``config.json``'s ``accounting``); a ``config.json`` without
    it was written before the setting existed, when every evaluation was paid."""
    file = path / "config.json"
    config = json.loads(file.read_text()) if file.exists() else {}
    return str(config.get("accounting", "every_evaluation"))


#: what each label accounting means, for the report
ACCOUNTING_TEXT = {
    "pay_once": "each distinct sequence paid once",
    "every_evaluation": "the paper's: every evaluation paid, the GA pre-solver's included",
}


def quantization_of(function: str) -> int:
    """The function's quantisation ``q`` (its motif length where unquantised)."""
    config = ehrlich.resolve_function(function).config
    return int(config.quantization or config.motif_length)


@dataclasses.dataclass
class Context:
    """What every figure function reads: the plan's directory ``out``, its scale, the plan and
    the *finished* runs' ``rounds.jsonl`` records (a partial run is listed in the report's run
    table, never counted in a figure), with their stop reasons and label accountings."""

    out: pathlib.Path
    scale: Scale
    scale_name: str
    plan: list[RunSpec]
    runs: dict[RunSpec, list[dict]]
    #: a finished run's ``done.json`` stop reason ("" when none was recorded)
    stop_reasons: dict[RunSpec, str] = dataclasses.field(default_factory=dict)
    #: a finished run's label accounting (:func:`accounting_of`)
    accountings: dict[RunSpec, str] = dataclasses.field(default_factory=dict)
    #: runs read from a committed report folder (``--archive``), not from a run directory
    archived: dict[RunSpec, ArchivedRun] = dataclasses.field(default_factory=dict)

    def select(
        self,
        figure: str | None = None,
        function: str | None = None,
        methods: Sequence[str] | None = None,
    ) -> dict[RunSpec, list[dict]]:
        return {
            s: r
            for s, r in self.runs.items()
            if (figure is None or figure in s.figures)
            and (function is None or s.function == function)
            and (methods is None or s.method in methods)
        }

    @functools.cached_property
    def labels_per_round(self) -> int:
        """``j``, the labels an LLOME or LaMBO-2 round pays at most."""
        return labels_per_round(self.scale)

    @property
    def budget(self) -> int:
        """Labels after round 0 every run may pay: the scale's ``budget``, else ``rounds x j``
        (20,000 at cpu scale: the paper's 30K minus its 10K GA labels). Summaries take each run's
        min regret at its own round-0 labels plus this, so both accountings compare like with
        like."""
        if self.scale.budget is not None:
            return int(self.scale.budget)
        return self.scale.rounds * self.labels_per_round

    def accounting(self, specs: Collection[RunSpec]) -> list[str]:
        """The label accounting of each of ``specs`` (finished runs)."""
        return [self.accountings.get(s, "every_evaluation") for s in specs]

    def check(self, verdict: Verdict, specs: Collection[RunSpec]) -> Verdict:
        """A budget verdict holds only when its runs count labels alike."""
        return vd.comparable_accounting(verdict, self.accounting(specs))


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table (cells by :func:`fmt`)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def early_stops(ctx: Context, selected: dict[RunSpec, list[dict]]) -> str:
    """``"method: N runs after round r (reason)"`` for finished runs that stopped before their
    last planned round, e.g. LLOME with no training pairs in the GA data or a collapsed DPO. (A
    LLOME round may label fewer than ``j`` sequences, so a run can end below the budget
    without stopping early.)"""
    stops: dict[tuple[str, int, str], int] = {}
    for spec, records in selected.items():
        if int(records[-1]["round"]) >= ctx.scale.rounds:
            continue
        reason = ctx.stop_reasons.get(spec) or "no reason recorded"
        key = (spec.method, int(records[-1]["round"]), reason)
        stops[key] = stops.get(key, 0) + 1
    return "; ".join(
        f"{method}: {n} run{'s' if n > 1 else ''} after round {last} ({reason})"
        for (method, last, reason), n in sorted(stops.items())
    )
