"""Docs that cannot go stale: every embedded figure exists and is listed in docs/figures.md with
the command that makes it, naming only presets, scales and accountings that exist today."""

from __future__ import annotations

import fnmatch
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+\.png)\)")


def _embedded() -> list[tuple[pathlib.Path, str, pathlib.Path]]:
    """``(page, caption, figure path from the repository root)`` of every embedded PNG."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    out = []
    for page in pages:
        for caption, target in IMAGE.findall(page.read_text()):
            out.append((page, caption, (page.parent / target).resolve().relative_to(ROOT)))
    return out


def _registry() -> list[tuple[str, str, str]]:
    rows = []
    for line in (ROOT / "docs" / "figures.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`docs/"):
            rows.append((cells[0].strip("`"), cells[1], cells[2]))
    return rows


def _names() -> dict[str, set[str]]:
    from llome_jax import cli
    from llome_jax.bench.plan import SCALES
    from llome_jax.lambo2.optimizer import PRESETS as LAMBO
    from llome_jax.llome.presets import PRESETS as LLOME
    from llome_jax.oracle import ACCOUNTING

    return {
        "preset": set(LLOME) | set(LAMBO),
        "scale": set(SCALES),
        "accounting": set(ACCOUNTING),
        "command": {module.NAME for module in cli._command_modules()},
    }


def test_every_embedded_figure_exists_and_has_its_command() -> None:
    figures = _embedded()
    assert len(figures) >= 10
    registry = _registry()
    for page, caption, figure in figures:
        assert (ROOT / figure).is_file(), f"{page.name}: {figure} is missing"
        assert any(fnmatch.fnmatch(str(figure), pattern) for pattern, _, _ in registry), (
            f"{page.name}: {figure} has no row in docs/figures.md"
        )
        assert "evaluations" not in caption.lower(), f"{page.name}: {caption!r}"


def _retired_scripts() -> set[str]:
    """The scripts the "Retired" section of docs/reference/scripts.md names (first cell)."""
    text = (ROOT / "docs" / "reference" / "scripts.md").read_text()
    section = text.split("\n## Retired", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `((?:experiments|benchmarks)/[^`]+\.py)`", section, re.M))


def _problems(figure: str, command: str, state: str, names: dict[str, set[str]]) -> list[str]:
    """What a registry row names that does not exist today."""
    problems = [] if state.startswith(("current", "dated")) else [f"{figure}: state {state!r}"]
    for kind, flag in (("preset", r"--preset\s+(\S+)"), ("scale", r"--scale\s+(\S+)")):
        for value in re.findall(flag, command):
            if value.strip("`';,") not in names[kind]:
                problems.append(f"{figure}: {kind} {value.strip(';,')} is gone")
    for value in re.findall(r"accounting=(\w+)", command):
        if value not in names["accounting"]:
            problems.append(f"{figure}: accounting {value} is gone")
    for value in re.findall(r"llome-jax ([a-z][\w-]*)", command):
        if value not in names["command"]:
            problems.append(f"{figure}: llome-jax {value} is gone")
    for script in re.findall(r"python ((?:experiments|benchmarks)/\S+\.py)", command):
        # a dated figure may name a retired script: docs/reference/scripts.md gives the commit
        # that last held it
        retired = state.startswith("dated") and script in _retired_scripts()
        if not (ROOT / script).is_file() and not retired:
            problems.append(f"{figure}: {script} is gone")
    return problems


def test_the_commands_name_what_exists() -> None:
    names = _names()
    registry = _registry()
    assert len(registry) >= 5
    assert [p for row in registry for p in _problems(*row, names)] == []


def test_a_retired_name_fails_the_check() -> None:
    """The check can fail: each kind of retired name in a command is reported."""
    names = _names()
    command = (
        "llome-jax llome --preset gpu-tiny --set accounting=per_call; "
        "python experiments/gone.py --scale huge; llome-jax plot runs/x"
    )
    assert _problems("x.png", command, "old", names) == [
        "x.png: state 'old'",
        "x.png: preset gpu-tiny is gone",
        "x.png: scale huge is gone",
        "x.png: accounting per_call is gone",
        "x.png: llome-jax plot is gone",
        "x.png: experiments/gone.py is gone",
    ]
