"""Compare finished or running optimizer runs at equal label budgets.

Every optimizer (GA, LLOME, LaMBO-2) writes the same run directory (:mod:`llome_jax.run.rundir`), so
runs compare file for file: this module reads several of them, groups them by method (one group
per label, one run per seed), and summarises each group by the paper's measure, the minimum simple
regret after a number of oracle labels (paper, Section 5: "minimum regret ... as a function of the
number of test function evaluations"), as the median (with its bootstrap interval) and range over
its runs.

    runs = load_runs(["runs/marge_s0", "runs/marge_s1", "GA=runs/ga_round_*"])
    rows = summarise(runs, budget=common_budget(runs))

Two more readings of the same runs (issue 66):

* **Cumulative regret** (``metric="cumulative_regret"``): holo-bench's ranking measure
  (``scripts/benchmark_optimizer.py`` adds the best-so-far simple regret after every optimizer
  step; its GA sweeps minimise it), counted per label: ``CR(N) = sum_{i = n_0 + 1}^{N} r*(i)``
  with ``r*(i)`` the min regret after ``i`` labels (the curve's step function, so a run with
  label resolution is summed exactly, a run of round ends with each round's value carried to
  the next round end: an upper bound) and ``n_0`` the labels of round 0 (before its end no run
  has a value; with ``--after-round-0``, ``n_0 = 0`` on the shifted axis, the same sum). It
  rewards reaching low regret early, not only being low at the budget; a run that stopped
  early adds its last value per label (0 once at the optimum).
* **Wall-clock** (``axis="wall_clock"``): each run's cumulative ``seconds`` of its
  ``rounds.jsonl`` records (the round driver times every round, round 0 included); read at
  ``T`` seconds, a run gives its metric at the last round that ended by ``T``. Seconds depend
  on the machine and its load: the command names each run's device, CPU, cores and the load
  average when it started (``config.json``'s provenance); the load during the run is not
  recorded, so the reader states it.

``llome-jax compare`` is the command line around it (a plot, ``curves.csv``, ``summary.csv``;
``--metric cumulative-regret``, ``--x wall-clock``).
"""

from __future__ import annotations

import dataclasses
import glob
import math
import pathlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from llome_jax.run.labels import method_label, problem_text
from llome_jax.run.rundir import RunDirectory
from llome_jax.stats import bootstrap_interval

__all__ = [
    "AXES",
    "METRICS",
    "Run",
    "SummaryRow",
    "common_budget",
    "cumulative_curve",
    "cumulative_regret_at",
    "curve_at",
    "extended",
    "labels_read",
    "load_runs",
    "method_label",
    "problem_text",
    "summarise",
    "value_at",
    "wall_clock_curve",
]

#: what a summary reads: the run's own (``min_regret`` or ``best_value``) or the cumulative regret
METRICS = ("min_regret", "best_value", "cumulative_regret")
#: the budget's axis: labels paid, or wall-clock seconds (``rounds.jsonl``'s ``seconds``)
AXES = ("labels", "wall_clock")


@dataclasses.dataclass(frozen=True)
class Run:
    """One run directory's progress curve.

    Attributes:
      label: the method's name (its group).
      path: the run directory.
      problem: what it optimised (function and instance seed, or the plugged-in objective).
      evaluations: float ``[T]`` oracle labels after each round.
      values: float ``[T]`` the metric after each round (min regret, or best value so far).
      metric: ``"min_regret"`` (lower is better) or ``"best_value"`` (higher is better).
      exact: the curve has label resolution (``RunDirectory.label_steps``: a ``pay_once`` run),
        so :func:`value_at` reads it at exactly a label count; otherwise at the last round end
        within it.
    """

    label: str
    path: pathlib.Path
    problem: str
    evaluations: np.ndarray
    values: np.ndarray
    metric: str
    exact: bool = False
    #: why the run ended early ("" when it did not: finished its rounds or budget, or running)
    stop_reason: str = ""
    #: float ``[R]`` cumulative wall-clock seconds at each round end (``rounds.jsonl``'s
    #: ``seconds`` summed, round 0 included); ``None`` when a round lacks them
    clock: np.ndarray | None = None
    #: float ``[R]`` labels paid at each round end (the wall-clock axis' label counts)
    clock_labels: np.ndarray | None = None
    #: the device the run's last session ran on (``config.json``'s provenance), e.g. ``"cpu x1"``
    machine: str = ""


