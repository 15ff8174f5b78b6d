"""Huge pages for malloc: when the process re-executes itself, with which environment, and that the
re-executed command line is the original one."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llome_jax.host.memory import OPT_OUT, TUNABLE, huge_pages_environment

LINUX = {"system": "Linux", "glibc": (2, 36), "thp_mode": "madvise"}


def test_adds_the_tunable_and_keeps_other_tunables():
    env = huge_pages_environment({"PATH": "/bin"}, **LINUX)
    assert env == {"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    other = huge_pages_environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, **LINUX)
    assert other["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"


@pytest.mark.parametrize(
    ("environ", "facts"),
    [
        ({"GLIBC_TUNABLES": TUNABLE}, {}),  # already set: the re-executed process stops here
        ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, {}),  # the user chose otherwise
        ({OPT_OUT: "0"}, {}),
        ({}, {"system": "Darwin", "glibc": None}),
        ({}, {"glibc": None}),  # musl
        ({}, {"glibc": (2, 34)}),  # the tunable appeared in glibc 2.35
        ({}, {"thp_mode": "always"}),  # every large mapping gets huge pages already
        ({}, {"thp_mode": "never"}),
        ({}, {"thp_mode": None}),  # no sysfs entry
    ],
)
def test_nothing_to_do(environ, facts):
    assert huge_pages_environment(environ, **{**LINUX, **facts}) is None


def test_reexecutes_the_same_command_line_once(tmp_path):
    """A child that forces the decision (system facts patched to qualify) re-executes itself:
    the second run sees the tunable and its original arguments, then continues."""
    script = tmp_path / "child.py"
    script.write_text(
        "import os, sys\n"
        "from llome_jax import host_memory\n"
        "host_memory._glibc_version = lambda: (2, 36)\n"
        "host_memory._thp_mode = lambda: 'madvise'\n"
        "host_memory.platform.system = lambda: 'Linux'\n"
        "print('start', flush=True)\n"
        "host_memory.reexec_with_huge_pages()\n"
        "print('tunables', os.environ['GLIBC_TUNABLES'], sys.argv[1:])\n"
    )
    out = subprocess.run(
        [sys.executable, str(script), "--flag", "x y"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)},
    ).stdout.splitlines()
    assert out == ["start", "start", f"tunables {TUNABLE} ['--flag', 'x y']"]
