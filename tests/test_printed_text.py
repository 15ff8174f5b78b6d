"""Counts and names in printed text come from the data (issue 67, item 6): the report's line on
what the plan's seeds can show, the command that generated it, the paper driver's default
methods and ``--worker-tag`` in ``--help``."""

from __future__ import annotations

import pytest

from llome_jax import cli
from llome_jax.bench.plan import DEFAULT_METHODS, RunSpec
from llome_jax.bench.report import smallest_p_line


def _plan(**seeds: int) -> list[RunSpec]:
    return [RunSpec(m, "ga", "f2", s, None, ()) for m, n in seeds.items() for s in range(n)]


@pytest.mark.parametrize(
    ("seeds", "text"),
    [
        (
            {"GA": 2, "LaMBO-2": 8},
            "With 2 seeds against 2 the smallest two-sided p of an exact permutation test is "
            "2 / C(4, 2) = 0.333: no comparison of such methods can reach p < 0.05.",
        ),
        ({"GA": 3, "LaMBO-2": 3}, "With 3 seeds against 3 the smallest two-sided p of an "),
        (
            {"GA": 8},
            "With 8 seeds against 8 the smallest two-sided p of an exact permutation test is "
            "2 / C(16, 8) = 0.000155 (C(16, 8) = 12870).",
        ),
    ],
)
def test_the_report_says_what_the_plans_seeds_can_show(seeds, text) -> None:
    assert smallest_p_line(_plan(**seeds)).startswith(text)


def test_paper_help_names_the_methods_that_run_and_the_worker_tag(capsys) -> None:
    assert cli.main(["paper", "--help"]) == 0
    shown = "".join(capsys.readouterr().out.split())  # argparse wraps at spaces and hyphens
    assert f"(default{','.join(DEFAULT_METHODS)})".replace(" ", "") in shown
    assert len(DEFAULT_METHODS) == 7 and "--worker-tagWORKER_TAG" in shown


def test_ehrlich_list_names_the_papers_functions_and_the_priors(capsys) -> None:
    assert cli.main(["ehrlich", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  f2 = Ehr(32,32)-4-4-4    v=32 L=32 c=4 k=4 q=4" in out
    assert "  Ehr(32,32)-4-4-2         v=32 L=32 c=4 k=4 q=2" in out
    assert len([line for line in out if line.startswith("  f")]) == 4
    assert any(
        line.startswith("  ehr32-32-4-4-4") and "instance seeds 1000000-1000255" in line
        for line in out
    )