@dataclasses.dataclass(frozen=True)
class SummaryRow:
    """One method at one budget: the metric of each run (NaN where a run has no round within the
    budget), their median, min and max over the runs that have one, and how many runs ended
    before the budget (stopped early or still running: their value is their last one);
    ``ci_low``/``ci_high``: the median's 95 % percentile bootstrap interval
    (:func:`llome_jax.stats.bootstrap_interval`, 10,000 resamples, seed 0)."""

    label: str
    budget: float
    metric: str
    per_run: tuple[float, ...]
    median: float
    low: float
    high: float
    ended_before: int
    #: the label count each run was read at (:func:`labels_read`)
    labels: tuple[int, ...] = ()
    ci_low: float = math.nan
    ci_high: float = math.nan
    #: the budget's axis (:data:`AXES`): ``budget`` in labels or in seconds
    axis: str = "labels"


def _expand(arguments: Iterable[str]) -> list[tuple[str | None, pathlib.Path]]:
    """``DIR`` or ``LABEL=DIR`` arguments, each ``DIR`` a directory or a glob pattern."""
    out: list[tuple[str | None, pathlib.Path]] = []
    for argument in arguments:
        label, sep, pattern = argument.partition("=")
        if not sep or "/" in label or not label:
            label, pattern = None, argument
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise FileNotFoundError(f"no run directory matches {pattern!r}.")
        out.extend((label, pathlib.Path(match)) for match in matches)
    return out


def load_runs(arguments: Sequence[str], *, allow_mixed: bool = False) -> list[Run]:
    """Read run directories (``DIR`` or ``LABEL=DIR``; ``DIR`` may be a glob such as
    ``runs/marge_s*``) into :class:`Run` curves.

    The metric is ``min_regret`` when every run records it, else ``best_value`` (an objective
    without a known optimum).

    Raises:
      FileNotFoundError: an argument names no run directory, or a directory has no
        ``config.json`` or no finished round.
      ValueError: the runs optimised different problems or count labels differently (their
        ``accounting``; ``llome_jax.oracle``) (unless ``allow_mixed``), one path was
        given twice, a directory is the GA's many-seeds output (``trace.csv``; not a run
        directory), or a ``config.json`` is unreadable.

    Each curve is :meth:`RunDirectory.regret_curve` (``rounds.jsonl``, or ``evaluated.csv``
    where rounds lack the fields).
    """
    entries = _expand(arguments)
    if not entries:
        raise ValueError("give at least one run directory.")
    paths = [path.resolve() for _, path in entries]
    if len(set(paths)) != len(paths):
        raise ValueError("a run directory was given more than once.")
    loaded = []
    accountings: set[str] = set()
    for label, path in entries:
        directory = RunDirectory(path)
        if not (path / directory.CONFIG).is_file():
            raise FileNotFoundError(f"{path} is not a run directory (no config.json).")
        config = directory.config()
        if not directory.rounds_path.exists() and (path / "trace.csv").is_file():
            raise ValueError(
                f"{path} is a many-seeds GA directory (trace.csv, summary.json: `llome-jax ga` "
                "without --rounds), not a run directory; compare reads the run directories of "
                "`ga --rounds`, `llome` and `lambo2`. Leave it out (check glob patterns) or rerun "
                "the GA with --rounds."
            )
        records = directory.rounds()
        if not records:
            where = "rounds.jsonl is empty" if directory.rounds_path.exists() else "no rounds.jsonl"
            raise FileNotFoundError(f"{path} has no finished round ({where}).")
        loaded.append((label or method_label(config), directory, problem_text(config), records))
        accountings.add(config.get("accounting", "every_evaluation"))
    if len(accountings) > 1 and not allow_mixed:
        raise ValueError(
            "the runs count labels differently (accounting: "
            f"{', '.join(sorted(accountings))}; a run made before the information contract pays "
            "every evaluation), so equal budgets are not equal; rerun them under one accounting "
            "(--set accounting=...) or pass --allow-mixed to compare anyway."
        )
    metric = "min_regret"
    if not all(r.get("min_regret") is not None for *_, records in loaded for r in records):
        metric = "best_value"
    problems = sorted({problem for _, _, problem, _ in loaded})
    if len(problems) > 1 and not allow_mixed:
        raise ValueError(
            f"the runs optimised different problems ({'; '.join(problems)}); comparing them "
            "is only meaningful on one (allow_mixed / --allow-mixed to do it anyway)."
        )
    return [
        Run(
            label,
            directory.path,
            problem,
            *directory.regret_curve(metric),
            metric,
            directory.label_steps(metric) is not None,
            directory.stop_reason(),
            *_clock(records),
            _machine(directory.config()),
        )
        for label, directory, problem, records in loaded
    ]


