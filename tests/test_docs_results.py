"""The results the README and docs/experiments.md state for f2 are those of the committed
report's files: each method's median min regret with its 95 % interval (``solver.csv``) and the
p of its exact two-sided permutation test against LLOME-MargE, recomputed from the per-seed
final values of ``curves.csv`` (every run there ends at its budget, or stopped early and keeps
its last value, as the report reads it)."""

from __future__ import annotations

import csv
import pathlib
import re

import pytest

from llome_jax import stats

ROOT = pathlib.Path(__file__).resolve().parents[1]
F2 = ROOT / "docs" / "paper" / "f2"
ROW = re.compile(
    r"^\| (?P<method>[^|]+?) \| (?P<median>\d\.\d{3}) "
    r"\((?P<low>\d\.\d{3})-(?P<high>\d\.\d{3})\) \| (?P<labels>[^|]+?) \| (?P<p>[^|]*?) \|$"
)


def _solver() -> dict[str, dict[str, str]]:
    with open(F2 / "solver.csv", newline="") as stream:
        return {r["method"]: r for r in csv.DictReader(stream) if r["function"] == "f2"}


def _finals() -> dict[str, list[float]]:
    last: dict[str, tuple[str, float]] = {}
    with open(F2 / "curves.csv", newline="") as stream:
        for r in csv.DictReader(stream):
            if r["function"] == "f2" and r["state"] == "finished":
                last[r["run"]] = (r["method"], float(r["min_regret"]))
    finals: dict[str, list[float]] = {}
    for method, value in last.values():
        finals.setdefault(method, []).append(value)
    return finals


def _table(page: pathlib.Path) -> dict[str, dict[str, str]]:
    """The rows of the page's first table with a row of that shape (later tables, e.g. the
    wall-clock one, are other readings)."""
    rows: dict[str, dict[str, str]] = {}
    for line in page.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line.strip())
        if m:
            rows[m["method"]] = m.groupdict()
        elif rows and not line.startswith("|"):
            break
    return rows


@pytest.mark.parametrize("page", ["README.md", "docs/experiments.md"])
def test_the_f2_table_is_the_reports(page: str) -> None:
    table, solver, finals = _table(ROOT / page), _solver(), _finals()
    assert set(table) == set(solver) and len(table) >= 7
    for method, row in table.items():
        s = solver[method]
        assert int(s["seeds"]) >= 8 and int(s["labels_after_round_0"]) == 20000
        for mine, theirs in (
            ("median", "median_min_regret"),
            ("low", "median_ci95_low"),
            ("high", "median_ci95_high"),
        ):
            assert row[mine] == f"{float(s[theirs]):.3f}", (method, mine)
        # the labels actually paid, and a run that stopped early said so
        read, stopped, seeds = int(s["labels_read"]), int(s["stopped_early"]), int(s["seeds"])
        everyone = "all" if stopped == seeds else f"{stopped} of"
        mark = {0: ""}.get(stopped, f": {everyone} {seeds} runs stopped early")
        assert row["labels"] == f"{read:,}{mark}", method
        if method == "LLOME-MargE":
            assert row["p"] == ""
        else:
            p = stats.permutation_test(finals[method], finals["LLOME-MargE"])
            assert row["p"] == f"{p:.2g}", method


# ------------------------------------------------------------------------------------------
# The prose around the table: every Bonferroni count, n and p it states is the report's
# ------------------------------------------------------------------------------------------
P_STATED = re.compile(r"\bp = (\d\.\d+(?:e-\d+)?)(?:-(\d\.\d+))?")
BONFERRONI = re.compile(r"Bonferroni over (\d+)")
SIZES = re.compile(r"\b(\d+) vs (\d+)\b")


