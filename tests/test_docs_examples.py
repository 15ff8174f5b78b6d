"""The docs' examples print what the docs show (docs that cannot go stale): the example of
docs/howto/own-objective.md."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "howto" / "own-objective.md"


def _own_objective_example() -> tuple[str, list[str]]:
    """The page's first code block (Python) and the output block after it."""
    text = PAGE.read_text()
    section = text[text.index("## Write the objective") :]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    after = section.split("```python\n", 1)[1].split("```", 1)[1]
    shown = after.split("```\n", 1)[1].split("```", 1)[0]
    return code, shown.strip().splitlines()


@pytest.mark.slow
def test_the_own_objective_example_prints_what_the_page_shows(tmp_path: pathlib.Path) -> None:
    code, shown = _own_objective_example()
    (tmp_path / "my_objective.py").write_text(code)
    result = subprocess.run(
        [sys.executable, "my_objective.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1200,
        check=True,
    )
    printed = result.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in printed] == ["GA", "LLOME", "LaMBO-2"]
    assert len(shown) == 3
    assert printed[0] == shown[0]  # the GA: integer values, no float training
    pattern = re.compile(
        r"(.+): round 0 paid (\d+) labels, then (\d+) in \d+ rounds; best \S+, regret \S+"
        r"( \(stopped: .+\))?"
    )
    for line, page in zip(printed[1:], shown[1:]):
        name, round0, paid, stopped = pattern.fullmatch(line).groups()
        assert page.startswith(f"{name}: round 0 paid {round0} labels, then ")
        # the budget is spent exactly unless the run stopped first (the optimum, or LLOME's
        # candidates ran out), which it then says
        assert int(paid) == 64 or (stopped is not None and int(paid) < 64)


OWN_OPTIMIZER = ROOT / "docs" / "howto" / "own-optimizer.md"


def _own_optimizer_example() -> tuple[str, str]:
    """The page's hill-climber block and the line it shows as the output."""
    section = OWN_OPTIMIZER.read_text()
    section = section[section.index("## A hill climber in one block") :]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    shown = section.split("It prints\n\n```\n", 1)[1].split("```", 1)[0]
    return code, shown.strip()


def test_the_own_optimizer_example_runs_as_shown_and_keeps_the_contract(
    tmp_path: pathlib.Path,
) -> None:
    from llome_jax.optimizers import contract

    code, shown = _own_optimizer_example()
    assert len(code.strip().splitlines()) <= 80
    (tmp_path / "my_optimizer.py").write_text(code)
    result = subprocess.run(
        [sys.executable, "my_optimizer.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    assert result.stdout.strip() == shown
    assert (tmp_path / "runs" / "my_optimizer" / "evaluated.csv").is_file()
    # registered by path, it passes every check of the registry's contract tests
    contract.check_all(f"{tmp_path / 'my_optimizer.py'}:HillClimber", tmp_path / "checks")


PYTHON_PAGE = ROOT / "docs" / "howto" / "python.md"


@pytest.mark.parametrize("section", ["## The genetic algorithm", "## A loss"])
def test_the_python_examples_print_what_the_page_shows(section, tmp_path) -> None:
    text = PYTHON_PAGE.read_text()
    part = text[text.index(section) :]
    code = part.split("```python\n", 1)[1].split("```", 1)[0]
    shown = part.split("prints\n\n```\n", 1)[1].split("```", 1)[0].strip()
    (tmp_path / "example.py").write_text(code)
    result = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == shown


TUTORIAL = ROOT / "docs" / "tutorial.md"


def test_the_tutorials_ga_runs_give_the_ga_row_the_page_shows(tmp_path: pathlib.Path) -> None:
    """Issue 67, item 4: the tutorial's GA commands (seeds 0, 1, 2, as the page writes them)
    and its compare, read at the page's budget, give the page's GA row; the GA is exact on any
    CPU (LLOME's and LaMBO-2's float training may differ, as the page says)."""
    from llome_jax import cli

    text = TUTORIAL.read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```bash\n")[1:]]
    ga = next(
        line for b in blocks for line in b.replace("\\\n", "").splitlines() if "ga --" in line
    )
    ga = ga.strip().removeprefix("llome-jax ").split(" --out ")[0]
    table = text[text.index("## 4. Compare") :]
    budget = int(table.split("budget: ", 1)[1].split(" ", 1)[0])
    (ga_row,) = [line for line in table.splitlines() if line.startswith("| GA |")]
    for seed in (0, 1, 2):
        argv = shlex.split(ga.replace("--seed 0", f"--seed {seed}").replace("--seed $s", ""))
        out = tmp_path / f"ga_s{seed}"
        assert cli.main([*argv, "--out", str(out), "--no-progress", "--quiet"]) == 0
    compare = ["compare", str(tmp_path / "ga_s*"), "--budget", str(budget)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main([*compare, "--out", str(tmp_path / "compare")]) == 0
    (mine,) = [line for line in printed.getvalue().splitlines() if line.startswith("| GA |")]
    assert mine == ga_row


def test_the_tutorial_says_how_to_reach_the_command_the_readme_installed() -> None:
    """Issue 67, item 5: the README installs into a virtual environment and the tutorial types
    bare ``llome-jax``; the tutorial says how to put that environment's command on the PATH."""
    readme = (ROOT / "README.md").read_text()
    install = next(line for line in readme.splitlines() if line.startswith("python3 -m venv "))
    venv = install.split()[3]  # python3 -m venv DIR && DIR/bin/pip install ...
    assert f"{venv}/bin/pip install" in install
    tutorial = TUTORIAL.read_text()
    assert "llome-jax " in tutorial
    before_first_command = tutorial[: tutorial.index("```bash")]
    assert f"source {venv}/bin/activate" in before_first_command
    assert f"{venv}/bin/llome-jax" in before_first_command