def _clock(records: Sequence[dict[str, Any]]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(cumulative seconds, labels)`` at each round end, or ``(None, None)`` when a round
    lacks ``seconds`` or ``num_evaluations``."""
    if not records or any(
        r.get("seconds") is None or r.get("num_evaluations") is None for r in records
    ):
        return None, None
    seconds = np.cumsum([float(r["seconds"]) for r in records])
    return seconds, np.asarray([float(r["num_evaluations"]) for r in records])


def _machine(config: dict[str, Any]) -> str:
    """``"<device kind> x<devices>"`` of the run's last session (``config.json``'s
    ``provenance``), then, where that session recorded them, the CPU model, the cores it could
    use and the host's load average when it started: ``"cpu x1 (AMD EPYC, 1 core, load 2.03)"``;
    ``""`` when not recorded."""
    sessions = config.get("provenance") or []
    if not sessions or not isinstance(sessions[-1], dict):
        return ""
    last = sessions[-1]
    kind = last.get("device_kind") or last.get("backend") or ""
    device = f"{kind} x{last['devices']}" if kind and last.get("devices") else str(kind)
    details = []
    if last.get("cpu"):
        details.append(str(last["cpu"]))
    if last.get("cores"):
        details.append(f"{last['cores']} core" + ("s" if last["cores"] != 1 else ""))
    if last.get("load") is not None:
        details.append(f"load {float(last['load']):.2f}")
    return f"{device} ({', '.join(details)})" if device and details else device


def curve_at(
    evaluations: Sequence[float] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    budget: float,
    metric: str = "min_regret",
) -> float:
    """A curve's metric after at most ``budget`` labels ("regret at a budget"): its best value
    over the points with ``evaluations <= budget`` (the lowest for ``"min_regret"``, the highest
    for ``"best_value"``); NaN when no point is within the budget.

    The one reading of a curve at a label count: :func:`value_at` (``llome-jax compare``) and
    the paper driver's summaries (:mod:`llome_jax.bench.results`) both call it. A curve with
    label resolution (``RunDirectory.regret_curve`` of a ``pay_once`` run) is read at exactly
    ``budget``; a curve of round ends at the last round that ended within it.
    """
    x = np.asarray(evaluations, np.float64)
    y = np.asarray(values, np.float64)
    within = y[x <= budget]
    if within.size == 0:
        return math.nan
    return float(within.min() if metric == "min_regret" else within.max())


def cumulative_regret_at(
    evaluations: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray, budget: float
) -> float:
    """holo-bench's cumulative regret per label (module docstring): ``sum_{i = n_0 + 1}^{N}
    r*(i)`` for ``N = floor(budget)``, ``n_0`` the curve's first label count and ``r*(i)`` the
    lowest of the min-regret curve's values at points with ``labels <= i`` (the last value is
    carried past the curve's end). 0.0 at ``N = n_0``, NaN for ``N < n_0``.

    Example (hand-derived: labels 11-14 at 0.5, 15-20 at 0.25):
      >>> cumulative_regret_at([10, 15], [0.5, 0.25], 20)
      3.5
    """
    x = np.asarray(evaluations, np.float64)
    y = np.minimum.accumulate(np.asarray(values, np.float64))
    n = math.floor(budget)
    if x.size == 0 or n < x[0]:
        return math.nan
    total = 0.0
    for j in range(x.size):
        first = max(x[j], x[0] + 1)  # the value of point j holds from label x_j on ...
        last = min(x[j + 1] - 1 if j + 1 < x.size else math.inf, n)  # ... until the next point
        if last >= first:
            total += y[j] * (last - first + 1)
    return float(total)


def cumulative_curve(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """``(labels, cumulative regret)`` at each point of the run's min-regret curve
    (:func:`cumulative_regret_at`; piecewise linear between them)."""
    if run.metric != "min_regret":
        raise ValueError(_NO_REGRET)
    values = [cumulative_regret_at(run.evaluations, run.values, x) for x in run.evaluations]
    return run.evaluations, np.asarray(values)


def wall_clock_curve(run: Run, metric: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(seconds, metric)`` at each round end: the run's cumulative wall-clock seconds and its
    metric at that round's label count (``metric``: :data:`METRICS`, default the run's).

    Raises:
      ValueError: the run's rounds do not record ``seconds``.
    """
    clock, labels = _require_clock(run)
    return clock, np.asarray([value_at(run, n, metric) for n in labels])