def _f2_prose(page: str) -> str:
    """The text that speaks about the f2 8-seed comparison: the README's f2 bullet of "What
    holds today" (to the next heading), the results page's f2 section (to the next ``## ``)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    start = text.index("f2 at laptop scale" if page == "README.md" else "## The f2 comparison")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _unit(text: str) -> float:
    """Half a unit of the last digit written: ``"0.00078"`` -> 5e-6."""
    mantissa, _, exponent = text.partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10.0 ** (-decimals + int(exponent or 0))


def _report_ps() -> list[tuple[float, float]]:
    """Every ``p = x`` of the report: ``(x, half a unit of its last digit)``."""
    text = (F2 / "report.md").read_text()
    return [(float(m[1]), _unit(m[1])) for m in P_STATED.finditer(text)]


def _as_stated(value: tuple[float, float], stated: str) -> bool:
    """A p the report writes as ``value`` (with its rounding) is ``stated``, rounded the way
    ``stated`` is written (each within half a unit of its own last digit)."""
    p, rounding = value
    return abs(p - float(stated)) <= rounding + _unit(stated) + 1e-15


def stated_numbers_not_in_report(
    prose: str, report: str, ps: list[tuple[float, float]]
) -> list[str]:
    """Every ``Bonferroni over N``, ``a vs b`` and ``p = x`` (or ``p = x-y``) of ``prose`` that
    the report does not state (a p must be one of the report's at the precision written)."""
    wrong = [
        f"Bonferroni over {n}"
        for n in BONFERRONI.findall(prose)
        if f"Bonferroni over {n} " not in report
    ]
    wrong += [f"{a} vs {b}" for a, b in SIZES.findall(prose) if f"n = {a} vs {b}" not in report]
    for m in P_STATED.finditer(prose):
        for stated in filter(None, m.groups()):
            if not any(_as_stated(p, stated) for p in ps):
                wrong.append(f"p = {stated}")
    return wrong


@pytest.mark.parametrize("page", ["README.md", "docs/experiments.md"])
def test_the_f2_prose_states_only_the_reports_counts_and_ps(page: str) -> None:
    prose = _f2_prose(page)
    report = (F2 / "report.md").read_text()
    assert P_STATED.search(prose) and BONFERRONI.search(prose)  # the check has something to read
    assert stated_numbers_not_in_report(prose, report, _report_ps()) == []


def test_the_prose_check_catches_a_wrong_count_size_or_p() -> None:
    report = "disagree needs p < 0.00833 (Bonferroni over 6 pairs): n = 8 vs 8, p = 0.000777"
    ps = [(0.000777, 5e-7)]
    assert stated_numbers_not_in_report("Bonferroni over 6 pairs, p = 0.00078", report, ps) == []
    assert stated_numbers_not_in_report("Bonferroni over 5 pairs", report, ps) == [
        "Bonferroni over 5"
    ]
    assert stated_numbers_not_in_report("4 vs 4", report, ps) == ["4 vs 4"]
    assert stated_numbers_not_in_report("p = 0.0008", report, ps) == []  # 0.000777 to 1 digit
    assert stated_numbers_not_in_report("p = 0.00079-0.5", report, ps) == [
        "p = 0.00079",
        "p = 0.5",
    ]


def test_the_committed_f2_report_redraws_from_its_own_files(tmp_path: pathlib.Path) -> None:
    """``llome-jax paper --report-only --archive docs/paper/f2`` with no run directory at all
    writes the committed figures 1, 2 and 9 byte for byte (their CSVs, curves.csv, steps.csv)
    and the same verdict lines: the report's numbers come from the committed files alone."""
    from llome_jax.bench import cli

    argv = ["--scale", "cpu", "--out", str(tmp_path), "--only", "1,2,9", "--functions", "f2"]
    assert cli.main([*argv, "--report-only", "--archive", str(F2), "--no-progress"]) == 0
    for name in ("solver", "diversity", "model_size", "curves", "steps", "runs"):
        assert (tmp_path / f"{name}.csv").read_bytes() == (F2 / f"{name}.csv").read_bytes(), name

    def verdicts(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("- ")]

    drawn, committed = (tmp_path / "report.md").read_text(), (F2 / "report.md").read_text()
    mine = verdicts(drawn)
    assert len(mine) == 12 and mine == verdicts(committed)[: len(mine)]
    # figures 1, 2 and 9 whole: tables, notes, the equal-label readings of stopped runs
    start = "## 1. Solver regret comparison"
    assert (
        drawn[drawn.index(start) : drawn.index("## Runs")]
        == committed[committed.index(start) : committed.index("## 10. ")]
    )
