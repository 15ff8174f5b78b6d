"""The tree is ``ruff`` clean: ``ruff check`` and ``ruff format --check`` (Python files and the
Python blocks of the Markdown pages) pass with the rules in ``pyproject.toml``."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_passes(command: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def test_ruff_finds_a_problem(tmp_path: pathlib.Path) -> None:
    """The check can fail: an unused import and a badly formatted line are reported."""
    (tmp_path / "bad.py").write_text("import os\nx=1\n")
    for command in (["check"], ["format", "--check"]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *command, "--no-cache", "--isolated", "bad.py"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 1, command