_NO_REGRET = (
    "cumulative regret needs the min regret, i.e. a known optimum (an objective with "
    "optimal_value); these runs record only best_value"
)


def _require_clock(run: Run) -> tuple[np.ndarray, np.ndarray]:
    if run.clock is None or run.clock_labels is None:
        raise ValueError(
            f"{run.path}: its rounds.jsonl records lack 'seconds' (or 'num_evaluations'), so it "
            "has no wall-clock axis; compare it by labels"
        )
    return run.clock, run.clock_labels


def _round_at(run: Run, seconds: float) -> int | None:
    """The last round whose end came by ``seconds`` (``None``: round 0 ended later)."""
    clock, _ = _require_clock(run)
    within = np.flatnonzero(clock <= seconds)
    return int(within[-1]) if within.size else None


def value_at(run: Run, budget: float, metric: str | None = None, axis: str = "labels") -> float:
    """The run's metric after at most ``budget`` labels (``axis="labels"``) or seconds
    (``axis="wall_clock"``: at the labels of the last round that ended by then; NaN when round
    0 ended later). ``metric`` (:data:`METRICS`, default the run's): :func:`curve_at` of its
    curve (its best value over the points within the budget; NaN when none is), or
    ``"cumulative_regret"`` (:func:`cumulative_regret_at`).

    Raises:
      ValueError: an unknown metric or axis, cumulative regret of runs without regret, or the
        wall-clock axis of a run without ``seconds``.
    """
    metric = run.metric if metric is None else metric
    if metric not in METRICS or axis not in AXES:
        raise ValueError(f"metric must be one of {METRICS} and axis one of {AXES}")
    if axis == "wall_clock":
        k = _round_at(run, budget)
        if k is None:
            return math.nan
        return value_at(run, float(run.clock_labels[k]), metric)  # type: ignore[index]
    if metric == "cumulative_regret":
        if run.metric != "min_regret":
            raise ValueError(_NO_REGRET)
        return cumulative_regret_at(run.evaluations, run.values, budget)
    if metric != run.metric:
        raise ValueError(f"the runs record {run.metric}, not {metric}")
    return curve_at(run.evaluations, run.values, budget, run.metric)


