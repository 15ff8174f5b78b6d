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
    r"\((?P<low>\d\.\d{3})-(?P<high>\d\.\d{3})\) \| (?P<p>[^|]*?) \|$"
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
    rows = {}
    for line in page.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line.strip())
        if m:
            rows[m["method"]] = m.groupdict()
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
        if method == "LLOME-MargE":
            assert row["p"] == ""
        else:
            p = stats.permutation_test(finals[method], finals["LLOME-MargE"])
            assert row["p"] == f"{p:.2g}", method
