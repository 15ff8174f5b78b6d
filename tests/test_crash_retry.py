"""The crash-retry plugin (``tests/crash_retry.py``) under a real ``pytest -n 2`` in a subprocess:
a test that segfaults once passes on its rerun, one that segfaults every time fails, and a failed
assertion is not retried."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

TESTS_DIR = pathlib.Path(__file__).resolve().parent

CRASHING_TESTS = """
import faulthandler
import os
import pathlib
import signal

MARK = pathlib.Path(os.environ["CRASH_MARK_DIR"])


def _segfault():
    faulthandler.disable()  # keep the output short
    os.kill(os.getpid(), signal.SIGSEGV)


def test_crashes_once():
    mark = MARK / "crashed_once"
    if not mark.exists():
        mark.write_text("")
        _segfault()


def test_crashes_always():
    _segfault()


def test_fails_an_assertion():
    runs = MARK / "assertion_runs"
    runs.write_text(runs.read_text() + "x" if runs.exists() else "x")
    assert 1 == 2


def test_passes():
    pass
"""


def test_a_crash_is_retried_once_and_an_assertion_never(tmp_path: pathlib.Path) -> None:
    (tmp_path / "test_crashing.py").write_text(CRASHING_TESTS)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(TESTS_DIR),
        "CRASH_MARK_DIR": str(marks),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "-p",
            "crash_retry",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_crashing.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    summary = out.strip().splitlines()[-1]
    counts = dict((word, int(n)) for n, word in re.findall(r"(\d+) (\w+)", summary))
    # crashes_once: one rerun then a pass; crashes_always: one rerun then a failure
    assert counts == {"failed": 2, "passed": 2, "rerun": 2}, summary
    assert re.search(r"FAILED \S*test_crashing.py::test_crashes_always", out), out
    assert re.search(r"FAILED \S*test_crashing.py::test_fails_an_assertion", out), out
    assert "RERUN test_crashing.py::test_crashes_once" in out, out
    assert "RERUN test_crashing.py::test_crashes_always" in out, out
    assert (marks / "assertion_runs").read_text() == "x"  # ran once: not retried