def labels_read(run: Run, budget: float, axis: str = "labels") -> int:
    """The label count :func:`value_at` reads ``run`` at: ``budget`` itself for an exact curve
    that reached it, else the last round end within it (its final count for a run that ended
    before; 0 when no round ended within it). On the wall-clock axis: the labels of the last
    round that ended by ``budget`` seconds (0 when none did)."""
    if axis == "wall_clock":
        k = _round_at(run, budget)
        return 0 if k is None else int(run.clock_labels[k])  # type: ignore[index]
    within = run.evaluations[run.evaluations <= budget]
    if run.exact and run.evaluations[-1] >= budget:
        return int(budget)
    return int(within.max()) if within.size else 0


def common_budget(runs: Sequence[Run], axis: str = "labels") -> float:
    """The default budget: the largest label count every run that did not stop early has
    reached (the smallest of their final ``num_evaluations``; a run that stopped early keeps
    its final value at any budget), raised to the largest round 0 if that is more, so that no
    run reads n/a (a run still short of it is read at its last round and counted in
    ``ended_before``). An int; on the wall-clock axis the same in seconds (a float)."""
    if axis == "wall_clock":
        ends = [_require_clock(run)[0] for run in runs]
        going = [c[-1] for c, run in zip(ends, runs) if not run.stop_reason]
        budget = min(going) if going else max(c[-1] for c in ends)
        return float(max(budget, max(c[0] for c in ends)))
    going = [run.evaluations[-1] for run in runs if not run.stop_reason]
    budget = min(going) if going else max(run.evaluations[-1] for run in runs)
    return int(max(budget, max(run.evaluations[0] for run in runs)))


def after_round0(run: Run) -> Run:
    """The run with its label axis counted from the end of its round 0 (the curve's first
    point, the round-0 record of ``rounds.jsonl``): read at ``N`` it gives the value after
    exactly ``N`` labels paid after round 0, the paper driver's reading. Runs whose round 0
    differs in size (one per seed) are then compared at equal labels after it. The wall-clock
    axis likewise counts seconds after round 0."""
    shifted = dataclasses.replace(run, evaluations=run.evaluations - run.evaluations[0])
    if run.clock is None or run.clock_labels is None:
        return shifted
    return dataclasses.replace(
        shifted, clock=run.clock - run.clock[0], clock_labels=run.clock_labels - run.evaluations[0]
    )


def extended(run: Run, until: float) -> tuple[np.ndarray, np.ndarray]:
    """The run's curve for a plot of a group: a run that stopped early keeps its final value
    up to ``until`` (so a median over the group is drawn over it, as the tables read it)."""
    if not run.stop_reason or run.evaluations[-1] >= until:
        return run.evaluations, run.values
    return np.append(run.evaluations, until), np.append(run.values, run.values[-1])


def summarise(
    runs: Sequence[Run], budget: float, metric: str | None = None, axis: str = "labels"
) -> list[SummaryRow]:
    """One :class:`SummaryRow` per label (in order of first appearance) at ``budget`` labels
    (or seconds, ``axis="wall_clock"``) of ``metric`` (:data:`METRICS`; default the runs'
    own)."""
    metric = runs[0].metric if metric is None else metric
    labels = list(dict.fromkeys(run.label for run in runs))
    rows = []
    for label in labels:
        group = [run for run in runs if run.label == label]
        values = tuple(value_at(run, budget, metric, axis) for run in group)
        finite = np.asarray([v for v in values if not math.isnan(v)], np.float64)
        stats = (
            (float(np.median(finite)), float(finite.min()), float(finite.max()))
            if finite.size
            else (math.nan, math.nan, math.nan)
        )
        if axis == "wall_clock":
            ended = sum(_require_clock(run)[0][-1] < budget for run in group)
        else:
            ended = sum(run.evaluations[-1] < budget for run in group)
        read = tuple(labels_read(run, budget, axis) for run in group)
        low, high = bootstrap_interval(finite)
        size = float(budget) if axis == "wall_clock" else int(budget)
        rows.append(SummaryRow(label, size, metric, values, *stats, ended, read, low, high, axis))
    return rows
